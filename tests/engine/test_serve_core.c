/* The serving core on its own (engine/serve/: http_api routes, serve_api handlers, the inference
 * loop and the responder) over a loopback HTTP server, with a real model: a tiny random-weight
 * llama that gen_model writes into a temp dir, so no shared data is needed. The client is a raw
 * socket, so every byte of the answer (status, headers, chunked SSE framing) is what a client sees.
 * Covers submit (whole and n > 1), stream (the same text as whole, usage, [DONE]), cancel (client
 * gone mid-stream: aborted, KV freed), fail (an engine fault: 500 engine_faulted on a whole
 * response, an SSE error event on a stream under way, 503 with Retry-After afterwards, probes
 * 503), drain (503 for new requests while draining, in-flight streams ended with "length") and
 * structured outputs (a random-weight model under a JSON schema answers valid instances, whole and
 * streamed alike; bad schemas are 400s; a grammar that never completes ends at max_tokens).
 * Deadlines below only bound a hang; nothing asserts how fast anything is. */
#include "common/buf.h"
#include "common/err.h"
#include "common/failpoint.h"
#include "engine/api/chat_template.h"
#include "engine/api/api.h"
#include "engine/grammar/grammar.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/model.h"
#include "engine/serve/http_api.h"
#include "engine/serve/serve_api.h"
#include "engine/serve/serve_auth.h"
#include "engine/serve/serve_loop.h"
#include "engine/serve/serve_respond.h"
#include "engine/text/tokenizer.h"
#include "engine/tools/gen_model.h"
#include "tests/testutil.h"

#include <arpa/inet.h>
#include <check.h>
#include <jansson.h>
#include <netinet/in.h>
#include <regex.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CORE_CTX      8192 /* long enough that a request runs for a while: cancel, drain */
#define CORE_MODEL    "m"
#define CORE_DEADLINE 120.0 /* seconds before a wait counts as a hang */

static char model_path[512];

/* ---------------------------------------------------------------- the model (once per suite) */

static void model_write(void)
{
    snprintf(model_path, sizeof(model_path), "%s/cinfer_test_serve_core_%ld.gguf", test_tmpdir(),
             (long)getpid());
    struct gen_model_opts o;
    gen_model_defaults(&o);
    o.dim = 64;
    o.layers = 2;
    o.heads = 4;
    o.kv_heads = 2;
    o.ffn = 128;
    o.context_length = CORE_CTX;
    o.vocab_size = 320;
    o.seed = 7;
    char err[256] = "";
    ck_assert_msg(gen_model_write(&o, model_path, err, sizeof(err)) == 0, "%s", err);
}

static void model_remove(void)
{
    unlink(model_path);
}

/* ---------------------------------------------------------------- the serving core */

struct core {
    struct model *m;
    struct tokenizer *tok;
    struct kv_cache *kv;
    struct http_api *http;
    struct serve_respond *resp;
    struct serve_loop *loop;
    struct chat_template *chat;
    struct grammar_vocab *gvocab;
    struct serve_api_grammars grammars;
    struct serve_api api;
    int port;
};

/* What a core runs with beyond the defaults: zero fields keep CORE_CTX, a pool of two full
 * sequences, 256 tokens per step and no KV eviction. */
struct core_opts {
    const char *tmpl;
    bool reasoning;
    struct serve_auth *auth;
    enum serve_cache_scope scope;
    int ctx;                 /* max_context of the scheduler and the API */
    int n_blocks;            /* KV blocks of 16 tokens */
    int batch;               /* max_num_batched_tokens */
    struct kv_window window; /* the server's --kv-eviction */
};

/* Starts what cmd_serve.c starts, in the same order: HTTP first (503 while loading), then the
 * model, KV cache, responder and loop, then SERVING; with chat template o->tmpl (a built-in name
 * or Jinja text), the reasoning split on or off, and the API keys o->auth (NULL: none) with
 * the prefix-cache scope o->scope. */
static void core_start_opts(struct core *c, const struct core_opts *o)
{
    memset(c, 0, sizeof(*c));
    struct http_api_cfg hc = {
        .host = "127.0.0.1", .max_body_bytes = 1 << 20, .model_name = CORE_MODEL};
    ck_assert_int_eq(http_api_start(&hc, &c->http), 0);
    c->port = http_api_port(c->http);
    struct model_options mo;
    model_options_default(&mo);
    mo.n_threads = 1;
    char err[256] = "";
    ck_assert_msg(model_load(model_path, &mo, &c->m, err, sizeof(err)) == 0, "%s", err);
    ck_assert_msg(tokenizer_load(model_gguf(c->m), &c->tok, err, sizeof(err)) == 0, "%s", err);
    int ctx = o->ctx ? o->ctx : CORE_CTX;
    int bs = 16, per_seq = ctx / bs;
    struct kv_cache_config kc = {o->n_blocks ? o->n_blocks : 2 * per_seq, bs, 4, per_seq};
    ck_assert_int_eq(kv_cache_new(&kc, &c->kv), 0);
    ck_assert_int_eq(model_kv_init(c->m, c->kv), 0);
    ck_assert_int_eq(serve_respond_start(c->tok, CORE_MODEL, &c->resp), 0);
    struct serve_loop_cfg lc = {
        .sched = {.max_num_seqs = 4,
                  .max_num_batched_tokens = o->batch ? o->batch : 256,
                  .chunked_prefill = true,
                  .prefix_caching = true,
                  .max_context = ctx},
        .max_queue = 16,
    };
    ck_assert_int_eq(
        serve_loop_start(&lc, c->m, c->kv, c->tok, http_api_metrics(c->http), &c->loop), 0);
    struct chat_template_config cc = {.override = o->tmpl};
    ck_assert_msg(chat_template_new(&cc, &c->chat, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(grammar_vocab_new(c->tok, &c->gvocab), 0);
    c->api = (struct serve_api){
        .model_name = CORE_MODEL,
        .tok = c->tok,
        .chat_template = c->chat,
        .gvocab = c->gvocab,
        .reasoning = o->reasoning,
        .grammars = &c->grammars,
        .n_vocab = model_hparams(c->m)->n_vocab,
        .max_context = ctx,
        .max_queue = 16,
        .created = 1,
        .loop = c->loop,
        .resp = c->resp,
        .auth = o->auth,
        .prefix_cache_scope = o->scope,
        .kv_window = o->window,
        .kv_shift = model_kv_shift_supported(c->m),
        .kv_block_size = bs,
    };
    http_api_attach(c->http, &c->api);
    http_api_set_state(c->http, HTTP_API_SERVING);
}

static void core_start_with(struct core *c, const char *tmpl, bool reasoning,
                            struct serve_auth *auth, enum serve_cache_scope scope)
{
    struct core_opts o = {.tmpl = tmpl, .reasoning = reasoning, .auth = auth, .scope = scope};
    core_start_opts(c, &o);
}

static void core_start(struct core *c)
{
    core_start_with(c, "chatml", true, NULL, SERVE_CACHE_SCOPE_GLOBAL);
}

/* Stops in cmd_serve.c's teardown order. */
static void core_stop(struct core *c)
{
    serve_loop_stop(c->loop);
    serve_respond_stop(c->resp, 2000);
    (void)http_api_shutdown(c->http, 2000);
    http_api_free(c->http);
    serve_loop_free(c->loop);
    serve_respond_free(c->resp);
    chat_template_free(c->chat);
    serve_api_grammars_fini(&c->grammars);
    grammar_vocab_free(c->gvocab);
    kv_cache_free(c->kv);
    tokenizer_free(c->tok);
    model_free(c->m);
    (void)failpoint_configure(NULL);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Waits until nothing is in flight in the loop or the responder. */
static void core_wait_idle(struct core *c)
{
    double end = now_s() + CORE_DEADLINE;
    while (serve_loop_inflight(c->loop) > 0 || serve_respond_pending(c->resp) > 0) {
        ck_assert_msg(now_s() < end, "the serving core did not go idle");
        sleep_ms(5);
    }
}

/* ---------------------------------------------------------------- a raw HTTP client */

struct reply {
    int status;
    char *head; /* status line and headers */
    char *body; /* de-chunked */
    size_t body_len;
};

static void reply_fini(struct reply *r)
{
    free(r->head);
    free(r->body);
    memset(r, 0, sizeof(*r));
}

static int tc_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct timeval tv = {(time_t)CORE_DEADLINE, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

/* Sends one request (Connection: close) with extra header lines `extra` (extra_len raw bytes,
 * each line ending in CRLF; may hold any byte) and returns the connected socket. */
static int tc_send_with(int port, const char *method, const char *path, const char *body,
                        const char *extra, size_t extra_len)
{
    int fd = tc_connect(port);
    char head[512];
    size_t bl = body ? strlen(body) : 0;
    int n = snprintf(head, sizeof(head),
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n",
                     method, path, bl);
    ck_assert(n > 0 && (size_t)n < sizeof(head));
    ck_assert_int_eq(send(fd, head, (size_t)n, MSG_NOSIGNAL), n);
    if (extra_len) ck_assert_int_eq(send(fd, extra, extra_len, MSG_NOSIGNAL), (ssize_t)extra_len);
    ck_assert_int_eq(send(fd, "\r\n", 2, MSG_NOSIGNAL), 2);
    if (bl) ck_assert_int_eq(send(fd, body, bl, MSG_NOSIGNAL), (ssize_t)bl);
    return fd;
}

/* Sends one request (Connection: close) and returns the connected socket. */
static int tc_send(int port, const char *method, const char *path, const char *body)
{
    return tc_send_with(port, method, path, body, NULL, 0);
}

/* Reads until `needle` appears in what was received (appended to *acc, NUL-terminated) or the
 * peer closes; returns true when it appeared. */
static bool tc_read_until(int fd, char **acc, size_t *len, const char *needle)
{
    for (;;) {
        if (*acc && strstr(*acc, needle)) return true;
        char chunk[4096];
        ssize_t k = recv(fd, chunk, sizeof(chunk), 0);
        if (k <= 0) return *acc && strstr(*acc, needle);
        char *g = realloc(*acc, *len + (size_t)k + 1);
        ck_assert_ptr_nonnull(g);
        memcpy(g + *len, chunk, (size_t)k);
        *len += (size_t)k;
        g[*len] = '\0';
        *acc = g;
    }
}

/* Splits a whole raw response (read to EOF) into status, head and de-chunked body. */
static void reply_parse(char *raw, size_t len, struct reply *out)
{
    memset(out, 0, sizeof(*out));
    ck_assert_ptr_nonnull(raw);
    char *sep = strstr(raw, "\r\n\r\n");
    ck_assert_msg(sep != NULL, "no header end in: %.200s", raw);
    ck_assert_int_eq(sscanf(raw, "HTTP/1.1 %d", &out->status), 1);
    out->head = strndup(raw, (size_t)(sep - raw));
    const char *p = sep + 4, *end = raw + len;
    out->body = calloc(1, (size_t)(end - p) + 1);
    ck_assert_ptr_nonnull(out->body);
    if (!strcasestr(out->head, "Transfer-Encoding: chunked")) {
        memcpy(out->body, p, (size_t)(end - p));
        out->body_len = (size_t)(end - p);
        return;
    }
    while (p < end) {
        char *next = NULL;
        unsigned long n = strtoul(p, &next, 16);
        ck_assert_msg(next && next + 2 <= end && next[0] == '\r' && next[1] == '\n',
                      "bad chunk header");
        p = next + 2;
        if (n == 0) break;
        ck_assert_msg(p + n + 2 <= end, "truncated chunk");
        memcpy(out->body + out->body_len, p, n);
        out->body_len += n;
        p += n + 2;
    }
}

/* Reads to EOF and parses. */
static void tc_finish(int fd, char *raw, size_t len, struct reply *out)
{
    (void)tc_read_until(fd, &raw, &len, "\x01never\x01");
    close(fd);
    reply_parse(raw, len, out);
    free(raw);
}

static void http_do(int port, const char *method, const char *path, const char *body,
                    struct reply *out)
{
    int fd = tc_send(port, method, path, body);
    tc_finish(fd, NULL, 0, out);
}

static json_t *body_json(const struct reply *r)
{
    json_error_t je;
    json_t *j = json_loadb(r->body, r->body_len, JSON_ALLOW_NUL, &je);
    ck_assert_msg(j != NULL, "%s: %.300s", je.text, r->body);
    return j;
}

static const char *error_code(json_t *j)
{
    return json_string_value(json_object_get(json_object_get(j, "error"), "code"));
}

/* The SSE events of a streamed body: each "data: X" payload but [DONE], parsed; *done when the
 * stream ended with [DONE]. Returns a new array. */
static json_t *sse_events(const struct reply *r, bool *done)
{
    json_t *a = json_array();
    *done = false;
    const char *p = r->body;
    while ((p = strstr(p, "data: ")) != NULL) {
        p += 6;
        const char *e = strstr(p, "\n\n");
        ck_assert_msg(e != NULL, "unterminated SSE event");
        if ((size_t)(e - p) == 6 && strncmp(p, "[DONE]", 6) == 0) {
            *done = true;
        } else {
            json_error_t je;
            json_t *j = json_loadb(p, (size_t)(e - p), JSON_ALLOW_NUL, &je);
            ck_assert_msg(j != NULL, "%s", je.text);
            json_array_append_new(a, j);
        }
        p = e + 2;
    }
    return a;
}

/* The text (completions) or delta content (chat) of every chunk's choices[0] joined, and the last finish_reason seen. */
static char *sse_text(json_t *events, const char **finish)
{
    size_t cap = 1, n = 0;
    char *s = calloc(1, cap);
    *finish = NULL;
    size_t i;
    json_t *ev;
    json_array_foreach(events, i, ev)
    {
        json_t *c = json_array_get(json_object_get(ev, "choices"), 0);
        const char *t = json_string_value(json_object_get(c, "text"));
        if (!t) t = json_string_value(json_object_get(json_object_get(c, "delta"), "content"));
        const char *fr = json_string_value(json_object_get(c, "finish_reason"));
        if (fr) *finish = fr;
        if (!t) continue;
        size_t tl = strlen(t);
        s = realloc(s, cap += tl);
        memcpy(s + n, t, tl + 1);
        n += tl;
    }
    return s;
}

/* The value of the sample `name{...label...}` on the /metrics page, or -1 when absent. */
static double metric(int port, const char *name, const char *label)
{
    struct reply r;
    http_do(port, "GET", "/metrics", NULL, &r);
    ck_assert_int_eq(r.status, 200);
    double v = -1;
    size_t nl = strlen(name);
    for (char *line = r.body; line && *line;) {
        char *eol = strchr(line, '\n');
        if (eol) *eol = '\0';
        if (!strncmp(line, name, nl) && line[nl] == '{' && (!label || strstr(line, label))) {
            const char *sp = strrchr(line, ' ');
            if (sp) v = strtod(sp + 1, NULL);
        }
        line = eol ? eol + 1 : NULL;
    }
    reply_fini(&r);
    return v;
}

/* Waits until the sample equals `want`: the loop refreshes gauges and counters after its steps,
 * a moment after a request is answered. */
static void metric_wait(int port, const char *name, const char *label, double want)
{
    double end = now_s() + CORE_DEADLINE, v;
    while ((v = metric(port, name, label)) != want) {
        ck_assert_msg(now_s() < end, "%s{%s} is %g, want %g", name, label ? label : "", v, want);
        sleep_ms(5);
    }
}

/* ---------------------------------------------------------------- submit */

#define GREEDY_BODY                                                                                \
    "{\"prompt\":\"hello world\",\"max_tokens\":12,\"temperature\":0,\"ignore_eos\":true"

START_TEST(test_serve_core_submit_whole)
{
    struct core c;
    core_start(&c);
    struct reply r;
    http_do(c.port, "POST", "/v1/completions", GREEDY_BODY ",\"n\":2}", &r);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.body);
    json_t *j = body_json(&r);
    ck_assert_str_eq(json_string_value(json_object_get(j, "object")), "text_completion");
    ck_assert_str_eq(json_string_value(json_object_get(j, "model")), CORE_MODEL);
    json_t *ch = json_object_get(j, "choices");
    ck_assert_int_eq((int)json_array_size(ch), 2);
    const char *t0 = json_string_value(json_object_get(json_array_get(ch, 0), "text"));
    const char *t1 = json_string_value(json_object_get(json_array_get(ch, 1), "text"));
    ck_assert_ptr_nonnull(t0);
    ck_assert_str_eq(t0, t1); /* greedy: every choice the same */
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(ch, 0), "finish_reason")),
                     "length");
    json_t *u = json_object_get(j, "usage");
    ck_assert_int_eq(json_integer_value(json_object_get(u, "completion_tokens")), 24);
    ck_assert_int_gt(json_integer_value(json_object_get(u, "prompt_tokens")), 0);
    json_decref(j);
    reply_fini(&r);
    core_wait_idle(&c);
    ck_assert(metric(c.port, "cinfer_requests_total", "finished_reason=\"length\"") == 1);
    metric_wait(c.port, "cinfer_generation_tokens_total", NULL, 24);
    core_stop(&c);
}
END_TEST

