/* Internals shared by the proxy's files: router_proxy.c (thread, inbox, models, dispatch, holding),
 * router_upstream.c (request transfers to engines), router_replica.c (each replica's event
 * stream, health probe and tokenizer fetch). Everything here belongs to the proxy thread except
 * the inbox and the catalog, which have their own locks. Not part of the router's API. */
#ifndef CINFER_ROUTER_PROXY_PRIV_H
#define CINFER_ROUTER_PROXY_PRIV_H

#include "common/buf.h"
#include "common/u64set.h"
#include "router/router_events.h"
#include "router/router_metrics.h"
#include "router/router_proxy.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>

struct rp_model;
struct rp_replica;

enum rp_xfer_kind { RP_XFER_REQUEST = 1, RP_XFER_EVENTS, RP_XFER_HEALTH, RP_XFER_TOKENIZER };

/* A libcurl transfer and who it is for (CURLOPT_PRIVATE points here). */
struct rp_xfer {
    enum rp_xfer_kind kind;
    CURL *easy; /* NULL when idle */
    struct curl_slist *headers;
    void *owner; /* struct router_job or struct rp_replica */
};

struct rp_replica {
    struct rp_model *model;
    char key[ROUTER_KEY_MAX], url[ROUTER_URL_MAX];
    uint64_t id_hash;
    bool present; /* in the model's current endpoint set */
    bool ready, terminating;
    bool healthy;      /* the last /health answered 200 */
    double down_until; /* after a refused connection: not eligible before */
    int inflight;      /* our requests there */
    int eng_others; /* requests on the engine that are not ours (other routers'), at its last load
                     * line: running + waiting minus our requests in flight then */
    bool eng_load_known;
    long eng_prefill;        /* its prompt tokens to prefill at the last load line, less those of
                             * our requests answered since; -1 unknown */
    long prefill_sent;       /* uncached prompt tokens of our requests sent since that line and
                             * not answered yet */
    uint64_t load_lines;     /* load lines received (which line a request was sent after) */
    long prefill_unanswered; /* uncached prompt tokens of our requests there without a first
                              * body byte (what we know without the engine's load lines) */
    struct prom_series *m_requests, *m_inflight;

    /* KV block index, from the event stream. */
    struct u64set held[ROUTER_TIER_OTHER]; /* by tier: the KV pool, then the offload tiers */
    bool index_live;                       /* snapshot received on the current stream */
    bool index_full;                       /* a stored hash did not fit (logged once) */
    int index_block_size;                  /* from the stream's hello */
    long kv_blocks; /* the engine's KV pool in blocks, from the hello; 0 unknown */
    struct rp_xfer ev;
    struct router_lines ev_lines;
    double ev_retry_at;
    int ev_backoff_ms;
    double ev_started;

    struct rp_xfer hc; /* /health */
    double hc_next;

    struct rp_xfer tk; /* /cinfer/tokenizer */
    struct buf tk_body;
};

struct rp_model {
    char name[ROUTER_MODEL_MAX];
    struct rp_replica **reps;
    size_t n_reps, cap_reps;
    bool removed;
    struct router_model_info *info; /* NULL until fetched */
    double info_retry_at;
    bool info_fetching;
    struct router_job *held_head, *held_tail;
    int n_held;
    struct router_model_metrics mm;
};

enum rp_job_phase { RP_JOB_NEW = 0, RP_JOB_HELD, RP_JOB_RUNNING };

struct router_job_state {
    struct router_proxy *p;
    struct rp_model *m;
    struct rp_replica *rep; /* while RUNNING */
    enum rp_job_phase phase;
    struct router_job *prev, *next;           /* every live job (cancel scan) */
    struct router_job *held_prev, *held_next; /* the model's held queue */
    double hold_deadline;
    int attempts;
    struct rp_replica *tried[ROUTER_MAX_ATTEMPTS];
    enum router_reason reason;
    int predicted_cached;
    long prefill_owed;   /* its uncached prompt tokens counted on rep (0 once answered) */
    uint64_t sent_after; /* rep->load_lines when it was sent */
    struct rp_xfer x;
    long status;
    char content_type[128], retry_after[16];
    bool retry;       /* abort this attempt and try another replica */
    bool began;       /* bytes went to the client: no more retries */
    bool paused;      /* the client's queue is full */
    bool client_gone; /* the client's stream was cancelled */
    bool sse;
    struct buf usage; /* non-streamed body copy, or the SSE event being read */
    long usage_prompt, usage_cached;
    bool usage_known, usage_overflow;
    double t_sent, t_first;
};

