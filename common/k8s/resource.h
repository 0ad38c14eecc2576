/* Resource descriptors: which API group/version/plural a request goes to, and whether the kind is
 * namespaced. Descriptors for the kinds cinfer touches are provided; a CRD's descriptor is a
 * `static const struct k8s_resource` in the code that owns the CRD. */
#ifndef CINFER_COMMON_K8S_RESOURCE_H
#define CINFER_COMMON_K8S_RESOURCE_H

#include <stdbool.h>

struct k8s_resource {
    const char *group;    /* "" for the core group (/api/v1), else e.g. "apps" (/apis/apps/v1) */
    const char *version;  /* "v1" */
    const char *resource; /* lower-case plural: "deployments" */
    bool namespaced;
};

/* The object (or collection) one request is about. All members borrowed. */
struct k8s_ref {
    const struct k8s_resource *res;
    const char *ns;          /* namespace; NULL for cluster-scoped kinds or all-namespace lists */
    const char *name;        /* object name; NULL for collection requests (list, create, watch) */
    const char *subresource; /* "status", "scale", or NULL */
};

extern const struct k8s_resource k8s_resource_namespaces;
extern const struct k8s_resource k8s_resource_pods;
extern const struct k8s_resource k8s_resource_services;
extern const struct k8s_resource k8s_resource_configmaps;
extern const struct k8s_resource k8s_resource_secrets;
extern const struct k8s_resource k8s_resource_events;
extern const struct k8s_resource k8s_resource_deployments;
extern const struct k8s_resource k8s_resource_replicasets;
extern const struct k8s_resource k8s_resource_leases;
extern const struct k8s_resource k8s_resource_crds;
extern const struct k8s_resource k8s_resource_networkpolicies;

#endif
