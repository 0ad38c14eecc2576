/* The grammar builder: growable rules and alternatives, deduplicated byte sets, and the checks that
 * freeze a built grammar (every rule defined, a root, no left recursion: the matcher expands rules
 * eagerly, so a rule that can reach itself without consuming a byte would never stop). */
#include "engine/grammar/grammar_build.h"

#include "common/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gb_init(struct gb *b, char *err, size_t errlen)
{
    memset(b, 0, sizeof(*b));
    for (int i = 0; i < 256; i++) b->byte_set[i] = -1;
    b->err = err;
    b->errlen = errlen;
    if (err && errlen) err[0] = '\0';
}

void gb_fini(struct gb *b)
{
    for (int32_t i = 0; i < b->n_rules; i++) {
        for (int32_t k = 0; k < b->rules[i].n_alts; k++) free(b->rules[i].alts[k].e);
        free(b->rules[i].alts);
        free(b->rules[i].name);
    }
    free(b->rules);
    free(b->sets);
    memset(b, 0, sizeof(*b));
}

int gb_fail(struct gb *b, int rc, const char *fmt, ...)
{
    if (b->rc) return b->rc;
    b->rc = rc;
    va_list ap;
    va_start(ap, fmt);
    (void)err_vfmt(b->err, b->errlen, rc, fmt, ap);
    va_end(ap);
    return rc;
}

static int gb_nomem(struct gb *b)
{
    return gb_fail(b, ERR_NOMEM, "out of memory compiling the grammar");
}

static int32_t gb_rule_add(struct gb *b, char *name)
{
    if (!name) return gb_nomem(b), -1;
    if (b->n_rules == b->cap_rules) {
        int32_t cap = b->cap_rules ? b->cap_rules * 2 : 32;
        struct gb_rule *r = realloc(b->rules, (size_t)cap * sizeof(*r));
        if (!r) {
            free(name);
            return gb_nomem(b), -1;
        }
        b->rules = r;
        b->cap_rules = cap;
    }
    b->rules[b->n_rules] = (struct gb_rule){.name = name};
    return b->n_rules++;
}

int32_t gb_rule_named(struct gb *b, const char *name, size_t len)
{
    for (int32_t i = 0; i < b->n_rules; i++)
        if (strlen(b->rules[i].name) == len && memcmp(b->rules[i].name, name, len) == 0) return i;
    return gb_rule_add(b, strndup(name, len));
}

int32_t gb_rule_new(struct gb *b, const char *base)
{
    char name[160];
    snprintf(name, sizeof(name), "%.120s_%d", base, (int)b->n_rules);
    int32_t r = gb_rule_add(b, strdup(name));
    if (r >= 0) b->rules[r].defined = true;
    return r;
}

struct gb_alt *gb_alt_new(struct gb *b, int32_t r)
{
    struct gb_rule *rule = &b->rules[r];
    if (rule->n_alts == rule->cap_alts) {
        int32_t cap = rule->cap_alts ? rule->cap_alts * 2 : 4;
        struct gb_alt *a = realloc(rule->alts, (size_t)cap * sizeof(*a));
        if (!a) return gb_nomem(b), NULL;
        rule->alts = a;
        rule->cap_alts = cap;
    }
    rule->alts[rule->n_alts] = (struct gb_alt){0};
    return &rule->alts[rule->n_alts++];
}

int gb_push(struct gb *b, struct gb_alt *a, int32_t type, int32_t arg)
{
    if (b->rc) return b->rc;
    if (++b->n_elems > GRAMMAR_MAX_ELEMS)
        return gb_fail(b, ERR_TOO_BIG, "the grammar is larger than %d elements", GRAMMAR_MAX_ELEMS);
    if (a->n == a->cap) {
        int32_t cap = a->cap ? a->cap * 2 : 8;
        struct grammar_elem *e = realloc(a->e, (size_t)cap * sizeof(*e));
        if (!e) return gb_nomem(b);
        a->e = e;
        a->cap = cap;
    }
    a->e[a->n++] = (struct grammar_elem){type, arg};
    return 0;
}

int32_t gb_set(struct gb *b, const struct grammar_byteset *s)
{
    for (int32_t i = 0; i < b->n_sets; i++)
        if (memcmp(&b->sets[i], s, sizeof(*s)) == 0) return i;
    if (b->n_sets == b->cap_sets) {
        int32_t cap = b->cap_sets ? b->cap_sets * 2 : 64;
        struct grammar_byteset *n = realloc(b->sets, (size_t)cap * sizeof(*n));
        if (!n) return gb_nomem(b), -1;
        b->sets = n;
        b->cap_sets = cap;
    }
    b->sets[b->n_sets] = *s;
    return b->n_sets++;
}

int32_t gb_byte(struct gb *b, unsigned byte)
{
    if (b->byte_set[byte] >= 0) return b->byte_set[byte];
    struct grammar_byteset s = {{0}};
    grammar_byteset_add(&s, byte);
    int32_t i = gb_set(b, &s);
    if (i >= 0) b->byte_set[byte] = i;
    return i;
}

/* ---------------------------------------------------------------- checks */

/* nullable[r]: rule r derives the empty string (fixpoint over all rules). */
static void gb_nullable(const struct gb *b, bool *nullable)
{
    bool changed = true;
    while (changed) {
        changed = false;
        for (int32_t r = 0; r < b->n_rules; r++) {
            if (nullable[r]) continue;
            for (int32_t k = 0; k < b->rules[r].n_alts && !nullable[r]; k++) {
                const struct gb_alt *a = &b->rules[r].alts[k];
                bool all = true;
                for (int32_t i = 0; i < a->n && all; i++)
                    all = a->e[i].type == GRAMMAR_E_RULE && nullable[a->e[i].arg];
                if (all) nullable[r] = changed = true;
            }
        }
    }
}

