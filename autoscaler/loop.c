/* The control loop (see loop.h): informer for InferenceServices, leader election, and per round
 * discover -> scrape (all services in parallel) -> signals -> policy -> actuate. State per
 * service (policy history, the previous scrape round) lives here and is dropped when the service
 * stops being managed. */
#include "autoscaler/loop.h"

#include "autoscaler/actuate.h"
#include "autoscaler/scrape.h"
#include "autoscaler/signals.h"
#include "autoscaler/victims.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/informer.h"
#include "common/http_client.h"
#include "common/json_util.h"
#include "common/k8s/client.h"
#include "common/leader.h"
#include "common/log.h"
#include "common/metric_names.h"
#include "common/shutdown.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KEY_MAX              520 /* "ns/name" or a pod UID or a URL (up to 511 bytes) */
#define REASON_MAX           (sizeof(((struct policy_decision *)0)->reason) + 64)
#define STATUS_REFRESH_S     30 /* rewrite status.autoscaling at least this often */
#define MAX_PODS_PER_SERVICE 1024
#define MAX_ROUTERS          64
#define ROUTER_METRICS_MAX   (16u << 20)
#define SCALE_TO_ZERO_DEF_S  300 /* spec.scaling.scaleToZeroSeconds default (the CRD's too) */

/* ------------------------------------------------------------------------------------------------
 * Per-service state
 * ---------------------------------------------------------------------------------------------- */

struct svc {
    char key[KEY_MAX]; /* ns/name */
    struct policy_spec spec;
    struct policy_state *st;
    struct signals_pod *prev; /* last round's scrapes; keys point into prev_keys */
    char (*prev_keys)[KEY_MAX];
    size_t n_prev;
    int last_desired;
    char last_reason[REASON_MAX];
    bool last_scale_failed; /* what the last status write said about /scale */
    time_t last_status_write, last_scale;
    /* Our last /scale write and the resourceVersion the cache held then: until the watch brings
     * a newer object, the cached spec.replicas predates the write and `written` is current. */
    char written_rv[64];
    int written;
    struct prom_series *desired_gauge;
    bool seen;
    bool zero;          /* minReplicas 0: loop_zero_decide takes it to zero and back */
    double last_active; /* monotonic seconds it was last busy or had requests held */
};

static void svc_free(struct svc *s)
{
    if (!s) return;
    policy_state_free(s->st);
    free(s->prev);
    free(s->prev_keys);
    free(s);
}

/* The fields of a policy_spec read from the InferenceService; a change restarts the history. */
static bool spec_same(const struct policy_spec *a, const struct policy_spec *b)
{
    return a->kind == b->kind && a->min_replicas == b->min_replicas &&
           a->max_replicas == b->max_replicas && a->target_queue_depth == b->target_queue_depth &&
           a->target_kv_usage == b->target_kv_usage && a->objective_ttft_s == b->objective_ttft_s &&
           a->objective_itl_s == b->objective_itl_s &&
           a->objective_percentile == b->objective_percentile &&
           a->scale_down_window_s == b->scale_down_window_s && a->interval_s == b->interval_s;
}

/* One pod (or --target URL) of one service in the current round. */
struct round_pod {
    char key[KEY_MAX];
    char pod[254];               /* pod name; "" in --target mode */
    char cost[VICTIMS_COST_LEN]; /* its pod-deletion-cost annotation now, or "" */
    char url[512];
};

struct round_svc {
    struct svc *svc;
    json_t *isvc; /* borrowed from the round's list */
    size_t first, n;
    int not_ready;
};

struct loop {
    const struct loop_cfg *cfg;
    struct loop_targets targets;
    struct informer *isvcs;
    struct leader *leader;
    struct k8s_client *client; /* the loop thread's own */
    struct svc **svcs;
    size_t n_svcs, cap_svcs;
    atomic_bool leading, lost;
    struct prom_metric *desired_metric;
    struct prom_series *rounds, *scrapes_ok, *scrapes_err, *scale_up, *scale_down, *holds,
        *api_errors, *round_duration, *is_leader;
    /* cinfer-router /metrics this round (held requests per model). */
    struct http_client *http;
    struct prom_exposition *routers[MAX_ROUTERS];
    size_t n_routers;
    bool routers_configured, routers_failed;
};

