/* The inference thread: inbox -> scheduler -> events -> responder, plus the metrics the scheduler's
 * state and events feed. */
#include "engine/serve/serve_loop.h"

#include "common/assert.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "common/metric_names.h"
#include "engine/kv/kv_offload.h"
#include "engine/serve/serve_metrics.h"
#include "engine/serve/serve_req.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SERVE_LOOP_FAULT_AFTER      3    /* consecutive failed steps that mark the engine faulted */
#define SERVE_LOOP_METRICS_PERIOD_S 0.05 /* gauge refresh period while busy */
/* Idle with offload tiers: the offload thread still writes (blocks evicted or reused just before
 * the engine went idle, a shared directory's relisting), so its counters are refreshed this often
 * while nothing else wakes the loop. */
#define SERVE_LOOP_IDLE_REFRESH_MS 1000

struct serve_loop {
    struct serve_loop_cfg cfg;
    struct sched *sched;
    struct serve_metrics *metrics;
    struct serve_req_hook wake_hook; /* every submitted request's on_cancel */

    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct serve_req_list inbox; /* submitted, each holding the loop's reference */
    bool wake;                   /* something to look at (a cancellation) */
    bool stopping;               /* end everything and exit */
    atomic_int inflight;
    atomic_int waiting;          /* published after each step */
    atomic_long prefill_waiting; /* prompt tokens not yet prefilled, published with `waiting` */
    atomic_bool faulted; /* forward steps kept failing: no more steps; written by the loop only */
    atomic_bool unfit;   /* serve_loop_set_faulted: refuse new work, finish what runs; any thread */

    /* Loop thread only. */
    struct serve_req_list live;       /* requests with sequences in the scheduler */
    struct sched_stats last;          /* counters at the previous metrics update */
    struct kv_offload_stats last_off; /* the offload store's, likewise */
};

static enum serve_finish metric_finish(enum sched_finish f)
{
    return f == SCHED_FINISH_STOP     ? SERVE_FINISH_STOP
           : f == SCHED_FINISH_LENGTH ? SERVE_FINISH_LENGTH
                                      : SERVE_FINISH_ABORT;
}

/* The finish reason as OpenAI and the metrics spell it. */
static const char *finish_name(enum sched_finish f)
{
    return f == SCHED_FINISH_STOP     ? METRIC_FINISHED_STOP
           : f == SCHED_FINISH_LENGTH ? METRIC_FINISHED_LENGTH
                                      : METRIC_FINISHED_ABORT;
}

/* A request's state on the inference thread: allocated when the request is admitted, freed when
 * its last sequence ends. The scheduler's cookie of choice c is &ch[c]. */
struct serve_loop_choice {
    struct serve_req *req;
    int index;
    struct sched_seq *seq; /* NULL once finished */
    double last_token_at;  /* for inter-token latency; 0 before the first token */
};

struct serve_loop_req {
    int n_live; /* choices whose sequences have not finished */
    bool first_token_seen;
    double first_token_at;
    long generated, cached;            /* for the access log */
    long spec_proposed, spec_accepted; /* finished choices' speculation, for the access log */
    bool timed_out;
    struct serve_loop_choice ch[]; /* (n_choices) */
};

/* A request's last sequence ended: metrics, one access-log line (never the prompt or the text),
 * the loop's state and reference go. */
static void request_done(struct serve_loop *l, struct serve_req *r, enum sched_finish f)
{
    const struct serve_req_spec *sp = &r->spec;
    struct serve_loop_req *lr = r->loop;
    double e2e = clock_mono_s() - sp->arrival;
    serve_metrics_request_done(l->metrics, metric_finish(f), e2e);
    log_info("request finished", LOG_S("id", sp->id), LOG_I("choices", sp->n_choices),
             LOG_I("prompt_tokens", sp->n_prompt_tokens), LOG_I("cached_tokens", lr->cached),
             LOG_I("completion_tokens", lr->generated), LOG_S("finish_reason", finish_name(f)),
             LOG_B("stream", sp->stream),
             LOG_F("ttft_s", lr->first_token_seen ? lr->first_token_at - sp->arrival : -1.0),
             LOG_F("e2e_s", e2e), LOG_I("spec_proposed", lr->spec_proposed),
             LOG_I("spec_accepted", lr->spec_accepted));
    serve_req_list_remove(&l->live, r);
    free(lr);
    r->loop = NULL;
    atomic_fetch_sub(&l->inflight, 1);
    serve_req_unref(r);
}

