/* Jinja2's sequence filters: map, select / reject / selectattr / rejectattr, first, last, unique,
 * min, max, sort, dictsort, batch, slice, sum, reverse, join and items, with jinja2's attribute
 * paths ("a.b.0") and case folding. Those that return generators in jinja2 (map, the selects,
 * items, unique, batch, slice, reverse of a sequence) return generator values here too: truthy
 * even when empty, no len(), consumed by one iteration. */
#include "engine/api/jinja_priv.h"

#include "common/err.h"
#include "engine/text/unicode.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- attribute paths */

/* make_attrgetter: "a.b.0" looked up part by part with getitem (digits as integers); a default
 * replaces undefined results. */
static int attr_path(struct jinja_ctx *c, const struct jinja_val *attr,
                     const struct jinja_val *item, const struct jinja_val *def,
                     struct jinja_val *out)
{
    struct jinja_val v = *item;
    if (attr->type != JV_STR) {
        int rc = jinja_getitem(c, &v, attr, &v);
        if (rc) return rc;
        if (def && v.type == JV_UNDEF) v = *def;
        *out = v;
        return 0;
    }
    size_t start = 0;
    for (size_t i = 0; i <= attr->len; i++) {
        if (i < attr->len && attr->s[i] != '.') continue;
        struct jinja_val key = jinja_str(attr->s + start, i - start);
        bool digits = i > start;
        int64_t n = 0;
        for (size_t k = start; k < i && digits; k++) {
            if (attr->s[k] < '0' || attr->s[k] > '9' || n > INT64_MAX / 10)
                digits = false;
            else
                n = n * 10 + (attr->s[k] - '0');
        }
        if (digits) key = jinja_int(n);
        int rc = jinja_getitem(c, &v, &key, &v);
        if (rc) return rc;
        if (def && v.type == JV_UNDEF) v = *def;
        start = i + 1;
    }
    *out = v;
    return 0;
}

/* ---------------------------------------------------------------- sorting */

struct sort_item {
    struct jinja_val key, val;
};

/* Stable merge sort; reverse keeps equal items in order, as Python's sorted(reverse=True). */
static int sort_items(struct jinja_ctx *c, struct sort_item *v, size_t n, bool reverse)
{
    if (n < 2) return 0;
    struct sort_item *tmp = jinja_alloc(&c->arena, n * sizeof(*tmp));
    if (!tmp) return jinja_fail_alloc(c);
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n,
                   hi = lo + 2 * width < n ? lo + 2 * width : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                bool take_right;
                int rc = reverse ? jinja_less(c, &v[i].key, &v[j].key, &take_right)
                                 : jinja_less(c, &v[j].key, &v[i].key, &take_right);
                if (rc) return rc;
                tmp[k++] = take_right ? v[j++] : v[i++];
            }
            while (i < mid) tmp[k++] = v[i++];
            while (j < hi) tmp[k++] = v[j++];
        }
        memcpy(v, tmp, n * sizeof(*v));
        if (jinja_step(c, n)) return c->rc;
    }
    return 0;
}

/* ignore_case: strings compare lowercased. */
static int fold_key(struct jinja_ctx *c, bool case_sensitive, struct jinja_val *k)
{
    if (case_sensitive || k->type != JV_STR) return 0;
    return jinja_str_lower(c, k, k);
}

static int filter_by_name(struct jinja_ctx *c, const struct jinja_val *name, int *id)
{
    if (name->type != JV_STR) return jinja_fail(c, ERR_INVAL, "a filter name must be a string");
    *id = jinja_filter_find(jinja_sv_of(name));
    if (*id >= 0) return 0;
    return jinja_fail(c, *id == -2 ? ERR_UNSUPPORTED : ERR_INVAL,
                      *id == -2 ? "the filter '%.*s' is not supported" : "no filter named '%.*s'",
                      (int)name->len, name->s);
}

