/* The autoscaler's control loop: every interval, for each InferenceService whose
 * spec.scaling.policy is reactive or predictive, scrape its engines, compute signals
 * (signals.h), decide through the shared policy (policy.h) and actuate through /scale
 * (actuate.h). InferenceServices come from an informer cache; pods are listed per round through
 * status.selector, or replaced by fixed URLs (--target, out-of-cluster mode). One scrape round
 * covers every managed service in parallel. Leader election on the Lease cinfer-autoscaler. */
#ifndef CINFER_AUTOSCALER_LOOP_H
#define CINFER_AUTOSCALER_LOOP_H

#include "autoscaler/policy.h"
#include "common/prom/prom.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define LOOP_ENGINE_PORT 8000 /* ARCHITECTURE.md: the engine's one HTTP port */

struct loop_cfg {
    const char *kubeconfig;        /* NULL/"" = default discovery */
    const char *ns;                /* watch one namespace; NULL/"" = all */
    double interval_s;             /* decision interval */
    double scrape_timeout_s;       /* per scrape */
    double startup_s;              /* replica start-up, the policies' planning horizon */
    bool leader_elect;             /* campaign on the Lease cinfer-autoscaler first */
    const char *lease_ns;          /* NULL/"" = the client's namespace */
    const char *identity;          /* leader identity; NULL = generated */
    const char *targets;           /* --target text or NULL; parsed by loop_targets_parse */
    const char *router_urls;       /* --router-url: cinfer-router /metrics URLs, comma-separated */
    const char *router_selector;   /* --router-selector: label selector of router pods, or NULL */
    const char *router_ns;         /* their namespace; NULL/"" = the autoscaler's own */
    int router_port;               /* the routers' probe port (their /metrics) */
    struct prom_registry *metrics; /* where the loop registers its own metrics (borrowed) */
    void (*set_ready)(void *ctx, bool ready);
    void *ready_ctx;
};

/* Runs until shutdown (returns 0), loss of leadership (ERR_BAD_STATE) or a setup failure (err.h
 * code, logged). `cfg` borrowed for the duration. Main thread. */
int loop_run(const struct loop_cfg *cfg);

/* --target: "name=url,name=url,...", a name repeated for several engines. */
struct loop_target {
    char name[254];
    char url[512];
};
struct loop_targets {
    struct loop_target *v; /* owned */
    size_t n;
};

/* Parses `text` (borrowed; NULL or "" gives no targets) into *out (free with loop_targets_fini).
 * URLs must start with http:// or https:// and cannot contain ','. Returns 0, ERR_INVAL with a
 * message in `err`, or ERR_NOMEM. Pure. */
int loop_targets_parse(const char *text, struct loop_targets *out, char *err, size_t errlen);
void loop_targets_fini(struct loop_targets *t); /* NULL-safe */

/* Reads the scaling fields of InferenceService `isvc` (borrowed) into *out (policy_spec_defaults
 * for the kind, then objectives {ttftSeconds, interTokenSeconds, percentile}, minReplicas,
 * maxReplicas, targetQueueDepth, targetKVCacheUsage, scaleDownDelaySeconds and `interval_s`; an
 * objective or a named target turns the default targets off). Returns true when the autoscaler owns spec.replicas
 * (policy reactive or predictive); false for external, no spec.scaling, or an unknown policy.
 * Pure. */
bool loop_spec_from_isvc(const json_t *isvc, double interval_s, struct policy_spec *out);

/* Scale to zero and from zero (ARCHITECTURE.md: minReplicas 0 only where the autoscaler owns
 * replicas, scaling from zero on the router's held requests). The policy never goes below one
 * replica; these rules take a service with spec.scaling.minReplicas 0 to zero and back. */
struct loop_zero_in {
    int current;            /* spec.replicas now */
    int policy_desired;     /* what the policy decided (at least 1) */
    bool zero_allowed;      /* spec.scaling.minReplicas is 0 */
    double held;            /* requests the routers hold for the service; < 0: unknown (no router
                             * configured, or one did not answer) */
    bool busy;              /* its engines report requests running or waiting, or arrivals */
    double idle_s;          /* seconds since it was last busy or had requests held */
    double scale_to_zero_s; /* spec.scaling.scaleToZeroSeconds */
};

/* The replicas to set, and in `reason` why when a zero rule decided ("" otherwise): at zero, one
 * replica as soon as a router holds a request for the service, else zero; above zero, zero once it
 * has been idle for scale_to_zero_s and the policy asks for no more than one, never while a router
 * holds requests or when held requests are unknown. Pure. */
int loop_zero_decide(const struct loop_zero_in *in, char *reason, size_t reason_len);

/* The served model name of an InferenceService (spec.model.servedName, else metadata.name: the
 * model_name label of the router's held requests), borrowed; NULL when it has none. Pure. */
const char *loop_served_name(const json_t *isvc);

/* For a pod object (borrowed): writes its metrics URL (http://IP:8000/metrics, IPv6 in brackets)
 * into `url` and returns true when it is ready (phase Running, condition Ready True, podIP set,
 * not being deleted); false otherwise. Pure. */
bool loop_pod_endpoint(const json_t *pod, char *url, size_t urllen);

#endif
