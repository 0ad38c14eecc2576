/* List+watch cache of one Kubernetes kind (see informer.h).
 * The cache is a jansson object keyed "ns/name" holding immutable objects; the informer thread is
 * the only writer. A list of namespaces is one such informer per namespace behind a composite. */
#include "common/informer.h"

#include "common/err.h"
#include "common/json_util.h"
#include "common/k8s/names.h"
#include "common/log.h"
#include "common/shutdown.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BACKOFF_MIN_MS 200
#define BACKOFF_MAX_MS 30000

struct informer {
    struct informer_opts opts;
    char *ns, *label_selector;
    pthread_t thread;
    bool started;
    atomic_bool stop;
    atomic_bool synced;
    atomic_uint relists;
    pthread_mutex_t mu;
    pthread_cond_t synced_cv;
    json_t *store;             /* "ns/name" -> object; guarded by mu */
    char resource_version[64]; /* last seen; informer thread only */
    /* Several namespaces: one informer per namespace; this one has no thread or store of its own
     * and every public call combines the parts (multi_* below). */
    struct informer **parts;
    size_t n_parts;
};

static int multi_start(const struct informer_opts *opts, struct informer **out);

static int object_key(const json_t *obj, char *out, size_t outlen)
{
    const char *ns = json_util_str_at(obj, "metadata", "namespace"),
               *name = json_util_str_at(obj, "metadata", "name");
    if (!name) return ERR_INVAL;
    int n = snprintf(out, outlen, "%s/%s", ns ? ns : "", name);
    return n < 0 || (size_t)n >= outlen ? ERR_TOO_BIG : 0;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Sleeps up to `ms` in slices so that stop and shutdown are noticed quickly. */
static void backoff_sleep(struct informer *inf, long ms)
{
    for (long slept = 0; slept < ms && !atomic_load(&inf->stop) && !shutdown_requested();
         slept += 50)
        sleep_ms(50);
}

static void notify(struct informer *inf, enum k8s_watch_type type, const json_t *obj)
{
    if (inf->opts.on_event) inf->opts.on_event(inf->opts.event_ctx, type, obj);
}

/* Stores `obj` (borrowed) and reports ADDED or MODIFIED. */
static void store_put(struct informer *inf, const json_t *obj)
{
    char key[512];
    if (object_key(obj, key, sizeof(key))) return;
    pthread_mutex_lock(&inf->mu);
    bool existed = json_object_get(inf->store, key) != NULL;
    json_object_set(inf->store, key, (json_t *)obj);
    pthread_mutex_unlock(&inf->mu);
    /* A relist that finds an object unchanged still reports it (level-triggered resync). */
    notify(inf, existed ? K8S_WATCH_MODIFIED : K8S_WATCH_ADDED, obj);
}

static void store_delete(struct informer *inf, const json_t *obj)
{
    char key[512];
    if (object_key(obj, key, sizeof(key))) return;
    pthread_mutex_lock(&inf->mu);
    json_t *old = json_object_get(inf->store, key);
    json_incref(old);
    json_object_del(inf->store, key);
    pthread_mutex_unlock(&inf->mu);
    notify(inf, K8S_WATCH_DELETED, old ? old : obj);
    json_decref(old);
}

/* Lists every page, replaces the cache, reports the differences. */
static int relist(struct informer *inf, struct k8s_client *c)
{
    struct k8s_ref ref = {inf->opts.res, inf->ns, NULL, NULL};
    json_t *seen = json_object();
    char cont[1024] = "";
    int rc = seen ? 0 : ERR_NOMEM;
    while (!rc) {
        struct k8s_list_opts lo = {.label_selector = inf->label_selector,
                                   .limit = inf->opts.page_size ? inf->opts.page_size : 500,
                                   .continue_token = cont[0] ? cont : NULL};
        json_t *list = NULL;
        rc = k8s_client_list(c, &ref, &lo, &list);
        if (rc) {
            log_warn("list failed", LOG_S("informer", inf->opts.name),
                     LOG_S("error", k8s_client_errmsg(c)));
            break;
        }
        size_t i;
        json_t *item;
        json_array_foreach(json_object_get(list, "items"), i, item)
        {
            char key[512];
            if (object_key(item, key, sizeof(key)) == 0) json_object_set(seen, key, item);
        }
        const char *rv = json_util_str_at(list, "metadata", "resourceVersion");
        const char *next = json_util_str_at(list, "metadata", "continue");
        snprintf(inf->resource_version, sizeof(inf->resource_version), "%s", rv ? rv : "");
        snprintf(cont, sizeof(cont), "%s", next ? next : "");
        json_decref(list);
        if (!cont[0]) break;
    }
    if (!rc) {
        /* Deletions first, then adds/updates, so handlers see a consistent end state. */
        pthread_mutex_lock(&inf->mu);
        json_t *gone = json_array();
        const char *key;
        json_t *obj;
        json_object_foreach(inf->store, key, obj)
        {
            if (!json_object_get(seen, key)) json_array_append(gone, obj);
        }
        pthread_mutex_unlock(&inf->mu);
        size_t i;
        json_array_foreach(gone, i, obj) store_delete(inf, obj);
        json_decref(gone);
        json_object_foreach(seen, key, obj) store_put(inf, obj);
        atomic_fetch_add(&inf->relists, 1);
        if (!atomic_exchange(&inf->synced, true)) {
            pthread_mutex_lock(&inf->mu);
            pthread_cond_broadcast(&inf->synced_cv);
            pthread_mutex_unlock(&inf->mu);
            log_info("cache synced", LOG_S("informer", inf->opts.name),
                     LOG_I("objects", informer_len(inf)));
        }
    }
    json_decref(seen);
    return rc;
}

static int on_watch_event(void *ctx, const struct k8s_watch_event *ev)
{
    struct informer *inf = ctx;
    const char *rv = json_util_str_at(ev->object, "metadata", "resourceVersion");
    if (rv) snprintf(inf->resource_version, sizeof(inf->resource_version), "%s", rv);
    switch (ev->type) {
    case K8S_WATCH_ADDED:
    case K8S_WATCH_MODIFIED: store_put(inf, ev->object); break;
    case K8S_WATCH_DELETED: store_delete(inf, ev->object); break;
    default: break; /* BOOKMARK: only the resourceVersion matters */
    }
    return atomic_load(&inf->stop) ? K8S_WATCH_STOP : 0;
}

static void *informer_main(void *arg)
{
    struct informer *inf = arg;
    struct k8s_client *c = NULL;
    long backoff = BACKOFF_MIN_MS;
    bool need_list = true;
    while (!atomic_load(&inf->stop) && !shutdown_requested()) {
        int rc = c ? 0 : inf->opts.new_client(inf->opts.client_ctx, &c);
        if (!rc && need_list) rc = relist(inf, c);
        if (!rc) {
            need_list = false;
            struct k8s_ref ref = {inf->opts.res, inf->ns, NULL, NULL};
            struct k8s_watch_opts wo = {
                .label_selector = inf->label_selector,
                .resource_version = inf->resource_version,
                .allow_bookmarks = true,
                .timeout_seconds = inf->opts.watch_timeout_s ? inf->opts.watch_timeout_s : 300,
            };
            rc = k8s_client_watch(c, &ref, &wo, on_watch_event, inf);
            if (rc == 0) {
                backoff = BACKOFF_MIN_MS; /* server closed a healthy watch: resume at once */
                continue;
            }
        }
        if (rc == ERR_CANCELLED || atomic_load(&inf->stop)) break;
        if (rc == ERR_GONE) {
            log_info("watch expired; relisting", LOG_S("informer", inf->opts.name));
            need_list = true;
            continue;
        }
        log_warn("watch failed; retrying", LOG_S("informer", inf->opts.name),
                 LOG_S("error", c ? k8s_client_errmsg(c) : err_str(rc)),
                 LOG_I("backoff_ms", backoff));
        backoff_sleep(inf, backoff);
        backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
        /* A fresh connection after an outage; relist only if the version turns out expired. */
        k8s_client_free(c);
        c = NULL;
    }
    k8s_client_free(c);
    return NULL;
}

int informer_start(const struct informer_opts *opts, struct informer **out)
{
    if (opts->ns && strchr(opts->ns, ',')) return multi_start(opts, out);
    struct informer *inf = calloc(1, sizeof(*inf));
    if (!inf) return ERR_NOMEM;
    inf->opts = *opts;
    inf->store = json_object();
    inf->ns = opts->ns ? strdup(opts->ns) : NULL;
    inf->label_selector = opts->label_selector ? strdup(opts->label_selector) : NULL;
    pthread_mutex_init(&inf->mu, NULL);
    pthread_cond_init(&inf->synced_cv, NULL);
    if (!inf->store || (opts->ns && !inf->ns) || (opts->label_selector && !inf->label_selector) ||
        pthread_create(&inf->thread, NULL, informer_main, inf) != 0) {
        informer_free(inf);
        return ERR_NOMEM;
    }
    inf->started = true;
    *out = inf;
    return 0;
}

void informer_stop(struct informer *inf)
{
    for (size_t i = 0; inf && i < inf->n_parts; i++) informer_stop(inf->parts[i]);
    if (!inf || !inf->started) return;
    atomic_store(&inf->stop, true);
    pthread_join(inf->thread, NULL);
    inf->started = false;
}

void informer_free(struct informer *inf)
{
    if (!inf) return;
    informer_stop(inf);
    for (size_t i = 0; i < inf->n_parts; i++) informer_free(inf->parts[i]);
    free(inf->parts);
    json_decref(inf->store);
    free(inf->ns);
    free(inf->label_selector);
    pthread_cond_destroy(&inf->synced_cv);
    pthread_mutex_destroy(&inf->mu);
    free(inf);
}

bool informer_has_synced(struct informer *inf)
{
    for (size_t i = 0; i < inf->n_parts; i++)
        if (!informer_has_synced(inf->parts[i])) return false;
    return inf->n_parts ? true : atomic_load(&inf->synced);
}

static bool multi_wait_synced(struct informer *inf, long timeout_ms);

bool informer_wait_synced(struct informer *inf, long timeout_ms)
{
    if (inf->n_parts) return multi_wait_synced(inf, timeout_ms);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&inf->mu);
    while (!atomic_load(&inf->synced))
        if (pthread_cond_timedwait(&inf->synced_cv, &inf->mu, &ts) != 0) break;
    pthread_mutex_unlock(&inf->mu);
    return atomic_load(&inf->synced);
}