/* select / reject / selectattr / rejectattr. */
int jinja_filter_select(struct jinja_ctx *c, const struct jinja_val *in, bool by_attr, bool keep,
                        const struct jinja_val *args, size_t n_args, const struct jinja_sv *kw,
                        const struct jinja_val *kwv, size_t n_kw, struct jinja_val *out)
{
    struct jinja_list *res = jinja_list_new(c, 0);
    if (!res) return jinja_fail_alloc(c);
    *out = jinja_gen_of(res);
    if (!jinja_truthy(in)) return 0; /* `if value:` */
    size_t off = 0;
    if (by_attr) {
        if (n_args < 1) return jinja_fail(c, ERR_INVAL, "Missing parameter for attribute name");
        off = 1;
    }
    int test = -1;
    if (n_args > off) {
        if (args[off].type != JV_STR)
            return jinja_fail(c, ERR_INVAL, "a test name must be a string");
        test = jinja_test_find(jinja_sv_of(&args[off]));
        if (test < 0)
            return jinja_fail(c, ERR_INVAL, "no test named '%.*s'", (int)args[off].len,
                              args[off].s);
    }
    struct jinja_list *items;
    int rc = jinja_iterate(c, in, &items);
    if (rc) return rc;
    for (size_t i = 0; i < items->n; i++) {
        struct jinja_val v = items->v[i];
        if (by_attr && (rc = attr_path(c, &args[0], &v, NULL, &v))) return rc;
        bool ok;
        if (test >= 0) {
            if ((rc = jinja_test_apply(c, test, &v, args + off + 1, n_args - off - 1, kw, kwv, n_kw,
                                       &ok)))
                return rc;
        } else {
            ok = jinja_truthy(&v);
        }
        if (ok == keep && (rc = jinja_list_push(c, res, items->v[i]))) return rc;
    }
    return 0;
}

int jinja_filter_map(struct jinja_ctx *c, const struct jinja_val *in, const struct jinja_val *args,
                     size_t n_args, const struct jinja_sv *kw, const struct jinja_val *kwv,
                     size_t n_kw, struct jinja_val *out)
{
    struct jinja_list *res = jinja_list_new(c, 0);
    if (!res) return jinja_fail_alloc(c);
    *out = jinja_gen_of(res);
    if (!jinja_truthy(in)) return 0;
    const struct jinja_val *attr = NULL, *def = NULL;
    int filter = -1, rc;
    if (n_args == 0) {
        for (size_t k = 0; k < n_kw; k++) {
            if (jinja_sv_eq(kw[k], "attribute"))
                attr = &kwv[k];
            else if (jinja_sv_eq(kw[k], "default"))
                def = &kwv[k];
            else
                return jinja_fail(c, ERR_INVAL, "Unexpected keyword argument '%.*s'",
                                  (int)kw[k].len, kw[k].p);
        }
        if (!attr) return jinja_fail(c, ERR_INVAL, "map requires a filter argument");
        if (def && def->type == JV_NONE) def = NULL;
    } else if ((rc = filter_by_name(c, &args[0], &filter))) {
        return rc;
    }
    struct jinja_list *items;
    if ((rc = jinja_iterate(c, in, &items))) return rc;
    for (size_t i = 0; i < items->n; i++) {
        struct jinja_val v;
        rc = attr ? attr_path(c, attr, &items->v[i], def, &v)
                  : jinja_filter_apply(c, filter, &items->v[i], args + 1, n_args - 1, kw, kwv, n_kw,
                                       &v);
        if (rc || (rc = jinja_list_push(c, res, v))) return rc;
    }
    return 0;
}

int jinja_filter_first_last(struct jinja_ctx *c, const struct jinja_val *in, bool last,
                            struct jinja_val *out)
{
    if (last && in->view == JV_VIEW_GEN && (in->type == JV_LIST || in->type == JV_TUPLE))
        return jinja_fail(c, ERR_INVAL, "'generator' object is not reversible");
    if (!last && in->view == JV_VIEW_GEN && (in->type == JV_LIST || in->type == JV_TUPLE)) {
        struct jinja_list *l = in->l;
        if (l->pos < l->n) {
            *out = l->v[l->pos++];
            return 0;
        }
        *out = jinja_undef_msg(c, false, "No first item, sequence was empty.");
        return 0;
    }
    struct jinja_list *items;
    int rc = jinja_iterate(c, in, &items);
    if (rc) return rc;
    if (items->n == 0) {
        *out = jinja_undef_msg(c, false,
                               last ? "No last item, sequence was empty."
                                    : "No first item, sequence was empty.");
        return 0;
    }
    *out = items->v[last ? items->n - 1 : 0];
    return 0;
}

