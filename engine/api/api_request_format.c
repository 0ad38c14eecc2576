/* Structured-output parameters -> api_request.grammar (GBNF text; engine/grammar/ compiles it on
 * the HTTP thread, where the vocabulary is). OpenAI's response_format: {"type":"text"},
 * {"type":"json_object"}, {"type":"json_schema","json_schema":{"name","schema","strict"}}
 * (https://platform.openai.com/docs/guides/structured-outputs); vLLM's guided_json, guided_grammar,
 * guided_choice, guided_regex and their newer structured_outputs {"json","grammar","choice","regex"}
 * spelling (a regex describes the whole output: engine/grammar/grammar_regex.h). A schema
 * the converter cannot honour is a 400 naming the keyword, never an unconstrained answer. */
#include "engine/api/api.h"

#include "common/buf.h"
#include "common/err.h"
#include "common/json_util.h"
#include "engine/api/api_priv.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/grammar_regex.h"
#include "engine/grammar/grammar_schema.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define API_MAX_CHOICES 1024 /* guided_choice strings */

/* Takes the finished grammar text of `b` into the request, naming its parameter. */
static int api_format_set(struct api_parse *p, const char *param, struct buf *b)
{
    if (p->r->grammar) {
        buf_fini(b);
        return api_invalid(p, param,
                           "give one structured-output constraint (response_format, guided_json, "
                           "guided_grammar, guided_choice, guided_regex or "
                           "structured_outputs)");
    }
    p->r->grammar = buf_steal(b);
    buf_fini(b);
    if (!p->r->grammar) return api_nomem(p);
    snprintf(p->r->grammar_param, sizeof(p->r->grammar_param), "%s", param);
    return 0;
}

static int api_format_fail(struct api_parse *p, const char *param, int rc, const char *msg,
                           struct buf *b)
{
    buf_fini(b);
    if (rc == ERR_NOMEM) return api_nomem(p);
    api_error_set(p->err, API_ERR_INVALID, param, "%s", msg);
    return ERR_INVAL;
}

/* A JSON schema (an object or boolean; a string holding one for vLLM's guided_json). */
static int api_format_schema(struct api_parse *p, const char *param, const json_t *schema)
{
    json_t *owned = NULL;
    if (json_is_string(schema)) {
        json_error_t je;
        owned = json_loads(json_string_value(schema), JSON_REJECT_DUPLICATES, &je);
        if (!owned) {
            api_error_set(p->err, API_ERR_INVALID, param, "'%s' is not valid JSON: %s", param,
                          je.text);
            return ERR_INVAL;
        }
        schema = owned;
    }
    if (!json_is_object(schema) && !json_is_boolean(schema)) {
        json_decref(owned);
        return api_wrong_type(p, param, "a JSON schema object", schema);
    }
    struct buf b;
    buf_init(&b, GRAMMAR_MAX_TEXT);
    char err[320];
    int rc = grammar_schema_gbnf(schema, &b, err, sizeof(err));
    json_decref(owned);
    if (rc) return api_format_fail(p, param, rc, err, &b);
    return api_format_set(p, param, &b);
}

static int api_format_grammar(struct api_parse *p, const char *param, const json_t *g)
{
    if (!json_is_string(g)) return api_wrong_type(p, param, "a string (GBNF)", g);
    if (json_string_length(g) > GRAMMAR_MAX_TEXT)
        return api_invalid(p, param, "the grammar is longer than 4 MiB");
    struct buf b;
    buf_init(&b, GRAMMAR_MAX_TEXT);
    if (buf_append(&b, json_string_value(g), json_string_length(g)))
        return api_format_fail(p, param, ERR_NOMEM, "", &b);
    return api_format_set(p, param, &b);
}

/* A regular expression the whole output must match (vLLM's guided_regex). */
static int api_format_regex(struct api_parse *p, const char *param, const json_t *re)
{
    if (!json_is_string(re)) return api_wrong_type(p, param, "a string (regular expression)", re);
    struct buf b;
    buf_init(&b, GRAMMAR_MAX_TEXT);
    char err[256];
    int rc = grammar_regex_root_gbnf(json_string_value(re), json_string_length(re), &b, err,
                                     sizeof(err));
    if (rc) return api_format_fail(p, param, rc, err, &b);
    return api_format_set(p, param, &b);
}

