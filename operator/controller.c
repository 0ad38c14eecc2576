/* Informers + work queue + workers + leader election for InferenceServices (see controller.h). */
#include "operator/controller.h"

#include "common/clock.h"
#include "common/err.h"
#include "common/informer.h"
#include "common/k8s/client.h"
#include "common/leader.h"
#include "common/log.h"
#include "common/shutdown.h"
#include "operator/reconcile.h"
#include "operator/workqueue.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define OWNED_SELECTOR  "app.kubernetes.io/managed-by=cinfer-operator"
#define ENGINE_SELECTOR "app.kubernetes.io/name=cinfer-engine"
#define MAX_WORKERS     64

struct controller {
    const struct controller_cfg *cfg;
    struct desired_settings desired; /* cfg->desired with the system namespace resolved */
    char system_ns[254];
    struct reconcile_caches caches;
    struct workqueue *queue;
    struct leader *leader;
    atomic_bool leading;
    atomic_bool lost;
    struct prom_series *reconcile_ok, *reconcile_err, *duration, *depth, *is_leader;
};

static int new_client(void *ctx, struct k8s_client **out)
{
    const struct controller_cfg *cfg = ctx;
    struct k8s_config *kc = NULL;
    char err[K8S_ERRMSG_MAX];
    int rc = cfg->kubeconfig && *cfg->kubeconfig
                 ? k8s_config_load_kubeconfig(cfg->kubeconfig, cfg->context, &kc, err, sizeof(err))
                 : k8s_config_load_default(cfg->context, &kc, err, sizeof(err));
    if (!rc) {
        struct k8s_client_opts o = {.user_agent = "cinfer-operator",
                                    .field_manager = DESIRED_FIELD_MANAGER};
        rc = k8s_client_new(kc, &o, out, err, sizeof(err));
    }
    if (rc) log_error("cannot create Kubernetes client", LOG_S("error", err));
    return rc;
}

static void enqueue_isvc(struct controller *ctl, const char *ns, const char *name)
{
    char key[512];
    if (!ns || !name) return;
    snprintf(key, sizeof(key), "%s/%s", ns, name);
    workqueue_add(ctl->queue, key);
}

static void on_isvc(void *ctx, enum k8s_watch_type type, const json_t *obj)
{
    (void)type;
    const json_t *meta = json_object_get(obj, "metadata");
    enqueue_isvc(ctx, json_string_value(json_object_get(meta, "namespace")),
                 json_string_value(json_object_get(meta, "name")));
}

/* Owned objects and pods map to their InferenceService through the contract label. */
static void on_owned(void *ctx, enum k8s_watch_type type, const json_t *obj)
{
    (void)type;
    const json_t *meta = json_object_get(obj, "metadata");
    const char *owner = json_string_value(
        json_object_get(json_object_get(meta, "labels"), "serving.cinfer.io/inferenceservice"));
    enqueue_isvc(ctx, json_string_value(json_object_get(meta, "namespace")), owner);
}

struct worker_arg {
    struct controller *ctl;
    int id;
    unsigned long long count; /* reconciles done by this worker, for reconcile ids */
};

static void *worker_main(void *arg)
{
    struct worker_arg *wa = arg;
    struct controller *ctl = wa->ctl;
    struct k8s_client *c = NULL;
    char *key;
    while ((key = workqueue_get(ctl->queue, -1))) {
        if (!c && new_client((void *)ctl->cfg, &c) != 0) {
            workqueue_add_rate_limited(ctl->queue, key);
            workqueue_done(ctl->queue, key);
            free(key);
            shutdown_wait(1000);
            continue;
        }
        double t0 = clock_mono_s();
        struct reconcile_outcome res;
        /* A reconcile id ties together the log lines of one pass over one key. */
        char rid[32];
        snprintf(rid, sizeof(rid), "w%d-%llu", wa->id, ++wa->count);
        reconcile_key(c, &ctl->caches, &ctl->desired, key, time(NULL), &res);
        double took = clock_mono_s() - t0;
        prom_histogram_observe(ctl->duration, took);
        if (res.result == RECONCILE_DONE) {
            prom_counter_inc(ctl->reconcile_ok, 1);
            workqueue_forget(ctl->queue, key);
            log_debug("reconciled", LOG_S("key", key), LOG_S("reconcile_id", rid),
                      LOG_F("seconds", took));
        } else {
            prom_counter_inc(ctl->reconcile_err, 1);
            /* Conflicts are routine (a newer version is on its way through the watch). */
            if (res.rc == ERR_CONFLICT)
                log_debug("reconcile conflict; retrying", LOG_S("key", key),
                          LOG_S("reconcile_id", rid));
            else
                log_warn("reconcile failed; retrying", LOG_S("key", key),
                         LOG_S("reconcile_id", rid), LOG_S("error", res.message),
                         LOG_I("attempt", workqueue_failures(ctl->queue, key) + 1));
            workqueue_add_rate_limited(ctl->queue, key);
        }
        workqueue_done(ctl->queue, key);
        prom_gauge_set(ctl->depth, (double)workqueue_len(ctl->queue));
        free(key);
    }
    k8s_client_free(c);
    return NULL;
}

