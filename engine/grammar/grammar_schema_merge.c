/* allOf and keywords beside anyOf / oneOf / $ref (see grammar_schema_merge.h). */
#include "engine/grammar/grammar_schema_merge.h"

#include "common/err.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const annotations[] = {
    "title",
    "description",
    "default",
    "examples",
    "example",
    "$schema",
    "$id",
    "id", /* draft 4's $id */
    "$anchor",
    "$comment",
    "$vocabulary",
    "$defs",
    "definitions",
    "deprecated",
    "readOnly",
    "writeOnly",
    "discriminator",
    "strict",
    "contentMediaType",
    "contentEncoding",
    /* editor hints (VS Code's JSON language service, Schema Store's catalogue) */
    "markdownDescription",
    "markdownEnumDescriptions",
    "enumDescriptions",
    "deprecationMessage",
    "defaultSnippets",
    "errorMessage",
    "patternErrorMessage",
    "doNotSuggest",
    "allowComments",
    "allowTrailingCommas",
    "fileMatch",
};

bool grammar_schema_annotation(const char *key)
{
    if (!strncmp(key, "x-", 2)) return true; /* vendor extensions */
    for (size_t i = 0; i < sizeof(annotations) / sizeof(annotations[0]); i++)
        if (!strcmp(key, annotations[i])) return true;
    return false;
}

bool grammar_schema_requires(const json_t *m, const char *key)
{
    const json_t *req = json_object_get(m, "required");
    for (size_t i = 0; i < json_array_size(req); i++) {
        const char *r = json_string_value(json_array_get(req, i));
        if (r && !strcmp(r, key)) return true;
    }
    return false;
}

bool grammar_schema_constrains(const json_t *sch, const char *except)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)sch, key, v)
    {
        if (!grammar_schema_annotation(key) && (!except || strcmp(key, except))) return true;
    }
    return false;
}

/* Whether the part of a $ref before '#' (base, n bytes) names the root schema itself: its $id
 * (draft 4: id) exactly, or the $id's last path segment (a relative reference to the same file). */
static bool ref_base_is_root(const json_t *root, const char *base, size_t n)
{
    if (n == 0) return true;
    const json_t *idv = json_object_get(root, "$id");
    if (!json_is_string(idv)) idv = json_object_get(root, "id");
    const char *id = json_string_value(idv);
    if (!id) return false;
    size_t len = strcspn(id, "#");
    if (len == n && !memcmp(id, base, n)) return true;
    return len > n && id[len - n - 1] == '/' && !memcmp(id + len - n, base, n);
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* One reference token of a JSON pointer (RFC 6901, in a URI fragment: percent-encoded), decoded
 * into tok (cap bytes); false when malformed or too long. */
static bool pointer_token(const char *p, size_t n, char *tok, size_t cap)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '%') {
            if (i + 2 >= n) return false;
            int hi = hex_digit(p[i + 1]), lo = hex_digit(p[i + 2]);
            if (hi < 0 || lo < 0) return false;
            c = (char)(hi * 16 + lo);
            i += 2;
        }
        if (c == '~') {
            char e = i + 1 < n ? p[i + 1] : 0;
            if (e != '0' && e != '1') return false;
            c = e == '0' ? '~' : '/';
            i++;
        }
        if (k + 1 >= cap) return false;
        tok[k++] = c;
    }
    tok[k] = 0;
    return true;
}

const json_t *grammar_schema_ref_target(const json_t *root, const char *ref, bool *supported)
{
    const char *hash = strchr(ref, '#');
    *supported = hash && ref_base_is_root(root, ref, (size_t)(hash - ref));
    if (!*supported) return NULL;
    const char *p = hash + 1;
    if (*p == 0) return root;
    if (*p != '/') { /* a plain-name anchor */
        *supported = false;
        return NULL;
    }
    const json_t *cur = root;
    while (cur && *p == '/') {
        p++;
        size_t n = strcspn(p, "/");
        char tok[256];
        if (!pointer_token(p, n, tok, sizeof(tok))) {
            *supported = false;
            return NULL;
        }
        if (json_is_object(cur)) {
            cur = json_object_get(cur, tok);
        } else if (json_is_array(cur)) {
            char *end;
            unsigned long i = strtoul(tok, &end, 10);
            cur = *tok && !*end ? json_array_get(cur, i) : NULL;
        } else {
            cur = NULL;
        }
        p += n;
    }
    return cur;
}

