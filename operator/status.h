/* InferenceService status as a pure function of what the reconciler observed: the InferenceService,
 * its Deployment and its pods, plus a spec error when the spec could not be turned into objects.
 * Conditions: Ready (can serve traffic), Progressing (a rollout or scaling is under way), Degraded
 * (something needs a person: bad spec, image pull failures, crash loops, unschedulable pods, a
 * rollout past its deadline). No I/O, no clock: `now` is an input. */
#ifndef CINFER_OPERATOR_STATUS_H
#define CINFER_OPERATOR_STATUS_H

#include <jansson.h>
#include <time.h>

struct status_input {
    const json_t *isvc;       /* the InferenceService as read (status.conditions feed merging) */
    const json_t *deployment; /* observed Deployment, NULL when it does not exist (yet) */
    const json_t *pods;       /* observed engine pods (array) or NULL */
    const char *spec_error_reason;   /* CamelCase reason when the spec is unusable, else NULL */
    const char *spec_error_message;  /* what is wrong with it, naming the field */
    const char *apply_error_reason;  /* CamelCase reason when writing owned objects failed */
    const char *apply_error_message; /* the API server's answer */
    time_t now;
};

/* Returns the new status object (new reference), or NULL on ERR_NOMEM. Fields other writers own
 * (status.autoscaling, the autoscaler's) are copied unchanged from in->isvc. */
json_t *status_compute(const struct status_input *in);

#endif
