/* Events -> OpenAI responses on the client's stream, on the responder thread. Per request it keeps
 * what the format needs (role chunk sent, characters sent, usage, the non-streaming accumulation,
 * echo's prompt text and logprobs, best_of's candidate scores) and a pending buffer for output the
 * socket queue had no room for. Sequence c of a request is output choice c except under
 * best_of > n (never streamed), where each prompt's best candidates are picked at the end. */
#include "engine/serve/serve_respond.h"

#include "common/clock.h"
#include "common/err.h"
#include "common/http_server.h"
#include "common/log.h"
#include "engine/serve/serve_error.h"
#include "engine/serve/serve_req.h"
#include "engine/text/tokenizer.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RESPOND_PENDING_MAX (8u << 20) /* unsent bytes per request before the client is dropped */
#define RESPOND_RETRY_MS    5          /* backlog retry period */

struct serve_respond {
    const struct tokenizer *tok;
    const char *model;

    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct serve_req_list ready; /* posted, each holding a reference */
    bool stopping;
    atomic_int pending;              /* adopted, not yet answered */
    struct serve_req_hook post_hook; /* every adopted request's on_post */

    /* Responder thread only. */
    struct serve_req_list backlog; /* answered partially: output waiting for socket room */
    struct serve_req_list adopted; /* every request not yet answered (for the final abort) */
};

/* A non-streaming choice being assembled. Logprob alternatives are stored flat in `top`; lp[i].top
 * is set from top_at[i] only when the response is rendered (the array moves).
 * Chat with tools lists only the content's tokens (OpenAI's logprobs.content: "message content
 * tokens"; a call's tokens are none), so each entry also records where its text starts in the
 * content (text_at): a token's text is what its event released, and a token whose event released
 * none (held back: part of a character, a possible stop string or tag) counts with the next text
 * released. Tokens of the reasoning section stay listed (ACC_AT_REASONING), as without tools; a
 * token still waiting for text when a reasoning token comes is reasoning too. An entry is content
 * when its text starts before the content's end (api_tool_calls_parse's content_len), or when the
 * answer has no call (then all of it is content). Positions never decrease and reasoning comes
 * first, so the listed entries are always a prefix: streamed (as the content is released) and
 * whole, the same one. */
#define ACC_AT_PENDING   SIZE_MAX       /* no text released for the token yet */
#define ACC_AT_REASONING (SIZE_MAX - 1) /* a token of the reasoning section */
struct respond_acc {
    struct buf text;
    struct api_token_logprob *lp;
    size_t *top_at;
    size_t *text_at; /* (n_lp): where each entry's text starts in the content, or ACC_AT_* */
    size_t n_lp, cap_lp;
    size_t n_placed; /* entries [n_placed, n_lp) are ACC_AT_PENDING */
    struct api_top_logprob *top;
    size_t n_top, cap_top;
    enum api_finish finish;
};

struct respond_choice {
    struct respond_acc acc;       /* non-streaming accumulation (with reasoning: the content);
                                     streaming echo: the prompt's chunk */
    struct api_reasoning split;   /* spec.reasoning: <think> block -> reasoning */
    struct buf reasoning;         /* the reasoning so far (whole answers) */
    struct api_tool_stream tools; /* chat streaming with tools: the answer's calls as they come */
    long reasoning_tokens;
    size_t fed;         /* chat streaming with tools: content bytes fed to the scanner */
    size_t content_out; /* ... and those it released as content */
    size_t lp_sent;     /* ... and the logprob entries (of acc) sent */
    bool role_sent;     /* chat streaming: opening delta sent */
    bool echo_pending;  /* streaming echo: the prompt's chunk is still to be sent */
    size_t text_chars;  /* completions streaming: characters sent */
    long generated;     /* tokens so far (continuous usage) */
    long cached;        /* prompt tokens from the prefix cache */
    double cum_logprob; /* best_of: the final event's, over n_sampled tokens */
    int n_sampled;
};

/* A request's state on the responder thread (r->out): created by serve_respond_adopt, freed when
 * the request is finished for the responder (finish_request) or at the final abort. A request is
 * answered when its stream handle is released (stream NULL). */
struct serve_respond_req {
    struct http_stream *stream; /* the client's, owned here */
    bool registered;            /* on the adopted list */
    bool began;                 /* stream headers sent */
    int n_finished;             /* choices whose final event was seen */
    long usage_completion;
    struct buf pending;         /* formatted bytes the client's stream had no room for yet */
    struct respond_choice ch[]; /* (n_choices) */
};

static void respond_req_free(struct serve_req *r)
{
    struct serve_respond_req *o = r->out;
    for (int i = 0; i < r->spec.n_choices; i++) {
        struct respond_acc *a = &o->ch[i].acc;
        buf_fini(&a->text);
        buf_fini(&o->ch[i].reasoning);
        api_tool_stream_fini(&o->ch[i].tools);
        free(a->lp);
        free(a->top_at);
        free(a->text_at);
        free(a->top);
    }
    buf_fini(&o->pending);
    free(o);
    r->out = NULL;
}

