/* The JSON reader of the tool-call scanner (api_tool_scan.h; the rules are api_tool_stream.c's):
 * one JSON value, byte by byte, on a stack of open containers, strings decoded with their escapes,
 * numbers and literals checked as JSON writes them; in it, the call objects (at the top, or the
 * elements of a top array) and their "name" and "arguments" (or "parameters"), whose bytes it
 * collects for the events. A byte that breaks JSON or the call shape is api_tool_stream_fail's. */
#include "engine/api/api.h"
#include "engine/api/api_priv.h"
#include "engine/api/api_tool_scan.h"

#include "common/err.h"
#include "common/utf8.h"

#include <stdlib.h>
#include <string.h>

#define TS_DEPTH_MAX  1024 /* deeper JSON breaks the form (jansson's own limit is 2048) */
#define TS_NAME_MAX   1024 /* bytes of a function name */
#define TS_KEY_MAX    16   /* bytes of a call object's key worth keeping ("parameters" is 10) */
#define TS_SCALAR_MAX 512  /* bytes of a number or literal */

/* What the innermost open container (or the top level) reads next. */
enum { E_VALUE = 1, E_VALUE_OR_END, E_KEY, E_KEY_OR_END, E_COLON, E_COMMA_OR_END, E_DONE };
enum { L_NONE, L_STR, L_ESC, L_HEX, L_SCALAR };
/* What the string being read is: a key of the call object, the name, the arguments, other. */
enum { R_PLAIN, R_KEY, R_NAME, R_ARGSTR };
enum { K_OTHER, K_NAME, K_ARGS };

static void ts_call_begin(struct api_tool_stream *s)
{
    s->have_name = s->have_args = s->committed = s->in_args = s->args_string = false;
    s->key_role = K_OTHER;
    buf_reset(&s->name);
    buf_reset(&s->args);
    s->args_sent = 0;
}

void api_tool_json_reset(struct api_tool_stream *s)
{
    s->depth = 0;
    s->top_expect = E_VALUE;
    s->lex = L_NONE;
    s->high = 0;
    s->role = R_PLAIN;
    s->calls_in_value = 0;
    ts_call_begin(s);
}

static int ts_expect(const struct api_tool_stream *s)
{
    return s->depth ? s->stack[2 * s->depth - 1] : s->top_expect;
}

static void ts_set_expect(struct api_tool_stream *s, int e)
{
    if (s->depth)
        s->stack[2 * s->depth - 1] = (unsigned char)e;
    else
        s->top_expect = e;
}

/* Raw bytes of the arguments value (not a string one). */
static void ts_sink(struct api_tool_scan *c, const char *p, size_t n)
{
    struct api_tool_stream *s = c->s;
    if (s->in_args && !s->args_string && buf_append(&s->args, p, n)) c->rc = ERR_NOMEM;
}

/* Decoded bytes of the string being read. */
static void ts_decoded(struct api_tool_scan *c, const char *p, size_t n)
{
    struct api_tool_stream *s = c->s;
    struct buf *b = s->role == R_KEY      ? &s->key
                    : s->role == R_NAME   ? &s->name
                    : s->role == R_ARGSTR ? &s->args
                                          : NULL;
    if (!b) return;
    if (s->role == R_KEY && b->len + n > TS_KEY_MAX) return; /* no key we read is that long */
    if (s->role == R_NAME && b->len + n > TS_NAME_MAX) {
        api_tool_stream_fail(c);
        return;
    }
    if (buf_append(b, p, n)) c->rc = ERR_NOMEM;
}

