/* Names for the error codes in err.h. */
#include "common/err.h"

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