static struct informer *multi_part(struct informer *inf, const char *ns);

json_t *informer_get(struct informer *inf, const char *ns, const char *name)
{
    if (inf->n_parts) {
        struct informer *part = multi_part(inf, ns);
        return part ? informer_get(part, ns, name) : NULL;
    }
    char key[512];
    snprintf(key, sizeof(key), "%s/%s", ns ? ns : "", name);
    pthread_mutex_lock(&inf->mu);
    json_t *obj = json_incref(json_object_get(inf->store, key));
    pthread_mutex_unlock(&inf->mu);
    return obj;
}

static bool labels_match(const json_t *obj, const json_t *want)
{
    const json_t *labels = json_object_get(json_object_get(obj, "metadata"), "labels");
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)want, k, v)
    {
        const char *have = json_string_value(json_object_get(labels, k));
        if (!have || !json_string_value(v) || strcmp(have, json_string_value(v)) != 0) return false;
    }
    return true;
}

static json_t *multi_list(struct informer *inf, const char *ns, const json_t *match_labels);

json_t *informer_list(struct informer *inf, const char *ns, const json_t *match_labels)
{
    if (inf->n_parts) return multi_list(inf, ns, match_labels);
    json_t *out = json_array();
    if (!out) return NULL;
    pthread_mutex_lock(&inf->mu);
    const char *key;
    json_t *obj;
    json_object_foreach(inf->store, key, obj)
    {
        const char *ons = json_util_str_at(obj, "metadata", "namespace");
        if (ns && (!ons || strcmp(ns, ons) != 0)) continue;
        if (match_labels && !labels_match(obj, match_labels)) continue;
        json_array_append(out, obj);
    }
    pthread_mutex_unlock(&inf->mu);
    return out;
}

