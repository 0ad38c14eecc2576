/* patternProperties for the schema compiler (see grammar_schema_merge.h): JSON Schema's patterns
 * search (unanchored), so a key matches "^x-" when it starts with "x-" and "ab" anywhere in it.
 * A declared property whose name a pattern matches must also satisfy that pattern's schema; the
 * keys generated for an object that declares none come from the patterns themselves. */
#include "engine/grammar/grammar_schema_merge.h"

#include "common/buf.h"
#include "common/err.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/grammar_regex.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int grammar_schema_pattern_wrap(const char *p, size_t n, struct buf *out, char *why, size_t whylen)
{
    bool head = n && p[0] == '^';
    /* a final '$' not escaped: an even number of backslashes before it */
    size_t bs = 0;
    while (n >= 2 + bs && p[n - 2 - bs] == '\\') bs++;
    bool tail = n > (size_t)head && p[n - 1] == '$' && bs % 2 == 0;
    if ((head || tail) && memchr(p, '|', n))
        return err_fmt(why, whylen, ERR_UNSUPPORTED, "%s",
                       "an anchored pattern with '|' in patternProperties is not supported");
    const char *core = p + head;
    size_t len = n - head - tail;
    int rc = buf_puts(out, head ? "(?:" : ".*(?:");
    if (!rc) rc = buf_append(out, core, len);
    if (!rc) rc = buf_puts(out, tail ? ")" : ").*");
    return rc;
}

/* A pattern compiled for matching keys: a grammar of its search form over a one-token vocabulary
 * (only grammar_matcher_accept_bytes is used, never a mask). */
struct pattern {
    struct grammar_vocab *v;
    struct grammar *g;
};

static void pattern_fini(struct pattern *pt)
{
    grammar_unref(pt->g);
    grammar_vocab_free(pt->v);
    *pt = (struct pattern){0};
}

static int pattern_compile(const char *p, size_t n, struct pattern *pt, char *why, size_t whylen)
{
    static const char *const piece[] = {"a"};
    static const size_t piece_len[] = {1};
    struct buf re, g;
    buf_init(&re, GRAMMAR_REGEX_MAX_LEN);
    buf_init(&g, GRAMMAR_MAX_TEXT);
    *pt = (struct pattern){0};
    int rc = grammar_schema_pattern_wrap(p, n, &re, why, whylen);
    if (!rc) rc = grammar_regex_root_gbnf(buf_cstr(&re), re.len, &g, why, whylen);
    if (!rc) rc = grammar_vocab_from_pieces(piece, piece_len, 1, NULL, 0, &pt->v);
    if (!rc) rc = grammar_compile(buf_cstr(&g), g.len, pt->v, &pt->g, why, whylen);
    if (rc) pattern_fini(pt);
    buf_fini(&g);
    buf_fini(&re);
    return rc;
}

static int pattern_match(const struct pattern *pt, const char *key, bool *match)
{
    struct grammar_arena *a = grammar_arena_new();
    struct grammar_matcher *m = NULL;
    int rc = a ? grammar_matcher_new(pt->g, a, &m) : ERR_NOMEM;
    if (!rc)
        *match = grammar_matcher_accept_bytes(m, a, key, strlen(key)) == 0 &&
                 grammar_matcher_accepting(m);
    grammar_matcher_free(m);
    grammar_arena_free(a);
    return rc;
}

int grammar_schema_pattern_search(const char *p, size_t n, const char *key, bool *match, char *why,
                                  size_t whylen)
{
    struct pattern pt;
    int rc = pattern_compile(p, n, &pt, why, whylen);
    if (!rc) rc = pattern_match(&pt, key, match);
    pattern_fini(&pt);
    return rc;
}

int grammar_schema_patterns_apply(const json_t *root, const json_t *sch, json_t **out, char *why,
                                  size_t whylen)
{
    const json_t *pp = json_object_get(sch, "patternProperties");
    const json_t *props = json_object_get(sch, "properties");
    *out = NULL;
    if (!json_is_object(pp))
        return err_fmt(why, whylen, ERR_INVAL, "%s", "'patternProperties' must be an object");
    json_t *c = json_copy((json_t *)sch), *np = json_object();
    /* each pattern compiled once, when a property first needs it */
    struct pattern *pts = calloc(json_object_size(pp) + 1, sizeof(*pts));
    bool *ready = calloc(json_object_size(pp) + 1, sizeof(*ready));
    int rc = c && np && pts && ready ? 0 : ERR_NOMEM;
    json_object_del(c, "patternProperties");
    const char *key;
    json_t *sub;
    json_object_foreach((json_t *)props, key, sub)
    {
        if (rc) break;
        json_t *acc = json_incref(sub);
        const char *pat;
        json_t *ps;
        size_t ip = 0;
        json_object_foreach((json_t *)pp, pat, ps)
        {
            bool hit = false;
            size_t i = ip++;
            if (!ready[i] && (rc = pattern_compile(pat, strlen(pat), &pts[i], why, whylen))) break;
            ready[i] = true;
            if ((rc = pattern_match(&pts[i], key, &hit))) break;
            if (!hit) continue;
            json_t *m = NULL;
            rc = grammar_schema_merge(root, acc, ps, 0, &m, why, whylen);
            json_decref(acc);
            acc = m;
            if (rc || json_is_false(acc)) break;
        }
        if (!rc && json_is_false(acc)) {
            /* the pattern's schema and the property's admit no common value: only absent */
            json_decref(acc);
            if (grammar_schema_requires(sch, key)) {
                json_decref(np);
                json_decref(c);
                np = c = json_false();
                break;
            }
            continue;
        }
        if (!rc && json_object_set_new(np, key, acc))
            rc = ERR_NOMEM;
        else if (rc)
            json_decref(acc);
    }
    for (size_t i = 0; pts && i < json_object_size(pp); i++)
        if (ready && ready[i]) pattern_fini(&pts[i]);
    free(pts);
    free(ready);
    if (!rc && json_is_false(c)) { /* a required property no value can satisfy */
        *out = c;
        return 0;
    }
    if (!rc && json_object_set_new(c, "properties", np))
        rc = ERR_NOMEM;
    else if (rc)
        json_decref(np);
    if (rc) {
        json_decref(c);
        return rc;
    }
    *out = c;
    return 0;
}