static void on_started_leading(void *ctx)
{
    struct controller *ctl = ctx;
    atomic_store(&ctl->leading, true);
    prom_gauge_set(ctl->is_leader, 1);
}

static void on_stopped_leading(void *ctx)
{
    struct controller *ctl = ctx;
    prom_gauge_set(ctl->is_leader, 0);
    if (atomic_exchange(&ctl->leading, false) && !shutdown_requested()) {
        atomic_store(&ctl->lost, true);
        shutdown_request(); /* stop everything: a follower must not keep reconciling */
    }
}

static int register_metrics(struct controller *ctl, struct prom_registry *r)
{
    static const char *const result_label[] = {"result"};
    static const double buckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
    struct prom_desc total = {PROM_COUNTER,
                              "cinfer_operator_reconcile_total",
                              "Reconciles by result",
                              result_label,
                              1,
                              NULL,
                              0};
    struct prom_desc dur = {PROM_HISTOGRAM,
                            "cinfer_operator_reconcile_duration_seconds",
                            "Time to reconcile one InferenceService",
                            NULL,
                            0,
                            buckets,
                            sizeof(buckets) / sizeof(buckets[0])};
    struct prom_desc depth = {PROM_GAUGE,
                              "cinfer_operator_workqueue_depth",
                              "InferenceService keys waiting to be reconciled",
                              NULL,
                              0,
                              NULL,
                              0};
    struct prom_desc leader = {PROM_GAUGE,
                               "cinfer_operator_leader",
                               "1 while this replica holds the leader lease",
                               NULL,
                               0,
                               NULL,
                               0};
    struct prom_metric *m;
    int rc = prom_registry_add(r, &total, &m);
    if (!rc) rc = prom_series_get(m, (const char *const[]){"success"}, 1, &ctl->reconcile_ok);
    if (!rc) rc = prom_series_get(m, (const char *const[]){"error"}, 1, &ctl->reconcile_err);
    if (!rc) rc = prom_registry_add(r, &dur, &m);
    if (!rc) rc = prom_series_get(m, NULL, 0, &ctl->duration);
    if (!rc) rc = prom_registry_add(r, &depth, &m);
    if (!rc) rc = prom_series_get(m, NULL, 0, &ctl->depth);
    if (!rc) rc = prom_registry_add(r, &leader, &m);
    if (!rc) rc = prom_series_get(m, NULL, 0, &ctl->is_leader);
    return rc;
}

static int start_informers(struct controller *ctl)
{
    const struct controller_cfg *cfg = ctl->cfg;
    const char *ns = cfg->ns && *cfg->ns ? cfg->ns : NULL;
    struct {
        const char *name;
        const struct k8s_resource *res;
        const char *selector;
        informer_event_fn fn;
        struct informer **out;
    } specs[] = {
        {"inferenceservices", &reconcile_resource_isvcs, NULL, on_isvc, &ctl->caches.isvcs},
        {"deployments", &k8s_resource_deployments, OWNED_SELECTOR, on_owned,
         &ctl->caches.deployments},
        {"services", &k8s_resource_services, OWNED_SELECTOR, on_owned, &ctl->caches.services},
        {"networkpolicies", &k8s_resource_networkpolicies, OWNED_SELECTOR, on_owned,
         &ctl->caches.networkpolicies},
        {"pods", &k8s_resource_pods, ENGINE_SELECTOR, on_owned, &ctl->caches.pods},
    };
    for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
        struct informer_opts o = {.name = specs[i].name,
                                  .res = specs[i].res,
                                  .ns = ns,
                                  .label_selector = specs[i].selector,
                                  .new_client = new_client,
                                  .client_ctx = (void *)cfg,
                                  .on_event = specs[i].fn,
                                  .event_ctx = ctl};
        int rc = informer_start(&o, specs[i].out);
        if (rc) return rc;
    }
    return 0;
}

static bool caches_synced(struct controller *ctl)
{
    return informer_has_synced(ctl->caches.isvcs) && informer_has_synced(ctl->caches.deployments) &&
           informer_has_synced(ctl->caches.services) &&
           informer_has_synced(ctl->caches.networkpolicies) &&
           informer_has_synced(ctl->caches.pods);
}