static void ts_code_point(struct api_tool_scan *c, unsigned cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | cp >> 6);
        u[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | cp >> 12);
        u[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        u[0] = (char)(0xF0 | cp >> 18);
        u[1] = (char)(0x80 | (cp >> 12 & 0x3F));
        u[2] = (char)(0x80 | (cp >> 6 & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    ts_decoded(c, u, n);
}

/* A value begins at level s->depth: kind '{', '[', '"' or 's' (number or literal). */
static void ts_value_begin(struct api_tool_scan *c, char kind)
{
    struct api_tool_stream *s = c->s;
    size_t level = s->depth;
    s->role = R_PLAIN;
    if (level == 0) {
        s->call_level = kind == '[' ? 1 : 0;
        if (kind == '{') ts_call_begin(s);
        if (kind != '{' && kind != '[') api_tool_stream_fail(c);
    } else if (level == s->call_level) { /* an element of the top array: a call object */
        if (kind == '{')
            ts_call_begin(s);
        else
            api_tool_stream_fail(c);
    } else if (level == s->call_level + 1) { /* the value of a call object's key */
        if (s->key_role == K_NAME && !s->have_name) {
            if (kind == '"')
                s->role = R_NAME;
            else
                api_tool_stream_fail(c);
        } else if (s->key_role == K_ARGS && !s->have_args) {
            s->have_args = s->in_args = true;
            s->args_level = level;
            s->args_string = kind == '"';
            if (s->args_string) s->role = R_ARGSTR;
            if (s->have_name) api_tool_stream_commit(c);
        }
    }
}

/* A value ended at level s->depth (its container, if any, popped). */
static void ts_value_end(struct api_tool_scan *c, int role)
{
    struct api_tool_stream *s = c->s;
    size_t level = s->depth;
    ts_set_expect(s, level ? E_COMMA_OR_END : E_DONE);
    if (s->in_args && level == s->args_level) s->in_args = false;
    if (role == R_NAME) {
        if (!s->name.len || !utf8_valid(s->name.data, s->name.len)) {
            api_tool_stream_fail(c);
            return;
        }
        s->have_name = true;
        if (s->have_args) api_tool_stream_commit(c);
    }
    if (level == s->call_level) { /* a call object closed */
        if (!s->committed) {
            api_tool_stream_fail(c);
            return;
        }
        api_tool_stream_flush(c, true);
        s->committed = false;
    }
    if (level == 0) {
        if (!s->calls_in_value) {
            api_tool_stream_fail(c);
            return;
        }
        s->mode = s->form == API_TOOL_F_HERMES ? API_TOOL_M_SKIP : API_TOOL_M_DROP;
    }
}

/* A number or true / false / null, as JSON writes them. */
static bool ts_scalar_ok(const char *p, size_t n)
{
    if ((n == 4 && (!memcmp(p, "true", 4) || !memcmp(p, "null", 4))) ||
        (n == 5 && !memcmp(p, "false", 5)))
        return true;
    size_t i = 0;
    if (i < n && p[i] == '-') i++;
    if (i < n && p[i] == '0') {
        i++;
    } else {
        if (i >= n || p[i] < '1' || p[i] > '9') return false;
        while (i < n && p[i] >= '0' && p[i] <= '9') i++;
    }
    if (i < n && p[i] == '.') {
        size_t d = ++i;
        while (i < n && p[i] >= '0' && p[i] <= '9') i++;
        if (i == d) return false;
    }
    if (i < n && (p[i] == 'e' || p[i] == 'E')) {
        i++;
        if (i < n && (p[i] == '+' || p[i] == '-')) i++;
        size_t d = i;
        while (i < n && p[i] >= '0' && p[i] <= '9') i++;
        if (i == d) return false;
    }
    return i == n;
}

static bool ts_scalar_char(char ch)
{
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
           ch == '.' || ch == '+' || ch == '-';
}

static int ts_hex(char ch)
{
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* Inside a string: the byte after a backslash, or the hex digits of \uXXXX. */
static void ts_escape(struct api_tool_scan *c, char ch)
{
    struct api_tool_stream *s = c->s;
    ts_sink(c, &ch, 1);
    if (s->lex == L_ESC) {
        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
        const char *at = ch ? strchr(from, ch) : NULL;
        if (ch == 'u') {
            s->lex = L_HEX;
            s->hex_n = 0;
            s->code = 0;
        } else if (!at || s->high) {
            api_tool_stream_fail(c);
        } else {
            s->lex = L_STR;
            ts_decoded(c, &to[at - from], 1);
        }
        return;
    }
    int v = ts_hex(ch);
    if (v < 0) {
        api_tool_stream_fail(c);
        return;
    }
    s->code = s->code * 16 + (unsigned)v;
    if (++s->hex_n < 4) return;
    s->lex = L_STR;
    unsigned code = s->code;
    if (s->high) { /* the low half of a surrogate pair, or broken */
        if (code < 0xDC00 || code > 0xDFFF) {
            api_tool_stream_fail(c);
            return;
        }
        code = 0x10000 + ((s->high - 0xD800) << 10) + (code - 0xDC00);
        s->high = 0;
    } else if (code >= 0xD800 && code <= 0xDBFF) {
        s->high = code;
        return;
    } else if ((code >= 0xDC00 && code <= 0xDFFF) || code == 0) {
        api_tool_stream_fail(c); /* a lone low surrogate; NUL, which jansson refuses too */
        return;
    }
    ts_code_point(c, code);
}

static void ts_string_char(struct api_tool_scan *c, char ch)
{
    struct api_tool_stream *s = c->s;
    if (ch == '"' && !s->high) {
        s->lex = L_NONE;
        ts_sink(c, &ch, 1);
        int role = s->role;
        s->role = R_PLAIN;
        if (ts_expect(s) == E_COLON) { /* a key (set when it began): the colon comes next */
            if (role == R_KEY)
                s->key_role = s->key.len == 4 && !memcmp(s->key.data, "name", 4) ? K_NAME
                              : (s->key.len == 9 && !memcmp(s->key.data, "arguments", 9)) ||
                                      (s->key.len == 10 && !memcmp(s->key.data, "parameters", 10))
                                  ? K_ARGS
                                  : K_OTHER;
            return;
        }
        ts_value_end(c, role);
    } else if (ch == '\\') {
        ts_sink(c, &ch, 1);
        s->lex = L_ESC;
    } else if ((unsigned char)ch < 0x20 || s->high) {
        api_tool_stream_fail(c); /* a raw control byte, or a high surrogate with no \u after it */
    } else {
        ts_sink(c, &ch, 1);
        ts_decoded(c, &ch, 1);
    }
}

/* One structural byte, or the first of a string or scalar. */
static void ts_structure(struct api_tool_scan *c, char ch)
{
    struct api_tool_stream *s = c->s;
    if (api_blank(ch)) return;
    int e = ts_expect(s);
    bool value = e == E_VALUE || e == E_VALUE_OR_END;
    char open = s->depth ? (char)s->stack[2 * s->depth - 2] : 0;
    if ((ch == '{' || ch == '[') && value) {
        if (s->depth == TS_DEPTH_MAX) {
            api_tool_stream_fail(c);
            return;
        }
        ts_value_begin(c, ch);
        if (s->mode != API_TOOL_M_JSON) return;
        ts_sink(c, &ch, 1);
        if (s->depth == s->cap) {
            size_t cap = s->cap ? s->cap * 2 : 16;
            unsigned char *g = realloc(s->stack, 2 * cap);
            if (!g) {
                c->rc = ERR_NOMEM;
                return;
            }
            s->stack = g;
            s->cap = cap;
        }
        s->stack[2 * s->depth] = (unsigned char)ch;
        s->stack[2 * s->depth + 1] = ch == '{' ? E_KEY_OR_END : E_VALUE_OR_END;
        s->depth++;
    } else if ((ch == '}' && open == '{' && (e == E_KEY_OR_END || e == E_COMMA_OR_END)) ||
               (ch == ']' && open == '[' && (e == E_VALUE_OR_END || e == E_COMMA_OR_END))) {
        ts_sink(c, &ch, 1);
        s->depth--;
        ts_value_end(c, R_PLAIN);
    } else if (ch == ':' && e == E_COLON) {
        ts_sink(c, &ch, 1);
        ts_set_expect(s, E_VALUE);
    } else if (ch == ',' && e == E_COMMA_OR_END) {
        ts_sink(c, &ch, 1);
        ts_set_expect(s, open == '{' ? E_KEY : E_VALUE);
    } else if (ch == '"' && (e == E_KEY || e == E_KEY_OR_END)) {
        s->role = s->depth == s->call_level + 1 ? R_KEY : R_PLAIN;
        buf_reset(&s->key);
        ts_set_expect(s, E_COLON);
        ts_sink(c, &ch, 1);
        s->lex = L_STR;
    } else if (ch == '"' && value) {
        ts_value_begin(c, '"');
        if (s->mode != API_TOOL_M_JSON) return;
        ts_sink(c, &ch, 1);
        s->lex = L_STR;
    } else if (value &&
               (ch == '-' || (ch >= '0' && ch <= '9') || ch == 't' || ch == 'f' || ch == 'n')) {
        ts_value_begin(c, 's');
        if (s->mode != API_TOOL_M_JSON) return;
        ts_sink(c, &ch, 1);
        buf_reset(&s->scalar);
        if (buf_putc(&s->scalar, ch)) c->rc = ERR_NOMEM;
        s->lex = L_SCALAR;
    } else {
        api_tool_stream_fail(c);
    }
}

/* Ends a number or literal (the next byte is not part of it). */
static void ts_scalar_end(struct api_tool_scan *c)
{
    struct api_tool_stream *s = c->s;
    s->lex = L_NONE;
    if (!ts_scalar_ok(s->scalar.data, s->scalar.len))
        api_tool_stream_fail(c);
    else
        ts_value_end(c, R_PLAIN);
}

void api_tool_json_char(struct api_tool_scan *c, char ch)
{
    struct api_tool_stream *s = c->s;
    switch (s->lex) {
    case L_STR: ts_string_char(c, ch); return;
    case L_ESC:
    case L_HEX: ts_escape(c, ch); return;
    case L_SCALAR:
        if (ts_scalar_char(ch)) {
            if (s->scalar.len == TS_SCALAR_MAX) {
                api_tool_stream_fail(c);
                return;
            }
            ts_sink(c, &ch, 1);
            if (buf_putc(&s->scalar, ch)) c->rc = ERR_NOMEM;
            return;
        }
        ts_scalar_end(c);
        if (s->mode != API_TOOL_M_JSON || c->rc) return;
        ts_structure(c, ch);
        return;
    default: ts_structure(c, ch); return;
    }
}