static int api_format_choice(struct api_parse *p, const char *param, const json_t *c)
{
    size_t n = json_array_size(c);
    if (!json_is_array(c) || n == 0 || n > API_MAX_CHOICES)
        return api_invalid(p, param, "must be an array of 1 to 1024 strings");
    const char **v = calloc(n, sizeof(*v));
    if (!v) return api_nomem(p);
    for (size_t i = 0; i < n; i++) {
        const json_t *s = json_array_get(c, i);
        if (!json_is_string(s) || !json_string_length(s) ||
            strlen(json_string_value(s)) != json_string_length(s)) {
            free(v);
            return api_invalid(p, param, "must be an array of non-empty strings");
        }
        v[i] = json_string_value(s);
    }
    struct buf b;
    buf_init(&b, GRAMMAR_MAX_TEXT);
    int rc = grammar_schema_choice_gbnf(v, n, &b);
    free(v);
    if (rc) return api_format_fail(p, param, rc, "the choices make a grammar over 4 MiB", &b);
    return api_format_set(p, param, &b);
}

static int api_format_response(struct api_parse *p, const json_t *rf)
{
    if (!json_is_object(rf)) return api_wrong_type(p, "response_format", "an object", rf);
    const json_t *t = json_object_get(rf, "type");
    if (!json_is_string(t))
        return api_invalid(p, "response_format.type",
                           "'response_format.type' must be 'text', 'json_object' or 'json_schema'");
    const char *type = json_string_value(t);
    if (!strcmp(type, "text")) return 0;
    if (!strcmp(type, "json_object")) {
        struct buf b;
        buf_init(&b, GRAMMAR_MAX_TEXT);
        if (grammar_schema_object_gbnf(&b)) return api_format_fail(p, "", ERR_NOMEM, "", &b);
        return api_format_set(p, "response_format", &b);
    }
    if (strcmp(type, "json_schema") != 0)
        return api_invalid(p, "response_format.type",
                           "'response_format.type' must be 'text', 'json_object' or 'json_schema'");
    const json_t *js = json_object_get(rf, "json_schema");
    if (!json_is_object(js))
        return api_invalid(p, "response_format.json_schema",
                           "'response_format.json_schema' must be an object with a 'schema'");
    const json_t *strict = json_util_field(js, "strict");
    if (strict && !json_is_boolean(strict))
        return api_wrong_type(p, "response_format.json_schema.strict", "a boolean", strict);
    const json_t *name = json_util_field(js, "name");
    if (name && !json_is_string(name))
        return api_wrong_type(p, "response_format.json_schema.name", "a string", name);
    const json_t *schema = json_util_field(js, "schema");
    if (!schema) { /* OpenAI: a schema-less json_schema is any JSON object */
        struct buf b;
        buf_init(&b, GRAMMAR_MAX_TEXT);
        if (grammar_schema_object_gbnf(&b)) return api_format_fail(p, "", ERR_NOMEM, "", &b);
        return api_format_set(p, "response_format.json_schema", &b);
    }
    return api_format_schema(p, "response_format.json_schema.schema", schema);
}

int api_parse_format(struct api_parse *p)
{
    const json_t *v;
    int rc;
    if ((v = json_util_field(p->root, "response_format")) && (rc = api_format_response(p, v)))
        return rc;
    if ((v = json_util_field(p->root, "guided_json")) &&
        (rc = api_format_schema(p, "guided_json", v)))
        return rc;
    if ((v = json_util_field(p->root, "guided_grammar")) &&
        (rc = api_format_grammar(p, "guided_grammar", v)))
        return rc;
    if ((v = json_util_field(p->root, "guided_choice")) &&
        (rc = api_format_choice(p, "guided_choice", v)))
        return rc;
    if ((v = json_util_field(p->root, "guided_regex")) &&
        (rc = api_format_regex(p, "guided_regex", v)))
        return rc;
    const json_t *so = json_util_field(p->root, "structured_outputs");
    if (!so) return 0;
    if (!json_is_object(so)) return api_wrong_type(p, "structured_outputs", "an object", so);
    if ((v = json_util_field(so, "json")) &&
        (rc = api_format_schema(p, "structured_outputs.json", v)))
        return rc;
    if ((v = json_util_field(so, "grammar")) &&
        (rc = api_format_grammar(p, "structured_outputs.grammar", v)))
        return rc;
    if ((v = json_util_field(so, "choice")) &&
        (rc = api_format_choice(p, "structured_outputs.choice", v)))
        return rc;
    if ((v = json_util_field(so, "regex")) &&
        (rc = api_format_regex(p, "structured_outputs.regex", v)))
        return rc;
    return 0;
}