/* ---------------------------------------------------------------- stream */

START_TEST(test_serve_core_stream_matches_whole)
{
    struct core c;
    core_start(&c);
    struct reply whole, st;
    http_do(c.port, "POST", "/v1/completions", GREEDY_BODY "}", &whole);
    ck_assert_int_eq(whole.status, 200);
    json_t *wj = body_json(&whole);
    const char *want = json_string_value(
        json_object_get(json_array_get(json_object_get(wj, "choices"), 0), "text"));
    http_do(c.port, "POST", "/v1/completions",
            GREEDY_BODY ",\"stream\":true,\"stream_options\":{\"include_usage\":true}}", &st);
    ck_assert_int_eq(st.status, 200);
    ck_assert_ptr_nonnull(strcasestr(st.head, "Content-Type: text/event-stream"));
    bool done = false;
    json_t *events = sse_events(&st, &done);
    ck_assert(done);
    ck_assert_int_ge((int)json_array_size(events), 2);
    const char *finish = NULL;
    char *text = sse_text(events, &finish);
    ck_assert_str_eq(text, want);
    ck_assert_str_eq(finish, "length");
    /* The usage chunk comes last, with no choices. */
    json_t *last = json_array_get(events, json_array_size(events) - 1);
    ck_assert_int_eq((int)json_array_size(json_object_get(last, "choices")), 0);
    ck_assert_int_eq(
        json_integer_value(json_object_get(json_object_get(last, "usage"), "completion_tokens")),
        12);
    free(text);
    json_decref(events);
    json_decref(wj);
    reply_fini(&whole);
    reply_fini(&st);
    core_stop(&c);
}
END_TEST

/* ---------------------------------------------------------------- cancel */

#define LONG_STREAM_BODY                                                                           \
    "{\"prompt\":\"hello\",\"max_tokens\":8000,\"temperature\":0,\"ignore_eos\":true,"             \
    "\"stream\":true}"

START_TEST(test_serve_core_cancel_client_gone)
{
    struct core c;
    core_start(&c);
    int fd = tc_send(c.port, "POST", "/v1/completions", LONG_STREAM_BODY);
    char *raw = NULL;
    size_t len = 0;
    ck_assert(tc_read_until(fd, &raw, &len, "data: "));
    ck_assert_int_eq(serve_loop_inflight(c.loop), 1);
    close(fd); /* the client goes away mid-stream */
    free(raw);
    core_wait_idle(&c);
    ck_assert(metric(c.port, "cinfer_requests_total", "finished_reason=\"abort\"") == 1);
    ck_assert(metric(c.port, "cinfer_requests_total", "finished_reason=\"length\"") == 0);
    /* Its blocks are free again (the gauge counts blocks held by sequences). */
    metric_wait(c.port, "cinfer_kv_cache_usage_ratio", NULL, 0);
    metric_wait(c.port, "cinfer_requests_running", NULL, 0);
    ck_assert(metric(c.port, "cinfer_generation_tokens_total", NULL) < 8000);
    /* The engine serves on. */
    struct reply r;
    http_do(c.port, "POST", "/v1/completions", GREEDY_BODY "}", &r);
    ck_assert_int_eq(r.status, 200);
    reply_fini(&r);
    core_stop(&c);
}
END_TEST

/* ---------------------------------------------------------------- fail */

/* Every forward step fails: after three the engine is faulted; the request that was running gets
 * 500 engine_faulted, later ones 503 engine_faulted with Retry-After, and both probes fail. */
START_TEST(test_serve_core_fail_engine_faulted)
{
    ck_assert_int_eq(failpoint_configure("serve.step=error"), 0);
    struct core c;
    core_start(&c);
    struct reply r;
    http_do(c.port, "POST", "/v1/completions", GREEDY_BODY "}", &r);
    ck_assert_msg(r.status == 500, "%d %s", r.status, r.body);
    json_t *j = body_json(&r);
    ck_assert_str_eq(error_code(j), "engine_faulted");
    json_decref(j);
    reply_fini(&r);
    ck_assert(serve_loop_faulted(c.loop));

    http_do(c.port, "POST", "/v1/completions", GREEDY_BODY "}", &r);
    ck_assert_int_eq(r.status, 503);
    ck_assert_ptr_nonnull(strcasestr(r.head, "Retry-After: 1"));
    j = body_json(&r);
    ck_assert_str_eq(error_code(j), "engine_faulted");
    json_decref(j);
    reply_fini(&r);
    http_do(c.port, "GET", "/health", NULL, &r);
    ck_assert_int_eq(r.status, 503);
    reply_fini(&r);
    http_do(c.port, "GET", "/live", NULL, &r);
    ck_assert_int_eq(r.status, 503);
    reply_fini(&r);
    core_wait_idle(&c);
    core_stop(&c);
}
END_TEST

/* serve_loop_set_faulted (the model file changed, cmd_serve.c's watcher): a stream already under
 * way runs to its end ([DONE], every token), while both probes fail and new requests get 503
 * engine_faulted with Retry-After. */
START_TEST(test_serve_core_set_faulted_finishes_inflight)
{
    struct core c;
    core_start(&c);
    int fd = tc_send(c.port, "POST", "/v1/completions",
                     "{\"prompt\":\"hello\",\"max_tokens\":4000,\"temperature\":0,"
                     "\"ignore_eos\":true,\"stream\":true}");
    char *raw = NULL;
    size_t len = 0;
    ck_assert(tc_read_until(fd, &raw, &len, "data: "));
    ck_assert(!serve_loop_faulted(c.loop));
    serve_loop_set_faulted(c.loop);
    ck_assert_int_eq(serve_loop_inflight(c.loop), 1); /* 4000 tokens: still running */
    serve_loop_set_faulted(c.loop);                   /* idempotent */
    ck_assert(serve_loop_faulted(c.loop));
    struct reply r;
    http_do(c.port, "GET", "/live", NULL, &r);
    ck_assert_int_eq(r.status, 503);
    ck_assert_ptr_nonnull(strstr(r.body, "faulted"));
    reply_fini(&r);
    http_do(c.port, "GET", "/health", NULL, &r);
    ck_assert_int_eq(r.status, 503);
    reply_fini(&r);
    http_do(c.port, "POST", "/v1/completions", GREEDY_BODY "}", &r);
    ck_assert_int_eq(r.status, 503);
    ck_assert_ptr_nonnull(strcasestr(r.head, "Retry-After: 1"));
    json_t *j = body_json(&r);
    ck_assert_str_eq(error_code(j), "engine_faulted");
    json_decref(j);
    reply_fini(&r);
    struct reply st;
    tc_finish(fd, raw, len, &st);
    ck_assert_int_eq(st.status, 200);
    bool done = false;
    json_t *events = sse_events(&st, &done);
    ck_assert(done);
    const char *finish = NULL;
    char *text = sse_text(events, &finish);
    ck_assert_str_eq(finish, "length");
    free(text);
    json_decref(events);
    reply_fini(&st);
    core_wait_idle(&c);
    ck_assert(metric(c.port, "cinfer_requests_total", "finished_reason=\"length\"") == 1);
    metric_wait(c.port, "cinfer_generation_tokens_total", NULL, 4000);
    core_stop(&c);
}
END_TEST

/* Steps fail from the 5th on: a stream that already sent tokens ends with one SSE error event
 * (engine_faulted), not with [DONE]. */
START_TEST(test_serve_core_fail_stream_under_way)
{
    ck_assert_int_eq(failpoint_configure("serve.step=error@5"), 0);
    struct core c;
    core_start(&c);
    struct reply r;
    http_do(c.port, "POST", "/v1/completions", LONG_STREAM_BODY, &r);
    ck_assert_int_eq(r.status, 200);
    bool done = false;
    json_t *events = sse_events(&r, &done);
    ck_assert(!done);
    size_t n = json_array_size(events);
    ck_assert_int_ge((int)n, 2); /* tokens, then the error */
    json_t *last = json_array_get(events, n - 1);
    ck_assert_str_eq(error_code(last), "engine_faulted");
    ck_assert_ptr_nonnull(json_object_get(json_array_get(events, 0), "choices"));
    json_decref(events);
    reply_fini(&r);
    core_wait_idle(&c);
    core_stop(&c);
}
END_TEST

/* A prompt longer than the context never reaches the loop: 400 naming the parameter. */
START_TEST(test_serve_core_fail_validation_400)
{
    struct core c;
    core_start(&c);
    struct reply r;
    http_do(c.port, "POST", "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":9000}", &r);
    ck_assert_int_eq(r.status, 400);
    json_t *j = body_json(&r);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "error"), "param")),
                     "max_tokens");
    json_decref(j);
    reply_fini(&r);
    ck_assert_int_eq(serve_loop_inflight(c.loop), 0);
    core_stop(&c);
}
END_TEST

/* ---------------------------------------------------------------- OpenAI fields */

static json_t *choice_at(json_t *j, size_t i)
{
    return json_array_get(json_object_get(j, "choices"), i);
}