/* Depth-first search over "r can start with rule s" edges; state 1 on the path, 2 done. Returns
 * a rule on a cycle, or -1. Iterative over an explicit stack of (rule, alt, elem). */
static int32_t gb_left_cycle(const struct gb *b, const bool *nullable, uint8_t *state,
                             int32_t start, int32_t *stk)
{
    int32_t sp = 0;
    stk[sp++] = start;
    state[start] = 1;
    /* cursor per rule on the stack: flattened (alt, elem) as alt * 2^20 + elem is fragile; keep a
     * parallel array of cursors instead. */
    int32_t *cur = stk + b->n_rules; /* (n_rules) cursors, zeroed by the caller */
    while (sp > 0) {
        int32_t r = stk[sp - 1];
        const struct gb_rule *rule = &b->rules[r];
        int32_t next = -1;
        while (next < 0 && cur[r] < rule->n_alts) {
            const struct gb_alt *a = &rule->alts[cur[r]];
            /* edges from this alternative: each rule in its nullable prefix, and the first
             * non-nullable rule */
            for (int32_t i = 0; i < a->n; i++) {
                if (a->e[i].type != GRAMMAR_E_RULE) break;
                int32_t s = a->e[i].arg;
                if (state[s] == 1) return s;
                if (state[s] == 0) {
                    next = s;
                    break;
                }
                if (!nullable[s]) break;
            }
            if (next < 0) cur[r]++;
        }
        if (next < 0) {
            state[r] = 2;
            sp--;
            continue;
        }
        state[next] = 1;
        stk[sp++] = next;
    }
    return -1;
}

static int gb_check(struct gb *b, int32_t *root)
{
    *root = -1;
    for (int32_t r = 0; r < b->n_rules; r++) {
        if (!b->rules[r].defined)
            return gb_fail(b, ERR_NOT_FOUND, "undefined rule '%.80s' (line %d)", b->rules[r].name,
                           b->rules[r].ref_line);
        if (!strcmp(b->rules[r].name, "root")) *root = r;
    }
    if (*root < 0) return gb_fail(b, ERR_NOT_FOUND, "the grammar has no 'root' rule");
    bool *nullable = calloc((size_t)b->n_rules, sizeof(*nullable));
    uint8_t *state = calloc((size_t)b->n_rules, 1);
    int32_t *stk = calloc((size_t)b->n_rules * 2, sizeof(*stk));
    int rc = 0;
    if (!nullable || !state || !stk) {
        rc = gb_nomem(b);
        goto out;
    }
    gb_nullable(b, nullable);
    for (int32_t r = 0; r < b->n_rules && !rc; r++) {
        if (state[r]) continue;
        int32_t bad = gb_left_cycle(b, nullable, state, r, stk);
        if (bad >= 0)
            rc = gb_fail(b, ERR_UNSUPPORTED,
                         "rule '%.80s'%s can reach itself without consuming input (left "
                         "recursion, or a repetition of something that can be empty)",
                         b->rules[bad].name, b->rules[bad].line ? "" : " (generated)");
    }
out:
    free(nullable);
    free(state);
    free(stk);
    return rc;
}

int gb_finish(struct gb *b, const struct grammar_vocab *v, struct grammar **out)
{
    if (b->rc) return b->rc;
    int32_t root;
    int rc = gb_check(b, &root);
    if (rc) return rc;
    struct grammar *g = calloc(1, sizeof(*g));
    if (!g) return gb_nomem(b);
    atomic_init(&g->refs, 1);
    g->vocab = v;
    g->root = root;
    size_t n_elems = 0, n_alts = 0;
    for (int32_t r = 0; r < b->n_rules; r++) {
        n_alts += (size_t)b->rules[r].n_alts;
        for (int32_t k = 0; k < b->rules[r].n_alts; k++)
            n_elems += (size_t)b->rules[r].alts[k].n + 1;
    }
    g->elems = malloc((n_elems ? n_elems : 1) * sizeof(*g->elems));
    g->alts = malloc((n_alts ? n_alts : 1) * sizeof(*g->alts));
    g->rules = malloc((size_t)b->n_rules * sizeof(*g->rules));
    g->sets = malloc((b->n_sets ? (size_t)b->n_sets : 1) * sizeof(*g->sets));
    if (!g->elems || !g->alts || !g->rules || !g->sets) {
        grammar_unref(g);
        return gb_nomem(b);
    }
    if (b->n_sets) memcpy(g->sets, b->sets, (size_t)b->n_sets * sizeof(*g->sets));
    g->n_sets = b->n_sets;
    for (int32_t r = 0; r < b->n_rules; r++) {
        g->rules[r] = (struct grammar_rule){g->n_alts, b->rules[r].n_alts};
        for (int32_t k = 0; k < b->rules[r].n_alts; k++) {
            const struct gb_alt *a = &b->rules[r].alts[k];
            g->alts[g->n_alts++] = g->n_elems;
            for (int32_t i = 0; i < a->n; i++) g->elems[g->n_elems++] = a->e[i];
            g->elems[g->n_elems++] = (struct grammar_elem){GRAMMAR_E_END, r};
        }
    }
    g->n_rules = b->n_rules;
    *out = g;
    return 0;
}
