/* Names for the error codes in err.h, and the error-message formatter. */
#include "common/err.h"

#include <stdio.h>
#include <string.h>

const char *err_str(int code)
{
    switch ((enum err_code)code) {
    case ERR_OK: return "ok";
    case ERR_NOMEM: return "out of memory";
    case ERR_INVAL: return "invalid argument";
    case ERR_IO: return "i/o error";
    case ERR_RANGE: return "value out of range";
    case ERR_TOO_BIG: return "too big";
    case ERR_NOT_FOUND: return "not found";
    case ERR_EXISTS: return "already exists";
    case ERR_TIMEOUT: return "timed out";
    case ERR_PARSE: return "parse error";
    case ERR_UNSUPPORTED: return "unsupported";
    case ERR_BAD_STATE: return "invalid state";
    case ERR_AGAIN: return "temporarily unavailable";
    case ERR_HTTP: return "http error";
    case ERR_AUTH: return "unauthorized";
    case ERR_CONFLICT: return "conflict";
    case ERR_GONE: return "gone";
    case ERR_CANCELLED: return "cancelled";
    case ERR_INTERNAL: return "internal error";
    }
    return "unknown error";
}

/* A truncated message may end inside a multi-byte character: drops that partial character (the
 * lead byte announces more bytes than are left) so the message stays valid UTF-8 (JSON error
 * bodies need it). */
static void err_trim_utf8(char *s)
{
    size_t len = strlen(s), i = len;
    while (i > 0 && ((unsigned char)s[i - 1] & 0xC0) == 0x80 && len - i < 3) i--;
    if (i == 0) return;
    unsigned char lead = (unsigned char)s[i - 1];
    size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (need > 1 && len - (i - 1) < need) s[i - 1] = '\0';
}

int err_vfmt(char *err, size_t errlen, int rc, const char *fmt, va_list ap)
{
    if (!err || !errlen) return rc;
    int n = vsnprintf(err, errlen, fmt, ap);
    if (n < 0)
        err[0] = '\0';
    else if ((size_t)n >= errlen)
        err_trim_utf8(err);
    return rc;
}

int err_fmt(char *err, size_t errlen, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    err_vfmt(err, errlen, rc, fmt, ap);
    va_end(ap);
    return rc;
}
