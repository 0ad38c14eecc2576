/* metav1.Status parsing and HTTP status -> err.h mapping (status.h). */
#include "common/k8s/status.h"

#include "common/err.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

/* Copies at most dst_len-1 bytes of `src`, replacing control characters so the message is safe to
 * put in a log line or a condition. */
static void status_copy_clean(char *dst, size_t dst_len, const char *src, size_t n)
{
    size_t i;
    if (n > dst_len - 1) n = dst_len - 1;
    for (i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)src[i];
        dst[i] = ch < 0x20 || ch == 0x7f ? ' ' : (char)ch;
    }
    dst[i] = 0;
}

void k8s_status_parse(long http_status, const char *body, size_t len, struct k8s_status *st)
{
    json_t *j = NULL;
    memset(st, 0, sizeof(*st));
    st->code = http_status;
    if (len) j = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
    const char *kind = json_string_value(json_object_get(j, "kind"));
    if (kind && strcmp(kind, "Status") == 0) {
        const char *reason = json_string_value(json_object_get(j, "reason"));
        const char *msg = json_string_value(json_object_get(j, "message"));
        json_t *code = json_object_get(j, "code");
        if (reason) status_copy_clean(st->reason, sizeof(st->reason), reason, strlen(reason));
        if (msg) status_copy_clean(st->message, sizeof(st->message), msg, strlen(msg));
        if (json_is_integer(code) && json_integer_value(code) > 0 &&
            json_integer_value(code) < 1000)
            st->code = (long)json_integer_value(code);
    } else if (len) {
        status_copy_clean(st->message, sizeof(st->message), body, len);
    }
    json_decref(j);
}

int k8s_status_to_err(long code, const char *reason)
{
    if (code >= 200 && code < 300) return 0;
    switch (code) {
    case 400:
    case 422: return ERR_INVAL;
    case 401:
    case 403: return ERR_AUTH;
    case 404: return ERR_NOT_FOUND;
    case 405:
    case 415: return ERR_UNSUPPORTED;
    case 409: return reason && strcmp(reason, "AlreadyExists") == 0 ? ERR_EXISTS : ERR_CONFLICT;
    case 410: return ERR_GONE;
    case 413: return ERR_TOO_BIG;
    case 429:
    case 503: return ERR_AGAIN;
    case 504: return ERR_TIMEOUT;
    default: return ERR_HTTP;
    }
}
