/* The numeric keywords of JSON Schema -> GBNF (grammar_schema_priv.h): minimum / maximum /
 * exclusiveMinimum / exclusiveMaximum (numbers, or draft 4's booleans) and multipleOf, read from
 * an 'integer' or a 'number' schema and checked, the range itself written by grammar_range*.c.
 * An 'integer' has integer bounds (a real one rounds inward); a 'number' has decimal bounds, read
 * as the schema writes them; multipleOf is an integer k (on a 'number': its integral values). */
#include "engine/grammar/grammar_schema_priv.h"

#include "common/buf.h"
#include "common/err.h"
#include "engine/grammar/grammar_range.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* One bound keyword of an 'integer' into *out (made inclusive, rounded inward), the tighter of
 * it and what *out holds. 0 or error. */
static int gs_bound(struct gs *s, const json_t *v, const char *key, bool lower, bool excl,
                    const char *path, struct grammar_bound *out)
{
    char msg[200];
    double d = json_number_value(v);
    long long iv = json_is_integer(v) ? json_integer_value(v) : 0;
    if (!json_is_number(v)) {
        snprintf(msg, sizeof(msg), "'%s' must be a number", key);
        return gs_fail(s, ERR_INVAL, path, "%s", msg);
    }
    if (json_is_real(v)) {
        if (!isfinite(d) || fabs(d) > 1e15) {
            snprintf(msg, sizeof(msg), "'%s' %g is out of the supported range (|x| <= 1e15)", key,
                     d);
            return gs_fail(s, ERR_UNSUPPORTED, path, "%s", msg);
        }
        if (d != floor(d)) { /* the integers beyond d: inclusive after rounding */
            iv = (long long)(lower ? ceil(d) : floor(d));
            excl = false;
        } else {
            iv = (long long)d;
        }
    } else if (iv > GRAMMAR_RANGE_MAX || iv < -GRAMMAR_RANGE_MAX) {
        snprintf(msg, sizeof(msg), "'%s' is out of the supported range (18 digits)", key);
        return gs_fail(s, ERR_UNSUPPORTED, path, "%s", msg);
    }
    if (excl) iv += lower ? 1 : -1, excl = false;
    struct grammar_bound nb = {true, excl, iv};
    /* the tighter of two bounds on one side */
    bool tighter = !out->set || (lower ? iv > out->v : iv < out->v) || (iv == out->v && excl);
    if (tighter) *out = nb;
    return 0;
}

/* One bound keyword of a 'number' into *out, the tighter of it and what *out holds: the decimal
 * the schema wrote (its shortest spelling). 0 or error. */
static int gs_dec_bound(struct gs *s, const json_t *v, const char *key, bool lower, bool excl,
                        const char *path, struct grammar_dec *out)
{
    char msg[200];
    struct grammar_dec d = {.set = true, .exclusive = excl};
    long long iv = json_integer_value(v);
    if (!json_is_number(v)) {
        snprintf(msg, sizeof(msg), "'%s' must be a number", key);
        return gs_fail(s, ERR_INVAL, path, "%s", msg);
    }
    if (json_is_integer(v) && (iv > GRAMMAR_RANGE_MAX || iv < -GRAMMAR_RANGE_MAX)) {
        snprintf(msg, sizeof(msg), "'%s' is out of the supported range (18 digits)", key);
        return gs_fail(s, ERR_UNSUPPORTED, path, "%s", msg);
    }
    if (json_is_integer(v)) {
        d.neg = iv < 0;
        d.ip = iv < 0 ? (unsigned long long)-iv : (unsigned long long)iv;
    } else if (grammar_range_number_dec(json_real_value(v), &d)) {
        snprintf(msg, sizeof(msg),
                 "'%s' %g is out of the supported range (|x| <= 1e15, at most %d decimals)", key,
                 json_real_value(v), GRAMMAR_RANGE_FRAC);
        return gs_fail(s, ERR_UNSUPPORTED, path, "%s", msg);
    }
    int c = out->set ? grammar_range_number_cmp(&d, out) : 0;
    if (!out->set || (lower ? c > 0 : c < 0) || (c == 0 && excl)) *out = d;
    return 0;
}

/* The numeric bounds of a schema: integer ones (lo, hi) for an 'integer', decimal ones (dlo,
 * dhi) for a 'number'; the others stay unset. */
struct gs_range {
    struct grammar_bound lo, hi;
    struct grammar_dec dlo, dhi;
};

/* minimum / maximum / exclusiveMinimum / exclusiveMaximum (a number, or draft 4's boolean that
 * makes minimum / maximum exclusive) into r. 0 or error. */
