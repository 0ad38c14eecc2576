/* Trace parsers (see trace.h). CSV traces are parsed by hand (columns found by the header's
 * names); Mooncake
 * lines go through jansson one line at a time, so a bad line never costs more than TRACE_MAX_LINE
 * of parsing. Requests are sorted by arrival afterwards (stable), so an unsorted file still
 * replays in time order. */
#include "autoscaler/sim/trace.h"

#include "common/err.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct builder {
    struct trace *t;
    size_t cap_reqs, cap_hashes;
    double *abs_t; /* absolute arrival times, parallel to t->reqs, until normalised */
    char *err;
    size_t errlen;
    size_t line;
    /* CSV: the header's column count and the columns of arrival, prompt and output tokens */
    size_t n_cols, col_time, col_prompt, col_output;
};

static int fail(struct builder *b, int rc, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    err_vfmt(msg, sizeof(msg), 0, fmt, ap);
    va_end(ap);
    return err_fmt(b->err, b->errlen, rc, "line %zu: %s", b->line, msg);
}

int trace_format_parse(const char *s, enum trace_format *out)
{
    if (!s) return ERR_INVAL;
    if (strcmp(s, "azure") == 0) {
        *out = TRACE_AZURE;
        return 0;
    }
    if (strcmp(s, "mooncake") == 0) {
        *out = TRACE_MOONCAKE;
        return 0;
    }
    return ERR_INVAL;
}

static int push_req(struct builder *b, double abs_t, uint32_t prompt, uint32_t output,
                    uint32_t n_hash)
{
    struct trace *t = b->t;
    if (t->n >= TRACE_MAX_REQUESTS)
        return fail(b, ERR_TOO_BIG, "more than %u requests", TRACE_MAX_REQUESTS);
    if (t->n == b->cap_reqs) {
        size_t cap = b->cap_reqs ? b->cap_reqs * 2 : 1024;
        struct trace_req *r = realloc(t->reqs, cap * sizeof(*r));
        if (!r) return fail(b, ERR_NOMEM, "out of memory");
        t->reqs = r;
        double *a = realloc(b->abs_t, cap * sizeof(*a));
        if (!a) return fail(b, ERR_NOMEM, "out of memory");
        b->abs_t = a;
        b->cap_reqs = cap;
    }
    b->abs_t[t->n] = abs_t;
    t->reqs[t->n++] =
        (struct trace_req){0, prompt, output, (uint32_t)(t->n_hashes - n_hash), n_hash};
    return 0;
}

static int push_hash(struct builder *b, uint64_t h)
{
    struct trace *t = b->t;
    if (t->n_hashes >= UINT32_MAX) return fail(b, ERR_TOO_BIG, "too many hash ids in the trace");
    if (t->n_hashes == b->cap_hashes) {
        size_t cap = b->cap_hashes ? b->cap_hashes * 2 : 4096;
        uint64_t *p = realloc(t->hashes, cap * sizeof(*p));
        if (!p) return fail(b, ERR_NOMEM, "out of memory");
        t->hashes = p;
        b->cap_hashes = cap;
    }
    t->hashes[t->n_hashes++] = h;
    return 0;
}

/* Strict unsigned decimal of exactly `len` chars, <= max. */
static bool parse_uint(const char *s, size_t len, uint64_t max, uint64_t *out)
{
    if (len == 0 || len > 20) return false;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        v = v * 10 + (uint64_t)(s[i] - '0');
        if (v > max) return false;
    }
    *out = v;
    return true;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil). */
static long days_from_civil(long y, unsigned m, unsigned d)
{
    y -= m <= 2;
    long era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (long)doe - 719468;
}

