/* In-cluster discovery: which models the router serves and at which engine pods, from two
 * informers (common/informer.h): InferenceServices (serving.cinfer.io/v1alpha1) and the engine
 * pods the operator creates (label app.kubernetes.io/name=cinfer-engine). A model is an
 * InferenceService's served name (spec.model.servedName, else metadata.name); its replicas are the
 * pods that match the service's status.selector (ARCHITECTURE.md "Labels"), each at
 * http://<podIP>:<container port "http", else 8000>, ready when the pod is Running with condition
 * Ready and a pod IP, terminating once it has a deletionTimestamp (the router stops sending to it
 * before the engine's drain begins). Every change re-derives the whole view (level-triggered) and
 * hands it to the proxy (router_proxy_set_model / remove_model). One thread of its own plus the
 * informers' threads. */
#ifndef CINFER_ROUTER_DISCOVERY_H
#define CINFER_ROUTER_DISCOVERY_H

#include "router/router_proxy.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

struct router_discovery;

struct router_discovery_cfg {
    const char *kubeconfig;     /* NULL/"": default discovery (in-cluster, $KUBECONFIG, ...) */
    const char *ns;             /* NULL/"": every namespace */
    struct router_proxy *proxy; /* borrowed; must outlive discovery */
};

/* Starts the informers and the thread. *out is new. Returns 0 or an err.h code (logged). */
int router_discovery_start(const struct router_discovery_cfg *cfg, struct router_discovery **out);
/* True once both caches were listed and the first view was handed to the proxy. Any thread. */
bool router_discovery_synced(struct router_discovery *d);
void router_discovery_free(struct router_discovery *d); /* stops; NULL-safe */

/* Pure pieces, tested without an API server: */

/* The model an InferenceService serves (borrowed from `isvc`), or NULL without a name. */
const char *router_discovery_model_name(const json_t *isvc);
/* Parses an equality-only label selector "a=b,c==d" (status.selector) into a new object of
 * strings (NULL on a set-based selector such as "x in (a,b)" or "!x", or on ERR_NOMEM). */
json_t *router_discovery_selector(const char *selector);
/* Fills *ep from a pod (borrowed); false when the pod has no IP yet. */
bool router_discovery_endpoint(const json_t *pod, struct router_endpoint *ep);

#endif