int jinja_filter_unique(struct jinja_ctx *c, const struct jinja_val *b, struct jinja_val *out)
{
    bool cs = !jinja_absent(&b[1]) && jinja_truthy(&b[1]);
    struct jinja_list *items, *res = jinja_list_new(c, 0), *seen = jinja_list_new(c, 0);
    int rc;
    if (!res || !seen) return jinja_fail_alloc(c);
    if ((rc = jinja_iterate(c, &b[0], &items))) return rc;
    for (size_t i = 0; i < items->n; i++) {
        struct jinja_val k = items->v[i];
        if (!jinja_absent(&b[2]) && b[2].type != JV_NONE &&
            (rc = attr_path(c, &b[2], &k, NULL, &k)))
            return rc;
        if ((rc = fold_key(c, cs, &k))) return rc;
        if (k.type == JV_LIST || k.type == JV_DICT)
            return jinja_fail(c, ERR_INVAL, "unhashable type: '%s'", jinja_type_name(&k));
        bool dup = false;
        for (size_t j = 0; j < seen->n && !dup; j++) dup = jinja_equal(&seen->v[j], &k);
        if ((rc = jinja_step(c, seen->n))) return rc;
        if (!dup &&
            ((rc = jinja_list_push(c, seen, k)) || (rc = jinja_list_push(c, res, items->v[i]))))
            return rc;
    }
    *out = jinja_gen_of(res);
    return 0;
}

int jinja_filter_minmax(struct jinja_ctx *c, const struct jinja_val *b, bool max,
                        struct jinja_val *out)
{
    bool cs = !jinja_absent(&b[1]) && jinja_truthy(&b[1]);
    struct jinja_list *items;
    int rc = jinja_iterate(c, &b[0], &items);
    if (rc) return rc;
    if (items->n == 0) {
        *out = jinja_undef_msg(c, false, "No aggregated item, sequence was empty.");
        return 0;
    }
    struct jinja_val best = items->v[0], best_key = best;
    for (size_t i = 0; i < items->n; i++) {
        struct jinja_val k = items->v[i];
        if (!jinja_absent(&b[2]) && b[2].type != JV_NONE &&
            (rc = attr_path(c, &b[2], &k, NULL, &k)))
            return rc;
        if ((rc = fold_key(c, cs, &k))) return rc;
        bool better = i == 0;
        if (!better && (rc = max ? jinja_less(c, &best_key, &k, &better)
                                 : jinja_less(c, &k, &best_key, &better)))
            return rc;
        if (better) best = items->v[i], best_key = k;
    }
    *out = best;
    return 0;
}

int jinja_filter_sort(struct jinja_ctx *c, const struct jinja_val *b, bool dictsort,
                      struct jinja_val *out)
{
    bool reverse, cs;
    struct jinja_list *items;
    int rc, by_value = 0;
    if (dictsort) { /* dictsort(value, case_sensitive, by, reverse) */
        cs = !jinja_absent(&b[1]) && jinja_truthy(&b[1]);
        if (!jinja_absent(&b[2])) {
            if ((rc = jinja_want_str(c, "dictsort", &b[2]))) return rc;
            if (!strcmp(b[2].s, "value"))
                by_value = 1;
            else if (strcmp(b[2].s, "key"))
                return jinja_fail(c, ERR_INVAL, "You can only sort by either \"key\" or \"value\"");
        }
        reverse = !jinja_absent(&b[3]) && jinja_truthy(&b[3]);
        if (b[0].type != JV_DICT)
            return jinja_fail(c, ERR_INVAL, "dictsort: '%s' is not a mapping",
                              jinja_type_name(&b[0]));
        items = jinja_list_new(c, b[0].d->n);
        if (!items) return jinja_fail_alloc(c);
        for (size_t i = 0; i < b[0].d->n; i++) {
            struct jinja_list *pair = jinja_list_new(c, 2);
            if (!pair) return jinja_fail_alloc(c);
            pair->v[0] = b[0].d->v[i].k;
            pair->v[1] = b[0].d->v[i].v;
            pair->n = 2;
            items->v[items->n++] = jinja_list_val(pair, JV_TUPLE);
        }
    } else { /* sort(value, reverse, case_sensitive, attribute) */
        reverse = !jinja_absent(&b[1]) && jinja_truthy(&b[1]);
        cs = !jinja_absent(&b[2]) && jinja_truthy(&b[2]);
        if ((rc = jinja_iterate(c, &b[0], &items))) return rc;
    }
    struct sort_item *v = jinja_alloc(&c->arena, (items->n ? items->n : 1) * sizeof(*v));
    if (!v) return jinja_fail_alloc(c);
    for (size_t i = 0; i < items->n; i++) {
        struct jinja_val k = items->v[i];
        if (dictsort) {
            k = k.l->v[by_value];
        } else if (!jinja_absent(&b[3]) && b[3].type != JV_NONE) {
            /* make_multi_attrgetter: "a,b" gives a list of keys */
            const struct jinja_val *attr = &b[3];
            struct jinja_list *parts = jinja_list_new(c, 0);
            if (!parts) return jinja_fail_alloc(c);
            size_t start = 0, alen = attr->type == JV_STR ? attr->len : 0;
            for (size_t e = 0; attr->type == JV_STR && e <= alen; e++) {
                if (e < alen && attr->s[e] != ',') continue;
                struct jinja_val one = jinja_str(attr->s + start, e - start), got;
                if ((rc = attr_path(c, &one, &items->v[i], NULL, &got)) ||
                    (rc = fold_key(c, cs, &got)) || (rc = jinja_list_push(c, parts, got)))
                    return rc;
                start = e + 1;
            }
            if (attr->type != JV_STR) {
                struct jinja_val got;
                if ((rc = attr_path(c, attr, &items->v[i], NULL, &got)) ||
                    (rc = fold_key(c, cs, &got)) || (rc = jinja_list_push(c, parts, got)))
                    return rc;
            }
            k = jinja_list_val(parts, JV_LIST);
            v[i] = (struct sort_item){k, items->v[i]};
            continue;
        } else {
            /* no attribute: make_multi_attrgetter still wraps the item in a one-element list */
            struct jinja_list *parts = jinja_list_new(c, 1);
            if (!parts) return jinja_fail_alloc(c);
            if ((rc = fold_key(c, cs, &k))) return rc;
            parts->v[0] = k;
            parts->n = 1;
            k = jinja_list_val(parts, JV_LIST);
        }
        if (dictsort && (rc = fold_key(c, cs, &k))) return rc;
        v[i] = (struct sort_item){k, items->v[i]};
    }
    if ((rc = sort_items(c, v, items->n, reverse))) return rc;
    struct jinja_list *res = jinja_list_new(c, items->n);
    if (!res) return jinja_fail_alloc(c);
    for (size_t i = 0; i < items->n; i++) res->v[res->n++] = v[i].val;
    *out = jinja_list_val(res, JV_LIST);
    return 0;
}

