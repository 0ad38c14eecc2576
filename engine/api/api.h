/* The OpenAI-compatible API layer of `cinfer-engine serve`: request JSON -> struct api_request,
 * results -> completion / chat.completion objects and SSE chunks, and the OpenAI error shape.
 * Pure code: no sockets, no clock, no scheduler. It runs on the HTTP service thread, so the
 * inference thread only ever sees the structs below (STYLE.md "Concurrency"). Every function is
 * reentrant and may be called from any thread on values that thread owns.
 * Reference: https://platform.openai.com/docs/api-reference/completions and .../chat. */
#ifndef CINFER_ENGINE_API_H
#define CINFER_ENGINE_API_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "engine/kv/kv_window.h"

struct sampler_params;
struct sampler_bias;

#define API_MAX_STOP                 4    /* OpenAI: up to 4 stop sequences */
#define API_MAX_STOP_LEN             256  /* bytes per stop sequence */
#define API_MAX_N                    8    /* choices per prompt */
#define API_MAX_BEST_OF              20   /* completions: candidates per prompt (OpenAI's limit) */
#define API_MAX_PROMPTS              256  /* completions: prompts in one batched request */
#define API_MAX_SEQS                 256  /* sequences one request runs: prompts x best_of */
#define API_MAX_LOGIT_BIAS           1024 /* logit_bias entries (= SAMPLER_MAX_BIAS) */
#define API_LOGIT_BIAS_LIMIT         100  /* logit_bias values lie in [-100, 100] */
#define API_MAX_LOGPROBS_COMPL       5    /* completions: logprobs 0..5 */
#define API_MAX_TOP_LOGPROBS         20   /* chat: top_logprobs 0..20 (= SAMPLER_MAX_LOGPROBS) */
#define API_MAX_MESSAGES             4096 /* chat messages per request */
#define API_MAX_PROMPT_TOKENS        1048576 /* token ids in a pre-tokenized prompt */
#define API_MAX_SHORT_STR            256     /* model, user, cache_salt */
#define API_COMPL_DEFAULT_MAX_TOKENS 16      /* OpenAI's default for /v1/completions */

enum api_kind { API_KIND_COMPLETION = 0, API_KIND_CHAT };

enum api_role { API_ROLE_SYSTEM = 0, API_ROLE_USER, API_ROLE_ASSISTANT, API_ROLE_TOOL };

/* Returns "system", "user", "assistant" or "tool"; static. */
const char *api_role_name(enum api_role r);

struct api_message {
    enum api_role role;
    char *content; /* owned; text parts joined with "\n"; never NULL ("" when absent) */
};

/* tool_choice (api_request_tools.c). With tools, OpenAI's default is auto. */
enum api_tool_choice {
    API_TOOL_NONE = 0, /* no tools, or "none": plain text */
    API_TOOL_AUTO,     /* the model may call: its output is parsed for calls */
    API_TOOL_REQUIRED, /* at least one call, constrained by the tools' parameter schemas */
    API_TOOL_NAMED,    /* one call of tool_name, constrained by its schema */
};

/* The form a chat template's tool calls take (chat_template_tool_format): what tool_choice
 * "auto"'s lazy grammar waits for (api_tools_lazy). */
enum api_tool_format {
    API_TOOL_FORMAT_JSON = 0, /* no known tag: a bare {"name", "arguments"} object */
    API_TOOL_FORMAT_HERMES,   /* <tool_call>{"name", "arguments"}</tool_call> (Hermes, Qwen) */
    API_TOOL_FORMAT_MISTRAL,  /* [TOOL_CALLS][{"name", "arguments"}, ...] */
    API_TOOL_FORMAT_LLAMA3,   /* <|python_tag|>{...} or a bare {"name", "parameters"} object */
    API_TOOL_FORMAT_OTHER,    /* a tagged form api_tool_calls_parse does not read (Mistral's
                                 [TOOL_CALLS]name[ARGS]{...}, Qwen3-Coder's <function=...>,
                                 GLM's <arg_key>): no call grammar */
};

/* ---------------------------------------------------------------- errors (api_error.c) */

