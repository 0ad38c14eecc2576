/* Helpers every request parser of the API layer shares (api_request.c, api_request_chat.c): the
 * error constructors that name the offending parameter, JSON type names for messages, and the field
 * lookup that treats JSON null as absent. A leaf: it calls nothing else in engine/api but
 * api_error_set. */
#include "engine/api/api_priv.h"

#include "common/err.h"

int api_nomem(struct api_parse *p)
{
    api_error_set(p->err, API_ERR_INTERNAL, NULL, "out of memory while parsing the request");
    return ERR_NOMEM;
}

int api_invalid(struct api_parse *p, const char *param, const char *msg)
{
    api_error_set(p->err, API_ERR_INVALID, param, "%s", msg);
    return ERR_INVAL;
}

const char *api_json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "a value";
}

int api_wrong_type(struct api_parse *p, const char *param, const char *want, const json_t *v)
{
    api_error_set(p->err, API_ERR_INVALID, param, "'%s' must be %s, got %s", param, want,
                  api_json_type_name(v));
    return ERR_INVAL;
}
