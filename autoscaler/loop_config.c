/* The control loop's pure inputs (see loop.h): --target parsing, which InferenceServices the
 * autoscaler manages and with what policy_spec, and which pods it scrapes at which URL. No I/O. */
#include "autoscaler/loop.h"

#include "common/err.h"
#include "common/json_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void loop_targets_fini(struct loop_targets *t)
{
    if (!t) return;
    free(t->v);
    t->v = NULL;
    t->n = 0;
}

int loop_targets_parse(const char *text, struct loop_targets *out, char *err, size_t errlen)
{
    struct loop_targets t = {0};
    int rc = ERR_INVAL;
    const char *p = text ? text : "";
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (len == 0) {
            snprintf(err, errlen, "--target: empty entry");
            goto out;
        }
        if (!eq || eq == p) {
            snprintf(err, errlen, "--target: entry %.*s is not name=url", (int)len, p);
            goto out;
        }
        size_t nlen = (size_t)(eq - p), ulen = len - nlen - 1;
        struct loop_target *v = realloc(t.v, (t.n + 1) * sizeof(*v));
        if (!v) {
            rc = ERR_NOMEM;
            goto out;
        }
        t.v = v;
        struct loop_target *e = &t.v[t.n];
        if (nlen >= sizeof(e->name) || ulen >= sizeof(e->url)) {
            snprintf(err, errlen, "--target: entry %.*s is too long", (int)(len > 80 ? 80 : len),
                     p);
            goto out;
        }
        memcpy(e->name, p, nlen);
        e->name[nlen] = '\0';
        memcpy(e->url, eq + 1, ulen);
        e->url[ulen] = '\0';
        if (strncmp(e->url, "http://", 7) != 0 && strncmp(e->url, "https://", 8) != 0) {
            snprintf(err, errlen, "--target: URL %s for %s must start with http:// or https://",
                     e->url, e->name);
            goto out;
        }
        /* Like a Prometheus scrape config: a bare http://host:port means its /metrics. */
        const char *host = strstr(e->url, "://") + 3;
        if (!strchr(host, '/')) {
            size_t ul = strlen(e->url);
            if (ul + sizeof("/metrics") > sizeof(e->url)) {
                snprintf(err, errlen, "--target: URL %s for %s is too long", e->url, e->name);
                goto out;
            }
            memcpy(e->url + ul, "/metrics", sizeof("/metrics"));
        }
        t.n++;
        p = end ? end + 1 : p + len;
        if (end && !*p) {
            snprintf(err, errlen, "--target: trailing comma");
            goto out;
        }
    }
    *out = t;
    t.v = NULL;
    rc = 0;
out:
    free(t.v);
    return rc;
}

bool loop_spec_from_isvc(const json_t *isvc, double interval_s, struct policy_spec *out)
{
    const json_t *sc = json_object_get(json_object_get(isvc, "spec"), "scaling");
    const char *policy = json_string_value(json_object_get(sc, "policy"));
    enum policy_kind kind;
    if (!json_is_object(sc)) return false;
    /* The CRD defaults policy to reactive; an object that predates defaulting has none. */
    if (!policy || strcmp(policy, "reactive") == 0)
        kind = POLICY_REACTIVE;
    else if (strcmp(policy, "predictive") == 0)
        kind = POLICY_PREDICTIVE;
    else
        return false;
    policy_spec_defaults(out, kind);
    json_t *v;
    const json_t *obj = json_object_get(sc, "objectives");
    if (json_is_number(v = json_object_get(obj, "ttftSeconds")) && json_number_value(v) > 0)
        out->objective_ttft_s = json_number_value(v);
    if (json_is_number(v = json_object_get(obj, "interTokenSeconds")) && json_number_value(v) > 0)
        out->objective_itl_s = json_number_value(v);
    if (json_is_number(v = json_object_get(obj, "percentile")) && json_number_value(v) > 0 &&
        json_number_value(v) < 1)
        out->objective_percentile = json_number_value(v);
    /* As in an HPA spec, only the metrics listed are used: naming one target disables the other;
     * the HPA defaults apply only when the spec names neither target nor objective. */
    if (json_is_number(json_object_get(sc, "targetQueueDepth")) ||
        json_is_number(json_object_get(sc, "targetKVCacheUsage")) || policy_spec_has_objective(out))
        out->target_queue_depth = out->target_kv_usage = 0;
    if (json_is_integer(v = json_object_get(sc, "minReplicas")))
        out->min_replicas = (int)json_integer_value(v);
    if (json_is_integer(v = json_object_get(sc, "maxReplicas")))
        out->max_replicas = (int)json_integer_value(v);
    if (json_is_number(v = json_object_get(sc, "targetQueueDepth")))
        out->target_queue_depth = json_number_value(v);
    if (json_is_number(v = json_object_get(sc, "targetKVCacheUsage")))
        out->target_kv_usage = json_number_value(v);
    if (json_is_integer(v = json_object_get(sc, "scaleDownDelaySeconds")))
        out->scale_down_window_s = (double)json_integer_value(v);
    if (out->min_replicas < 0) out->min_replicas = 0;
    if (out->max_replicas < out->min_replicas) out->max_replicas = out->min_replicas;
    out->interval_s = interval_s;
    return true;
}

bool loop_pod_endpoint(const json_t *pod, char *url, size_t urllen)
{
    const json_t *status = json_object_get(pod, "status");
    const char *ip = json_string_value(json_object_get(status, "podIP"));
    const char *phase = json_string_value(json_object_get(status, "phase"));
    if (json_object_get(json_object_get(pod, "metadata"), "deletionTimestamp")) return false;
    if (!ip || !*ip || !phase || strcmp(phase, "Running") != 0) return false;
    bool ready = false;
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(status, "conditions"), i, c)
    {
        const char *type = json_util_str_at(c, "type", NULL),
                   *st = json_util_str_at(c, "status", NULL);
        if (type && st && strcmp(type, "Ready") == 0) ready = strcmp(st, "True") == 0;
    }
    if (!ready) return false;
    int n = strchr(ip, ':') ? snprintf(url, urllen, "http://[%s]:%d/metrics", ip, LOOP_ENGINE_PORT)
                            : snprintf(url, urllen, "http://%s:%d/metrics", ip, LOOP_ENGINE_PORT);
    return n > 0 && (size_t)n < urllen;
}

int loop_zero_decide(const struct loop_zero_in *in, char *reason, size_t reason_len)
{
    int want = in->policy_desired > 1 ? in->policy_desired : 1;
    if (reason_len) reason[0] = '\0';
    if (!in->zero_allowed) return in->policy_desired;
    if (in->current == 0) {
        if (in->held > 0) {
            snprintf(reason, reason_len, "scale from zero: %.0f requests held by the router",
                     in->held);
            return 1;
        }
        snprintf(reason, reason_len, "at zero replicas: no requests held by the router");
        return 0;
    }
    if (in->held < 0 || in->held > 0 || in->busy || in->idle_s < in->scale_to_zero_s ||
        in->policy_desired > 1)
        return want;
    snprintf(reason, reason_len, "idle for %.0f s (scaleToZeroSeconds %.0f): scale to zero",
             in->idle_s, in->scale_to_zero_s);
    return 0;
}

const char *loop_served_name(const json_t *isvc)
{
    const char *served = json_util_str_at(json_util_at(isvc, "spec", "model"), "servedName", NULL);
    return served && *served ? served : json_util_str_at(isvc, "metadata", "name");
}
