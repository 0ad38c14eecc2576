/* The incremental tool-call scanner (api.h api_tool_stream_*): a choice's text goes in as it is
 * generated; content, call starts and argument fragments come out as soon as they are certain.
 * api_tool_calls_parse runs this scanner over the whole text, so the streamed and the whole
 * answer cannot disagree. Pure code, no I/O. The forms (api_tool_calls.c's list):
 *   forced (tool_choice required / named): the text, after blanks, is a call object or an array
 *     of them; anything else makes the whole text content.
 *   anchored, at the first non-blank: "[TOOL_CALLS]" or "<|python_tag|>" then a JSON value, or
 *     a bare '{' / '[' (a call object or an array of call objects);
 *   Hermes / Qwen, anywhere in content: "<tool_call>" then a JSON value, up to "</tool_call>";
 *     text between and after blocks is dropped, later blocks add calls.
 * A call object has a non-empty "name" string and "arguments" (or "parameters"), any JSON value;
 * the first of each counts, other keys are ignored. What is emitted when:
 *   CONTENT: text before any call, as it comes, holding back trailing blanks, a suffix that may
 *     begin "<tool_call>" (or, at the start, the anchored markers) and an unfinished UTF-8
 *     character. Blanks before the first call are cut; a text with no call is content whole.
 *   CALL k (name): when call k's name is complete and its arguments value has begun (the call is
 *     committed: it stays a call whatever follows).
 *   ARGS k: the arguments as the model writes them, minus the blanks outside strings (a string
 *     value: its decoded contents), fragment by fragment after the CALL; what came before the
 *     name is sent with the CALL. Their concatenation is the call's "arguments".
 * Until the first call is committed, text that breaks the form (not JSON, an object that closes
 * without name and arguments, the end of the text) is content after all: an anchored attempt is
 * scanned again from the start as Hermes content, a broken Hermes block or forced value makes the
 * whole text content. After it, committed calls stand: a break ends the call being read, and the
 * scan resumes at the next "<tool_call>" (Hermes) or stops (the other forms). So a text cut off
 * inside a call (max_tokens) keeps the call with the arguments written so far, as OpenAI's. */
#include "engine/api/api.h"
#include "engine/api/api_priv.h"

#include "common/err.h"
#include "common/utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TS_OPEN       "<tool_call>"
#define TS_MISTRAL    "[TOOL_CALLS]"
#define TS_PYTHON     "<|python_tag|>"
#define TS_DEPTH_MAX  1024 /* deeper JSON breaks the form (jansson's own limit is 2048) */
#define TS_NAME_MAX   1024 /* bytes of a function name */
#define TS_KEY_MAX    16   /* bytes of a call object's key worth keeping ("parameters" is 10) */
#define TS_SCALAR_MAX 512  /* bytes of a number or literal */

enum { M_START, M_CONTENT, M_DEAD, M_BODY, M_JSON, M_SKIP, M_DROP };
enum { F_HERMES, F_ANCHORED, F_FORCED };
/* What the innermost open container (or the top level) reads next. */
enum { E_VALUE = 1, E_VALUE_OR_END, E_KEY, E_KEY_OR_END, E_COLON, E_COMMA_OR_END, E_DONE };
enum { L_NONE, L_STR, L_ESC, L_HEX, L_SCALAR };
/* What the string being read is: a key of the call object, the name, the arguments, other. */
enum { R_PLAIN, R_KEY, R_NAME, R_ARGSTR };
enum { K_OTHER, K_NAME, K_ARGS };

struct ts {
    struct api_tool_stream *s;
    api_tool_stream_fn fn;
    void *ud;
    int rc;
};

/* Bytes at the end of p[0..n) that begin a valid UTF-8 character still missing bytes. */
static size_t ts_utf8_tail(const char *p, size_t n)
{
    for (size_t i = 1; i <= 3 && i <= n; i++) {
        unsigned char b = (unsigned char)p[n - i];
        if ((b & 0xC0) == 0x80) continue;
        return b >= 0xC0 && utf8_seq_check((const uint8_t *)p + n - i, i) == 0 ? i : 0;
    }
    return 0;
}

static void ts_emit(struct ts *c, enum api_tool_ev ev, int call, const char *p, size_t n)
{
    if (!c->rc) c->rc = c->fn(c->ud, ev, call, p, n);
}

/* Sends what is certain: content up to content_upto (all of it once a call exists or at the
 * end), the current committed call's arguments (all of them when `all`). */
