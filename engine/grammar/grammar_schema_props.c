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

int grammar_schema_pattern_search(const char *p, size_t n, const char *key, bool *match, char *why,
                                  size_t whylen)
{
    static const char *const piece[] = {"a"};
    static const size_t piece_len[] = {1};
    struct buf re, g;
    buf_init(&re, GRAMMAR_REGEX_MAX_LEN);
    buf_init(&g, GRAMMAR_MAX_TEXT);
    struct grammar_vocab *v = NULL;
    struct grammar *gr = NULL;
    struct grammar_arena *a = NULL;
    struct grammar_matcher *m = NULL;
    int rc = grammar_schema_pattern_wrap(p, n, &re, why, whylen);
    if (!rc) rc = grammar_regex_root_gbnf(buf_cstr(&re), re.len, &g, why, whylen);
    if (!rc) rc = grammar_vocab_from_pieces(piece, piece_len, 1, NULL, 0, &v);
    if (!rc) rc = grammar_compile(buf_cstr(&g), g.len, v, &gr, why, whylen);
    if (!rc && !(a = grammar_arena_new())) rc = ERR_NOMEM;
    if (!rc) rc = grammar_matcher_new(gr, a, &m);
    if (!rc) {
        *match = grammar_matcher_accept_bytes(m, a, key, strlen(key)) == 0 &&
                 grammar_matcher_accepting(m);
    }
    grammar_matcher_free(m);
    grammar_arena_free(a);
    grammar_unref(gr);
    grammar_vocab_free(v);
    buf_fini(&g);
    buf_fini(&re);
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
    int rc = c && np ? 0 : ERR_NOMEM;
    json_object_del(c, "patternProperties");
    const char *key;
    json_t *sub;
    json_object_foreach((json_t *)props, key, sub)
    {
        if (rc) break;
        json_t *acc = json_incref(sub);
        const char *pat;
        json_t *ps;
        json_object_foreach((json_t *)pp, pat, ps)
        {
            bool hit = false;
            if ((rc = grammar_schema_pattern_search(pat, strlen(pat), key, &hit, why, whylen)))
                break;
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
                *out = json_false();
                return 0;
            }
            continue;
        }
        if (!rc && json_object_set_new(np, key, acc))
            rc = ERR_NOMEM;
        else if (rc)
            json_decref(acc);
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