size_t informer_len(struct informer *inf)
{
    size_t sum = 0;
    for (size_t i = 0; i < inf->n_parts; i++) sum += informer_len(inf->parts[i]);
    if (inf->n_parts) return sum;
    pthread_mutex_lock(&inf->mu);
    size_t n = json_object_size(inf->store);
    pthread_mutex_unlock(&inf->mu);
    return n;
}

unsigned informer_relists(struct informer *inf)
{
    unsigned least = 0;
    for (size_t i = 0; i < inf->n_parts; i++) {
        unsigned r = informer_relists(inf->parts[i]);
        if (i == 0 || r < least) least = r;
    }
    return inf->n_parts ? least : atomic_load(&inf->relists);
}

/* --- several namespaces ------------------------------------------------------------------------ */

static int multi_start(const struct informer_opts *opts, struct informer **out)
{
    size_t n = 1;
    for (const char *c = opts->ns; *c; c++) n += *c == ',';
    struct informer *inf = calloc(1, sizeof(*inf));
    if (!inf) return ERR_NOMEM;
    inf->opts = *opts;
    pthread_mutex_init(&inf->mu, NULL);
    pthread_cond_init(&inf->synced_cv, NULL);
    inf->parts = calloc(n, sizeof(*inf->parts));
    int rc = inf->parts ? 0 : ERR_NOMEM;
    for (const char *p = opts->ns; !rc && p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char ns[64];
        if (!k8s_name_is_dns_label(p, len)) {
            log_error("informer: not a namespace list (a,b,...)", LOG_S("informer", opts->name),
                      LOG_S("namespaces", opts->ns));
            rc = ERR_INVAL;
            break;
        }
        snprintf(ns, sizeof(ns), "%.*s", (int)len, p);
        if (multi_part(inf, ns)) {
            log_error("informer: namespace listed twice", LOG_S("informer", opts->name),
                      LOG_S("namespace", ns));
            rc = ERR_INVAL;
            break;
        }
        struct informer_opts po = *opts;
        po.ns = ns;
        rc = informer_start(&po, &inf->parts[inf->n_parts]);
        if (!rc) inf->n_parts++;
        p = comma ? comma + 1 : NULL;
    }
    if (rc) {
        informer_free(inf);
        return rc;
    }
    *out = inf;
    return 0;
}

static struct informer *multi_part(struct informer *inf, const char *ns)
{
    for (size_t i = 0; ns && i < inf->n_parts; i++)
        if (strcmp(inf->parts[i]->ns, ns) == 0) return inf->parts[i];
    return NULL;
}

static bool multi_wait_synced(struct informer *inf, long timeout_ms)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (size_t i = 0; i < inf->n_parts; i++) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        long spent = (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
        if (!informer_wait_synced(inf->parts[i], timeout_ms > spent ? timeout_ms - spent : 0))
            return false;
    }
    return true;
}

static json_t *multi_list(struct informer *inf, const char *ns, const json_t *match_labels)
{
    if (ns) {
        struct informer *part = multi_part(inf, ns);
        return part ? informer_list(part, ns, match_labels) : json_array();
    }
    json_t *out = json_array();
    for (size_t i = 0; out && i < inf->n_parts; i++) {
        json_t *some = informer_list(inf->parts[i], NULL, match_labels);
        if (!some || json_array_extend(out, some) != 0) {
            json_decref(out);
            out = NULL;
        }
        json_decref(some);
    }
    return out;
}