/* ---------------------------------------------------------------- answering */

static void meta_of(const struct serve_respond *p, const struct serve_req *r,
                    struct api_response_meta *m)
{
    *m = (struct api_response_meta){
        .kind = r->spec.kind,
        .id = r->spec.id,
        .model = p->model,
        .created = r->spec.created,
        .include_usage = r->spec.include_usage,
        .logprobs = r->spec.logprobs,
    };
}

/* The output index of sequence c when every sequence is returned (best_of == n): OpenAI's
 * prompt * n + candidate, which is c itself. */
static int out_index(const struct serve_req *r, int c)
{
    return c / r->spec.best_of * r->spec.n + c % r->spec.best_of;
}

static const struct serve_req_prompt *prompt_of(const struct serve_req *r, int c)
{
    return &r->spec.prompts[c / r->spec.best_of];
}

static bool answered(const struct serve_req *r)
{
    return r->out->stream == NULL;
}

/* After the whole answer (the stream released): the responder's state and reference go. */
static void finish_request(struct serve_respond *p, struct serve_req *r)
{
    serve_req_list_remove(&p->backlog, r);
    serve_req_list_remove(&p->adopted, r);
    respond_req_free(r);
    atomic_fetch_sub(&p->pending, 1);
    serve_req_unref(r);
}

/* The client is gone (or unanswerable): give up the stream; the request is finished for us once
 * the loop has ended its sequences, which it does once cancelled. */
static void abandon(struct serve_respond *p, struct serve_req *r)
{
    if (r->out->stream) http_stream_abort(r->out->stream);
    r->out->stream = NULL;
    buf_reset(&r->out->pending);
    serve_req_cancel(r);
}

/* Answers the whole request with `e` (borrowed) and releases the stream. */
static void respond_error(struct serve_req *r, const struct api_error *e)
{
    serve_error_respond_stream(r->out->stream, e);
    r->out->stream = NULL;
}

/* Why a failed request (serve_req_fail, or an engine abort) gets no normal answer. */
static void failure_error(const struct serve_req *r, struct api_error *e)
{
    enum serve_fail why = serve_req_failure(r);
    serve_error_set(e, why == SERVE_FAIL_NONE ? SERVE_FAIL_INTERNAL : why);
}

/* Appends one SSE event for `j` (consumed) to the pending output. */
static int sse_add(struct serve_req *r, json_t *j)
{
    if (!j) return ERR_NOMEM;
    int rc = api_response_sse(j, &r->out->pending);
    json_decref(j);
    return rc;
}

static void logprob_entry(const struct serve_respond *p, const struct serve_event *e,
                          struct api_token_logprob *lp, struct api_top_logprob *top)
{
    size_t len = 0;
    const char *t = p->tok ? tokenizer_token_piece(p->tok, e->token, false, &len) : NULL;
    for (int i = 0; i < e->n_top; i++) {
        size_t l = 0;
        const char *tt = p->tok ? tokenizer_token_piece(p->tok, e->top[i].token, false, &l) : NULL;
        top[i] = (struct api_top_logprob){tt ? tt : "", tt ? l : 0, e->top[i].logprob};
    }
    *lp = (struct api_token_logprob){.text = t ? t : "",
                                     .len = t ? len : 0,
                                     .logprob = e->logprob,
                                     .n_top = e->n_top,
                                     .top = top};
}

static enum api_finish api_finish_of(enum sched_finish f)
{
    return f == SCHED_FINISH_STOP ? API_FINISH_STOP : API_FINISH_LENGTH;
}

/* Room for one more logprob entry with n_top alternatives in `a`. 0 or ERR_NOMEM. */
static int acc_reserve(struct respond_acc *a, int n_top)
{
    if (a->n_lp == a->cap_lp) {
        size_t cap = a->cap_lp ? a->cap_lp * 2 : 16;
        struct api_token_logprob *g = realloc(a->lp, cap * sizeof(*g));
        if (!g) return ERR_NOMEM;
        a->lp = g;
        size_t *ga = realloc(a->top_at, cap * sizeof(*ga));
        if (!ga) return ERR_NOMEM;
        a->top_at = ga;
        size_t *gt = realloc(a->text_at, cap * sizeof(*gt));
        if (!gt) return ERR_NOMEM;
        a->text_at = gt;
        a->cap_lp = cap;
    }
    if (a->n_top + (size_t)n_top > a->cap_top) {
        size_t cap = a->cap_top ? a->cap_top * 2 : 64;
        while (cap < a->n_top + (size_t)n_top) cap *= 2;
        struct api_top_logprob *g = realloc(a->top, cap * sizeof(*g));
        if (!g) return ERR_NOMEM;
        a->top = g;
        a->cap_top = cap;
    }
    return 0;
}

/* Appends the logprob entry of event e (a generated or a prompt token) to `a`. */
static int acc_push_logprob(const struct serve_respond *p, struct respond_acc *a,
                            const struct serve_event *e)
{
    int rc = acc_reserve(a, e->n_top);
    if (rc) return rc;
    a->top_at[a->n_lp] = a->n_top;
    a->text_at[a->n_lp] = ACC_AT_PENDING;
    logprob_entry(p, e, &a->lp[a->n_lp], a->top + a->n_top);
    a->n_top += (size_t)e->n_top;
    a->n_lp++;
    return 0;
}

