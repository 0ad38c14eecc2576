/* Error codes shared by every cinfer module. (ERR_BAD_STATE, not ERR_STATE: OpenSSL, which
 * libcurl headers pull in, has a typedef of that name.)
 * Fallible functions return 0 on success or one of these negative codes; err_str() names it for logs
 * and messages. Codes say what kind of failure happened; the detail goes in the log line or an
 * error-message buffer next to the call. */
#ifndef CINFER_COMMON_ERR_H
#define CINFER_COMMON_ERR_H

#include <stdarg.h>
#include <stddef.h>

enum err_code {
    ERR_OK = 0,
    ERR_NOMEM = -1,        /* allocation failed */
    ERR_INVAL = -2,        /* invalid argument or malformed input */
    ERR_IO = -3,           /* read/write/socket failure (errno is logged where it happened) */
    ERR_RANGE = -4,        /* value outside its allowed range */
    ERR_TOO_BIG = -5,      /* input exceeds a configured size limit */
    ERR_NOT_FOUND = -6,    /* named thing does not exist (file, key, route, tensor) */
    ERR_EXISTS = -7,       /* already exists / conflict */
    ERR_TIMEOUT = -8,      /* deadline passed */
    ERR_PARSE = -9,        /* syntax error in a text format (JSON, Prometheus, YAML, ...) */
    ERR_UNSUPPORTED = -10, /* well-formed but not supported (architecture, tensor type, ...) */
    ERR_BAD_STATE = -11,   /* operation not allowed in the current state (draining, not loaded) */
    ERR_AGAIN = -12,       /* temporary condition; retry later (queue full, no KV blocks) */
    ERR_HTTP = -13,        /* HTTP exchange failed or returned an unexpected status */
    ERR_AUTH = -14,        /* authentication / authorization failure (401, 403, bad credentials) */
    ERR_CONFLICT = -15,    /* optimistic concurrency conflict (HTTP 409) */
    ERR_GONE = -16,        /* resource version expired (HTTP 410) */
    ERR_CANCELLED = -17,   /* cancelled by the caller or by shutdown */
    ERR_INTERNAL = -18,    /* a bug or an unexpected condition in a dependency */
};

/* Returns a static string naming `code` ("out of memory", ...); never NULL; any thread. */
const char *err_str(int code);

/* The one formatter of error-message buffers: writes the message formatted from `fmt` into
 * err[0..errlen) and returns `rc`, so that a failure path reads
 *   return err_fmt(err, errlen, ERR_INVAL, "tensor '%s': %s", name, why);
 * Nothing is written when err is NULL or errlen is 0. A message too long for the buffer is cut at
 * a character boundary (never inside a UTF-8 sequence) and stays NUL-terminated. Any thread. */
int err_fmt(char *err, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int err_vfmt(char *err, size_t errlen, int rc, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

#endif
