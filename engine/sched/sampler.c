/* Token sampler: logit bias, penalties, top-k / top-p / min-p truncation, temperature, seeded draw,
 * log-probs. See sampler.h for the semantics; the filters follow llama.cpp's sampler chain.
 *
 * Cost model: the serving loop samples every sequence of every step, so nothing here sorts or
 * copies the vocabulary unless it must. Plain temperature sampling is two vectorised passes (the
 * maximum, then the weights summed per block of SAMPLER_BLOCK tokens) and one block re-weighed to
 * find the drawn token; top-k is a threshold scan over chunks; top-p is rejection sampling over
 * such draws. The weights come from exp_nonpos(), a polynomial e^x in single precision whose
 * operations are all written out (no FMA contraction under -std=c11), so every ISA clone and the
 * scalar re-weighing of a block compute the same bits. */
#include "engine/sched/sampler.h"

#include "common/err.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SAMPLER_BLOCK 256 /* tokens per weight block of the full-vocabulary draw */
#define LANES         16  /* independent accumulators: the loops vectorise at any width */

/* The vectorised passes are compiled for AVX-512, AVX2 and baseline x86-64 and chosen at load
 * time (GCC/clang function multi-versioning); elsewhere the plain C is used as is. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__SANITIZE_ADDRESS__)
#define SAMPLER_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define SAMPLER_CLONES
#endif

struct cand {
    int32_t id;
    float logit;
};

struct sampler {
    struct sampler_params p;
    int n_vocab;
    uint64_t rng;
    int32_t *hist; /* every accepted token (grows) */
    size_t n_hist, cap_hist;
    struct sampler_bias *bias; /* (p.n_bias) owned copy; p.bias points here */
    float *work;        /* (n_vocab) biased/penalised logits; only when bias or penalties are set */
    int32_t *counts;    /* (n_vocab) occurrences in the penalty window; with penalties only */
    struct cand *cands; /* (cap_cands) top-k candidates; with top-k only */
    int cap_cands;
    float *blocks; /* (n_vocab / SAMPLER_BLOCK + 1) weight sums of the full-vocabulary draw */
    struct cand
        *nucleus; /* (cap_nucleus) sampler_probs' top-p candidates; allocated on first use */
    int cap_nucleus;
};

void sampler_params_default(struct sampler_params *p)
{
    memset(p, 0, sizeof(*p));
    p->temperature = 1.0f;
    p->top_p = 1.0f;
    p->repeat_penalty = 1.0f;
    p->repeat_last_n = 64;
}

bool sampler_params_valid(const struct sampler_params *p)
{
    if (!p || p->n_logprobs < 0 || p->n_logprobs > SAMPLER_MAX_LOGPROBS || !(p->top_p >= 0.0f) ||
        !(p->min_p <= 1.0f) || !(p->repeat_penalty > 0.0f) || p->repeat_last_n < -1 ||
        isnan(p->temperature) || !isfinite(p->presence_penalty) ||
        !isfinite(p->frequency_penalty) || p->n_bias < 0 || p->n_bias > SAMPLER_MAX_BIAS ||
        (p->n_bias > 0 && !p->bias))
        return false;
    for (int i = 0; i < p->n_bias; i++)
        if (p->bias[i].token < 0 || !isfinite(p->bias[i].bias)) return false;
    return true;
}

/* Whether the penalties can ever change a logit (a window and a penalty set). */
static bool penalties_set(const struct sampler_params *p)
{
    return p->repeat_last_n != 0 && (p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f ||
                                     p->frequency_penalty != 0.0f);
}