bool grammar_schema_value_is(const json_t *v, const json_t *type)
{
    if (!type) return true;
    if (json_is_array(type)) {
        for (size_t i = 0; i < json_array_size(type); i++)
            if (json_is_string(json_array_get(type, i)) &&
                grammar_schema_value_is(v, json_array_get(type, i)))
                return true;
        return false;
    }
    const char *t = json_string_value(type);
    if (!t) return false;
    switch (json_typeof(v)) {
    case JSON_STRING: return !strcmp(t, "string");
    case JSON_INTEGER: return !strcmp(t, "integer") || !strcmp(t, "number");
    case JSON_REAL: return !strcmp(t, "number");
    case JSON_TRUE:
    case JSON_FALSE: return !strcmp(t, "boolean");
    case JSON_NULL: return !strcmp(t, "null");
    case JSON_OBJECT: return !strcmp(t, "object");
    case JSON_ARRAY: return !strcmp(t, "array");
    }
    return false;
}

/* Whether merged schema r still admits a value through its const / enum: each must fit the
 * `type` beside it, and a const must be among the enum's values. */
static bool literals_admit(const json_t *r)
{
    const json_t *c = json_object_get(r, "const"), *en = json_object_get(r, "enum");
    const json_t *type = json_object_get(r, "type");
    if (c) {
        if (!grammar_schema_value_is(c, type)) return false;
        if (!json_is_array(en)) return true;
        for (size_t i = 0; i < json_array_size(en); i++)
            if (json_equal(json_array_get(en, i), (json_t *)c)) return true;
        return false;
    }
    if (!json_is_array(en)) return true;
    for (size_t i = 0; i < json_array_size(en); i++)
        if (grammar_schema_value_is(json_array_get(en, i), type)) return true;
    return false;
}

static bool trivially_true(const json_t *s)
{
    return !s || json_is_true(s) || (json_is_object(s) && !grammar_schema_constrains(s, NULL));
}

/* The intersection of two `type` values (a string or a list; integer is a number): a new
 * reference, or NULL when empty. */
static json_t *type_meet(const json_t *a, const json_t *b)
{
    const json_t *la = a, *lb = b;
    json_t *wa = json_is_string(a) ? json_pack("[O]", a) : NULL;
    json_t *wb = json_is_string(b) ? json_pack("[O]", b) : NULL;
    if (wa) la = wa;
    if (wb) lb = wb;
    json_t *out = json_array();
    for (size_t i = 0; out && i < json_array_size(la); i++) {
        const char *t = json_string_value(json_array_get(la, i));
        if (!t) continue;
        const char *keep = NULL;
        for (size_t j = 0; j < json_array_size(lb) && !keep; j++) {
            const char *u = json_string_value(json_array_get(lb, j));
            if (!u) continue;
            if (!strcmp(t, u))
                keep = t;
            else if ((!strcmp(t, "integer") && !strcmp(u, "number")) ||
                     (!strcmp(t, "number") && !strcmp(u, "integer")))
                keep = "integer";
        }
        bool dup = false;
        for (size_t j = 0; keep && j < json_array_size(out); j++)
            dup |= !strcmp(json_string_value(json_array_get(out, j)), keep);
        if (keep && !dup) json_array_append_new(out, json_string(keep));
    }
    json_decref(wa);
    json_decref(wb);
    if (!out || !json_array_size(out)) {
        json_decref(out);
        return NULL;
    }
    if (json_array_size(out) == 1) {
        json_t *one = json_incref(json_array_get(out, 0));
        json_decref(out);
        return one;
    }
    return out;
}

/* Values of `a` that are also in `b` (enum). */
static json_t *enum_meet(const json_t *a, const json_t *b)
{
    json_t *out = json_array();
    for (size_t i = 0; out && i < json_array_size(a); i++)
        for (size_t j = 0; j < json_array_size(b); j++)
            if (json_equal(json_array_get(a, i), json_array_get(b, j))) {
                json_array_append(out, json_array_get(a, i));
                break;
            }
    return out;
}