enum api_error_kind {
    API_ERR_INVALID = 0,     /* 400 invalid_request_error */
    API_ERR_UNAUTHORIZED,    /* 401 invalid_request_error, code invalid_api_key */
    API_ERR_NOT_FOUND,       /* 404 invalid_request_error (route) */
    API_ERR_MODEL_NOT_FOUND, /* 404 invalid_request_error, code model_not_found */
    API_ERR_METHOD,          /* 405 invalid_request_error, code method_not_allowed */
    API_ERR_TOO_LARGE,       /* 413 invalid_request_error, code request_too_large */
    API_ERR_RATE_LIMIT,      /* 429 rate_limit_error, code rate_limit_exceeded (queue full) */
    API_ERR_OVERLOADED,      /* 503 server_error, code server_overloaded (overload, draining) */
    API_ERR_INTERNAL,        /* 500 server_error */
};

/* A request-level failure, ready to be written as OpenAI's error object. Plain value, no heap. */
struct api_error {
    int status;        /* HTTP status */
    const char *type;  /* static: "invalid_request_error", "rate_limit_error", "server_error" */
    const char *code;  /* static or NULL (JSON null) */
    char param[96];    /* "" -> JSON null; else the offending parameter ("messages[2].role") */
    char message[512]; /* human-readable, always NUL-terminated */
    int retry_after_s; /* > 0: the caller adds a Retry-After header */
};

/* Fills `e` for `kind`; `param` (borrowed, may be NULL) is copied, the message is formatted
 * (truncated to fit). Any thread. */
