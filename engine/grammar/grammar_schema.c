/* JSON Schema -> GBNF (grammar_schema.h). One rule per subschema ("s<N>"), one per $ref target
 * ("r<N>", emitted once, so recursive schemas are recursive rules), and the fixed JSON rules
 * (j-*) at the end. Each rule body is built in a local buffer while its children are emitted into
 * the output, so a body only names rules that exist by the end. */
#include "engine/grammar/grammar_schema.h"

#include "common/buf.h"
#include "common/err.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/grammar_regex.h"
#include "engine/grammar/grammar_schema_merge.h"
#include "engine/grammar/grammar_schema_priv.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Keywords that only annotate, or that we implement. */
static const char *const gs_known[] = {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "patternProperties",
    "items",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "enum",
    "const",
    "anyOf",
    "oneOf",
    "$ref",
    "$defs",
    "definitions",
    "nullable",
    "title",
    "description",
    "default",
    "examples",
    "$schema",
    "$id",
    "$comment",
    "deprecated",
    "readOnly",
    "writeOnly",
    "discriminator",
    "strict",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
};

/* The formats enforced, as regular expressions over the string's characters (grammar_regex.h).
 * Each is a practical subset of its RFC, so what is generated always validates: dates never
 * write February 29 (leap years are not tracked), date-time / time use "T", "Z" and numeric
 * offsets, ipv6 only the full eight-group form, uri only http(s) with a hostname. Any other format
 * is an annotation (JSON Schema 2020-12's default vocabulary) and is not enforced. */
#define GS_DATE                                                                                    \
    "[1-9][0-9]{3}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|"      \
    "[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))"
#define GS_TIME                                                                                    \
    "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,9})?(?:Z|[+-](?:[01][0-9]|2[0-3]):"   \
    "[0-5][0-9])"
#define GS_LABEL "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
/* at most 3 * 64 + 61 = 253 characters (RFC 1035's limit) */
#define GS_HOST "(?:" GS_LABEL "\\.){0,3}[A-Za-z](?:[A-Za-z0-9-]{0,59}[A-Za-z0-9])?"
/* local part <= 64, domain labels <= 32: at most 64 + 1 + 4 * 33 + 24 = 221 (RFC 5321: 254) */
#define GS_MAIL_LABEL "[A-Za-z0-9](?:[A-Za-z0-9-]{0,30}[A-Za-z0-9])?"
#define GS_PCHAR      "(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})"
#define GS_QCHAR      "(?:[A-Za-z0-9._~!$&'()*+,;=:@/?-]|%[0-9A-Fa-f]{2})"
#define GS_OCTET      "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
static const struct {
    const char *name, *regex;
} gs_formats[] = {
    {"date", GS_DATE},
    {"time", GS_TIME},
    {"date-time", GS_DATE "T" GS_TIME},
    {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"},
    {"email", "[A-Za-z0-9_+-]{1,32}(?:\\.[A-Za-z0-9_+-]{1,31})?@(?:" GS_MAIL_LABEL
              "\\.){1,4}[A-Za-z]{2,24}"},
    {"hostname", GS_HOST},
    {"ipv4", GS_OCTET "(?:\\." GS_OCTET "){3}"},
    {"ipv6", "[0-9a-fA-F]{1,4}(?::[0-9a-fA-F]{1,4}){7}"},
    {"uri", "https?://" GS_HOST "(?::[0-9]{1,5})?(?:/" GS_PCHAR "*)*(?:\\?" GS_QCHAR
            "*)?(?:#" GS_QCHAR "*)?"},
};

/* The regex of an enforced format, or NULL (an annotation). */
static const char *gs_format_regex(const json_t *format)
{
    for (size_t i = 0; json_is_string(format) && i < sizeof(gs_formats) / sizeof(gs_formats[0]);
         i++)
        if (!strcmp(json_string_value(format), gs_formats[i].name)) return gs_formats[i].regex;
    return NULL;
}

static const char gs_base[] =
    "ws ::= \" \"?\n"
    "j-char ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"
    "j-string ::= \"\\\"\" j-char* \"\\\"\"\n"
    "j-int ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n"
    "j-number ::= j-int ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?\n"
    "j-bool ::= \"true\" | \"false\"\n"
    "j-null ::= \"null\"\n"
    "j-value ::= j-object | j-array | j-string | j-number | j-bool | j-null\n"
    "j-kv ::= j-string ws \":\" ws j-value ws\n"
    "j-object ::= \"{\" ws ( j-kv ( \",\" ws j-kv )* )? \"}\"\n"
    "j-array ::= \"[\" ws ( j-value ws ( \",\" ws j-value ws )* )? \"]\"\n";

/* Appends `text` as a GBNF literal "...". */
static int gs_literal(struct buf *b, const char *text, size_t len)
{
    int rc = buf_putc(b, '"');
    for (size_t i = 0; rc == 0 && i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c == '"' || c == '\\')
            rc = buf_putc(b, '\\') ? ERR_NOMEM : buf_putc(b, (char)c);
        else if (c < 0x20 || c == 0x7f)
            rc = buf_printf(b, "\\x%02x", c);
        else
            rc = buf_putc(b, (char)c);
    }
    return rc ? rc : buf_putc(b, '"');
}

