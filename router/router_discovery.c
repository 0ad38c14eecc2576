/* In-cluster discovery (see router_discovery.h). */
#include "router/router_discovery.h"

#include "common/err.h"
#include "common/informer.h"
#include "common/json_util.h"
#include "common/k8s/client.h"
#include "common/log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RD_ENGINE_PORT   8000 /* ARCHITECTURE.md: the engine's one HTTP port */
#define RD_POD_SELECTOR  "app.kubernetes.io/name=cinfer-engine"
#define RD_ISVC_LABEL    "serving.cinfer.io/inferenceservice"
#define RD_MAX_ENDPOINTS 1024
#define RD_RESYNC_MS     5000 /* re-derive even without events (pods ageing into Ready, etc.) */

static const struct k8s_resource rd_resource_isvcs = {"serving.cinfer.io", "v1alpha1",
                                                      "inferenceservices", true};

struct router_discovery {
    struct router_discovery_cfg cfg;
    char ns[254];
    char kubeconfig[1024];
    struct informer *isvcs, *pods;
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    bool dirty, stop;
    atomic_bool synced;
    char (*served)[ROUTER_MODEL_MAX]; /* models handed to the proxy last time */
    size_t n_served;
};

const char *router_discovery_model_name(const json_t *isvc)
{
    const char *served = json_util_str_at(json_util_at(isvc, "spec", "model"), "servedName", NULL);
    if (served && *served) return served;
    return json_util_str_at(isvc, "metadata", "name");
}

json_t *router_discovery_selector(const char *selector)
{
    json_t *o = json_object();
    const char *p = selector;
    while (o && p && *p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (!eq || eq == p || memchr(p, '!', len) || memchr(p, '(', len) || memchr(p, ' ', len))
            goto bad;
        const char *v = eq + 1;
        if (v < p + len && *v == '=') v++;
        char key[254], val[254];
        size_t kl = (size_t)(eq - p), vl = (size_t)(p + len - v);
        if (kl >= sizeof(key) || vl >= sizeof(val)) goto bad;
        memcpy(key, p, kl);
        key[kl] = '\0';
        memcpy(val, v, vl);
        val[vl] = '\0';
        if (json_object_set_new(o, key, json_string(val)) != 0) goto bad;
        p = end ? end + 1 : p + len;
    }
    return o;
bad:
    json_decref(o);
    return NULL;
}

static int container_port(const json_t *pod)
{
    size_t i, j;
    json_t *c, *port;
    json_array_foreach(json_util_at(pod, "spec", "containers"), i, c)
    {
        json_array_foreach(json_object_get(c, "ports"), j, port)
        {
            const char *name = json_string_value(json_object_get(port, "name"));
            json_t *n = json_object_get(port, "containerPort");
            if (name && strcmp(name, "http") == 0 && json_is_integer(n) &&
                json_integer_value(n) > 0 && json_integer_value(n) < 65536)
                return (int)json_integer_value(n);
        }
    }
    return RD_ENGINE_PORT;
}

bool router_discovery_endpoint(const json_t *pod, struct router_endpoint *ep)
{
    const json_t *status = json_object_get(pod, "status");
    const char *ip = json_string_value(json_object_get(status, "podIP"));
    const char *phase = json_string_value(json_object_get(status, "phase"));
    const char *name = json_util_str_at(pod, "metadata", "name");
    if (!ip || !*ip || !name) return false;
    memset(ep, 0, sizeof(*ep));
    snprintf(ep->key, sizeof(ep->key), "%s", name);
    int port = container_port(pod);
    int n = strchr(ip, ':') ? snprintf(ep->url, sizeof(ep->url), "http://[%s]:%d", ip, port)
                            : snprintf(ep->url, sizeof(ep->url), "http://%s:%d", ip, port);
    if (n <= 0 || (size_t)n >= sizeof(ep->url)) return false;
    ep->terminating =
        json_object_get(json_object_get(pod, "metadata"), "deletionTimestamp") != NULL;
    bool ready = false;
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(status, "conditions"), i, c)
    {
        const char *type = json_util_str_at(c, "type", NULL),
                   *st = json_util_str_at(c, "status", NULL);
        if (type && st && strcmp(type, "Ready") == 0) ready = strcmp(st, "True") == 0;
    }
    ep->ready = ready && phase && strcmp(phase, "Running") == 0;
    return true;
}

/* ---- the thread ------------------------------------------------------------------------------ */

static int new_client(void *ctx, struct k8s_client **out)
{
    struct router_discovery *d = ctx;
    struct k8s_config *kc = NULL;
    char err[K8S_ERRMSG_MAX];
    int rc = d->kubeconfig[0]
                 ? k8s_config_load_kubeconfig(d->kubeconfig, NULL, &kc, err, sizeof(err))
                 : k8s_config_load_default(NULL, &kc, err, sizeof(err));
    if (!rc) {
        struct k8s_client_opts o = {.user_agent = "cinfer-router"};
        rc = k8s_client_new(kc, &o, out, err, sizeof(err));
    }
    if (rc) log_error("cannot create Kubernetes client", LOG_S("error", err));
    return rc;
}

static void on_event(void *ctx, enum k8s_watch_type type, const json_t *obj)
{
    (void)type, (void)obj;
    struct router_discovery *d = ctx;
    pthread_mutex_lock(&d->mu);
    d->dirty = true;
    pthread_cond_signal(&d->cond);
    pthread_mutex_unlock(&d->mu);
}

