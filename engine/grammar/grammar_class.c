/* Character classes -> byte-level elements. A class over code points becomes one byte set when it
 * holds only ASCII, else a generated rule whose alternatives are the UTF-8 encodings of its ranges
 * as sequences of byte ranges (the construction of RE2 and Rust's utf8-ranges), sequences that
 * differ only in their first byte merged into one. Surrogates (U+D800..U+DFFF) are never matched:
 * they have no UTF-8 encoding. */
#include "engine/grammar/grammar_build.h"

#include "common/err.h"
#include "engine/text/unicode.h"

#include <stdlib.h>
#include <string.h>

#define CP_MAX 0x10FFFFu

/* One UTF-8 sequence of byte ranges: n bytes, byte i within [lo[i], hi[i]]. */
struct seq {
    int n;
    uint8_t lo[4], hi[4];
};

struct seqs {
    struct seq *v;
    size_t n, cap;
    int rc;
};

static int utf8_len(uint32_t c)
{
    return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
}

static void seqs_add(struct seqs *s, const struct seq *q)
{
    if (s->rc) return;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        struct seq *v = realloc(s->v, cap * sizeof(*v));
        if (!v) {
            s->rc = ERR_NOMEM;
            return;
        }
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = *q;
}

/* Splits [lo, hi] (no surrogates inside) into ranges whose encodings are byte-range products. */
static void split(struct seqs *s, uint32_t lo, uint32_t hi)
{
    static const uint32_t bounds[] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= bounds[i] && hi > bounds[i]) {
            split(s, lo, bounds[i]);
            split(s, bounds[i] + 1, hi);
            return;
        }
    int n = utf8_len(lo);
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                split(s, lo, lo | m);
                split(s, (lo | m) + 1, hi);
                return;
            }
            if ((hi & m) != m) {
                split(s, lo, (hi & ~m) - 1);
                split(s, hi & ~m, hi);
                return;
            }
        }
    }
    struct seq q = {.n = n};
    char lo8[4], hi8[4];
    (void)unicode_encode(lo, lo8);
    (void)unicode_encode(hi, hi8);
    memcpy(q.lo, lo8, 4);
    memcpy(q.hi, hi8, 4);
    seqs_add(s, &q);
}

static int range_cmp(const void *a, const void *b)
{
    const struct gb_range *x = a, *y = b;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

size_t gb_range_normalise(struct gb_range *r, size_t n)
{
    qsort(r, n, sizeof(*r), range_cmp);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (r[i].lo > CP_MAX || r[i].lo > r[i].hi) continue;
        if (r[i].hi > CP_MAX) r[i].hi = CP_MAX;
        if (k && r[i].lo <= r[k - 1].hi + 1) {
            if (r[i].hi > r[k - 1].hi) r[k - 1].hi = r[i].hi;
        } else {
            r[k++] = r[i];
        }
    }
    return k;
}

size_t gb_range_complement(const struct gb_range *r, size_t n, struct gb_range *out)
{
    size_t k = 0;
    uint32_t next = 0;
    for (size_t i = 0; i < n; i++) {
        if (r[i].lo > next) out[k++] = (struct gb_range){next, r[i].lo - 1};
        next = r[i].hi + 1;
    }
    if (next <= CP_MAX) out[k++] = (struct gb_range){next, CP_MAX};
    return k;
}

/* Merges sequences equal but for their first byte into one byte set at emission. Returns true
 * when a and b have the same length and the same ranges after the first byte. */
static bool same_tail(const struct seq *a, const struct seq *b)
{
    if (a->n != b->n) return false;
    for (int i = 1; i < a->n; i++)
        if (a->lo[i] != b->lo[i] || a->hi[i] != b->hi[i]) return false;
    return true;
}

static struct grammar_byteset range_set(unsigned lo, unsigned hi)
{
    struct grammar_byteset s = {{0}};
    for (unsigned c = lo; c <= hi; c++) grammar_byteset_add(&s, c);
    return s;
}

