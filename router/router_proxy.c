/* The proxy thread (see router_proxy.h): the inbox from the HTTP and discovery threads, the models
 * and their replica sets, replica choice, holding while a model has no eligible replica, and the end
 * of every request. Transfers are in router_upstream.c (requests) and router_replica.c (event
 * streams, health probes, tokenizer documents). */
#include "router/router_proxy_priv.h"

#include "common/clock.h"
#include "common/err.h"
#include "common/http_server.h"
#include "common/log.h"
#include "common/prom/prom.h"
#include "engine/api/api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define RP_POLL_MAX_MS    250 /* the loop looks at its timers at least this often */
#define RP_POLL_PAUSED_MS 2   /* while a client queue is full: retry the paused transfers */
#define RP_SWEEP_S        1.0 /* replica gauges, removed replicas */
#define RP_ERROR_BODY_MAX (1u << 16)
#define RP_RETRY_AFTER_S  1

double rp_now(void)
{
    return clock_mono_s();
}

uint64_t rp_random(struct router_proxy *p)
{
    /* xorshift64*: the policy's tie breaks and the random baseline; not security relevant. */
    p->rng ^= p->rng >> 12;
    p->rng ^= p->rng << 25;
    p->rng ^= p->rng >> 27;
    return p->rng * UINT64_C(2685821657736338717);
}

/* ---- catalog (HTTP thread reads) ------------------------------------------------------------- */

static struct rp_catalog_entry *cat_find(struct router_proxy *p, const char *name)
{
    for (size_t i = 0; i < p->n_cat; i++)
        if (strcmp(p->cat[i].name, name) == 0) return &p->cat[i];
    return NULL;
}

static int cat_add(struct router_proxy *p, const char *name)
{
    pthread_mutex_lock(&p->cat_mu);
    int rc = 0;
    if (!cat_find(p, name)) {
        if (p->n_cat == p->cap_cat) {
            size_t cap = p->cap_cat ? 2 * p->cap_cat : 8;
            struct rp_catalog_entry *v = realloc(p->cat, cap * sizeof(*v));
            if (!v) {
                rc = ERR_NOMEM;
                goto out;
            }
            p->cat = v;
            p->cap_cat = cap;
        }
        struct rp_catalog_entry *e = &p->cat[p->n_cat++];
        memset(e, 0, sizeof(*e));
        snprintf(e->name, sizeof(e->name), "%s", name);
    }
out:
    pthread_mutex_unlock(&p->cat_mu);
    return rc;
}

static void cat_remove(struct router_proxy *p, const char *name)
{
    pthread_mutex_lock(&p->cat_mu);
    struct rp_catalog_entry *e = cat_find(p, name);
    if (e) {
        router_model_info_unref(e->info);
        *e = p->cat[--p->n_cat];
    }
    pthread_mutex_unlock(&p->cat_mu);
}

void rp_catalog_update(struct router_proxy *p, struct rp_model *m)
{
    double now = rp_now();
    bool serving = false;
    for (size_t i = 0; i < m->n_reps && !serving; i++)
        serving = rp_replica_eligible(p, m->reps[i], now);
    pthread_mutex_lock(&p->cat_mu);
    struct rp_catalog_entry *e = cat_find(p, m->name);
    if (e) {
        if (e->info != m->info) {
            router_model_info_unref(e->info);
            e->info = router_model_info_ref(m->info);
        }
        e->serving = serving;
    }
    pthread_mutex_unlock(&p->cat_mu);
}

int router_proxy_model_info(struct router_proxy *p, const char *name,
                            struct router_model_info **info)
{
    pthread_mutex_lock(&p->cat_mu);
    struct rp_catalog_entry *e = cat_find(p, name);
    if (e) *info = router_model_info_ref(e->info);
    pthread_mutex_unlock(&p->cat_mu);
    return e ? 0 : ERR_NOT_FOUND;
}

bool router_proxy_only_model(struct router_proxy *p, char *out, size_t outlen)
{
    pthread_mutex_lock(&p->cat_mu);
    bool one = p->n_cat == 1;
    if (one) snprintf(out, outlen, "%s", p->cat[0].name);
    pthread_mutex_unlock(&p->cat_mu);
    return one;
}

