/* Watch stream decoding: splitting the chunked body of a `watch=true` GET into lines (one JSON
 * event each, https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes)
 * with a bounded line length, and decoding one line into an event. Pure: no I/O, so tests feed it
 * arbitrary chunkings. The request itself is k8s_client_watch() in client.h. Not thread-safe. */
#ifndef CINFER_COMMON_K8S_WATCH_H
#define CINFER_COMMON_K8S_WATCH_H

#include "common/buf.h"
#include "common/k8s/status.h"

#include <jansson.h>
#include <stddef.h>

#define K8S_WATCH_LINE_MAX_DEF ((size_t)4 << 20) /* default bound for one event line */

enum k8s_watch_type {
    K8S_WATCH_ADDED,
    K8S_WATCH_MODIFIED,
    K8S_WATCH_DELETED,
    K8S_WATCH_BOOKMARK,
    K8S_WATCH_ERROR,
};

struct k8s_watch_event {
    enum k8s_watch_type type;
    json_t *object; /* borrowed for the duration of the callback; json_incref to keep it */
};

/* Reassembles lines from arbitrary chunks. A line never exceeds `max_line` bytes. */
struct k8s_watch_lines {
    struct buf partial; /* bytes of the unfinished line */
    size_t max_line;
};

/* Called once per complete, non-empty line (without its "\n" or "\r\n"; `line` borrowed for the
 * call and NOT NUL-terminated). Returns 0 to continue or non-zero to stop feeding; that value is returned by
 * k8s_watch_lines_feed. */
typedef int (*k8s_watch_line_fn)(void *ctx, const char *line, size_t len);

/* Initialises a splitter (max_line 0 = K8S_WATCH_LINE_MAX_DEF) / releases it. */
void k8s_watch_lines_init(struct k8s_watch_lines *l, size_t max_line);
void k8s_watch_lines_fini(struct k8s_watch_lines *l);

/* Feeds `len` bytes (borrowed). Returns 0, the first non-zero value of `fn`, ERR_TOO_BIG when a
 * line exceeds max_line (the splitter is then unusable: the stream must be restarted), or
 * ERR_NOMEM. */
int k8s_watch_lines_feed(struct k8s_watch_lines *l, const char *data, size_t len,
                         k8s_watch_line_fn fn, void *ctx);

/* At the end of the stream: 0 when no partial line is pending, else ERR_IO (the stream was cut in
 * the middle of an event). */
int k8s_watch_lines_finish(const struct k8s_watch_lines *l);

/* Decodes one event line. On success ev->object is a new reference (caller json_decref()s).
 * Returns ERR_PARSE (not JSON, unknown type, object missing or not an object) with a message in
 * `st->message`. For an ERROR event the object is a metav1.Status: the function still returns 0 and
 * fills `st` from it, so the caller can map st->code (410 -> ERR_GONE) with k8s_status_to_err. */
int k8s_watch_event_parse(const char *line, size_t len, struct k8s_watch_event *ev,
                          struct k8s_status *st);

/* "ADDED", "MODIFIED", ... for logs; never NULL. */
const char *k8s_watch_type_str(enum k8s_watch_type t);

#endif