static void ts_flush(struct ts *c, bool all)
{
    struct api_tool_stream *s = c->s;
    if (s->content_upto > s->content_sent) {
        size_t n = s->content_upto - s->content_sent;
        if (!all && !s->n_calls) n -= ts_utf8_tail(s->text.data + s->content_sent, n);
        if (n) ts_emit(c, API_TOOL_EV_CONTENT, 0, s->text.data + s->content_sent, n);
        s->content_sent += n;
    }
    if (s->committed && s->args.len > s->args_sent) {
        size_t n = s->args.len - s->args_sent;
        if (!all) n -= ts_utf8_tail(s->args.data + s->args_sent, n);
        if (n) ts_emit(c, API_TOOL_EV_ARGS, s->n_calls - 1, s->args.data + s->args_sent, n);
        s->args_sent += n;
    }
}

static void ts_call_begin(struct api_tool_stream *s)
{
    s->have_name = s->have_args = s->committed = s->in_args = s->args_string = false;
    s->key_role = K_OTHER;
    buf_reset(&s->name);
    buf_reset(&s->args);
    s->args_sent = 0;
}

static void ts_json_reset(struct api_tool_stream *s)
{
    s->depth = 0;
    s->top_expect = E_VALUE;
    s->lex = L_NONE;
    s->high = 0;
    s->role = R_PLAIN;
    s->calls_in_value = 0;
    ts_call_begin(s);
}

/* The text broke the form at s->pos (or ended). */
static void ts_fail(struct ts *c)
{
    struct api_tool_stream *s = c->s;
    if (!s->n_calls) {
        if (s->form == F_ANCHORED && s->anchors) { /* scan it all again as Hermes content */
            s->anchors = false;
            s->mode = M_CONTENT;
            s->pos = 0;
            s->content_upto = 0;
        } else {
            s->mode = M_DEAD;
        }
        ts_json_reset(s);
        return;
    }
    ts_flush(c, true);
    s->committed = false; /* the call being read ends here */
    s->mode = s->form == F_HERMES ? M_SKIP : M_DROP;
}

static void ts_commit(struct ts *c)
{
    struct api_tool_stream *s = c->s;
    ts_flush(c, true); /* the content before the first call, whole */
    ts_emit(c, API_TOOL_EV_CALL, s->n_calls, s->name.data, s->name.len);
    s->n_calls++;
    s->committed = true;
    s->calls_in_value++;
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
static void ts_sink(struct ts *c, const char *p, size_t n)
{
    struct api_tool_stream *s = c->s;
    if (s->in_args && !s->args_string && buf_append(&s->args, p, n)) c->rc = ERR_NOMEM;
}

/* Decoded bytes of the string being read. */
static void ts_decoded(struct ts *c, const char *p, size_t n)
{
    struct api_tool_stream *s = c->s;
    struct buf *b = s->role == R_KEY      ? &s->key
                    : s->role == R_NAME   ? &s->name
                    : s->role == R_ARGSTR ? &s->args
                                          : NULL;
    if (!b) return;
    if (s->role == R_KEY && b->len + n > TS_KEY_MAX) return; /* no key we read is that long */
    if (s->role == R_NAME && b->len + n > TS_NAME_MAX) {
        ts_fail(c);
        return;
    }
    if (buf_append(b, p, n)) c->rc = ERR_NOMEM;
}

static void ts_code_point(struct ts *c, unsigned cp)
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
static void ts_value_begin(struct ts *c, char kind)
{
    struct api_tool_stream *s = c->s;
    size_t level = s->depth;
    s->role = R_PLAIN;
    if (level == 0) {
        s->call_level = kind == '[' ? 1 : 0;
        if (kind == '{') ts_call_begin(s);
        if (kind != '{' && kind != '[') ts_fail(c);
    } else if (level == s->call_level) { /* an element of the top array: a call object */
        if (kind == '{')
            ts_call_begin(s);
        else
            ts_fail(c);
    } else if (level == s->call_level + 1) { /* the value of a call object's key */
        if (s->key_role == K_NAME && !s->have_name) {
            if (kind == '"')
                s->role = R_NAME;
            else
                ts_fail(c);
        } else if (s->key_role == K_ARGS && !s->have_args) {
            s->have_args = s->in_args = true;
            s->args_level = level;
            s->args_string = kind == '"';
            if (s->args_string) s->role = R_ARGSTR;
            if (s->have_name) ts_commit(c);
        }
    }
}

/* A value ended at level s->depth (its container, if any, popped). */
static void ts_value_end(struct ts *c, int role)
{
    struct api_tool_stream *s = c->s;
    size_t level = s->depth;
    ts_set_expect(s, level ? E_COMMA_OR_END : E_DONE);
    if (s->in_args && level == s->args_level) s->in_args = false;
    if (role == R_NAME) {
        if (!s->name.len || !utf8_valid(s->name.data, s->name.len)) {
            ts_fail(c);
            return;
        }
        s->have_name = true;
        if (s->have_args) ts_commit(c);
    }
    if (level == s->call_level) { /* a call object closed */
        if (!s->committed) {
            ts_fail(c);
            return;
        }
        ts_flush(c, true);
        s->committed = false;
    }
    if (level == 0) {
        if (!s->calls_in_value) {
            ts_fail(c);
            return;
        }
        s->mode = s->form == F_HERMES ? M_SKIP : M_DROP;
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
static void ts_escape(struct ts *c, char ch)
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
            ts_fail(c);
        } else {
            s->lex = L_STR;
            ts_decoded(c, &to[at - from], 1);
        }
        return;
    }
    int v = ts_hex(ch);
    if (v < 0) {
        ts_fail(c);
        return;
    }
    s->code = s->code * 16 + (unsigned)v;
    if (++s->hex_n < 4) return;
    s->lex = L_STR;
    unsigned code = s->code;
    if (s->high) { /* the low half of a surrogate pair, or broken */
        if (code < 0xDC00 || code > 0xDFFF) {
            ts_fail(c);
            return;
        }
        code = 0x10000 + ((s->high - 0xD800) << 10) + (code - 0xDC00);
        s->high = 0;
    } else if (code >= 0xD800 && code <= 0xDBFF) {
        s->high = code;
        return;
    } else if ((code >= 0xDC00 && code <= 0xDFFF) || code == 0) {
        ts_fail(c); /* a lone low surrogate; NUL, which jansson refuses too */
        return;
    }
    ts_code_point(c, code);
}

