/* Python's string operations on UTF-8 template values: case mappings (full ones, with the
 * final-sigma rule of str.lower), strip with Python's whitespace or a character set, replace,
 * split / rsplit (on whitespace runs or a separator, with maxsplit) and splitlines. Shared by the
 * str methods and the filters; a Markup receiver keeps its flag. */
#include "engine/api/jinja_priv.h"

#include "common/err.h"
#include "engine/text/unicode.h"

#include <stdint.h>
#include <string.h>

/* ---------------------------------------------------------------- case mappings */

/* CPython's final-sigma test at s[i] (the sigma's offset) of s[0..len). */
static bool final_sigma(const char *s, size_t len, size_t i, size_t next)
{
    bool before = false;
    for (size_t j = i; j > 0;) {
        size_t k = j - 1;
        while (k > 0 && ((uint8_t)s[k] & 0xC0) == 0x80) k--;
        size_t q = k;
        uint32_t cp = unicode_decode(s, len, &q);
        j = k;
        if (unicode_is_case_ignorable(cp)) continue;
        before = unicode_is_cased(cp);
        break;
    }
    if (!before) return false;
    for (size_t j = next; j < len;) {
        uint32_t cp = unicode_decode(s, len, &j);
        if (unicode_is_case_ignorable(cp)) continue;
        return !unicode_is_cased(cp);
    }
    return true;
}

static int put_cases(struct jinja_ctx *c, struct jinja_sb *sb, uint32_t cp, enum unicode_case kind,
                     const char *s, size_t len, size_t at, size_t next)
{
    uint32_t m[3];
    size_t n;
    if (cp == 0x3A3 && kind == UNICODE_CASE_LOWER) {
        m[0] = final_sigma(s, len, at, next) ? 0x3C2 : 0x3C3;
        n = 1;
    } else {
        n = unicode_case_full(cp, kind, m);
    }
    for (size_t k = 0; k < n; k++) {
        int rc = jinja_sb_cpt(c, sb, m[k]);
        if (rc) return rc;
    }
    return 0;
}

/* mode: 0 lower, 1 upper, 2 title (str.title), 3 capitalize */
static int map_case(struct jinja_ctx *c, const struct jinja_val *s, int mode, struct jinja_val *out)
{
    bool ascii = true;
    for (size_t i = 0; i < s->len && ascii; i++) ascii = (uint8_t)s->s[i] < 0x80;
    struct jinja_sb sb = {0};
    int rc = 0;
    if (ascii) {
        char *p = jinja_alloc(&c->arena, s->len + 1);
        if (!p) return jinja_fail_alloc(c);
        bool prev_cased = false;
        for (size_t i = 0; i < s->len; i++) {
            char ch = s->s[i];
            bool lower = ch >= 'a' && ch <= 'z', upper = ch >= 'A' && ch <= 'Z';
            bool to_upper = mode == 1 || (mode == 2 && !prev_cased) || (mode == 3 && i == 0);
            p[i] = to_upper ? (lower ? (char)(ch - 32) : ch) : (upper ? (char)(ch + 32) : ch);
            prev_cased = lower || upper;
        }
        p[s->len] = '\0';
        *out = jinja_str(p, s->len);
        out->flags = s->flags & JV_F_SAFE;
        return 0;
    }
    bool prev_cased = false;
    for (size_t i = 0, first = 1; i < s->len && !rc; first = 0) {
        size_t at = i;
        uint32_t cp = unicode_decode(s->s, s->len, &i);
        enum unicode_case kind = mode == 0   ? UNICODE_CASE_LOWER
                                 : mode == 1 ? UNICODE_CASE_UPPER
                                 : mode == 2
                                     ? (prev_cased ? UNICODE_CASE_LOWER : UNICODE_CASE_TITLE)
                                     : (first ? UNICODE_CASE_TITLE : UNICODE_CASE_LOWER);
        rc = put_cases(c, &sb, cp, kind, s->s, s->len, at, i);
        prev_cased = unicode_is_cased(cp);
    }
    if (rc) return rc;
    *out = jinja_sb_val(&sb);
    out->flags = s->flags & JV_F_SAFE;
    return 0;
}

int jinja_str_upper(struct jinja_ctx *c, const struct jinja_val *s, struct jinja_val *out)
{
    return map_case(c, s, 1, out);
}

