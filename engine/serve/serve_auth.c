/* API keys: parsing, the constant-time check and the rate-limited failure log (serve_auth.h). */
#include "engine/serve/serve_auth.h"

#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"
#include "common/sha256.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

struct serve_auth_key {
    char digest[SHA256_HEX_LEN]; /* SHA-256 of the key, hex: all the check ever compares */
    char id[SERVE_AUTH_ID_LEN];  /* its first 16 digits */
};

struct serve_auth {
    struct serve_auth_key *keys;
    size_t n, cap;
    atomic_llong last_log_ms; /* monotonic ms of the last failure line; LLONG_MIN before any */
    atomic_llong suppressed;  /* failures not logged since that line */
};

int serve_auth_new(struct serve_auth **out)
{
    struct serve_auth *a = calloc(1, sizeof(*a));
    if (!a) return ERR_NOMEM;
    atomic_init(&a->last_log_ms, -(1LL << 62));
    atomic_init(&a->suppressed, 0);
    *out = a;
    return 0;
}

void serve_auth_free(struct serve_auth *a)
{
    if (!a) return;
    free(a->keys);
    free(a);
}

size_t serve_auth_count(const struct serve_auth *a)
{
    return a ? a->n : 0;
}

/* What a key may hold: visible ASCII but the separator. */
static bool serve_auth_key_char(unsigned char c)
{
    return c > 0x20 && c < 0x7f && c != ',';
}

/* 1 when every byte of the two 64-digit digests is equal; no early exit. */
static int serve_auth_digest_eq(const char *x, const char *y)
{
    unsigned char diff = 0;
    for (int i = 0; i < SHA256_HEX_LEN - 1; i++) diff |= (unsigned char)(x[i] ^ y[i]);
    return diff == 0;
}

int serve_auth_add(struct serve_auth *a, const char *text, size_t len, const char *origin,
                   char *err, size_t errlen)
{
    size_t n0 = a->n;
    int rc = 0, entry = 0;
    bool line_start = true;
    for (size_t i = 0; i <= len && rc == 0;) {
        bool at_line_start = line_start;
        size_t j = i;
        while (j < len && text[j] != '\n' && text[j] != ',') j++;
        size_t s = i, e = j;
        line_start = j >= len || text[j] == '\n';
        i = j + 1;
        while (s < e && (text[s] == ' ' || text[s] == '\t' || text[s] == '\r')) s++;
        while (e > s && (text[e - 1] == ' ' || text[e - 1] == '\t' || text[e - 1] == '\r')) e--;
        if (at_line_start && s < e && text[s] == '#') { /* to the end of the line, commas too */
            while (j < len && text[j] != '\n') j++;
            i = j + 1;
            line_start = true;
            continue;
        }
        entry++;
        if (s == e) continue;
        if (e - s > SERVE_AUTH_MAX_KEY) {
            rc = err_fmt(err, errlen, ERR_INVAL, "%s: entry %d is longer than %d bytes", origin,
                         entry, SERVE_AUTH_MAX_KEY);
            break;
        }
        for (size_t k = s; k < e; k++)
            if (!serve_auth_key_char((unsigned char)text[k])) {
                rc = err_fmt(err, errlen, ERR_INVAL,
                             "%s: entry %d holds a byte a bearer token cannot (0x%02x at %zu): "
                             "keys are printable ASCII without spaces or commas",
                             origin, entry, (unsigned char)text[k], k - s);
                break;
            }
        if (rc) break;
        char digest[SHA256_HEX_LEN];
        if (sha256_hex(text + s, e - s, digest) != 0) {
            rc = ERR_NOMEM;
            break;
        }
        for (size_t k = 0; k < a->n; k++)
            if (strcmp(a->keys[k].digest, digest) == 0) {
                rc = err_fmt(err, errlen, ERR_INVAL,
                             "%s: entry %d repeats an earlier key (id %.16s)", origin, entry,
                             digest);
                break;
            }
        if (rc) break;
        if (a->n == SERVE_AUTH_MAX_KEYS) {
            rc = err_fmt(err, errlen, ERR_TOO_BIG, "%s: more than %d keys", origin,
                         SERVE_AUTH_MAX_KEYS);
            break;
        }
        if (a->n == a->cap) {
            size_t cap = a->cap ? 2 * a->cap : 8;
            struct serve_auth_key *k = realloc(a->keys, cap * sizeof(*k));
            if (!k) {
                rc = ERR_NOMEM;
                break;
            }
            a->keys = k;
            a->cap = cap;
        }
        struct serve_auth_key *k = &a->keys[a->n++];
        memcpy(k->digest, digest, sizeof(digest));
        memcpy(k->id, digest, SERVE_AUTH_ID_LEN - 1);
        k->id[SERVE_AUTH_ID_LEN - 1] = '\0';
    }
    if (rc) {
        if (rc == ERR_NOMEM) (void)err_fmt(err, errlen, rc, "%s: out of memory", origin);
        a->n = n0;
    }
    return rc;
}