/* The entries still waiting for text get position `at` (a content offset or ACC_AT_REASONING). */
static void acc_place(struct respond_acc *a, size_t at)
{
    for (; a->n_placed < a->n_lp; a->n_placed++) a->text_at[a->n_placed] = at;
}

/* After an event whose token (if it has one, pushed already) is reasoning (`reasoning`) or
 * whose content text began at content offset `at` and ran `len` bytes, `ends` when it was the
 * choice's last: places what the event decided (respond_acc's rules). */
static void acc_place_event(struct respond_acc *a, bool reasoning, size_t at, size_t len, bool ends)
{
    if (reasoning)
        acc_place(a, ACC_AT_REASONING);
    else if (len)
        acc_place(a, at);
    if (ends) acc_place(a, at + len);
}

/* How many entries, from the first, are listed for an answer whose content is content_len bytes
 * (calls: it made tool calls; without, every entry is). */
static size_t acc_listed(const struct respond_acc *a, bool calls, size_t content_len)
{
    if (!calls) return a->n_lp;
    size_t k = 0;
    while (k < a->n_lp && (a->text_at[k] == ACC_AT_REASONING || a->text_at[k] < content_len)) k++;
    return k;
}

/* The entries' alternatives live in one array that grows: point entries [from, to) at their own
 * before rendering them. */
static void acc_fix_tops_range(struct respond_acc *a, size_t from, size_t to)
{
    for (size_t k = from; k < to; k++) a->lp[k].top = a->top + a->top_at[k];
}

static void acc_fix_tops(struct respond_acc *a)
{
    acc_fix_tops_range(a, 0, a->n_lp);
}

/* Echo: the answer of choice c starts with its prompt's text and, with logprobs, the first
 * prompt token (unscored: nothing precedes it); the prompt events add the others. */
static int acc_start_echo(const struct serve_respond *p, struct serve_req *r, int c)
{
    const struct serve_req_prompt *pr = prompt_of(r, c);
    struct respond_choice *ch = &r->out->ch[c];
    int rc = pr->echo_len ? buf_append(&ch->acc.text, pr->echo, pr->echo_len) : 0;
    if (rc || !r->spec.logprobs) return rc;
    struct serve_event first = {.token = pr->ids[0]};
    if ((rc = acc_push_logprob(p, &ch->acc, &first)) != 0) return rc;
    ch->acc.lp[ch->acc.n_lp - 1].unscored = true;
    return 0;
}

static void acc_reset(struct respond_acc *a)
{
    buf_reset(&a->text);
    a->n_lp = a->n_top = a->n_placed = 0;
}

/* Characters (UTF-8 lead bytes) in p[0..len). */
static size_t chars_of(const char *p, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++) n += ((unsigned char)p[i] & 0xC0) != 0x80;
    return n;
}

/* Continuous usage of choice c with `completion` tokens. */
static void choice_usage(const struct serve_req *r, int c, long completion, struct api_usage *u)
{
    *u = (struct api_usage){.prompt_tokens = prompt_of(r, c)->n_ids,
                            .completion_tokens = completion,
                            .cached_tokens = r->out->ch[c].cached};
}

/* Streaming echo: the prompt's chunk of choice c (its text and, with logprobs, its tokens'). */
static int stream_echo(const struct serve_respond *p, struct serve_req *r, int c)
{
    struct respond_choice *ch = &r->out->ch[c];
    struct api_response_meta m;
    meta_of(p, r, &m);
    acc_fix_tops(&ch->acc);
    struct api_usage u;
    choice_usage(r, c, 0, &u);
    struct api_choice out = {
        .index = out_index(r, c),
        .text = ch->acc.text.data ? ch->acc.text.data : "",
        .len = ch->acc.text.len,
        .logprobs = ch->acc.n_lp ? ch->acc.lp : NULL,
        .n_logprobs = ch->acc.n_lp,
        .usage = r->spec.continuous_usage ? &u : NULL,
    };
    int rc = sse_add(r, api_response_chunk(&m, &out, false));
    ch->text_chars = chars_of(ch->acc.text.data ? ch->acc.text.data : "", ch->acc.text.len);
    ch->echo_pending = false;
    acc_reset(&ch->acc);
    return rc;
}

static int acc_event(const struct serve_respond *p, struct serve_req *r,
                     const struct serve_event *e);

/* spec.reasoning: splits the event's text into reasoning and content (appended to the two
 * buffers), counting its token as reasoning when it falls in the block (then *in_block). */