static const char *text_at(json_t *j, size_t i)
{
    const char *t = json_string_value(json_object_get(choice_at(j, i), "text"));
    ck_assert_ptr_nonnull(t);
    return t;
}

static long usage_of(json_t *j, const char *key)
{
    return (long)json_integer_value(json_object_get(json_object_get(j, "usage"), key));
}

/* POSTs `body` to /v1/completions, expects 200, returns the parsed body. */
static json_t *complete(const struct core *c, const char *body)
{
    struct reply r;
    http_do(c->port, "POST", "/v1/completions", body, &r);
    ck_assert_msg(r.status == 200, "%d %s for %s", r.status, r.body, body);
    json_t *j = body_json(&r);
    reply_fini(&r);
    return j;
}

/* POSTs `body` and expects 400 naming `param`. */
static void complete_400(const struct core *c, const char *path, const char *body,
                         const char *param)
{
    struct reply r;
    http_do(c->port, "POST", path, body, &r);
    ck_assert_msg(r.status == 400, "%d %s for %s", r.status, r.body, body);
    json_t *j = body_json(&r);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "error"), "param")),
                     param);
    json_decref(j);
    reply_fini(&r);
}

/* Sink-window KV eviction (engine/kv/kv_window.h) through the API: at a context of 256 tokens and
 * a pool of 10 blocks (160 tokens), a 300-token prompt asking 600 tokens runs to the end with
 * "kv_eviction" sink-window (one sink block, a window of 64, steps of 32 tokens: at most 8
 * blocks), with no preemption, and so does one without the field on a server whose default is
 * sink-window; the same request in mode none is refused as today (max_tokens past the context),
 * and a prompt past it too (with a small max_tokens); so are
 * a window too large for the context and echo with logprobs. */
static char *window_body(const char *extra)
{
    struct buf b;
    buf_init(&b, 1 << 16);
    ck_assert_int_eq(buf_puts(&b, "{\"prompt\":["), 0);
    for (int i = 0; i < 300; i++) {
        char t[16];
        snprintf(t, sizeof(t), i ? ",%d" : "%d", 3 + (i * 37) % 300);
        ck_assert_int_eq(buf_puts(&b, t), 0);
    }
    ck_assert_int_eq(buf_puts(&b, "],\"max_tokens\":600,\"temperature\":0,"
                                  "\"ignore_eos\":true"),
                     0);
    ck_assert_int_eq(buf_puts(&b, extra), 0);
    ck_assert_int_eq(buf_puts(&b, "}"), 0);
    char *s = strdup(buf_cstr(&b));
    buf_fini(&b);
    ck_assert_ptr_nonnull(s);
    return s;
}

#define SINK_64 ",\"kv_eviction\":{\"mode\":\"sink-window\",\"sink_tokens\":4,\"window_tokens\":64}"

static void window_run_ok(const struct core *c, const char *extra)
{
    char *body = window_body(extra);
    json_t *j = complete(c, body);
    ck_assert_str_eq(json_string_value(json_object_get(choice_at(j, 0), "finish_reason")),
                     "length");
    ck_assert_int_eq(usage_of(j, "prompt_tokens"), 300);
    ck_assert_int_eq(usage_of(j, "completion_tokens"), 600);
    ck_assert(strlen(text_at(j, 0)) > 0);
    json_decref(j);
    free(body);
}

START_TEST(test_serve_core_sink_window_past_context)
{
    struct core c;
    struct core_opts o = {.tmpl = "chatml", .ctx = 256, .n_blocks = 10, .batch = 32};
    core_start_opts(&c, &o);
    window_run_ok(&c, SINK_64);
    metric_wait(c.port, "cinfer_requests_running", NULL, 0);
    ck_assert_double_eq(metric(c.port, "cinfer_preemptions_total", NULL), 0);
    ck_assert_double_eq(metric(c.port, "cinfer_kv_cache_usage_ratio", NULL), 0);
    char *body = window_body("");
    complete_400(&c, "/v1/completions", body, "max_tokens"); /* mode none: today's checks */
    free(body);
    body = window_body(",\"kv_eviction\":{\"mode\":\"none\"}");
    complete_400(&c, "/v1/completions", body, "max_tokens");
    free(body);
    body = window_body(",\"kv_eviction\":{\"mode\":\"sink-window\",\"window_tokens\":250}");
    complete_400(&c, "/v1/completions", body, "kv_eviction"); /* 16 + 250 + 15 > 256 */
    free(body);
    body = window_body("");
    memcpy(strstr(body, "\"max_tokens\":600"), "\"max_tokens\":  8", 16); /* same length */
    complete_400(&c, "/v1/completions", body, "prompt"); /* 300 tokens at a context of 256 */
    free(body);
    complete_400(&c, "/v1/completions",
                 "{\"prompt\":\"hello\",\"echo\":true,\"logprobs\":1,\"max_tokens\":2" SINK_64 "}",
                 "kv_eviction");
    complete_400(&c, "/v1/completions",
                 "{\"prompt\":\"hello\",\"kv_eviction\":{\"mode\":\"sink\"}}", "kv_eviction.mode");
    core_stop(&c);

    o.window = (struct kv_window){KV_WINDOW_SINK, 4, 64}; /* the server's default */
    core_start_opts(&c, &o);
    window_run_ok(&c, "");
    body = window_body(",\"kv_eviction\":{\"mode\":\"none\"}");
    complete_400(&c, "/v1/completions", body, "max_tokens");
    free(body);
    core_stop(&c);
}
END_TEST

/* Batched prompts: one choice per prompt and n, numbered prompt * n + j, each the text the prompt
 * gets alone; usage summed; streamed chunks carry the same indexes and texts. */
START_TEST(test_serve_core_batched_prompts)
{
    struct core c;
    core_start(&c);
    json_t *a = complete(&c, GREEDY_BODY "}");
    json_t *b = complete(&c, "{\"prompt\":\"a b c\",\"max_tokens\":12,\"temperature\":0,"
                             "\"ignore_eos\":true}");
    json_t *t = complete(&c, "{\"prompt\":[100,101,102,103],\"max_tokens\":12,\"temperature\":0,"
                             "\"ignore_eos\":true}");
    json_t *j = complete(&c, "{\"prompt\":[\"hello world\",\"a b c\"],\"n\":2,\"max_tokens\":12,"
                             "\"temperature\":0,\"ignore_eos\":true}");
    ck_assert_int_eq((int)json_array_size(json_object_get(j, "choices")), 4);
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(json_integer_value(json_object_get(choice_at(j, (size_t)i), "index")), i);
        ck_assert_str_eq(text_at(j, (size_t)i), text_at(i < 2 ? a : b, 0));
    }
    ck_assert_int_eq(usage_of(j, "prompt_tokens"),
                     usage_of(a, "prompt_tokens") + usage_of(b, "prompt_tokens"));
    ck_assert_int_eq(usage_of(j, "completion_tokens"), 48);
    json_decref(j);
    /* Token-id prompts, batched, streamed, with include_usage. */
    struct reply st;
    http_do(c.port, "POST", "/v1/completions",
            "{\"prompt\":[[100,101,102,103],[100,101,102,103],[100,101,102,103]],\"max_tokens\":12,"
            "\"temperature\":0,"
            "\"ignore_eos\":true,\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
            &st);
    ck_assert_int_eq(st.status, 200);
    bool done = false;
    json_t *ev = sse_events(&st, &done);
    ck_assert(done);
    char texts[3][512] = {{0}};
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e)
    {
        json_t *ch = json_array_get(json_object_get(e, "choices"), 0);
        if (!ch) continue;
        json_int_t idx = json_integer_value(json_object_get(ch, "index"));
        ck_assert(idx >= 0 && idx < 3);
        strncat(texts[idx], json_string_value(json_object_get(ch, "text")),
                sizeof(texts[idx]) - strlen(texts[idx]) - 1);
    }
    for (int k = 0; k < 3; k++) ck_assert_str_eq(texts[k], text_at(t, 0));
    json_t *last = json_array_get(ev, json_array_size(ev) - 1);
    ck_assert_int_eq(
        json_integer_value(json_object_get(json_object_get(last, "usage"), "prompt_tokens")),
        3 * usage_of(t, "prompt_tokens"));
    json_decref(ev);
    reply_fini(&st);
    json_decref(a);
    json_decref(b);
    json_decref(t);
    core_stop(&c);
}
END_TEST

/* echo: the text starts with the prompt (token ids 100.. are the bytes "abcd" of the generated
 * byte-level vocabulary); with logprobs the prompt tokens come first, the first one unscored
 * (null); max_tokens 0 scores the prompt alone; generated tokens keep their logprobs. Streamed,
 * the prompt is the first chunk. (test_scheduler compares prompt and generation logprobs.) */
START_TEST(test_serve_core_echo_logprobs)
{
    struct core c;
    core_start(&c);
    json_t *g = complete(&c, "{\"prompt\":[100,101,102,103],\"max_tokens\":6,\"temperature\":0,"
                             "\"ignore_eos\":true,\"logprobs\":2}");
    json_t *glp = json_object_get(choice_at(g, 0), "logprobs");
    json_t *gl = json_object_get(glp, "token_logprobs");
    ck_assert_int_eq((int)json_array_size(gl), 6);
    json_t *j = complete(&c, "{\"prompt\":[100,101,102,103],\"echo\":true,\"max_tokens\":0,"
                             "\"logprobs\":1}");
    json_t *lp = json_object_get(choice_at(j, 0), "logprobs");
    json_t *tl = json_object_get(lp, "token_logprobs"), *tt = json_object_get(lp, "top_logprobs");
    ck_assert_int_eq((int)json_array_size(tl), 4);
    ck_assert(json_is_null(json_array_get(tl, 0)));
    ck_assert(json_is_null(json_array_get(tt, 0)));
    for (size_t k = 1; k < 4; k++) {
        ck_assert(json_is_real(json_array_get(tl, k)));
        ck_assert(json_real_value(json_array_get(tl, k)) <= 0);
        ck_assert_int_ge((int)json_object_size(json_array_get(tt, k)), 1);
    }
    ck_assert_int_eq(usage_of(j, "completion_tokens"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(choice_at(j, 0), "finish_reason")),
                     "length");
    /* Echo text = the prompt decoded; then the completion. */
    char *prompt_text = strdup(text_at(j, 0));
    json_decref(j);
    j = complete(&c,
                 "{\"prompt\":[100,101,102,103],\"echo\":true,\"max_tokens\":6,\"temperature\":0,"
                 "\"ignore_eos\":true,\"logprobs\":2}");
    char want[1024];
    snprintf(want, sizeof(want), "%s%s", prompt_text, text_at(g, 0));
    ck_assert_str_eq(text_at(j, 0), want);
    lp = json_object_get(choice_at(j, 0), "logprobs");
    tl = json_object_get(lp, "token_logprobs");
    ck_assert_int_eq((int)json_array_size(tl), 10); /* 4 prompt + 6 generated */
    for (size_t k = 0; k < 6; k++)
        ck_assert_double_eq_tol(json_real_value(json_array_get(tl, 4 + k)),
                                json_real_value(json_array_get(gl, k)), 1e-6);
    /* Prompt logprobs are the model's: position 3's alternatives (after 100,101,102) are those
     * a one-token generation from [100,101,102] reports. */
    json_t *h = complete(&c, "{\"prompt\":[100,101,102],\"max_tokens\":1,\"temperature\":0,"
                             "\"logprobs\":5}");
    json_t *top = json_array_get(
        json_object_get(json_object_get(choice_at(h, 0), "logprobs"), "top_logprobs"), 0);
    json_t *ptop = json_array_get(json_object_get(lp, "top_logprobs"), 3);
    const char *key;
    json_t *v;
    int common = 0;
    json_object_foreach(ptop, key, v)
    {
        json_t *w = json_object_get(top, key);
        if (!w) continue;
        ck_assert_double_eq_tol(json_real_value(v), json_real_value(w), 1e-4);
        common++;
    }
    ck_assert_int_ge(common, 1);
    json_decref(h);
    json_decref(j);

    /* Streamed: the first chunk is the prompt (with its logprobs), text offsets continue. */
    struct reply st;
    http_do(c.port, "POST", "/v1/completions",
            "{\"prompt\":[100,101,102,103],\"echo\":true,\"max_tokens\":6,\"temperature\":0,"
            "\"ignore_eos\":true,\"logprobs\":1,\"stream\":true}",
            &st);
    ck_assert_int_eq(st.status, 200);
    bool done = false;
    json_t *ev = sse_events(&st, &done);
    ck_assert(done);
    json_t *first = json_array_get(json_object_get(json_array_get(ev, 0), "choices"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(first, "text")), prompt_text);
    ck_assert_int_eq(
        (int)json_array_size(json_object_get(json_object_get(first, "logprobs"), "tokens")), 4);
    const char *finish = NULL;
    char *text = sse_text(ev, &finish);
    ck_assert_str_eq(text, want);
    free(text);
    json_decref(ev);
    reply_fini(&st);
    free(prompt_text);
    json_decref(g);
    core_stop(&c);
}
END_TEST