static bool is_leap(long y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

/* A zone suffix "Z", "+HH:MM", "+HHMM" or "+HH" (or '-') -> seconds east of UTC. */
static bool parse_zone(const char *s, size_t len, double *east)
{
    uint64_t hh, mm = 0;
    if (len == 1 && (s[0] == 'Z' || s[0] == 'z')) {
        *east = 0;
        return true;
    }
    if (len < 3 || (s[0] != '+' && s[0] != '-') || !parse_uint(s + 1, 2, 23, &hh)) return false;
    if (len == 6   ? s[3] != ':' || !parse_uint(s + 4, 2, 59, &mm)
        : len == 5 ? !parse_uint(s + 3, 2, 59, &mm)
                   : len != 3)
        return false;
    *east = (s[0] == '-' ? -1.0 : 1.0) * (double)(hh * 3600 + mm * 60);
    return true;
}

/* "YYYY-MM-DD HH:MM:SS[.f{1,9}][zone]" ('T' or ' ' between date and time; zone as parse_zone,
 * UTC without one, as in the Azure traces) -> seconds since the epoch. */
static bool parse_azure_time(const char *s, size_t len, double *out)
{
    static const unsigned mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    uint64_t y, mo, d, h, mi, se;
    if (len < 19 || s[4] != '-' || s[7] != '-' || (s[10] != ' ' && s[10] != 'T') || s[13] != ':' ||
        s[16] != ':')
        return false;
    double east = 0;
    size_t zone = 19;
    while (zone < len && s[zone] != 'Z' && s[zone] != 'z' && s[zone] != '+' && s[zone] != '-')
        zone++;
    if (zone < len && !parse_zone(s + zone, len - zone, &east)) return false;
    len = zone;
    if (!parse_uint(s, 4, 9999, &y) || !parse_uint(s + 5, 2, 12, &mo) ||
        !parse_uint(s + 8, 2, 31, &d) || !parse_uint(s + 11, 2, 23, &h) ||
        !parse_uint(s + 14, 2, 59, &mi) || !parse_uint(s + 17, 2, 60, &se))
        return false;
    if (y < 1970 || mo < 1 || d < 1) return false;
    unsigned dim = mdays[mo - 1] + (mo == 2 && is_leap((long)y));
    if (d > dim) return false;
    double frac = 0;
    if (len > 19) {
        if (s[19] != '.' || len == 20 || len > 29) return false;
        double scale = 0.1;
        for (size_t i = 20; i < len; i++) {
            if (s[i] < '0' || s[i] > '9') return false;
            frac += (s[i] - '0') * scale;
            scale /= 10;
        }
    }
    long days = days_from_civil((long)y, (unsigned)mo, (unsigned)d);
    *out = (double)days * 86400.0 + (double)(h * 3600 + mi * 60 + se) + frac - east;
    return true;
}

/* An arrival time: a date and time as above, or seconds as a non-negative decimal number
 * (BurstGPT's "Timestamp": seconds from the trace's start). */
static bool parse_arrival(const char *s, size_t len, double *out)
{
    if (len >= 5 && s[4] == '-') return parse_azure_time(s, len, out);
    char buf[64];
    if (len == 0 || len >= sizeof(buf)) return false;
    for (size_t i = 0; i < len; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || s[i] == '.' || s[i] == 'e' || s[i] == 'E' ||
              s[i] == '+'))
            return false;
    memcpy(buf, s, len);
    buf[len] = 0;
    char *end;
    errno = 0;
    double v = strtod(buf, &end);
    if (errno || *end || !isfinite(v) || v < 0) return false;
    *out = v;
    return true;
}

/* The CSV header: which columns hold the arrival time, the prompt and the output tokens (the
 * Azure traces' names, BurstGPT's, and common snake_case ones); other columns are ignored. */
static int parse_csv_header(struct builder *b, const char *s, size_t len)
{
    static const char *const names[3][5] = {
        {"TIMESTAMP", "Timestamp", "timestamp", "arrival_time", NULL},
        {"ContextTokens", "Request tokens", "input_length", "input_tokens", "prompt_tokens"},
        {"GeneratedTokens", "Response tokens", "output_length", "output_tokens",
         "completion_tokens"},
    };
    size_t *col[3] = {&b->col_time, &b->col_prompt, &b->col_output};
    bool found[3] = {false, false, false};
    size_t i = 0, n = 0;
    while (i <= len) {
        size_t j = i;
        while (j < len && s[j] != ',') j++;
        for (int k = 0; k < 3; k++)
            for (int m = 0; m < 5 && names[k][m]; m++)
                if (!found[k] && strlen(names[k][m]) == j - i &&
                    !memcmp(s + i, names[k][m], j - i)) {
                    *col[k] = n;
                    found[k] = true;
                }
        n++;
        i = j + 1;
    }
    if (!found[0] || !found[1] || !found[2])
        return fail(b, ERR_PARSE,
                    "expected header naming the arrival time (TIMESTAMP or Timestamp), prompt "
                    "tokens (ContextTokens or Request tokens) and output tokens (GeneratedTokens "
                    "or Response tokens), e.g. \"TIMESTAMP,ContextTokens,GeneratedTokens\"");
    b->n_cols = n;
    return 0;
}