static json_t *required_union(const json_t *a, const json_t *b)
{
    json_t *out = json_copy((json_t *)a);
    for (size_t j = 0; out && j < json_array_size(b); j++) {
        bool have = false;
        for (size_t i = 0; i < json_array_size(out) && !have; i++)
            have = json_equal(json_array_get(out, i), json_array_get(b, j));
        if (!have) json_array_append(out, json_array_get(b, j));
    }
    return out;
}

/* The merged value of keyword `key` present in both with different values: 0 with *out (new;
 * NULL when the combination admits nothing), or ERR_UNSUPPORTED. */
static int keyword_meet(const json_t *root, const char *key, const json_t *va, const json_t *vb,
                        int depth, json_t **out, char *why, size_t whylen)
{
    static const char *const lower[] = {"minLength", "minItems", "minProperties", "minimum"};
    static const char *const upper[] = {"maxLength", "maxItems", "maxProperties", "maximum"};
    *out = NULL;
    if (!strcmp(key, "required") && json_is_array(va) && json_is_array(vb)) {
        *out = required_union(va, vb);
        return *out ? 0 : ERR_NOMEM;
    }
    if (!strcmp(key, "type")) {
        *out = type_meet(va, vb);
        return 0;
    }
    bool is_lo = !strcmp(key, "exclusiveMinimum"), is_hi = !strcmp(key, "exclusiveMaximum");
    for (size_t i = 0; i < 4; i++) {
        is_lo |= !strcmp(key, lower[i]);
        is_hi |= !strcmp(key, upper[i]);
    }
    if ((is_lo || is_hi) && json_is_number(va) && json_is_number(vb)) {
        double x = json_number_value(va), y = json_number_value(vb);
        *out = json_incref((json_t *)((is_lo ? x >= y : x <= y) ? va : vb));
        return 0;
    }
    if (!strcmp(key, "items") && !json_is_array(va) && !json_is_array(vb))
        return grammar_schema_merge(root, va, vb, depth + 1, out, why, whylen);
    if (!strcmp(key, "enum") && json_is_array(va) && json_is_array(vb)) {
        json_t *e = enum_meet(va, vb);
        if (!e) return ERR_NOMEM;
        if (json_array_size(e))
            *out = e;
        else
            json_decref(e);
        return 0;
    }
    if (!strcmp(key, "const")) return 0; /* two different constants: nothing */
    if (!strcmp(key, "nullable")) {
        *out = json_boolean(json_is_true(va) && json_is_true(vb));
        return 0;
    }
    return err_fmt(why, whylen, ERR_UNSUPPORTED, "'%.64s' differs between the schemas combined",
                   key);
}

/* Puts into r the properties and additionalProperties that satisfy both a's and b's: a key
 * declared on one side only must satisfy the other side's additionalProperties; a key one side
 * forbids is dropped. *none true when a required property ends up forbidden. */
