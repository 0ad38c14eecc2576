/* Python's text forms of template values: str() and repr() (floats as Python's shortest
 * round-trip repr, strings with Python's quote choice and escapes, containers, Markup), markupsafe's
 * escape, and json.dumps as transformers' tojson calls it (ensure_ascii, indent, separators,
 * sort_keys). Everything writes into arena strings. */
#include "engine/api/jinja_priv.h"

#include "common/err.h"
#include "engine/text/unicode.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REPR_MAX_DEPTH 1000 /* Python's recursion limit would stop json.dumps near here too */

/* ---------------------------------------------------------------- str() and repr() */

size_t jinja_float_repr(double f, char *buf, size_t n)
{
    if (isnan(f)) return (size_t)snprintf(buf, n, "nan");
    if (isinf(f)) return (size_t)snprintf(buf, n, f < 0 ? "-inf" : "inf");
    if (f == 0) return (size_t)snprintf(buf, n, signbit(f) ? "-0.0" : "0.0");
    char tmp[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) { /* the shortest digits that read back exactly */
        snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp is [-]d[.ddd]e[+-]XX: split into digits and decimal exponent */
    char digits[24];
    size_t nd = 0;
    const char *p = tmp;
    bool neg = *p == '-';
    if (neg) p++;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    int exp10 = (int)strtol(p + 1, NULL, 10); /* first digit's power of ten */
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    int decpt = exp10 + 1;
    char out[64];
    size_t o = 0;
    if (neg) out[o++] = '-';
    if (decpt > -4 && decpt <= 16) { /* Python's 'r' format switches to exponent outside this */
        if (decpt <= 0) {
            out[o++] = '0';
            out[o++] = '.';
            for (int k = 0; k < -decpt; k++) out[o++] = '0';
            memcpy(out + o, digits, nd);
            o += nd;
        } else if ((size_t)decpt >= nd) {
            memcpy(out + o, digits, nd);
            o += nd;
            for (size_t k = nd; k < (size_t)decpt; k++) out[o++] = '0';
            out[o++] = '.';
            out[o++] = '0';
        } else {
            memcpy(out + o, digits, (size_t)decpt);
            o += (size_t)decpt;
            out[o++] = '.';
            memcpy(out + o, digits + decpt, nd - (size_t)decpt);
            o += nd - (size_t)decpt;
        }
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            memcpy(out + o, digits + 1, nd - 1);
            o += nd - 1;
        }
        o += (size_t)snprintf(out + o, sizeof(out) - o, "e%c%02d", decpt - 1 < 0 ? '-' : '+',
                              abs(decpt - 1));
    }
    out[o] = '\0';
    return (size_t)snprintf(buf, n, "%s", out);
}

/* Python's str.isprintable() for a non-ASCII code point. */
static bool printable(uint32_t cpt)
{
    enum unicode_cat cat = unicode_cat(cpt);
    return cat != UNICODE_CAT_OTHER && cat != UNICODE_CAT_UNDEFINED && cat != UNICODE_CAT_SEPARATOR;
}

static int repr_str(struct jinja_ctx *c, struct jinja_sb *sb, const char *s, size_t len)
{
    bool has_sq = memchr(s, '\'', len) != NULL, has_dq = memchr(s, '"', len) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    int rc = jinja_sb_putc(c, sb, q);
    for (size_t i = 0; i < len && !rc;) {
        size_t start = i;
        uint32_t cpt = unicode_decode(s, len, &i);
        if (cpt == (uint32_t)q || cpt == '\\') {
            char e[2] = {'\\', (char)cpt};
            rc = jinja_sb_put(c, sb, e, 2);
        } else if (cpt == '\t' || cpt == '\n' || cpt == '\r') {
            rc = jinja_sb_put(c, sb, cpt == '\t' ? "\\t" : cpt == '\n' ? "\\n" : "\\r", 2);
        } else if (cpt < 0x20 || cpt == 0x7F) {
            rc = jinja_sb_printf(c, sb, "\\x%02x", (unsigned)cpt);
        } else if (cpt < 0x7F || printable(cpt)) {
            rc = jinja_sb_put(c, sb, s + start, i - start);
        } else {
            rc = jinja_sb_printf(c, sb,
                                 cpt < 0x100     ? "\\x%02x"
                                 : cpt < 0x10000 ? "\\u%04x"
                                                 : "\\U%08x",
                                 (unsigned)cpt);
        }
    }
    return rc ? rc : jinja_sb_putc(c, sb, q);
}

