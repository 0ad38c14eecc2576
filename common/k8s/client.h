/* Kubernetes API client: transport only (no caching, no retries, no reconcile logic). Typed by a
 * resource descriptor (resource.h), speaking JSON through jansson: get, list, create, update (PUT),
 * patch (merge, JSON, strategic-merge, server-side apply), delete, the status and scale
 * subresources (set ref->subresource), and watch. Works for core and grouped APIs, namespaced and
 * cluster-scoped kinds (CRDs included).
 *
 *   struct k8s_ref ref = {&k8s_resource_deployments, "ns", "web", "scale"};
 *   json_t *scale;
 *   if (k8s_client_get(c, &ref, &scale) == ERR_NOT_FOUND) ...
 *
 * Errors: API answers are mapped by k8s_status_to_err (404 ERR_NOT_FOUND, 409 ERR_CONFLICT or
 * ERR_EXISTS, 410 ERR_GONE, 401/403 ERR_AUTH, 422 ERR_INVAL, ...); the server's Status (its message
 * names the field that failed validation) stays available from k8s_client_status() and a one-line
 * summary from k8s_client_errmsg() until the next request.
 *
 * Threads: a client is not thread-safe (it owns one libcurl handle); use one per thread. JSON
 * arguments are borrowed; JSON results (*out) are new references the caller json_decref()s. */
#ifndef CINFER_COMMON_K8S_CLIENT_H
#define CINFER_COMMON_K8S_CLIENT_H

#include "common/k8s/config.h"
#include "common/k8s/resource.h"
#include "common/k8s/status.h"
#include "common/k8s/watch.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* How request bodies are encoded: compact, 15 significant digits (DBL_DIG), so every decimal a
 * person or a policy writes reads back the same and 0.99 is sent as 0.99, not jansson's default
 * 0.98999999999999999. */
#define K8S_JSON_DUMP_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(15))

struct k8s_client_opts {
    long timeout_ms;           /* per request; 0 = 30 s */
    long connect_timeout_ms;   /* 0 = 10 s */
    size_t max_response;       /* largest accepted body; 0 = 64 MiB */
    const char *user_agent;    /* borrowed during k8s_client_new; NULL = "cinfer" */
    const char *field_manager; /* default fieldManager for writes (borrowed during new), or NULL */
};

struct k8s_list_opts {
    const char *label_selector; /* "app=web,tier!=cache" (escaped for you) */
    const char *field_selector; /* "metadata.name=web" */
    long limit;                 /* page size; 0 = server default (all) */
    const char *continue_token; /* metadata.continue of the previous page */
    const char *resource_version;
    const char *resource_version_match; /* "Exact" or "NotOlderThan", with resource_version */
};

enum k8s_patch_type {
    K8S_PATCH_MERGE,     /* application/merge-patch+json (RFC 7386) */
    K8S_PATCH_JSON,      /* application/json-patch+json (RFC 6902): the patch is an array */
    K8S_PATCH_STRATEGIC, /* application/strategic-merge-patch+json (built-in kinds only) */
    K8S_PATCH_APPLY, /* server-side apply: the patch is the full intent; needs a field manager */
};

struct k8s_patch_opts {
    const char *field_manager; /* overrides the client's default; required for APPLY */
    bool force;                /* APPLY only: take ownership of conflicting fields */
};

struct k8s_delete_opts {
    const char *propagation_policy; /* "Foreground", "Background", "Orphan", or NULL */
    bool set_grace_period;          /* false (zero-initialised) = the kind's default */
    long grace_period_seconds;      /* with set_grace_period: 0 deletes immediately */
    const char *precondition_uid;   /* delete only this incarnation, or NULL */
    const char *precondition_resource_version;
};

struct k8s_watch_opts {
    const char *label_selector;
    const char *field_selector;
    const char *resource_version; /* start after this version ("" or NULL = current state first) */
    bool allow_bookmarks;         /* ask for BOOKMARK events */
    long timeout_seconds;         /* server ends the watch after this long; 0 = server default */
    size_t max_line;              /* bound on one event line; 0 = K8S_WATCH_LINE_MAX_DEF */
};