/* Appends the compact JSON text of v as a literal. */
static int gs_json_literal(struct buf *b, const json_t *v)
{
    char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!t) return ERR_NOMEM;
    int rc = gs_literal(b, t, strlen(t));
    free(t);
    return rc;
}

static int gs_node(struct gs *s, const json_t *sch, const char *path, char *name);

/* Keeps a schema made while compiling (one reference taken) until the compile ends. */
static int gs_keep(struct gs *s, json_t *made)
{
    return json_array_append_new(s->keep, made) ? ERR_NOMEM : 0;
}

/* A non-negative integer keyword, or -1 when absent. */
static int gs_count(struct gs *s, const json_t *sch, const char *key, const char *path,
                    long long *out)
{
    const json_t *v = json_object_get(sch, key);
    *out = -1;
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return gs_fail(s, ERR_INVAL, path, "'%s' must be a non-negative integer", key);
    if (json_integer_value(v) > GRAMMAR_MAX_REPEAT)
        return gs_fail(s, ERR_TOO_BIG, path, "'%s' is larger than 10000", key);
    *out = json_integer_value(v);
    return 0;
}

/* Appends "{lo,hi}" for a repetition (hi < 0: unbounded). */
static int gs_repeat(struct buf *b, long long lo, long long hi)
{
    if (hi < 0) return buf_printf(b, "{%lld,}", lo);
    return buf_printf(b, "{%lld,%lld}", lo, hi);
}

/* A string by `pattern` or an enforced `format`, inside the quotes. */
static int gs_string_regex(struct gs *s, const json_t *sch, const char *path, long long lo,
                           long long hi, struct buf *b)
{
    const json_t *pat = json_object_get(sch, "pattern"), *fmt = json_object_get(sch, "format");
    const char *re = gs_format_regex(fmt), *what = "format";
    if (pat && !json_is_string(pat))
        return gs_fail(s, ERR_INVAL, path, "%s", "'pattern' must be a string");
    if (pat && re)
        return gs_fail(s, ERR_UNSUPPORTED, path, "%s",
                       "'pattern' together with 'format' is not supported");
    if (pat) re = json_string_value(pat), what = "pattern";
    struct grammar_regex_opts o = {.json_string = true, .min_chars = lo, .max_chars = hi};
    char rerr[200], msg[240];
    int rc = buf_puts(b, "\"\\\"\" ");
    if (rc) return rc;
    rc = grammar_regex_gbnf(re, pat ? json_string_length(pat) : strlen(re), &o, b, rerr,
                            sizeof(rerr));
    if (rc == ERR_NOMEM) return rc;
    if (rc) {
        snprintf(msg, sizeof(msg), "'%s': %s", what, rerr);
        return gs_fail(s, rc, path, "%s", msg);
    }
    return buf_puts(b, " \"\\\"\"");
}

static int gs_string(struct gs *s, const json_t *sch, const char *path, struct buf *b)
{
    long long lo, hi;
    int rc;
    if ((rc = gs_count(s, sch, "minLength", path, &lo)) ||
        (rc = gs_count(s, sch, "maxLength", path, &hi)))
        return rc;
    if (hi >= 0 && lo >= 0 && hi < lo)
        return gs_fail(s, ERR_INVAL, path, "%s", "maxLength < minLength");
    if (json_object_get(sch, "pattern") || gs_format_regex(json_object_get(sch, "format")))
        return gs_string_regex(s, sch, path, lo, hi, b);
    if (lo < 0 && hi < 0) return buf_puts(b, "j-string");
    if (lo < 0) lo = 0;
    if ((rc = buf_puts(b, "\"\\\"\" j-char")) || (rc = gs_repeat(b, lo, hi))) return rc;
    return buf_puts(b, " \"\\\"\"");
}

static int gs_array(struct gs *s, const json_t *sch, const char *path, struct buf *b)
{
    long long lo, hi;
    int rc;
    if ((rc = gs_count(s, sch, "minItems", path, &lo)) ||
        (rc = gs_count(s, sch, "maxItems", path, &hi)))
        return rc;
    if (lo < 0) lo = 0;
    if (hi >= 0 && hi < lo) return gs_fail(s, ERR_INVAL, path, "%s", "maxItems < minItems");
    char item[GS_NAME] = "j-value";
    const json_t *items = json_object_get(sch, "items");
    if (items) {
        char sub[512];
        snprintf(sub, sizeof(sub), "%s/items", path);
        if (json_is_false(items))
            hi = 0;
        else if ((rc = gs_node(s, items, sub, item)))
            return rc;
    }
    if (hi == 0)
        return lo ? gs_fail(s, ERR_INVAL, path, "%s", "no items allowed but minItems > 0")
                  : buf_puts(b, "\"[\" ws \"]\"");
    if (lo == 0) {
        if ((rc = buf_printf(b, "\"[\" ws ( %s ws ( \",\" ws %s ws )", item, item))) return rc;
        rc = hi < 0 ? buf_putc(b, '*') : gs_repeat(b, 0, hi - 1);
        return rc ? rc : buf_puts(b, " )? \"]\"");
    }
    if ((rc = buf_printf(b, "\"[\" ws %s ws ( \",\" ws %s ws )", item, item)) ||
        (rc = gs_repeat(b, lo - 1, hi < 0 ? -1 : hi - 1)))
        return rc;
    return buf_puts(b, " \"]\"");
}