int jinja_filter_batch_slice(struct jinja_ctx *c, const struct jinja_val *b, bool slice,
                             struct jinja_val *out)
{
    int64_t count;
    int rc = jinja_want_int(c, slice ? "slice" : "batch", &b[1], &count);
    if (rc) return rc;
    bool fill = !jinja_absent(&b[2]) && b[2].type != JV_NONE;
    struct jinja_list *items, *res = jinja_list_new(c, 0);
    if (!res) return jinja_fail_alloc(c);
    if ((rc = jinja_iterate(c, &b[0], &items))) return rc;
    if (count <= 0)
        return jinja_fail(c, ERR_INVAL, "%s: the count must be positive",
                          slice ? "slice" : "batch");
    if (!slice) {
        for (size_t i = 0; i < items->n; i += (size_t)count) {
            struct jinja_list *part = jinja_list_new(c, 0);
            if (!part) return jinja_fail_alloc(c);
            for (size_t k = i; k < items->n && k < i + (size_t)count; k++)
                if ((rc = jinja_list_push(c, part, items->v[k]))) return rc;
            while (fill && part->n < (size_t)count)
                if ((rc = jinja_list_push(c, part, b[2]))) return rc;
            if ((rc = jinja_list_push(c, res, jinja_list_val(part, JV_LIST)))) return rc;
        }
    } else {
        size_t len = items->n, per = len / (size_t)count, extra = len % (size_t)count, off = 0;
        for (size_t s = 0; s < (size_t)count; s++) {
            size_t start = off + s * per;
            if (s < extra) off++;
            size_t end = off + (s + 1) * per;
            struct jinja_list *part = jinja_list_new(c, 0);
            if (!part) return jinja_fail_alloc(c);
            for (size_t k = start; k < end && k < len; k++)
                if ((rc = jinja_list_push(c, part, items->v[k]))) return rc;
            if (fill && s >= extra && (rc = jinja_list_push(c, part, b[2]))) return rc;
            if ((rc = jinja_list_push(c, res, jinja_list_val(part, JV_LIST)))) return rc;
        }
    }
    *out = jinja_gen_of(res);
    return 0;
}