json_t *router_proxy_models_json(struct router_proxy *p)
{
    json_t *data = json_array();
    pthread_mutex_lock(&p->cat_mu);
    for (size_t i = 0; data && i < p->n_cat; i++) {
        json_t *m = json_pack("{s:s,s:s,s:i,s:s}", "id", p->cat[i].name, "object", "model",
                              "created", 0, "owned_by", "cinfer");
        if (!m || json_array_append_new(data, m) != 0) {
            json_decref(data);
            data = NULL;
        }
    }
    pthread_mutex_unlock(&p->cat_mu);
    return data ? json_pack("{s:s,s:o}", "object", "list", "data", data) : NULL;
}

void router_proxy_counts(struct router_proxy *p, int *models, int *serving)
{
    pthread_mutex_lock(&p->cat_mu);
    *models = (int)p->n_cat;
    *serving = 0;
    for (size_t i = 0; i < p->n_cat; i++) *serving += p->cat[i].serving;
    pthread_mutex_unlock(&p->cat_mu);
}

/* ---- inbox (any thread) ---------------------------------------------------------------------- */

static int inbox_model(struct router_proxy *p, const char *name, const struct router_endpoint *eps,
                       size_t n, bool remove)
{
    if (!name || !*name || strlen(name) >= ROUTER_MODEL_MAX) return ERR_INVAL;
    struct router_endpoint *copy = n ? malloc(n * sizeof(*copy)) : NULL;
    if (n && !copy) return ERR_NOMEM;
    if (n) memcpy(copy, eps, n * sizeof(*copy));
    int rc = remove ? 0 : cat_add(p, name);
    if (rc) {
        free(copy);
        return rc;
    }
    if (remove) cat_remove(p, name);
    pthread_mutex_lock(&p->in_mu);
    if (p->n_in_models == p->cap_in_models) {
        size_t cap = p->cap_in_models ? 2 * p->cap_in_models : 8;
        struct rp_inbox_model *v = realloc(p->in_models, cap * sizeof(*v));
        if (!v) {
            pthread_mutex_unlock(&p->in_mu);
            free(copy);
            return ERR_NOMEM;
        }
        p->in_models = v;
        p->cap_in_models = cap;
    }
    struct rp_inbox_model *e = &p->in_models[p->n_in_models++];
    snprintf(e->name, sizeof(e->name), "%s", name);
    e->eps = copy;
    e->n = n;
    e->remove = remove;
    pthread_mutex_unlock(&p->in_mu);
    curl_multi_wakeup(p->multi);
    return 0;
}

int router_proxy_set_model(struct router_proxy *p, const char *name,
                           const struct router_endpoint *eps, size_t n)
{
    return inbox_model(p, name, eps, n, false);
}

int router_proxy_remove_model(struct router_proxy *p, const char *name)
{
    return inbox_model(p, name, NULL, 0, true);
}

void router_proxy_submit(struct router_proxy *p, struct router_job *job)
{
    job->st->p = p;
    pthread_mutex_lock(&p->in_mu);
    job->st->next = NULL;
    if (p->in_jobs_tail)
        p->in_jobs_tail->st->next = job;
    else
        p->in_jobs_head = job;
    p->in_jobs_tail = job;
    pthread_mutex_unlock(&p->in_mu);
    curl_multi_wakeup(p->multi);
}

void router_proxy_client_gone(void *proxy)
{
    struct router_proxy *p = proxy;
    atomic_store(&p->cancel_pending, true);
    curl_multi_wakeup(p->multi);
}

/* ---- jobs ------------------------------------------------------------------------------------ */

#define RP_USAGE_MAX (1u << 20) /* bytes of a non-streamed body kept to read its usage */

struct router_job *router_job_new(void)
{
    struct router_job *job = calloc(1, sizeof(*job));
    if (job) job->st = calloc(1, sizeof(*job->st));
    if (job && !job->st) {
        free(job);
        return NULL;
    }
    if (job) buf_init(&job->st->usage, RP_USAGE_MAX);
    return job;
}

void router_job_free(struct router_job *job)
{
    if (!job) return;
    if (job->st) {
        buf_fini(&job->st->usage);
        free(job->st);
    }
    router_prompt_fini(&job->prompt);
    free(job->body);
    free(job->authorization);
    free(job);
}