/* One "key": value pair rule for property `key` with subschema `sub`; its name in kv. */
static int gs_property(struct gs *s, const char *key, const json_t *sub, const char *path, char *kv)
{
    char val[GS_NAME], p[512];
    snprintf(p, sizeof(p), "%s/properties/%s", path, key);
    int rc = gs_node(s, sub, p, val);
    if (rc) return rc;
    snprintf(kv, GS_NAME, "s%d", s->n_rules++);
    json_t *k = json_string(key);
    if (!k) return ERR_NOMEM;
    if (!(rc = buf_printf(s->out, "%s ::= ", kv)) && !(rc = gs_json_literal(s->out, k)))
        rc = buf_printf(s->out, " ws \":\" ws %s ws\n", val);
    json_decref(k);
    return rc;
}

static int gs_object(struct gs *s, const json_t *sch, const char *path, struct buf *b);

/* An object whose `required` names properties it does not declare: they are additional ones,
 * generated with the additionalProperties schema (any value without one); refused when
 * additionalProperties is false (no instance). */
static int gs_object_extended(struct gs *s, const json_t *sch, const char *path, struct buf *b)
{
    const json_t *props = json_object_get(sch, "properties");
    const json_t *req = json_object_get(sch, "required");
    const json_t *add = json_object_get(sch, "additionalProperties");
    json_t *c = json_copy((json_t *)sch), *np = props ? json_copy((json_t *)props) : json_object();
    int rc = c && np ? 0 : ERR_NOMEM;
    for (size_t i = 0; !rc && i < json_array_size(req); i++) {
        const char *k = json_string_value(json_array_get(req, i));
        if (json_object_get(np, k)) continue;
        if (json_is_false(add)) {
            rc = gs_fail(s, ERR_UNSUPPORTED, path,
                         "required property '%.64s' is neither in 'properties' nor allowed by "
                         "'additionalProperties'",
                         k);
            break;
        }
        if (json_object_set(np, k, add ? (json_t *)add : json_true())) rc = ERR_NOMEM;
    }
    if (!rc && json_object_set_new(c, "properties", np))
        rc = ERR_NOMEM;
    else if (rc)
        json_decref(np);
    if (!rc) {
        if ((rc = gs_keep(s, c))) return rc;
        return gs_object(s, c, path, b);
    }
    json_decref(c);
    return rc;
}

/* An object with patternProperties: its declared properties obey the patterns that match their
 * names; with none declared, the keys generated are the patterns' own (any of them), each with a
 * value that satisfies every pattern's schema (so whichever patterns a key also matches, it is
 * valid), and no other key. */