static int parse_azure_line(struct builder *b, const char *s, size_t len)
{
    const char *field[3] = {NULL, NULL, NULL};
    size_t flen[3] = {0, 0, 0}, n = 0, i = 0;
    if (memchr(s, '"', len)) return fail(b, ERR_PARSE, "%s", "quoted CSV fields are not supported");
    while (i <= len) {
        size_t j = i;
        while (j < len && s[j] != ',') j++;
        if (n >= b->n_cols) return fail(b, ERR_PARSE, "more than %zu columns", b->n_cols);
        for (int k = 0; k < 3; k++)
            if (n == (k == 0 ? b->col_time : k == 1 ? b->col_prompt : b->col_output)) {
                field[k] = s + i;
                flen[k] = j - i;
            }
        n++;
        i = j + 1;
    }
    if (n != b->n_cols)
        return fail(b, ERR_PARSE, "expected %zu comma-separated columns", b->n_cols);
    double ts;
    if (!parse_arrival(field[0], flen[0], &ts))
        return fail(b, ERR_PARSE, "%s",
                    "bad TIMESTAMP (want YYYY-MM-DD HH:MM:SS.fffffff, with an optional zone, or "
                    "seconds)");
    uint64_t ctx, gen;
    if (!parse_uint(field[1], flen[1], TRACE_MAX_TOKENS, &ctx))
        return fail(b, ERR_PARSE, "ContextTokens is not an integer in [0, %u]", TRACE_MAX_TOKENS);
    if (!parse_uint(field[2], flen[2], TRACE_MAX_TOKENS, &gen))
        return fail(b, ERR_PARSE, "GeneratedTokens is not an integer in [0, %u]", TRACE_MAX_TOKENS);
    return push_req(b, ts, (uint32_t)ctx, (uint32_t)gen, 0);
}

static int json_count(struct builder *b, json_t *o, const char *key, uint64_t *out)
{
    json_t *v = json_object_get(o, key);
    if (!v) return fail(b, ERR_PARSE, "missing \"%s\"", key);
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        (uint64_t)json_integer_value(v) > TRACE_MAX_TOKENS)
        return fail(b, ERR_PARSE, "\"%s\" is not an integer in [0, %u]", key, TRACE_MAX_TOKENS);
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static int parse_mooncake_line(struct builder *b, const char *s, size_t len)
{
    json_error_t je;
    json_t *o = json_loadb(s, len, JSON_REJECT_DUPLICATES, &je);
    int rc;
    if (!o) return fail(b, ERR_PARSE, "bad JSON: %s", je.text);
    if (!json_is_object(o)) {
        rc = fail(b, ERR_PARSE, "not a JSON object");
        goto out;
    }
    json_t *ts = json_object_get(o, "timestamp");
    if (!ts || !json_is_number(ts)) {
        rc = fail(b, ERR_PARSE, "missing or non-numeric \"timestamp\"");
        goto out;
    }
    double ms = json_number_value(ts);
    if (!isfinite(ms) || ms < 0 || ms > TRACE_MAX_SECONDS * 1000) {
        rc = fail(b, ERR_RANGE, "\"timestamp\" out of range");
        goto out;
    }
    uint64_t in, outl;
    if ((rc = json_count(b, o, "input_length", &in)) != 0) goto out;
    if ((rc = json_count(b, o, "output_length", &outl)) != 0) goto out;
    json_t *ids = json_object_get(o, "hash_ids");
    size_t n = 0;
    if (ids) {
        if (!json_is_array(ids)) {
            rc = fail(b, ERR_PARSE, "\"hash_ids\" is not an array");
            goto out;
        }
        n = json_array_size(ids);
        if (n > TRACE_MAX_HASHES) {
            rc = fail(b, ERR_TOO_BIG, "more than %u hash_ids", TRACE_MAX_HASHES);
            goto out;
        }
        for (size_t i = 0; i < n; i++) {
            json_t *h = json_array_get(ids, i);
            if (!json_is_integer(h) || json_integer_value(h) < 0) {
                rc = fail(b, ERR_PARSE, "hash_ids[%zu] is not a non-negative integer", i);
                goto out;
            }
            if ((rc = push_hash(b, (uint64_t)json_integer_value(h))) != 0) goto out;
        }
    }
    rc = push_req(b, ms / 1000.0, (uint32_t)in, (uint32_t)outl, (uint32_t)n);
out:
    json_decref(o);
    return rc;
}