static int split_event(struct serve_req *r, const struct serve_event *e, struct buf *reasoning,
                       struct buf *content, bool *in_block)
{
    struct respond_choice *ch = &r->out->ch[e->choice];
    enum api_reasoning_state before = ch->split.state;
    bool ends = e->finish == SCHED_FINISH_STOP || e->finish == SCHED_FINISH_LENGTH;
    int rc =
        api_reasoning_feed(&ch->split, e->text ? e->text : "", e->len, ends, reasoning, content);
    enum api_reasoning_state after = ch->split.state;
    *in_block = e->has_token && (before == API_REASONING_INSIDE || after == API_REASONING_INSIDE ||
                                 (before == API_REASONING_START && after == API_REASONING_AFTER));
    if (*in_block) ch->reasoning_tokens++;
    return rc;
}

static bool tools_forced(const struct serve_req *r)
{
    return r->spec.tools == API_TOOL_REQUIRED || r->spec.tools == API_TOOL_NAMED;
}

/* The id_base of choice i's calls: the response id's hex and the choice. */
static void tool_id_base(const struct serve_req *r, int i, char *base, size_t n)
{
    snprintf(base, n, "%s_%d", r->spec.id + (strncmp(r->spec.id, "chatcmpl-", 9) ? 0 : 9), i);
}

/* The tool calls in choice i's accumulated text (serve_req_spec.tools): 1 with *calls new and
 * *content_len set, 0 when it holds none, ERR_NOMEM. An answer cut off by max_tokens keeps the
 * calls it began, as the stream sent them. */
static int choice_tool_calls(const struct serve_req *r, int i, json_t **calls, size_t *content_len)
{
    const struct respond_acc *a = &r->out->ch[i].acc;
    if (r->spec.tools == API_TOOL_NONE) return 0;
    char base[64];
    tool_id_base(r, i, base, sizeof(base));
    return api_tool_calls_parse(a->text.data ? a->text.data : "", a->text.len, tools_forced(r),
                                base, calls, content_len);
}

/* "tool_calls" when the answer made calls and ended by itself; its own finish otherwise. */
static enum api_finish tool_finish(bool calls, enum api_finish f)
{
    return calls && f == API_FINISH_STOP ? API_FINISH_TOOL_CALLS : f;
}

/* One choice's scanner events -> chunks (api_tool_stream_fn). */
struct tool_emit {
    struct serve_req *r;
    int c;
    struct api_response_meta m;
    const struct api_usage *usage;
};

/* Streaming with tools and logprobs: the entries of choice ch that may go out now (reasoning
 * ones, and those whose text starts in the content released so far; with `all`, the rest too),
 * made ready to render and counted as sent. Writes the first to *lp (NULL when none). */
static size_t tool_lp_take(struct respond_choice *ch, bool all, const struct api_token_logprob **lp)
{
    struct respond_acc *a = &ch->acc;
    size_t from = ch->lp_sent, to = all ? a->n_lp : from;
    while (to < a->n_lp && (a->text_at[to] == ACC_AT_REASONING || a->text_at[to] < ch->content_out))
        to++;
    acc_fix_tops_range(a, from, to);
    ch->lp_sent = to;
    *lp = to > from ? a->lp + from : NULL;
    return to - from;
}

static int tool_emit_ev(void *ud, enum api_tool_ev ev, int call, const char *text, size_t len)
{
    struct tool_emit *t = ud;
    struct respond_choice *ch = &t->r->out->ch[t->c];
    int index = out_index(t->r, t->c);
    if (ev == API_TOOL_EV_CONTENT) {
        ch->content_out += len;
        struct api_choice c = {.index = index, .text = text, .len = len, .usage = t->usage};
        c.n_logprobs = tool_lp_take(ch, false, &c.logprobs);
        return sse_add(t->r, api_response_chunk(&t->m, &c, false));
    }
    char base[64], id[96];
    struct api_tool_delta d = {.call = call, .text = text, .len = len};
    if (ev == API_TOOL_EV_CALL) {
        tool_id_base(t->r, t->c, base, sizeof(base));
        api_tool_call_id(id, sizeof(id), base, call);
        d.id = id;
    }
    return sse_add(t->r, api_response_tool_delta(&t->m, index, &d));
}

/* Streaming chat with tools: reasoning as it comes, the answer through the choice's tool-call
 * scanner (content deltas until a call begins, then delta.tool_calls: the call's id and name,
 * then its arguments fragment by fragment), then the finish. With logprobs, each chunk lists the
 * tokens (respond_acc's rules) whose text it is the first to carry: reasoning chunks their
 * reasoning tokens, content chunks the content's tokens as the scanner releases the content, tool
 * call chunks none (null); an answer without calls lists its last tokens (whose text never came,
 * say an end-of-generation token) in a chunk of their own before the finish, as without tools. */