static int str_items(struct jinja_ctx *c, struct jinja_sb *sb, const struct jinja_list *l,
                     const char *open, const char *close, bool tuple)
{
    int rc = jinja_sb_put(c, sb, open, strlen(open));
    for (size_t i = 0; i < l->n && !rc; i++) {
        if (i) rc = jinja_sb_put(c, sb, ", ", 2);
        if (!rc) rc = jinja_repr(c, sb, &l->v[i]);
    }
    if (!rc && tuple && l->n == 1) rc = jinja_sb_putc(c, sb, ',');
    return rc ? rc : jinja_sb_put(c, sb, close, strlen(close));
}

static int str_dict(struct jinja_ctx *c, struct jinja_sb *sb, const struct jinja_dict *d)
{
    int rc = jinja_sb_putc(c, sb, '{');
    for (size_t i = 0; i < d->n && !rc; i++) {
        if (i) rc = jinja_sb_put(c, sb, ", ", 2);
        if (!rc) rc = jinja_repr(c, sb, &d->v[i].k);
        if (!rc) rc = jinja_sb_put(c, sb, ": ", 2);
        if (!rc) rc = jinja_repr(c, sb, &d->v[i].v);
    }
    return rc ? rc : jinja_sb_putc(c, sb, '}');
}

static int str_common(struct jinja_ctx *c, struct jinja_sb *sb, const struct jinja_val *v,
                      bool repr)
{
    char num[64];
    if (++c->depth > REPR_MAX_DEPTH) {
        c->depth--;
        return jinja_fail(c, ERR_INVAL, "value nested too deeply to print");
    }
    int rc = 0;
    switch (v->type) {
    case JV_UNDEF: rc = repr ? jinja_sb_put(c, sb, "Undefined", 9) : 0; break;
    case JV_NONE: rc = jinja_sb_put(c, sb, "None", 4); break;
    case JV_BOOL:
        rc = v->b ? jinja_sb_put(c, sb, "True", 4) : jinja_sb_put(c, sb, "False", 5);
        break;
    case JV_INT: rc = jinja_sb_printf(c, sb, "%" PRId64, v->i); break;
    case JV_FLOAT: rc = jinja_sb_put(c, sb, num, jinja_float_repr(v->f, num, sizeof(num))); break;
    case JV_STR:
        if (!repr) {
            rc = jinja_sb_put(c, sb, v->s, v->len);
        } else if (v->flags & JV_F_SAFE) {
            rc = jinja_sb_put(c, sb, "Markup(", 7);
            if (!rc) rc = repr_str(c, sb, v->s, v->len);
            if (!rc) rc = jinja_sb_putc(c, sb, ')');
        } else {
            rc = repr_str(c, sb, v->s, v->len);
        }
        break;
    case JV_LIST:
        if (v->view == JV_VIEW_GEN) { /* Python prints an address: nothing to reproduce */
            rc = jinja_fail(c, ERR_INVAL, "cannot convert a generator to a string (add |list)");
        } else if (v->view) {
            const char *open = v->view == JV_VIEW_ITEMS  ? "dict_items(["
                               : v->view == JV_VIEW_KEYS ? "dict_keys(["
                                                         : "dict_values([";
            rc = str_items(c, sb, v->l, open, "])", false);
        } else {
            rc = str_items(c, sb, v->l, "[", "]", false);
        }
        break;
    case JV_TUPLE: rc = str_items(c, sb, v->l, "(", ")", true); break;
    case JV_DICT: rc = str_dict(c, sb, v->d); break;
    case JV_NS:
        rc = jinja_sb_put(c, sb, "<Namespace ", 11);
        if (!rc) rc = str_dict(c, sb, v->d);
        if (!rc) rc = jinja_sb_putc(c, sb, '>');
        break;
    case JV_LOOP:
        rc = jinja_sb_printf(c, sb, "<LoopContext %" PRId64 "/%" PRId64 ">", v->loop->index0 + 1,
                             v->loop->length);
        break;
    case JV_FUNC:
        if (v->fn->kind == JF_MACRO) {
            rc = jinja_sb_put(c, sb, "<Macro ", 7);
            if (!rc)
                rc = v->fn->name.len ? repr_str(c, sb, v->fn->name.p, v->fn->name.len)
                                     : jinja_sb_put(c, sb, "anonymous", 9);
            if (!rc) rc = jinja_sb_putc(c, sb, '>');
        } else { /* Python prints an object address here: nothing to reproduce */
            rc = jinja_fail(c, ERR_INVAL, "cannot convert the function '%.*s' to a string",
                            (int)v->fn->name.len, v->fn->name.p);
        }
        break;
    }
    c->depth--;
    return rc;
}

int jinja_to_str(struct jinja_ctx *c, struct jinja_sb *sb, const struct jinja_val *v)
{
    return str_common(c, sb, v, false);
}

int jinja_repr(struct jinja_ctx *c, struct jinja_sb *sb, const struct jinja_val *v)
{
    return str_common(c, sb, v, true);
}

