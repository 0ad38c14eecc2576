/* The responder thread of `cinfer-engine serve`: turns the events of each request into OpenAI JSON
 * (whole responses, or Server-Sent Event chunks flushed per token) on the client's stream. It keeps
 * JSON and socket back-pressure off the inference thread: a client that reads slowly only delays
 * its own request, and one whose unsent output grows past a bound is cancelled. */
#ifndef CINFER_ENGINE_SERVE_RESPOND_H
#define CINFER_ENGINE_SERVE_RESPOND_H

struct http_stream;
struct tokenizer;
struct serve_req;
struct serve_respond;

/* Starts the thread. `tok` (may be NULL) and `model_name` are borrowed for its life. When it finds
 * a client gone it cancels the request (serve_req_cancel). ERR_NOMEM / ERR_IO. */
int serve_respond_start(const struct tokenizer *tok, const char *model_name,
                        struct serve_respond **out);

/* Hands a new request to the responder, which takes over the request's initial reference and the
 * client's `stream` (the deferred answer), registers itself as r's on_post hook (serve_req_post and
 * serve_req_fail reach it from then on), and answers when all its choices finish or it fails.
 * Before serve_loop_submit. Returns 0, or ERR_NOMEM with nothing taken (the caller still owns the
 * reference and the stream). HTTP thread. */
int serve_respond_adopt(struct serve_respond *p, struct serve_req *r, struct http_stream *stream);

/* Requests adopted and not yet answered. Any thread. */
int serve_respond_pending(const struct serve_respond *p);

/* Processes what is posted until every adopted request is answered or `grace_ms` passes, then
 * aborts the remaining streams and joins the thread. Main thread. */
void serve_respond_stop(struct serve_respond *p, int grace_ms);
void serve_respond_free(struct serve_respond *p); /* NULL-safe; stops with no grace */

#endif