static int gs_bounds(struct gs *s, const json_t *sch, const char *path, bool integer,
                     struct gs_range *r)
{
    static const char *const keys[2][2] = {{"minimum", "exclusiveMinimum"},
                                           {"maximum", "exclusiveMaximum"}};
    *r = (struct gs_range){0};
    for (int side = 0; side < 2; side++) {
        const json_t *v[2] = {json_object_get(sch, keys[side][0]),
                              json_object_get(sch, keys[side][1])};
        bool draft4 = json_is_boolean(v[1]);
        for (int x = 0; x < 2; x++) {
            bool excl = x ? true : draft4 && json_is_true(v[1]);
            int rc = !v[x] || (x && draft4) ? 0
                     : integer              ? gs_bound(s, v[x], keys[side][x], !side, excl, path,
                                          side ? &r->hi : &r->lo)
                               : gs_dec_bound(s, v[x], keys[side][x], !side, excl, path,
                                              side ? &r->dhi : &r->dlo);
            if (rc) return rc;
        }
    }
    return 0;
}

/* multipleOf into *k (0: absent). Integers only: validators test a real one in floating point
 * (0.3 / 0.1 is no integer there), so no grammar could agree with them all. 0 or error. */
static int gs_multiple(struct gs *s, const json_t *sch, const char *path, long long *k)
{
    const json_t *v = json_object_get(sch, "multipleOf");
    double d = json_number_value(v);
    char msg[200];
    *k = 0;
    if (!v) return 0;
    if (!json_is_number(v) || d <= 0)
        return gs_fail(s, ERR_INVAL, path, "%s", "'multipleOf' must be a number greater than 0");
    if (json_is_real(v) ? d != floor(d) || d > (double)GRAMMAR_RANGE_MAX
                        : json_integer_value(v) > GRAMMAR_RANGE_MAX) {
        snprintf(msg, sizeof(msg),
                 "'multipleOf' %g is not supported (only integers of up to 18 digits are)", d);
        return gs_fail(s, ERR_UNSUPPORTED, path, "%s", msg);
    }
    *k = json_is_real(v) ? (long long)d : json_integer_value(v);
    return 0;
}

/* The integers (of an 'integer', or the integral values of a 'number' with an integer multipleOf
 * k) in range, multiples of k when k > 1. */
static int gs_integral(struct gs *s, const struct gs_range *r, long long k, const char *path,
                       struct buf *b)
{
    char msg[200];
    int rc;
    if (k > 1) {
        char prefix[GS_NAME];
        snprintf(prefix, sizeof(prefix), "s%d", s->n_rules++);
        rc = grammar_range_multiple_gbnf(r->lo, r->hi, k, prefix, s->out, b);
    } else {
        rc =
            r->lo.set || r->hi.set ? grammar_range_int_gbnf(r->lo, r->hi, b) : buf_puts(b, "j-int");
    }
    if (rc == ERR_INVAL) {
        snprintf(msg, sizeof(msg), "minimum / maximum leave no %s in range",
                 k > 1 ? "multiple of 'multipleOf'" : "value");
        return gs_fail(s, rc, path, "%s", msg);
    }
    if (rc == ERR_UNSUPPORTED) {
        snprintf(msg, sizeof(msg),
                 "'multipleOf' %lld is not supported here (its grammar needs more than %d rules)",
                 k, GRAMMAR_RANGE_MULTIPLE_RULES);
        return gs_fail(s, rc, path, "%s", msg);
    }
    return rc;
}

int grammar_schema_number_gbnf(struct gs *s, const json_t *sch, const char *path, bool integer,
                               struct buf *b)
{
    struct gs_range r;
    long long k;
    int rc = gs_bounds(s, sch, path, integer, &r);
    if (!rc) rc = gs_multiple(s, sch, path, &k);
    if (rc) return rc;
    if (integer) return gs_integral(s, &r, k, path, b);
    if (k) { /* integral values, spelled with a fraction of zeros or none */
        r.lo = grammar_range_number_int(&r.dlo, true);
        r.hi = grammar_range_number_int(&r.dhi, false);
        if ((rc = gs_integral(s, &r, k, path, b))) return rc;
        return buf_printf(b, " ( \".\" \"0\"{1,%d} )?", GRAMMAR_RANGE_FRAC);
    }
    if (!r.dlo.set && !r.dhi.set) return buf_puts(b, "j-number");
    rc = grammar_range_number_gbnf(r.dlo, r.dhi, b);
    if (rc == ERR_INVAL)
        return gs_fail(s, rc, path, "%s", "minimum / maximum leave no value in range");
    return rc;
}