/* Hands an event of choice `choice` to the responder; out of memory fails the request. */
static void push_event(struct serve_req *r, int choice, const struct sched_event *ev)
{
    if (serve_req_push(r, choice, ev) != 0) {
        log_error("out of memory queueing output; failing the request", LOG_S("id", r->spec.id));
        serve_req_fail(r, SERVE_FAIL_INTERNAL);
    } else {
        serve_req_post(r);
    }
}

/* Scheduler callback (loop thread). */
static void on_event(void *ctx, const struct sched_event *ev)
{
    struct serve_loop *l = ctx;
    struct serve_loop_choice *c = ev->ud;
    struct serve_req *r = c->req;
    struct serve_loop_req *lr = r->loop;
    double t = clock_mono_s();
    if (ev->prompt_token) { /* echo's prompt logprobs: output, not timing */
        push_event(r, c->index, ev);
        return;
    }
    if (!ev->has_token && ev->finish == SCHED_FINISH_NONE) {
        if (c->index == 0) serve_metrics_observe_queue_time(l->metrics, t - r->spec.arrival);
        return;
    }
    if (c->index == 0 && ev->n_cached > lr->cached) lr->cached = ev->n_cached;
    if (ev->has_token) {
        lr->generated++;
        if (!lr->first_token_seen) {
            lr->first_token_seen = true;
            lr->first_token_at = t;
            serve_metrics_observe_ttft(l->metrics, t - r->spec.arrival);
        } else if (c->last_token_at > 0) {
            serve_metrics_observe_itl(l->metrics, t - c->last_token_at);
        }
        c->last_token_at = t;
    }
    push_event(r, c->index, ev);
    if (ev->finish != SCHED_FINISH_NONE) {
        lr->spec_proposed += ev->spec_proposed;
        lr->spec_accepted += ev->spec_accepted;
        c->seq = NULL;
        if (--lr->n_live == 0) request_done(l, r, ev->finish);
    }
}

/* A request the loop gives up before any of its sequences ran: answered with `why`, and the
 * loop's state and reference go. */
static void reject_request(struct serve_loop *l, struct serve_req *r, enum serve_fail why)
{
    free(r->loop);
    r->loop = NULL;
    serve_req_fail(r, why);
    atomic_fetch_sub(&l->inflight, 1);
    serve_req_unref(r);
}

/* Puts a new request's sequences into the scheduler: the HTTP thread's sched_request, with
 * sequence c's prompt, seed and cookie (serve_req.h: c = prompt * best_of + candidate). */
static void admit_request(struct serve_loop *l, struct serve_req *r)
{
    const struct serve_req_spec *sp = &r->spec;
    int n = sp->n_choices;
    struct serve_loop_req *lr = calloc(1, sizeof(*lr) + (size_t)n * sizeof(lr->ch[0]));
    r->loop = lr;
    if (!lr || serve_req_list_push(&l->live, r) != 0) {
        reject_request(l, r, SERVE_FAIL_INTERNAL);
        return;
    }
    for (int c = 0; c < n; c++) lr->ch[c] = (struct serve_loop_choice){.req = r, .index = c};
    for (int c = 0; c < n; c++) {
        struct sched_request sr = sp->sched;
        const struct serve_req_prompt *pr = &sp->prompts[c / sp->best_of];
        sr.prompt = pr->ids;
        sr.n_prompt = pr->n_ids;
        sr.sampling.seed += (uint64_t)(c % sp->best_of);
        sr.ud = &lr->ch[c];
        int rc = sched_add(l->sched, &sr, &lr->ch[c].seq);
        if (rc) {
            /* Choices already queued keep running; this one ends at once as failed. */
            log_error("cannot queue a request", LOG_S("err", err_str(rc)), LOG_S("id", sp->id));
            lr->ch[c].seq = NULL;
            for (int k = 0; k < c; k++)
                if (lr->ch[k].seq) sched_cancel(l->sched, lr->ch[k].seq, SCHED_FINISH_ABORT);
            if (c == 0) {
                serve_req_list_remove(&l->live, r);
                reject_request(l, r, SERVE_FAIL_INTERNAL);
            } else {
                serve_req_fail(r, SERVE_FAIL_INTERNAL);
            }
            return;
        }
        lr->n_live++;
    }
}

