/* Text-format primitives shared by the Prometheus writer and parser: type names, name characters,
 * float formatting that round-trips, strict number parsing and UTF-8 validation. Pure functions. */
#include "common/prom/prom_priv.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *prom_type_str(enum prom_type type)
{
    switch (type) {
    case PROM_COUNTER: return "counter";
    case PROM_GAUGE: return "gauge";
    case PROM_HISTOGRAM: return "histogram";
    case PROM_SUMMARY: return "summary";
    case PROM_UNTYPED: break;
    }
    return "untyped";
}

bool prom_name_char(char c, bool first, bool colon_ok)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') return true;
    if (c == ':') return colon_ok;
    return !first && c >= '0' && c <= '9';
}

static bool name_valid(const char *s, bool colon_ok)
{
    if (!s || !*s) return false;
    for (size_t i = 0; s[i]; i++)
        if (!prom_name_char(s[i], i == 0, colon_ok)) return false;
    return true;
}

bool prom_metric_name_valid(const char *s)
{
    return name_valid(s, true);
}

bool prom_label_name_valid(const char *s)
{
    return name_valid(s, false);
}

char *prom_double_fmt(double v, char out[PROM_DOUBLE_MAX])
{
    if (isnan(v)) {
        memcpy(out, "NaN", 4);
    } else if (isinf(v)) {
        memcpy(out, v > 0 ? "+Inf" : "-Inf", 5);
    } else if (v == trunc(v) && fabs(v) < 1e15 && !(v == 0 && signbit(v))) {
        /* Integers (counts, token totals) are most values: print them without snprintf. */
        char tmp[24], *p = tmp + sizeof(tmp);
        uint64_t u = (uint64_t)fabs(v);
        *--p = 0;
        do *--p = (char)('0' + u % 10);
        while (u /= 10);
        if (v < 0) *--p = '-';
        memcpy(out, p, (size_t)(tmp + sizeof(tmp) - p));
    } else {
        /* The shortest of %.15g..%.17g that reads back exactly: "0.1", not
         * "0.10000000000000001". */
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(out, PROM_DOUBLE_MAX, "%.*g", prec, v);
            if (strtod(out, NULL) == v) break;
        }
    }
    return out;
}

/* Parses a float token: [+-] then digits with an optional fraction and exponent, or Inf, Infinity,
 * NaN (any case). Hexadecimal and out-of-range values are rejected. */
bool prom_double_parse(const char *s, size_t n, double *out)
{
    char tmp[128];
    if (n == 0 || n >= sizeof(tmp)) return false;
    size_t i = (s[0] == '+' || s[0] == '-') ? 1 : 0;
    const char *w = s + i;
    size_t wn = n - i;
    if ((wn == 3 && strncasecmp(w, "inf", 3) == 0) ||
        (wn == 8 && strncasecmp(w, "infinity", 8) == 0)) {
        *out = s[0] == '-' ? -INFINITY : INFINITY;
        return true;
    }
    if (wn == 3 && strncasecmp(w, "nan", 3) == 0) {
        *out = NAN;
        return true;
    }
    size_t digits = 0;
    while (i < n && s[i] >= '0' && s[i] <= '9') i++, digits++;
    if (i < n && s[i] == '.') {
        i++;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++, digits++;
    }
    if (!digits) return false;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        size_t exp_digits = 0;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++, exp_digits++;
        if (!exp_digits) return false;
    }
    if (i != n) return false;
    memcpy(tmp, s, n);
    tmp[n] = 0;
    errno = 0;
    double v = strtod(tmp, NULL);
    if (errno == ERANGE && isinf(v)) return false;
    *out = v;
    return true;
}

bool prom_int64_parse(const char *s, size_t n, int64_t *out)
{
    size_t i = (n && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
    bool neg = n && s[0] == '-';
    if (i == n) return false;
    uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (limit - d) / 10) return false;
        v = v * 10 + d;
    }
    *out = neg ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v) : (int64_t)v;
    return true;
}