int jinja_filter_sum(struct jinja_ctx *c, const struct jinja_val *b, struct jinja_val *out)
{
    struct jinja_val acc = jinja_absent(&b[2]) ? jinja_int(0) : b[2];
    if (acc.type == JV_STR)
        return jinja_fail(c, ERR_INVAL, "sum() can't sum strings [use ''.join(seq) instead]");
    struct jinja_list *items;
    int rc = jinja_iterate(c, &b[0], &items);
    if (rc) return rc;
    for (size_t i = 0; i < items->n; i++) {
        struct jinja_val v = items->v[i];
        if (!jinja_absent(&b[1]) && b[1].type != JV_NONE &&
            (rc = attr_path(c, &b[1], &v, NULL, &v)))
            return rc;
        if (acc.type == JV_INT && (v.type == JV_INT || v.type == JV_BOOL)) {
            int64_t r;
            if (__builtin_add_overflow(acc.i, v.type == JV_BOOL ? v.b : v.i, &r))
                return jinja_fail(c, ERR_INVAL, "integer overflow");
            acc = jinja_int(r);
        } else if ((acc.type == JV_INT || acc.type == JV_FLOAT || acc.type == JV_BOOL) &&
                   (v.type == JV_INT || v.type == JV_FLOAT || v.type == JV_BOOL)) {
            double x = acc.type == JV_FLOAT ? acc.f : acc.type == JV_BOOL ? acc.b : (double)acc.i;
            double y = v.type == JV_FLOAT ? v.f : v.type == JV_BOOL ? v.b : (double)v.i;
            acc = jinja_float(x + y);
        } else {
            return jinja_fail(c, ERR_INVAL, "unsupported operand type(s) for +: '%s' and '%s'",
                              jinja_type_name(&acc), jinja_type_name(&v));
        }
    }
    *out = acc;
    return 0;
}

int jinja_filter_reverse(struct jinja_ctx *c, const struct jinja_val *in, struct jinja_val *out)
{
    if (in->type == JV_STR) {
        struct jinja_sb sb = {0};
        for (size_t e = in->len; e > 0;) {
            size_t s = e - 1;
            while (s > 0 && ((uint8_t)in->s[s] & 0xC0) == 0x80) s--;
            int rc = jinja_sb_put(c, &sb, in->s + s, e - s);
            if (rc) return rc;
            e = s;
        }
        *out = jinja_sb_val(&sb);
        out->flags = in->flags & JV_F_SAFE;
        return 0;
    }
    bool gen = in->view == JV_VIEW_GEN && (in->type == JV_LIST || in->type == JV_TUPLE);
    struct jinja_list *items;
    int rc = jinja_iterate(c, in, &items);
    if (rc) return rc;
    struct jinja_list *res = jinja_list_new(c, items->n);
    if (!res) return jinja_fail_alloc(c);
    for (size_t i = items->n; i > 0; i--) res->v[res->n++] = items->v[i - 1];
    *out = gen ? jinja_list_val(res, JV_LIST) : jinja_gen_of(res); /* reversed() of a sequence */
    return 0;
}

int jinja_filter_join(struct jinja_ctx *c, const struct jinja_val *b, struct jinja_val *out)
{
    struct jinja_val d = jinja_str("", 0);
    struct jinja_list *items;
    int rc;
    if (!jinja_absent(&b[1]) && (rc = jinja_str_of(c, &b[1], &d))) return rc;
    if ((rc = jinja_iterate(c, &b[0], &items))) return rc;
    struct jinja_sb sb = {0};
    for (size_t i = 0; i < items->n; i++) {
        struct jinja_val v = items->v[i];
        if (!jinja_absent(&b[2]) && b[2].type != JV_NONE &&
            (rc = attr_path(c, &b[2], &v, NULL, &v)))
            return rc;
        if (i && (rc = jinja_sb_put(c, &sb, d.s, d.len))) return rc;
        if (v.type == JV_UNDEF && (v.flags & JV_F_UNSAFE)) return jinja_fail_undef(c, &v);
        if ((rc = jinja_to_str(c, &sb, &v))) return rc;
    }
    *out = jinja_sb_val(&sb);
    return 0;
}

int jinja_filter_items(struct jinja_ctx *c, const struct jinja_val *in, struct jinja_val *out)
{
    struct jinja_list *res = jinja_list_new(c, in->type == JV_DICT ? in->d->n : 0);
    if (!res) return jinja_fail_alloc(c);
    if (in->type == JV_UNDEF) {
        *out = jinja_gen_of(res);
        return 0;
    }
    if (in->type != JV_DICT)
        return jinja_fail(c, ERR_INVAL, "Can only get item pairs from a mapping.");
    for (size_t i = 0; i < in->d->n; i++) {
        struct jinja_list *pair = jinja_list_new(c, 2);
        if (!pair) return jinja_fail_alloc(c);
        pair->v[0] = in->d->v[i].k;
        pair->v[1] = in->d->v[i].v;
        pair->n = 2;
        res->v[res->n++] = jinja_list_val(pair, JV_TUPLE);
    }
    *out = jinja_gen_of(res);
    return jinja_step(c, res->n);
}