struct keyed {
    double t;
    size_t i;
};

static int cmp_keyed(const void *pa, const void *pb)
{
    const struct keyed *a = pa, *b = pb;
    if (a->t != b->t) return a->t < b->t ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i; /* file order for ties: a stable sort */
}

/* Makes times relative to the earliest and sorts requests by arrival, stably. */
static int normalise(struct builder *b)
{
    struct trace *t = b->t;
    double t0 = INFINITY, t1 = -INFINITY;
    for (size_t i = 0; i < t->n; i++) {
        t0 = fmin(t0, b->abs_t[i]);
        t1 = fmax(t1, b->abs_t[i]);
    }
    b->line = 0;
    if (t1 - t0 > TRACE_MAX_SECONDS)
        return fail(b, ERR_RANGE, "arrival times span more than %.0f days",
                    TRACE_MAX_SECONDS / 86400);
    struct keyed *k = malloc(t->n * sizeof(*k));
    struct trace_req *sorted = malloc(t->n * sizeof(*sorted));
    if (!k || !sorted) {
        free(k);
        free(sorted);
        return fail(b, ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < t->n; i++) k[i] = (struct keyed){b->abs_t[i] - t0, i};
    qsort(k, t->n, sizeof(*k), cmp_keyed);
    for (size_t i = 0; i < t->n; i++) {
        sorted[i] = t->reqs[k[i].i];
        sorted[i].t_s = k[i].t;
    }
    free(t->reqs);
    free(k);
    t->reqs = sorted;
    b->cap_reqs = t->n;
    return 0;
}

int trace_parse(const char *data, size_t len, enum trace_format fmt, struct trace **out, char *err,
                size_t errlen)
{
    struct builder b = {.err = err, .errlen = errlen};
    int rc = ERR_NOMEM;
    if (err && errlen) err[0] = 0;
    if (len > TRACE_MAX_BYTES) {
        rc = fail(&b, ERR_TOO_BIG, "trace larger than %u bytes", TRACE_MAX_BYTES);
        goto out;
    }
    b.t = calloc(1, sizeof(*b.t));
    if (!b.t) goto out;
    b.t->format = fmt;
    size_t pos = 0;
    while (pos < len) {
        const char *s = data + pos;
        const char *nl = memchr(s, '\n', len - pos);
        size_t l = nl ? (size_t)(nl - s) : len - pos;
        pos += l + (nl ? 1 : 0);
        b.line++;
        if (l > TRACE_MAX_LINE) {
            rc = fail(&b, ERR_TOO_BIG, "line longer than %u bytes", TRACE_MAX_LINE);
            goto out;
        }
        if (l && s[l - 1] == '\r') l--;
        if (l == 0) continue; /* blank lines (a trailing newline) carry nothing */
        if (fmt == TRACE_AZURE && b.line == 1) {
            if ((rc = parse_csv_header(&b, s, l)) != 0) goto out;
            continue;
        }
        rc = fmt == TRACE_AZURE ? parse_azure_line(&b, s, l) : parse_mooncake_line(&b, s, l);
        if (rc != 0) goto out;
    }
    if (b.t->n == 0) {
        rc = fail(&b, ERR_PARSE, "no requests in the trace");
        goto out;
    }
    if ((rc = normalise(&b)) != 0) goto out;
    *out = b.t;
    b.t = NULL;
    rc = 0;
out:
    free(b.abs_t);
    trace_free(b.t);
    return rc;
}

int trace_load(const char *path, enum trace_format fmt, struct trace **out, char *err,
               size_t errlen)
{
    int rc = ERR_IO;
    char *data = NULL, scratch[1];
    if (!err || !errlen) { /* messages are optional */
        err = scratch;
        errlen = sizeof(scratch);
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        goto out;
    }
    size_t cap = 1 << 20, len = 0;
    data = malloc(cap);
    if (!data) {
        snprintf(err, errlen, "%s: out of memory", path);
        rc = ERR_NOMEM;
        goto out;
    }
    for (;;) {
        if (len == cap) {
            if (cap >= TRACE_MAX_BYTES + 1) {
                snprintf(err, errlen, "%s: larger than %u bytes", path, TRACE_MAX_BYTES);
                rc = ERR_TOO_BIG;
                goto out;
            }
            size_t ncap = cap * 2 > TRACE_MAX_BYTES + 1 ? TRACE_MAX_BYTES + 1 : cap * 2;
            char *p = realloc(data, ncap);
            if (!p) {
                snprintf(err, errlen, "%s: out of memory", path);
                rc = ERR_NOMEM;
                goto out;
            }
            data = p;
            cap = ncap;
        }
        size_t n = fread(data + len, 1, cap - len, f);
        if (n == 0) break;
        len += n;
    }
    if (ferror(f)) {
        snprintf(err, errlen, "%s: read error", path);
        goto out;
    }
    rc = trace_parse(data, len, fmt, out, err, errlen);
out:
    if (f) fclose(f);
    free(data);
    return rc;
}

void trace_free(struct trace *t)
{
    if (!t) return;
    free(t->reqs);
    free(t->hashes);
    free(t);
}

uint64_t trace_splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void trace_spread_ties(struct trace *t, uint64_t seed)
{
    if (!t || t->n < 2) return;
    /* Median gap between distinct timestamps spreads the final run. */
    size_t nd = 0;
    double *gaps = malloc(t->n * sizeof(*gaps));
    if (gaps) {
        for (size_t i = 1; i < t->n; i++)
            if (t->reqs[i].t_s > t->reqs[i - 1].t_s)
                gaps[nd++] = t->reqs[i].t_s - t->reqs[i - 1].t_s;
        if (nd) qsort(gaps, nd, sizeof(*gaps), cmp_double);
    }
    double median = gaps && nd ? gaps[nd / 2] : 0;
    free(gaps);
    uint64_t rng = seed;
    size_t i = 0;
    while (i < t->n) {
        size_t j = i;
        while (j < t->n && t->reqs[j].t_s == t->reqs[i].t_s) j++;
        double base = t->reqs[i].t_s;
        double gap = j < t->n ? t->reqs[j].t_s - base : median;
        if (j - i > 1 && gap > 0) {
            /* Sorted uniform offsets in [0, gap): order inside the run is kept. */
            double prev = 0;
            for (size_t k = i; k < j; k++) {
                size_t left = j - k;
                double u = (double)(trace_splitmix64(&rng) >> 11) / 9007199254740992.0;
                /* Next order statistic of `left` uniforms on [prev, gap): prev + (gap - prev) *
                 * (1 - (1-u)^(1/left)). */
                double x = prev + (gap - prev) * (1 - pow(1 - u, 1.0 / (double)left));
                t->reqs[k].t_s = base + x;
                prev = x;
            }
        }
        i = j;
    }
}

static double uniform01(uint64_t *rng)
{
    return (double)(trace_splitmix64(rng) >> 11) / 9007199254740992.0;
}

void trace_synth_defaults(struct trace_synth *p)
{
    *p = (struct trace_synth){.duration_s = 3600,
                              .mean_rps = 0,
                              .peak_to_trough = 4,
                              .burst_every_s = 600,
                              .burst_s = 90,
                              .burst_factor = 2.5,
                              .seed = 1};
}

int trace_synth_diurnal(const struct trace *src, const struct trace_synth *p, struct trace **out)
{
    if (!src || src->n == 0 || !(p->duration_s > 0) || p->duration_s > TRACE_MAX_SECONDS ||
        !(p->peak_to_trough >= 1) || !(p->burst_factor >= 1) || p->burst_s < 0 ||
        p->burst_every_s < 0 || p->mean_rps < 0)
        return ERR_INVAL;
    double span = src->reqs[src->n - 1].t_s - src->reqs[0].t_s;
    double mean = p->mean_rps > 0 ? p->mean_rps : span > 0 ? (double)src->n / span : 1;
    double amp = (p->peak_to_trough - 1) / (p->peak_to_trough + 1); /* 1 -/+ amp: trough, peak */
    double lmax = mean * (1 + amp) * p->burst_factor;
    if (lmax * p->duration_s > (double)TRACE_MAX_REQUESTS) return ERR_RANGE;
    uint64_t rng = p->seed ^ 0xd1b54a32d192ed03ull;
    /* Burst windows, at most one per burst_s of the run. */
    size_t nb = 0, capb = p->burst_s > 0 ? (size_t)(p->duration_s / p->burst_s) + 1 : 0;
    double *bstart = capb ? malloc(capb * sizeof(double)) : NULL;
    if (capb && !bstart) return ERR_NOMEM;
    for (double t = 0; p->burst_every_s > 0 && nb < capb;) {
        t += -log(1 - uniform01(&rng)) * p->burst_every_s;
        if (t >= p->duration_s) break;
        bstart[nb++] = t;
        t += p->burst_s;
    }
    size_t cap = (size_t)(mean * (1 + amp) * p->duration_s * 1.2) + 64, n = 0;
    struct trace *tr = calloc(1, sizeof(*tr));
    struct trace_req *v = malloc(cap * sizeof(*v));
    if (!tr || !v) goto nomem;
    size_t b = 0;
    for (double t = 0;;) {
        t += -log(1 - uniform01(&rng)) / lmax;
        if (t >= p->duration_s) break;
        while (b < nb && bstart[b] + p->burst_s <= t) b++;
        double rate = mean * (1 - amp * cos(2 * M_PI * t / p->duration_s));
        if (b < nb && bstart[b] <= t) rate *= p->burst_factor;
        if (uniform01(&rng) * lmax >= rate) continue; /* thinning */
        if (n == cap) {
            struct trace_req *w = realloc(v, 2 * cap * sizeof(*v));
            if (!w) goto nomem;
            v = w;
            cap *= 2;
        }
        const struct trace_req *from = &src->reqs[trace_splitmix64(&rng) % src->n];
        v[n++] = (struct trace_req){t, from->prompt_tokens, from->output_tokens, 0, 0};
    }
    free(bstart);
    if (n == 0) {
        free(v);
        free(tr);
        return ERR_INVAL;
    }
    tr->format = src->format;
    tr->reqs = v;
    tr->n = n;
    *out = tr;
    return 0;
nomem:
    free(bstart);
    free(v);
    free(tr);
    return ERR_NOMEM;
}

static int cmp_req_time(const void *a, const void *b)
{
    const struct trace_req *x = a, *y = b;
    if (x->t_s != y->t_s) return x->t_s < y->t_s ? -1 : 1;
    return (x->hash_off > y->hash_off) - (x->hash_off < y->hash_off); /* deterministic ties */
}

int trace_amplify(const struct trace *src, unsigned k, uint64_t seed, struct trace **out)
{
    if (!src || src->n == 0 || k < 1 || k > 10000) return ERR_INVAL;
    if ((double)src->n * k > TRACE_MAX_REQUESTS || (double)src->n_hashes * k > UINT32_MAX)
        return ERR_RANGE;
    size_t n = src->n * k, nh = src->n_hashes * k;
    struct trace *tr = calloc(1, sizeof(*tr));
    struct trace_req *v = malloc(n * sizeof(*v));
    uint64_t *h = nh ? malloc(nh * sizeof(*h)) : NULL;
    if (!tr || !v || (nh && !h)) {
        free(tr);
        free(v);
        free(h);
        return ERR_NOMEM;
    }
    uint64_t rng = seed ^ 0xa0761d6478bd642full;
    for (unsigned c = 0; c < k; c++) {
        for (size_t i = 0; i < src->n; i++) {
            const struct trace_req *r = &src->reqs[i];
            double gap = i + 1 < src->n ? src->reqs[i + 1].t_s - r->t_s : 0;
            double t = c == 0 ? r->t_s : r->t_s + uniform01(&rng) * gap;
            v[c * src->n + i] =
                (struct trace_req){t, r->prompt_tokens, r->output_tokens,
                                   (uint32_t)(c * src->n_hashes + r->hash_off), r->n_hash};
        }
        for (size_t j = 0; j < src->n_hashes; j++)
            h[c * src->n_hashes + j] = src->hashes[j] ^ (uint64_t)c * 0x9e3779b97f4a7c15ull;
    }
    qsort(v, n, sizeof(*v), cmp_req_time);
    tr->format = src->format;
    tr->reqs = v;
    tr->n = n;
    tr->hashes = h;
    tr->n_hashes = nh;
    *out = tr;
    return 0;
}
