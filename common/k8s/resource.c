/* Descriptors for the built-in kinds cinfer uses (resource.h). */
#include "common/k8s/resource.h"

const struct k8s_resource k8s_resource_namespaces = {"", "v1", "namespaces", false};
const struct k8s_resource k8s_resource_pods = {"", "v1", "pods", true};
const struct k8s_resource k8s_resource_services = {"", "v1", "services", true};
const struct k8s_resource k8s_resource_configmaps = {"", "v1", "configmaps", true};
const struct k8s_resource k8s_resource_secrets = {"", "v1", "secrets", true};
const struct k8s_resource k8s_resource_events = {"", "v1", "events", true};
const struct k8s_resource k8s_resource_deployments = {"apps", "v1", "deployments", true};
const struct k8s_resource k8s_resource_replicasets = {"apps", "v1", "replicasets", true};
const struct k8s_resource k8s_resource_leases = {"coordination.k8s.io", "v1", "leases", true};
const struct k8s_resource k8s_resource_crds = {"apiextensions.k8s.io", "v1",
                                               "customresourcedefinitions", false};
const struct k8s_resource k8s_resource_networkpolicies = {"networking.k8s.io", "v1",
                                                          "networkpolicies", true};
