/* Error replies of `cinfer-engine serve` in OpenAI's shape ({"error":{"message","type","param",
 * "code"}}): the errors the serving core itself decides (loading, draining, queue full, an engine
 * fault, a failure while generating), an api_error formatted into a body plus its Retry-After
 * header, and that reply sent on a request or on a deferred stream. Validation errors of a request
 * body are engine/api's (api_error_set); this file only formats and sends them. No state; any
 * thread, except serve_error_respond (the HTTP service thread, inside a handler). */
#ifndef CINFER_ENGINE_SERVE_ERROR_H
#define CINFER_ENGINE_SERVE_ERROR_H

#include "common/buf.h"
#include "common/http_server.h"
#include "engine/api/api.h"

#include <stdbool.h>
#include <stddef.h>

/* Why the serving core answers a request with an error instead of a completion. */
enum serve_fail {
    SERVE_FAIL_NONE = 0,
    SERVE_FAIL_LOADING,         /* 503 "loading", Retry-After 5: the model is not loaded yet */
    SERVE_FAIL_QUEUE_FULL,      /* 429, Retry-After 1: max_queue requests already waiting */
    SERVE_FAIL_DRAINING,        /* 503, Retry-After 1: shutting down */
    SERVE_FAIL_FAULTED,         /* 503 engine_faulted, Retry-After 1: refused before it ran */
    SERVE_FAIL_FAULTED_RUNNING, /* 500 engine_faulted: being generated when the engine faulted */
    SERVE_FAIL_INTERNAL,        /* 500: the engine failed while generating this response */
};

/* Fills `e` with the OpenAI error for `why` (not SERVE_FAIL_NONE). A faulted engine
 * (serve_loop_faulted) gets type "server_error", code "engine_faulted" and a message saying the pod
 * will be restarted: 500 for a response cut short, 503 with Retry-After for a request refused
 * before it ran, so that a client retries, through the Service, on another replica. Pure. */
void serve_error_set(struct api_error *e, enum serve_fail why);

/* SERVE_FAIL_QUEUE_FULL as the handler sees it before submitting: the message names the bound
 * (`max_queue` waiting requests). Pure. */
void serve_error_queue_full(struct api_error *e, int max_queue);

/* An OpenAI error ready to send, on a request or on a deferred stream: the JSON body and, when the
 * error asks for one, the Retry-After header (headers/n_headers point into the struct). */
struct serve_error_reply {
    struct buf body;
    char retry_after[16];
    struct http_header retry_after_header;
    const struct http_header *headers; /* NULL or &retry_after_header */
    size_t n_headers;
};

/* Formats `e` (borrowed) into `x`. Returns 0, or ERR_NOMEM / ERR_TOO_BIG (x is still
 * finalisable). */
int serve_error_reply_init(struct serve_error_reply *x, const struct api_error *e);
void serve_error_reply_fini(struct serve_error_reply *x);

/* Answers `req` with `e` (borrowed), or with a bare 500 when the error cannot be formatted. HTTP
 * service thread, inside the handler of `req`. */
void serve_error_respond(struct http_req *req, const struct api_error *e);

/* Answers the deferred stream `s` (taken: released whatever happens) with `e` (borrowed); aborts
 * the connection when the error cannot be formatted. Any thread, on a stream not yet begun. */
void serve_error_respond_stream(struct http_stream *s, const struct api_error *e);

#endif