/* best_of: candidate j samples with seed + j, so n = best_of with the same seed shows every
 * candidate; best_of > n returns the n with the highest mean token logprob, best first. */
START_TEST(test_serve_core_best_of)
{
    struct core c;
    core_start(&c);
    json_t *all = complete(&c, "{\"prompt\":\"hello\",\"max_tokens\":8,\"temperature\":1.5,"
                               "\"seed\":11,\"n\":4,\"ignore_eos\":true,\"logprobs\":0}");
    double mean[4];
    for (size_t k = 0; k < 4; k++) {
        json_t *tl =
            json_object_get(json_object_get(choice_at(all, k), "logprobs"), "token_logprobs");
        ck_assert_int_eq((int)json_array_size(tl), 8);
        double sum = 0;
        for (size_t t = 0; t < 8; t++) sum += json_real_value(json_array_get(tl, t));
        mean[k] = sum / 8;
    }
    int best = 0, second = -1;
    for (int k = 1; k < 4; k++)
        if (mean[k] > mean[best]) best = k;
    for (int k = 0; k < 4; k++)
        if (k != best && (second < 0 || mean[k] > mean[second])) second = k;
    json_t *j = complete(&c, "{\"prompt\":\"hello\",\"max_tokens\":8,\"temperature\":1.5,"
                             "\"seed\":11,\"n\":2,\"best_of\":4,\"ignore_eos\":true}");
    ck_assert_int_eq((int)json_array_size(json_object_get(j, "choices")), 2);
    ck_assert_str_eq(text_at(j, 0), text_at(all, (size_t)best));
    ck_assert_str_eq(text_at(j, 1), text_at(all, (size_t)second));
    ck_assert(json_is_null(json_object_get(choice_at(j, 0), "logprobs")));
    ck_assert_int_eq(usage_of(j, "completion_tokens"), 32); /* every candidate was generated */
    json_decref(j);
    /* Batched with best_of: choice indexes prompt * n + rank. */
    j = complete(&c, "{\"prompt\":[\"hello\",\"hello\"],\"max_tokens\":8,\"temperature\":1.5,"
                     "\"seed\":11,\"best_of\":4,\"ignore_eos\":true}");
    ck_assert_int_eq((int)json_array_size(json_object_get(j, "choices")), 2);
    for (size_t k = 0; k < 2; k++) {
        ck_assert_int_eq(json_integer_value(json_object_get(choice_at(j, k), "index")), (int)k);
        ck_assert_str_eq(text_at(j, k), text_at(all, (size_t)best));
    }
    json_decref(j);
    complete_400(&c, "/v1/completions", "{\"prompt\":\"hello\",\"best_of\":2,\"stream\":true}",
                 "best_of");
    json_decref(all);
    core_stop(&c);
}
END_TEST

/* logit_bias: -100 bans the greedy first token, +100 forces a token; ids outside the vocabulary
 * are a 400 naming logit_bias. */
START_TEST(test_serve_core_logit_bias)
{
    struct core c;
    core_start(&c);
    const char *base =
        "{\"prompt\":[100,101,102],\"max_tokens\":4,\"temperature\":0,\"ignore_eos\":"
        "true,\"logprobs\":5";
    char body[512];
    snprintf(body, sizeof(body), "%s}", base);
    json_t *g = complete(&c, body);
    json_t *top0 = json_array_get(
        json_object_get(json_object_get(choice_at(g, 0), "logprobs"), "top_logprobs"), 0);
    ck_assert_int_ge((int)json_object_size(top0), 2);
    /* Ban token 7 and force token 9: every token is then 9. */
    snprintf(body, sizeof(body), "%s,\"logit_bias\":{\"9\":100,\"7\":-100}}", base);
    json_t *f = complete(&c, body);
    json_t *toks = json_object_get(json_object_get(choice_at(f, 0), "logprobs"), "tokens");
    ck_assert_int_eq((int)json_array_size(toks), 4);
    size_t len = 0;
    const char *piece = tokenizer_token_piece(c.tok, 9, false, &len);
    for (size_t k = 0; k < 4; k++)
        ck_assert(strlen(json_string_value(json_array_get(toks, k))) == len &&
                  memcmp(json_string_value(json_array_get(toks, k)), piece, len) == 0);
    /* The reported logprobs are the model's own (before the bias), as the sampler documents. */
    json_decref(f);
    json_decref(g);
    snprintf(body, sizeof(body), "%s,\"logit_bias\":{\"%d\":1}}", base,
             model_hparams(c.m)->n_vocab);
    complete_400(&c, "/v1/completions", body, "logit_bias");
    complete_400(&c, "/v1/chat/completions",
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"logit_bias\":{\"x\":1}}",
                 "logit_bias");
    core_stop(&c);
}
END_TEST

/* suffix needs fill-in-the-middle tokens: a 400 naming it without them; with them the prompt is
 * [BOS] PRE prefix SUF suffix MID. */
START_TEST(test_serve_core_suffix_fim)
{
    struct core c;
    core_start(&c);
    complete_400(&c, "/v1/completions", "{\"prompt\":\"def f(\",\"suffix\":\"return x\"}",
                 "suffix");
    json_t *plain = complete(&c, "{\"prompt\":[100,101],\"max_tokens\":1}");
    c.api.fim = (struct serve_api_fim){true, 10, 11, 12};
    json_t *j = complete(&c, "{\"prompt\":[100,101],\"suffix\":\"ab\",\"max_tokens\":1}");
    int32_t *sfx = NULL;
    size_t n_sfx = 0;
    ck_assert_int_eq(tokenizer_encode(c.tok, "ab", 2, false, false, &sfx, &n_sfx), 0);
    long bos = tokenizer_add_bos(c.tok) && tokenizer_bos(c.tok) >= 0;
    ck_assert_int_eq(usage_of(j, "prompt_tokens"), bos + 3 + 2 + (long)n_sfx);
    ck_assert_int_eq(usage_of(plain, "prompt_tokens"), 2);
    free(sfx);
    json_decref(j);
    json_decref(plain);
    /* The prompt ids serve_api builds, exactly. */
    struct api_request *r = NULL;
    struct api_error e;
    const char *body = "{\"prompt\":[100,101],\"suffix\":\"ab\"}";
    ck_assert_int_eq(api_request_parse(body, strlen(body), API_KIND_COMPLETION, NULL, &r, &e), 0);
    int32_t *ids = NULL;
    int n = 0;
    ck_assert_int_eq(serve_api_prompt_ids(&c.api, r, 0, &ids, &n, &e), 0);
    int k = 0;
    if (bos) ck_assert_int_eq(ids[k++], tokenizer_bos(c.tok));
    ck_assert_int_eq(ids[k++], 10);
    ck_assert_int_eq(ids[k++], 100);
    ck_assert_int_eq(ids[k++], 101);
    ck_assert_int_eq(ids[k++], 11);
    ck_assert_int_eq(ids[n - 1], 12);
    free(ids);
    api_request_free(r);
    core_stop(&c);
}
END_TEST

/* GET /v1/models/{id}: the model object for the served name, 404 in OpenAI's shape otherwise. */
START_TEST(test_serve_core_models_retrieve)
{
    struct core c;
    core_start(&c);
    struct reply r;
    http_do(c.port, "GET", "/v1/models/" CORE_MODEL, NULL, &r);
    ck_assert_int_eq(r.status, 200);
    json_t *j = body_json(&r);
    ck_assert_str_eq(json_string_value(json_object_get(j, "id")), CORE_MODEL);
    ck_assert_str_eq(json_string_value(json_object_get(j, "object")), "model");
    ck_assert_int_eq(json_integer_value(json_object_get(j, "max_model_len")), CORE_CTX);
    json_decref(j);
    reply_fini(&r);
    http_do(c.port, "GET", "/v1/models", NULL, &r);
    ck_assert_int_eq(r.status, 200);
    j = body_json(&r);
    ck_assert_str_eq(
        json_string_value(json_object_get(json_array_get(json_object_get(j, "data"), 0), "id")),
        CORE_MODEL);
    json_decref(j);
    reply_fini(&r);
    http_do(c.port, "GET", "/v1/models/nope", NULL, &r);
    ck_assert_int_eq(r.status, 404);
    j = body_json(&r);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "error"), "type")),
                     "invalid_request_error");
    json_decref(j);
    reply_fini(&r);
    core_stop(&c);
}
END_TEST

/* continuous_usage_stats: every chunk carries its choice's usage so far; chat's logprobs values
 * per chunk are OpenAI's ({"content":[],...} first, tokens, null last). */
START_TEST(test_serve_core_stream_usage_and_logprobs_shape)
{
    struct core c;
    core_start(&c);
    struct reply st;
    http_do(c.port, "POST", "/v1/completions",
            GREEDY_BODY ",\"stream\":true,\"stream_options\":{\"include_usage\":true,"
                        "\"continuous_usage_stats\":true},\"logprobs\":1}",
            &st);
    ck_assert_int_eq(st.status, 200);
    bool done = false;
    json_t *ev = sse_events(&st, &done);
    ck_assert(done);
    size_t i, n = json_array_size(ev);
    json_t *e;
    long prev = 0;
    json_array_foreach(ev, i, e)
    {
        json_t *u = json_object_get(e, "usage");
        ck_assert(json_is_object(u));
        long ct = (long)json_integer_value(json_object_get(u, "completion_tokens"));
        ck_assert(ct >= prev && ct <= 12);
        prev = ct;
        if (i + 1 < n) /* every choice chunk has a logprobs object */
            ck_assert(json_is_object(
                json_object_get(json_array_get(json_object_get(e, "choices"), 0), "logprobs")));
    }
    ck_assert_int_eq(prev, 12);
    json_decref(ev);
    reply_fini(&st);
    http_do(c.port, "POST", "/v1/chat/completions",
            "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":3,"
            "\"temperature\":0,\"ignore_eos\":true,\"logprobs\":true,\"stream\":true}",
            &st);
    ck_assert_int_eq(st.status, 200);
    ev = sse_events(&st, &done);
    n = json_array_size(ev);
    ck_assert_int_ge((int)n, 3);
    json_t *role = json_array_get(json_object_get(json_array_get(ev, 0), "choices"), 0);
    json_t *rl = json_object_get(role, "logprobs");
    ck_assert(json_is_array(json_object_get(rl, "content")));
    ck_assert_int_eq((int)json_array_size(json_object_get(rl, "content")), 0);
    json_t *fin = json_array_get(json_object_get(json_array_get(ev, n - 1), "choices"), 0);
    ck_assert(json_is_null(json_object_get(fin, "logprobs")));
    ck_assert_str_eq(json_string_value(json_object_get(fin, "finish_reason")), "length");
    for (i = 1; i + 1 < n; i++)
        ck_assert(json_is_object(json_object_get(
            json_array_get(json_object_get(json_array_get(ev, i), "choices"), 0), "logprobs")));
    json_decref(ev);
    reply_fini(&st);
    core_stop(&c);
}
END_TEST

/* ---------------------------------------------------------------- drain */

/* While draining new requests get 503 with Retry-After; stopping the loop then ends the stream in
 * flight with what it generated (finish_reason "length") and a proper end ([DONE]). */
START_TEST(test_serve_core_drain)
{
    struct core c;
    core_start(&c);
    int fd = tc_send(c.port, "POST", "/v1/completions", LONG_STREAM_BODY);
    char *raw = NULL;
    size_t len = 0;
    ck_assert(tc_read_until(fd, &raw, &len, "data: "));
    http_api_set_state(c.http, HTTP_API_DRAINING);
    struct reply r;
    http_do(c.port, "POST", "/v1/completions", GREEDY_BODY "}", &r);
    ck_assert_int_eq(r.status, 503);
    ck_assert_ptr_nonnull(strcasestr(r.head, "Retry-After: 1"));
    reply_fini(&r);
    http_do(c.port, "GET", "/health", NULL, &r);
    ck_assert_int_eq(r.status, 503);
    reply_fini(&r);
    ck_assert_int_eq(serve_loop_inflight(c.loop), 1); /* still generating */
    serve_loop_stop(c.loop);                          /* the drain timeout */
    struct reply st;
    tc_finish(fd, raw, len, &st);
    ck_assert_int_eq(st.status, 200);
    bool done = false;
    json_t *events = sse_events(&st, &done);
    ck_assert(done);
    const char *finish = NULL;
    char *text = sse_text(events, &finish);
    ck_assert_str_eq(finish, "length");
    free(text);
    json_decref(events);
    reply_fini(&st);
    core_wait_idle(&c);
    core_stop(&c);
}
END_TEST

/* ---------------------------------------------------------------- API keys and tenant isolation */

/* One request with an Authorization header (`auth` NULL: none; auth_len bytes, may hold a NUL). */
static void http_auth(int port, const char *path, const char *body, const char *auth,
                      size_t auth_len, struct reply *out)
{
    char extra[256];
    size_t n = 0;
    if (auth) {
        ck_assert(auth_len + 32 < sizeof(extra));
        memcpy(extra, "Authorization: ", 15);
        memcpy(extra + 15, auth, auth_len);
        memcpy(extra + 15 + auth_len, "\r\n", 2);
        n = 15 + auth_len + 2;
    }
    int fd = tc_send_with(port, body ? "POST" : "GET", path, body, extra, n);
    tc_finish(fd, NULL, 0, out);
}