int jinja_str_lower(struct jinja_ctx *c, const struct jinja_val *s, struct jinja_val *out)
{
    return map_case(c, s, 0, out);
}

int jinja_str_title(struct jinja_ctx *c, const struct jinja_val *s, struct jinja_val *out)
{
    return map_case(c, s, 2, out);
}

int jinja_str_capitalize(struct jinja_ctx *c, const struct jinja_val *s, struct jinja_val *out)
{
    return map_case(c, s, 3, out);
}

/* ---------------------------------------------------------------- strip, split, replace */

static bool in_chars(const struct jinja_val *chars, uint32_t cp)
{
    if (!chars) return jinja_is_space(cp);
    for (size_t i = 0; i < chars->len;)
        if (unicode_decode(chars->s, chars->len, &i) == cp) return true;
    return false;
}

/* Byte offset where the code point before `end` starts. */
static size_t prev_cp(const char *s, size_t end)
{
    size_t k = end - 1;
    while (k > 0 && ((uint8_t)s[k] & 0xC0) == 0x80) k--;
    return k;
}

int jinja_str_strip(struct jinja_ctx *c, const struct jinja_val *s, const struct jinja_val *chars,
                    int which, struct jinja_val *out)
{
    (void)c;
    size_t a = 0, b = s->len;
    if (which & 1)
        while (a < b) {
            size_t q = a;
            if (!in_chars(chars, unicode_decode(s->s, s->len, &q))) break;
            a = q;
        }
    if (which & 2)
        while (b > a) {
            size_t k = prev_cp(s->s, b), q = k;
            if (!in_chars(chars, unicode_decode(s->s, s->len, &q))) break;
            b = k;
        }
    *out = jinja_str(s->s + a, b - a);
    out->flags = s->flags & JV_F_SAFE;
    return 0;
}

int jinja_str_replace(struct jinja_ctx *c, const struct jinja_val *s, const struct jinja_val *old,
                      const struct jinja_val *new_, int64_t count, struct jinja_val *out)
{
    struct jinja_sb sb = {0};
    int rc = 0;
    if (count < 0) count = INT64_MAX;
    if (old->len == 0) { /* Python inserts `new` before every code point and at the end */
        size_t i = 0;
        int64_t done = 0;
        while (!rc) {
            if (done < count) {
                rc = jinja_sb_put(c, &sb, new_->s, new_->len);
                done++;
            }
            if (rc || i >= s->len) break;
            size_t q = i;
            unicode_decode(s->s, s->len, &q);
            rc = jinja_sb_put(c, &sb, s->s + i, q - i);
            i = q;
        }
    } else {
        size_t i = 0;
        int64_t done = 0;
        while (!rc && i <= s->len) {
            const char *hit = done < count ? memmem(s->s + i, s->len - i, old->s, old->len) : NULL;
            if (!hit) {
                rc = jinja_sb_put(c, &sb, s->s + i, s->len - i);
                break;
            }
            size_t at = (size_t)(hit - s->s);
            rc = jinja_sb_put(c, &sb, s->s + i, at - i);
            if (!rc) rc = jinja_sb_put(c, &sb, new_->s, new_->len);
            i = at + old->len;
            done++;
            if (!rc) rc = jinja_step(c, 1);
        }
    }
    if (rc) return rc;
    *out = jinja_sb_val(&sb);
    out->flags = s->flags & JV_F_SAFE;
    return 0;
}

static int push_str(struct jinja_ctx *c, struct jinja_list *l, const char *p, size_t n,
                    uint8_t flags)
{
    struct jinja_val v = jinja_str(p, n);
    v.flags = flags;
    int rc = jinja_list_push(c, l, v);
    return rc ? rc : jinja_step(c, 1);
}

