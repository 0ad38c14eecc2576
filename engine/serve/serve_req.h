/* One OpenAI request in flight through `cinfer-engine serve`. The HTTP service thread creates it
 * from the parsed and tokenized request (serve_api.c converts everything the other threads need, so
 * no struct api_request leaves that thread); then three threads share it, each part with one owner:
 *   - spec: what the HTTP thread decided; immutable after serve_req_new, any thread reads it.
 *   - the shared part: the reference count, the locked event queue from the inference thread to
 *     the responder, and the cancel / fail state with the hooks that reach the two threads
 *     (serve_req_cancel, serve_req_fail, serve_req_post), atomic.
 *   - loop: the inference thread's state (struct serve_loop_req, defined and owned by
 *     serve_loop.c).
 *   - out: the responder's state and the client's stream (struct serve_respond_req, defined and
 *     owned by serve_respond.c). */
#ifndef CINFER_ENGINE_SERVE_REQ_H
#define CINFER_ENGINE_SERVE_REQ_H

#include "common/buf.h"
#include "engine/serve/serve_error.h"
#include "engine/api/api.h"
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

/* One scheduler event, copied off the inference thread. */
struct serve_event {
    int choice;
    bool has_token;
    bool prompt_token; /* a prompt token's logprob (echo with logprobs), at prompt_pos */
    int prompt_pos;
    int32_t token;
    float logprob;
    int n_top;
    struct sampler_logprob top[SAMPLER_MAX_LOGPROBS];
    char *text; /* owned, may be NULL when len == 0 */
    size_t len;
    enum sched_finish finish;
    int n_prompt, n_cached, n_generated;
    double cum_logprob; /* sched_event's: best_of's ranking */
    int n_sampled;
};

/* One prompt of a request. */
struct serve_req_prompt {
    const int32_t *ids; /* (n_ids >= 1) */
    int n_ids;
    const char *echo; /* spec.echo: the text the answer starts with (the prompt as sent, or its
                         ids decoded); else NULL */
    size_t echo_len;
};

/* What the HTTP thread decided for one request. Sequence ("choice" below) c runs prompt
 * c / best_of as its candidate c % best_of; with best_of == n it is output choice c, else the
 * responder returns each prompt's n best candidates (highest mean token logprob first) as choices
 * prompt * n + rank, OpenAI's numbering. */
struct serve_req_spec {
    char id[40];                            /* "cmpl-..." / "chatcmpl-..." */
    long long created;                      /* Unix seconds */
    double arrival;                         /* monotonic seconds */
    int n_choices;                          /* sequences: n_prompts * best_of, 1..API_MAX_SEQS */
    int n_prompts;                          /* 1..API_MAX_PROMPTS (chat: 1) */
    int best_of;                            /* candidates per prompt, >= n */
    int n;                                  /* choices returned per prompt, 1..API_MAX_N */
    const struct serve_req_prompt *prompts; /* (n_prompts) */
    long n_prompt_tokens;                   /* of all prompts (usage) */
    /* The responder's output format. */
    enum api_kind kind;
    bool stream;
    bool include_usage;
    bool continuous_usage;
    bool logprobs;
    bool echo;
    /* Chat with tools: AUTO, the answer is searched for tool calls; REQUIRED / NAMED, it is the
     * constrained array of calls. A stream sends content and delta.tool_calls as the choice's
     * tool-call scanner makes them certain (api_tool_stream_feed). */
    enum api_tool_choice tools;
    /* Chat with a thinking model (and the split on): the answer's <think> block becomes
     * reasoning_content; reasoning_inside when the prompt already opened it. */
    bool reasoning, reasoning_inside;
    /* The scheduler's request for every sequence, but its prompt (prompt/n_prompt are unused: the
     * loop sets its prompt's) and seed: candidate j samples with sched.sampling.seed + j, so a
     * prompt gets the same candidates batched or alone. In a request, prompts, stops, cache_salt
     * and the logit bias point into storage it owns, the grammar (NULL or compiled by the HTTP
     * thread) is a reference it holds, and ud is NULL (the loop gives every sequence its own). */
    struct sched_request sched;
};

struct serve_loop_req;    /* serve_loop.c */
struct serve_respond_req; /* serve_respond.c */

struct serve_req {
    atomic_int refs;
    struct serve_req_spec spec; /* immutable */

    /* How to reach the two threads: set once each, by serve_loop_submit and serve_respond_adopt. */
    _Atomic(const struct serve_req_hook *) on_cancel; /* wakes the inference loop */
    _Atomic(const struct serve_req_hook *) on_post;   /* queues the request on the responder */

    atomic_bool cancelled; /* client gone or unanswerable: the loop cancels its sequences */
    atomic_int fail;       /* enum serve_fail: why the request gets an error; the first wins */
    atomic_bool in_ready;  /* queued on the responder's ready list (serve_respond.c) */

    pthread_mutex_t mu; /* guards the event queue */
    struct serve_event *events;
    size_t n_events, cap_events;

    char *stops[API_MAX_STOP];        /* spec.sched.stops: into the request's own allocation */
    struct serve_req_prompt *prompts; /* spec.prompts: likewise */

    struct serve_loop_req *loop;   /* inference thread only; NULL until admitted, after done */
    struct serve_respond_req *out; /* responder only (handed over by serve_respond_adopt); NULL
                                      once answered and finished */
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

/* Creates a request from `spec` (borrowed: copied, with its prompts and their echo texts, stop
 * strings, cache salt and logit bias, and a reference to its grammar; spec->sched.prompt and
 * .ud ignored). refs = 1. NULL on ERR_NOMEM or a spec out of range (n_prompts, best_of, n).
 * HTTP thread. */
struct serve_req *serve_req_new(const struct serve_req_spec *spec);
void serve_req_ref(struct serve_req *r);
/* Drops a reference; frees at zero (by then the loop and the responder have freed their parts:
 * asserted). NULL-safe. Any thread. */
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