int sampler_new(const struct sampler_params *params, int n_vocab, struct sampler **out)
{
    if (n_vocab <= 0 || !sampler_params_valid(params)) return ERR_INVAL;
    for (int i = 0; i < params->n_bias; i++)
        if (params->bias[i].token >= n_vocab) return ERR_INVAL;
    int rc = ERR_NOMEM;
    struct sampler *s = calloc(1, sizeof(*s));
    if (!s) goto out;
    s->p = *params;
    s->n_vocab = n_vocab;
    s->p.bias = NULL;
    if (params->n_bias > 0) {
        s->bias = malloc((size_t)params->n_bias * sizeof(*s->bias));
        if (!s->bias) goto out;
        memcpy(s->bias, params->bias, (size_t)params->n_bias * sizeof(*s->bias));
        s->p.bias = s->bias;
    }
    if (params->n_bias > 0 || penalties_set(params)) {
        s->work = malloc((size_t)n_vocab * sizeof(*s->work));
        if (!s->work) goto out;
    }
    if (penalties_set(params)) {
        s->counts = calloc((size_t)n_vocab, sizeof(*s->counts));
        if (!s->counts) goto out;
    }
    if (params->temperature > 0.0f && params->top_k > 0 && params->top_k < n_vocab) {
        /* top-k keeps up to 2k candidates between two selections. */
        long cap = 2L * params->top_k + LANES;
        s->cap_cands = (int)(cap < n_vocab ? cap : n_vocab);
        s->cands = malloc((size_t)s->cap_cands * sizeof(*s->cands));
        if (!s->cands) goto out;
    }
    s->blocks = malloc(((size_t)n_vocab / SAMPLER_BLOCK + 1) * sizeof(*s->blocks));
    if (!s->blocks) goto out;
    sampler_reset(s);
    *out = s;
    s = NULL;
    rc = 0;
out:
    sampler_free(s);
    return rc;
}

void sampler_free(struct sampler *s)
{
    if (!s) return;
    free(s->hist);
    free(s->bias);
    free(s->work);
    free(s->counts);
    free(s->cands);
    free(s->blocks);
    free(s->nucleus);
    free(s);
}

void sampler_reset(struct sampler *s)
{
    s->n_hist = 0;
    s->rng = s->p.seed;
}

void sampler_accept(struct sampler *s, int32_t token)
{
    if (s->n_hist == s->cap_hist) {
        size_t cap = s->cap_hist ? s->cap_hist * 2 : 256;
        int32_t *h = realloc(s->hist, cap * sizeof(*h));
        if (!h) {
            /* Out of memory: drop the oldest half of the history rather than fail a step. */
            size_t keep = s->n_hist / 2;
            memmove(s->hist, s->hist + (s->n_hist - keep), keep * sizeof(*s->hist));
            s->n_hist = keep;
        } else {
            s->hist = h;
            s->cap_hist = cap;
        }
    }
    s->hist[s->n_hist++] = token;
}

/* splitmix64: tiny, good enough for sampling, and fully determined by the seed. */
static uint64_t rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rng_uniform(uint64_t *state)
{
    return (double)(rng_next(state) >> 11) * (1.0 / 9007199254740992.0); /* [0, 1) */
}

/* ---------------------------------------------------------------- vectorisable kernels */

static inline float finite_or_neg_inf(float v)
{
    return fabsf(v) <= FLT_MAX ? v : -INFINITY; /* NaN compares false */
}

/* e^x for x <= 0 in single precision (relative error < 2e-7), 0 for x below -87.3 (where e^x leaves
 * the normal range), for -inf and for NaN. Cephes' expf: x = n ln2 + r with |r| <= ln2 / 2, a
 * degree-6 polynomial for e^r, 2^n from the exponent bits. Branch-free, so loops over it
 * vectorise; n is rounded with the 1.5 * 2^23 trick, which needs no SSE4.1 rounding instruction. */