int jinja_str_split(struct jinja_ctx *c, const struct jinja_val *s, const struct jinja_val *sep,
                    int64_t maxsplit, bool right, struct jinja_val *out)
{
    struct jinja_list *l = jinja_list_new(c, 0);
    if (!l) return jinja_fail_alloc(c);
    uint8_t fl = s->flags & JV_F_SAFE;
    int rc = 0;
    if (maxsplit < 0) maxsplit = INT64_MAX;
    if (sep && sep->len == 0) return jinja_fail(c, ERR_INVAL, "empty separator");
    if (!right) {
        size_t i = 0;
        int64_t splits = 0;
        if (!sep) {
            for (;;) {
                while (i < s->len) { /* skip whitespace */
                    size_t q = i;
                    if (!jinja_is_space(unicode_decode(s->s, s->len, &q))) break;
                    i = q;
                }
                if (i >= s->len) break;
                if (splits == maxsplit) {
                    rc = push_str(c, l, s->s + i, s->len - i, fl);
                    break;
                }
                size_t e = i;
                while (e < s->len) {
                    size_t q = e;
                    if (jinja_is_space(unicode_decode(s->s, s->len, &q))) break;
                    e = q;
                }
                if ((rc = push_str(c, l, s->s + i, e - i, fl))) break;
                splits++;
                i = e;
            }
        } else {
            for (;;) {
                const char *hit =
                    splits < maxsplit ? memmem(s->s + i, s->len - i, sep->s, sep->len) : NULL;
                if (!hit) {
                    rc = push_str(c, l, s->s + i, s->len - i, fl);
                    break;
                }
                size_t at = (size_t)(hit - s->s);
                if ((rc = push_str(c, l, s->s + i, at - i, fl))) break;
                i = at + sep->len;
                splits++;
            }
        }
    } else { /* rsplit: collect from the right, then reverse */
        size_t e = s->len;
        int64_t splits = 0;
        if (!sep) {
            for (;;) {
                while (e > 0) {
                    size_t k = prev_cp(s->s, e), q = k;
                    if (!jinja_is_space(unicode_decode(s->s, s->len, &q))) break;
                    e = k;
                }
                if (e == 0) break;
                if (splits == maxsplit) {
                    rc = push_str(c, l, s->s, e, fl);
                    break;
                }
                size_t b = e;
                while (b > 0) {
                    size_t k = prev_cp(s->s, b), q = k;
                    if (jinja_is_space(unicode_decode(s->s, s->len, &q))) break;
                    b = k;
                }
                if ((rc = push_str(c, l, s->s + b, e - b, fl))) break;
                splits++;
                e = b;
            }
        } else {
            for (;;) {
                size_t at = SIZE_MAX;
                if (splits < maxsplit && e >= sep->len)
                    for (size_t k = e - sep->len + 1; k-- > 0;)
                        if (memcmp(s->s + k, sep->s, sep->len) == 0) {
                            at = k;
                            break;
                        }
                if (at == SIZE_MAX) {
                    rc = push_str(c, l, s->s, e, fl);
                    break;
                }
                if ((rc = push_str(c, l, s->s + at + sep->len, e - at - sep->len, fl))) break;
                e = at;
                splits++;
            }
        }
        for (size_t i = 0; !rc && i < l->n / 2; i++) {
            struct jinja_val t = l->v[i];
            l->v[i] = l->v[l->n - 1 - i];
            l->v[l->n - 1 - i] = t;
        }
    }
    if (rc) return rc;
    *out = jinja_list_val(l, JV_LIST);
    return 0;
}

int jinja_str_splitlines(struct jinja_ctx *c, const struct jinja_val *s, bool keepends,
                         struct jinja_val *out)
{
    struct jinja_list *l = jinja_list_new(c, 0);
    if (!l) return jinja_fail_alloc(c);
    size_t i = 0;
    while (i < s->len) {
        size_t e = i, next = s->len;
        while (e < s->len) {
            size_t q = e;
            uint32_t cp = unicode_decode(s->s, s->len, &q);
            if (cp == '\n' || cp == '\v' || cp == '\f' || cp == 0x1c || cp == 0x1d || cp == 0x1e ||
                cp == 0x85 || cp == 0x2028 || cp == 0x2029) {
                next = q;
                break;
            }
            if (cp == '\r') {
                next = q < s->len && s->s[q] == '\n' ? q + 1 : q;
                break;
            }
            e = q;
        }
        int rc = push_str(c, l, s->s + i, (keepends ? next : e) - i, s->flags & JV_F_SAFE);
        if (rc) return rc;
        i = next;
    }
    *out = jinja_list_val(l, JV_LIST);
    return 0;
}