static int gs_object_patterns(struct gs *s, const json_t *sch, const char *path, struct buf *b)
{
    const json_t *props = json_object_get(sch, "properties");
    const json_t *pp = json_object_get(sch, "patternProperties");
    char why[240];
    int rc;
    if (!json_is_object(pp))
        return gs_fail(s, ERR_INVAL, path, "%s", "'patternProperties' must be an object");
    if ((props && json_object_size(props)) || !json_object_size(pp)) {
        json_t *c = NULL;
        rc = grammar_schema_patterns_apply(s->root, sch, &c, why, sizeof(why));
        if (rc == ERR_NOMEM) return rc;
        if (rc) return gs_fail(s, rc, path, "%s", why);
        if ((rc = gs_keep(s, c))) return rc;
        if (json_is_false(c))
            return gs_fail(s, ERR_UNSUPPORTED, path, "%s",
                           "a required property matches a pattern whose schema it contradicts");
        return gs_object(s, c, path, b);
    }
    struct buf keys;
    buf_init(&keys, GRAMMAR_REGEX_MAX_LEN);
    json_t *val = json_true();
    const char *pat;
    json_t *ps;
    rc = 0;
    json_object_foreach((json_t *)pp, pat, ps)
    {
        json_t *m = NULL;
        if ((keys.len && (rc = buf_putc(&keys, '|'))) ||
            (rc = grammar_schema_pattern_wrap(pat, strlen(pat), &keys, why, sizeof(why))) ||
            (rc = grammar_schema_merge(s->root, val, ps, 0, &m, why, sizeof(why))))
            break;
        json_decref(val);
        val = m;
    }
    if (!rc && (rc = gs_keep(s, val)) == 0) val = NULL;
    if (rc) {
        json_decref(val);
        buf_fini(&keys);
        return rc == ERR_NOMEM ? rc : gs_fail(s, rc, path, "%s", why);
    }
    val = json_array_get(s->keep, json_array_size(s->keep) - 1);
    if (json_is_false(val)) { /* no value satisfies every pattern: no pattern key at all */
        buf_fini(&keys);
        return buf_puts(b, "\"{\" ws \"}\"");
    }
    /* the key: a JSON string of the patterns' language */
    char kname[GS_NAME], vname[GS_NAME], p[512];
    snprintf(kname, GS_NAME, "s%d", s->n_rules++);
    struct grammar_regex_opts o = {.json_string = true, .min_chars = -1, .max_chars = -1};
    char rerr[200];
    if (!(rc = buf_printf(s->out, "%s ::= \"\\\"\" ", kname)))
        rc = grammar_regex_gbnf(buf_cstr(&keys), keys.len, &o, s->out, rerr, sizeof(rerr));
    buf_fini(&keys);
    if (rc && rc != ERR_NOMEM) {
        snprintf(why, sizeof(why), "'patternProperties': %s", rerr);
        return gs_fail(s, rc, path, "%s", why);
    }
    if (rc || (rc = buf_puts(s->out, " \"\\\"\"\n"))) return rc;
    snprintf(p, sizeof(p), "%s/patternProperties", path);
    if ((rc = gs_node(s, val, p, vname))) return rc;
    return buf_printf(b,
                      "\"{\" ws ( %s ws \":\" ws %s ws ( \",\" ws %s ws \":\" ws %s ws )* )? \"}\"",
                      kname, vname, kname, vname);
}

static int gs_object(struct gs *s, const json_t *sch, const char *path, struct buf *b)
{
    const json_t *props = json_object_get(sch, "properties");
    const json_t *req = json_object_get(sch, "required");
    const json_t *add = json_object_get(sch, "additionalProperties");
    int rc;
    if (props && !json_is_object(props))
        return gs_fail(s, ERR_INVAL, path, "%s", "'properties' must be an object");
    if (req && !json_is_array(req))
        return gs_fail(s, ERR_INVAL, path, "%s", "'required' must be an array");
    for (size_t i = 0; i < json_array_size(req); i++) {
        const json_t *r = json_array_get(req, i);
        if (!json_is_string(r))
            return gs_fail(s, ERR_INVAL, path, "%s", "'required' must hold strings");
        if (!json_object_get(props, json_string_value(r)))
            return gs_object_extended(s, sch, path, b);
    }
    if (json_object_get(sch, "patternProperties")) return gs_object_patterns(s, sch, path, b);
    if (!props || !json_object_size(props)) {
        if (json_is_false(add)) return buf_puts(b, "\"{\" ws \"}\"");
        if (!add || json_is_true(add)) return buf_puts(b, "j-object");
        char val[GS_NAME], p[512];
        snprintf(p, sizeof(p), "%s/additionalProperties", path);
        if ((rc = gs_node(s, add, p, val))) return rc;
        return buf_printf(b,
                          "\"{\" ws ( j-string ws \":\" ws %s ws ( \",\" ws j-string ws \":\" ws "
                          "%s ws )* )? \"}\"",
                          val, val);
    }
    size_t n = json_object_size(props);
    char(*kv)[GS_NAME] = calloc(n, sizeof(*kv));
    bool *is_req = calloc(n, sizeof(*is_req));
    if (!kv || !is_req) {
        rc = ERR_NOMEM;
        goto out;
    }
    /* jansson keeps insertion order: the schema's order. */
    size_t i = 0, n_req = 0;
    const char *key;
    json_t *sub;
    json_object_foreach((json_t *)props, key, sub)
    {
        if ((rc = gs_property(s, key, sub, path, kv[i]))) goto out;
        is_req[i] = grammar_schema_requires(sch, key);
        n_req += is_req[i];
        i++;
    }
    if ((rc = buf_puts(b, "\"{\" ws"))) goto out;
    bool first = true;
    for (i = 0; i < n; i++) {
        if (!is_req[i]) continue;
        if ((rc = buf_printf(b, first ? " %s" : " \",\" ws %s", kv[i]))) goto out;
        first = false;
    }
    if (n_req) {
        for (i = 0; i < n; i++)
            if (!is_req[i] && (rc = buf_printf(b, " ( \",\" ws %s )?", kv[i]))) goto out;
    } else {
        /* No required property: t_i is a non-empty in-order subsequence of the properties from
         * i on, written as rules t_i ::= kv_i ( "," ws t_{i+1} )? | t_{i+1}. */
        int t0 = s->n_rules;
        s->n_rules += (int)n;
        for (i = 0; i < n; i++) {
            rc = i + 1 < n ? buf_printf(s->out, "s%d ::= %s ( \",\" ws s%d )? | s%d\n", t0 + (int)i,
                                        kv[i], t0 + (int)i + 1, t0 + (int)i + 1)
                           : buf_printf(s->out, "s%d ::= %s\n", t0 + (int)i, kv[i]);
            if (rc) goto out;
        }
        if ((rc = buf_printf(b, " ( s%d )?", t0))) goto out;
    }
    rc = buf_puts(b, " \"}\"");
out:
    free(kv);
    free(is_req);
    return rc;
}