static int properties_meet(const json_t *root, const json_t *a, const json_t *b, json_t *r,
                           int depth, bool *none, char *why, size_t whylen)
{
    const json_t *pa = json_object_get(a, "properties"), *pb = json_object_get(b, "properties");
    const json_t *aa = json_object_get(a, "additionalProperties");
    const json_t *ab = json_object_get(b, "additionalProperties");
    *none = false;
    if (!pa && !pb && !aa && !ab) return 0;
    if ((pa && !json_is_object(pa)) || (pb && !json_is_object(pb)))
        return err_fmt(why, whylen, ERR_INVAL, "%s", "'properties' must be an object");
    json_t *props = json_object();
    if (!props) return ERR_NOMEM;
    int rc = 0;
    for (int side = 0; side < 2 && !rc; side++) {
        const json_t *p = side ? pb : pa;
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)p, key, v)
        {
            if (side && json_object_get(pa, key)) continue; /* done from a */
            const json_t *sa = json_object_get(pa, key), *sb = json_object_get(pb, key);
            if (!sa) sa = aa;
            if (!sb) sb = ab;
            if (json_is_false(sa) || json_is_false(sb)) continue; /* forbidden */
            json_t *m = NULL;
            if (trivially_true(sa))
                m = json_incref((json_t *)(sb ? sb : json_true()));
            else if (trivially_true(sb))
                m = json_incref((json_t *)sa);
            else if ((rc = grammar_schema_merge(root, sa, sb, depth + 1, &m, why, whylen)))
                break;
            if (json_is_false(m)) {
                json_decref(m);
                continue;
            }
            if ((rc = json_object_set_new(props, key, m) ? ERR_NOMEM : 0)) break;
        }
    }
    if (!rc)
        rc = json_object_set_new(r, "properties", props) ? ERR_NOMEM : 0;
    else
        json_decref(props);
    if (rc) return rc;
    json_object_del(r, "additionalProperties");
    if (aa || ab) {
        json_t *m = NULL;
        if (trivially_true(aa))
            m = json_incref((json_t *)(ab ? ab : json_true()));
        else if (trivially_true(ab))
            m = json_incref((json_t *)aa);
        else if ((rc = grammar_schema_merge(root, aa, ab, depth + 1, &m, why, whylen)))
            return rc;
        if (json_object_set_new(r, "additionalProperties", m)) return ERR_NOMEM;
    }
    /* a required property that neither declares is an additional one: it must be allowed */
    const json_t *req = json_object_get(r, "required");
    props = json_object_get(r, "properties");
    const json_t *add = json_object_get(r, "additionalProperties");
    for (size_t i = 0; i < json_array_size(req); i++) {
        const char *k = json_string_value(json_array_get(req, i));
        if (k && !json_object_get(props, k) && json_is_false(add)) *none = true;
    }
    return 0;
}

/* x with a pure top-level $ref replaced by its target (flattened), repeatedly. */
static int resolve_top(const json_t *root, const json_t *x, int depth, json_t **out, char *why,
                       size_t whylen)
{
    json_t *cur = NULL;
    int rc = grammar_schema_flatten(root, x, depth, &cur, why, whylen);
    while (!rc && json_is_object(cur) && json_object_get(cur, "$ref")) {
        const json_t *ref = json_object_get(cur, "$ref");
        bool ok;
        const json_t *target = json_is_string(ref)
                                   ? grammar_schema_ref_target(root, json_string_value(ref), &ok)
                                   : NULL;
        if (!json_is_string(ref))
            rc = err_fmt(why, whylen, ERR_INVAL, "%s", "'$ref' must be a string");
        else if (!ok)
            rc = err_fmt(why, whylen, ERR_UNSUPPORTED,
                         "$ref '%.96s' is not supported (only JSON pointers into this schema)",
                         json_string_value(ref));
        else if (!target)
            rc = err_fmt(why, whylen, ERR_INVAL, "$ref '%.96s' names nothing",
                         json_string_value(ref));
        else if (++depth > GRAMMAR_SCHEMA_MERGE_DEPTH)
            rc = err_fmt(why, whylen, ERR_UNSUPPORTED, "%s",
                         "allOf / $ref combined more than 32 deep");
        json_t *next = NULL;
        if (!rc) rc = grammar_schema_flatten(root, target, depth, &next, why, whylen);
        json_decref(cur);
        cur = next;
    }
    if (rc) {
        json_decref(cur);
        return rc;
    }
    *out = cur;
    return 0;
}