static int http_auth_status(int port, const char *path, const char *body, const char *auth)
{
    struct reply r;
    http_auth(port, path, body, auth, auth ? strlen(auth) : 0, &r);
    int st = r.status;
    if (st == 401) {
        json_t *j = body_json(&r);
        ck_assert_str_eq(error_code(j), "invalid_api_key");
        json_decref(j);
    }
    reply_fini(&r);
    return st;
}

static struct serve_auth *two_keys(void)
{
    struct serve_auth *a;
    char err[256] = "";
    ck_assert_int_eq(serve_auth_new(&a), 0);
    ck_assert_msg(serve_auth_add(a, "key-a\nkey-b", 11, "test", err, sizeof(err)) == 0, "%s", err);
    return a;
}

/* Several keys over real HTTP: each works on every /v1 route; none, a wrong one, a prefix, or a
 * key followed by a NUL byte and junk (the finding) do not. */
START_TEST(test_serve_core_api_keys)
{
    struct serve_auth *a = two_keys();
    struct core c;
    core_start_with(&c, "chatml", false, a, SERVE_CACHE_SCOPE_GLOBAL);
    const char *body = "{\"prompt\":[1,2,3],\"max_tokens\":2,\"temperature\":0}";
    ck_assert_int_eq(http_auth_status(c.port, "/v1/completions", body, NULL), 401);
    ck_assert_int_eq(http_auth_status(c.port, "/v1/completions", body, "Bearer key-c"), 401);
    ck_assert_int_eq(http_auth_status(c.port, "/v1/completions", body, "Bearer key-"), 401);
    ck_assert_int_eq(http_auth_status(c.port, "/v1/models", NULL, "Basic key-a"), 401);
    ck_assert_int_eq(http_auth_status(c.port, "/v1/completions", body, "Bearer key-a"), 200);
    ck_assert_int_eq(http_auth_status(c.port, "/v1/completions", body, "bearer key-b"), 200);
    ck_assert_int_eq(http_auth_status(c.port, "/v1/models", NULL, "Bearer key-b"), 200);
    ck_assert_int_eq(http_auth_status(c.port, "/health", NULL, NULL), 200); /* probes need none */
    struct reply r;
    static const char nul[] = "Bearer key-a\0junk";
    http_auth(c.port, "/v1/completions", body, nul, sizeof(nul) - 1, &r);
    ck_assert_msg(r.status == 400 || r.status == 401, "a NUL after the key: %d", r.status);
    reply_fini(&r);
    core_wait_idle(&c);
    core_stop(&c);
    serve_auth_free(a);
}
END_TEST

/* cached_tokens of a 40-token prompt (two full 16-token blocks can be cached) sent with `auth`. */
static long long cached_tokens(int port, const char *auth, const char *salt)
{
    char body[512];
    snprintf(body, sizeof(body),
             "{\"prompt\":[11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,"
             "34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50],\"max_tokens\":1,"
             "\"temperature\":0%s%s%s}",
             salt ? ",\"cache_salt\":\"" : "", salt ? salt : "", salt ? "\"" : "");
    struct reply r;
    http_auth(port, "/v1/completions", body, auth, strlen(auth), &r);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.body);
    json_t *j = body_json(&r);
    json_t *u = json_object_get(j, "usage");
    long long n = json_integer_value(
        json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens"));
    ck_assert_int_eq(json_integer_value(json_object_get(u, "prompt_tokens")), 40);
    json_decref(j);
    reply_fini(&r);
    return n;
}

/* The tenant probe: tenant B guesses tenant A's prompt and reads cached_tokens. With the
 * global scope the guess shows (32 cached tokens), with --prefix-cache-scope key it does not (0),
 * while each tenant still reuses its own prefix, and a client's cache_salt still splits it. */
START_TEST(test_serve_core_prefix_cache_scope)
{
    for (int per_key = 0; per_key <= 1; per_key++) {
        struct serve_auth *a = two_keys();
        struct core c;
        core_start_with(&c, "chatml", false, a,
                        per_key ? SERVE_CACHE_SCOPE_KEY : SERVE_CACHE_SCOPE_GLOBAL);
        ck_assert_int_eq(cached_tokens(c.port, "Bearer key-a", NULL), 0);
        core_wait_idle(&c);
        ck_assert_int_eq(cached_tokens(c.port, "Bearer key-a", NULL), 32); /* its own: reused */
        core_wait_idle(&c);
        long long probe = cached_tokens(c.port, "Bearer key-b", NULL);
        ck_assert_msg(probe == (per_key ? 0 : 32), "scope %s: tenant B sees %lld cached tokens",
                      per_key ? "key" : "global", probe);
        core_wait_idle(&c);
        ck_assert_int_eq(cached_tokens(c.port, "Bearer key-b", NULL), 32);
        core_wait_idle(&c);
        ck_assert_int_eq(cached_tokens(c.port, "Bearer key-a", "s1"), 0); /* a salt of its own */
        core_wait_idle(&c);
        ck_assert_int_eq(cached_tokens(c.port, "Bearer key-a", "s1"), 32);
        core_wait_idle(&c);
        /* B naming A's salt does not reach A's blocks under the key scope */
        ck_assert_int_eq(cached_tokens(c.port, "Bearer key-b", "s1"), per_key ? 0 : 32);
        core_wait_idle(&c);
        core_stop(&c);
        serve_auth_free(a);
    }
}
END_TEST

/* --prefix-cache-scope salt, for a gateway that authenticates and sets a salt per tenant: a
 * request without cache_salt (or with an empty one) is a 400 naming cache_salt, on both
 * endpoints; tenants with different salts cannot see each other's prefixes whatever key they
 * use (here one shared key), and the same salt is reused. */
START_TEST(test_serve_core_prefix_cache_scope_salt)
{
    struct serve_auth *a = two_keys();
    struct core c;
    core_start_with(&c, "chatml", false, a, SERVE_CACHE_SCOPE_SALT);
    static const char *const missing[] = {
        "{\"prompt\":[11,12,13],\"max_tokens\":1}",
        "{\"prompt\":[11,12,13],\"max_tokens\":1,\"cache_salt\":\"\"}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":1}",
    };
    for (size_t i = 0; i < sizeof(missing) / sizeof(missing[0]); i++) {
        const char *path =
            strstr(missing[i], "messages") ? "/v1/chat/completions" : "/v1/completions";
        struct reply r;
        http_auth(c.port, path, missing[i], "Bearer key-a", 12, &r);
        ck_assert_msg(r.status == 400, "%s: %d %s", missing[i], r.status, r.body);
        json_t *j = body_json(&r);
        json_t *e = json_object_get(j, "error");
        ck_assert_str_eq(json_string_value(json_object_get(e, "param")), "cache_salt");
        ck_assert_str_eq(json_string_value(json_object_get(e, "type")), "invalid_request_error");
        ck_assert_ptr_nonnull(
            strstr(json_string_value(json_object_get(e, "message")), "cache_salt"));
        json_decref(j);
        reply_fini(&r);
    }
    ck_assert_int_eq(cached_tokens(c.port, "Bearer key-a", "tenant-1"), 0);
    core_wait_idle(&c);
    ck_assert_int_eq(cached_tokens(c.port, "Bearer key-a", "tenant-1"), 32); /* its own: reused */
    core_wait_idle(&c);
    ck_assert_int_eq(cached_tokens(c.port, "Bearer key-a", "tenant-2"), 0); /* the probe: hidden */
    core_wait_idle(&c);
    ck_assert_int_eq(cached_tokens(c.port, "Bearer key-b", "tenant-1"), 32); /* the salt decides */
    core_wait_idle(&c);
    core_stop(&c);
    serve_auth_free(a);
}
END_TEST

/* ---------------------------------------------------------------- structured outputs */

#define SCHEMA_BODY                                                                                \
    "{\"messages\":[{\"role\":\"user\",\"content\":\"a person\"}],\"max_tokens\":3000,"            \
    "\"temperature\":1,\"seed\":11,\"response_format\":{\"type\":\"json_schema\","                 \
    "\"json_schema\":{\"name\":\"person\",\"strict\":true,\"schema\":{\"type\":\"object\","        \
    "\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":5},\"age\":{\"type\":"            \
    "\"integer\"},\"pet\":{\"enum\":[\"cat\",\"dog\",null]},\"tags\":{\"type\":\"array\","         \
    "\"items\":{\"type\":\"boolean\"},\"maxItems\":3}},\"required\":[\"name\",\"age\",\"pet\","    \
    "\"tags\"],\"additionalProperties\":false}}}"

static void expect_person(const char *text)
{
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    ck_assert_msg(j != NULL, "not JSON: %s (%s)", text, je.text);
    ck_assert_int_eq((int)json_object_size(j), 4);
    ck_assert(json_is_string(json_object_get(j, "name")));
    ck_assert(json_is_integer(json_object_get(j, "age")));
    const json_t *pet = json_object_get(j, "pet");
    ck_assert(json_is_null(pet) || !strcmp(json_string_value(pet), "cat") ||
              !strcmp(json_string_value(pet), "dog"));
    ck_assert_int_le((int)json_array_size(json_object_get(j, "tags")), 3);
    json_decref(j);
}

/* A random-weight model under a schema: the mask, not the model, makes every answer valid, and
 * a stream carries exactly the text of the whole answer. */
START_TEST(test_serve_core_structured_json_schema)
{
    struct core c;
    core_start(&c);
    struct reply whole, st;
    http_do(c.port, "POST", "/v1/chat/completions", SCHEMA_BODY ",\"n\":2}", &whole);
    ck_assert_msg(whole.status == 200, "%d %s", whole.status, whole.body);
    json_t *wj = body_json(&whole);
    json_t *ch = json_object_get(wj, "choices");
    ck_assert_int_eq((int)json_array_size(ch), 2);
    for (size_t i = 0; i < 2; i++) {
        json_t *choice = json_array_get(ch, i);
        ck_assert_str_eq(json_string_value(json_object_get(choice, "finish_reason")), "stop");
        expect_person(
            json_string_value(json_object_get(json_object_get(choice, "message"), "content")));
    }
    http_do(c.port, "POST", "/v1/chat/completions", SCHEMA_BODY ",\"stream\":true}", &st);
    ck_assert_int_eq(st.status, 200);
    bool done = false;
    json_t *events = sse_events(&st, &done);
    ck_assert(done);
    const char *finish = NULL;
    char *text = sse_text(events, &finish);
    ck_assert_str_eq(finish, "stop");
    ck_assert_str_eq(text, json_string_value(json_object_get(
                               json_object_get(json_array_get(ch, 0), "message"), "content")));
    ck_assert_uint_eq(c.grammars.misses, 1); /* the same schema: compiled once */
    ck_assert_uint_eq(c.grammars.hits, 1);
    free(text);
    json_decref(events);
    json_decref(wj);
    reply_fini(&whole);
    reply_fini(&st);
    /* json_object and guided_choice */
    struct reply r;
    http_do(c.port, "POST", "/v1/chat/completions",
            "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":3000,\"seed\":3,"
            "\"response_format\":{\"type\":\"json_object\"}}",
            &r);
    ck_assert_int_eq(r.status, 200);
    json_t *j = body_json(&r);
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    if (!strcmp(json_string_value(json_object_get(c0, "finish_reason")), "stop")) {
        json_t *o = json_loads(
            json_string_value(json_object_get(json_object_get(c0, "message"), "content")), 0, NULL);
        ck_assert(json_is_object(o));
        json_decref(o);
    }
    json_decref(j);
    reply_fini(&r);
    http_do(c.port, "POST", "/v1/completions",
            "{\"prompt\":\"x\",\"max_tokens\":50,\"guided_choice\":[\"red\",\"green\"]}", &r);
    ck_assert_int_eq(r.status, 200);
    j = body_json(&r);
    c0 = json_array_get(json_object_get(j, "choices"), 0);
    const char *t = json_string_value(json_object_get(c0, "text"));
    ck_assert_msg(!strcmp(t, "red") || !strcmp(t, "green"), "%s", t);
    ck_assert_str_eq(json_string_value(json_object_get(c0, "finish_reason")), "stop");
    json_decref(j);
    reply_fini(&r);
    core_stop(&c);
}
END_TEST

static void expect_400(struct core *c, const char *path, const char *body, const char *param,
                       const char *msg)
{
    struct reply r;
    http_do(c->port, "POST", path, body, &r);
    ck_assert_msg(r.status == 400, "%d %s", r.status, r.body);
    json_t *j = body_json(&r);
    json_t *e = json_object_get(j, "error");
    ck_assert_str_eq(json_string_value(json_object_get(e, "param")), param);
    ck_assert_msg(strstr(json_string_value(json_object_get(e, "message")), msg), "%s", r.body);
    json_decref(j);
    reply_fini(&r);
}