static int stream_tool_event(const struct serve_respond *p, struct serve_req *r,
                             const struct serve_event *e)
{
    struct respond_choice *ch = &r->out->ch[e->choice];
    struct tool_emit t = {.r = r, .c = e->choice};
    meta_of(p, r, &t.m);
    bool ends = e->finish == SCHED_FINISH_STOP || e->finish == SCHED_FINISH_LENGTH;
    struct api_usage u;
    choice_usage(r, e->choice, ch->generated, &u);
    t.usage = r->spec.continuous_usage ? &u : NULL;
    int index = out_index(r, e->choice), rc = 0;
    struct buf rs, cs; /* reasoning / content of this event */
    buf_init(&rs, 0);
    buf_init(&cs, 0);
    const char *text = e->text ? e->text : "";
    size_t len = e->len;
    bool in_block = false;
    if (r->spec.reasoning) {
        if ((rc = split_event(r, e, &rs, &cs, &in_block))) goto out;
        text = buf_cstr(&cs);
        len = cs.len;
    }
    if (r->spec.logprobs) {
        if (e->has_token && (rc = acc_push_logprob(p, &ch->acc, e))) goto out;
        acc_place_event(&ch->acc, in_block, ch->fed, len, ends);
    }
    ch->fed += len;
    if (!ch->role_sent) {
        ch->role_sent = true;
        struct api_usage u0;
        choice_usage(r, e->choice, 0, &u0);
        struct api_choice role = {.index = index, .usage = t.usage ? &u0 : NULL};
        if ((rc = sse_add(r, api_response_chunk(&t.m, &role, true)))) goto out;
    }
    const struct api_token_logprob *lp = NULL;
    size_t n_lp = r->spec.logprobs ? tool_lp_take(ch, false, &lp) : 0;
    if (rs.len || n_lp) { /* the reasoning, or reasoning tokens whose text is held back */
        struct api_choice c = {.index = index,
                               .reasoning = buf_cstr(&rs),
                               .reasoning_len = rs.len,
                               .logprobs = lp,
                               .n_logprobs = n_lp,
                               .usage = t.usage};
        if ((rc = sse_add(r, api_response_chunk(&t.m, &c, false)))) goto out;
    }
    if ((len || ends) && (rc = api_tool_stream_feed(&ch->tools, text, len, ends, tool_emit_ev, &t)))
        goto out;
    if (ends && r->spec.logprobs && !ch->tools.n_calls && (n_lp = tool_lp_take(ch, true, &lp))) {
        struct api_choice c = {
            .index = index, .logprobs = lp, .n_logprobs = n_lp, .usage = t.usage};
        if ((rc = sse_add(r, api_response_chunk(&t.m, &c, false)))) goto out;
    }
    if (ends) {
        struct api_choice fin = {.index = index,
                                 .finish =
                                     tool_finish(ch->tools.n_calls > 0, api_finish_of(e->finish)),
                                 .usage = t.usage};
        rc = sse_add(r, api_response_chunk(&t.m, &fin, false));
    }
out:
    buf_fini(&rs);
    buf_fini(&cs);
    return rc;
}

/* Streaming: formats one event into SSE chunks. */
static int stream_event(const struct serve_respond *p, struct serve_req *r,
                        const struct serve_event *e)
{
    struct respond_choice *ch = &r->out->ch[e->choice];
    if (e->prompt_token) return r->spec.logprobs ? acc_push_logprob(p, &ch->acc, e) : 0;
    int rc = ch->echo_pending ? stream_echo(p, r, e->choice) : 0;
    if (rc) return rc;
    if (r->spec.tools != API_TOOL_NONE && r->spec.kind == API_KIND_CHAT)
        return stream_tool_event(p, r, e);
    struct api_response_meta m;
    meta_of(p, r, &m);
    bool want_lp = r->spec.logprobs && e->has_token;
    struct api_top_logprob top[SAMPLER_MAX_LOGPROBS];
    struct api_token_logprob lp;
    if (want_lp) logprob_entry(p, e, &lp, top);
    bool ends = e->finish == SCHED_FINISH_STOP || e->finish == SCHED_FINISH_LENGTH;
    struct api_usage u;
    choice_usage(r, e->choice, ch->generated, &u);
    const struct api_usage *usage = r->spec.continuous_usage ? &u : NULL;
    int index = out_index(r, e->choice);
    struct api_choice c = {
        .index = index,
        .text = e->text,
        .len = e->len,
        .logprobs = want_lp ? &lp : NULL,
        .n_logprobs = want_lp ? 1 : 0,
        .text_offset = ch->text_chars,
        .usage = usage,
    };
    struct buf rs, cs; /* reasoning / content of this event */
    buf_init(&rs, 0);
    buf_init(&cs, 0);
    bool in_block;
    if (r->spec.reasoning) {
        if ((rc = split_event(r, e, &rs, &cs, &in_block))) goto out;
        c.text = cs.data;
        c.len = cs.len;
        c.reasoning = buf_cstr(&rs);
        c.reasoning_len = rs.len;
    }
    if (r->spec.kind == API_KIND_CHAT) {
        if (!ch->role_sent) {
            ch->role_sent = true;
            struct api_usage u0;
            choice_usage(r, e->choice, 0, &u0);
            struct api_choice role = {.index = index, .usage = usage ? &u0 : NULL};
            rc = sse_add(r, api_response_chunk(&m, &role, true));
        }
        if (!rc && (c.len || c.reasoning_len || want_lp))
            rc = sse_add(r, api_response_chunk(&m, &c, false));
        if (!rc && ends) {
            struct api_choice fin = {
                .index = index, .finish = api_finish_of(e->finish), .usage = usage};
            rc = sse_add(r, api_response_chunk(&m, &fin, false));
        }
    } else if (e->len || want_lp || ends) {
        c.finish = ends ? api_finish_of(e->finish) : API_FINISH_NONE;
        rc = sse_add(r, api_response_chunk(&m, &c, false));
    }
    ch->text_chars += chars_of(e->text ? e->text : "", e->len);
out:
    buf_fini(&rs);
    buf_fini(&cs);
    return rc;
}

