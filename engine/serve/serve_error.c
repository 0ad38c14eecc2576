/* The serving core's error replies (see serve_error.h): one place for their messages, status codes
 * and Retry-After values, and for sending them. */
#include "engine/serve/serve_error.h"

#include "common/assert.h"

#define SERVE_ERROR_RETRY_LOADING_S  5
#define SERVE_ERROR_RETRY_DRAINING_S 1
#define SERVE_ERROR_RETRY_QUEUE_S    1
#define SERVE_ERROR_RETRY_FAULTED_S  1 /* another replica can answer at once */
#define SERVE_ERROR_BODY_MAX         (1u << 16)

void serve_error_set(struct api_error *e, enum serve_fail why)
{
    switch (why) {
    case SERVE_FAIL_LOADING:
        api_error_set(e, API_ERR_OVERLOADED, NULL, "the model is still loading; retry shortly");
        e->retry_after_s = SERVE_ERROR_RETRY_LOADING_S;
        return;
    case SERVE_FAIL_QUEUE_FULL:
        api_error_set(e, API_ERR_RATE_LIMIT, NULL, "too many requests are waiting; retry later");
        e->retry_after_s = SERVE_ERROR_RETRY_QUEUE_S;
        return;
    case SERVE_FAIL_DRAINING:
        api_error_set(e, API_ERR_OVERLOADED, NULL,
                      "the server is shutting down; retry on another replica");
        e->retry_after_s = SERVE_ERROR_RETRY_DRAINING_S;
        return;
    case SERVE_FAIL_FAULTED:
        api_error_set(e, API_ERR_OVERLOADED, NULL,
                      "the engine is faulted (inference steps keep failing); the pod will be "
                      "restarted: retry on another replica");
        e->retry_after_s = SERVE_ERROR_RETRY_FAULTED_S;
        e->code = "engine_faulted";
        return;
    case SERVE_FAIL_FAULTED_RUNNING:
        api_error_set(e, API_ERR_INTERNAL, NULL,
                      "the engine is faulted (inference steps keep failing) and stopped this "
                      "response; the pod will be restarted: retry the request");
        e->code = "engine_faulted";
        return;
    case SERVE_FAIL_INTERNAL:
    case SERVE_FAIL_NONE: break;
    }
    ASSERT(why == SERVE_FAIL_INTERNAL);
    api_error_set(e, API_ERR_INTERNAL, NULL, "the engine failed while generating this response");
}

void serve_error_queue_full(struct api_error *e, int max_queue)
{
    api_error_set(e, API_ERR_RATE_LIMIT, NULL, "too many requests are waiting (%d); retry later",
                  max_queue);
    e->retry_after_s = SERVE_ERROR_RETRY_QUEUE_S;
}

int serve_error_reply_init(struct serve_error_reply *x, const struct api_error *e)
{
    buf_init(&x->body, SERVE_ERROR_BODY_MAX);
    x->retry_after_header = (struct http_header){"Retry-After", x->retry_after};
    bool has_ra = api_error_retry_after(e, x->retry_after, sizeof(x->retry_after)) == 1;
    x->headers = has_ra ? &x->retry_after_header : NULL;
    x->n_headers = has_ra ? 1 : 0;
    return api_error_body(e, &x->body);
}

void serve_error_reply_fini(struct serve_error_reply *x)
{
    buf_fini(&x->body);
}

void serve_error_respond(struct http_req *req, const struct api_error *e)
{
    struct serve_error_reply x;
    if (serve_error_reply_init(&x, e) == 0)
        http_respond(req, e->status, "application/json", x.body.data, x.body.len, x.headers,
                     x.n_headers);
    else
        http_respond_error(req, 500, "server_error", "cannot format the error");
    serve_error_reply_fini(&x);
}

void serve_error_respond_stream(struct http_stream *s, const struct api_error *e)
{
    struct serve_error_reply x;
    if (serve_error_reply_init(&x, e) == 0)
        (void)http_stream_respond(s, e->status, "application/json", x.body.data, x.body.len,
                                  x.headers, x.n_headers);
    else
        http_stream_abort(s);
    serve_error_reply_fini(&x);
}