START_TEST(test_serve_core_structured_errors)
{
    struct core c;
    core_start(&c);
    expect_400(
        &c, "/v1/chat/completions",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":"
        "\"json_schema\",\"json_schema\":{\"name\":\"n\",\"schema\":{\"type\":\"string\","
        "\"pattern\":\"^a(?!b)\"}}}}",
        "response_format.json_schema.schema", "'pattern'");
    expect_400(&c, "/v1/completions", "{\"prompt\":\"x\",\"guided_regex\":\"(a\"}", "guided_regex",
               "unterminated group");
    expect_400(
        &c, "/v1/chat/completions",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":"
        "\"json_schema\",\"json_schema\":7}}",
        "response_format.json_schema", "must be an object");
    expect_400(
        &c, "/v1/chat/completions",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":"
        "\"yaml\"}}",
        "response_format.type", "json_schema");
    expect_400(&c, "/v1/completions", "{\"prompt\":\"x\",\"guided_grammar\":\"root ::= (\"}",
               "guided_grammar", "cannot compile");
    expect_400(&c, "/v1/completions", "{\"prompt\":\"x\",\"guided_json\":\"{not json\"}",
               "guided_json", "not valid JSON");
    expect_400(&c, "/v1/completions",
               "{\"prompt\":\"x\",\"guided_choice\":[\"a\"],\"guided_grammar\":\"root ::= "
               "\\\"a\\\"\"}",
               "guided_choice", "one structured-output");
    ck_assert_int_eq(serve_loop_inflight(c.loop), 0);
    core_stop(&c);
}
END_TEST

/* A random-weight model under pattern, format and numeric-range keywords and guided_regex: the
 * mask makes every answer match, checked here by POSIX regexec and arithmetic (independent of the
 * grammar compiler). */
#define RANGE_SCHEMA                                                                               \
    "{\"type\":\"object\",\"properties\":{\"code\":{\"type\":\"string\",\"pattern\":"              \
    "\"^[A-Z]{2}-\\\\d{3}$\"},\"stars\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":5},"       \
    "\"t\":{\"type\":\"integer\",\"minimum\":-40,\"exclusiveMaximum\":125},\"score\":{\"type\":"   \
    "\"number\",\"minimum\":0,\"maximum\":100},\"p\":{\"type\":\"number\",\"exclusiveMinimum\":0}" \
    ","                                                                                            \
    "\"day\":{\"type\":\"string\",\"format\":\"date\"}},\"required\":[\"code\",\"stars\",\"t\","   \
    "\"score\",\"p\",\"day\"],\"additionalProperties\":false}"

static bool posix_match(const char *ere, const char *s)
{
    regex_t re;
    ck_assert_int_eq(regcomp(&re, ere, REG_EXTENDED | REG_NOSUB), 0);
    bool ok = regexec(&re, s, 0, NULL, 0) == 0;
    regfree(&re);
    return ok;
}

static void expect_ranged(const char *text)
{
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    ck_assert_msg(j != NULL, "not JSON: %s (%s)", text, je.text);
    const char *code = json_string_value(json_object_get(j, "code"));
    ck_assert_msg(code && posix_match("^[A-Z]{2}-[0-9]{3}$", code), "%s", text);
    const json_t *stars = json_object_get(j, "stars"), *t = json_object_get(j, "t");
    ck_assert_msg(json_is_integer(stars) && json_integer_value(stars) >= 1 &&
                      json_integer_value(stars) <= 5,
                  "%s", text);
    ck_assert_msg(json_is_integer(t) && json_integer_value(t) >= -40 && json_integer_value(t) < 125,
                  "%s", text);
    const json_t *score = json_object_get(j, "score"), *p = json_object_get(j, "p");
    ck_assert_msg(json_is_number(score) && json_number_value(score) >= 0 &&
                      json_number_value(score) <= 100,
                  "%s", text);
    ck_assert_msg(json_is_number(p) && json_number_value(p) > 0, "%s", text);
    const char *day = json_string_value(json_object_get(j, "day"));
    int y, m, d;
    ck_assert_msg(day && posix_match("^[0-9]{4}-[0-9]{2}-[0-9]{2}$", day) &&
                      sscanf(day, "%d-%d-%d", &y, &m, &d) == 3,
                  "%s", text);
    static const int mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    ck_assert_msg(y >= 1 && m >= 1 && m <= 12 && d >= 1 &&
                      d <= (m == 2 && !leap ? 28 : mdays[m - 1]),
                  "%s", text);
    ck_assert_int_eq((int)json_object_size(j), 6);
    json_decref(j);
}

START_TEST(test_serve_core_structured_regex_and_ranges)
{
    struct core c;
    core_start(&c);
    char body[2048];
    for (int seed = 1; seed <= 3; seed++) {
        snprintf(body, sizeof(body),
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"an item\"}],\"max_tokens\":3000,"
                 "\"temperature\":1,\"seed\":%d,\"n\":2,\"response_format\":{\"type\":"
                 "\"json_schema\",\"json_schema\":{\"name\":\"item\",\"strict\":true,\"schema\":"
                 "%s}}}",
                 seed, RANGE_SCHEMA);
        struct reply r;
        http_do(c.port, "POST", "/v1/chat/completions", body, &r);
        ck_assert_msg(r.status == 200, "%d %s", r.status, r.body);
        json_t *j = body_json(&r);
        json_t *ch = json_object_get(j, "choices");
        ck_assert_int_eq((int)json_array_size(ch), 2);
        for (size_t i = 0; i < 2; i++) {
            json_t *choice = json_array_get(ch, i);
            ck_assert_str_eq(json_string_value(json_object_get(choice, "finish_reason")), "stop");
            expect_ranged(
                json_string_value(json_object_get(json_object_get(choice, "message"), "content")));
        }
        json_decref(j);
        reply_fini(&r);
    }
    static const char *const regex_bodies[] = {
        "{\"prompt\":\"x\",\"max_tokens\":200,\"temperature\":1,\"seed\":5,\"n\":3,"
        "\"guided_regex\":\"^(yes|no)-[0-9]{2,4}(\\\\.[a-z]{1,3})?$\"}",
        "{\"prompt\":\"x\",\"max_tokens\":200,\"temperature\":1,\"seed\":6,\"n\":3,"
        "\"structured_outputs\":{\"regex\":\"(yes|no)-[0-9]{2,4}(\\\\.[a-z]{1,3})?\"}}",
    };
    for (size_t b = 0; b < 2; b++) {
        struct reply r;
        http_do(c.port, "POST", "/v1/completions", regex_bodies[b], &r);
        ck_assert_msg(r.status == 200, "%d %s", r.status, r.body);
        json_t *j = body_json(&r);
        json_t *ch = json_object_get(j, "choices");
        ck_assert_int_eq((int)json_array_size(ch), 3);
        for (size_t i = 0; i < 3; i++) {
            json_t *choice = json_array_get(ch, i);
            const char *t = json_string_value(json_object_get(choice, "text"));
            ck_assert_str_eq(json_string_value(json_object_get(choice, "finish_reason")), "stop");
            ck_assert_msg(posix_match("^(yes|no)-[0-9]{2,4}(\\.[a-z]{1,3})?$", t), "%s", t);
        }
        json_decref(j);
        reply_fini(&r);
    }
    core_stop(&c);
}
END_TEST

/* A grammar that never completes runs to max_tokens ("length"); a constrained stream cancelled
 * mid-way frees everything, and the next constrained request is answered as usual. */
START_TEST(test_serve_core_structured_length_and_cancel)
{
    struct core c;
    core_start(&c);
    struct reply r;
    http_do(c.port, "POST", "/v1/completions",
            "{\"prompt\":\"x\",\"max_tokens\":20,\"guided_grammar\":\"root ::= \\\"ab\\\" root\"}",
            &r);
    ck_assert_int_eq(r.status, 200);
    json_t *j = body_json(&r);
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(c0, "finish_reason")), "length");
    const char *t = json_string_value(json_object_get(c0, "text"));
    for (size_t i = 0; t[i]; i++) ck_assert_int_eq(t[i], "ab"[i % 2]);
    json_decref(j);
    reply_fini(&r);
    int fd = tc_send(c.port, "POST", "/v1/completions",
                     "{\"prompt\":\"x\",\"max_tokens\":8000,\"stream\":true,\"guided_grammar\":"
                     "\"root ::= [a-z] root\"}");
    char *raw = NULL;
    size_t len = 0;
    ck_assert(tc_read_until(fd, &raw, &len, "data: "));
    close(fd);
    free(raw);
    core_wait_idle(&c);
    metric_wait(c.port, "cinfer_kv_cache_usage_ratio", NULL, 0);
    ck_assert(metric(c.port, "cinfer_requests_total", "finished_reason=\"abort\"") == 1);
    http_do(c.port, "POST", "/v1/completions",
            "{\"prompt\":\"x\",\"max_tokens\":50,\"guided_choice\":[\"yes\",\"no\"]}", &r);
    ck_assert_int_eq(r.status, 200);
    j = body_json(&r);
    t = json_string_value(
        json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text"));
    ck_assert_msg(!strcmp(t, "yes") || !strcmp(t, "no"), "%s", t);
    json_decref(j);
    reply_fini(&r);
    core_stop(&c);
}
END_TEST

/* A streamed chat choice assembled as the OpenAI SDK does: content deltas joined, and per call
 * index the id, type and name of its first delta.tool_calls piece and its argument fragments
 * joined. Checks the pieces' shape: the first of a call has id, type "function", the name and
 * empty arguments; later ones only the index and an arguments fragment; no content after a call. */
#define STREAM_CALLS_MAX 8
struct stream_choice {
    struct buf content;
    int content_deltas;
    int n_calls;
    char name[STREAM_CALLS_MAX][64];
    struct buf args[STREAM_CALLS_MAX];
    int arg_deltas[STREAM_CALLS_MAX];
    const char *finish;
};

static void stream_choice_fini(struct stream_choice *sc)
{
    buf_fini(&sc->content);
    for (int k = 0; k < STREAM_CALLS_MAX; k++) buf_fini(&sc->args[k]);
}

static void stream_assemble(json_t *events, int index, struct stream_choice *sc)
{
    memset(sc, 0, sizeof(*sc));
    buf_init(&sc->content, 0);
    for (int k = 0; k < STREAM_CALLS_MAX; k++) buf_init(&sc->args[k], 0);
    size_t i;
    json_t *ev;
    json_array_foreach(events, i, ev)
    {
        json_t *ch = json_array_get(json_object_get(ev, "choices"), 0);
        if (!ch || json_integer_value(json_object_get(ch, "index")) != index) continue;
        const char *fr = json_string_value(json_object_get(ch, "finish_reason"));
        if (fr) sc->finish = fr;
        json_t *d = json_object_get(ch, "delta");
        const char *t = json_string_value(json_object_get(d, "content"));
        if (t && *t) {
            ck_assert_msg(sc->n_calls == 0, "content after a tool call");
            buf_puts(&sc->content, t);
            sc->content_deltas++;
        }
        json_t *tc = json_object_get(d, "tool_calls");
        if (!tc) continue;
        ck_assert_int_eq((int)json_array_size(tc), 1);
        json_t *call = json_array_get(tc, 0), *fn = json_object_get(call, "function");
        int k = (int)json_integer_value(json_object_get(call, "index"));
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        ck_assert_ptr_nonnull(args);
        if (k == sc->n_calls) { /* a new call: its id, type and name, no arguments yet */
            ck_assert_int_lt(k, STREAM_CALLS_MAX);
            const char *id = json_string_value(json_object_get(call, "id"));
            ck_assert_msg(id && !strncmp(id, "call_", 5), "call %d without an id", k);
            ck_assert_str_eq(json_string_value(json_object_get(call, "type")), "function");
            const char *name = json_string_value(json_object_get(fn, "name"));
            ck_assert_ptr_nonnull(name);
            snprintf(sc->name[k], sizeof(sc->name[k]), "%s", name);
            ck_assert_str_eq(args, "");
            sc->n_calls++;
            continue;
        }
        ck_assert_int_eq(k, sc->n_calls - 1); /* a fragment of the latest call */
        ck_assert_ptr_null(json_object_get(call, "id"));
        ck_assert_ptr_null(json_object_get(fn, "name"));
        ck_assert_int_gt((int)strlen(args), 0);
        buf_puts(&sc->args[k], args);
        sc->arg_deltas[k]++;
    }
}