/* Client gone: abort. Past the request timeout: end with what was generated ("length"). */
static void cancel_requests(struct serve_loop *l)
{
    double now = l->cfg.request_timeout_s > 0 ? clock_mono_s() : 0;
    for (size_t i = 0; i < l->live.n; i++) {
        struct serve_req *r = l->live.v[i];
        struct serve_loop_req *lr = r->loop;
        enum sched_finish why = SCHED_FINISH_NONE;
        if (serve_req_cancelled(r))
            why = SCHED_FINISH_ABORT;
        else if (l->cfg.request_timeout_s > 0 && now - r->spec.arrival > l->cfg.request_timeout_s) {
            why = SCHED_FINISH_LENGTH;
            if (!lr->timed_out)
                log_warn("request timeout reached; ending the request", LOG_S("id", r->spec.id),
                         LOG_F("timeout_s", l->cfg.request_timeout_s));
            lr->timed_out = true;
        }
        if (why == SCHED_FINISH_NONE) continue;
        for (int c = 0; c < r->spec.n_choices; c++)
            if (lr->ch[c].seq) sched_cancel(l->sched, lr->ch[c].seq, why);
    }
}

/* SERVE_LOOP_FAULT_AFTER steps in a row failed: the backend is broken and retrying only spins.
 * Stop stepping for good, end every request now so clients are answered at once (engine_faulted),
 * free their KV blocks, and let the probes report it (/health and /live 503: the kubelet restarts
 * the pod). Logged once. */
static void enter_fault(struct serve_loop *l, int rc)
{
    struct sched_stats st;
    sched_stats(l->sched, &st);
    log_error("engine faulted: inference steps keep failing; ending every request, /health and "
              "/live now answer 503 so that the pod is restarted",
              LOG_S("err", err_str(rc)), LOG_I("failed_steps", SERVE_LOOP_FAULT_AFTER),
              LOG_I("running", st.running), LOG_I("waiting", st.waiting));
    atomic_store(&l->faulted, true);
    /* The reason goes before the final events, so the responder answers engine_faulted. */
    for (size_t i = 0; i < l->live.n; i++) serve_req_fail(l->live.v[i], SERVE_FAIL_FAULTED_RUNNING);
    sched_stop_all(l->sched, SCHED_FINISH_ABORT);
    ASSERT(l->live.n == 0 && sched_idle(l->sched));
}