static void ts_string_char(struct ts *c, char ch)
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
        ts_fail(c); /* a raw control byte, or a high surrogate with no \u after it */
    } else {
        ts_sink(c, &ch, 1);
        ts_decoded(c, &ch, 1);
    }
}

/* One structural byte, or the first of a string or scalar. */
static void ts_structure(struct ts *c, char ch)
{
    struct api_tool_stream *s = c->s;
    if (api_blank(ch)) return;
    int e = ts_expect(s);
    bool value = e == E_VALUE || e == E_VALUE_OR_END;
    char open = s->depth ? (char)s->stack[2 * s->depth - 2] : 0;
    if ((ch == '{' || ch == '[') && value) {
        if (s->depth == TS_DEPTH_MAX) {
            ts_fail(c);
            return;
        }
        ts_value_begin(c, ch);
        if (s->mode != M_JSON) return;
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
        if (s->mode != M_JSON) return;
        ts_sink(c, &ch, 1);
        s->lex = L_STR;
    } else if (value &&
               (ch == '-' || (ch >= '0' && ch <= '9') || ch == 't' || ch == 'f' || ch == 'n')) {
        ts_value_begin(c, 's');
        if (s->mode != M_JSON) return;
        ts_sink(c, &ch, 1);
        buf_reset(&s->scalar);
        if (buf_putc(&s->scalar, ch)) c->rc = ERR_NOMEM;
        s->lex = L_SCALAR;
    } else {
        ts_fail(c);
    }
}

/* Ends a number or literal (the next byte is not part of it). */
static void ts_scalar_end(struct ts *c)
{
    struct api_tool_stream *s = c->s;
    s->lex = L_NONE;
    if (!ts_scalar_ok(s->scalar.data, s->scalar.len))
        ts_fail(c);
    else
        ts_value_end(c, R_PLAIN);
}

static void ts_json_char(struct ts *c, char ch)
{
    struct api_tool_stream *s = c->s;
    switch (s->lex) {
    case L_STR: ts_string_char(c, ch); return;
    case L_ESC:
    case L_HEX: ts_escape(c, ch); return;
    case L_SCALAR:
        if (ts_scalar_char(ch)) {
            if (s->scalar.len == TS_SCALAR_MAX) {
                ts_fail(c);
                return;
            }
            ts_sink(c, &ch, 1);
            if (buf_putc(&s->scalar, ch)) c->rc = ERR_NOMEM;
            return;
        }
        ts_scalar_end(c);
        if (s->mode != M_JSON || c->rc) return;
        ts_structure(c, ch);
        return;
    default: ts_structure(c, ch); return;
    }
}

/* The first non-blank decides whether an anchored form starts; false: wait for more text. */
static bool ts_start(struct api_tool_stream *s, bool final)
{
    const char *t = s->text.data;
    size_t n = s->text.len, b = s->pos;
    while (b < n && api_blank(t[b])) b++;
    s->pos = b;
    if (b == n && !final) return false;
    if (s->forced) {
        bool json = b < n && (t[b] == '{' || t[b] == '[');
        s->form = F_FORCED;
        s->mode = json ? M_JSON : M_DEAD;
        ts_json_reset(s);
        return true;
    }
    static const char *const marks[] = {TS_MISTRAL, TS_PYTHON};
    for (int i = 0; i < 2; i++) {
        size_t k = strlen(marks[i]), have = n - b < k ? n - b : k;
        if (!have || memcmp(t + b, marks[i], have)) continue;
        if (have < k && !final) return false; /* it may still be the marker */
        if (have == k) {
            s->form = F_ANCHORED;
            s->mode = M_BODY;
            s->pos = b + k;
            return true;
        }
    }
    if (b < n && (t[b] == '{' || t[b] == '[')) {
        s->form = F_ANCHORED;
        s->mode = M_JSON;
        ts_json_reset(s);
        return true;
    }
    s->anchors = false;
    s->mode = M_CONTENT;
    s->pos = 0;
    return true;
}