/* The body for one `type` value. */
static int gs_typed(struct gs *s, const json_t *sch, const char *type, const char *path,
                    struct buf *b)
{
    if (!strcmp(type, "string")) return gs_string(s, sch, path, b);
    if (!strcmp(type, "integer")) return grammar_schema_number_gbnf(s, sch, path, true, b);
    if (!strcmp(type, "number")) return grammar_schema_number_gbnf(s, sch, path, false, b);
    if (!strcmp(type, "boolean")) return buf_puts(b, "j-bool");
    if (!strcmp(type, "null")) return buf_puts(b, "j-null");
    if (!strcmp(type, "array")) return gs_array(s, sch, path, b);
    if (!strcmp(type, "object")) return gs_object(s, sch, path, b);
    return gs_fail(s, ERR_INVAL, path, "unknown type '%.64s'", type);
}

/* A $ref: the rule of its target, emitted the first time. */
static int gs_ref(struct gs *s, const char *ref, const char *path, char *name)
{
    for (int i = 0; i < s->n_refs; i++)
        if (!strcmp(s->refs[i], ref)) {
            snprintf(name, GS_NAME, "r%d", i);
            return 0;
        }
    bool supported;
    const json_t *target = grammar_schema_ref_target(s->root, ref, &supported);
    if (!supported) {
        return gs_fail(s, ERR_UNSUPPORTED, path,
                       "$ref '%.96s' is not supported (only JSON pointers into this schema)", ref);
    }
    if (!target) return gs_fail(s, ERR_INVAL, path, "$ref '%.96s' names nothing", ref);
    if (s->n_refs == GRAMMAR_SCHEMA_MAX_REFS)
        return gs_fail(s, ERR_TOO_BIG, path, "%s", "more than 256 $ref targets");
    int idx = s->n_refs++;
    s->refs[idx] = ref;
    snprintf(name, GS_NAME, "r%d", idx);
    char body[GS_NAME];
    int rc = gs_node(s, target, ref, body);
    return rc ? rc : buf_printf(s->out, "r%d ::= %s\n", idx, body);
}

/* Alternatives of a list of subschemas (anyOf / oneOf). */
static int gs_alts(struct gs *s, const json_t *list, const char *key, const char *path,
                   struct buf *b)
{
    if (!json_is_array(list) || !json_array_size(list))
        return gs_fail(s, ERR_INVAL, path, "'%s' must be a non-empty array", key);
    for (size_t i = 0; i < json_array_size(list); i++) {
        int rc = i ? buf_puts(b, " | ") : 0;
        char sub[GS_NAME], p[512];
        snprintf(p, sizeof(p), "%s/%s/%zu", path, key, i);
        if (!rc && !(rc = gs_node(s, json_array_get(list, i), p, sub))) rc = buf_puts(b, sub);
        if (rc) return rc;
    }
    return 0;
}

/* pattern, an enforced format, the numeric bounds and multipleOf constrain one type's values: they need a
 * 'type' to apply to (without one every JSON value would be generated, unconstrained), and are
 * not combined with const / enum, whose literals would ignore them. (Beside $ref / anyOf / oneOf
 * they are merged into the target or branches before this check: gs_body.) */
static int gs_check_value_keywords(struct gs *s, const json_t *sch, const char *path)
{
    static const char *const keys[] = {
        "pattern",          "minimum",    "maximum", "exclusiveMinimum",
        "exclusiveMaximum", "multipleOf", "format"};
    static const char *const alone[] = {"$ref", "const", "enum", "anyOf", "oneOf"};
    const char *kw = NULL;
    const json_t *fmt = json_object_get(sch, "format");
    if (fmt && !json_is_string(fmt))
        return gs_fail(s, ERR_INVAL, path, "%s", "'format' must be a string");
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]) && !kw; i++)
        if (json_object_get(sch, keys[i])) kw = keys[i];
    if (kw && !strcmp(kw, "format") && !gs_format_regex(json_object_get(sch, "format")))
        kw = NULL; /* an annotation */
    if (!kw) return 0;
    char msg[160];
    for (size_t i = 0; i < sizeof(alone) / sizeof(alone[0]); i++)
        if (json_object_get(sch, alone[i])) {
            snprintf(msg, sizeof(msg), "'%s' next to '%s' is not supported", kw, alone[i]);
            return gs_fail(s, ERR_UNSUPPORTED, path, "%s", msg);
        }
    if (!json_object_get(sch, "type")) {
        snprintf(msg, sizeof(msg), "'%s' needs a 'type' to apply to", kw);
        return gs_fail(s, ERR_UNSUPPORTED, path, "%s", msg);
    }
    return 0;
}