static inline float exp_nonpos(float x)
{
    const float lo = -87.3f;
    bool in = x >= lo; /* false for NaN */
    float xc = in ? x : lo;
    float fx = xc * 1.44269504088896341f;
    float n = (fx + 12582912.0f) - 12582912.0f;
    float r = xc - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    float z = r * r;
    float y = 1.9875691500e-4f;
    y = y * r + 1.3981999507e-3f;
    y = y * r + 8.3334519073e-3f;
    y = y * r + 4.1665795894e-2f;
    y = y * r + 1.6666665459e-1f;
    y = y * r + 5.0000001201e-1f;
    y = y * z + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof(scale));
    float e = y * scale;
    return in ? e : 0.0f;
}

/* Which tokens a full-vocabulary draw keeps: finite logits l >= floor that rank at or above
 * (cut_l, cut_id) by cand_cmp, i.e. l > cut_l, or l == cut_l and id <= cut_id. The default cut
 * (-inf) keeps every finite logit. */
struct keep {
    float floor;
    float cut_l;
    int32_t cut_id;
};

#define KEEP_ALL ((struct keep){-INFINITY, -INFINITY, 0})

/* The weight of token i: e^((l - m) * inv_t) when `k` keeps it, else 0. */
static inline float weight_of(float l, int32_t i, float m, float inv_t, struct keep k)
{
    float x = (l - m) * inv_t;
    bool keep = l >= k.floor && l <= FLT_MAX && (l > k.cut_l || (l == k.cut_l && i <= k.cut_id));
    return keep ? exp_nonpos(x) : 0.0f;
}

/* The same two functions on LANES floats at once, in GCC/clang vector extensions (lowered to
 * whatever vector width the compiled clone has). Every operation is the scalar one, lane by lane,
 * so results are bit-identical to exp_nonpos and weight_of. */
#ifdef __clang__
/* clang refuses 8-float vector arguments in code built without AVX (the baseline clone), even to
 * inlined helpers: SSE's width there. Every lane computes the same, so results do not change. */
#define VL 4
#else
#define VL 8 /* floats per vector: native on AVX2 */
#endif
#define NV (LANES / VL) /* vectors per LANES chunk */
typedef float vf __attribute__((vector_size(VL * sizeof(float))));
typedef int32_t vi __attribute__((vector_size(VL * sizeof(int32_t))));