static void update_metrics(struct serve_loop *l)
{
    struct sched_stats st;
    sched_stats(l->sched, &st);
    serve_metrics_set_load(l->metrics, st.running, st.waiting, st.kv_usage);
    serve_metrics_set_prefill_waiting(l->metrics, st.prefill_tokens_waiting);
    serve_metrics_add_prefix(l->metrics, (long)(st.prefix_queries - l->last.prefix_queries),
                             (long)(st.prefix_hits - l->last.prefix_hits));
    serve_metrics_add_tokens(l->metrics, (long)(st.prompt_tokens - l->last.prompt_tokens),
                             (long)(st.generation_tokens - l->last.generation_tokens));
    serve_metrics_add_preemptions(l->metrics, (long)(st.preemptions - l->last.preemptions));
    serve_metrics_add_spec(l->metrics, &st.spec, &l->last.spec);
    if (l->cfg.sched.offload) {
        struct kv_offload_stats os;
        kv_offload_stats(l->cfg.sched.offload, &os);
        const struct kv_offload_stats *p = &l->last_off;
        struct serve_metrics_offload mo = {
            .hit_tokens = {(long)(st.prefix_hits_host - l->last.prefix_hits_host),
                           (long)(st.prefix_hits_disk - l->last.prefix_hits_disk)},
            .corrupt = (long)(os.corrupt - p->corrupt),
            .write_errors = (long)(os.write_errors - p->write_errors),
            .dropped = (long)(os.dropped - p->dropped),
            .prefetch_waits = (long)(st.prefetch_waits - l->last.prefetch_waits),
            .prefetch_wait_s = st.prefetch_wait_s - l->last.prefetch_wait_s,
            .prefetch_unused = (long)(os.prefetch_unused - p->prefetch_unused),
        };
        for (int t = 0; t < KV_OFFLOAD_N_TIERS; t++) {
            mo.stored[t] = (long)(os.stored[t] - p->stored[t]);
            mo.evicted[t] = (long)(os.evicted[t] - p->evicted[t]);
            mo.bytes[t] = (double)os.bytes[t];
            mo.blocks[t] = (double)os.blocks[t];
        }
        serve_metrics_update_offload(l->metrics, &mo);
        l->last_off = os;
    }
    l->last = st;
    atomic_store(&l->waiting, st.waiting);
    atomic_store(&l->prefill_waiting, st.prefill_tokens_waiting);
}

static void *loop_main(void *arg)
{
    struct serve_loop *l = arg;
    int failures = 0; /* consecutive failed steps */
    double last_update = 0;
    for (;;) {
        /* Faulted, the loop only wakes to refuse what raced into the inbox, and to stop. */
        pthread_mutex_lock(&l->mu);
        bool refresh = false;
        struct timespec dl;
        if (l->cfg.sched.offload) {
            clock_gettime(CLOCK_MONOTONIC, &dl);
            dl.tv_sec += SERVE_LOOP_IDLE_REFRESH_MS / 1000;
        }
        while (!l->stopping && !l->inbox.n && !l->wake &&
               (atomic_load(&l->faulted) || sched_idle(l->sched))) {
            if (!l->cfg.sched.offload) {
                pthread_cond_wait(&l->cv, &l->mu);
            } else if (pthread_cond_timedwait(&l->cv, &l->mu, &dl) != 0) {
                refresh = true;
                break;
            }
        }
        struct serve_req_list in = l->inbox;
        l->inbox = (struct serve_req_list){0};
        l->wake = false;
        bool stopping = l->stopping;
        pthread_mutex_unlock(&l->mu);

        bool faulted = atomic_load(&l->faulted);
        for (size_t i = 0; i < in.n; i++) {
            if (faulted) /* arrived after the fault: refused without running */
                reject_request(l, in.v[i], SERVE_FAIL_FAULTED);
            else
                admit_request(l, in.v[i]);
        }
        serve_req_list_fini(&in);
        if (stopping) break;
        if (faulted) continue;
        if (refresh && sched_idle(l->sched)) {
            update_metrics(l);
            continue;
        }
        cancel_requests(l);
        /* Fault injection for tests (common/failpoint.h): a hit is a failed step. Only steps with
         * work count, so that @N is the Nth step that runs a forward pass. */
        int rc = sched_idle(l->sched) ? 0 : failpoint_check("serve.step");
        if (!rc) rc = sched_step(l->sched);
        if (rc) {
            log_error("inference step failed", LOG_S("err", err_str(rc)));
            if (++failures == SERVE_LOOP_FAULT_AFTER) enter_fault(l, rc);
        } else {
            failures = 0;
        }
        /* The gauges need a scan of the prefix cache: refresh them every few steps, and always
         * when the engine goes idle so that scrapes then see exact zeros. */
        double t = clock_mono_s();
        if (t - last_update >= SERVE_LOOP_METRICS_PERIOD_S || sched_idle(l->sched)) {
            update_metrics(l);
            last_update = t;
        }
    }
    /* Drain timeout or shutdown: end what is left; clients get what was generated so far. */
    if (!sched_idle(l->sched)) {
        log_warn("ending requests still in flight at shutdown",
                 LOG_I("requests", (long long)l->live.n));
        sched_stop_all(l->sched, SCHED_FINISH_LENGTH);
    }
    update_metrics(l);
    return NULL;
}