static bool served_has(char (*v)[ROUTER_MODEL_MAX], size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i], name) == 0) return true;
    return false;
}

/* Derives every model's endpoints from the caches and hands them to the proxy. */
static void derive(struct router_discovery *d)
{
    json_t *isvcs = informer_list(d->isvcs, NULL, NULL);
    size_t n_isvcs = json_array_size(isvcs);
    char(*models)[ROUTER_MODEL_MAX] = n_isvcs ? calloc(n_isvcs, sizeof(*models)) : NULL;
    struct router_endpoint *eps = calloc(RD_MAX_ENDPOINTS, sizeof(*eps));
    size_t n_models = 0;
    if (!isvcs || (n_isvcs && !models) || !eps) goto out;
    size_t i;
    json_t *isvc;
    json_array_foreach(isvcs, i, isvc)
    {
        const char *model = router_discovery_model_name(isvc);
        if (!model || strlen(model) >= ROUTER_MODEL_MAX || served_has(models, n_models, model))
            continue; /* a served name two services share: the first one listed serves it */
        snprintf(models[n_models++], ROUTER_MODEL_MAX, "%s", model);
        size_t n = 0;
        /* Every InferenceService with this served name contributes its pods. */
        for (size_t k = i; k < n_isvcs; k++) {
            const json_t *s = json_array_get(isvcs, k);
            const char *mk = router_discovery_model_name(s);
            if (!mk || strcmp(mk, model) != 0) continue;
            const char *ns = json_util_str_at(s, "metadata", "namespace");
            const char *name = json_util_str_at(s, "metadata", "name");
            const char *sel = json_util_str_at(s, "status", "selector");
            json_t *match = sel && *sel ? router_discovery_selector(sel) : NULL;
            if (!match) match = json_pack("{s:s}", RD_ISVC_LABEL, name ? name : "");
            json_t *pods = match ? informer_list(d->pods, ns, match) : NULL;
            size_t j;
            json_t *pod;
            json_array_foreach(pods, j, pod)
            {
                if (n < RD_MAX_ENDPOINTS && router_discovery_endpoint(pod, &eps[n])) n++;
            }
            json_decref(pods);
            json_decref(match);
        }
        if (router_proxy_set_model(d->cfg.proxy, model, eps, n) != 0)
            log_warn("cannot update a model's replicas", LOG_S("model", model));
    }
    for (size_t k = 0; k < d->n_served; k++)
        if (!served_has(models, n_models, d->served[k]))
            router_proxy_remove_model(d->cfg.proxy, d->served[k]);
    free(d->served);
    d->served = models;
    d->n_served = n_models;
    models = NULL;
out:
    free(models);
    free(eps);
    json_decref(isvcs);
}

static void *rd_main(void *arg)
{
    struct router_discovery *d = arg;
    while (!(informer_has_synced(d->isvcs) && informer_has_synced(d->pods))) {
        pthread_mutex_lock(&d->mu);
        bool stop = d->stop;
        pthread_mutex_unlock(&d->mu);
        if (stop) return NULL;
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    for (;;) {
        derive(d);
        atomic_store(&d->synced, true);
        pthread_mutex_lock(&d->mu);
        if (!d->dirty && !d->stop) {
            struct timespec dl;
            clock_gettime(CLOCK_REALTIME, &dl);
            dl.tv_sec += RD_RESYNC_MS / 1000;
            pthread_cond_timedwait(&d->cond, &d->mu, &dl);
        }
        bool stop = d->stop;
        d->dirty = false;
        pthread_mutex_unlock(&d->mu);
        if (stop) break;
    }
    return NULL;
}

int router_discovery_start(const struct router_discovery_cfg *cfg, struct router_discovery **out)
{
    struct router_discovery *d = calloc(1, sizeof(*d));
    if (!d) return ERR_NOMEM;
    d->cfg = *cfg;
    snprintf(d->ns, sizeof(d->ns), "%s", cfg->ns ? cfg->ns : "");
    snprintf(d->kubeconfig, sizeof(d->kubeconfig), "%s", cfg->kubeconfig ? cfg->kubeconfig : "");
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cond, NULL);
    atomic_init(&d->synced, false);
    struct informer_opts io = {.name = "inferenceservices",
                               .res = &rd_resource_isvcs,
                               .ns = d->ns[0] ? d->ns : NULL,
                               .new_client = new_client,
                               .client_ctx = d,
                               .on_event = on_event,
                               .event_ctx = d};
    int rc = informer_start(&io, &d->isvcs);
    if (!rc) {
        io.name = "pods";
        io.res = &k8s_resource_pods;
        io.label_selector = RD_POD_SELECTOR;
        rc = informer_start(&io, &d->pods);
    }
    if (!rc && pthread_create(&d->thread, NULL, rd_main, d) != 0) rc = ERR_NOMEM;
    if (rc) {
        router_discovery_free(d);
        return rc;
    }
    d->started = true;
    *out = d;
    return 0;
}

bool router_discovery_synced(struct router_discovery *d)
{
    return atomic_load(&d->synced);
}

void router_discovery_free(struct router_discovery *d)
{
    if (!d) return;
    pthread_mutex_lock(&d->mu);
    d->stop = true;
    pthread_cond_signal(&d->cond);
    pthread_mutex_unlock(&d->mu);
    if (d->started) pthread_join(d->thread, NULL);
    informer_free(d->isvcs);
    informer_free(d->pods);
    free(d->served);
    pthread_cond_destroy(&d->cond);
    pthread_mutex_destroy(&d->mu);
    free(d);
}