static int new_client(void *ctx, struct k8s_client **out)
{
    const struct loop_cfg *cfg = ctx;
    struct k8s_config *kc = NULL;
    char err[K8S_ERRMSG_MAX];
    int rc = cfg->kubeconfig && *cfg->kubeconfig
                 ? k8s_config_load_kubeconfig(cfg->kubeconfig, NULL, &kc, err, sizeof(err))
                 : k8s_config_load_default(NULL, &kc, err, sizeof(err));
    if (!rc) {
        struct k8s_client_opts o = {.user_agent = "cinfer-autoscaler",
                                    .field_manager = ACTUATE_FIELD_MANAGER};
        rc = k8s_client_new(kc, &o, out, err, sizeof(err));
    }
    if (rc) log_error("cannot create Kubernetes client", LOG_S("error", err));
    return rc;
}

static struct svc *svc_get(struct loop *l, const char *key)
{
    for (size_t i = 0; i < l->n_svcs; i++)
        if (strcmp(l->svcs[i]->key, key) == 0) return l->svcs[i];
    if (l->n_svcs == l->cap_svcs) {
        size_t cap = l->cap_svcs ? 2 * l->cap_svcs : 8;
        struct svc **v = realloc(l->svcs, cap * sizeof(*v));
        if (!v) return NULL;
        l->svcs = v;
        l->cap_svcs = cap;
    }
    struct svc *s = calloc(1, sizeof(*s));
    if (!s) return NULL;
    snprintf(s->key, sizeof(s->key), "%s", key);
    s->last_desired = -1;
    l->svcs[l->n_svcs++] = s;
    return s;
}

/* Drops the state of services not seen this round (deleted, or no longer managed). */
static void svc_sweep(struct loop *l)
{
    size_t j = 0;
    for (size_t i = 0; i < l->n_svcs; i++) {
        if (l->svcs[i]->seen) {
            l->svcs[i]->seen = false;
            l->svcs[j++] = l->svcs[i];
        } else {
            log_info("stopped managing", LOG_S("inferenceservice", l->svcs[i]->key));
            svc_free(l->svcs[i]);
        }
    }
    l->n_svcs = j;
}

/* ------------------------------------------------------------------------------------------------
 * Metrics
 * ---------------------------------------------------------------------------------------------- */

