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
#include "engine/api/api_tool_scan.h"

#include "common/err.h"
#include "common/utf8.h"

#include <stdlib.h>
#include <string.h>

#define TS_OPEN    "<tool_call>"
#define TS_MISTRAL "[TOOL_CALLS]"
#define TS_PYTHON  "<|python_tag|>"

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

static void ts_emit(struct api_tool_scan *c, enum api_tool_ev ev, int call, const char *p, size_t n)
{
    if (!c->rc) c->rc = c->fn(c->ud, ev, call, p, n);
}

/* Sends what is certain: content up to content_upto (all of it once a call exists or at the
 * end), the current committed call's arguments (all of them when `all`). */
void api_tool_stream_flush(struct api_tool_scan *c, bool all)
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

/* The text broke the form at s->pos (or ended). */
void api_tool_stream_fail(struct api_tool_scan *c)
{
    struct api_tool_stream *s = c->s;
    if (!s->n_calls) {
        if (s->form == API_TOOL_F_ANCHORED && s->anchors) {
            /* scan it all again as Hermes content */
            s->anchors = false;
            s->mode = API_TOOL_M_CONTENT;
            s->pos = 0;
            s->content_upto = 0;
        } else {
            s->mode = API_TOOL_M_DEAD;
        }
        api_tool_json_reset(s);
        return;
    }
    api_tool_stream_flush(c, true);
    s->committed = false; /* the call being read ends here */
    s->mode = s->form == API_TOOL_F_HERMES ? API_TOOL_M_SKIP : API_TOOL_M_DROP;
}

void api_tool_stream_commit(struct api_tool_scan *c)
{
    struct api_tool_stream *s = c->s;
    api_tool_stream_flush(c, true); /* the content before the first call, whole */
    ts_emit(c, API_TOOL_EV_CALL, s->n_calls, s->name.data, s->name.len);
    s->n_calls++;
    s->committed = true;
    s->calls_in_value++;
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
        s->form = API_TOOL_F_FORCED;
        s->mode = json ? API_TOOL_M_JSON : API_TOOL_M_DEAD;
        api_tool_json_reset(s);
        return true;
    }
    static const char *const marks[] = {TS_MISTRAL, TS_PYTHON};
    for (int i = 0; i < 2; i++) {
        size_t k = strlen(marks[i]), have = n - b < k ? n - b : k;
        if (!have || memcmp(t + b, marks[i], have)) continue;
        if (have < k && !final) return false; /* it may still be the marker */
        if (have == k) {
            s->form = API_TOOL_F_ANCHORED;
            s->mode = API_TOOL_M_BODY;
            s->pos = b + k;
            return true;
        }
    }
    if (b < n && (t[b] == '{' || t[b] == '[')) {
        s->form = API_TOOL_F_ANCHORED;
        s->mode = API_TOOL_M_JSON;
        api_tool_json_reset(s);
        return true;
    }
    s->anchors = false;
    s->mode = API_TOOL_M_CONTENT;
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
        s->form = API_TOOL_F_HERMES;
        s->mode = API_TOOL_M_BODY;
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
static void ts_run(struct api_tool_scan *c, bool final)
{
    struct api_tool_stream *s = c->s;
    while (!c->rc) {
        const char *t = s->text.data;
        size_t n = s->text.len;
        switch (s->mode) {
        case API_TOOL_M_START:
            if (!ts_start(s, final)) return;
            break;
        case API_TOOL_M_CONTENT:
            ts_content(s, final);
            if (s->mode == API_TOOL_M_CONTENT) return;
            break;
        case API_TOOL_M_DEAD:
            s->content_upto = n;
            s->pos = n;
            return;
        case API_TOOL_M_DROP: s->pos = n; return;
        case API_TOOL_M_SKIP: {
            const char *at = api_find(t + s->pos, n - s->pos, TS_OPEN);
            if (!at) {
                s->pos = n - api_tag_tail(t + s->pos, n - s->pos, TS_OPEN);
                return;
            }
            s->pos = (size_t)(at - t) + strlen(TS_OPEN);
            s->mode = API_TOOL_M_BODY;
            break;
        }
        case API_TOOL_M_BODY:
            while (s->pos < n && api_blank(t[s->pos])) s->pos++;
            if (s->pos == n) {
                if (!final) return;
                if (s->n_calls) {
                    s->mode = API_TOOL_M_DROP;
                    return;
                }
                api_tool_stream_fail(c); /* a marker and nothing after it */
                break;
            }
            api_tool_json_reset(s);
            if (t[s->pos] == '{' || t[s->pos] == '[')
                s->mode = API_TOOL_M_JSON;
            else
                api_tool_stream_fail(c);
            break;
        case API_TOOL_M_JSON:
            while (s->mode == API_TOOL_M_JSON && s->pos < n && !c->rc)
                api_tool_json_char(c, t[s->pos++]);
            if (s->mode != API_TOOL_M_JSON || c->rc) break;
            if (!final) return;
            /* The answer ends inside the value: committed calls keep what they have. */
            if (s->n_calls) {
                api_tool_stream_flush(c, true);
                s->committed = false;
                s->mode = API_TOOL_M_DROP;
            } else {
                api_tool_stream_fail(c);
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
    s->mode = API_TOOL_M_START;
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
    struct api_tool_scan c = {.s = s, .fn = fn, .ud = ud};
    if (!s->text.data) { /* storage from the start: the scan indexes text.data */
        if (buf_putc(&s->text, 0)) return ERR_NOMEM;
        buf_reset(&s->text);
    }
    if (len && buf_append(&s->text, text, len)) return ERR_NOMEM;
    ts_run(&c, final);
    if (!c.rc) api_tool_stream_flush(&c, final);
    return c.rc;
}