/* Content: looks for "<tool_call>", moving content_upto past what cannot begin one. */
static void ts_content(struct api_tool_stream *s, bool final)
{
    const char *t = s->text.data;
    size_t n = s->text.len;
    const char *at = api_find(t + s->pos, n - s->pos, TS_OPEN);
    size_t upto, tail = 0;
    if (at) {
        upto = (size_t)(at - t);
        s->pos = upto + strlen(TS_OPEN);
        s->form = F_HERMES;
        s->mode = M_BODY;
    } else {
        tail = final ? 0 : api_tag_tail(t + s->pos, n - s->pos, TS_OPEN);
        upto = n - tail;
        s->pos = n - tail;
    }
    if (at || !final)
        while (upto > 0 && api_blank(t[upto - 1])) upto--;
    if (upto > s->content_upto) s->content_upto = upto;
}

/* Scans everything fed so far; with `final`, to the end of the answer. */
static void ts_run(struct ts *c, bool final)
{
    struct api_tool_stream *s = c->s;
    while (!c->rc) {
        const char *t = s->text.data;
        size_t n = s->text.len;
        switch (s->mode) {
        case M_START:
            if (!ts_start(s, final)) return;
            break;
        case M_CONTENT:
            ts_content(s, final);
            if (s->mode == M_CONTENT) return;
            break;
        case M_DEAD:
            s->content_upto = n;
            s->pos = n;
            return;
        case M_DROP: s->pos = n; return;
        case M_SKIP: {
            const char *at = api_find(t + s->pos, n - s->pos, TS_OPEN);
            if (!at) {
                s->pos = n - api_tag_tail(t + s->pos, n - s->pos, TS_OPEN);
                return;
            }
            s->pos = (size_t)(at - t) + strlen(TS_OPEN);
            s->mode = M_BODY;
            break;
        }
        case M_BODY:
            while (s->pos < n && api_blank(t[s->pos])) s->pos++;
            if (s->pos == n) {
                if (!final) return;
                if (s->n_calls) {
                    s->mode = M_DROP;
                    return;
                }
                ts_fail(c); /* a marker and nothing after it */
                break;
            }
            ts_json_reset(s);
            if (t[s->pos] == '{' || t[s->pos] == '[')
                s->mode = M_JSON;
            else
                ts_fail(c);
            break;
        case M_JSON:
            while (s->mode == M_JSON && s->pos < n && !c->rc) ts_json_char(c, t[s->pos++]);
            if (s->mode != M_JSON || c->rc) break;
            if (!final) return;
            /* The answer ends inside the value: committed calls keep what they have. */
            if (s->n_calls) {
                ts_flush(c, true);
                s->committed = false;
                s->mode = M_DROP;
            } else {
                ts_fail(c);
            }
            break;
        }
    }
}

void api_tool_stream_init(struct api_tool_stream *s, bool forced)
{
    memset(s, 0, sizeof(*s));
    s->forced = forced;
    s->anchors = !forced;
    s->mode = M_START;
    buf_init(&s->text, 0); /* model output, bounded by the request's max_tokens */
    buf_init(&s->scalar, 0);
    buf_init(&s->key, 0);
    buf_init(&s->name, 0);
    buf_init(&s->args, 0);
}

void api_tool_stream_fini(struct api_tool_stream *s)
{
    buf_fini(&s->text);
    buf_fini(&s->scalar);
    buf_fini(&s->key);
    buf_fini(&s->name);
    buf_fini(&s->args);
    free(s->stack);
    s->stack = NULL;
    s->cap = s->depth = 0;
}

int api_tool_stream_feed(struct api_tool_stream *s, const char *text, size_t len, bool final,
                         api_tool_stream_fn fn, void *ud)
{
    struct ts c = {.s = s, .fn = fn, .ud = ud};
    if (!s->text.data) { /* storage from the start: the scan indexes text.data */
        if (buf_putc(&s->text, 0)) return ERR_NOMEM;
        buf_reset(&s->text);
    }
    if (len && buf_append(&s->text, text, len)) return ERR_NOMEM;
    ts_run(&c, final);
    if (!c.rc) ts_flush(&c, final);
    return c.rc;
}