/* Registers an unlabelled metric and returns its one series. */
static int add_series(struct prom_registry *r, enum prom_type type, const char *name,
                      const char *help, struct prom_series **out)
{
    static const double buckets[] = {0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
    bool hist = type == PROM_HISTOGRAM;
    struct prom_desc d = {type,
                          name,
                          help,
                          NULL,
                          0,
                          hist ? buckets : NULL,
                          hist ? sizeof(buckets) / sizeof(buckets[0]) : 0};
    struct prom_metric *m;
    int rc = prom_registry_add(r, &d, &m);
    if (!rc) rc = prom_series_get(m, NULL, 0, out);
    return rc;
}

static int register_metrics(struct loop *l, struct prom_registry *r)
{
    static const char *const svc_labels[] = {"namespace", "inferenceservice"};
    struct prom_desc desired = {PROM_GAUGE,
                                "cinfer_autoscaler_desired_replicas",
                                "Replicas the autoscaler last decided, per InferenceService",
                                svc_labels,
                                2,
                                NULL,
                                0};
    struct prom_metric *m;
    int rc = prom_registry_add(r, &desired, &l->desired_metric);
    if (!rc)
        rc = add_series(r, PROM_COUNTER, "cinfer_autoscaler_rounds_total", "Decision rounds run",
                        &l->rounds);
    if (!rc)
        rc = add_series(r, PROM_HISTOGRAM, "cinfer_autoscaler_round_duration_seconds",
                        "Time for one round (discover, scrape, decide, actuate)",
                        &l->round_duration);
    if (!rc) {
        struct prom_desc d = {PROM_COUNTER,
                              "cinfer_autoscaler_scrapes_total",
                              "Engine /metrics scrapes by result",
                              (const char *const[]){"result"},
                              1,
                              NULL,
                              0};
        rc = prom_registry_add(r, &d, &m);
        if (!rc) rc = prom_series_get(m, (const char *const[]){"success"}, 1, &l->scrapes_ok);
        if (!rc) rc = prom_series_get(m, (const char *const[]){"error"}, 1, &l->scrapes_err);
    }
    if (!rc) {
        struct prom_desc d = {PROM_COUNTER,
                              "cinfer_autoscaler_scale_total",
                              "Replica changes written through /scale, by direction",
                              (const char *const[]){"direction"},
                              1,
                              NULL,
                              0};
        rc = prom_registry_add(r, &d, &m);
        if (!rc) rc = prom_series_get(m, (const char *const[]){"up"}, 1, &l->scale_up);
        if (!rc) rc = prom_series_get(m, (const char *const[]){"down"}, 1, &l->scale_down);
    }
    if (!rc)
        rc = add_series(r, PROM_COUNTER, "cinfer_autoscaler_scale_down_held_total",
                        "Scale-downs withheld because an engine's metrics were missing", &l->holds);
    if (!rc)
        rc = add_series(r, PROM_COUNTER, "cinfer_autoscaler_api_errors_total",
                        "Failed API server writes (scale, status, events, annotations)",
                        &l->api_errors);
    if (!rc)
        rc = add_series(r, PROM_GAUGE, "cinfer_autoscaler_leader",
                        "1 while this replica holds the leader lease", &l->is_leader);
    return rc;
}

/* ------------------------------------------------------------------------------------------------
 * One round
 * ---------------------------------------------------------------------------------------------- */

/* Appends the pods (or --target URLs) of one service to `pods`; grows it as needed. */
static int discover(struct loop *l, const json_t *isvc, struct round_pod **pods, size_t *n,
                    size_t *cap, int *not_ready)
{
    const char *ns = json_util_str_at(isvc, "metadata", "namespace"),
               *name = json_util_str_at(isvc, "metadata", "name");
    json_t *list = NULL;
    size_t want = 0;
    bool by_target = false;
    for (size_t i = 0; i < l->targets.n; i++)
        if (strcmp(l->targets.v[i].name, name) == 0) want++, by_target = true;
    if (!by_target) {
        const char *sel = json_util_str_at(isvc, "status", "selector");
        if (!sel || !*sel) return 0; /* the operator has not published the selector yet */
        struct k8s_ref ref = {&k8s_resource_pods, ns, NULL, NULL};
        struct k8s_list_opts lo = {.label_selector = sel};
        int rc = k8s_client_list(l->client, &ref, &lo, &list);
        if (rc) {
            log_warn("cannot list pods", LOG_S("inferenceservice", name),
                     LOG_S("error", k8s_client_errmsg(l->client)));
            return rc;
        }
        want = json_array_size(json_object_get(list, "items"));
        if (want > MAX_PODS_PER_SERVICE) want = MAX_PODS_PER_SERVICE;
    }
    if (*n + want > *cap) {
        size_t nc = (*n + want) * 2;
        struct round_pod *v = realloc(*pods, nc * sizeof(*v));
        if (!v) {
            json_decref(list);
            return ERR_NOMEM;
        }
        *pods = v;
        *cap = nc;
    }
    if (by_target) {
        for (size_t i = 0; i < l->targets.n; i++) {
            if (strcmp(l->targets.v[i].name, name) != 0) continue;
            struct round_pod *p = &(*pods)[(*n)++];
            snprintf(p->key, sizeof(p->key), "%s", l->targets.v[i].url);
            p->pod[0] = '\0';
            p->cost[0] = '\0';
            snprintf(p->url, sizeof(p->url), "%s", l->targets.v[i].url);
        }
        return 0;
    }
    size_t i;
    json_t *pod;
    json_array_foreach(json_object_get(list, "items"), i, pod)
    {
        if (i >= want) break;
        struct round_pod *p = &(*pods)[*n];
        if (!loop_pod_endpoint(pod, p->url, sizeof(p->url))) {
            if (!json_object_get(json_object_get(pod, "metadata"), "deletionTimestamp"))
                (*not_ready)++;
            continue;
        }
        const char *uid = json_util_str_at(pod, "metadata", "uid"),
                   *pname = json_util_str_at(pod, "metadata", "name");
        snprintf(p->key, sizeof(p->key), "%s", uid ? uid : pname ? pname : p->url);
        snprintf(p->pod, sizeof(p->pod), "%s", pname ? pname : "");
        const char *cost = json_string_value(json_object_get(
            json_object_get(json_object_get(pod, "metadata"), "annotations"), VICTIMS_ANNOTATION));
        snprintf(p->cost, sizeof(p->cost), "%s",
                 cost && strlen(cost) < sizeof(p->cost) ? cost : "");
        (*n)++;
    }
    json_decref(list);
    return 0;
}

/* Before a scale-down: ranks the pods with victims.h (unready first, then least prefix-cache
 * value, fewest in-flight requests) and writes the resulting controller.kubernetes.io/
 * pod-deletion-cost where it differs from the pod's current annotation, so the ReplicaSet
 * controller removes the cheapest pods. Failures are logged: the scale-down proceeds anyway. */
static void annotate_victims(struct loop *l, const char *ns, const struct round_pod *pods,
                             const struct scrape_target *t, size_t n)
{
    struct victims_pod *v = n ? calloc(n, sizeof(*v)) : NULL;
    char(*costs)[VICTIMS_COST_LEN] = n ? calloc(n, sizeof(*costs)) : NULL;
    if (!v || !costs) goto out;
    for (size_t i = 0; i < n; i++) {
        const struct scrape_metrics *m = &t[i].metrics;
        bool ok = t[i].rc == 0;
        v[i] = (struct victims_pod){
            .name = pods[i].pod,
            .cache_value = ok && m->prefix_queries > 0 ? m->prefix_hits / m->prefix_queries : 0,
            .in_flight = ok ? (int)fmin(m->running + m->waiting, 1e9) : 0,
            .ready = ok,
        };
    }
    if (victims_costs(v, n, costs) != 0) goto out;
    for (size_t i = 0; i < n; i++) {
        if (!pods[i].pod[0] || strcmp(pods[i].cost, costs[i]) == 0) continue;
        if (actuate_deletion_cost(l->client, ns, pods[i].pod, costs[i]) != 0) {
            prom_counter_inc(l->api_errors, 1);
            log_warn("cannot annotate pod deletion cost", LOG_S("pod", pods[i].pod),
                     LOG_S("error", k8s_client_errmsg(l->client)));
        }
    }
out:
    free(v);
    free(costs);
}

/* Replaces the service's previous round with this one. */
static int keep_round(struct svc *s, const struct signals_pod *cur, const struct round_pod *pods,
                      size_t n)
{
    struct signals_pod *p = n ? calloc(n, sizeof(*p)) : NULL;
    char(*k)[KEY_MAX] = n ? calloc(n, sizeof(*k)) : NULL;
    if (n && (!p || !k)) {
        free(p);
        free(k);
        return ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        p[i] = cur[i];
        snprintf(k[i], KEY_MAX, "%s", pods[i].key);
        p[i].key = k[i];
    }
    free(s->prev);
    free(s->prev_keys);
    s->prev = p;
    s->prev_keys = k;
    s->n_prev = n;
    return 0;
}

/* Requests the routers hold for `isvc` this round: the sum over routers, or -1 when unknown (no
 * router configured, or none held any while one did not answer). */
static double router_held(const struct loop *l, const json_t *isvc)
{
    if (!l->routers_configured) return -1;
    const char *model = loop_served_name(isvc);
    if (!model) return -1;
    struct prom_label match = {METRIC_LABEL_MODEL_NAME, model};
    double held = 0;
    for (size_t i = 0; i < l->n_routers; i++) {
        double v = 0;
        prom_exposition_sum(l->routers[i], METRIC_ROUTER_REQUESTS_HELD, &match, 1, &v);
        if (v > 0) held += v;
    }
    return held > 0 ? held : l->routers_failed || l->n_routers == 0 ? -1 : 0;
}

static void router_scrape_one(struct loop *l, const char *url)
{
    if (l->n_routers == MAX_ROUTERS) return;
    struct http_request req = {.url = url,
                               .timeout_ms = (long)(l->cfg->scrape_timeout_s * 1000),
                               .max_response = ROUTER_METRICS_MAX};
    struct http_response resp;
    http_response_init(&resp);
    char perr[160] = "";
    int rc = http_client_do(l->http, &req, &resp);
    if (!rc && resp.status != 200) rc = ERR_HTTP;
    struct prom_exposition *e = NULL;
    if (!rc)
        rc = prom_parse(resp.body.data ? resp.body.data : "", resp.body.len, NULL, &e, perr,
                        sizeof(perr));
    if (rc) {
        l->routers_failed = true;
        prom_counter_inc(l->scrapes_err, 1);
        log_warn("router scrape failed", LOG_S("url", url), LOG_I("status", resp.status),
                 LOG_S("error", perr[0] ? perr : http_client_errmsg(l->http)));
    } else {
        prom_counter_inc(l->scrapes_ok, 1);
        l->routers[l->n_routers++] = e;
    }
    http_response_fini(&resp);
}

/* Scrapes every router (--router-url, and the pods --router-selector names) for held requests. */
static void router_scrape(struct loop *l)
{
    const struct loop_cfg *cfg = l->cfg;
    for (size_t i = 0; i < l->n_routers; i++) prom_exposition_free(l->routers[i]);
    l->n_routers = 0;
    l->routers_failed = false;
    l->routers_configured =
        (cfg->router_urls && *cfg->router_urls) || (cfg->router_selector && *cfg->router_selector);
    if (!l->routers_configured || !l->http) return;
    for (const char *p = cfg->router_urls ? cfg->router_urls : ""; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char url[512];
        if (len > 0 && len < sizeof(url) - 8) {
            memcpy(url, p, len);
            url[len] = '\0';
            const char *host = strstr(url, "://");
            if (host && !strchr(host + 3, '/')) memcpy(url + len, "/metrics", 9);
            router_scrape_one(l, url);
        }
        p = end ? end + 1 : p + len;
    }
    if (!cfg->router_selector || !*cfg->router_selector) return;
    const char *ns =
        cfg->router_ns && *cfg->router_ns ? cfg->router_ns : k8s_client_config(l->client)->ns;
    struct k8s_ref ref = {&k8s_resource_pods, ns, NULL, NULL};
    struct k8s_list_opts lo = {.label_selector = cfg->router_selector};
    json_t *list = NULL;
    if (k8s_client_list(l->client, &ref, &lo, &list) != 0) {
        l->routers_failed = true;
        log_warn("cannot list router pods", LOG_S("error", k8s_client_errmsg(l->client)));
        return;
    }
    size_t i;
    json_t *pod;
    json_array_foreach(json_object_get(list, "items"), i, pod)
    {
        char url[512];
        if (!loop_pod_endpoint(pod, url, sizeof(url))) continue; /* not ready: not serving */
        const char *ip = json_util_str_at(pod, "status", "podIP");
        int n = strchr(ip, ':')
                    ? snprintf(url, sizeof(url), "http://[%s]:%d/metrics", ip, cfg->router_port)
                    : snprintf(url, sizeof(url), "http://%s:%d/metrics", ip, cfg->router_port);
        if (n > 0 && (size_t)n < sizeof(url)) router_scrape_one(l, url);
    }
    json_decref(list);
}

static void decide(struct loop *l, struct round_svc *rs, const struct round_pod *pods,
                   const struct scrape_target *t, double now_mono)
{
    struct svc *s = rs->svc;
    const json_t *isvc = rs->isvc;
    const char *ns = json_util_str_at(isvc, "metadata", "namespace"),
               *name = json_util_str_at(isvc, "metadata", "name");
    struct signals_pod *cur = rs->n ? calloc(rs->n, sizeof(*cur)) : NULL;
    if (rs->n && !cur) return;
    int failed = 0;
    for (size_t i = 0; i < rs->n; i++) {
        cur[i] = (struct signals_pod){
            .key = pods[i].key, .time_s = now_mono, .ok = t[i].rc == 0, .m = t[i].metrics};
        if (t[i].rc == 0) {
            prom_counter_inc(l->scrapes_ok, 1);
        } else {
            failed++;
            prom_counter_inc(l->scrapes_err, 1);
            log_warn("scrape failed", LOG_S("inferenceservice", s->key), LOG_S("url", pods[i].url),
                     LOG_S("error", t[i].error));
        }
    }
    struct policy_signals sig;
    signals_compute(s->prev, s->n_prev, cur, rs->n, rs->not_ready, now_mono, &sig);
    if (keep_round(s, cur, pods, rs->n) != 0) log_warn("out of memory keeping the scrape round");
    free(cur);

    int current = (int)json_util_int_at(isvc, "spec", "replicas", 1);
    const char *rv = json_util_str_at(isvc, "metadata", "resourceVersion");
    if (s->written_rv[0] && rv && strcmp(rv, s->written_rv) == 0)
        current = s->written;
    else
        s->written_rv[0] = '\0';
    struct policy_decision d;
    policy_decide(s->st, &sig, current, &d);
    int desired = d.desired;
    char reason[REASON_MAX];
    snprintf(reason, sizeof(reason), "%s", d.reason);
    if (s->zero) {
        double held = router_held(l, isvc);
        bool busy = sig.running + sig.waiting > 0 || sig.arrival_rate > 0;
        if (busy || held > 0 || s->last_active == 0) s->last_active = now_mono;
        struct loop_zero_in zin = {
            .current = current,
            .policy_desired = desired,
            .zero_allowed = true,
            .held = held,
            .busy = busy,
            .idle_s = now_mono - s->last_active,
            .scale_to_zero_s =
                (double)json_util_int_at(json_util_at(isvc, "spec", "scaling"),
                                         "scaleToZeroSeconds", NULL, SCALE_TO_ZERO_DEF_S),
        };
        char zr[REASON_MAX];
        desired = loop_zero_decide(&zin, zr, sizeof(zr));
        if (zr[0]) snprintf(reason, sizeof(reason), "%s", zr);
    }
    /* Missing metrics never cause a scale-down: with no usable metrics, or with an engine that
     * is ready but did not answer, a lower recommendation may only reflect what we cannot see. */
    bool held = false, scale_failed = false;
    if (desired < current && (!sig.metrics_ok || failed > 0)) {
        prom_counter_inc(l->holds, 1);
        held = true;
        if (failed > 0)
            snprintf(reason, sizeof(reason),
                     "holding %d replicas: metrics missing from %d of %zu engines", current, failed,
                     rs->n);
        else
            snprintf(reason, sizeof(reason), "holding %d replicas: no engine metrics", current);
        desired = current;
    }
    time_t now = time(NULL);
    if (desired != current) {
        if (desired < current) annotate_victims(l, ns, pods, t, rs->n);
        if (actuate_scale(l->client, ns, name, desired) != 0) {
            prom_counter_inc(l->api_errors, 1);
            log_warn("cannot write /scale", LOG_S("inferenceservice", s->key),
                     LOG_S("error", k8s_client_errmsg(l->client)));
            scale_failed = true; /* status says so (AbleToScale False); retried next interval */
        }
    }
    if (desired != current && !scale_failed) {
        s->last_scale = now;
        s->written = desired;
        snprintf(s->written_rv, sizeof(s->written_rv), "%s", rv ? rv : "");
        prom_counter_inc(desired > current ? l->scale_up : l->scale_down, 1);
        char msg[sizeof(reason) + 64];
        snprintf(msg, sizeof(msg), "Scaled from %d to %d replicas: %s", current, desired, reason);
        log_info("scaled", LOG_S("inferenceservice", s->key), LOG_I("from", current),
                 LOG_I("to", desired), LOG_S("reason", reason));
        json_t *ev = actuate_event_new(ns, name, json_util_str_at(isvc, "metadata", "uid"),
                                       desired > current ? "ScaledUp" : "ScaledDown", msg, now);
        if (!ev || actuate_event_record(l->client, ns, ev) != 0) {
            prom_counter_inc(l->api_errors, 1);
            log_warn("cannot record event", LOG_S("inferenceservice", s->key),
                     LOG_S("error", k8s_client_errmsg(l->client)));
        }
        json_decref(ev);
    }
    prom_gauge_set(s->desired_gauge, desired);
    bool changed = desired != s->last_desired || strcmp(reason, s->last_reason) != 0 ||
                   s->last_scale == now || scale_failed != s->last_scale_failed;
    if (changed || now - s->last_status_write >= STATUS_REFRESH_S) {
        json_t *gen = json_object_get(json_object_get(isvc, "metadata"), "generation");
        const json_t *prev = json_object_get(
            json_object_get(json_object_get(isvc, "status"), "autoscaling"), "conditions");
        struct actuate_status st = {
            .desired = desired,
            .reason = reason,
            .last_scale = s->last_scale,
            .sig = &sig,
            .dec = &d,
            .spec = &s->spec,
            .generation = json_is_integer(gen) ? (long long)json_integer_value(gen) : 0,
            .prev_conditions = prev,
            .scale_failed = scale_failed,
            .held = held,
            .now = now};
        json_t *patch = actuate_status_patch(&st);
        if (!patch || actuate_status_write(l->client, ns, name, patch) != 0) {
            prom_counter_inc(l->api_errors, 1);
            log_warn("cannot write status.autoscaling", LOG_S("inferenceservice", s->key),
                     LOG_S("error", k8s_client_errmsg(l->client)));
        } else {
            s->last_status_write = now;
            s->last_desired = desired;
            s->last_scale_failed = scale_failed;
            snprintf(s->last_reason, sizeof(s->last_reason), "%s", reason);
        }
        json_decref(patch);
    }
    log_debug("decided", LOG_S("inferenceservice", s->key), LOG_I("current", current),
              LOG_I("desired", desired), LOG_B("metrics_ok", sig.metrics_ok),
              LOG_F("waiting", sig.waiting), LOG_F("running", sig.running),
              LOG_F("arrival_rate", sig.arrival_rate), LOG_S("reason", reason));
}

/* Looks up the service state for `isvc` (creating it, or resetting it when the spec changed). */
static struct svc *svc_for(struct loop *l, const json_t *isvc, const struct policy_spec *spec)
{
    char key[KEY_MAX];
    const char *ns = json_util_str_at(isvc, "metadata", "namespace"),
               *name = json_util_str_at(isvc, "metadata", "name");
    if (!ns || !name) return NULL;
    snprintf(key, sizeof(key), "%s/%s", ns, name);
    struct svc *s = svc_get(l, key);
    if (!s) return NULL;
    if (!s->st || !spec_same(&s->spec, spec)) {
        policy_state_free(s->st);
        s->spec = *spec;
        s->st = policy_state_new(spec);
        if (!s->st) return NULL;
        log_info("managing", LOG_S("inferenceservice", key), LOG_I("min", spec->min_replicas),
                 LOG_I("max", spec->max_replicas),
                 LOG_S("policy", spec->kind == POLICY_PREDICTIVE ? "predictive" : "reactive"));
    }
    if (!s->desired_gauge &&
        prom_series_get(l->desired_metric, (const char *const[]){ns, name}, 2, &s->desired_gauge))
        return NULL;
    s->seen = true;
    return s;
}

static void round_run(struct loop *l)
{
    const struct loop_cfg *cfg = l->cfg;
    double t0 = clock_mono_s();
    json_t *all = informer_list(l->isvcs, NULL, NULL);
    struct round_svc *rsv = calloc(json_array_size(all) + 1, sizeof(*rsv));
    struct round_pod *pods = NULL;
    struct scrape_target *targets = NULL;
    size_t n_rs = 0, n_pods = 0, cap_pods = 0;
    if (!all || !rsv) goto out;
    size_t i;
    json_t *isvc;
    json_array_foreach(all, i, isvc)
    {
        struct policy_spec spec;
        if (!loop_spec_from_isvc(isvc, cfg->interval_s, &spec)) continue;
        spec.startup_s = cfg->startup_s;
        /* The policy keeps at least one replica; loop_zero_decide owns the way to zero. */
        bool zero = spec.min_replicas == 0;
        if (zero) spec.min_replicas = 1;
        if (spec.max_replicas < spec.min_replicas) spec.max_replicas = spec.min_replicas;
        struct svc *s = svc_for(l, isvc, &spec);
        if (!s) continue;
        s->zero = zero;
        struct round_svc *rs = &rsv[n_rs];
        *rs = (struct round_svc){.svc = s, .isvc = isvc, .first = n_pods};
        if (discover(l, isvc, &pods, &n_pods, &cap_pods, &rs->not_ready) != 0) continue;
        rs->n = n_pods - rs->first;
        n_rs++;
    }
    svc_sweep(l);
    router_scrape(l);
    targets = n_pods ? calloc(n_pods, sizeof(*targets)) : NULL;
    if (n_pods && !targets) goto out;
    for (i = 0; i < n_pods; i++) targets[i].url = pods[i].url;
    struct scrape_opts so = {.timeout_ms = (long)(cfg->scrape_timeout_s * 1000)};
    if (scrape_run(targets, n_pods, &so) != 0) goto out;
    double now = clock_mono_s();
    for (i = 0; i < n_rs && !shutdown_requested(); i++)
        decide(l, &rsv[i], pods + rsv[i].first, targets + rsv[i].first, now);
    prom_counter_inc(l->rounds, 1);
    prom_histogram_observe(l->round_duration, clock_mono_s() - t0);
out:
    free(targets);
    free(pods);
    free(rsv);
    json_decref(all);
}

/* ------------------------------------------------------------------------------------------------
 * Run
 * ---------------------------------------------------------------------------------------------- */

static void on_started_leading(void *ctx)
{
    struct loop *l = ctx;
    atomic_store(&l->leading, true);
    prom_gauge_set(l->is_leader, 1);
}

static void on_stopped_leading(void *ctx)
{
    struct loop *l = ctx;
    prom_gauge_set(l->is_leader, 0);
    if (atomic_exchange(&l->leading, false) && !shutdown_requested()) {
        atomic_store(&l->lost, true);
        shutdown_request(); /* a follower must not keep scaling */
    }
}

static int elect(struct loop *l)
{
    const struct loop_cfg *cfg = l->cfg;
    char lease_ns[254];
    snprintf(lease_ns, sizeof(lease_ns), "%s",
             cfg->lease_ns && *cfg->lease_ns ? cfg->lease_ns : k8s_client_config(l->client)->ns);
    struct leader_opts lo = {.ns = lease_ns,
                             .name = "cinfer-autoscaler",
                             .identity = cfg->identity,
                             .new_client = new_client,
                             .client_ctx = (void *)cfg,
                             .on_started = on_started_leading,
                             .on_stopped = on_stopped_leading,
                             .cb_ctx = l};
    int rc = leader_start(&lo, &l->leader);
    if (rc) return rc;
    log_info("waiting for leadership", LOG_S("lease", "cinfer-autoscaler"),
             LOG_S("namespace", lease_ns), LOG_S("identity", leader_identity(l->leader)));
    while (!atomic_load(&l->leading) && !shutdown_wait(100)) {
    }
    return 0;
}

int loop_run(const struct loop_cfg *cfg)
{
    struct loop l = {.cfg = cfg};
    char err[256] = "";
    int rc = loop_targets_parse(cfg->targets, &l.targets, err, sizeof(err));
    if (rc) {
        log_error("invalid --target", LOG_S("error", err));
        return rc;
    }
    rc = register_metrics(&l, cfg->metrics);
    if (!rc) rc = new_client((void *)cfg, &l.client);
    if (rc) goto out;
    if ((cfg->router_urls && *cfg->router_urls) ||
        (cfg->router_selector && *cfg->router_selector)) {
        char herr[HTTP_CLIENT_ERRMSG_MAX] = "";
        struct http_client_opts ho = {.user_agent = "cinfer-autoscaler"};
        if ((rc = http_client_new(&ho, &l.http, herr)) != 0) {
            log_error("cannot create the router scrape client", LOG_S("error", herr));
            goto out;
        }
    }
    if (cfg->leader_elect) {
        rc = elect(&l);
        if (rc || shutdown_requested()) goto out;
    } else {
        atomic_store(&l.leading, true);
    }
    struct informer_opts io = {.name = "inferenceservices",
                               .res = &actuate_resource_isvcs,
                               .ns = cfg->ns && *cfg->ns ? cfg->ns : NULL,
                               .new_client = new_client,
                               .client_ctx = (void *)cfg};
    rc = informer_start(&io, &l.isvcs);
    if (rc) goto out;
    while (!informer_has_synced(l.isvcs) && !shutdown_wait(50)) {
    }
    if (shutdown_requested()) goto out;
    if (cfg->set_ready) cfg->set_ready(cfg->ready_ctx, true);
    log_info("control loop started", LOG_F("interval_s", cfg->interval_s),
             LOG_S("namespace", cfg->ns && *cfg->ns ? cfg->ns : "(all)"),
             LOG_I("targets", l.targets.n));
    int interval_ms = (int)(cfg->interval_s * 1000);
    while (!shutdown_requested()) {
        double t0 = clock_mono_s();
        round_run(&l);
        int spent = (int)((clock_mono_s() - t0) * 1000);
        if (shutdown_wait(spent < interval_ms ? interval_ms - spent : 0)) break;
    }
out:
    if (cfg->set_ready) cfg->set_ready(cfg->ready_ctx, false);
    informer_free(l.isvcs);
    bool lost = atomic_load(&l.lost);
    leader_free(l.leader);
    for (size_t i = 0; i < l.n_svcs; i++) svc_free(l.svcs[i]);
    free(l.svcs);
    k8s_client_free(l.client);
    for (size_t i = 0; i < l.n_routers; i++) prom_exposition_free(l.routers[i]);
    http_client_free(l.http);
    loop_targets_fini(&l.targets);
    if (lost) {
        log_error("leadership lost; exiting so that a new leader takes over");
        return ERR_BAD_STATE;
    }
    return rc;
}
