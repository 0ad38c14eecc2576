/* Lease-based leader election (see leader.h). */
#include "common/leader.h"

#include "common/err.h"
#include "common/json_util.h"
#include "common/log.h"
#include "common/shutdown.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

struct leader {
    struct leader_opts opts;
    char ns[254], name[254], identity[256];
    pthread_t thread;
    bool started;
    atomic_bool stop;
    atomic_bool leading;
    /* Last observed record (holder + renewTime) and when we saw it change; thread only. */
    char observed_holder[256], observed_renew[64];
    long long observed_ms;
};

static long long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Kubernetes MicroTime: RFC 3339 with microseconds, UTC. */
static void micro_time_now(char *out, size_t n)
{
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    size_t k = strftime(out, n, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + k, n - k, ".%06ldZ", (long)tv.tv_usec);
}

bool leader_can_acquire(const char *holder, const char *me, long long observed_ms,
                        long long duration_ms, long long now_ms)
{
    if (!holder || !*holder) return true;       /* free (never held, or released) */
    if (strcmp(holder, me) == 0) return true;   /* ours: renew */
    return now_ms - observed_ms >= duration_ms; /* the holder stopped renewing */
}

/* One acquire-or-renew attempt. Returns 0 when we hold the lease afterwards. */
static int try_acquire_or_renew(struct leader *l, struct k8s_client *c)
{
    struct k8s_ref ref = {&k8s_resource_leases, l->ns, l->name, NULL};
    char now[64];
    micro_time_now(now, sizeof(now));
    int dur_s = (l->opts.lease_duration_ms + 999) / 1000;
    json_t *lease = NULL;
    int rc = k8s_client_get(c, &ref, &lease);
    if (rc == ERR_NOT_FOUND) {
        json_t *obj = json_pack("{s:s, s:s, s:{s:s, s:s}, s:{s:s, s:i, s:s, s:s, s:i}}",
                                "apiVersion", "coordination.k8s.io/v1", "kind", "Lease", "metadata",
                                "name", l->name, "namespace", l->ns, "spec", "holderIdentity",
                                l->identity, "leaseDurationSeconds", dur_s, "acquireTime", now,
                                "renewTime", now, "leaseTransitions", 0);
        struct k8s_ref coll = {&k8s_resource_leases, l->ns, NULL, NULL};
        rc = obj ? k8s_client_create(c, &coll, obj, NULL) : ERR_NOMEM;
        json_decref(obj);
        if (!rc) {
            snprintf(l->observed_holder, sizeof(l->observed_holder), "%s", l->identity);
            l->observed_ms = mono_ms();
        }
        return rc;
    }
    if (rc) return rc;

    const char *holder = json_util_str_at(lease, "spec", "holderIdentity");
    const char *renew = json_util_str_at(lease, "spec", "renewTime");
    /* Track when the record last changed, on our own clock. */
    if (strcmp(l->observed_holder, holder ? holder : "") != 0 ||
        strcmp(l->observed_renew, renew ? renew : "") != 0 || !l->observed_ms) {
        snprintf(l->observed_holder, sizeof(l->observed_holder), "%s", holder ? holder : "");
        snprintf(l->observed_renew, sizeof(l->observed_renew), "%s", renew ? renew : "");
        l->observed_ms = mono_ms();
    }
    json_t *dur = json_object_get(json_object_get(lease, "spec"), "leaseDurationSeconds");
    long long dur_ms =
        json_is_integer(dur) ? json_integer_value(dur) * 1000 : l->opts.lease_duration_ms;
    if (!leader_can_acquire(holder, l->identity, l->observed_ms, dur_ms, mono_ms())) {
        json_decref(lease);
        return ERR_EXISTS;
    }
    json_t *spec = json_object_get(lease, "spec");
    if (!json_is_object(spec)) {
        spec = json_object();
        json_object_set_new(lease, "spec", spec);
    }
    bool taking_over = !holder || strcmp(holder, l->identity) != 0;
    if (taking_over) {
        json_t *tr = json_object_get(spec, "leaseTransitions");
        json_object_set_new(spec, "leaseTransitions",
                            json_integer(json_is_integer(tr) ? json_integer_value(tr) + 1 : 1));
        json_object_set_new(spec, "acquireTime", json_string(now));
    }
    json_object_set_new(spec, "holderIdentity", json_string(l->identity));
    json_object_set_new(spec, "leaseDurationSeconds", json_integer(dur_s));
    json_object_set_new(spec, "renewTime", json_string(now));
    /* PUT with the resourceVersion we read: a competing writer makes this fail with 409. */
    rc = k8s_client_update(c, &ref, lease, NULL);
    json_decref(lease);
    if (!rc) {
        snprintf(l->observed_holder, sizeof(l->observed_holder), "%s", l->identity);
        snprintf(l->observed_renew, sizeof(l->observed_renew), "%s", now);
        l->observed_ms = mono_ms();
    }
    return rc;
}