void api_error_set(struct api_error *e, enum api_error_kind kind, const char *param,
                   const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Returns a new {"error":{"message","type","param","code"}} object, or NULL on ERR_NOMEM. */
json_t *api_error_json(const struct api_error *e);

/* Appends the compact JSON body to `out` (borrowed). Returns 0, ERR_TOO_BIG or ERR_NOMEM. */
int api_error_body(const struct api_error *e, struct buf *out);

/* Writes the Retry-After value ("5") into `dst` when e->retry_after_s > 0 and returns 1; returns 0
 * (nothing written) when no header is due. */
int api_error_retry_after(const struct api_error *e, char *dst, size_t dstlen);

/* ---------------------------------------------------------------- requests (api_request.c) */

/* Server-side limits the parser enforces. Zero fields mean "no extra limit". */
struct api_limits {
    int n_vocab;     /* token ids in a prompt must be < n_vocab */
    long max_tokens; /* largest max_tokens accepted (usually the context length) */
    /* Largest max_tokens of a request that runs with sink-window KV eviction (0: max_tokens),
     * and whether requests without "kv_eviction" do (the server's --kv-eviction). */
    long max_tokens_window;
    bool window_default;
};

/* One prompt of /v1/completions: exactly one of text (owned) or tokens (owned ids, >= 1). */
struct api_prompt {
    char *text;
    int32_t *tokens;
    size_t n_tokens;
};

struct api_request {
    enum api_kind kind;
    char *model; /* owned; NULL when the client sent none */

    /* /v1/completions: "prompt" as a string, token ids, or a list of either (batched prompts);
     * owned array of n_prompts (1..API_MAX_PROMPTS). Choice i * n + j answers prompt i. */
    struct api_prompt *prompts;
    size_t n_prompts;
    char *suffix; /* owned or NULL (also for ""): fill-in-the-middle, text after the prompt */
    bool echo;    /* the prompt comes back before the completion (prompt logprobs with logprobs) */
    int best_of;  /* completions: candidates generated per prompt, n..API_MAX_BEST_OF (default n);
                     the n with the highest mean token logprob are returned */

    /* /v1/chat/completions */
    struct api_message *messages; /* owned array of n_messages */
    size_t n_messages;
    /* The messages as sent (a reference), rendered as they are when the conversation has tool
     * calls or tool results, or tools are offered (the template reads tool_calls, tool_call_id). */
    json_t *messages_json;
    bool tool_history; /* some message has tool_calls or the role tool */

    /* Tools (api_request_tools.c): the validated "tools" array (a reference; NULL: none or
     * tool_choice none), how they may be called, and whether several calls may come at once. */
    json_t *tools;
    enum api_tool_choice tool_choice;
    char tool_name[72]; /* API_TOOL_NAMED */
    bool parallel_tool_calls;

    long max_tokens; /* > 0 (0 only with echo: the prompt alone); -1: until the context is full
                        (chat default) */
    int n;           /* 1..API_MAX_N */

    /* Sampling (api_request_sampler_params converts). Defaults are OpenAI's. */
    float temperature;        /* 0..2, default 1 */
    float top_p;              /* (0, 1], default 1 */
    int top_k;                /* 0 (off) or > 0 */
    float min_p;              /* 0..1, default 0 */
    float presence_penalty;   /* -2..2 */
    float frequency_penalty;  /* -2..2 */
    float repetition_penalty; /* (0, 2], default 1 (off) */
    bool has_seed;
    uint64_t seed;
    /* logit_bias {"token id": bias}: owned array of n_logit_bias (ids < n_vocab, |bias| <= 100) */
    struct sampler_bias *logit_bias;
    size_t n_logit_bias;

    /* Stop sequences: owned strings, none empty. */
    char *stop[API_MAX_STOP];
    size_t n_stop;

    /* Log-probabilities: completions `logprobs: k` -> logprobs true, top_logprobs k;
     * chat `logprobs: true, top_logprobs: k` -> the same. */
    bool logprobs;
    int top_logprobs;

    bool stream;
    bool include_usage;    /* stream_options.include_usage: a usage chunk ends the stream */
    bool continuous_usage; /* stream_options.continuous_usage_stats (vLLM): usage on every chunk */

    bool ignore_eos; /* vLLM extension: keep generating past end-of-generation tokens */

    /* Constrained decoding (api_request_format.c): the GBNF (engine/grammar/) every choice must
     * follow, owned, from response_format (json_object, json_schema) or vLLM's guided_json /
     * guided_grammar / guided_choice (or their structured_outputs spelling); NULL: free text.
     * grammar_param names the parameter it came from, for errors found when it is compiled. */
    char *grammar;
    char grammar_param[64];

    json_t *chat_template_kwargs; /* a reference to the object, or NULL (extra template vars) */

    char *user;       /* owned or NULL */
    int priority;     /* default 0; lower runs first (vLLM's convention) */
    char *cache_salt; /* owned or NULL */

    /* Extension "kv_eviction": {"mode": "none"|"sink-window", "sink_tokens": 0..2^24 (default
     * 4), "window_tokens": 1..2^24 (default 1024)} (engine/kv/kv_window.h; mode required, no
     * other keys). kv_eviction_set false: absent, the server's --kv-eviction applies. How the
     * sizes fit the context is the server's check. */
    bool kv_eviction_set;
    struct kv_window kv_eviction;
};

/* Parses a request body of `len` bytes (borrowed; need not be NUL-terminated) for the endpoint
 * `kind`, enforcing `lim` (borrowed, may be NULL). On success writes a new request to *out
 * (api_request_free) and returns 0. On failure fills `err` (a 400 naming the parameter, or 500 on
 * allocation failure) and returns ERR_INVAL or ERR_NOMEM; *out untouched. Never crashes on any
 * input; allocation is bounded by the body size. Any thread. */
int api_request_parse(const char *body, size_t len, enum api_kind kind,
                      const struct api_limits *lim, struct api_request **out,
                      struct api_error *err);

void api_request_free(struct api_request *r); /* NULL-safe */

/* Fills `out` (borrowed) from the request's sampling fields: defaults from sampler_params_default,
 * then temperature, top_k, top_p, min_p, penalties (repeat_last_n -1 when a penalty is on), seed
 * (`fallback_seed` when the client sent none), n_logprobs, and the logit bias (out->bias borrows
 * r->logit_bias: valid while r is). Log-probabilities are computed when the client asked for them
 * or best_of > n ranks candidates by them. */
void api_request_sampler_params(const struct api_request *r, uint64_t fallback_seed,
                                struct sampler_params *out);

/* ---------------------------------------------------------------- responses (api_response.c) */

enum api_finish { API_FINISH_NONE = 0, API_FINISH_STOP, API_FINISH_LENGTH, API_FINISH_TOOL_CALLS };

/* Returns "stop", "length", "tool_calls" or NULL (JSON null) for API_FINISH_NONE; static. */
const char *api_finish_name(enum api_finish f);

/* One alternative in a top-logprobs list. Text is raw decoded bytes (may be partial UTF-8). */
struct api_top_logprob {
    const char *text; /* borrowed */
    size_t len;
    float logprob;
};

/* One generated (or, with echo, prompt) token with its log-probability and the alternatives (all
 * borrowed). Completions list the token itself among its top_logprobs when the alternatives miss
 * it, as OpenAI does ("up to logprobs + 1 elements"). */
struct api_token_logprob {
    const char *text; /* borrowed, raw decoded bytes of the token */
    size_t len;
    float logprob;
    int n_top;
    const struct api_top_logprob *top;
    bool unscored; /* the first prompt token under echo: logprob and top_logprobs are null */
};

struct api_usage {
    long prompt_tokens;
    long completion_tokens;
    long cached_tokens;    /* prompt tokens served from the prefix cache */
    bool has_reasoning;    /* add completion_tokens_details.reasoning_tokens */
    long reasoning_tokens; /* of completion_tokens, those in the reasoning section */
};

/* One choice (or a streamed delta of it). Everything borrowed for the duration of the call. */
struct api_choice {
    int index;
    const char *text; /* completion text / message content / delta content; may be NULL */
    size_t len;
    enum api_finish finish;
    const struct api_token_logprob *logprobs; /* NULL: "logprobs": null */
    size_t n_logprobs;
    size_t text_offset; /* completions: characters before `text` (for streamed chunks) */
    /* Streaming with continuous usage: this chunk's usage (its prompt and its choice's tokens so
     * far); NULL: "usage": null when include_usage, absent otherwise. Borrowed. */
    const struct api_usage *usage;
    /* Chat: the message's tool calls (an array from api_tool_calls_parse, borrowed) or NULL. With
     * calls, a NULL or empty text makes "content": null. */
    const json_t *tool_calls;
    /* Chat: the reasoning section (message.reasoning_content, delta.reasoning_content); NULL: no
     * such field (the model does not think, or the split is off). */
    const char *reasoning;
    size_t reasoning_len;
};

/* Identity shared by every object of one response. */
struct api_response_meta {
    enum api_kind kind;
    const char *id;     /* borrowed: from api_response_id */
    const char *model;  /* borrowed */
    long long created;  /* Unix seconds, passed in (no clock here) */
    bool include_usage; /* streaming: chunks carry "usage": null, and a usage chunk comes last */
    /* Log-probabilities were asked for: every choice carries a logprobs object (empty lists when
     * it has no tokens), except chat's closing chunk (finish_reason set), which has null as
     * OpenAI's. Otherwise only choices whose `logprobs` is non-NULL do. */
    bool logprobs;
};

/* Writes "cmpl-<16 hex>" / "chatcmpl-<16 hex>" from `rnd` into dst (>= 32 bytes). Returns 0 or
 * ERR_INVAL (dst too small). */
int api_response_id(enum api_kind kind, uint64_t rnd, char *dst, size_t dstlen);

/* Non-streaming: a new "text_completion" or "chat.completion" object with n choices and usage, or
 * NULL on ERR_NOMEM. Invalid UTF-8 in texts becomes U+FFFD (raw bytes survive in chat "bytes"). */
json_t *api_response_json(const struct api_response_meta *m, const struct api_choice *choices,
                          size_t n, const struct api_usage *u);

/* Streaming chunk for one choice. Chat: `role_only` makes the opening delta {"role":"assistant",
 * "content":"","refusal":null}; otherwise the delta is {"content": text} when text is non-empty
 * (and "reasoning_content" when the choice has reasoning bytes) and {} when neither (the final
 * chunk, carrying finish_reason). Completions ignore role_only. The chunk's "usage" is
 * c->usage, else null when m->include_usage. New or NULL. */
json_t *api_response_chunk(const struct api_response_meta *m, const struct api_choice *c,
                           bool role_only);

/* The last chunk when include_usage: "choices": [] and "usage": {...}. New or NULL. */
json_t *api_response_usage_chunk(const struct api_response_meta *m, const struct api_usage *u);

/* A "model" object {"id","object":"model","created","owned_by","max_model_len"} (the entries of
 * GET /v1/models and the body of GET /v1/models/{id}). `id` borrowed. New or NULL. */
json_t *api_model_json(const char *id, long long created, int max_model_len);

/* ---------------------------------------------------------------- tool calls (api_tool_calls.c) */

/* Finds the tool calls in a chat answer `text` (len bytes, borrowed). forced (tool_choice
 * required or named): the text is the JSON array the constraint produced, [{"name","arguments"}].
 * Otherwise the forms the template families use: Hermes / Qwen <tool_call>{...}</tool_call>
 * blocks, Mistral [TOOL_CALLS][...], Llama 3 <|python_tag|>{...} or a bare {"name",
 * "arguments"|"parameters"} object; text before the first call stays content. On finding calls
 * writes a new array of OpenAI tool calls to *calls ({"id":"call_<id_base>_<k>","type":
 * "function","function":{"name","arguments"}}; arguments: the model's JSON without the blanks
 * outside strings, a string value decoded) and the length of the content (trailing blanks cut)
 * to *content_len, and returns 1; returns 0 (nothing written) when the text holds no call,
 * ERR_NOMEM. The reading is api_tool_stream's over the whole text (its rules: a call begun stands,
 * cut off or followed by garbage). Pure; any thread. */
int api_tool_calls_parse(const char *text, size_t len, bool forced, const char *id_base,
                         json_t **calls, size_t *content_len);

/* The id of call k of a choice: "call_<id_base>_<k>" into dst (both paths name calls so). */
void api_tool_call_id(char *dst, size_t dstlen, const char *id_base, int k);

/* ------------------------------------------------ streamed tool calls (api_tool_stream.c) */

/* What the scanner says about a choice's text as it grows (api_tool_stream_feed). */
enum api_tool_ev {
    API_TOOL_EV_CONTENT, /* text: content certain not to be part of a call */
    API_TOOL_EV_CALL,    /* call `call` starts; text: its function name (complete) */
    API_TOOL_EV_ARGS,    /* text: the next fragment of call `call`'s arguments */
};

/* Receives one event; text borrowed for the call. Returns 0, or an error that stops the feed. */
typedef int (*api_tool_stream_fn)(void *ud, enum api_tool_ev ev, int call, const char *text,
                                  size_t len);

/* The incremental tool-call scanner of one choice: the answer's text goes in as it is generated,
 * content and calls come out as soon as they are certain. api_tool_calls_parse is this scanner
 * fed the whole text at once, so a streamed answer assembles to the non-streamed one byte for
 * byte. The rules, what is emitted when, are in api_tool_stream.c's header comment. The fields
 * are the scanner's own. Not thread-safe; any thread, on its own state. */
struct api_tool_stream {
    bool forced;     /* tool_choice required / named: the text is the JSON of the calls */
    struct buf text; /* everything fed (a failed attempt is scanned again as content) */
    int mode, form;  /* what the scanner is reading; Hermes blocks or one anchored value */
    bool anchors;    /* the anchored forms ([TOOL_CALLS], <|python_tag|>, bare JSON) may start */
    size_t pos;      /* next byte of text to scan */
    size_t content_upto, content_sent; /* content is text[0..content_upto); sent so far */
    int n_calls;                       /* calls started (API_TOOL_EV_CALL sent) */
    /* JSON: open containers ('{' / '[' and what each expects next), lexer state */
    unsigned char *stack;
    size_t depth, cap;
    int top_expect, lex, hex_n;
    unsigned code, high;
    struct buf scalar;
    /* The call being read: its level (containers around it), its keys, name and arguments */
    size_t call_level;
    int role, key_role;
    bool in_args, args_string, have_name, have_args, committed;
    size_t args_level;
    struct buf key, name, args;
    size_t args_sent;
    int calls_in_value; /* calls committed inside the current top-level value */
};

/* Starts a scanner (forced: tool_choice required or named). */
void api_tool_stream_init(struct api_tool_stream *s, bool forced);
/* Frees what the scanner holds; it may be started again. */
void api_tool_stream_fini(struct api_tool_stream *s);
/* Appends text[0..len) (borrowed) and calls fn for every event it makes certain; `final` (the
 * choice ended) resolves everything held back. Returns 0, ERR_NOMEM, or fn's error. */
int api_tool_stream_feed(struct api_tool_stream *s, const char *text, size_t len, bool final,
                         api_tool_stream_fn fn, void *ud);

/* A trigger of api_tools_lazy: the text (static) the call's grammar starts with, and whether it
 * counts only as the first thing of the answer (after blanks and a <think> block). */
struct api_tool_trigger {
    const char *text;
    bool at_start;
};
#define API_TOOL_TRIGGERS_MAX 2

/* tool_choice "auto" (api_request_tools.c): when r has tools, tool_choice auto and no other
 * grammar, writes to r->grammar (owned, grammar_param "tools") the GBNF of the calls of form
 * `fmt` from their trigger on, and the triggers to trig[0..*n_trig):
 *   HERMES  "<tool_call>" anywhere: each call a block <tool_call>\n{"name", "arguments"}\n
 *           </tool_call>, more blocks after it with parallel_tool_calls;
 *   MISTRAL "[TOOL_CALLS]" at the start: the JSON array of calls (one with parallel_tool_calls
 *           false);
 *   LLAMA3  "<|python_tag|>" or {"name" at the start: one {"name", "parameters"} object;
 *   JSON    {"name" at the start: one {"name", "arguments"} object;
 * (OTHER: none); the anchored triggers are where api_tool_calls_parse looks for those forms. The name is one of
 * the tools' and the arguments follow its parameters schema; the generation ends after the last
 * call. Returns 0 (a grammar written), 1 when none applies (r->grammar untouched: no tools, not
 * auto, another grammar, or a parameters schema the grammar cannot enforce, which leaves the
 * answer free as "auto" was before; the reason in why[whylen]), ERR_NOMEM. Pure; any thread. */
int api_tools_lazy(struct api_request *r, enum api_tool_format fmt,
                   struct api_tool_trigger trig[API_TOOL_TRIGGERS_MAX], int *n_trig, char *why,
                   size_t whylen);

/* ---------------------------------------------------------------- reasoning (api_reasoning.c) */

enum api_reasoning_state {
    API_REASONING_START = 0, /* nothing but blanks yet: "<think>" may open the block */
    API_REASONING_INSIDE,    /* in the block: text is reasoning until "</think>" */
    API_REASONING_AFTER,     /* just closed: blanks before the answer are dropped */
    API_REASONING_CONTENT,   /* the answer */
};

/* Splits a thinking model's answer into reasoning and content as it streams. Plain value. */
struct api_reasoning {
    enum api_reasoning_state state;
    char hold[16]; /* a possible tag prefix carried to the next feed */
    size_t n_hold;
};

/* Starts a split; `inside` when the prompt already opened the block. */
void api_reasoning_init(struct api_reasoning *s, bool inside);
/* Feeds the next len bytes of the answer (borrowed): appends what is now known to be reasoning
 * and content to the two buffers (borrowed), holding back a possible partial tag; `final` flushes
 * everything. 0, ERR_TOO_BIG or ERR_NOMEM from the buffers. Any thread, on its own state. */
int api_reasoning_feed(struct api_reasoning *s, const char *text, size_t len, bool final,
                       struct buf *reasoning, struct buf *content);

/* One piece of a streamed tool call: its start (id set: the call's id and, in text, its name)
 * or the next fragment of its arguments (id NULL). All borrowed. */
struct api_tool_delta {
    int call; /* the call's index in the message */
    const char *id;
    const char *text;
    size_t len;
};

/* A streaming chunk whose delta.tool_calls is the one piece d: {"index", "id", "type",
 * "function": {"name", "arguments": ""}} for a start, {"index", "function": {"arguments"}} for a
 * fragment (invalid UTF-8 becomes U+FFFD); its "logprobs" is null (logprobs.content lists content
 * tokens, and a call's are none). New or NULL. */
json_t *api_response_tool_delta(const struct api_response_meta *m, int index,
                                const struct api_tool_delta *d);

/* Appends "data: <compact json>\n\n" to `out`. Returns 0, ERR_INVAL (NULL j), ERR_TOO_BIG or
 * ERR_NOMEM; on failure `out` keeps its previous length. */
int api_response_sse(const json_t *j, struct buf *out);

/* Appends the terminal "data: [DONE]\n\n". Returns 0, ERR_TOO_BIG or ERR_NOMEM. */
int api_response_sse_done(struct buf *out);

#endif