/* Non-streaming: accumulates one event. */
static int acc_event(const struct serve_respond *p, struct serve_req *r,
                     const struct serve_event *e)
{
    struct respond_acc *a = &r->out->ch[e->choice].acc;
    size_t at = a->text.len;
    bool in_block = false,
         ends = e->finish == SCHED_FINISH_STOP || e->finish == SCHED_FINISH_LENGTH;
    int rc = r->spec.reasoning
                 ? split_event(r, e, &r->out->ch[e->choice].reasoning, &a->text, &in_block)
             : e->len ? buf_append(&a->text, e->text, e->len)
                      : 0;
    if (rc) return rc;
    if (ends) a->finish = api_finish_of(e->finish);
    if (!r->spec.logprobs) return 0;
    if ((e->has_token || e->prompt_token) && (rc = acc_push_logprob(p, a, e))) return rc;
    acc_place_event(a, in_block, at, a->text.len - at, ends);
    return 0;
}

static void usage_of(const struct serve_req *r, struct api_usage *u)
{
    long cached = 0; /* each prompt's, as its first candidate saw it */
    for (int i = 0; i < r->spec.n_prompts; i++) cached += r->out->ch[i * r->spec.best_of].cached;
    *u = (struct api_usage){.prompt_tokens = r->spec.n_prompt_tokens,
                            .completion_tokens = r->out->usage_completion,
                            .cached_tokens = cached,
                            .has_reasoning = r->spec.reasoning};
    for (int i = 0; i < r->spec.n_choices; i++)
        u->reasoning_tokens += r->out->ch[i].reasoning_tokens;
}

/* best_of's score of sequence c: the mean logprob of its sampled tokens (OpenAI: "the highest log
 * probability per token"); 0 for a sequence that sampled none. */
static double choice_score(const struct serve_req *r, int c)
{
    const struct respond_choice *ch = &r->out->ch[c];
    return ch->n_sampled ? ch->cum_logprob / ch->n_sampled : 0.0;
}

/* The sequences answering prompt i, best first under best_of > n (ties: the lower candidate),
 * in candidate order otherwise: the first n go out as choices i * n + rank. */
static void rank_candidates(const struct serve_req *r, int i, int *order)
{
    int b = r->spec.best_of;
    for (int j = 0; j < b; j++) order[j] = i * b + j;
    if (b == r->spec.n) return;
    for (int j = 1; j < b; j++) { /* insertion sort: stable, at most 20 candidates */
        int c = order[j], k = j;
        double sc = choice_score(r, c);
        while (k > 0 && choice_score(r, order[k - 1]) < sc) {
            order[k] = order[k - 1];
            k--;
        }
        order[k] = c;
    }
}

static void answer_whole(struct serve_respond *p, struct serve_req *r)
{
    struct api_response_meta m;
    meta_of(p, r, &m);
    size_t n_out = (size_t)r->spec.n_prompts * (size_t)r->spec.n;
    struct api_choice *ch = calloc(n_out, sizeof(*ch));
    json_t *j = NULL, **calls = calloc(n_out, sizeof(*calls));
    bool nomem = !calls;
    if (ch && calls) {
        int order[API_MAX_BEST_OF];
        for (int i = 0; i < r->spec.n_prompts; i++) {
            rank_candidates(r, i, order);
            for (int k = 0; k < r->spec.n; k++) {
                int c = order[k], at = i * r->spec.n + k;
                struct respond_choice *rc_ch = &r->out->ch[c];
                struct respond_acc *a = &rc_ch->acc;
                acc_fix_tops(a);
                size_t len = a->text.len;
                if (choice_tool_calls(r, c, &calls[at], &len) < 0) nomem = true;
                size_t n_lp = acc_listed(a, calls[at] != NULL, len);
                ch[at] = (struct api_choice){
                    .index = at,
                    .text = a->text.data ? a->text.data : "",
                    .len = len,
                    .finish = tool_finish(calls[at] != NULL, a->finish),
                    .logprobs = n_lp ? a->lp : NULL,
                    .n_logprobs = n_lp,
                    .tool_calls = calls[at],
                    .reasoning = r->spec.reasoning ? buf_cstr(&rc_ch->reasoning) : NULL,
                    .reasoning_len = rc_ch->reasoning.len,
                };
            }
        }
        struct api_usage u;
        usage_of(r, &u);
        if (!nomem) j = api_response_json(&m, ch, n_out, &u);
    }
    for (size_t i = 0; calls && i < n_out; i++) json_decref(calls[i]);
    free(calls);
    free(ch);
    char *body = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!body) {
        struct api_error e;
        api_error_set(&e, API_ERR_INTERNAL, NULL, "out of memory formatting the response");
        respond_error(r, &e);
        return;
    }
    (void)http_stream_respond(r->out->stream, 200, "application/json", body, strlen(body), NULL, 0);
    r->out->stream = NULL;
    free(body);
}