/* Clears the holder so a successor can take over at once (client-go's ReleaseOnCancel). */
static void release(struct leader *l, struct k8s_client *c)
{
    struct k8s_ref ref = {&k8s_resource_leases, l->ns, l->name, NULL};
    json_t *lease = NULL;
    /* Usually called because of a SIGTERM, which otherwise aborts every request at once. */
    k8s_client_ignore_shutdown(c, true);
    if (k8s_client_get(c, &ref, &lease)) {
        log_warn("cannot read the leader lease to release it", LOG_S("lease", l->name),
                 LOG_S("error", k8s_client_errmsg(c)));
        return;
    }
    const char *holder = json_util_str_at(lease, "spec", "holderIdentity");
    if (holder && strcmp(holder, l->identity) == 0) {
        json_t *spec = json_object_get(lease, "spec");
        json_object_set_new(spec, "holderIdentity", json_string(""));
        json_object_set_new(spec, "leaseDurationSeconds", json_integer(1));
        if (k8s_client_update(c, &ref, lease, NULL) == 0)
            log_info("released leader lease", LOG_S("lease", l->name));
        else
            log_warn("cannot release the leader lease", LOG_S("lease", l->name),
                     LOG_S("error", k8s_client_errmsg(c)));
    }
    json_decref(lease);
}

static void sleep_until_stop(struct leader *l, long ms)
{
    for (long t = 0; t < ms && !atomic_load(&l->stop) && !shutdown_requested(); t += 20) {
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static void *leader_main(void *arg)
{
    struct leader *l = arg;
    struct k8s_client *c = NULL;
    long long last_renew = 0;
    while (!atomic_load(&l->stop) && !shutdown_requested()) {
        int rc = c ? 0 : l->opts.new_client(l->opts.client_ctx, &c);
        if (!rc) rc = try_acquire_or_renew(l, c);
        long long now = mono_ms();
        if (!rc) {
            last_renew = now;
            if (!atomic_exchange(&l->leading, true)) {
                log_info("became leader", LOG_S("lease", l->name), LOG_S("identity", l->identity));
                if (l->opts.on_started) l->opts.on_started(l->opts.cb_ctx);
            }
        } else if (atomic_load(&l->leading) &&
                   (rc == ERR_EXISTS || now - last_renew >= l->opts.renew_deadline_ms)) {
            /* ERR_EXISTS: another replica holds the lease now; stop at once. */
            atomic_store(&l->leading, false);
            log_error("lost leader lease", LOG_S("lease", l->name),
                      LOG_S("error", c ? k8s_client_errmsg(c) : err_str(rc)));
            if (l->opts.on_stopped) l->opts.on_stopped(l->opts.cb_ctx);
        }
        if (rc && rc != ERR_EXISTS && rc != ERR_CONFLICT && c) {
            log_warn("lease request failed", LOG_S("lease", l->name),
                     LOG_S("error", k8s_client_errmsg(c)));
            k8s_client_free(c); /* reconnect next round */
            c = NULL;
        }
        sleep_until_stop(l, l->opts.retry_period_ms);
    }
    if (atomic_load(&l->leading)) {
        if (c || l->opts.new_client(l->opts.client_ctx, &c) == 0) release(l, c);
        atomic_store(&l->leading, false);
        if (l->opts.on_stopped) l->opts.on_stopped(l->opts.cb_ctx);
    }
    k8s_client_free(c);
    return NULL;
}

int leader_start(const struct leader_opts *opts, struct leader **out)
{
    struct leader *l = calloc(1, sizeof(*l));
    if (!l) return ERR_NOMEM;
    l->opts = *opts;
    if (!l->opts.lease_duration_ms) l->opts.lease_duration_ms = 15000;
    if (!l->opts.renew_deadline_ms) l->opts.renew_deadline_ms = 10000;
    if (!l->opts.retry_period_ms) l->opts.retry_period_ms = 2000;
    snprintf(l->ns, sizeof(l->ns), "%s", opts->ns);
    snprintf(l->name, sizeof(l->name), "%s", opts->name);
    if (opts->identity) {
        snprintf(l->identity, sizeof(l->identity), "%s", opts->identity);
    } else {
        char host[128] = "unknown";
        gethostname(host, sizeof(host) - 1);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        snprintf(l->identity, sizeof(l->identity), "%s_%d_%08lx", host, (int)getpid(),
                 (unsigned long)(ts.tv_nsec ^ (ts.tv_sec << 20)) & 0xffffffffUL);
    }
    l->opts.ns = l->ns;
    l->opts.name = l->name;
    l->opts.identity = l->identity;
    if (pthread_create(&l->thread, NULL, leader_main, l) != 0) {
        free(l);
        return ERR_NOMEM;
    }
    l->started = true;
    *out = l;
    return 0;
}

void leader_stop(struct leader *l)
{
    if (!l || !l->started) return;
    atomic_store(&l->stop, true);
    pthread_join(l->thread, NULL);
    l->started = false;
}

void leader_free(struct leader *l)
{
    if (!l) return;
    leader_stop(l);
    free(l);
}

bool leader_is_leader(struct leader *l)
{
    return atomic_load(&l->leading);
}

const char *leader_identity(struct leader *l)
{
    return l->identity;
}
