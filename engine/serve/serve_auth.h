/* API keys of `cinfer-engine serve`: the set of accepted bearer tokens (--api-key, the environment
 * variable CINFER_ENGINE_API_KEY, --api-key-file), the constant-time check of an Authorization
 * header against all of them, each key's public id (logs, the per-key prefix-cache salt), and the
 * rate-limited log line of a failed check.
 *
 * Keys are never logged, echoed in an error or compared byte by byte: the check hashes the token
 * it was sent and compares that SHA-256 digest with every key's, all of them, without an early
 * exit, so neither which key matched nor how much of one did shows in the time it takes.
 *
 * Built once before serving (serve_auth_new, serve_auth_add, serve_auth_add_file), then read-only
 * apart from the failure log's counters (atomics): any thread may check. */
#ifndef CINFER_ENGINE_SERVE_AUTH_H
#define CINFER_ENGINE_SERVE_AUTH_H

#include <stddef.h>

#define SERVE_AUTH_MAX_KEY       512       /* bytes of one key */
#define SERVE_AUTH_MAX_KEYS      4096      /* keys in one set */
#define SERVE_AUTH_MAX_FILE      (1 << 20) /* bytes of a key file */
#define SERVE_AUTH_ID_LEN        17        /* a key id: 16 hex digits and the terminator */
#define SERVE_AUTH_LOG_PERIOD_MS 1000      /* at most one failure line per period */

struct serve_auth;

/* A new, empty set (which accepts nothing: callers use NULL for "no authentication"). *out is
 * new (serve_auth_free). 0 or ERR_NOMEM. */
int serve_auth_new(struct serve_auth **out);
void serve_auth_free(struct serve_auth *a); /* NULL-safe */

/* Adds the keys in text[0..len) (borrowed): separated by newlines or commas, spaces, tabs and CRs
 * around each trimmed, empty entries and lines starting with '#' skipped. A key is 1 to
 * SERVE_AUTH_MAX_KEY bytes of printable ASCII other than space and comma, what a bearer token in
 * an HTTP header can carry: anything else (a NUL byte, a control byte, non-ASCII) is refused, and
 * so is a key already in the set. `origin` (borrowed) names the source in messages; a message
 * gives the entry's number, never the key. 0, ERR_INVAL (err says why; the set is unchanged),
 * ERR_TOO_BIG (over SERVE_AUTH_MAX_KEYS) or ERR_NOMEM. */
int serve_auth_add(struct serve_auth *a, const char *text, size_t len, const char *origin,
                   char *err, size_t errlen);
/* serve_auth_add over the contents of the file at `path` (borrowed; at most SERVE_AUTH_MAX_FILE
 * bytes). Also ERR_IO (err names errno) and ERR_TOO_BIG for a larger file. */
int serve_auth_add_file(struct serve_auth *a, const char *path, char *err, size_t errlen);
size_t serve_auth_count(const struct serve_auth *a);

enum serve_auth_result {
    SERVE_AUTH_OK = 0,
    SERVE_AUTH_MISSING,   /* no Authorization header */
    SERVE_AUTH_MALFORMED, /* not "Bearer <token>", or a token no key can be (NUL, control) */
    SERVE_AUTH_WRONG,     /* a well-formed token that is no key of the set */
};

/* Checks an Authorization header value (`header`, len bytes, borrowed; NULL when absent): the
 * scheme "Bearer" in any case, spaces, then the token, which must be one of the keys exactly
 * (case-sensitive, every byte of `len`: a NUL and what follows it count). On SERVE_AUTH_OK writes
 * the key's index to *key when key is not NULL. Constant time over the set (see above). */
enum serve_auth_result serve_auth_check(const struct serve_auth *a, const char *header, size_t len,
                                        int *key);
/* Key `key`'s id: the first 16 hex digits of the SHA-256 of the key (borrowed from the set). Safe
 * to log: it identifies a key without revealing it. */
const char *serve_auth_key_id(const struct serve_auth *a, int key);
/* Key `key`'s full SHA-256 as hex (64 digits, borrowed): the prefix-cache salt of its tenant. */
const char *serve_auth_key_digest(const struct serve_auth *a, int key);

/* Logs a failed check (warn: "authentication failed", the reason and `what`, e.g. the route;
 * never the token) at most once per SERVE_AUTH_LOG_PERIOD_MS; failures in between are counted and
 * reported as "suppressed" on the next line. Returns whether this call logged. Any thread. */
int serve_auth_log_failure(struct serve_auth *a, enum serve_auth_result why, const char *what);
/* The reason's name in logs and tests: "ok", "missing", "malformed", "wrong_key". */
const char *serve_auth_result_name(enum serve_auth_result r);

#endif