/* Writes pending output; false when the client is gone. */
static bool flush_pending(struct serve_respond *p, struct serve_req *r)
{
    if (!r->out->pending.len) return true;
    if (!r->out->began) {
        int rc = http_stream_begin(r->out->stream, 200, "text/event-stream", NULL, 0);
        if (rc) {
            abandon(p, r);
            return false;
        }
        r->out->began = true;
    }
    int rc = http_stream_write(r->out->stream, r->out->pending.data, r->out->pending.len, 0);
    if (rc == 0) {
        buf_reset(&r->out->pending);
        return true;
    }
    if (rc == ERR_AGAIN && r->out->pending.len <= RESPOND_PENDING_MAX) return true;
    if (rc == ERR_AGAIN || rc == ERR_TOO_BIG)
        log_warn("client is not reading its stream; cancelling the request",
                 LOG_S("id", r->spec.id), LOG_I("unsent_bytes", (long long)r->out->pending.len));
    abandon(p, r);
    return false;
}

/* Handles everything queued for r. */
static void process(struct serve_respond *p, struct serve_req *r)
{
    struct serve_event *ev;
    size_t n;
    serve_req_take(r, &ev, &n);
    if (!r->out) { /* finished for us (failed): what the loop still sends has nowhere to go */
        serve_req_events_free(ev, n);
        return;
    }
    if (!r->out->registered) {
        r->out->registered = true;
        if (serve_req_list_push(&p->adopted, r) != 0)
            serve_req_fail(r, SERVE_FAIL_INTERNAL); /* cannot track it: answer 500 now */
    }
    bool engine_error = false;
    for (size_t i = 0; i < n; i++) {
        const struct serve_event *e = &ev[i];
        struct respond_choice *ch = &r->out->ch[e->choice];
        if (e->has_token) r->out->usage_completion++, ch->generated++;
        if (e->n_cached > ch->cached) ch->cached = e->n_cached;
        if (e->finish != SCHED_FINISH_NONE) {
            r->out->n_finished++;
            ch->cum_logprob = e->cum_logprob;
            ch->n_sampled = e->n_sampled;
        }
        if (e->finish == SCHED_FINISH_ABORT && !serve_req_cancelled(r)) engine_error = true;
        if (answered(r)) continue;
        int rc = r->spec.stream ? stream_event(p, r, e) : acc_event(p, r, e);
        if (rc) {
            log_error("cannot format a response", LOG_S("err", err_str(rc)),
                      LOG_S("id", r->spec.id));
            engine_error = true;
        }
    }
    serve_req_events_free(ev, n);
    bool all_done = r->out->n_finished == r->spec.n_choices;

    bool failed = serve_req_failure(r) != SERVE_FAIL_NONE;
    if (!answered(r) && (engine_error || failed)) {
        /* Nothing more can be produced correctly for this request: an HTTP error while nothing
         * was sent, else (a stream under way) one SSE error event and the end of the stream, as
         * OpenAI-compatible servers do. */
        struct api_error e;
        failure_error(r, &e);
        if (!r->out->began && !r->out->pending.len) {
            respond_error(r, &e);
        } else {
            (void)sse_add(r, api_error_json(&e));
            if (flush_pending(p, r)) {
                (void)http_stream_end(r->out->stream);
                r->out->stream = NULL;
            }
        }
        serve_req_cancel(r);
    }
    if (!answered(r) && all_done && serve_req_cancelled(r)) abandon(p, r);
    if (!answered(r) && all_done) {
        if (r->spec.stream) {
            struct api_response_meta m;
            meta_of(p, r, &m);
            struct api_usage u;
            usage_of(r, &u);
            if (r->spec.include_usage) (void)sse_add(r, api_response_usage_chunk(&m, &u));
            (void)api_response_sse_done(&r->out->pending);
        } else {
            answer_whole(p, r);
        }
    }
    if (!answered(r) && r->spec.stream && flush_pending(p, r) && all_done && !r->out->pending.len) {
        (void)http_stream_end(r->out->stream);
        r->out->stream = NULL;
    }
    bool in_backlog = serve_req_list_has(&p->backlog, r);
    if (!answered(r) && r->out->pending.len && !in_backlog)
        (void)serve_req_list_push(&p->backlog, r);
    if (answered(r) && in_backlog) serve_req_list_remove(&p->backlog, r);
    /* Finished for us once the stream is released and the loop has ended every sequence (or we
     * gave up because the loop could not reach it). */
    if (answered(r) && (all_done || failed)) finish_request(p, r);
}

/* ---------------------------------------------------------------- thread */