static int gs_body(struct gs *s, const json_t *sch, const char *path, struct buf *b);

/* The body of sch with its allOf and a $ref beside other constraints merged into one schema
 * (grammar_schema_merge.h). */
static int gs_flattened(struct gs *s, const json_t *sch, const char *path, struct buf *b)
{
    json_t *flat = NULL;
    char why[240];
    int rc = grammar_schema_flatten(s->root, sch, 0, &flat, why, sizeof(why));
    if (rc == ERR_NOMEM) return rc;
    if (rc) return gs_fail(s, rc, path, "%s", why);
    if ((rc = gs_keep(s, flat))) return rc;
    if (json_is_false(flat))
        return gs_fail(s, ERR_UNSUPPORTED, path, "%s",
                       "allOf / $ref with its siblings admits no value");
    return gs_body(s, flat, path, b);
}

/* Whether sch has constraining keywords besides its anyOf / oneOf `alt` (and nullable, which
 * the body handles itself). */
static bool gs_has_siblings(const json_t *sch, const char *alt)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)sch, key, v)
    {
        if (strcmp(key, alt) && strcmp(key, "nullable") && !grammar_schema_annotation(key))
            return true;
    }
    return false;
}

/* m (kept) with its top-level $refs followed (8 hops at most): the schema whose keywords apply. */
static const json_t *gs_resolved(const struct gs *s, const json_t *m)
{
    for (int hop = 0; hop < 8 && json_is_object(m); hop++) {
        const char *ref = json_string_value(json_object_get(m, "$ref"));
        bool ok;
        const json_t *t = ref ? grammar_schema_ref_target(s->root, ref, &ok) : NULL;
        if (!t) break;
        m = t;
    }
    return m;
}

/* oneOf's exclusivity where `required` tells the branches apart: branch i (m[i], resolved) then
 * generates none of the properties that another branch requires and it does not, so its
 * instances fail every other branch's `required`. Applied only when every other branch requires
 * something branch i does not (else no property choice can exclude it, and the branch is left
 * as it is: generated as anyOf). Returns the schema to generate (kept), or m[i] itself. */
static int gs_oneof_exclusive(struct gs *s, json_t **m, size_t n, size_t i, json_t **out)
{
    const json_t *mi = gs_resolved(s, m[i]);
    *out = m[i];
    if (!json_is_object(mi) || !json_is_object(json_object_get(mi, "properties"))) return 0;
    json_t *drop = json_object();
    if (!drop) return ERR_NOMEM;
    bool all = true;
    for (size_t j = 0; j < n && all; j++) {
        const json_t *mj = j == i ? NULL : gs_resolved(s, m[j]);
        if (!mj || json_is_false(m[j])) continue;
        const json_t *req = json_object_get(mj, "required");
        bool some = false;
        for (size_t k = 0; k < json_array_size(req); k++) {
            const char *key = json_string_value(json_array_get(req, k));
            if (key && !grammar_schema_requires(mi, key)) {
                some = true;
                json_object_set(drop, key, json_true());
            }
        }
        all = some;
    }
    int rc = 0;
    if (all && json_object_size(drop)) {
        json_t *c = json_copy((json_t *)mi);
        json_t *props = c ? json_copy(json_object_get(c, "properties")) : NULL;
        const char *key;
        json_t *v;
        json_object_foreach(drop, key, v)
        {
            json_object_del(props, key);
        }
        if (!c || !props || json_object_set_new(c, "properties", props)) {
            json_decref(c);
            rc = ERR_NOMEM;
        } else if (!(rc = gs_keep(s, c))) {
            *out = c;
        }
    }
    json_decref(drop);
    return rc;
}

/* anyOf / oneOf beside other keywords: every branch must obey them too, so each branch is merged
 * with them; a branch nothing satisfies is dropped. oneOf is generated as anyOf, made exclusive
 * where the branches' `required` lists tell them apart (gs_oneof_exclusive). */