int serve_auth_add_file(struct serve_auth *a, const char *path, char *err, size_t errlen)
{
    int rc = ERR_IO;
    char *text = NULL;
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (!f || fstat(fileno(f), &st) != 0) {
        rc = err_fmt(err, errlen, ERR_IO, "cannot read the API key file %s: %s", path,
                     strerror(errno));
        goto out;
    }
    if (st.st_size > SERVE_AUTH_MAX_FILE) {
        rc = err_fmt(err, errlen, ERR_TOO_BIG, "the API key file %s is over %d bytes", path,
                     SERVE_AUTH_MAX_FILE);
        goto out;
    }
    if (!(text = malloc(SERVE_AUTH_MAX_FILE + 1))) {
        rc = err_fmt(err, errlen, ERR_NOMEM, "out of memory");
        goto out;
    }
    size_t n = fread(text, 1, SERVE_AUTH_MAX_FILE + 1, f);
    if (ferror(f)) {
        rc = err_fmt(err, errlen, ERR_IO, "cannot read the API key file %s: %s", path,
                     strerror(errno));
        goto out;
    }
    if (n > SERVE_AUTH_MAX_FILE) { /* grew since the fstat */
        rc = err_fmt(err, errlen, ERR_TOO_BIG, "the API key file %s is over %d bytes", path,
                     SERVE_AUTH_MAX_FILE);
        goto out;
    }
    rc = serve_auth_add(a, text, n, path, err, errlen);
out:
    if (text) {
        explicit_bzero(text, SERVE_AUTH_MAX_FILE + 1);
        free(text);
    }
    if (f) fclose(f);
    return rc;
}

enum serve_auth_result serve_auth_check(const struct serve_auth *a, const char *header, size_t len,
                                        int *key)
{
    if (!header) return SERVE_AUTH_MISSING;
    if (len < 7 || strncasecmp(header, "Bearer ", 7) != 0) return SERVE_AUTH_MALFORMED;
    size_t i = 7;
    while (i < len && header[i] == ' ') i++;
    const char *tok = header + i;
    size_t n = len - i;
    if (n == 0 || n > SERVE_AUTH_MAX_KEY) return n == 0 ? SERVE_AUTH_MALFORMED : SERVE_AUTH_WRONG;
    for (size_t k = 0; k < n; k++)
        if (!serve_auth_key_char((unsigned char)tok[k])) return SERVE_AUTH_MALFORMED;
    char digest[SHA256_HEX_LEN];
    if (sha256_hex(tok, n, digest) != 0) return SERVE_AUTH_WRONG; /* cannot hash: refuse */
    int found = -1;
    for (size_t k = 0; a && k < a->n; k++) { /* every key, whatever matched */
        int eq = serve_auth_digest_eq(a->keys[k].digest, digest);
        found = eq ? (int)k : found;
    }
    if (found < 0) return SERVE_AUTH_WRONG;
    if (key) *key = found;
    return SERVE_AUTH_OK;
}

const char *serve_auth_key_id(const struct serve_auth *a, int key)
{
    return a && key >= 0 && (size_t)key < a->n ? a->keys[key].id : NULL;
}

const char *serve_auth_key_digest(const struct serve_auth *a, int key)
{
    return a && key >= 0 && (size_t)key < a->n ? a->keys[key].digest : NULL;
}

const char *serve_auth_result_name(enum serve_auth_result r)
{
    switch (r) {
    case SERVE_AUTH_OK: return "ok";
    case SERVE_AUTH_MISSING: return "missing";
    case SERVE_AUTH_MALFORMED: return "malformed";
    case SERVE_AUTH_WRONG: return "wrong_key";
    }
    return "?";
}

int serve_auth_log_failure(struct serve_auth *a, enum serve_auth_result why, const char *what)
{
    if (!a) return 0;
    long long now = (long long)(clock_mono_s() * 1000.0);
    long long last = atomic_load(&a->last_log_ms);
    if (now - last < SERVE_AUTH_LOG_PERIOD_MS ||
        !atomic_compare_exchange_strong(&a->last_log_ms, &last, now)) {
        atomic_fetch_add(&a->suppressed, 1);
        return 0;
    }
    long long suppressed = atomic_exchange(&a->suppressed, 0);
    log_warn("authentication failed", LOG_S("reason", serve_auth_result_name(why)),
             LOG_S("route", what ? what : ""), LOG_I("suppressed", suppressed));
    return 1;
}