static void loop_wake_hook(void *ctx, struct serve_req *r)
{
    (void)r;
    serve_loop_wake(ctx);
}

int serve_loop_start(const struct serve_loop_cfg *cfg, struct model *m, struct kv_cache *kv,
                     const struct tokenizer *tok, struct serve_metrics *metrics,
                     struct serve_loop **out)
{
    if (!metrics || cfg->max_queue < 1) return ERR_INVAL;
    /* Reads CINFER_FAILPOINTS now, so that an armed or malformed failpoint is logged at start-up
     * rather than at the first request. */
    (void)failpoint_hits("serve.step");
    struct serve_loop *l = calloc(1, sizeof(*l));
    if (!l) return ERR_NOMEM;
    l->cfg = *cfg;
    l->metrics = metrics;
    l->wake_hook = (struct serve_req_hook){loop_wake_hook, l};
    atomic_init(&l->inflight, 0);
    atomic_init(&l->waiting, 0);
    atomic_init(&l->prefill_waiting, 0);
    atomic_init(&l->faulted, false);
    atomic_init(&l->unfit, false);
    pthread_mutex_init(&l->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the idle refresh's deadline */
    pthread_cond_init(&l->cv, &ca);
    pthread_condattr_destroy(&ca);
    int rc = sched_new(&cfg->sched, m, kv, tok, on_event, l, &l->sched);
    if (rc) goto fail;
    sched_set_block_observer(l->sched, cfg->block_observer, cfg->block_observer_ctx);
    if (pthread_create(&l->thread, NULL, loop_main, l) != 0) {
        rc = ERR_IO;
        goto fail;
    }
    l->started = true;
    *out = l;
    return 0;
fail:
    serve_loop_free(l);
    return rc;
}

int serve_loop_submit(struct serve_loop *l, struct serve_req *r)
{
    pthread_mutex_lock(&l->mu);
    int rc = 0;
    if (l->stopping || !l->started || serve_loop_faulted(l))
        rc = ERR_BAD_STATE;
    else if (atomic_load(&l->waiting) + (int)l->inbox.n >= l->cfg.max_queue)
        rc = ERR_AGAIN;
    else
        rc = serve_req_list_push(&l->inbox, r);
    if (!rc) {
        serve_req_set_on_cancel(r, &l->wake_hook);
        serve_req_ref(r);
        atomic_fetch_add(&l->inflight, 1);
        pthread_cond_signal(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return rc;
}

void serve_loop_wake(struct serve_loop *l)
{
    pthread_mutex_lock(&l->mu);
    l->wake = true;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

int serve_loop_inflight(const struct serve_loop *l)
{
    return atomic_load(&l->inflight);
}

bool serve_loop_faulted(const struct serve_loop *l)
{
    return atomic_load(&l->faulted) || atomic_load(&l->unfit);
}

void serve_loop_set_faulted(struct serve_loop *l)
{
    atomic_store(&l->unfit, true);
}

int serve_loop_waiting(const struct serve_loop *l)
{
    return atomic_load(&l->waiting);
}

long serve_loop_prefill_waiting(const struct serve_loop *l)
{
    return atomic_load(&l->prefill_waiting);
}

void serve_loop_stop(struct serve_loop *l)
{
    if (!l->started) return;
    pthread_mutex_lock(&l->mu);
    l->stopping = true;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    l->started = false;
}

void serve_loop_free(struct serve_loop *l)
{
    if (!l) return;
    serve_loop_stop(l);
    for (size_t i = 0; i < l->inbox.n; i++) {
        struct serve_req *r = l->inbox.v[i];
        serve_req_fail(r, SERVE_FAIL_DRAINING);
        serve_req_unref(r);
    }
    sched_free(l->sched);
    serve_req_list_fini(&l->inbox);
    serve_req_list_fini(&l->live);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    free(l);
}
