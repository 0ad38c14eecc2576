/* Reconcile one InferenceService: the one place that combines the cache read, the pure desired-state
 * and status functions, the writes (server-side apply of the Deployment and Service, a status update)
 * and Events (STYLE.md "Kubernetes code"). Level-triggered: it looks only at the current state of
 * the key it is given, so it can run any number of times. The NetworkPolicy is applied when
 * settings->network_policy is set and deleted (when it is ours) when it is not. Called from worker threads, each with
 * its own client. */
#ifndef CINFER_OPERATOR_RECONCILE_H
#define CINFER_OPERATOR_RECONCILE_H

#include "common/informer.h"
#include "common/k8s/client.h"
#include "operator/desired.h"

#include <time.h>

/* The shared, read-only caches (informers) the reconciler reads; owned by the controller. */
struct reconcile_caches {
    struct informer *isvcs;
    struct informer *deployments;
    struct informer *services;
    struct informer *networkpolicies;
    struct informer *pods;
};

enum reconcile_result {
    RECONCILE_DONE = 0,  /* in the desired state (or nothing to do) */
    RECONCILE_ERROR = 1, /* a write failed (conflict, API down): retry with backoff */
};

struct reconcile_outcome {
    enum reconcile_result result;
    int rc;            /* err.h code of the failure */
    char message[512]; /* what failed, for the log */
};

extern const struct k8s_resource reconcile_resource_isvcs;

/* Reconciles `key` ("namespace/name", borrowed). Never blocks on anything but API requests. */
void reconcile_key(struct k8s_client *c, const struct reconcile_caches *caches,
                   const struct desired_settings *settings, const char *key, time_t now,
                   struct reconcile_outcome *out);

#endif