static void jobs_link(struct router_proxy *p, struct router_job *job)
{
    job->st->prev = NULL;
    job->st->next = p->jobs;
    if (p->jobs) p->jobs->st->prev = job;
    p->jobs = job;
}

static void jobs_unlink(struct router_proxy *p, struct router_job *job)
{
    struct router_job_state *st = job->st;
    if (st->prev)
        st->prev->st->next = st->next;
    else
        p->jobs = st->next;
    if (st->next) st->next->st->prev = st->prev;
    st->prev = st->next = NULL;
}

static void held_unlink(struct rp_model *m, struct router_job *job)
{
    struct router_job_state *st = job->st;
    if (st->held_prev)
        st->held_prev->st->held_next = st->held_next;
    else
        m->held_head = st->held_next;
    if (st->held_next)
        st->held_next->st->held_prev = st->held_prev;
    else
        m->held_tail = st->held_prev;
    st->held_prev = st->held_next = NULL;
    m->n_held--;
    prom_gauge_set(m->mm.held, m->n_held);
}

/* Logs the request's end and releases it; the client's answer must be complete (or aborted). */
void rp_job_finish(struct router_proxy *p, struct router_job *job, int status)
{
    struct router_job_state *st = job->st;
    struct rp_model *m = st->m;
    if (st->phase == RP_JOB_HELD && m) held_unlink(m, job);
    rp_upstream_leave(job);
    jobs_unlink(p, job);
    double dur = rp_now() - job->arrival;
    if (m) {
        prom_histogram_observe(m->mm.duration, dur);
        struct prom_series *resp;
        if (status > 0 && router_metrics_response(p->cfg.metrics, m->name, status, &resp) == 0)
            prom_counter_inc(resp, 1);
        if (st->usage_known) {
            prom_counter_inc(m->mm.usage_reports, 1);
            prom_counter_inc(m->mm.prompt_tokens, (double)st->usage_prompt);
            prom_counter_inc(m->mm.cached_predicted, st->predicted_cached);
            prom_counter_inc(m->mm.cached_delivered, (double)st->usage_cached);
        }
    }
    log_info("request", LOG_S("request_id", job->request_id), LOG_S("model", job->model),
             LOG_S("replica", st->attempts ? st->tried[st->attempts - 1]->key : ""),
             LOG_I("status", status), LOG_I("attempts", st->attempts),
             LOG_S("reason", st->attempts ? router_reason_name(st->reason) : ""),
             LOG_I("prompt_tokens", job->prompt.n_prompt),
             LOG_I("predicted_cached", st->predicted_cached),
             LOG_I("cached", st->usage_known ? st->usage_cached : -1),
             LOG_B("client_gone", st->client_gone), LOG_F("duration_s", dur));
    router_job_free(job);
}

/* Answers the client with an OpenAI-shaped error (nothing was sent yet) and finishes. */
void rp_job_fail(struct router_proxy *p, struct router_job *job, int status, const char *type,
                 const char *code, const char *message, int retry_after_s)
{
    struct api_error e = {.status = status, .type = type, .code = code};
    snprintf(e.message, sizeof(e.message), "%s", message);
    e.retry_after_s = retry_after_s;
    struct buf body;
    buf_init(&body, RP_ERROR_BODY_MAX);
    char ra[16];
    struct http_header h[2] = {{"X-Request-Id", job->request_id}, {"Retry-After", ra}};
    size_t nh = api_error_retry_after(&e, ra, sizeof(ra)) == 1 ? 2 : 1;
    if (api_error_body(&e, &body) == 0)
        (void)http_stream_respond(job->stream, status, "application/json", body.data, body.len, h,
                                  nh);
    else
        http_stream_abort(job->stream);
    job->stream = NULL;
    buf_fini(&body);
    rp_job_finish(p, job, status);
}

static struct rp_model *model_find(struct router_proxy *p, const char *name)
{
    for (size_t i = 0; i < p->n_models; i++)
        if (strcmp(p->models[i]->name, name) == 0) return p->models[i];
    return NULL;
}

bool rp_replica_eligible(const struct router_proxy *p, const struct rp_replica *r, double now)
{
    (void)p;
    return r->present && r->ready && !r->terminating && r->healthy && now >= r->down_until;
}