int gb_class(struct gb *b, int32_t owner, struct gb_alt **a_io, struct gb_range *r, size_t n,
             bool negate)
{
    n = gb_range_normalise(r, n);
    struct gb_range *rs = malloc((n + 2) * sizeof(*rs));
    struct seqs s = {0};
    int rc = 0;
    if (!rs) return gb_fail(b, ERR_NOMEM, "out of memory compiling the grammar");
    size_t m = negate ? gb_range_complement(r, n, rs) : (memcpy(rs, r, n * sizeof(*r)), n);
    /* Drop surrogates: split a range that covers them. */
    struct grammar_byteset ascii = {{0}};
    bool has_ascii = false;
    for (size_t i = 0; i < m; i++) {
        uint32_t lo = rs[i].lo, hi = rs[i].hi;
        if (lo < 0x80) {
            uint32_t top = hi < 0x80 ? hi : 0x7F;
            struct grammar_byteset t = range_set(lo, top);
            for (int w = 0; w < 4; w++) ascii.w[w] |= t.w[w];
            has_ascii = true;
            if (hi < 0x80) continue;
            lo = 0x80;
        }
        if (lo <= 0xDFFF && hi >= 0xD800) {
            if (lo < 0xD800) split(&s, lo, 0xD7FF);
            if (hi > 0xDFFF) split(&s, 0xE000, hi);
        } else {
            split(&s, lo, hi);
        }
    }
    free(rs);
    if (s.rc) {
        free(s.v);
        return gb_fail(b, ERR_NOMEM, "out of memory compiling the grammar");
    }
    if (!s.n) { /* ASCII only (or empty: a set that matches nothing) */
        int32_t set = gb_set(b, &ascii);
        rc = set < 0 ? b->rc : gb_push(b, *a_io, GRAMMAR_E_BYTES, set);
        free(s.v);
        return rc;
    }
    /* A rule of alternatives; the caller's alternative may move when rules grow. */
    struct gb_rule *own = &b->rules[owner];
    size_t alt_index = (size_t)(*a_io - own->alts);
    int32_t cls = gb_rule_new(b, b->rules[owner].name);
    if (cls < 0) goto fail;
    *a_io = &b->rules[owner].alts[alt_index];
    rc = gb_push(b, *a_io, GRAMMAR_E_RULE, cls);
    if (rc) goto fail;
    if (has_ascii) {
        struct gb_alt *a = gb_alt_new(b, cls);
        int32_t set = gb_set(b, &ascii);
        if (!a || set < 0 || (rc = gb_push(b, a, GRAMMAR_E_BYTES, set))) goto fail;
    }
    for (size_t i = 0; i < s.n; i++) {
        if (s.v[i].n == 0) continue; /* merged into an earlier one */
        struct grammar_byteset first = range_set(s.v[i].lo[0], s.v[i].hi[0]);
        for (size_t j = i + 1; j < s.n; j++)
            if (same_tail(&s.v[i], &s.v[j])) {
                struct grammar_byteset t = range_set(s.v[j].lo[0], s.v[j].hi[0]);
                for (int w = 0; w < 4; w++) first.w[w] |= t.w[w];
                s.v[j].n = 0;
            }
        struct gb_alt *a = gb_alt_new(b, cls);
        if (!a) goto fail;
        int32_t set = gb_set(b, &first);
        if (set < 0 || (rc = gb_push(b, a, GRAMMAR_E_BYTES, set))) goto fail;
        for (int k = 1; k < s.v[i].n; k++) {
            struct grammar_byteset t = range_set(s.v[i].lo[k], s.v[i].hi[k]);
            set = gb_set(b, &t);
            if (set < 0 || (rc = gb_push(b, a, GRAMMAR_E_BYTES, set))) goto fail;
        }
    }
    free(s.v);
    return 0;
fail:
    free(s.v);
    return b->rc ? b->rc : gb_fail(b, ERR_NOMEM, "out of memory compiling the grammar");
}
