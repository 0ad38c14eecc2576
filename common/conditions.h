/* Status conditions (Kubernetes API conventions): a list keyed by `type`, each with status
 * True/False/Unknown, a CamelCase `reason`, a human `message`, `observedGeneration`, and a
 * `lastTransitionTime` that changes only when the status flips. Pure functions; `now` is passed in.
 * Shared by the operator (status.conditions) and the autoscaler (status.autoscaling.conditions). */
#ifndef CINFER_COMMON_CONDITIONS_H
#define CINFER_COMMON_CONDITIONS_H

#include <jansson.h>
#include <stdbool.h>
#include <time.h>

/* A condition's status; 0 and 1 are false and true, so a bool converts as expected. */
enum condition_status { CONDITION_FALSE = 0, CONDITION_TRUE = 1, CONDITION_UNKNOWN = 2 };

struct condition {
    const char *type;
    enum condition_status status;
    const char *reason;
    const char *message;
};

/* Formats `t` as RFC 3339 UTC ("2026-11-29T08:00:00Z") into out (at least 21 bytes; an empty
 * string when it does not fit or `t` cannot be represented). Any thread. */
void conditions_format_time(time_t t, char *out, size_t outlen);

/* Returns a new conditions array holding `next` (n entries, borrowed) in order. Entries whose type
 * exists in `prev` (borrowed array or NULL) with the same status keep its lastTransitionTime;
 * others get `now`. Returns NULL on ERR_NOMEM. */
json_t *conditions_merge(const json_t *prev, const struct condition *next, size_t n,
                         long long generation, time_t now);

/* The condition of `type` in `conds` (borrowed), or NULL. */
const json_t *conditions_find(const json_t *conds, const char *type);
/* True when `type` exists in both arrays with a different status, or only in `next`. */
bool conditions_flipped(const json_t *prev, const json_t *next, const char *type);

#endif
