/* Informer: keeps a read-only, in-memory cache of one kind of Kubernetes object current with
 * list+watch, and calls a handler for every change (client-go's reflector + store + handler).
 * It tracks resourceVersion, asks for watch bookmarks, re-watches when the server ends a watch,
 * relists on 410 Gone, and reconnects with exponential backoff when the API server goes away.
 * Objects in the cache are never mutated: readers get new references to shared immutable values.
 * One thread per informer (its own k8s client); cache reads are thread-safe. */
#ifndef CINFER_COMMON_INFORMER_H
#define CINFER_COMMON_INFORMER_H

#include "common/k8s/client.h"

#include <jansson.h>
#include <stdbool.h>

struct informer;

/* Creates a client for the informer thread; returns 0 or an err.h code (logged by the factory). */
typedef int (*informer_client_fn)(void *ctx, struct k8s_client **out);

/* Called on the informer thread after the cache changed (`obj` borrowed; for DELETED the last known
 * state). After a relist, objects that vanished get DELETED and all others MODIFIED or ADDED. */
typedef void (*informer_event_fn)(void *ctx, enum k8s_watch_type type, const json_t *obj);

struct informer_opts {
    const char *name;               /* for logs: "inferenceservices" (borrowed, static) */
    const struct k8s_resource *res; /* kind to watch (borrowed, static) */
    const char *ns;                 /* namespace, "a,b,c" (one list+watch each; informer_start
                                       fails with ERR_INVAL on an empty, malformed or repeated
                                       name), or NULL for all (copied) */
    const char *label_selector;     /* or NULL (copied) */
    informer_client_fn new_client;
    void *client_ctx;
    informer_event_fn on_event; /* may be NULL */
    void *event_ctx;
    long watch_timeout_s; /* server-side watch timeout; 0 = 300 s */
    long page_size;       /* list page size; 0 = 500 */
};

/* Starts the informer thread. *out is new; informer_free stops and frees it. */
int informer_start(const struct informer_opts *opts, struct informer **out);
/* Asks the thread to stop (it ends at the next event, watch timeout or shutdown) and joins it.
 * Safe to call twice; informer_free calls it. */
void informer_stop(struct informer *inf);
void informer_free(struct informer *inf); /* NULL-safe */

/* True once the first list has filled the cache (reconcile only after all informers synced). */
bool informer_has_synced(struct informer *inf);
/* Waits up to timeout_ms for has_synced; returns it. */
bool informer_wait_synced(struct informer *inf, long timeout_ms);

/* Returns a new reference to the cached object ns/name (ns NULL for cluster-scoped), or NULL. */
json_t *informer_get(struct informer *inf, const char *ns, const char *name);
/* Returns a new array of the cached objects in namespace `ns` (NULL = all) whose labels include
 * every key/value of `match_labels` (borrowed object of strings, or NULL = all). NULL on ERR_NOMEM. */
json_t *informer_list(struct informer *inf, const char *ns, const json_t *match_labels);
/* Number of cached objects. */
size_t informer_len(struct informer *inf);
/* Completed relists (1 after the first sync), for tests. */
unsigned informer_relists(struct informer *inf);

#endif