#define TOOLS_BODY                                                                                 \
    "{\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"}],\"max_tokens\":3000,\"seed\":5," \
    "\"parallel_tool_calls\":false,\"tool_choice\":\"required\",\"tools\":[{\"type\":"             \
    "\"function\","                                                                                \
    "\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":{"  \
    "\"city\":{\"type\":\"string\",\"maxLength\":6}},\"required\":[\"city\"]}}}]"

/* tool_choice required: message.tool_calls (content null, finish_reason tool_calls) whole, and a
 * stream whose delta.tool_calls carries the same call. */
START_TEST(test_serve_core_tool_calls)
{
    struct core c;
    core_start(&c);
    struct reply r, st;
    http_do(c.port, "POST", "/v1/chat/completions", TOOLS_BODY "}", &r);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.body);
    json_t *j = body_json(&r);
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(c0, "finish_reason")), "tool_calls");
    json_t *msg = json_object_get(c0, "message");
    ck_assert(json_is_null(json_object_get(msg, "content")));
    json_t *calls = json_object_get(msg, "tool_calls");
    ck_assert_int_eq((int)json_array_size(calls), 1);
    json_t *fn = json_object_get(json_array_get(calls, 0), "function");
    ck_assert_str_eq(json_string_value(json_object_get(fn, "name")), "get_weather");
    json_t *args = json_loads(json_string_value(json_object_get(fn, "arguments")), 0, NULL);
    ck_assert(json_is_string(json_object_get(args, "city")));
    json_decref(args);
    http_do(c.port, "POST", "/v1/chat/completions", TOOLS_BODY ",\"stream\":true}", &st);
    ck_assert_int_eq(st.status, 200);
    bool done = false;
    json_t *events = sse_events(&st, &done);
    ck_assert(done);
    const char *finish = NULL;
    char *text = sse_text(events, &finish);
    ck_assert_str_eq(finish, "tool_calls");
    ck_assert_str_eq(text, "");
    /* the call streams: its name first, then its arguments in fragments that join to the
     * non-streamed arguments (same seed, same call) */
    struct stream_choice sc;
    stream_assemble(events, 0, &sc);
    ck_assert_int_eq(sc.n_calls, 1);
    ck_assert_str_eq(sc.name[0], "get_weather");
    ck_assert_str_eq(buf_cstr(&sc.args[0]), json_string_value(json_object_get(fn, "arguments")));
    ck_assert_int_gt(sc.arg_deltas[0], 1);
    stream_choice_fini(&sc);
    free(text);
    json_decref(events);
    json_decref(j);
    reply_fini(&r);
    reply_fini(&st);
    core_stop(&c);
}
END_TEST

/* A thinking model's template (its generation prompt opens <think>, as DeepSeek-R1's does); the
 * answer is forced through a grammar to "<think><reasoning></think><answer>" (a constrained
 * answer starts outside the block, whatever the prompt ended with). */
#define THINK_TEMPLATE                                                                             \
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"     \
    "<|im_start|>assistant\n<think>\n"
#define THINK_BODY                                                                                 \
    "{\"messages\":[{\"role\":\"user\",\"content\":\"2+2?\"}],\"max_tokens\":200,\"seed\":2,"      \
    "\"guided_grammar\":\"root ::= \\\"<think>\\\" [a-z]{3,6} \\\"</think>\\\" [a-z]{2,4}\""

START_TEST(test_serve_core_reasoning_content)
{
    struct core c;
    core_start_with(&c, THINK_TEMPLATE, true, NULL, SERVE_CACHE_SCOPE_GLOBAL);
    struct reply r, st;
    http_do(c.port, "POST", "/v1/chat/completions", THINK_BODY "}", &r);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.body);
    json_t *j = body_json(&r);
    json_t *msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    const char *reasoning = json_string_value(json_object_get(msg, "reasoning_content"));
    const char *content = json_string_value(json_object_get(msg, "content"));
    ck_assert_msg(reasoning && content, "%s", r.body);
    ck_assert_int_ge((int)strlen(reasoning), 3);
    ck_assert_int_ge((int)strlen(content), 2);
    ck_assert_ptr_null(strchr(content, '<'));
    json_t *u = json_object_get(j, "usage");
    long rt = (long)json_integer_value(
        json_object_get(json_object_get(u, "completion_tokens_details"), "reasoning_tokens"));
    ck_assert_int_gt(rt, 0);
    ck_assert_int_lt(rt, (long)json_integer_value(json_object_get(u, "completion_tokens")));
    /* streamed: the reasoning deltas and content deltas join to the same two texts */
    http_do(c.port, "POST", "/v1/chat/completions", THINK_BODY ",\"stream\":true}", &st);
    ck_assert_int_eq(st.status, 200);
    bool done = false;
    json_t *events = sse_events(&st, &done);
    const char *finish = NULL;
    char *text = sse_text(events, &finish);
    ck_assert_str_eq(text, content);
    struct buf rs;
    buf_init(&rs, 0);
    size_t i;
    json_t *ev;
    json_array_foreach(events, i, ev)
    {
        json_t *d = json_object_get(json_array_get(json_object_get(ev, "choices"), 0), "delta");
        const char *t = json_string_value(json_object_get(d, "reasoning_content"));
        if (t) buf_puts(&rs, t);
    }
    ck_assert_str_eq(buf_cstr(&rs), reasoning);
    buf_fini(&rs);
    free(text);
    json_decref(events);
    json_decref(j);
    reply_fini(&r);
    reply_fini(&st);
    /* unconstrained after a prompt that opened the block: all reasoning until </think> */
    http_do(c.port, "POST", "/v1/chat/completions",
            "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":8,"
            "\"temperature\":0,\"ignore_eos\":true}",
            &r);
    j = body_json(&r);
    msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    reasoning = json_string_value(json_object_get(msg, "reasoning_content"));
    ck_assert_msg(reasoning && strlen(reasoning) > 0, "%s", r.body);
    ck_assert_msg(strstr(reasoning, "</think>") == NULL, "%s", r.body);
    u = json_object_get(j, "usage");
    ck_assert_int_eq(json_integer_value(json_object_get(
                         json_object_get(u, "completion_tokens_details"), "reasoning_tokens")),
                     8);
    json_decref(j);
    reply_fini(&r);
    core_stop(&c);
    /* the split off: the raw text, tag included, is the content */
    core_start_with(&c, THINK_TEMPLATE, false, NULL, SERVE_CACHE_SCOPE_GLOBAL);
    http_do(c.port, "POST", "/v1/chat/completions", THINK_BODY "}", &r);
    j = body_json(&r);
    msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    ck_assert_ptr_null(json_object_get(msg, "reasoning_content"));
    ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(msg, "content")), "</think>"));
    json_decref(j);
    reply_fini(&r);
    core_stop(&c);
}
END_TEST

/* tool_choice auto: the answer is free text searched for calls; forced here through a grammar
 * into the Hermes form, text first, so the parse of content + <tool_call> blocks is exercised. */
START_TEST(test_serve_core_tool_calls_auto)
{
    struct core c;
    core_start(&c);
    static const char body[] =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":200,\"n\":2,"
        "\"seed\":7,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"guided_"
        "grammar\":"
        "\"root ::= [a-z]{6,10} \\\"<tool_call>{\\\\\\\"name\\\\\\\": \\\\\\\"f\\\\\\\", "
        "\\\\\\\"arguments\\\\\\\": {\\\\\\\"k\\\\\\\": \\\" [0-9] \\\"}}</tool_call>\\\"\"";
    struct reply r;
    char full[1024];
    snprintf(full, sizeof(full), "%s}", body);
    http_do(c.port, "POST", "/v1/chat/completions", full, &r);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.body);
    json_t *j = body_json(&r);
    for (size_t i = 0; i < 2; i++) {
        json_t *ch = json_array_get(json_object_get(j, "choices"), i);
        ck_assert_str_eq(json_string_value(json_object_get(ch, "finish_reason")), "tool_calls");
        json_t *msg = json_object_get(ch, "message");
        const char *content = json_string_value(json_object_get(msg, "content"));
        ck_assert_msg(content && strlen(content) >= 1 && !strchr(content, '<'), "%s", r.body);
        json_t *fn =
            json_object_get(json_array_get(json_object_get(msg, "tool_calls"), 0), "function");
        ck_assert_str_eq(json_string_value(json_object_get(fn, "name")), "f");
        ck_assert_int_eq((int)strlen(json_string_value(json_object_get(fn, "arguments"))), 7);
    }
    reply_fini(&r);
    /* streamed, same seed */
    snprintf(full, sizeof(full), "%s,\"stream\":true}", body);
    struct reply st;
    http_do(c.port, "POST", "/v1/chat/completions", full, &st);
    ck_assert_int_eq(st.status, 200);
    bool done = false;
    json_t *events = sse_events(&st, &done);
    ck_assert(done);
    /* each choice: its text first in several content deltas (not held until the end), then the
     * call, name then argument fragments, that join to the non-streamed answer of that choice */
    for (int k = 0; k < 2; k++) {
        struct stream_choice sc;
        stream_assemble(events, k, &sc);
        json_t *msg =
            json_object_get(json_array_get(json_object_get(j, "choices"), (size_t)k), "message");
        json_t *fn =
            json_object_get(json_array_get(json_object_get(msg, "tool_calls"), 0), "function");
        ck_assert_str_eq(sc.finish, "tool_calls");
        ck_assert_str_eq(buf_cstr(&sc.content), json_string_value(json_object_get(msg, "content")));
        ck_assert_int_gt(sc.content_deltas, 1);
        ck_assert_int_eq(sc.n_calls, 1);
        ck_assert_str_eq(sc.name[0], "f");
        ck_assert_str_eq(buf_cstr(&sc.args[0]),
                         json_string_value(json_object_get(fn, "arguments")));
        ck_assert_int_gt(sc.arg_deltas[0], 1);
        stream_choice_fini(&sc);
    }
    json_decref(j);
    json_decref(events);
    reply_fini(&st);
    core_stop(&c);
}
END_TEST

/* Every logprobs.content list of choice `index`'s chunks, joined (new); a chunk carrying a
 * tool call has no logprobs (null). */
static json_t *stream_logprobs(json_t *events, int index)
{
    json_t *all = json_array();
    size_t i;
    json_t *ev;
    json_array_foreach(events, i, ev)
    {
        json_t *ch = json_array_get(json_object_get(ev, "choices"), 0);
        if (!ch || json_integer_value(json_object_get(ch, "index")) != index) continue;
        json_t *lp = json_object_get(ch, "logprobs");
        if (json_object_get(json_object_get(ch, "delta"), "tool_calls")) {
            ck_assert(json_is_null(lp));
            continue;
        }
        json_t *content = json_object_get(lp, "content");
        if (content) ck_assert_int_eq(json_array_extend(all, content), 0);
    }
    return all;
}

/* The tokens of a logprobs.content list, joined (new). */
static char *lp_text(const json_t *content)
{
    struct buf b;
    buf_init(&b, 0);
    size_t i;
    json_t *t;
    json_array_foreach(content, i, t) buf_puts(&b, json_string_value(json_object_get(t, "token")));
    char *s = strdup(buf_cstr(&b));
    buf_fini(&b);
    return s;
}

/* The tokens listed are those whose text starts in `text` (what the message holds, reasoning
 * and content): their text is `text`, or `text` and the rest of the last token, which began in
 * it and went on into the call. */
static void lp_covers(const json_t *content, const char *text)
{
    char *joined = lp_text(content);
    size_t n = strlen(text), nj = strlen(joined);
    ck_assert_msg(nj >= n && !strncmp(joined, text, n), "tokens \"%s\", text \"%s\"", joined, text);
    if (nj > n) {
        const char *last = json_string_value(
            json_object_get(json_array_get(content, json_array_size(content) - 1), "token"));
        ck_assert_msg(nj - strlen(last) < n, "tokens \"%s\" go past \"%s\"", joined, text);
    }
    free(joined);
}

#define TOOLS_LP_HEAD                                                                              \
    "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":200,\"n\":2,"            \
    "\"seed\":7,\"logprobs\":true,\"top_logprobs\":2,\"tools\":[{\"type\":\"function\","           \
    "\"function\":{\"name\":\"f\"}}]"
#define TOOLS_LP_CALL                                                                              \
    "\\\"<tool_call>{\\\\\\\"name\\\\\\\": \\\\\\\"f\\\\\\\", \\\\\\\"arguments\\\\\\\": "         \
    "{\\\\\\\"k\\\\\\\": \\\" [0-9] \\\"}}</tool_call>\\\""

/* Chat with tools and logprobs (OpenAI's logprobs.content lists "message content tokens"): the
 * whole answer lists the tokens of its reasoning and content and none of its calls', every
 * token when it made no call; streamed, the chunks' lists join to exactly that list (tool call
 * chunks have none), whatever the scanner held back before releasing it. */