static int gs_alts_merged(struct gs *s, const json_t *sch, const char *alt, const char *path,
                          struct buf *b)
{
    const json_t *list = json_object_get(sch, alt);
    if (!json_is_array(list) || !json_array_size(list))
        return gs_fail(s, ERR_INVAL, path, "'%s' must be a non-empty array", alt);
    json_t *sib = json_copy((json_t *)sch);
    if (!sib) return ERR_NOMEM;
    json_object_del(sib, alt);
    json_object_del(sib, "nullable");
    size_t n_list = json_array_size(list);
    json_t **m = calloc(n_list, sizeof(*m));
    int rc = m ? gs_keep(s, sib) : ERR_NOMEM, n = 0;
    for (size_t i = 0; !rc && i < n_list; i++) {
        char why[240], p[512];
        snprintf(p, sizeof(p), "%s/%s/%zu", path, alt, i);
        rc =
            grammar_schema_merge(s->root, sib, json_array_get(list, i), 0, &m[i], why, sizeof(why));
        if (rc == ERR_NOMEM) break;
        if (rc) {
            rc = gs_fail(s, rc, p, "%s", why);
            break;
        }
        if ((rc = gs_keep(s, m[i]))) break;
    }
    bool one = !strcmp(alt, "oneOf");
    for (size_t i = 0; !rc && i < n_list; i++) {
        if (json_is_false(m[i])) continue;
        json_t *g = m[i];
        char p[512], sub[GS_NAME];
        snprintf(p, sizeof(p), "%s/%s/%zu", path, alt, i);
        if (one && (rc = gs_oneof_exclusive(s, m, n_list, i, &g))) break;
        if (!(rc = n++ ? buf_puts(b, " | ") : 0) && !(rc = gs_node(s, g, p, sub)))
            rc = buf_puts(b, sub);
    }
    free(m);
    if (!rc && n == 0)
        return gs_fail(s, ERR_UNSUPPORTED, path,
                       "no branch of '%s' is satisfiable together with its siblings", alt);
    return rc;
}

/* Whether literal v satisfies sch's `type` and, when check_enum, its `enum` (both: when absent). */
static bool gs_literal_fits(const json_t *sch, const json_t *v, bool check_enum)
{
    if (!grammar_schema_value_is(v, json_object_get(sch, "type"))) return false;
    const json_t *en = json_object_get(sch, "enum");
    if (!check_enum || !en) return true;
    for (size_t i = 0; i < json_array_size(en); i++)
        if (json_equal(json_array_get(en, i), (json_t *)v)) return true;
    return false;
}

/* const / enum: their literals, keeping only those the schema's `type` (and, for const, its enum)
 * admits: a merge can put {"type":"string"} beside {"enum":["a",1]} or a const beside an enum,
 * and a literal that fails them is no instance. None left: refused. */
static int gs_literals(struct gs *s, const json_t *sch, const char *path, struct buf *b)
{
    const json_t *c = json_object_get(sch, "const"), *en = json_object_get(sch, "enum");
    if (!c && (!json_is_array(en) || !json_array_size(en)))
        return gs_fail(s, ERR_INVAL, path, "'%s' must be a non-empty array", "enum");
    int rc = 0, n = 0;
    size_t count = c ? 1 : json_array_size(en);
    for (size_t i = 0; !rc && i < count; i++) {
        const json_t *v = c ? c : json_array_get(en, i);
        if (!gs_literal_fits(sch, v, c != NULL)) continue;
        if (!(rc = n++ ? buf_puts(b, " | ") : 0)) rc = gs_json_literal(b, v);
    }
    if (!rc && n == 0)
        return gs_fail(s, ERR_UNSUPPORTED, path, "%s",
                       "no 'const' / 'enum' value satisfies the schema's 'type' and 'enum'");
    return rc;
}

