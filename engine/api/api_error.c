/* OpenAI error objects: {"error":{"message","type","param","code"}} with the HTTP status that goes
 * with each kind (https://platform.openai.com/docs/guides/error-codes). Building the value only;
 * writing the response is the HTTP layer's job. */
#include "engine/api/api.h"

#include "common/err.h"
#include "common/json_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

struct api_error_info {
    int status;
    const char *type;
    const char *code;
};

static const struct api_error_info api_error_infos[] = {
    [API_ERR_INVALID] = {400, "invalid_request_error", NULL},
    [API_ERR_UNAUTHORIZED] = {401, "invalid_request_error", "invalid_api_key"},
    [API_ERR_NOT_FOUND] = {404, "invalid_request_error", "not_found"},
    [API_ERR_MODEL_NOT_FOUND] = {404, "invalid_request_error", "model_not_found"},
    [API_ERR_METHOD] = {405, "invalid_request_error", "method_not_allowed"},
    [API_ERR_TOO_LARGE] = {413, "invalid_request_error", "request_too_large"},
    [API_ERR_RATE_LIMIT] = {429, "rate_limit_error", "rate_limit_exceeded"},
    [API_ERR_OVERLOADED] = {503, "server_error", "server_overloaded"},
    [API_ERR_INTERNAL] = {500, "server_error", NULL},
};

void api_error_set(struct api_error *e, enum api_error_kind kind, const char *param,
                   const char *fmt, ...)
{
    if ((unsigned)kind >= sizeof(api_error_infos) / sizeof(api_error_infos[0]))
        kind = API_ERR_INTERNAL;
    const struct api_error_info *info = &api_error_infos[kind];
    e->status = info->status;
    e->type = info->type;
    e->code = info->code;
    e->retry_after_s = 0;
    snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt); /* a message cut short ends on a character boundary (err_vfmt) */
    err_vfmt(e->message, sizeof(e->message), 0, fmt, ap);
    va_end(ap);
}

json_t *api_error_json(const struct api_error *e)
{
    json_t *inner = json_object();
    json_t *outer = json_object();
    if (!inner || !outer) goto fail;
    /* jansson rejects invalid UTF-8; a message quoting client bytes must not lose the error. */
    json_t *msg = json_string(e->message);
    if (!msg) msg = json_string("invalid request");
    if (json_object_set_new(inner, "message", msg) ||
        json_object_set_new(inner, "type", json_string(e->type ? e->type : "server_error")) ||
        json_object_set_new(inner, "param", e->param[0] ? json_string(e->param) : json_null()) ||
        json_object_set_new(inner, "code", e->code ? json_string(e->code) : json_null()))
        goto fail;
    if (json_object_set_new(outer, "error", inner)) {
        inner = NULL; /* set_new consumed it even on failure */
        goto fail;
    }
    return outer;
fail:
    json_decref(inner);
    json_decref(outer);
    return NULL;
}

int api_error_body(const struct api_error *e, struct buf *out)
{
    json_t *j = api_error_json(e);
    if (!j) return ERR_NOMEM;
    int rc = json_util_dump(j, out);
    json_decref(j);
    return rc;
}

int api_error_retry_after(const struct api_error *e, char *dst, size_t dstlen)
{
    if (e->retry_after_s <= 0 || !dst || dstlen == 0) return 0;
    int n = snprintf(dst, dstlen, "%d", e->retry_after_s);
    return n > 0 && (size_t)n < dstlen ? 1 : 0;
}