/* Enqueues every cached InferenceService: the periodic resync that repairs anything missed. */
static void resync_all(struct controller *ctl)
{
    json_t *all = informer_list(ctl->caches.isvcs, NULL, NULL);
    size_t i;
    json_t *o;
    json_array_foreach(all, i, o) on_isvc(ctl, K8S_WATCH_MODIFIED, o);
    json_decref(all);
}

int controller_run(const struct controller_cfg *cfg)
{
    struct controller ctl = {.cfg = cfg};
    pthread_t workers[MAX_WORKERS];
    struct worker_arg args[MAX_WORKERS];
    int n_workers = 0, rc;
    struct workqueue_opts qo = {.base_delay_ms = 5, .max_delay_ms = 1000 * 1000};
    ctl.queue = workqueue_new(&qo);
    if (!ctl.queue) return ERR_NOMEM;
    rc = register_metrics(&ctl, cfg->metrics);
    if (rc) goto out;
    /* The client's default namespace (in cluster: the operator's own) for the Lease and for the
     * router and autoscaler that NetworkPolicies admit, unless a flag names them. */
    struct k8s_client *probe = NULL;
    rc = new_client((void *)cfg, &probe);
    if (rc) goto out;
    char own_ns[254];
    snprintf(own_ns, sizeof(own_ns), "%s", k8s_client_config(probe)->ns);
    k8s_client_free(probe);
    ctl.desired = cfg->desired;
    snprintf(ctl.system_ns, sizeof(ctl.system_ns), "%s",
             cfg->desired.system_namespace && *cfg->desired.system_namespace
                 ? cfg->desired.system_namespace
                 : own_ns);
    ctl.desired.system_namespace = ctl.system_ns;

    if (cfg->leader_elect) {
        char lease_ns[254];
        snprintf(lease_ns, sizeof(lease_ns), "%s",
                 cfg->lease_namespace && *cfg->lease_namespace ? cfg->lease_namespace : own_ns);
        struct leader_opts lo = {.ns = lease_ns,
                                 .name = "cinfer-operator",
                                 .identity = cfg->identity,
                                 .new_client = new_client,
                                 .client_ctx = (void *)cfg,
                                 .on_started = on_started_leading,
                                 .on_stopped = on_stopped_leading,
                                 .cb_ctx = &ctl};
        rc = leader_start(&lo, &ctl.leader);
        if (rc) goto out;
        log_info("waiting for leadership", LOG_S("lease", "cinfer-operator"),
                 LOG_S("namespace", lease_ns), LOG_S("identity", leader_identity(ctl.leader)));
        while (!atomic_load(&ctl.leading) && !shutdown_wait(100)) {
        }
        if (shutdown_requested()) goto out;
    } else {
        atomic_store(&ctl.leading, true);
    }

    /* Informers start only once we lead: a follower keeps no caches and makes no requests. */
    rc = start_informers(&ctl);
    if (rc) goto out;
    while (!caches_synced(&ctl) && !shutdown_wait(50)) {
    }
    if (shutdown_requested()) goto out;
    if (cfg->set_ready) cfg->set_ready(cfg->ready_ctx, true);
    log_info("controller started", LOG_I("workers", cfg->workers),
             LOG_S("namespace", cfg->ns && *cfg->ns ? cfg->ns : "(all)"),
             LOG_B("network_policies", ctl.desired.network_policy),
             LOG_S("system_namespace", ctl.system_ns));

    for (; n_workers < cfg->workers && n_workers < MAX_WORKERS; n_workers++) {
        args[n_workers] = (struct worker_arg){&ctl, n_workers, 0};
        if (pthread_create(&workers[n_workers], NULL, worker_main, &args[n_workers]) != 0) {
            rc = ERR_NOMEM;
            break;
        }
    }
    time_t next_resync = time(NULL) + cfg->resync_seconds;
    while (!rc && !shutdown_wait(500)) {
        prom_gauge_set(ctl.depth, (double)workqueue_len(ctl.queue));
        if (cfg->resync_seconds > 0 && time(NULL) >= next_resync) {
            resync_all(&ctl);
            next_resync = time(NULL) + cfg->resync_seconds;
        }
    }
out:
    if (cfg->set_ready) cfg->set_ready(cfg->ready_ctx, false);
    workqueue_shutdown(ctl.queue);
    for (int i = 0; i < n_workers; i++) pthread_join(workers[i], NULL);
    informer_free(ctl.caches.isvcs);
    informer_free(ctl.caches.deployments);
    informer_free(ctl.caches.services);
    informer_free(ctl.caches.networkpolicies);
    informer_free(ctl.caches.pods);
    bool lost = atomic_load(&ctl.lost);
    leader_free(ctl.leader);
    workqueue_free(ctl.queue);
    if (lost) {
        log_error("leadership lost; exiting so that a new leader takes over");
        return ERR_BAD_STATE;
    }
    return rc;
}
