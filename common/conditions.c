/* Status condition merging with Kubernetes' lastTransitionTime semantics. */
#include "common/conditions.h"

#include <string.h>

void conditions_format_time(time_t t, char *out, size_t outlen)
{
    struct tm tm;
    if (!gmtime_r(&t, &tm) || strftime(out, outlen, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0) {
        if (outlen) out[0] = '\0';
    }
}

const json_t *conditions_find(const json_t *conds, const char *type)
{
    size_t i;
    json_t *c;
    json_array_foreach(conds, i, c)
    {
        const char *t = json_string_value(json_object_get(c, "type"));
        if (t && strcmp(t, type) == 0) return c;
    }
    return NULL;
}

json_t *conditions_merge(const json_t *prev, const struct condition *next, size_t n,
                         long long generation, time_t now)
{
    char now_s[32];
    conditions_format_time(now, now_s, sizeof(now_s));
    json_t *out = json_array();
    for (size_t i = 0; out && i < n; i++) {
        const char *status = next[i].status == CONDITION_UNKNOWN ? "Unknown"
                             : next[i].status                    ? "True"
                                                                 : "False";
        const json_t *old = conditions_find(prev, next[i].type);
        const char *old_status = json_string_value(json_object_get(old, "status"));
        const char *old_time = json_string_value(json_object_get(old, "lastTransitionTime"));
        const char *when =
            old_status && old_time && strcmp(old_status, status) == 0 ? old_time : now_s;
        json_t *c =
            json_pack("{s:s, s:s, s:s, s:s, s:s, s:I}", "type", next[i].type, "status", status,
                      "reason", next[i].reason, "message", next[i].message ? next[i].message : "",
                      "lastTransitionTime", when, "observedGeneration", (json_int_t)generation);
        if (!c || json_array_append_new(out, c)) {
            json_decref(out);
            return NULL;
        }
    }
    return out;
}

bool conditions_flipped(const json_t *prev, const json_t *next, const char *type)
{
    const char *a = json_string_value(json_object_get(conditions_find(prev, type), "status"));
    const char *b = json_string_value(json_object_get(conditions_find(next, type), "status"));
    if (!b) return false;
    return !a || strcmp(a, b) != 0;
}