static bool tried(const struct router_job *job, const struct rp_replica *r)
{
    for (int i = 0; i < job->st->attempts; i++)
        if (job->st->tried[i] == r) return true;
    return false;
}

static void hold(struct router_proxy *p, struct router_job *job)
{
    struct router_job_state *st = job->st;
    struct rp_model *m = st->m;
    if (m->n_held >= p->cfg.hold_max) {
        prom_counter_inc(m->mm.hold_rejected, 1);
        rp_job_fail(p, job, 503, "server_error", "no_replica",
                    "no replica of this model is ready and the router holds too many requests "
                    "for it already; retry later",
                    RP_RETRY_AFTER_S);
        return;
    }
    if (st->phase != RP_JOB_HELD) st->hold_deadline = rp_now() + p->cfg.hold_timeout_ms / 1000.0;
    st->phase = RP_JOB_HELD;
    st->held_prev = m->held_tail;
    st->held_next = NULL;
    if (m->held_tail)
        m->held_tail->st->held_next = job;
    else
        m->held_head = job;
    m->held_tail = job;
    m->n_held++;
    prom_gauge_set(m->mm.held, m->n_held);
}

void rp_job_dispatch(struct router_proxy *p, struct router_job *job)
{
    struct router_job_state *st = job->st;
    struct rp_model *m = st->m;
    double now = rp_now();
    if (m->n_reps > p->cap_cands) {
        struct router_candidate *c = realloc(p->cands, m->n_reps * sizeof(*c));
        if (c) p->cands = c;
        struct rp_replica **r = c ? realloc(p->cand_reps, m->n_reps * sizeof(*r)) : NULL;
        if (r) p->cand_reps = r;
        if (!c || !r) {
            rp_job_fail(p, job, 503, "server_error", NULL,
                        "the router is out of memory; retry shortly", RP_RETRY_AFTER_S);
            return;
        }
        p->cap_cands = m->n_reps;
    }
    struct router_candidate *cands = p->cands;
    struct rp_replica **reps = p->cand_reps;
    size_t n = 0;
    bool any_eligible = false;
    int bs = m->info ? router_model_info_block_size(m->info) : 0;
    for (size_t i = 0; i < m->n_reps; i++) {
        struct rp_replica *r = m->reps[i];
        if (!rp_replica_eligible(p, r, now)) continue;
        any_eligible = true;
        if (tried(job, r)) continue;
        int offload = 0;
        cands[n] = (struct router_candidate){
            .load = r->inflight + (r->eng_load_known ? r->eng_others : 0),
            .cached_tokens = bs ? rp_replica_cached(r, &job->prompt, bs, &offload) : 0,
            .queued_prefill = rp_replica_queued_prefill(r),
            .id_hash = r->id_hash,
        };
        cands[n].offload_tokens = offload;
        cands[n].evict_tokens =
            bs ? rp_replica_evicts(r, &job->prompt, bs, cands[n].cached_tokens) : 0;
        reps[n++] = r;
    }
    if (n == 0) {
        if (!any_eligible) {
            hold(p, job);
            return;
        }
        rp_job_fail(p, job, 503, "server_error", "upstream_unavailable",
                    "every replica of this model failed to take the request; retry shortly",
                    RP_RETRY_AFTER_S);
        return;
    }
    enum router_reason why;
    size_t k = router_policy_pick(&p->cfg.policy, cands, n, job->prompt.n_prompt, job->session,
                                  rp_random(p), &why);
    if (st->attempts == 0) {
        st->reason = why;
        prom_counter_inc(m->mm.decisions[why], 1);
    }
    if (log_enabled(LOG_DEBUG)) {
        char loads[256];
        size_t off = 0;
        for (size_t i = 0; i < n && off < sizeof(loads) - 16; i++)
            off += (size_t)snprintf(loads + off, sizeof(loads) - off, "%s%d/%d", i ? "," : "",
                                    cands[i].load, cands[i].cached_tokens);
        log_debug("routed", LOG_S("request_id", job->request_id), LOG_S("replica", reps[k]->key),
                  LOG_S("reason", router_reason_name(why)), LOG_S("load/cached", loads));
    }
    st->predicted_cached = cands[k].cached_tokens + cands[k].offload_tokens;
    st->tried[st->attempts++] = reps[k];
    st->phase = RP_JOB_RUNNING;
    int rc = rp_upstream_start(p, job, reps[k]);
    if (rc) {
        rp_job_fail(p, job, 500, "server_error", NULL, "the router could not start the request", 0);
        return;
    }
}