int jinja_str_of(struct jinja_ctx *c, const struct jinja_val *v, struct jinja_val *out)
{
    if (v->type == JV_STR) {
        *out = *v;
        return 0;
    }
    struct jinja_sb sb = {0};
    int rc = jinja_to_str(c, &sb, v);
    if (!rc) *out = jinja_sb_val(&sb);
    return rc;
}

int jinja_escape_into(struct jinja_ctx *c, struct jinja_sb *sb, const struct jinja_val *v)
{
    if (v->type == JV_STR && (v->flags & JV_F_SAFE)) return jinja_sb_put(c, sb, v->s, v->len);
    struct jinja_val s;
    int rc = jinja_str_of(c, v, &s);
    if (rc) return rc;
    size_t from = 0;
    for (size_t i = 0; i < s.len && !rc; i++) {
        const char *e = NULL;
        switch (s.s[i]) {
        case '&': e = "&amp;"; break;
        case '<': e = "&lt;"; break;
        case '>': e = "&gt;"; break;
        case '\'': e = "&#39;"; break;
        case '"': e = "&#34;"; break;
        default: continue;
        }
        rc = jinja_sb_put(c, sb, s.s + from, i - from);
        if (!rc) rc = jinja_sb_put(c, sb, e, strlen(e));
        from = i + 1;
    }
    return rc ? rc : jinja_sb_put(c, sb, s.s + from, s.len - from);
}

/* ---------------------------------------------------------------- json.dumps */

static int json_str(struct jinja_ctx *c, struct jinja_sb *sb, const char *s, size_t len,
                    bool ensure_ascii)
{
    int rc = jinja_sb_putc(c, sb, '"');
    size_t from = 0;
    for (size_t i = 0; i < len && !rc;) {
        uint8_t b = (uint8_t)s[i];
        if (b >= 0x20 && b != '"' && b != '\\' && (b < 0x80 || !ensure_ascii)) {
            i++;
            continue;
        }
        rc = jinja_sb_put(c, sb, s + from, i - from);
        if (rc) break;
        if (b >= 0x80) {
            uint32_t cpt = unicode_decode(s, len, &i);
            if (cpt >= 0x10000) {
                uint32_t v = cpt - 0x10000;
                rc = jinja_sb_printf(c, sb, "\\u%04x\\u%04x", (unsigned)(0xD800 | (v >> 10)),
                                     (unsigned)(0xDC00 | (v & 0x3FF)));
            } else {
                rc = jinja_sb_printf(c, sb, "\\u%04x", (unsigned)cpt);
            }
        } else {
            const char *e = b == '"'    ? "\\\""
                            : b == '\\' ? "\\\\"
                            : b == '\n' ? "\\n"
                            : b == '\r' ? "\\r"
                            : b == '\t' ? "\\t"
                            : b == '\b' ? "\\b"
                            : b == '\f' ? "\\f"
                                        : NULL;
            rc = e ? jinja_sb_put(c, sb, e, 2) : jinja_sb_printf(c, sb, "\\u%04x", (unsigned)b);
            i++;
        }
        from = i;
    }
    if (!rc) rc = jinja_sb_put(c, sb, s + from, len - from);
    return rc ? rc : jinja_sb_putc(c, sb, '"');
}

static int json_newline(struct jinja_ctx *c, struct jinja_sb *sb, const struct jinja_json_opts *o,
                        int level)
{
    int rc = jinja_sb_putc(c, sb, '\n');
    for (int k = 0; k < level && !rc; k++) rc = jinja_sb_put(c, sb, o->indent->p, o->indent->len);
    return rc;
}

/* A dict key as json.dumps converts it. */
static int json_key(struct jinja_ctx *c, struct jinja_sb *sb, const struct jinja_val *k,
                    const struct jinja_json_opts *o)
{
    char num[64];
    switch (k->type) {
    case JV_STR: return json_str(c, sb, k->s, k->len, o->ensure_ascii);
    case JV_INT: snprintf(num, sizeof(num), "%" PRId64, k->i); break;
    case JV_BOOL: snprintf(num, sizeof(num), "%s", k->b ? "true" : "false"); break;
    case JV_NONE: snprintf(num, sizeof(num), "null"); break;
    case JV_FLOAT:
        if (isnan(k->f))
            snprintf(num, sizeof(num), "NaN");
        else if (isinf(k->f))
            snprintf(num, sizeof(num), k->f < 0 ? "-Infinity" : "Infinity");
        else
            jinja_float_repr(k->f, num, sizeof(num));
        break;
    default:
        return jinja_fail(c, ERR_INVAL, "keys must be str, int, float, bool or None, not %s",
                          jinja_type_name(k));
    }
    return json_str(c, sb, num, strlen(num), false);
}