START_TEST(test_serve_core_tool_calls_logprobs)
{
    struct core c;
    core_start_with(&c, THINK_TEMPLATE, true, NULL, SERVE_CACHE_SCOPE_GLOBAL);
    static const char *const grammars[] = {
        /* content, then a Hermes call */
        "\"root ::= [a-z]{6,10} " TOOLS_LP_CALL "\"",
        /* reasoning, content, a call */
        "\"root ::= \\\"<think>\\\" [a-z]{3,6} \\\"</think>\\\" [a-z]{2,4} " TOOLS_LP_CALL "\"",
        /* no call: every token is content, also what the scanner held back a while (an
         * anchored '{' that turns out not to be a call, a "<tool" that is not "<tool_call>") */
        "\"root ::= [a-z]{6,10}\"",
        "\"root ::= \\\"{\\\" [a-z]{4,6}\"",
        "\"root ::= [a-z]{3} \\\"<tool\\\" [a-z]{2}\"",
    };
    for (int g = 0; g < (int)(sizeof(grammars) / sizeof(grammars[0])); g++) {
        char body[1024];
        snprintf(body, sizeof(body), "%s,\"guided_grammar\":%s}", TOOLS_LP_HEAD, grammars[g]);
        struct reply r;
        http_do(c.port, "POST", "/v1/chat/completions", body, &r);
        ck_assert_msg(r.status == 200, "%d %s", r.status, r.body);
        json_t *j = body_json(&r);
        long completion = (long)json_integer_value(
            json_object_get(json_object_get(j, "usage"), "completion_tokens"));
        long listed_all = 0;
        snprintf(body, sizeof(body), "%s,\"guided_grammar\":%s,\"stream\":true}", TOOLS_LP_HEAD,
                 grammars[g]);
        struct reply st;
        http_do(c.port, "POST", "/v1/chat/completions", body, &st);
        ck_assert_int_eq(st.status, 200);
        bool done = false;
        json_t *events = sse_events(&st, &done);
        ck_assert(done);
        for (int k = 0; k < 2; k++) {
            json_t *ch = json_array_get(json_object_get(j, "choices"), (size_t)k);
            json_t *msg = json_object_get(ch, "message");
            json_t *lp = json_object_get(json_object_get(ch, "logprobs"), "content");
            ck_assert_msg(json_is_array(lp), "%s", r.body);
            listed_all += (long)json_array_size(lp);
            const char *content = json_string_value(json_object_get(msg, "content"));
            const char *reasoning = json_string_value(json_object_get(msg, "reasoning_content"));
            ck_assert_msg(content && *content, "%s", r.body);
            /* alternatives under the grammar: 2, or 1 where it allows one token ("<think>", "{") */
            json_t *top = json_object_get(json_array_get(lp, 0), "top_logprobs");
            ck_assert_int_eq((int)json_array_size(top), g == 1 || g == 3 ? 1 : 2);
            char text[512];
            snprintf(text, sizeof(text), "%s%s%s%s", g == 1 ? "<think>" : "",
                     g == 1 ? reasoning : "", g == 1 ? "</think>" : "", content);
            if (g < 2) {
                ck_assert_str_eq(json_string_value(json_object_get(ch, "finish_reason")),
                                 "tool_calls");
                ck_assert_int_eq((int)json_array_size(json_object_get(msg, "tool_calls")), 1);
                lp_covers(lp, text);
            } else {
                ck_assert_ptr_null(json_object_get(msg, "tool_calls"));
                char *joined = lp_text(lp);
                ck_assert_str_eq(joined, text);
                free(joined);
            }
            json_t *streamed = stream_logprobs(events, k);
            char *a = json_dumps(streamed, JSON_COMPACT), *b = json_dumps(lp, JSON_COMPACT);
            ck_assert_msg(json_equal(streamed, lp), "choice %d streamed %s\nwhole %s", k, a, b);
            free(a);
            free(b);
            json_decref(streamed);
        }
        /* a call's tokens are not listed; without one every token is */
        if (g < 2)
            ck_assert_int_lt(listed_all, completion);
        else
            ck_assert_int_eq(listed_all, completion);
        json_decref(events);
        json_decref(j);
        reply_fini(&r);
        reply_fini(&st);
    }
    /* tool_choice required: all of the answer is the call, no token is listed */
    struct reply r, st;
    http_do(c.port, "POST", "/v1/chat/completions", TOOLS_BODY ",\"logprobs\":true}", &r);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.body);
    json_t *j = body_json(&r);
    json_t *lp = json_object_get(
        json_object_get(json_array_get(json_object_get(j, "choices"), 0), "logprobs"), "content");
    ck_assert_msg(json_is_array(lp) && json_array_size(lp) == 0, "%s", r.body);
    http_do(c.port, "POST", "/v1/chat/completions",
            TOOLS_BODY ",\"logprobs\":true,\"stream\":true}", &st);
    bool done = false;
    json_t *events = sse_events(&st, &done);
    json_t *streamed = stream_logprobs(events, 0);
    ck_assert_int_eq((int)json_array_size(streamed), 0);
    json_decref(streamed);
    json_decref(events);
    json_decref(j);
    reply_fini(&r);
    reply_fini(&st);
    core_stop(&c);
}
END_TEST

/* tool_choice auto on a model whose vocabulary has "<tool_call>" and "</tool_call>" as single
 * (user-defined) tokens, with a Hermes template: a logit_bias on "<tool_call>" makes the random
 * model emit it, after some free text or at once; the lazy grammar then constrains the call, so
 * every call parses, names the tool and matches its parameters schema, and no answer holds a
 * "<tool_call>" that did not become a call. Inside a <think> block it never triggers. */
#define LAZY_TEMPLATE                                                                              \
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"     \
    "{% if tools %}Call a tool with <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call>"    \
    "{% endif %}<|im_start|>assistant\n"
#define LAZY_TOOLS                                                                                 \
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{"    \
    "\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":6},"          \
    "\"unit\":{\"enum\":[\"c\",\"f\"]}},\"required\":[\"city\",\"unit\"],"                         \
    "\"additionalProperties\":false}}}]"

/* A call of LAZY_TOOLS' function as its schema has it. */
static bool lazy_call_valid(const json_t *call)
{
    const json_t *fn = json_object_get(call, "function");
    if (strcmp(json_string_value(json_object_get(fn, "name")) ?: "", "get_weather") != 0)
        return false;
    json_t *args = json_loads(json_string_value(json_object_get(fn, "arguments")) ?: "", 0, NULL);
    const char *unit = json_string_value(json_object_get(args, "unit"));
    const json_t *city = json_object_get(args, "city");
    bool ok = json_is_object(args) && json_object_size(args) == 2 && json_is_string(city) &&
              json_string_length(city) <= 6 * 4 && unit &&
              (!strcmp(unit, "c") || !strcmp(unit, "f"));
    json_decref(args);
    return ok;
}

START_TEST(test_serve_core_tool_calls_auto_lazy)
{
    char saved[sizeof(model_path)];
    memcpy(saved, model_path, sizeof(saved));
    snprintf(model_path, sizeof(model_path), "%s/cinfer_test_serve_core_lazy_%ld.gguf",
             test_tmpdir(), (long)getpid());
    struct gen_model_opts o;
    gen_model_defaults(&o);
    o.dim = 64, o.layers = 2, o.heads = 4, o.kv_heads = 2, o.ffn = 128;
    o.context_length = CORE_CTX;
    o.vocab_size = 320;
    o.seed = 11;
    const char *user[] = {"<tool_call>", "</tool_call>"};
    o.user_tokens = user;
    o.n_user_tokens = 2;
    char err[256] = "";
    ck_assert_msg(gen_model_write(&o, model_path, err, sizeof(err)) == 0, "%s", err);
    struct core c;
    core_start_with(&c, LAZY_TEMPLATE, true, NULL, SERVE_CACHE_SCOPE_GLOBAL);
    int32_t open = tokenizer_find(c.tok, "<tool_call>", 11);
    ck_assert_int_eq(open, 318);
    int calls = 0, with_text = 0, free_only = 0, multi = 0;
    for (int seed = 1; seed <= 6; seed++) {
        /* seeds 1-4 one call (seed 1 with a weak bias: text first), 5-6 parallel calls */
        bool par = seed > 4;
        char body[2048];
        snprintf(body, sizeof(body),
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"}],\"max_tokens\":%d,"
                 "\"n\":3,\"seed\":%d,\"parallel_tool_calls\":%s,\"logit_bias\":{\"%d\":%d},%s}",
                 par ? 3000 : 400, 10 * seed, par ? "true" : "false", open,
                 par         ? 2
                 : seed == 1 ? 3
                             : 6,
                 LAZY_TOOLS);
        struct reply r;
        http_do(c.port, "POST", "/v1/chat/completions", body, &r);
        ck_assert_msg(r.status == 200, "%d %s", r.status, r.body);
        json_t *j = body_json(&r);
        for (size_t i = 0; i < 3; i++) {
            json_t *ch = json_array_get(json_object_get(j, "choices"), i);
            const char *fr = json_string_value(json_object_get(ch, "finish_reason"));
            json_t *msg = json_object_get(ch, "message");
            const char *content = json_string_value(json_object_get(msg, "content"));
            json_t *tc = json_object_get(msg, "tool_calls");
            if (!strcmp(fr, "tool_calls")) {
                ck_assert_msg(json_array_size(tc) >= 1, "%s", r.body);
                if (!par) ck_assert_int_eq((int)json_array_size(tc), 1);
                multi += json_array_size(tc) > 1;
                size_t k;
                json_t *call;
                json_array_foreach(tc, k, call)
                {
                    ck_assert_msg(lazy_call_valid(call), "seed %d: %s", seed, r.body);
                    calls++;
                }
                with_text += content && *content;
            } else if (par && !strcmp(fr, "length")) {
                free_only++; /* calls until max_tokens cut one: nothing to check */
            } else {
                /* no call: the text never held the trigger */
                ck_assert_msg(!strcmp(fr, "stop"), "seed %d: %s", seed, r.body);
                ck_assert_msg(!content || !strstr(content, "<tool_call>"), "seed %d: %s", seed,
                              r.body);
                free_only++;
            }
        }
        json_decref(j);
        reply_fini(&r);
    }
    fprintf(stderr,
            "lazy tools: %d calls (%d answers with text first, %d with several), %d "
            "answers without\n",
            calls, with_text, multi, free_only);
    ck_assert_int_ge(calls, 9);
    ck_assert_int_gt(with_text, 0);
    ck_assert_int_gt(multi, 0);
    core_stop(&c);

    /* a thinking template whose prompt opens <think>: the trigger inside the block is text */
    core_start_with(&c, LAZY_TEMPLATE "<think>\n", true, NULL, SERVE_CACHE_SCOPE_GLOBAL);
    char body[2048];
    snprintf(body, sizeof(body),
             "{\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"}],\"max_tokens\":200,"
             "\"seed\":3,\"parallel_tool_calls\":false,\"logit_bias\":{\"%d\":6},%s}",
             open, LAZY_TOOLS);
    struct reply r;
    http_do(c.port, "POST", "/v1/chat/completions", body, &r);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.body);
    json_t *j = body_json(&r);
    json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
    json_t *msg = json_object_get(ch, "message");
    const char *reasoning = json_string_value(json_object_get(msg, "reasoning_content"));
    ck_assert_msg(reasoning && strstr(reasoning, "<tool_call>"), "%s", r.body);
    const char *fr = json_string_value(json_object_get(ch, "finish_reason"));
    ck_assert_msg(!strcmp(fr, "stop") || !strcmp(fr, "length"), "%s", r.body); /* never a call */
    ck_assert_ptr_null(json_object_get(msg, "tool_calls"));
    ck_assert_str_eq(json_string_value(json_object_get(msg, "content")), "");
    json_decref(j);
    reply_fini(&r);
    core_stop(&c);
    unlink(model_path);
    memcpy(model_path, saved, sizeof(saved));
}
END_TEST

Suite *serve_core_suite(void)
{
    Suite *s = suite_create("serve_core");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_unchecked_fixture(tc, model_write, model_remove);
    tcase_add_test(tc, test_serve_core_submit_whole);
    tcase_add_test(tc, test_serve_core_stream_matches_whole);
    tcase_add_test(tc, test_serve_core_cancel_client_gone);
    tcase_add_test(tc, test_serve_core_fail_engine_faulted);
    tcase_add_test(tc, test_serve_core_set_faulted_finishes_inflight);
    tcase_add_test(tc, test_serve_core_fail_stream_under_way);
    tcase_add_test(tc, test_serve_core_fail_validation_400);
    tcase_add_test(tc, test_serve_core_drain);
    tcase_add_test(tc, test_serve_core_batched_prompts);
    tcase_add_test(tc, test_serve_core_echo_logprobs);
    tcase_add_test(tc, test_serve_core_best_of);
    tcase_add_test(tc, test_serve_core_logit_bias);
    tcase_add_test(tc, test_serve_core_suffix_fim);
    tcase_add_test(tc, test_serve_core_models_retrieve);
    tcase_add_test(tc, test_serve_core_stream_usage_and_logprobs_shape);
    tcase_add_test(tc, test_serve_core_api_keys);
    tcase_add_test(tc, test_serve_core_prefix_cache_scope);
    tcase_add_test(tc, test_serve_core_prefix_cache_scope_salt);
    tcase_add_test(tc, test_serve_core_structured_json_schema);
    tcase_add_test(tc, test_serve_core_structured_regex_and_ranges);
    tcase_add_test(tc, test_serve_core_structured_errors);
    tcase_add_test(tc, test_serve_core_structured_length_and_cancel);
    tcase_add_test(tc, test_serve_core_tool_calls);
    tcase_add_test(tc, test_serve_core_tool_calls_auto);
    tcase_add_test(tc, test_serve_core_tool_calls_auto_lazy);
    tcase_add_test(tc, test_serve_core_tool_calls_logprobs);
    tcase_add_test(tc, test_serve_core_reasoning_content);
    tcase_add_test(tc, test_serve_core_sink_window_past_context);
    suite_add_tcase(s, tc);
    return s;
}