static void *respond_main(void *arg)
{
    struct serve_respond *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->ready.n && !p->backlog.n && !p->stopping) pthread_cond_wait(&p->cv, &p->mu);
        if (!p->ready.n && p->backlog.n) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += RESPOND_RETRY_MS * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            (void)pthread_cond_timedwait(&p->cv, &p->mu, &ts);
        }
        if (p->stopping && !p->ready.n && !p->backlog.n) break;
        struct serve_req_list batch = p->ready;
        p->ready = (struct serve_req_list){0};
        pthread_mutex_unlock(&p->mu);

        for (size_t i = 0; i < batch.n; i++) {
            atomic_store(&batch.v[i]->in_ready, false);
            process(p, batch.v[i]);
            serve_req_unref(batch.v[i]);
        }
        serve_req_list_fini(&batch);
        for (size_t i = 0; i < p->backlog.n;) {
            struct serve_req *r = p->backlog.v[i];
            size_t before = p->backlog.n;
            serve_req_ref(r);
            process(p, r);
            serve_req_unref(r);
            if (p->backlog.n == before && p->backlog.v[i] == r) i++;
        }
        pthread_mutex_lock(&p->mu);
        if (p->stopping && !p->ready.n && !p->backlog.n) break;
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void respond_post(struct serve_respond *p, struct serve_req *r)
{
    if (atomic_exchange(&r->in_ready, true)) return;
    serve_req_ref(r);
    pthread_mutex_lock(&p->mu);
    int rc = serve_req_list_push(&p->ready, r);
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    if (rc) {
        /* Out of memory for the list itself: the next post retries. */
        atomic_store(&r->in_ready, false);
        serve_req_unref(r);
    }
}

/* The on_post hook of every adopted request (serve_req_post). */
static void respond_post_hook(void *ctx, struct serve_req *r)
{
    respond_post(ctx, r);
}

int serve_respond_start(const struct tokenizer *tok, const char *model_name,
                        struct serve_respond **out)
{
    struct serve_respond *p = calloc(1, sizeof(*p));
    if (!p) return ERR_NOMEM;
    p->tok = tok;
    p->model = model_name;
    p->post_hook = (struct serve_req_hook){respond_post_hook, p};
    atomic_init(&p->pending, 0);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (pthread_create(&p->thread, NULL, respond_main, p) != 0) {
        serve_respond_free(p);
        return ERR_IO;
    }
    p->started = true;
    *out = p;
    return 0;
}

int serve_respond_adopt(struct serve_respond *p, struct serve_req *r, struct http_stream *stream)
{
    int n = r->spec.n_choices;
    struct serve_respond_req *o = calloc(1, sizeof(*o) + (size_t)n * sizeof(o->ch[0]));
    if (!o) return ERR_NOMEM;
    o->stream = stream;
    buf_init(&o->pending, 0);
    for (int i = 0; i < n; i++) {
        buf_init(&o->ch[i].acc.text, 0);
        buf_init(&o->ch[i].reasoning, 0);
        api_reasoning_init(&o->ch[i].split, r->spec.reasoning_inside);
        api_tool_stream_init(&o->ch[i].tools, tools_forced(r));
    }
    /* r->out is the responder thread's from here: the ready queue's lock hands it over, and the
     * first process() puts r on the adopted list. */
    r->out = o;
    for (int i = 0; r->spec.echo && i < n; i++) {
        o->ch[i].echo_pending = r->spec.stream;
        if (acc_start_echo(p, r, i) != 0) {
            respond_req_free(r);
            return ERR_NOMEM;
        }
    }
    atomic_fetch_add(&p->pending, 1);
    serve_req_set_on_post(r, &p->post_hook);
    respond_post(p, r);
    return 0;
}

int serve_respond_pending(const struct serve_respond *p)
{
    return atomic_load(&p->pending);
}

void serve_respond_stop(struct serve_respond *p, int grace_ms)
{
    if (!p->started) return;
    double end = clock_mono_s() + grace_ms / 1000.0;
    while (serve_respond_pending(p) > 0 && clock_mono_s() < end) {
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    p->started = false;
    /* Whatever is still unanswered is cut off. */
    for (size_t i = 0; i < p->adopted.n; i++) {
        struct serve_req *r = p->adopted.v[i];
        if (r->out->stream) http_stream_abort(r->out->stream);
        respond_req_free(r);
        serve_req_unref(r);
    }
    p->adopted.n = 0;
    /* Posted after the thread's last pass (the thread drains the queue before it exits). One
     * adopted then and never processed holds the initial reference too. */
    for (size_t i = 0; i < p->ready.n; i++) {
        struct serve_req *r = p->ready.v[i];
        atomic_store(&r->in_ready, false);
        if (r->out && !r->out->registered) {
            if (r->out->stream) http_stream_abort(r->out->stream);
            respond_req_free(r);
            atomic_fetch_sub(&p->pending, 1);
            serve_req_unref(r);
        }
        serve_req_unref(r);
    }
    p->ready.n = 0;
}

void serve_respond_free(struct serve_respond *p)
{
    if (!p) return;
    serve_respond_stop(p, 0);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    serve_req_list_fini(&p->ready);
    serve_req_list_fini(&p->backlog);
    serve_req_list_fini(&p->adopted);
    free(p);
}
