/* LLM request traces for the simulator: CSV traces whose header names the arrival time, prompt
 * and output token columns (the Azure LLM inference traces of 2023 and 2024: TIMESTAMP
 * "YYYY-MM-DD HH:MM:SS.fffffff", optionally with a zone, ContextTokens, GeneratedTokens;
 * BurstGPT: Timestamp in seconds, Request tokens, Response tokens; other columns ignored;
 * format "azure") and Mooncake's JSONL
 * ({"timestamp": ms, "input_length", "output_length", "hash_ids": [prefix block hashes]}), see
 * /work/shared/traces/SOURCE.md. Parsing is bounded (line, token, hash and request limits below)
 * and every malformed line is an error naming the line; nothing here reads the clock. */
#ifndef CINFER_AUTOSCALER_TRACE_H
#define CINFER_AUTOSCALER_TRACE_H

#include <stddef.h>
#include <stdint.h>

#define TRACE_MAX_BYTES    (512u << 20) /* whole file */
#define TRACE_MAX_LINE     (1u << 20)   /* one CSV or JSONL line */
#define TRACE_MAX_TOKENS   10000000u    /* prompt or output tokens of one request */
#define TRACE_MAX_HASHES   65536u       /* hash_ids of one request */
#define TRACE_MAX_REQUESTS 20000000u
#define TRACE_MAX_SECONDS  (400.0 * 86400) /* span of arrival times */
#define TRACE_BLOCK_TOKENS 512             /* Mooncake's prefix block size */

enum trace_format { TRACE_AZURE = 0, TRACE_MOONCAKE };

struct trace_req {
    double t_s;             /* arrival, seconds after the first request (sorted ascending) */
    uint32_t prompt_tokens; /* ContextTokens / input_length */
    uint32_t output_tokens; /* GeneratedTokens / output_length */
    uint32_t hash_off;      /* first of this request's block hashes in trace.hashes */
    uint32_t n_hash;        /* 0 for Azure */
};

struct trace {
    enum trace_format format;
    struct trace_req *reqs; /* n requests, sorted by t_s (stable: file order for ties) */
    size_t n;
    uint64_t *hashes; /* n_hashes block hashes, referenced by the requests */
    size_t n_hashes;
};

/* Parses "azure" or "mooncake"; returns 0 or ERR_INVAL. */
int trace_format_parse(const char *s, enum trace_format *out);

/* Parses `data[0..len)` (borrowed; need not be NUL-terminated). On success returns 0 and a new
 * trace in *out (free with trace_free); otherwise ERR_PARSE / ERR_RANGE / ERR_TOO_BIG / ERR_NOMEM
 * with a message naming the line in `err` (size `errlen`). An empty trace is ERR_PARSE. */
int trace_parse(const char *data, size_t len, enum trace_format fmt, struct trace **out, char *err,
                size_t errlen);

/* Reads `path` (at most TRACE_MAX_BYTES) and parses it like trace_parse (ERR_IO when unreadable). */
int trace_load(const char *path, enum trace_format fmt, struct trace **out, char *err,
               size_t errlen);

void trace_free(struct trace *t); /* NULL-safe */

/* Spreads each run of requests sharing one timestamp uniformly at random (seeded, deterministic)
 * over the gap to the next distinct timestamp (the last run over the median gap), keeping order.
 * Mooncake's conversation trace is quantised to ~3 s ticks; without this every tick is a burst. */
void trace_spread_ties(struct trace *t, uint64_t seed);

/* A synthetic trace harder than the shared files: a diurnal ramp (one day compressed into
 * duration_s: trough at the ends, peak_to_trough x that at the middle, a raised cosine) with bursts
 * (starting at exponential gaps of mean burst_every_s, each burst_s long at burst_factor x the
 * rate), Poisson arrivals (thinning, Lewis & Shedler), and each request's prompt and output tokens
 * drawn together from a random request of `src`, so the token distributions are the source's own
 * (prefix hashes are not carried: the requests share no prefix). */
struct trace_synth {
    double duration_s;     /* 3600 */
    double mean_rps;       /* rate averaged over the ramp, bursts excluded; 0 = src's mean */
    double peak_to_trough; /* 4 */
    double burst_every_s;  /* 600 */
    double burst_s;        /* 90 */
    double burst_factor;   /* 2.5 */
    uint64_t seed;         /* 1 */
};

/* Fills `p` with the defaults above. */
void trace_synth_defaults(struct trace_synth *p);

/* Writes a new synthetic trace from `src` (borrowed, >= 1 request) to *out (trace_free). Returns
 * 0, ERR_INVAL (bad parameters, an empty source) or ERR_RANGE / ERR_NOMEM (more than
 * TRACE_MAX_REQUESTS or no memory). */
int trace_synth_diurnal(const struct trace *src, const struct trace_synth *p, struct trace **out);

/* Writes to *out a trace of `k` (1..10000) copies of `src` (borrowed) merged in time: copy c of
 * request i arrives uniformly at random (seeded) inside the gap to request i + 1, copy 0 at the
 * original time, and carries its own prefix hashes (hash ^ c * a large odd constant), so the
 * rate is k x the source's with the same shape. Returns 0, ERR_INVAL, ERR_RANGE or ERR_NOMEM. */
int trace_amplify(const struct trace *src, unsigned k, uint64_t seed, struct trace **out);

/* SplitMix64 (Steele, Lea, Flood 2014): the simulator's one seeded generator. Advances *state and
 * returns the next 64 random bits. */
uint64_t trace_splitmix64(uint64_t *state);

#endif