struct rp_inbox_model {
    char name[ROUTER_MODEL_MAX];
    struct router_endpoint *eps; /* owned */
    size_t n;
    bool remove;
};

struct rp_catalog_entry {
    char name[ROUTER_MODEL_MAX];
    struct router_model_info *info; /* a reference, or NULL */
    bool serving;                   /* an eligible replica exists */
};

struct router_proxy {
    struct router_proxy_cfg cfg;
    CURLM *multi;
    pthread_t thread;
    bool started;
    atomic_bool stop;
    atomic_bool cancel_pending;

    pthread_mutex_t in_mu; /* inbox */
    struct router_job *in_jobs_head, *in_jobs_tail;
    struct rp_inbox_model *in_models;
    size_t n_in_models, cap_in_models;

    pthread_mutex_t cat_mu; /* catalog: what the HTTP thread may ask */
    struct rp_catalog_entry *cat;
    size_t n_cat, cap_cat;

    /* proxy thread */
    struct rp_model **models;
    size_t n_models, cap_models;
    struct router_job *jobs;        /* live jobs (doubly linked through st->prev/next) */
    struct router_candidate *cands; /* rp_job_dispatch's scratch: one per replica of a model */
    struct rp_replica **cand_reps;
    size_t cap_cands;
    int n_paused;
    uint64_t rng;
    double next_sweep;
};

double rp_now(void);
uint64_t rp_random(struct router_proxy *p);

/* router_proxy.c */
void rp_job_dispatch(struct router_proxy *p, struct router_job *job);
void rp_job_finish(struct router_proxy *p, struct router_job *job, int status);
void rp_job_fail(struct router_proxy *p, struct router_job *job, int status, const char *type,
                 const char *code, const char *message, int retry_after_s);
bool rp_replica_eligible(const struct router_proxy *p, const struct rp_replica *r, double now);
void rp_model_kick(struct router_proxy *p, struct rp_model *m);
void rp_catalog_update(struct router_proxy *p, struct rp_model *m);

/* router_upstream.c */
int rp_upstream_start(struct router_proxy *p, struct router_job *job, struct rp_replica *rep);
/* The job's replica forgets it (its in-flight count and queued prefill); st->rep becomes NULL. */
void rp_upstream_leave(struct router_job *job);
void rp_upstream_done(struct router_proxy *p, struct router_job *job, CURLcode cc);
void rp_upstream_unpause(struct router_proxy *p);
void rp_upstream_abort(struct router_proxy *p, struct router_job *job);

/* router_replica.c */
struct rp_replica *rp_replica_new(struct rp_model *m, const struct router_endpoint *ep,
                                  size_t index_max);
void rp_replica_free(struct router_proxy *p, struct rp_replica *r);
bool rp_replica_busy(const struct rp_replica *r); /* transfers or requests still use it */
void rp_replica_tick(struct router_proxy *p, struct rp_replica *r, double now);
void rp_replica_done(struct router_proxy *p, struct rp_xfer *x, CURLcode cc);
void rp_replica_stop(struct router_proxy *p, struct rp_replica *r);
/* Prompt tokens of `pr` the replica's index holds in its KV pool (the leading run, times the block
 * size), and in *offload those of the blocks after that run held in any tier (loaded back from an
 * offload tier instead of computed: the engine looks there past its prefix cache); 0 when its
 * index is not live or has another block size. */
int rp_replica_cached(const struct rp_replica *r, const struct router_prompt *pr, int block_size,
                      int *offload);
/* Prompt tokens the replica has to prefill before a request sent now: the engine's last load line
 * plus the uncached tokens we sent since, or (no load lines) those of our unanswered requests. */
long rp_replica_queued_prefill(const struct rp_replica *r);
/* Cached tokens the replica would evict to take `pr` with `reused` of its tokens already there:
 * the new blocks past the room its KV pool has left (hello's kv_blocks less the blocks it holds);
 * 0 when unknown. */
int rp_replica_evicts(const struct rp_replica *r, const struct router_prompt *pr, int block_size,
                      int reused);

/* A transfer with the settings every engine request shares. */
CURL *rp_easy_new(struct router_proxy *p, struct rp_xfer *x, const char *base, const char *path);
void rp_xfer_release(struct router_proxy *p, struct rp_xfer *x);

#endif
