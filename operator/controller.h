/* The operator's controller: informers for InferenceServices and the objects they own, a work
 * queue of InferenceService keys, worker threads running reconcile_key, periodic resync, leader
 * election, and the operator's own metrics. main.c builds a controller_cfg from flags and calls
 * controller_run on the main thread. */
#ifndef CINFER_OPERATOR_CONTROLLER_H
#define CINFER_OPERATOR_CONTROLLER_H

#include "common/prom/prom.h"
#include "operator/desired.h"

#include <stdbool.h>

struct controller_cfg {
    const char *kubeconfig; /* NULL: $KUBECONFIG, in-cluster, ~/.kube/config */
    const char *context;    /* kubeconfig context or NULL */
    const char *ns;         /* watch one namespace; NULL or "" = all */
    int workers;            /* reconcile threads */
    bool leader_elect;
    const char *lease_namespace; /* NULL = the client's default namespace */
    const char *identity;        /* leader identity or NULL */
    int resync_seconds;          /* enqueue every InferenceService this often */
    struct desired_settings desired;
    struct prom_registry *metrics; /* borrowed; the controller registers its metrics here */
    void (*set_ready)(void *ctx, bool ready); /* readiness for /readyz (synced and, if electing,
                                                 leading); may be NULL */
    void *ready_ctx;
};

/* Runs until shutdown is requested (returns 0) or leadership is lost (returns ERR_BAD_STATE: the
 * process should exit non-zero so that it restarts as a follower). Other errors on start-up. */
int controller_run(const struct controller_cfg *cfg);

#endif
