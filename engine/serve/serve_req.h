/* One OpenAI request in flight through `cinfer-engine serve`, shared by three threads: the HTTP
 * service thread creates it (parsed, tokenized), the inference thread (engine/serve/serve_loop.c) appends
 * the scheduler's events to it, and the responder thread (engine/serve/serve_respond.c) drains them into
 * JSON on the client's stream. Reference counted; the event queue and flags are locked or atomic,
 * everything else is immutable after creation. */
#ifndef CINFER_ENGINE_SERVE_REQ_H
#define CINFER_ENGINE_SERVE_REQ_H

#include "common/buf.h"
#include "engine/serve/serve_error.h"
#include "engine/api/api.h"
#include "engine/sched/sampler.h"
#include "engine/sched/scheduler.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct http_stream;
struct serve_req;

/* A thread's entry point on a request: fn(ctx, r). Lives in the object that registers it (the
 * inference loop, the responder), which outlives every request it is registered on. */
struct serve_req_hook {
    void (*fn)(void *ctx, struct serve_req *r);
    void *ctx;
};

/* A non-streaming choice being assembled by the responder. Logprob alternatives are stored flat in
 * `top`; lp[i].top is set from top_at[i] only when the response is rendered (the array moves). */
struct serve_choice_acc {
    struct buf text;
    struct api_token_logprob *lp;
    size_t *top_at;
    size_t n_lp, cap_lp;
    struct api_top_logprob *top;
    size_t n_top, cap_top;
    enum api_finish finish;
};

/* One scheduler event, copied off the inference thread. */
struct serve_event {
    int choice;
    bool has_token;
    int32_t token;
    float logprob;
    int n_top;
    struct sampler_logprob top[SAMPLER_MAX_LOGPROBS];
    char *text; /* owned, may be NULL when len == 0 */
    size_t len;
    enum sched_finish finish;
    int n_prompt, n_cached, n_generated;
};

struct serve_req {
    atomic_int refs;
    struct api_request *api; /* owned, immutable */
    int32_t *prompt;         /* owned token ids */
    int n_prompt;
    int n_choices;
    uint64_t seed; /* choice i samples with seed + i */
    char id[40];   /* "cmpl-..." */
    long long created;
    double arrival;             /* monotonic seconds */
    struct http_stream *stream; /* owned by the responder once submitted */

    /* How to reach the two threads: set once each, by serve_loop_submit and serve_respond_adopt. */
    _Atomic(const struct serve_req_hook *) on_cancel; /* wakes the inference loop */
    _Atomic(const struct serve_req_hook *) on_post;   /* queues the request on the responder */

    atomic_bool cancelled; /* client gone or unanswerable: the loop cancels its sequences */
    atomic_int fail;       /* enum serve_fail: why the request gets an error; the first wins */
    atomic_bool in_ready;  /* queued on the responder's ready list */

    pthread_mutex_t mu; /* guards the event queue */
    struct serve_event *events;
    size_t n_events, cap_events;

    /* Inference thread only. */
    struct serve_seq_ud *uds; /* per choice: the scheduler's cookie */
    struct sched_seq **seqs;  /* per choice; NULL once finished */
    int n_live;
    double *last_token_at; /* per choice, for inter-token latency */
    bool first_token_seen;
    double first_token_at;
    long loop_generated, loop_cached; /* for the access log */
    bool timed_out;

    /* Responder thread only (adopt_pending is handed over under the responder's lock). */
    bool adopt_pending;
    bool resp_done;
    int n_finished;
    struct serve_choice_acc *acc; /* per choice accumulation (non-streaming) */
    bool began;                   /* stream headers sent */
    bool *role_sent;              /* chat streaming: opening delta sent per choice */
    long usage_completion, usage_cached;
    size_t *text_chars; /* completions streaming: characters sent per choice */
    struct buf pending; /* formatted bytes the client's stream had no room for yet */
};

/* A growable array of request pointers (it holds no references itself), owned by whoever guards
 * it. Zero-initialised is empty. */
struct serve_req_list {
    struct serve_req **v;
    size_t n, cap;
};

/* Appends r. 0 or ERR_NOMEM (nothing changed). */
int serve_req_list_push(struct serve_req_list *l, struct serve_req *r);
/* Removes one occurrence of r, if any; the order of the others may change. */
void serve_req_list_remove(struct serve_req_list *l, const struct serve_req *r);
/* True when r is in the list. */
bool serve_req_list_has(const struct serve_req_list *l, const struct serve_req *r);
/* Frees the array (not the requests) and empties the list. */
void serve_req_list_fini(struct serve_req_list *l);

/* The scheduler cookie of one choice. */
struct serve_seq_ud {
    struct serve_req *req;
    int choice;
};

/* Creates a request taking `api` (owned) and `prompt` (owned, n ids). refs = 1. NULL on ERR_NOMEM
 * (api and prompt are freed then). */
struct serve_req *serve_req_new(struct api_request *api, int32_t *prompt, int n_prompt);
void serve_req_ref(struct serve_req *r);
/* Drops a reference; frees at zero. NULL-safe. */
void serve_req_unref(struct serve_req *r);

/* Registers the thread hooks (borrowed: each must outlive r). Once each, before the request is
 * visible to that thread: serve_loop_submit and serve_respond_adopt. Any thread. */
void serve_req_set_on_cancel(struct serve_req *r, const struct serve_req_hook *h);
void serve_req_set_on_post(struct serve_req *r, const struct serve_req_hook *h);

/* Hands r to the responder (its on_post hook; nothing before serve_respond_adopt): new events or a
 * failure to answer. Any thread, never blocks for long. */
void serve_req_post(struct serve_req *r);

/* Fails r for `why` (not SERVE_FAIL_NONE; the first reason given wins) and posts it: the responder
 * answers with serve_error_set's error (an HTTP error while nothing was sent, else an SSE error
 * event ending the stream) and cancels it. The one way any thread fails a request. */
void serve_req_fail(struct serve_req *r, enum serve_fail why);
/* The reason r failed, SERVE_FAIL_NONE while it has not. Any thread. */
enum serve_fail serve_req_failure(const struct serve_req *r);

/* Stops r: marks it cancelled and, the first time, wakes the inference loop (its on_cancel hook;
 * a request not yet submitted is seen as cancelled when it is admitted), which ends its sequences
 * at the next step. The one way to cancel, for a client gone (HTTP thread) or one the responder
 * gave up on. Any thread, never blocks for long. */
void serve_req_cancel(struct serve_req *r);
bool serve_req_cancelled(const struct serve_req *r);

/* Appends a copy of `ev` (its text copied). Returns 0 or ERR_NOMEM. Any thread. */
int serve_req_push(struct serve_req *r, int choice, const struct sched_event *ev);
/* Moves the queued events out: *out (free with serve_req_events_free) holding *n. Any thread. */
void serve_req_take(struct serve_req *r, struct serve_event **out, size_t *n);
void serve_req_events_free(struct serve_event *ev, size_t n);

#endif