/* A model gained an eligible replica (or its set changed): send what it holds. */
void rp_model_kick(struct router_proxy *p, struct rp_model *m)
{
    double now = rp_now();
    bool any = false;
    for (size_t i = 0; i < m->n_reps && !any; i++) any = rp_replica_eligible(p, m->reps[i], now);
    rp_catalog_update(p, m);
    if (!any) return;
    while (m->held_head) {
        struct router_job *job = m->held_head;
        held_unlink(m, job);
        job->st->phase = RP_JOB_NEW;
        rp_job_dispatch(p, job);
    }
}

/* ---- models and replica sets ----------------------------------------------------------------- */

static struct rp_model *model_new(struct router_proxy *p, const char *name)
{
    if (p->n_models == p->cap_models) {
        size_t cap = p->cap_models ? 2 * p->cap_models : 8;
        struct rp_model **v = realloc(p->models, cap * sizeof(*v));
        if (!v) return NULL;
        p->models = v;
        p->cap_models = cap;
    }
    struct rp_model *m = calloc(1, sizeof(*m));
    if (!m) return NULL;
    snprintf(m->name, sizeof(m->name), "%s", name);
    if (router_metrics_model(p->cfg.metrics, name, &m->mm) != 0) {
        free(m);
        return NULL;
    }
    p->models[p->n_models++] = m;
    log_info("model added", LOG_S("model", name));
    return m;
}

static void model_apply(struct router_proxy *p, struct rp_inbox_model *in)
{
    struct rp_model *m = model_find(p, in->name);
    if (in->remove) {
        if (!m) return;
        m->removed = true;
        for (size_t i = 0; i < m->n_reps; i++) m->reps[i]->present = false;
        while (m->held_head)
            rp_job_fail(p, m->held_head, 404, "invalid_request_error", "model_not_found",
                        "the model was removed while the request was held", 0);
        log_info("model removed", LOG_S("model", m->name));
        return;
    }
    if (!m && !(m = model_new(p, in->name))) {
        log_error("out of memory adding a model", LOG_S("model", in->name));
        return;
    }
    m->removed = false;
    for (size_t i = 0; i < m->n_reps; i++) m->reps[i]->present = false;
    for (size_t e = 0; e < in->n; e++) {
        const struct router_endpoint *ep = &in->eps[e];
        struct rp_replica *r = NULL;
        for (size_t i = 0; i < m->n_reps && !r; i++)
            if (strcmp(m->reps[i]->key, ep->key) == 0 && strcmp(m->reps[i]->url, ep->url) == 0)
                r = m->reps[i];
        if (!r) {
            if (m->n_reps == m->cap_reps) {
                size_t cap = m->cap_reps ? 2 * m->cap_reps : 4;
                struct rp_replica **v = realloc(m->reps, cap * sizeof(*v));
                if (!v) continue;
                m->reps = v;
                m->cap_reps = cap;
            }
            if (!(r = rp_replica_new(m, ep, p->cfg.index_max_blocks))) continue;
            if (router_metrics_replica(p->cfg.metrics, m->name, r->key, &r->m_requests,
                                       &r->m_inflight) != 0)
                r->m_requests = r->m_inflight = NULL;
            m->reps[m->n_reps++] = r;
            log_info("replica added", LOG_S("model", m->name), LOG_S("replica", r->key),
                     LOG_S("url", r->url));
        }
        r->present = true;
        if (r->terminating != ep->terminating || r->ready != ep->ready)
            log_info("replica state", LOG_S("model", m->name), LOG_S("replica", r->key),
                     LOG_B("ready", ep->ready), LOG_B("terminating", ep->terminating));
        r->ready = ep->ready;
        r->terminating = ep->terminating;
    }
    rp_model_kick(p, m);
}

/* Frees replicas that left their model's set once nothing uses them, and models with none left;
 * refreshes the replica gauges. */