static int gs_body(struct gs *s, const json_t *sch, const char *path, struct buf *b)
{
    if (json_is_true(sch)) return buf_puts(b, "j-value");
    if (!json_is_object(sch))
        return gs_fail(s, json_is_false(sch) ? ERR_UNSUPPORTED : ERR_INVAL, path, "%s",
                       json_is_false(sch) ? "schema false admits nothing"
                                          : "a schema must be an object or a boolean");
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)sch, key, v)
    {
        bool known = grammar_schema_annotation(key) || !strcmp(key, "allOf");
        for (size_t i = 0; i < sizeof(gs_known) / sizeof(gs_known[0]) && !known; i++)
            known = !strcmp(key, gs_known[i]);
        if (!known)
            return gs_fail(s, ERR_UNSUPPORTED, path, "keyword '%.64s' is not supported", key);
    }
    int rc;
    const json_t *ref = json_object_get(sch, "$ref");
    if (json_object_get(sch, "allOf") || (ref && grammar_schema_constrains(sch, "$ref")))
        return gs_flattened(s, sch, path, b);
    bool nullable = json_is_true(json_object_get(sch, "nullable"));
    if (nullable && (rc = buf_puts(b, "j-null | "))) return rc;
    const char *alt = json_object_get(sch, "anyOf")   ? "anyOf"
                      : json_object_get(sch, "oneOf") ? "oneOf"
                                                      : NULL;
    if (alt && (gs_has_siblings(sch, alt) || !strcmp(alt, "oneOf")))
        return gs_alts_merged(s, sch, alt, path, b);
    if ((rc = gs_check_value_keywords(s, sch, path))) return rc;
    if (ref) {
        if (!json_is_string(ref))
            return gs_fail(s, ERR_INVAL, path, "%s", "'$ref' must be a string");
        char name[GS_NAME];
        if ((rc = gs_ref(s, json_string_value(ref), path, name))) return rc;
        return buf_puts(b, name);
    }
    if (json_object_get(sch, "const") || json_object_get(sch, "enum"))
        return gs_literals(s, sch, path, b);
    if ((v = json_object_get(sch, "anyOf"))) return gs_alts(s, v, "anyOf", path, b);
    if ((v = json_object_get(sch, "oneOf"))) return gs_alts(s, v, "oneOf", path, b);
    const json_t *type = json_object_get(sch, "type");
    if (json_is_string(type)) return gs_typed(s, sch, json_string_value(type), path, b);
    if (json_is_array(type) && json_array_size(type)) {
        for (size_t i = 0; i < json_array_size(type); i++) {
            const json_t *t = json_array_get(type, i);
            if (!json_is_string(t))
                return gs_fail(s, ERR_INVAL, path, "%s", "'type' must hold strings");
            if ((i && (rc = buf_puts(b, " | "))) ||
                (rc = gs_typed(s, sch, json_string_value(t), path, b)))
                return rc;
        }
        return 0;
    }
    if (type) return gs_fail(s, ERR_INVAL, path, "%s", "'type' must be a string or a list");
    /* No type: keywords of one type constrain only its values, but any JSON value would also
     * be generated, unconstrained ({"required":["a"]} writing {}, {"maxItems":0} writing [1]): a
     * value of the type they constrain is generated instead (a subset of the instances). */
    static const char *const implied[][5] = {
        {"object", "properties", "additionalProperties", "patternProperties", "required"},
        {"array", "items", "minItems", "maxItems", NULL},
        {"string", "minLength", "maxLength", NULL, NULL},
    };
    for (size_t t = 0; t < sizeof(implied) / sizeof(implied[0]); t++)
        for (size_t k = 1; k < 5 && implied[t][k]; k++)
            if (json_object_get(sch, implied[t][k]))
                return gs_typed(s, sch, implied[t][0], path, b);
    return buf_puts(b, "j-value");
}

/* Emits the rule of subschema `sch` at JSON pointer `path`; writes its name (GS_NAME bytes). */
static int gs_node(struct gs *s, const json_t *sch, const char *path, char *name)
{
    if (s->depth >= GRAMMAR_SCHEMA_MAX_DEPTH)
        return gs_fail(s, ERR_TOO_BIG, path, "%s", "nested deeper than 64 levels");
    struct buf body;
    buf_init(&body, s->out->max);
    s->depth++;
    int rc = gs_body(s, sch, path, &body);
    s->depth--;
    if (rc == 0) {
        snprintf(name, GS_NAME, "s%d", s->n_rules++);
        rc = buf_printf(s->out, "%s ::= %s\n", name, buf_cstr(&body));
    }
    buf_fini(&body);
    if (rc == ERR_TOO_BIG && !(s->err && s->err[0]))
        err_fmt(s->err, s->errlen, rc, "schema: the grammar is larger than %zu bytes", s->out->max);
    return rc;
}

int grammar_schema_gbnf(const json_t *schema, struct buf *out, char *err, size_t errlen)
{
    struct gs s = {.root = schema, .out = out, .err = err, .errlen = errlen, .keep = json_array()};
    if (err && errlen) err[0] = 0;
    char name[GS_NAME];
    int rc = s.keep ? gs_node(&s, schema, "#", name) : ERR_NOMEM;
    if (rc == 0) rc = buf_printf(out, "root ::= %s\n%s", name, gs_base);
    json_decref(s.keep);
    if (rc == ERR_NOMEM) err_fmt(err, errlen, rc, "schema: out of memory");
    return rc;
}

int grammar_schema_object_gbnf(struct buf *out)
{
    return buf_printf(out, "root ::= j-object\n%s", gs_base);
}

int grammar_schema_choice_gbnf(const char *const *choices, size_t n, struct buf *out)
{
    if (n == 0) return ERR_INVAL;
    int rc = buf_puts(out, "root ::= ");
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (!(rc = i ? buf_puts(out, " | ") : 0))
            rc = gs_literal(out, choices[i], strlen(choices[i]));
    return rc ? rc : buf_putc(out, '\n');
}

int grammar_schema_compile_text(const char *text, size_t len, const struct grammar_vocab *v,
                                struct grammar **out, char *err, size_t errlen)
{
    json_error_t je;
    json_t *schema = json_loadb(text, len, JSON_DECODE_ANY, &je);
    if (!schema)
        return err_fmt(err, errlen, ERR_PARSE, "schema: JSON line %d column %d: %s", je.line,
                       je.column, je.text);
    struct buf g;
    buf_init(&g, GRAMMAR_MAX_TEXT);
    int rc = grammar_schema_gbnf(schema, &g, err, errlen);
    if (rc == 0) rc = grammar_compile(buf_cstr(&g), g.len, v, out, err, errlen);
    buf_fini(&g);
    json_decref(schema);
    return rc;
}