/* Watch callback: `ev` and its object are borrowed for the call. Return 0 to continue,
 * K8S_WATCH_STOP to end the watch (k8s_client_watch returns 0), or a negative err.h code to abort
 * (returned as is). ERROR events never reach the callback: they end the watch with an error. */
#define K8S_WATCH_STOP 1
typedef int (*k8s_watch_fn)(void *ctx, const struct k8s_watch_event *ev);

struct k8s_client;

/* Creates a client for `cfg`, which it takes (freed by k8s_client_free, or here on failure).
 * `opts` borrowed, may be NULL. Returns 0, ERR_INVAL, ERR_NOMEM or ERR_INTERNAL with `err`. */
int k8s_client_new(struct k8s_config *cfg, const struct k8s_client_opts *opts,
                   struct k8s_client **out, char *err, size_t errlen);
void k8s_client_free(struct k8s_client *c); /* NULL-safe */
/* Lets this client's requests run during a process shutdown instead of being aborted (see
 * http_client_ignore_shutdown): for the requests made on the way out. */
void k8s_client_ignore_shutdown(struct k8s_client *c, bool ignore);

/* The config in use (borrowed; e.g. ->ns for the default namespace). */
const struct k8s_config *k8s_client_config(const struct k8s_client *c);

/* GET one object (ref->name required). */
int k8s_client_get(struct k8s_client *c, const struct k8s_ref *ref, json_t **out);
/* GET a collection (ref->name NULL; ref->ns NULL lists all namespaces). `opts` may be NULL. The
 * result is the List object: items[], metadata.resourceVersion, metadata.continue. */
int k8s_client_list(struct k8s_client *c, const struct k8s_ref *ref,
                    const struct k8s_list_opts *opts, json_t **out);
/* POST `obj` to the collection (ref->name NULL). `out` may be NULL when the result is not needed. */
int k8s_client_create(struct k8s_client *c, const struct k8s_ref *ref, const json_t *obj,
                      json_t **out);
/* PUT `obj` (ref->name required; "status"/"scale" subresource allowed). A stale
 * metadata.resourceVersion gives ERR_CONFLICT. `out` may be NULL. */
int k8s_client_update(struct k8s_client *c, const struct k8s_ref *ref, const json_t *obj,
                      json_t **out);
/* PATCH (ref->name required). `opts` may be NULL; `out` may be NULL. */
int k8s_client_patch(struct k8s_client *c, const struct k8s_ref *ref, enum k8s_patch_type type,
                     const json_t *patch, const struct k8s_patch_opts *opts, json_t **out);
/* DELETE (ref->name required). `opts` and `out` may be NULL; *out is the deleted object or a
 * Status, whichever the server returns. */
int k8s_client_delete(struct k8s_client *c, const struct k8s_ref *ref,
                      const struct k8s_delete_opts *opts, json_t **out);

/* Watches a collection (ref->name NULL; use a field selector metadata.name=X for one object) and
 * calls `fn` per event until the server ends the watch (returns 0: re-watch from the last seen
 * resourceVersion), `fn` stops it, an ERROR event arrives (410 -> ERR_GONE: relist), a line exceeds
 * opts->max_line (ERR_TOO_BIG), the stream breaks mid-event (ERR_IO) or shutdown is requested
 * (ERR_CANCELLED). Blocks the calling thread. */
int k8s_client_watch(struct k8s_client *c, const struct k8s_ref *ref,
                     const struct k8s_watch_opts *opts, k8s_watch_fn fn, void *ctx);

/* "METHOD /path: 409 Conflict: <server message>" for the last failed request, "" after success.
 * Borrowed until the next request. Never contains credentials. */
const char *k8s_client_errmsg(const struct k8s_client *c);
/* The last API error answer (code 0 when the last failure was not an API answer, e.g. a
 * connection error). Borrowed until the next request. */
const struct k8s_status *k8s_client_status(const struct k8s_client *c);

#endif