static void sweep(struct router_proxy *p, double now)
{
    for (size_t i = 0; i < p->n_models;) {
        struct rp_model *m = p->models[i];
        int eligible = 0;
        double index = 0;
        for (size_t j = 0; j < m->n_reps;) {
            struct rp_replica *r = m->reps[j];
            if (!r->present) rp_replica_stop(p, r);
            if (!r->present && !rp_replica_busy(r)) {
                log_info("replica removed", LOG_S("model", m->name), LOG_S("replica", r->key));
                rp_replica_free(p, r);
                m->reps[j] = m->reps[--m->n_reps];
                continue;
            }
            eligible += rp_replica_eligible(p, r, now);
            index += (double)r->held[ROUTER_TIER_DEVICE].n;
            j++;
        }
        prom_gauge_set(m->mm.eligible, eligible);
        prom_gauge_set(m->mm.ineligible, (double)m->n_reps - eligible);
        prom_gauge_set(m->mm.index_blocks, index);
        rp_catalog_update(p, m);
        if (m->removed && m->n_reps == 0 && !m->info_fetching) {
            router_model_info_unref(m->info);
            free(m->reps);
            free(m);
            p->models[i] = p->models[--p->n_models];
            continue;
        }
        i++;
    }
}

/* ---- the loop -------------------------------------------------------------------------------- */

static void take_inbox(struct router_proxy *p)
{
    pthread_mutex_lock(&p->in_mu);
    struct router_job *jobs = p->in_jobs_head;
    p->in_jobs_head = p->in_jobs_tail = NULL;
    struct rp_inbox_model *models = p->in_models;
    size_t n_models = p->n_in_models;
    p->in_models = NULL;
    p->n_in_models = p->cap_in_models = 0;
    pthread_mutex_unlock(&p->in_mu);

    for (size_t i = 0; i < n_models; i++) {
        model_apply(p, &models[i]);
        free(models[i].eps);
    }
    free(models);
    while (jobs) {
        struct router_job *job = jobs;
        jobs = job->st->next;
        jobs_link(p, job);
        struct rp_model *m = model_find(p, job->model);
        if (!m || m->removed) {
            rp_job_fail(p, job, 404, "invalid_request_error", "model_not_found",
                        "The model does not exist", 0);
            continue;
        }
        job->st->m = m;
        rp_job_dispatch(p, job);
    }
}

/* Ends the requests whose clients went away: held ones are dropped, running ones have their
 * upstream transfer removed, which closes the connection (the engine cancels the request). */
static void reap_cancelled(struct router_proxy *p)
{
    for (struct router_job *job = p->jobs, *next; job; job = next) {
        next = job->st->next;
        if (!job->stream || !http_stream_cancelled(job->stream)) continue;
        job->st->client_gone = true;
        if (job->st->phase == RP_JOB_RUNNING) rp_upstream_abort(p, job);
        http_stream_abort(job->stream);
        job->stream = NULL;
        rp_job_finish(p, job, 499); /* nginx's "client closed request" */
    }
}

static void expire_held(struct router_proxy *p, double now)
{
    for (size_t i = 0; i < p->n_models; i++) {
        struct rp_model *m = p->models[i];
        while (m->held_head && m->held_head->st->hold_deadline <= now) {
            prom_counter_inc(m->mm.hold_timeouts, 1);
            rp_job_fail(p, m->held_head, 503, "server_error", "no_replica",
                        "no replica of this model became ready in time (it may be scaling up "
                        "from zero); retry later",
                        RP_RETRY_AFTER_S * 5);
        }
    }
}

static void on_done(struct router_proxy *p, CURLMsg *msg)
{
    struct rp_xfer *x = NULL;
    curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
    if (!x) return;
    if (x->kind == RP_XFER_REQUEST)
        rp_upstream_done(p, x->owner, msg->data.result);
    else
        rp_replica_done(p, x, msg->data.result);
}

