/* Token sampler: turns one logits row into the next token. Greedy, temperature, top-k, top-p, min-p,
 * repetition / presence / frequency penalties and a seeded per-sampler RNG (same seed and same
 * logits -> same tokens). Also reports the log-probability of the chosen token and the top-N
 * alternatives, taken from the model's own distribution (log-softmax of the raw logits, before
 * penalties and temperature), as OpenAI's `logprobs` expect.
 *
 * Pipeline (llama.cpp's default order): logit bias -> penalties -> top-k -> top-p -> min-p ->
 * temperature -> draw. temperature <= 0 means greedy: argmax of the biased and penalised logits,
 * lowest token id on ties.
 *
 * The draw (temperature > 0) is an inverse-CDF walk, with one uniform number from the seeded RNG,
 * over the surviving tokens in ascending token id, each weighted e^((logit - max) / temperature)
 * (a vectorised single-precision exponential, accumulated in double). top-k keeps the k best by
 * (logit, then lower id); top-p the smallest most-likely prefix whose probability at temperature 1
 * reaches top_p; min-p the tokens with logit >= max + ln(min_p). No step sorts the vocabulary or
 * allocates: plain temperature sampling costs one pass over the logits plus a block of 256, so the
 * API's default temperature (1.0) runs about as fast as greedy. (Until 2026-12 the walk went in
 * descending probability over a fully sorted vocabulary; the same seed now draws other tokens
 * from the same distribution.)
 * One sampler per sequence; not thread-safe (owned by the inference thread). */
#ifndef CINFER_ENGINE_SAMPLER_H
#define CINFER_ENGINE_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#define SAMPLER_MAX_LOGPROBS 20
#define SAMPLER_MAX_BIAS     1024 /* logit_bias entries per request */

/* An additive bias on one token's logit (OpenAI's logit_bias; -100 bans a token in practice). */
struct sampler_bias {
    int32_t token;
    float bias;
};

struct sampler_params {
    float temperature;       /* <= 0: greedy */
    int top_k;               /* <= 0: off */
    float top_p;             /* >= 1: off */
    float min_p;             /* <= 0: off */
    float repeat_penalty;    /* 1: off; llama.cpp semantics (divide positive logits, multiply
                              * negative ones) over the last repeat_last_n tokens */
    int repeat_last_n;       /* window of past tokens the penalties look at; 0: off, -1: all */
    float presence_penalty;  /* 0: off; subtracted once per distinct token in the window */
    float frequency_penalty; /* 0: off; subtracted per occurrence in the window */
    uint64_t seed;
    int n_logprobs; /* top alternatives to report, 0..SAMPLER_MAX_LOGPROBS */
    /* Fill sampler_result.logprob and .top. Off, they are left 0: the log-softmax over the whole
     * vocabulary costs about as much as greedy sampling itself. */
    bool logprobs;
    /* Biases added to the logits before everything else (penalties, filters, greedy); borrowed:
     * sampler_new copies them. Tokens must be < n_vocab; a token listed twice adds both. */
    const struct sampler_bias *bias;
    int n_bias; /* 0..SAMPLER_MAX_BIAS */
};

/* Fills the defaults: temperature 1, top_k 0, top_p 1, min_p 0, penalties off (repeat_last_n 64),
 * seed 0, n_logprobs 0, logprobs off, no bias. */
void sampler_params_default(struct sampler_params *p);

struct sampler_logprob {
    int32_t token;
    float logprob;
};

struct sampler_result {
    int32_t token;
    float logprob; /* of `token` under the raw model distribution */
    int n_top;     /* entries in top, = params.n_logprobs (or fewer for a tiny vocabulary) */
    struct sampler_logprob top[SAMPLER_MAX_LOGPROBS]; /* most likely first */
};

struct sampler;

/* True when every parameter is in range (what sampler_new accepts). Pure. */
bool sampler_params_valid(const struct sampler_params *p);

/* Creates a sampler for a vocabulary of n_vocab tokens; params (and the bias list) are copied, and
 * every buffer sampling will need is allocated here, so sampler_sample never allocates. ERR_INVAL
 * on out-of-range params or a biased token >= n_vocab (negative temperature is fine: greedy),
 * ERR_NOMEM. *out is new (sampler_free). */
int sampler_new(const struct sampler_params *params, int n_vocab, struct sampler **out);
void sampler_free(struct sampler *s); /* NULL-safe */

/* Records a token of the sequence (prompt tokens and each chosen token) for the penalties. */
void sampler_accept(struct sampler *s, int32_t token);
/* Forgets the history and reseeds the RNG with params.seed. */
void sampler_reset(struct sampler *s);

/* Samples from `logits` (n_vocab values, borrowed, not modified). Does not accept the token: call
 * sampler_accept with it. Returns 0, or ERR_INVAL when no token has a finite logit. */
int sampler_sample(struct sampler *s, const float *logits, struct sampler_result *out);

/* The log-probability of a given `token` (< n_vocab) under `logits` (the raw model distribution,
 * as sampler_result.logprob) and the params.n_logprobs most likely alternatives, into *out (token
 * set to `token`): what OpenAI's echo reports for prompt tokens. Draws nothing and records
 * nothing (the RNG and the history are untouched); never allocates. Returns 0, or ERR_INVAL when
 * no logit is finite or the token is out of range. */
int sampler_logprobs(struct sampler *s, const float *logits, int32_t token,
                     struct sampler_result *out);

#endif