static int json_value(struct jinja_ctx *c, struct jinja_sb *sb, const struct jinja_val *v,
                      const struct jinja_json_opts *o, int level);

static int json_dict(struct jinja_ctx *c, struct jinja_sb *sb, const struct jinja_dict *d,
                     const struct jinja_json_opts *o, int level)
{
    if (d->n == 0) return jinja_sb_put(c, sb, "{}", 2);
    const struct jinja_pair **order = jinja_alloc(&c->arena, d->n * sizeof(*order));
    if (!order) return jinja_fail_alloc(c);
    for (size_t i = 0; i < d->n; i++) order[i] = &d->v[i];
    if (o->sort_keys) { /* insertion sort: stable, and keys are few */
        for (size_t i = 1; i < d->n; i++) {
            const struct jinja_pair *x = order[i];
            size_t j = i;
            while (j > 0) {
                bool lt;
                int rc = jinja_less(c, &x->k, &order[j - 1]->k, &lt);
                if (rc) return rc;
                if (!lt) break;
                order[j] = order[j - 1];
                j--;
            }
            order[j] = x;
        }
    }
    const char *isep = o->item_sep ? o->item_sep->p : o->indent ? "," : ", ";
    size_t isep_len = o->item_sep ? o->item_sep->len : strlen(isep);
    const char *ksep = o->key_sep ? o->key_sep->p : ": ";
    size_t ksep_len = o->key_sep ? o->key_sep->len : 2;
    int rc = jinja_sb_putc(c, sb, '{');
    for (size_t i = 0; i < d->n && !rc; i++) {
        if (i) rc = jinja_sb_put(c, sb, isep, isep_len);
        if (!rc && o->indent) rc = json_newline(c, sb, o, level + 1);
        if (!rc) rc = json_key(c, sb, &order[i]->k, o);
        if (!rc) rc = jinja_sb_put(c, sb, ksep, ksep_len);
        if (!rc) rc = json_value(c, sb, &order[i]->v, o, level + 1);
    }
    if (!rc && o->indent) rc = json_newline(c, sb, o, level);
    return rc ? rc : jinja_sb_putc(c, sb, '}');
}

static int json_value(struct jinja_ctx *c, struct jinja_sb *sb, const struct jinja_val *v,
                      const struct jinja_json_opts *o, int level)
{
    char num[64];
    if (level > REPR_MAX_DEPTH)
        return jinja_fail(c, ERR_INVAL, "value nested too deeply for tojson");
    switch (v->type) {
    case JV_NONE: return jinja_sb_put(c, sb, "null", 4);
    case JV_BOOL: return v->b ? jinja_sb_put(c, sb, "true", 4) : jinja_sb_put(c, sb, "false", 5);
    case JV_INT: return jinja_sb_printf(c, sb, "%" PRId64, v->i);
    case JV_FLOAT:
        if (isnan(v->f)) return jinja_sb_put(c, sb, "NaN", 3);
        if (isinf(v->f))
            return v->f < 0 ? jinja_sb_put(c, sb, "-Infinity", 9)
                            : jinja_sb_put(c, sb, "Infinity", 8);
        return jinja_sb_put(c, sb, num, jinja_float_repr(v->f, num, sizeof(num)));
    case JV_STR: return json_str(c, sb, v->s, v->len, o->ensure_ascii);
    case JV_LIST:
    case JV_TUPLE: {
        if (v->view) break;
        if (v->l->n == 0) return jinja_sb_put(c, sb, "[]", 2);
        const char *isep = o->item_sep ? o->item_sep->p : o->indent ? "," : ", ";
        size_t isep_len = o->item_sep ? o->item_sep->len : strlen(isep);
        int rc = jinja_sb_putc(c, sb, '[');
        for (size_t i = 0; i < v->l->n && !rc; i++) {
            if (i) rc = jinja_sb_put(c, sb, isep, isep_len);
            if (!rc && o->indent) rc = json_newline(c, sb, o, level + 1);
            if (!rc) rc = json_value(c, sb, &v->l->v[i], o, level + 1);
        }
        if (!rc && o->indent) rc = json_newline(c, sb, o, level);
        return rc ? rc : jinja_sb_putc(c, sb, ']');
    }
    case JV_DICT: return json_dict(c, sb, v->d, o, level);
    default: break;
    }
    return jinja_fail(c, ERR_INVAL, "Object of type %s is not JSON serializable",
                      jinja_type_name(v));
}

int jinja_to_json(struct jinja_ctx *c, struct jinja_sb *sb, const struct jinja_val *v,
                  const struct jinja_json_opts *o)
{
    return json_value(c, sb, v, o, 0);
}
