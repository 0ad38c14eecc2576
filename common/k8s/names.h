/* The name rules of the Kubernetes API (RFC 1123, as apimachinery's validation applies them), so
 * that flags and specs naming namespaces or objects are refused with a reason before a request is
 * made: DNS labels (namespaces, Service names) and DNS subdomains (most object names). Pure. */
#ifndef CINFER_COMMON_K8S_NAMES_H
#define CINFER_COMMON_K8S_NAMES_H

#include <stdbool.h>
#include <stddef.h>

/* s[0..n) is a DNS label: 1-63 of [a-z0-9-], alphanumeric at both ends. Any thread. */
bool k8s_name_is_dns_label(const char *s, size_t n);
/* s[0..n) is a DNS subdomain: 1-253 of [a-z0-9.-], alphanumeric at both ends. Any thread. */
bool k8s_name_is_dns_subdomain(const char *s, size_t n);

#endif