static inline __attribute__((always_inline)) vf vf_load(const float *p)
{
    vf v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static inline __attribute__((always_inline)) vf vf_splat(float x)
{
    return (vf){0} + x;
}

/* mask ? a : b, lane by lane (mask lanes are 0 or -1). */
static inline __attribute__((always_inline)) vf vf_select(vi mask, vf a, vf b)
{
    vi ai, bi;
    memcpy(&ai, &a, sizeof(ai));
    memcpy(&bi, &b, sizeof(bi));
    vi r = (ai & mask) | (bi & ~mask);
    vf out;
    memcpy(&out, &r, sizeof(out));
    return out;
}

static inline __attribute__((always_inline)) vi
vf_finite(vf v) /* lanes that are neither NaN nor infinite */
{
    vi bits;
    memcpy(&bits, &v, sizeof(bits));
    return (bits & 0x7fffffff) < 0x7f800000;
}

static inline __attribute__((always_inline)) vf vexp_nonpos(vf x)
{
    vi in = x >= -87.3f;
    vf xc = vf_select(in, x, vf_splat(-87.3f));
    vf fx = xc * 1.44269504088896341f;
    vf n = (fx + 12582912.0f) - 12582912.0f;
    vf r = xc - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    vf z = r * r;
    vf y = vf_splat(1.9875691500e-4f);
    y = y * r + 1.3981999507e-3f;
    y = y * r + 8.3334519073e-3f;
    y = y * r + 4.1665795894e-2f;
    y = y * r + 1.6666665459e-1f;
    y = y * r + 5.0000001201e-1f;
    y = y * z + r + 1.0f;
    vi bits = (__builtin_convertvector(n, vi) + 127) << 23;
    vf scale;
    memcpy(&scale, &bits, sizeof(scale));
    return vf_select(in, y * scale, vf_splat(0.0f));
}

static inline __attribute__((always_inline)) vf vweight_of(vf l, vi ids, float m, float inv_t,
                                                           struct keep k)
{
    vf x = (l - m) * inv_t;
    vi keep =
        (l >= k.floor) & vf_finite(l) & ((l > k.cut_l) | ((l == k.cut_l) & (ids <= k.cut_id)));
    return vf_select(keep, vexp_nonpos(x), vf_splat(0.0f));
}

#if VL == 8
static const vi lane_ids = {0, 1, 2, 3, 4, 5, 6, 7};
#else
static const vi lane_ids = {0, 1, 2, 3};
#endif
_Static_assert(LANES % VL == 0, "a LANES chunk is whole vectors");

/* The largest finite value of l[0..n), or -inf when none is finite. */
SAMPLER_CLONES static float max_finite(const float *l, int n)
{
    vf mx[NV];
    for (int h = 0; h < NV; h++) mx[h] = vf_splat(-INFINITY);
    int i = 0;
    for (; i + LANES <= n; i += LANES) {
        for (int h = 0; h < NV; h++) {
            vf v = vf_load(l + i + h * VL);
            mx[h] = vf_select(vf_finite(v) & (v > mx[h]), v, mx[h]);
        }
    }
    float best = -INFINITY;
    for (int k = 0; k < VL; k++)
        for (int h = 0; h < NV; h++) best = mx[h][k] > best ? mx[h][k] : best;
    for (; i < n; i++) {
        float v = finite_or_neg_inf(l[i]);
        best = v > best ? v : best;
    }
    return best;
}

/* Sums the weights of l[0..n) block by block: blocks[b] for tokens [b*SAMPLER_BLOCK, ...), each
 * over LANES accumulators combined in a fixed order. Returns the total (the blocks summed in
 * double, in order). */
SAMPLER_CLONES static double weigh_blocks(const float *l, int n, float m, float inv_t,
                                          struct keep keep, float *blocks)
{
    double total = 0.0;
    for (int b0 = 0, bi = 0; b0 < n; b0 += SAMPLER_BLOCK, bi++) {
        int end = b0 + SAMPLER_BLOCK < n ? b0 + SAMPLER_BLOCK : n;
        vf acc[NV];
        for (int h = 0; h < NV; h++) acc[h] = vf_splat(0.0f);
        int i = b0;
        for (; i + LANES <= end; i += LANES)
            for (int h = 0; h < NV; h++)
                acc[h] +=
                    vweight_of(vf_load(l + i + h * VL), lane_ids + (i + h * VL), m, inv_t, keep);
        float sum[LANES];
        _Static_assert(sizeof(acc) == sizeof(sum), "one float per lane");
        memcpy(sum, acc, sizeof(acc));
        for (int k = 0; i < end; i++, k++) sum[k] += weight_of(l[i], i, m, inv_t, keep);
        for (int w = LANES / 2; w > 0; w /= 2)
            for (int k = 0; k < w; k++) sum[k] += sum[k + w];
        blocks[bi] = sum[0];
        total += sum[0];
    }
    return total;
}

/* Greedy: the first largest finite logit. -1 when no logit is finite. The maximum over LANES
 * running maxima (4x faster than one compare-and-branch chain on a 32000-token vocabulary), then
 * the first index holding it; -0.0 == 0.0, so the first of them, as one chain picks. */
static int32_t argmax_finite(const float *logits, int n)
{
    float best = max_finite(logits, n);
    if (best == -INFINITY) return -1;
    for (int i = 0; i < n; i++)
        if (logits[i] == best) return i;
    return -1;
}

/* ---------------------------------------------------------------- candidate sets */

/* (logit desc, id asc): a total order, since ids are unique. */
static int cand_cmp(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static int cand_id_cmp(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

/* Reorders c[0..n) so that its first k entries are the k best by cand_cmp (in any order):
 * quickselect, O(n) on average. */
static void select_top(struct cand *c, int n, int k)
{
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        struct cand pivot = c[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (cand_cmp(&c[i], &pivot) < 0) i++;
            while (cand_cmp(&c[j], &pivot) > 0) j--;
            if (i <= j) {
                struct cand t = c[i];
                c[i++] = c[j];
                c[j--] = t;
            }
        }
        if (k - 1 <= j)
            hi = j;
        else if (k - 1 >= i)
            lo = i;
        else
            break;
    }
}

/* The k best finite logits of l[0..n) into c (capacity cap >= 2k), sorted by cand_cmp; returns
 * how many (< k when fewer are finite). A scan in id order keeps the candidates above a threshold,
 * the k-th best seen so far: a later token equal to it has a higher id and so ranks lower, which is
 * why `>` is the exact test. Chunks of LANES whose maximum is under the threshold are skipped in one
 * vectorised comparison, so the scan costs about one read of the logits. */
static int top_k_gather(const float *l, int n, int k, struct cand *c, int cap)
{
    float thr = -INFINITY;
    int have = 0;
    for (int i0 = 0; i0 < n; i0 += LANES) {
        int end = i0 + LANES < n ? i0 + LANES : n;
        if (!(max_finite(l + i0, end - i0) > thr)) continue;
        for (int i = i0; i < end; i++) {
            float v = l[i];
            if (!(v > thr) || v > FLT_MAX) continue;
            if (have == cap) {
                select_top(c, have, k);
                have = k;
                float worst = c[0].logit;
                for (int j = 1; j < k; j++) worst = c[j].logit < worst ? c[j].logit : worst;
                thr = worst;
                if (!(v > thr)) continue;
            }
            c[have++] = (struct cand){i, v};
        }
    }
    if (have > k) {
        select_top(c, have, k);
        have = k;
    }
    qsort(c, (size_t)have, sizeof(*c), cand_cmp);
    return have;
}

/* ---------------------------------------------------------------- penalties and bias */

static bool penalties_active(const struct sampler *s)
{
    return s->n_hist != 0 && penalties_set(&s->p);
}

/* The logits the filters see: `logits` itself, or s->work holding them with the bias and the
 * penalties applied. */
static const float *effective_logits(struct sampler *s, const float *logits)
{
    const struct sampler_params *p = &s->p;
    bool pen = penalties_active(s);
    if (p->n_bias == 0 && !pen) return logits;
    float *w = s->work;
    memcpy(w, logits, (size_t)s->n_vocab * sizeof(*w));
    for (int i = 0; i < p->n_bias; i++) w[p->bias[i].token] += p->bias[i].bias;
    if (!pen) return w;
    size_t n = s->n_hist;
    if (p->repeat_last_n > 0 && (size_t)p->repeat_last_n < n) n = (size_t)p->repeat_last_n;
    const int32_t *win = s->hist + (s->n_hist - n);
    for (size_t i = 0; i < n; i++)
        if (win[i] >= 0 && win[i] < s->n_vocab) s->counts[win[i]]++;
    for (size_t i = 0; i < n; i++) {
        int32_t t = win[i];
        if (t < 0 || t >= s->n_vocab || s->counts[t] == 0) continue; /* done already */
        float l = w[t];
        l = l > 0 ? l / p->repeat_penalty : l * p->repeat_penalty;
        l -= (float)s->counts[t] * p->frequency_penalty + p->presence_penalty;
        w[t] = l;
        s->counts[t] = 0;
    }
    return w;
}

/* ---------------------------------------------------------------- draws */

/* Inverse-CDF draw over the tokens `keep` keeps, in id order, weighted at inv_t. */
static int32_t draw_full(struct sampler *s, const float *l, float m, float inv_t, struct keep keep)
{
    int n = s->n_vocab;
    double z = weigh_blocks(l, n, m, inv_t, keep, s->blocks);
    double target = rng_uniform(&s->rng) * z;
    int n_blocks = (n + SAMPLER_BLOCK - 1) / SAMPLER_BLOCK;
    double cum = 0.0;
    int b = 0;
    for (; b < n_blocks - 1; b++) {
        if (target < cum + s->blocks[b]) break;
        cum += s->blocks[b];
    }
    int b0 = b * SAMPLER_BLOCK, end = b0 + SAMPLER_BLOCK < n ? b0 + SAMPLER_BLOCK : n;
    for (int i = b0; i < end; i++) {
        cum += weight_of(l[i], i, m, inv_t, keep);
        if (target < cum) return i;
    }
    /* Within the block the weights are summed one by one, which may round differently from the
     * block's lanes: a target past the block's end picks the last token of non-zero weight. */
    for (int i = end - 1; i >= 0; i--)
        if (weight_of(l[i], i, m, inv_t, keep) > 0.0f) return i;
    return -1; /* unreachable: the maximum has weight 1 */
}

/* top-p over the whole vocabulary, without sorting it: rejection sampling. Draw a token from the
 * tokens still allowed; it belongs to the nucleus (the smallest prefix by cand_cmp whose probability
 * at temperature 1 reaches top_p) exactly when the tokens ranking above it weigh less than top_p.
 * If it does not, neither does anything ranking at or below it, so the allowed set shrinks to the
 * tokens above it and the draw repeats. Each round accepts every nucleus token with the same
 * probability ratio, so the accepted token follows the distribution restricted to the nucleus, as
 * a sort-and-truncate would give; a rejection removes a random share of the remaining tail, so
 * rounds are few (one with probability top_p, or more). Each round is two vectorised passes. */
static int32_t draw_top_p(struct sampler *s, const float *l, float m, float inv_t, struct keep keep,
                          float top_p)
{
    int n = s->n_vocab;
    double want = (double)top_p * weigh_blocks(l, n, m, 1.0f, KEEP_ALL, s->blocks);
    for (;;) {
        int32_t i = draw_full(s, l, m, inv_t, keep);
        if (i < 0) return -1;
        struct keep above = {-INFINITY, l[i], i - 1};
        double before = weigh_blocks(l, n, m, 1.0f, above, s->blocks);
        if (before < want || before == 0.0) return i; /* 0: i is the best token, always kept */
        keep.cut_l = l[i]; /* i ranked inside the old cut, so this one is stricter */
        keep.cut_id = i - 1;
    }
}

/* Inverse-CDF draw over the n candidates c (any order; reordered by id here). */
static int32_t draw_set(struct sampler *s, struct cand *c, int n, float m, float inv_t)
{
    qsort(c, (size_t)n, sizeof(*c), cand_id_cmp);
    double z = 0.0;
    for (int i = 0; i < n; i++) z += weight_of(c[i].logit, c[i].id, m, inv_t, KEEP_ALL);
    double target = rng_uniform(&s->rng) * z, cum = 0.0;
    int32_t last = c[0].id;
    for (int i = 0; i < n; i++) {
        float w = weight_of(c[i].logit, c[i].id, m, inv_t, KEEP_ALL);
        if (w <= 0.0f) continue;
        last = c[i].id;
        cum += w;
        if (target < cum) return c[i].id;
    }
    return last;
}

/* Fills out->logprob and out->top from the raw logits (log-softmax over finite logits). */
static void fill_logprobs(struct sampler *s, const float *logits, struct sampler_result *out)
{
    float mx = max_finite(logits, s->n_vocab);
    double lse = (double)mx + log(weigh_blocks(logits, s->n_vocab, mx, 1.0f, KEEP_ALL, s->blocks));
    out->logprob = (float)((double)logits[out->token] - lse);

    int n = s->p.n_logprobs < s->n_vocab ? s->p.n_logprobs : s->n_vocab;
    int have = 0;
    for (int i = 0; i < s->n_vocab && n > 0; i++) {
        float v = logits[i];
        if (!isfinite(v)) continue;
        if (have == n && v <= logits[out->top[have - 1].token]) continue;
        int j = have < n ? have++ : n - 1;
        while (j > 0 && logits[out->top[j - 1].token] < v) {
            out->top[j] = out->top[j - 1];
            j--;
        }
        out->top[j].token = i;
    }
    for (int i = 0; i < have; i++)
        out->top[i].logprob = (float)((double)logits[out->top[i].token] - lse);
    out->n_top = have;
}

/* Fills *out for the chosen token (log-probs only when asked for). */
static int sampler_fill(struct sampler *s, const float *logits, int32_t chosen,
                        struct sampler_result *out)
{
    out->token = chosen;
    out->logprob = 0.0f;
    out->n_top = 0;
    if (s->p.logprobs) fill_logprobs(s, logits, out);
    return 0;
}

int sampler_sample(struct sampler *s, const float *logits, struct sampler_result *out)
{
    const struct sampler_params *p = &s->p;
    const float *l = effective_logits(s, logits);
    int32_t chosen;
    if (p->temperature <= 0.0f) {
        chosen = argmax_finite(l, s->n_vocab);
    } else {
        float m = max_finite(l, s->n_vocab);
        if (m == -INFINITY) return ERR_INVAL;
        float inv_t = 1.0f / p->temperature;
        /* min-p keeps p_i >= min_p * p_max, i.e. logit >= max + ln(min_p). */
        struct keep keep = KEEP_ALL;
        if (p->min_p > 0.0f) keep.floor = m + logf(p->min_p);
        if (p->top_k > 0 && p->top_k < s->n_vocab) {
            int n = top_k_gather(l, s->n_vocab, p->top_k, s->cands, s->cap_cands);
            if (n == 0) return ERR_INVAL;
            if (p->top_p < 1.0f) { /* over the k kept, renormalised */
                double z = 0.0, cum = 0.0;
                for (int i = 0; i < n; i++) z += exp_nonpos(s->cands[i].logit - m);
                for (int i = 0; i < n; i++) {
                    cum += exp_nonpos(s->cands[i].logit - m);
                    if (cum >= (double)p->top_p * z) {
                        n = i + 1;
                        break;
                    }
                }
            }
            /* The set is sorted best first: min-p drops a tail of it (never the first). */
            int kept = 1;
            while (kept < n && s->cands[kept].logit >= keep.floor) kept++;
            chosen = draw_set(s, s->cands, kept, m, inv_t);
        } else {
            chosen = p->top_p < 1.0f ? draw_top_p(s, l, m, inv_t, keep, p->top_p)
                                     : draw_full(s, l, m, inv_t, keep);
        }
    }
    if (chosen < 0) return ERR_INVAL;
    return sampler_fill(s, logits, chosen, out);
}

int sampler_logprobs(struct sampler *s, const float *logits, int32_t token,
                     struct sampler_result *out)
{
    if (token < 0 || token >= s->n_vocab || max_finite(logits, s->n_vocab) == -INFINITY)
        return ERR_INVAL;
    out->token = token;
    fill_logprobs(s, logits, out);
    return 0;
}

/* ---------------------------------------------------------------- speculative decoding */

double sampler_uniform(struct sampler *s)
{
    return rng_uniform(&s->rng);
}

void sampler_result_fill(struct sampler *s, const float *logits, int32_t token,
                         struct sampler_result *out)
{
    (void)sampler_fill(s, logits, token, out);
}

int sampler_n_vocab(const struct sampler *s)
{
    return s->n_vocab;
}

/* Writes the normalised weights of the n candidates c (at inv_t, relative to m) into probs. */
static void probs_of_set(const struct cand *c, int n, float m, float inv_t, float *probs)
{
    double z = 0.0;
    for (int i = 0; i < n; i++) z += weight_of(c[i].logit, c[i].id, m, inv_t, KEEP_ALL);
    for (int i = 0; i < n; i++)
        probs[c[i].id] = (float)(weight_of(c[i].logit, c[i].id, m, inv_t, KEEP_ALL) / z);
}

/* top-p without top-k: the nucleus as a sorted candidate prefix. The smallest k whose best-k set
 * weighs at least `want` at temperature 1 is found by gathering 64, 256, ... best tokens; token i
 * of the sorted set is in the nucleus when the tokens before it weigh less than want (the rule of
 * draw_top_p, which always keeps the best token). Returns the nucleus size, or ERR_NOMEM. */
static int nucleus_gather(struct sampler *s, const float *l, float m, double want)
{
    int n_vocab = s->n_vocab;
    for (int k = 64;; k = k > n_vocab / 4 ? n_vocab : k * 4) {
        if (k > n_vocab) k = n_vocab;
        int cap = 2 * k + LANES < n_vocab ? 2 * k + LANES : n_vocab;
        if (cap > s->cap_nucleus) {
            struct cand *c = realloc(s->nucleus, (size_t)cap * sizeof(*c));
            if (!c) return ERR_NOMEM;
            s->nucleus = c;
            s->cap_nucleus = cap;
        }
        int n = top_k_gather(l, n_vocab, k, s->nucleus, cap);
        double before = 0.0;
        for (int i = 0; i < n; i++) {
            if (i > 0 && before >= want) return i;
            before += exp_nonpos(s->nucleus[i].logit - m);
        }
        if (n < k || k == n_vocab) return n; /* every finite token is in */
    }
}

int sampler_probs(struct sampler *s, const float *logits, float *probs)
{
    const struct sampler_params *p = &s->p;
    const float *l = effective_logits(s, logits);
    memset(probs, 0, (size_t)s->n_vocab * sizeof(*probs));
    if (p->temperature <= 0.0f) {
        int32_t best = argmax_finite(l, s->n_vocab);
        if (best < 0) return ERR_INVAL;
        probs[best] = 1.0f;
        return 0;
    }
    float m = max_finite(l, s->n_vocab);
    if (m == -INFINITY) return ERR_INVAL;
    float inv_t = 1.0f / p->temperature;
    float floor = p->min_p > 0.0f ? m + logf(p->min_p) : -INFINITY;
    if (p->top_k > 0 && p->top_k < s->n_vocab) { /* as sampler_sample's top-k branch */
        int n = top_k_gather(l, s->n_vocab, p->top_k, s->cands, s->cap_cands);
        if (n == 0) return ERR_INVAL;
        if (p->top_p < 1.0f) {
            double z = 0.0, cum = 0.0;
            for (int i = 0; i < n; i++) z += exp_nonpos(s->cands[i].logit - m);
            for (int i = 0; i < n; i++) {
                cum += exp_nonpos(s->cands[i].logit - m);
                if (cum >= (double)p->top_p * z) {
                    n = i + 1;
                    break;
                }
            }
        }
        int kept = 1;
        while (kept < n && s->cands[kept].logit >= floor) kept++;
        probs_of_set(s->cands, kept, m, inv_t, probs);
        return 0;
    }
    if (p->top_p < 1.0f) {
        double want = (double)p->top_p * weigh_blocks(l, s->n_vocab, m, 1.0f, KEEP_ALL, s->blocks);
        int n = nucleus_gather(s, l, m, want);
        if (n < 0) return n;
        int kept = 1;
        while (kept < n && s->nucleus[kept].logit >= floor) kept++;
        probs_of_set(s->nucleus, kept, m, inv_t, probs);
        return 0;
    }
    struct keep keep = KEEP_ALL;
    keep.floor = floor;
    double z = weigh_blocks(l, s->n_vocab, m, inv_t, keep, s->blocks);
    for (int i = 0; i < s->n_vocab; i++) {
        float w = weight_of(l[i], i, m, inv_t, keep);
        if (w > 0.0f) probs[i] = (float)(w / z);
    }
    return 0;
}
