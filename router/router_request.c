/* The router's own reading of a request: the top-level "model" member (see router_request.h) and
 * request ids. The scanner validates the structure it walks (strings, brackets, one top-level
 * object) so that a body it accepts is one the engine's JSON parser can also read, but it never
 * builds a value: skipping a large prompt costs one pass over its bytes. */
#include "router/router_request.h"

#include "common/err.h"
#include "common/utf8.h"
#include "engine/text/unicode.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define RQ_MAX_DEPTH 2048 /* jansson's JSON_PARSER_MAX_DEPTH */

struct rq_scan {
    const char *p, *end;
};

static void rq_ws(struct rq_scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

static int rq_hex4(const char *p, uint32_t *out)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return ERR_PARSE;
        v = v << 4 | (uint32_t)d;
    }
    *out = v;
    return 0;
}

/* Scans the string at s->p (which is '"'). With `out`, decodes it into out[0..cap) and writes the
 * length to *n, or sets *n = cap + 1 when it does not fit (the scan goes on). */
static int rq_string(struct rq_scan *s, char *out, size_t cap, size_t *n)
{
    size_t k = 0;
    s->p++; /* the opening quote */
    while (s->p < s->end) {
        unsigned char c = (unsigned char)*s->p;
        if (c == '"') {
            s->p++;
            if (n) *n = k;
            return 0;
        }
        if (c < 0x20) return ERR_PARSE; /* raw control characters are not allowed in JSON */
        char enc[4];
        size_t m = 1;
        enc[0] = (char)c;
        if (c == '\\') {
            if (s->end - s->p < 2) return ERR_PARSE;
            char e = s->p[1];
            s->p += 2;
            switch (e) {
            case '"':
            case '\\':
            case '/': enc[0] = e; break;
            case 'b': enc[0] = '\b'; break;
            case 'f': enc[0] = '\f'; break;
            case 'n': enc[0] = '\n'; break;
            case 'r': enc[0] = '\r'; break;
            case 't': enc[0] = '\t'; break;
            case 'u': {
                uint32_t cp, lo;
                if (s->end - s->p < 4 || rq_hex4(s->p, &cp)) return ERR_PARSE;
                s->p += 4;
                if (cp >= 0xDC00 && cp <= 0xDFFF) return ERR_PARSE; /* lone low surrogate */
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    if (s->end - s->p < 6 || s->p[0] != '\\' || s->p[1] != 'u' ||
                        rq_hex4(s->p + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                        return ERR_PARSE;
                    s->p += 6;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                }
                m = unicode_encode(cp, enc);
                break;
            }
            default: return ERR_PARSE;
            }
        } else {
            s->p++;
        }
        if (out) {
            if (k + m <= cap)
                memcpy(out + k, enc, m);
            else
                k = cap + 1 - m; /* past cap: remember only that it did not fit */
        }
        k += m;
    }
    return ERR_PARSE; /* unterminated */
}

/* Skips one value of any kind: strings exactly, containers by bracket depth, numbers and
 * literals as runs of their characters. */
static int rq_skip_value(struct rq_scan *s)
{
    int depth = 0, rc;
    for (;;) {
        rq_ws(s);
        if (s->p >= s->end) return ERR_PARSE;
        char c = *s->p;
        if (c == '"') {
            if ((rc = rq_string(s, NULL, 0, NULL))) return rc;
        } else if (c == '{' || c == '[') {
            if (++depth > RQ_MAX_DEPTH) return ERR_PARSE;
            s->p++;
            continue;
        } else if (c == '}' || c == ']') {
            if (depth == 0) return ERR_PARSE;
            depth--;
            s->p++;
        } else if (c == ',' || c == ':') {
            if (depth == 0) return ERR_PARSE;
            s->p++;
            continue;
        } else {
            const char *start = s->p;
            while (s->p < s->end &&
                   ((*s->p >= '0' && *s->p <= '9') || (*s->p >= 'a' && *s->p <= 'z') ||
                    (*s->p >= 'A' && *s->p <= 'Z') || *s->p == '+' || *s->p == '-' || *s->p == '.'))
                s->p++;
            if (s->p == start) return ERR_PARSE;
        }
        if (depth == 0) return 0;
    }
}

int router_request_model(const char *body, size_t len, char *out, size_t outlen)
{
    struct rq_scan s = {body, body + len};
    int rc, found = ERR_NOT_FOUND;
    bool seen = false;
    rq_ws(&s);
    if (s.p >= s.end || *s.p != '{') return ERR_PARSE;
    s.p++;
    rq_ws(&s);
    if (s.p < s.end && *s.p == '}') {
        s.p++;
        goto tail;
    }
    for (;;) {
        rq_ws(&s);
        if (s.p >= s.end || *s.p != '"') return ERR_PARSE;
        char key[8];
        size_t klen;
        if ((rc = rq_string(&s, key, sizeof(key), &klen))) return rc;
        bool is_model = klen == 5 && memcmp(key, "model", 5) == 0;
        rq_ws(&s);
        if (s.p >= s.end || *s.p != ':') return ERR_PARSE;
        s.p++;
        rq_ws(&s);
        if (s.p >= s.end) return ERR_PARSE;
        if (is_model) {
            if (seen) return ERR_PARSE; /* the engine's parser refuses duplicate keys too */
            seen = true;
            if (*s.p == '"') {
                size_t n;
                if ((rc = rq_string(&s, out, outlen ? outlen - 1 : 0, &n))) return rc;
                if (n + 1 > outlen)
                    found = ERR_TOO_BIG;
                else if (n == 0 || memchr(out, '\0', n) || !utf8_valid(out, n))
                    found = ERR_INVAL;
                else
                    out[n] = '\0', found = 0;
            } else if (s.end - s.p >= 4 && memcmp(s.p, "null", 4) == 0) {
                if ((rc = rq_skip_value(&s))) return rc;
            } else {
                if ((rc = rq_skip_value(&s))) return rc;
                found = ERR_INVAL;
            }
        } else if ((rc = rq_skip_value(&s))) {
            return rc;
        }
        rq_ws(&s);
        if (s.p >= s.end) return ERR_PARSE;
        if (*s.p == ',') {
            s.p++;
            continue;
        }
        if (*s.p != '}') return ERR_PARSE;
        s.p++;
        break;
    }
tail:
    rq_ws(&s);
    return s.p == s.end ? found : ERR_PARSE;
}

bool router_request_id_valid(const char *id)
{
    size_t n = 0;
    for (; id[n]; n++) {
        char c = id[n];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == ':' || c == '-';
        if (!ok || n >= ROUTER_REQUEST_ID_MAX - 1) return false;
    }
    return n > 0;
}

void router_request_id_new(char out[ROUTER_REQUEST_ID_MAX])
{
    uint64_t v[2] = {0, 0};
    if (getrandom(v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v)) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        v[0] = (uint64_t)ts.tv_nsec * UINT64_C(0x9E3779B97F4A7C15) ^ (uint64_t)ts.tv_sec;
        v[1] = v[0] * UINT64_C(0xbf58476d1ce4e5b9) ^ (uint64_t)(uintptr_t)out;
    }
    snprintf(out, ROUTER_REQUEST_ID_MAX, "%016llx%016llx", (unsigned long long)v[0],
             (unsigned long long)v[1]);
}
