/* Kubernetes name rules (see names.h). */
#include "common/k8s/names.h"

static bool alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static bool name_ok(const char *s, size_t n, size_t max, bool dots)
{
    if (!s || n == 0 || n > max || !alnum(s[0]) || !alnum(s[n - 1])) return false;
    for (size_t i = 0; i < n; i++)
        if (!alnum(s[i]) && s[i] != '-' && !(dots && s[i] == '.')) return false;
    return true;
}

bool k8s_name_is_dns_label(const char *s, size_t n)
{
    return name_ok(s, n, 63, false);
}

bool k8s_name_is_dns_subdomain(const char *s, size_t n)
{
    return name_ok(s, n, 253, true);
}