int grammar_schema_merge(const json_t *root, const json_t *a, const json_t *b, int depth,
                         json_t **out, char *why, size_t whylen)
{
    *out = NULL;
    if (depth > GRAMMAR_SCHEMA_MERGE_DEPTH)
        return err_fmt(why, whylen, ERR_UNSUPPORTED, "%s",
                       "allOf / $ref combined more than 32 deep");
    if (json_is_false(a) || json_is_false(b)) {
        *out = json_false();
        return 0;
    }
    if ((!json_is_object(a) && !json_is_true(a)) || (!json_is_object(b) && !json_is_true(b)))
        return err_fmt(why, whylen, ERR_INVAL, "%s", "a schema must be an object or a boolean");
    if (trivially_true(a)) return grammar_schema_flatten(root, b, depth, out, why, whylen);
    if (trivially_true(b)) return grammar_schema_flatten(root, a, depth, out, why, whylen);
    json_t *fa = NULL, *fb = NULL, *r = NULL;
    int rc = resolve_top(root, a, depth, &fa, why, whylen);
    if (!rc) rc = resolve_top(root, b, depth, &fb, why, whylen);
    if (rc) goto out;
    if (json_is_false(fa) || json_is_false(fb) || !json_is_object(fa) || !json_is_object(fb)) {
        r = json_is_false(fa) || json_is_false(fb) ? json_false()
            : json_is_object(fa)                   ? json_incref(fa)
                                                   : json_incref(fb);
        goto out;
    }
    bool alt_a = json_object_get(fa, "anyOf") || json_object_get(fa, "oneOf");
    bool alt_b = json_object_get(fb, "anyOf") || json_object_get(fb, "oneOf");
    if (alt_a && alt_b) {
        rc = err_fmt(why, whylen, ERR_UNSUPPORTED, "%s",
                     "anyOf / oneOf on both sides of an allOf is not supported");
        goto out;
    }
    if (!(r = json_copy(fa))) {
        rc = ERR_NOMEM;
        goto out;
    }
    const char *key;
    json_t *vb;
    json_object_foreach(fb, key, vb)
    {
        if (!strcmp(key, "properties") || !strcmp(key, "additionalProperties")) continue;
        const json_t *va = json_object_get(r, key);
        if (!va) {
            if (json_object_set(r, key, vb)) rc = ERR_NOMEM;
        } else if (!grammar_schema_annotation(key) && !json_equal(va, vb)) {
            json_t *m = NULL;
            if ((rc = keyword_meet(root, key, va, vb, depth, &m, why, whylen))) break;
            if (!m || json_is_false(m)) { /* nothing satisfies both */
                json_decref(m);
                json_decref(r);
                r = json_false();
                goto out;
            }
            if (json_object_set_new(r, key, m)) rc = ERR_NOMEM;
        }
        if (rc) break;
    }
    bool none = false;
    if (!rc) rc = properties_meet(root, fa, fb, r, depth, &none, why, whylen);
    if (!rc && !literals_admit(r)) none = true;
    if (!rc && none) {
        json_decref(r);
        r = json_false();
    }
out:
    json_decref(fa);
    json_decref(fb);
    if (rc) {
        json_decref(r);
        return rc;
    }
    *out = r;
    return 0;
}

int grammar_schema_flatten(const json_t *root, const json_t *sch, int depth, json_t **out,
                           char *why, size_t whylen)
{
    *out = NULL;
    if (!json_is_object(sch)) {
        *out = json_incref((json_t *)sch);
        return 0;
    }
    if (depth > GRAMMAR_SCHEMA_MERGE_DEPTH)
        return err_fmt(why, whylen, ERR_UNSUPPORTED, "%s",
                       "allOf / $ref combined more than 32 deep");
    const json_t *all = json_object_get(sch, "allOf"), *ref = json_object_get(sch, "$ref");
    bool expand = ref && grammar_schema_constrains(sch, "$ref");
    if (!all && !expand) {
        *out = json_incref((json_t *)sch);
        return 0;
    }
    if (all && (!json_is_array(all) || !json_array_size(all)))
        return err_fmt(why, whylen, ERR_INVAL, "%s", "'allOf' must be a non-empty array");
    json_t *acc = json_copy((json_t *)sch);
    if (!acc) return ERR_NOMEM;
    json_object_del(acc, "allOf");
    int rc = 0;
    if (expand) {
        /* the $ref becomes one more schema to meet */
        json_t *only = json_pack("{sO}", "$ref", ref);
        json_object_del(acc, "$ref");
        json_t *m = NULL;
        rc = only ? grammar_schema_merge(root, acc, only, depth + 1, &m, why, whylen) : ERR_NOMEM;
        json_decref(only);
        json_decref(acc);
        acc = m;
    }
    for (size_t i = 0; !rc && all && i < json_array_size(all) && !json_is_false(acc); i++) {
        json_t *m = NULL;
        rc = grammar_schema_merge(root, acc, json_array_get(all, i), depth + 1, &m, why, whylen);
        json_decref(acc);
        acc = m;
    }
    if (rc) {
        json_decref(acc);
        return rc;
    }
    *out = acc;
    return 0;
}