static void *rp_main(void *arg)
{
    struct router_proxy *p = arg;
    while (!atomic_load(&p->stop)) {
        int timeout = p->n_paused > 0 ? RP_POLL_PAUSED_MS : RP_POLL_MAX_MS;
        curl_multi_poll(p->multi, NULL, 0, timeout, NULL);
        if (atomic_load(&p->stop)) break;
        take_inbox(p);
        if (atomic_exchange(&p->cancel_pending, false)) reap_cancelled(p);
        double now = rp_now();
        if (p->n_paused > 0) rp_upstream_unpause(p);
        for (size_t i = 0; i < p->n_models; i++)
            for (size_t j = 0; j < p->models[i]->n_reps; j++)
                rp_replica_tick(p, p->models[i]->reps[j], now);
        expire_held(p, now);
        int running;
        curl_multi_perform(p->multi, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(p->multi, &left)))
            if (msg->msg == CURLMSG_DONE) on_done(p, msg);
        if (now >= p->next_sweep) {
            sweep(p, now);
            p->next_sweep = now + RP_SWEEP_S;
        }
    }
    /* Stopping: answer what is held, end what runs, close every transfer. */
    take_inbox(p);
    for (struct router_job *job = p->jobs, *next; job; job = next) {
        next = job->st->next;
        if (job->st->phase == RP_JOB_RUNNING) rp_upstream_abort(p, job);
        if (job->st->began) {
            http_stream_abort(job->stream);
            job->stream = NULL;
            rp_job_finish(p, job, 0);
        } else {
            rp_job_fail(p, job, 503, "server_error", NULL, "the router is shutting down", 1);
        }
    }
    for (size_t i = 0; i < p->n_models; i++) {
        struct rp_model *m = p->models[i];
        for (size_t j = 0; j < m->n_reps; j++) rp_replica_free(p, m->reps[j]);
        router_model_info_unref(m->info);
        free(m->reps);
        free(m);
    }
    p->n_models = 0;
    return NULL;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_FAILED_INIT;
static void curl_init_once(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int router_proxy_start(const struct router_proxy_cfg *cfg, struct router_proxy **out)
{
    if (cfg->max_attempts < 1 || cfg->max_attempts > ROUTER_MAX_ATTEMPTS || !cfg->metrics)
        return ERR_INVAL;
    pthread_once(&curl_once, curl_init_once);
    if (curl_init_rc != CURLE_OK) return ERR_INTERNAL;
    struct router_proxy *p = calloc(1, sizeof(*p));
    if (!p) return ERR_NOMEM;
    p->cfg = *cfg;
    if (getrandom(&p->rng, sizeof(p->rng), GRND_NONBLOCK) != (ssize_t)sizeof(p->rng) || !p->rng)
        p->rng = UINT64_C(0x9e3779b97f4a7c15) ^ (uint64_t)(uintptr_t)p;
    pthread_mutex_init(&p->in_mu, NULL);
    pthread_mutex_init(&p->cat_mu, NULL);
    atomic_init(&p->stop, false);
    atomic_init(&p->cancel_pending, false);
    p->multi = curl_multi_init();
    if (!p->multi) {
        router_proxy_free(p);
        return ERR_NOMEM;
    }
    /* Keep enough idle connections for every engine: reuse saves a connect per request. */
    curl_multi_setopt(p->multi, CURLMOPT_MAXCONNECTS, 4096L);
    if (pthread_create(&p->thread, NULL, rp_main, p) != 0) {
        router_proxy_free(p);
        return ERR_NOMEM;
    }
    p->started = true;
    *out = p;
    return 0;
}

void router_proxy_stop(struct router_proxy *p)
{
    if (!p || !p->started) return;
    atomic_store(&p->stop, true);
    curl_multi_wakeup(p->multi);
    pthread_join(p->thread, NULL);
    p->started = false;
}

void router_proxy_free(struct router_proxy *p)
{
    if (!p) return;
    router_proxy_stop(p);
    /* Jobs submitted after the thread stopped. */
    for (struct router_job *job = p->in_jobs_head, *next; job; job = next) {
        next = job->st->next;
        http_stream_abort(job->stream);
        router_job_free(job);
    }
    for (size_t i = 0; i < p->n_in_models; i++) free(p->in_models[i].eps);
    free(p->in_models);
    for (size_t i = 0; i < p->n_cat; i++) router_model_info_unref(p->cat[i].info);
    free(p->cat);
    free(p->models);
    free(p->cands);
    free(p->cand_reps);
    if (p->multi) curl_multi_cleanup(p->multi);
    pthread_mutex_destroy(&p->in_mu);
    pthread_mutex_destroy(&p->cat_mu);
    free(p);
}
