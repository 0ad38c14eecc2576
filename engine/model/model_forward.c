/* The batched forward step: all tokens of a step (prefill chunks and decode tokens of different
 * sequences) go through every layer together, one matmul per weight, with K/V written and read
 * through the paged cache. Per-token results depend only on that token's sequence: every op is
 * row-wise or per-sequence, so batch composition does not change the numbers as long as the backend's
 * matmul computes each row the same way whatever n_tokens is (the CPU backend guarantees it). That
 * is also what lets a step split into lanes (model_lanes.c) without changing a bit of its logits. */
#include "engine/model/model.h"
#include "engine/model/model_priv.h"

#include "common/clock.h"
#include "common/err.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void scratch_free(struct model *m, struct model_scratch *s)
{
    float **bufs[] = {&s->x,     &s->xb,    &s->xb2,   &s->q,     &s->k,      &s->v,
                      &s->att,   &s->hb,    &s->hb2,   &s->xo,    &s->out,    &s->moe_logits,
                      &s->moe_x, &s->moe_g, &s->moe_u, &s->moe_y, &s->sh_out, &s->sh_g};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) {
        if (*bufs[i]) m->be->ops->free(m->be, *bufs[i]);
        *bufs[i] = NULL;
    }
    free(s->moe_ids);
    free(s->moe_w);
    free(s->moe_rows);
    free(s->moe_slot);
    free(s->moe_start);
    s->moe_ids = s->moe_rows = s->moe_slot = s->moe_start = NULL;
    s->moe_w = NULL;
    s->cap = 0;
    s->cap_out = 0;
}

void model_scratch_release(struct model *m)
{
    for (int i = 0; m->s && i < m->lanes_max; i++) scratch_free(m, &m->s[i]);
    free(m->s);
    m->s = NULL;
}

static float *be_alloc(struct model *m, size_t n_floats)
{
    return m->be->ops->alloc(m->be, n_floats * sizeof(float));
}

/* The mixture-of-experts activations of `cap` tokens (nothing without experts). */
static int scratch_moe(struct model *m, struct model_scratch *s, size_t cap)
{
    const struct model_hparams *hp = &m->hp;
    if (hp->n_expert == 0) return 0;
    size_t e = (size_t)hp->n_embd, pairs = cap * (size_t)hp->n_expert_used,
           f = (size_t)hp->n_ff_exp;
    s->moe_logits = be_alloc(m, cap * (size_t)hp->n_expert);
    s->moe_x = be_alloc(m, pairs * e);
    s->moe_g = be_alloc(m, pairs * f);
    s->moe_u = be_alloc(m, pairs * f);
    s->moe_y = be_alloc(m, pairs * e);
    s->moe_ids = malloc(pairs * sizeof(int32_t));
    s->moe_w = malloc(pairs * sizeof(float));
    s->moe_rows = malloc(pairs * sizeof(int32_t));
    s->moe_slot = malloc(pairs * sizeof(int32_t));
    s->moe_start = malloc(((size_t)hp->n_expert + 1) * sizeof(int32_t));
    bool ok = s->moe_logits && s->moe_x && s->moe_g && s->moe_u && s->moe_y && s->moe_ids &&
              s->moe_w && s->moe_rows && s->moe_slot && s->moe_start;
    if (ok && hp->shared_expert) {
        s->sh_out = be_alloc(m, cap * e);
        s->sh_g = be_alloc(m, cap);
        ok = s->sh_out && s->sh_g;
    }
    return ok ? 0 : ERR_NOMEM;
}

/* Grows the activations of one lane to n_tok tokens and n_out logits rows. */
static int scratch_reserve(struct model *m, struct model_scratch *s, int n_tok, int n_out)
{
    const struct model_hparams *hp = &m->hp;
    if (n_tok <= s->cap && n_out <= s->cap_out) return 0;
    int cap = n_tok > s->cap ? n_tok : s->cap;
    int cap_out = n_out > s->cap_out ? n_out : s->cap_out;
    scratch_free(m, s);
    size_t t = (size_t)cap, qd = (size_t)hp->n_head * hp->head_dim,
           kvd = (size_t)hp->n_head_kv * hp->head_dim, e = (size_t)hp->n_embd;
    size_t ff = (size_t)(hp->n_ff > hp->n_ff_shexp ? hp->n_ff : hp->n_ff_shexp);
    s->x = be_alloc(m, t * e);
    s->xb = be_alloc(m, t * e);
    s->xb2 = be_alloc(m, t * e);
    s->q = be_alloc(m, t * qd);
    s->k = be_alloc(m, t * kvd);
    s->v = be_alloc(m, t * kvd);
    s->att = be_alloc(m, t * qd);
    s->hb = be_alloc(m, t * (ff ? ff : 1));
    s->hb2 = be_alloc(m, t * (ff ? ff : 1));
    s->xo = be_alloc(m, (size_t)cap_out * e);
    s->out = be_alloc(m, (size_t)cap_out * (size_t)hp->n_vocab);
    if (!s->x || !s->xb || !s->xb2 || !s->q || !s->k || !s->v || !s->att || !s->hb || !s->hb2 ||
        !s->xo || !s->out || scratch_moe(m, s, t)) {
        scratch_free(m, s);
        return ERR_NOMEM;
    }
    s->cap = cap;
    s->cap_out = cap_out;
    return 0;
}

/* Grows *p (elements of `size` bytes) to at least n; *cap tracks the capacity. */
static int grow(void **p, int *cap, int n, size_t size)
{
    if (n <= *cap) return 0;
    int c = *cap ? *cap : 16;
    while (c < n) c = c > INT32_MAX / 2 ? n : c * 2;
    void *q = realloc(*p, (size_t)c * size);
    if (!q) return ERR_NOMEM;
    *p = q;
    *cap = c;
    return 0;
}

static int step_reserve(struct model *m, int n_tok, int n_seq, int n_out, int n_bt)
{
    struct model_step *st = &m->st;
    int c;
    c = st->cap_tok;
    if (grow((void **)&st->tokens, &c, n_tok, sizeof(int32_t))) return ERR_NOMEM;
    c = st->cap_tok;
    if (grow((void **)&st->pos, &c, n_tok, sizeof(int32_t))) return ERR_NOMEM;
    c = st->cap_tok;
    if (grow((void **)&st->seq_row, &c, n_tok, sizeof(int32_t))) return ERR_NOMEM;
    c = st->cap_tok;
    if (grow((void **)&st->slots, &c, n_tok, sizeof(int64_t))) return ERR_NOMEM;
    st->cap_tok = c;
    c = st->cap_out;
    if (grow((void **)&st->out_idx, &c, n_out, sizeof(int32_t))) return ERR_NOMEM;
    c = st->cap_out;
    if (grow((void **)&st->logits, &c, n_out, (size_t)m->hp.n_vocab * sizeof(float)))
        return ERR_NOMEM;
    st->cap_out = c;
    if (grow((void **)&st->block_tables, &st->cap_bt, n_bt, sizeof(int32_t))) return ERR_NOMEM;
    st->cap_seq = n_seq > st->cap_seq ? n_seq : st->cap_seq;
    return 0;
}

/* Logits rows an entry asks for. */
static int entry_outputs(const struct model_batch_entry *e)
{
    return e->logits == MODEL_LOGITS_ALL ? e->n_tokens : e->logits == MODEL_LOGITS_LAST;
}

/* Checks the entries, plans the step's lanes (st.n_lanes, st.lane_first) and lays out the host
 * arrays of the step, out_idx counting from the first token of each row's lane. */
static int step_build(struct model *m, const struct kv_cache *kv,
                      const struct model_batch_entry *en, int n_en, struct backend_batch *b,
                      int *n_out_ret)
{
    struct model_step *st = &m->st;
    int64_t n_tok = 0, n_out = 0;
    int max_blocks = 1;
    for (int i = 0; i < n_en; i++) {
        const struct model_batch_entry *e = &en[i];
        if (e->n_tokens <= 0 || e->pos < 0 || !e->tokens || !kv_cache_seq_is_open(kv, e->seq))
            return ERR_INVAL;
        if ((int64_t)e->pos + e->n_tokens > kv_cache_seq_len(kv, e->seq)) return ERR_INVAL;
        for (int j = 0; j < i; j++)
            if (en[j].seq == e->seq) return ERR_INVAL;
        for (int j = 0; j < e->n_tokens; j++)
            if (e->tokens[j] < 0 || e->tokens[j] >= m->hp.n_vocab) return ERR_INVAL;
        int nb;
        (void)kv_cache_seq_blocks(kv, e->seq, &nb);
        if (nb > max_blocks) max_blocks = nb;
        n_tok += e->n_tokens;
        n_out += entry_outputs(e);
        if (n_tok > INT32_MAX / 2) return ERR_TOO_BIG;
    }
    if ((int64_t)n_en * max_blocks > INT32_MAX) return ERR_TOO_BIG;
    int rc = step_reserve(m, (int)n_tok, n_en, (int)n_out, n_en * max_blocks);
    if (rc) return rc;
    st->n_lanes = model_lanes_plan(en, n_en, m->lanes_max, st->lane_first);

    int t = 0, o = 0, lane = 0, lane_t0 = 0;
    for (int i = 0; i < n_en; i++) {
        const struct model_batch_entry *e = &en[i];
        if (i == st->lane_first[lane]) {
            lane_t0 = t;
            lane++;
        }
        int nb;
        const int32_t *bt = kv_cache_seq_blocks(kv, e->seq, &nb);
        int32_t *row = st->block_tables + (size_t)i * max_blocks;
        memcpy(row, bt, (size_t)nb * sizeof(*row));
        for (int j = nb; j < max_blocks; j++) row[j] = 0; /* never read: beyond the causal range */
        for (int j = 0; j < e->n_tokens; j++, t++) {
            st->tokens[t] = e->tokens[j];
            st->pos[t] = e->pos + j;
            st->seq_row[t] = i;
            st->slots[t] = kv_cache_seq_slot(kv, e->seq, e->pos + j);
            if (e->logits == MODEL_LOGITS_ALL ||
                (e->logits == MODEL_LOGITS_LAST && j == e->n_tokens - 1))
                st->out_idx[o++] = t - lane_t0;
        }
    }
    b->n_tokens = t;
    b->pos = st->pos;
    b->seq = st->seq_row;
    b->block_tables = st->block_tables;
    b->n_seqs = n_en;
    b->max_blocks = max_blocks;
    b->slots = st->slots;
    *n_out_ret = o;
    return 0;
}

/* y[i] = x @ W[i]^T for weights sharing the input, as one backend job where the backend offers it. */
static int matmul_shared_input(struct backend *be, const struct backend_weight *const *w, int n,
                               const float *x, float *const *y, int T)
{
    if (be->ops->matmul_group) return be->ops->matmul_group(be, w, n, x, y, T);
    for (int i = 0; i < n; i++) {
        int rc = be->ops->matmul(be, w[i], x, y[i], T);
        if (rc) return rc;
    }
    return 0;
}

/* One lane's share of a step: a run of whole entries, their tokens a slice of the step's arrays. */
struct lane_run {
    struct model *m;
    struct model_scratch *s;
    /* the slice: tokens, positions, slots; the block tables are the whole step's */
    struct backend_batch b;
    const int32_t *tokens;
    const int32_t *out_idx; /* (n_out) rows to keep, counted from the lane's first token */
    int n_out;
    float *logits; /* (n_out, n_vocab) host rows of the lane's outputs */
    bool timed;    /* records the profile: the unsplit step or lane 0 (lanes' ops overlap) */
};

/* Runs one op of a function holding `r` (a lane_run), `m` and `rc`, timed under `kind` when the
 * lane records an attached profile (model_profile.c); returns the op's error. */
#define TIMED(kind, call)                                                                          \
    do {                                                                                           \
        double t0_ = r->timed ? model_prof_begin(m) : 0.0;                                         \
        if ((rc = (call)) || (r->timed && (rc = model_prof_end(m, (kind), t0_)))) return rc;       \
    } while (0)

void model_moe_plan(const int32_t *ids, int n_rows, int k, int n_expert, int32_t *start,
                    int32_t *rows, int32_t *slot)
{
    int n = n_rows * k;
    memset(start, 0, ((size_t)n_expert + 1) * sizeof(*start));
    for (int i = 0; i < n; i++) start[ids[i] + 1]++;
    for (int e = 0; e < n_expert; e++) start[e + 1] += start[e];
    /* counting sort, start[e] as expert e's cursor; afterwards start[e] is expert e + 1's start */
    for (int i = 0; i < n; i++) {
        int at = start[ids[i]]++;
        rows[at] = i / k;
        slot[i] = at;
    }
    for (int e = n_expert; e > 0; e--) start[e] = start[e - 1];
    start[0] = 0;
}

/* The routed feed-forward block of R rows (llama.cpp's build_moe_ffn with softmax gating, and
 * qwen2moe's shared expert): xb (R, n_embd) in, xb2 out. Each expert's matmuls run once over the
 * rows routed to it, gathered expert by expert into moe_x; their outputs are gathered back into
 * (row, slot) order and added with the routing weights in slot order, as ggml adds the views. */
static int run_moe(const struct lane_run *r, const struct model_layer *l, int R)
{
    struct model *m = r->m;
    const struct backend_ops *op = m->be->ops;
    struct backend *be = m->be;
    const struct model_hparams *hp = &m->hp;
    const struct model_experts *x = l->moe;
    struct model_scratch *s = r->s;
    int E = hp->n_embd, F = hp->n_ff_exp, K = hp->n_expert_used, rc;
    TIMED(MODEL_OP_MOE, op->matmul(be, x->gate_inp, s->xb, s->moe_logits, R));
    TIMED(MODEL_OP_MOE, op->moe_route(be, s->moe_logits, R, hp->n_expert, K, hp->expert_norm,
                                      s->moe_ids, s->moe_w));
    model_moe_plan(s->moe_ids, R, K, hp->n_expert, s->moe_start, s->moe_rows, s->moe_slot);
    TIMED(MODEL_OP_MOE, op->gather_rows(be, s->xb, s->moe_rows, R * K, E, s->moe_x));
    for (int e = 0; e < hp->n_expert; e++) {
        int n = s->moe_start[e + 1] - s->moe_start[e];
        if (n == 0) continue;
        size_t o = (size_t)s->moe_start[e];
        const struct backend_weight *gu[2] = {x->gate[e], x->up[e]};
        float *gu_out[2] = {s->moe_g + o * F, s->moe_u + o * F};
        TIMED(MODEL_OP_FFN_UP, matmul_shared_input(be, gu, 2, s->moe_x + o * E, gu_out, n));
    }
    TIMED(MODEL_OP_SILU, op->silu_mul(be, s->moe_g, s->moe_u, (size_t)R * K * F));
    for (int e = 0; e < hp->n_expert; e++) {
        int n = s->moe_start[e + 1] - s->moe_start[e];
        if (n == 0) continue;
        size_t o = (size_t)s->moe_start[e];
        TIMED(MODEL_OP_FFN_DOWN, op->matmul(be, x->down[e], s->moe_g + o * F, s->moe_y + o * E, n));
    }
    TIMED(MODEL_OP_MOE, op->gather_rows(be, s->moe_y, s->moe_slot, R * K, E, s->moe_x));
    TIMED(MODEL_OP_MOE, op->moe_combine(be, s->moe_x, s->moe_w, R, K, E, s->xb2));
    if (!x->sh_gate) return 0;
    /* qwen2moe: + shared expert * sigmoid(its gate) */
    int FS = hp->n_ff_shexp;
    const struct backend_weight *gu[2] = {x->sh_gate, x->sh_up};
    float *gu_out[2] = {s->hb, s->hb2};
    TIMED(MODEL_OP_FFN_UP, matmul_shared_input(be, gu, 2, s->xb, gu_out, R));
    TIMED(MODEL_OP_SILU, op->silu_mul(be, s->hb, s->hb2, (size_t)R * FS));
    TIMED(MODEL_OP_FFN_DOWN, op->matmul(be, x->sh_down, s->hb, s->sh_out, R));
    TIMED(MODEL_OP_MOE, op->matmul(be, x->sh_gate_inp, s->xb, s->sh_g, R));
    TIMED(MODEL_OP_MOE, op->scale_rows_sigmoid(be, s->sh_out, s->sh_g, R, E));
    TIMED(MODEL_OP_RESIDUAL, op->add(be, s->xb2, s->sh_out, (size_t)R * E));
    return 0;
}

/* The dense feed-forward block of R rows: SwiGLU or GeGLU, xb in, xb2 out. */
static int run_ffn(const struct lane_run *r, const struct model_layer *l, int R)
{
    struct model *m = r->m;
    const struct backend_ops *op = m->be->ops;
    struct backend *be = m->be;
    const struct model_hparams *hp = &m->hp;
    struct model_scratch *s = r->s;
    int rc;
    const struct backend_weight *gate_up[2] = {l->w_gate, l->w_up};
    float *gate_up_out[2] = {s->hb, s->hb2};
    TIMED(MODEL_OP_FFN_UP, matmul_shared_input(be, gate_up, 2, s->xb, gate_up_out, R));
    if (l->b_up) TIMED(MODEL_OP_FFN_UP, op->add_bias(be, s->hb2, l->b_up, R));
    if (l->b_gate) TIMED(MODEL_OP_FFN_UP, op->add_bias(be, s->hb, l->b_gate, R));
    size_t n = (size_t)R * hp->n_ff;
    TIMED(MODEL_OP_SILU,
          hp->gelu ? op->gelu_mul(be, s->hb, s->hb2, n) : op->silu_mul(be, s->hb, s->hb2, n));
    TIMED(MODEL_OP_FFN_DOWN, op->matmul(be, l->w_down, s->hb, s->xb2, R));
    if (l->b_down) TIMED(MODEL_OP_FFN_DOWN, op->add_bias(be, s->xb2, l->b_down, R));
    return 0;
}

/* One layer over the T tokens of the step. In the last layer only the n_out rows whose logits are
 * wanted go on after attention (as llama.cpp does): their attention outputs and residuals are
 * gathered into q and xo, and the layer finishes on those rows, leaving the final hidden states in
 * xo. Row-wise ops make the result the same bits as finishing every row and gathering after. */
static int run_layer(const struct lane_run *r, int il)
{
    struct model *m = r->m;
    const struct backend_ops *op = m->be->ops;
    struct backend *be = m->be;
    const struct model_hparams *hp = &m->hp;
    const struct model_layer *l = &m->layers[il];
    struct model_scratch *s = r->s;
    const struct backend_batch *b = &r->b;
    int n_out = r->n_out;
    int T = b->n_tokens, E = hp->n_embd, qd = hp->n_head * hp->head_dim;
    bool last = il == hp->n_layer - 1;
    struct backend_rope_params rp = {
        .mode = hp->rope_mode,
        .n_rot = hp->n_rot,
        .freq_base = l->swa ? hp->rope_freq_base_swa : hp->rope_freq_base,
        .freq_scale = l->swa ? hp->rope_freq_scale_swa : hp->rope_freq_scale,
        .ext_factor = hp->rope_ext_factor,
        .attn_factor = hp->rope_attn_factor,
        .beta_fast = hp->rope_beta_fast,
        .beta_slow = hp->rope_beta_slow,
        .n_ctx_orig = hp->n_ctx_orig,
        .freq_factors = m->rope_factors,
    };
    /* gemma and phi3 scale q after rope and attend with scale 1, as their llama.cpp graphs do */
    struct backend_attn_params ap = {
        .scale = hp->q_scale > 0.0f ? 1.0f : 1.0f / sqrtf((float)hp->head_dim),
        .softcap = hp->attn_softcap,
        .window = l->swa ? hp->n_swa : 0,
    };
    int rc;
    /* Attention block: every token's K/V is stored, whatever is wanted afterwards. */
    TIMED(MODEL_OP_NORM, op->rmsnorm(be, s->x, l->attn_norm, s->xb, T, E, hp->rms_eps));
    const struct backend_weight *qkv[3] = {l->wq, l->wk, l->wv};
    float *qkv_out[3] = {s->q, s->k, s->v};
    TIMED(MODEL_OP_QKV, matmul_shared_input(be, qkv, 3, s->xb, qkv_out, T));
    if (l->bq) TIMED(MODEL_OP_QKV, op->add_bias(be, s->q, l->bq, T));
    if (l->bk) TIMED(MODEL_OP_QKV, op->add_bias(be, s->k, l->bk, T));
    if (l->bv) TIMED(MODEL_OP_QKV, op->add_bias(be, s->v, l->bv, T));
    if (l->q_norm)
        TIMED(MODEL_OP_NORM,
              op->rmsnorm_heads(be, s->q, l->q_norm, T * hp->n_head, hp->head_dim, hp->rms_eps));
    if (l->k_norm)
        TIMED(MODEL_OP_NORM,
              op->rmsnorm_heads(be, s->k, l->k_norm, T * hp->n_head_kv, hp->head_dim, hp->rms_eps));
    TIMED(MODEL_OP_ROPE, op->rope(be, s->q, b->pos, T, hp->n_head, hp->head_dim, &rp));
    TIMED(MODEL_OP_ROPE, op->rope(be, s->k, b->pos, T, hp->n_head_kv, hp->head_dim, &rp));
    if (hp->q_scale > 0.0f) TIMED(MODEL_OP_NORM, op->scale(be, s->q, (size_t)T * qd, hp->q_scale));
    TIMED(MODEL_OP_KV_STORE, op->kv_store(be, il, s->k, s->v, b));
    if (last && n_out == 0) return 0; /* nothing reads this layer's output */
    TIMED(MODEL_OP_ATTENTION, op->attention(be, il, s->q, s->att, b, hp->n_head, &ap));

    float *att = s->att, *x = s->x;
    int R = T;
    if (last) {
        TIMED(MODEL_OP_OTHER, op->gather_rows(be, s->att, r->out_idx, n_out, qd, s->q));
        TIMED(MODEL_OP_OTHER, op->gather_rows(be, s->x, r->out_idx, n_out, E, s->xo));
        att = s->q;
        x = s->xo;
        R = n_out;
    }
    TIMED(MODEL_OP_ATTN_OUT, op->matmul(be, l->wo, att, s->xb2, R));
    if (l->bo) TIMED(MODEL_OP_ATTN_OUT, op->add_bias(be, s->xb2, l->bo, R));
    if (l->attn_post_norm)
        TIMED(MODEL_OP_NORM, op->rmsnorm(be, s->xb2, l->attn_post_norm, s->xb2, R, E, hp->rms_eps));
    TIMED(MODEL_OP_RESIDUAL, op->add(be, x, s->xb2, (size_t)R * E));

    /* Feed-forward block. */
    TIMED(MODEL_OP_NORM, op->rmsnorm(be, x, l->ffn_norm, s->xb, R, E, hp->rms_eps));
    if ((rc = l->moe ? run_moe(r, l, R) : run_ffn(r, l, R))) return rc;
    if (l->ffn_post_norm)
        TIMED(MODEL_OP_NORM, op->rmsnorm(be, s->xb2, l->ffn_post_norm, s->xb2, R, E, hp->rms_eps));
    TIMED(MODEL_OP_RESIDUAL, op->add(be, x, s->xb2, (size_t)R * E));
    return 0;
}

/* The forward pass of one lane (or of the unsplit step): every layer, then the lane's logits. */
static int run_lane(const struct lane_run *r)
{
    struct model *m = r->m;
    const struct backend_ops *op = m->be->ops;
    struct backend *be = m->be;
    struct model_scratch *s = r->s;
    const struct model_hparams *hp = &m->hp;
    int rc;
    TIMED(MODEL_OP_EMBED, op->get_rows(be, m->tok_embd, r->tokens, r->b.n_tokens, s->x));
    if (hp->embd_scale)
        TIMED(MODEL_OP_NORM,
              op->scale(be, s->x, (size_t)r->b.n_tokens * hp->n_embd, sqrtf((float)hp->n_embd)));
    for (int il = 0; il < hp->n_layer; il++)
        if ((rc = run_layer(r, il))) return rc;
    if (r->n_out == 0) return op->sync(be);
    TIMED(MODEL_OP_NORM,
          op->rmsnorm(be, s->xo, m->out_norm, s->xo, r->n_out, hp->n_embd, hp->rms_eps));
    TIMED(MODEL_OP_OUTPUT, op->matmul(be, m->output, s->xo, s->out, r->n_out));
    if (m->out_bias) TIMED(MODEL_OP_OUTPUT, op->add_bias(be, s->out, m->out_bias, r->n_out));
    if (hp->final_softcap > 0.0f)
        TIMED(MODEL_OP_OUTPUT,
              op->softcap(be, s->out, (size_t)r->n_out * hp->n_vocab, hp->final_softcap));
    TIMED(MODEL_OP_OTHER, op->sync(be));
    TIMED(MODEL_OP_OTHER, op->download(be, r->logits, s->out,
                                       (size_t)r->n_out * (size_t)hp->n_vocab * sizeof(float)));
    return 0;
}
#undef TIMED

/* A step split into lanes (model_lanes.c): the whole step's run and its entries. */
struct split_step {
    const struct lane_run *whole;
    const struct model_batch_entry *en;
};

/* Lane `lane` of a split step (run_lanes calls it on the lane's thread): its entries' slice of
 * the step, on the lane's own activations, its logits into its rows of the step's. */
static int split_lane_main(void *ctx, int lane)
{
    const struct split_step *sp = ctx;
    const struct lane_run *w = sp->whole;
    struct model *m = w->m;
    const int *first = m->st.lane_first;
    int t0 = 0, o0 = 0, nt = 0, no = 0;
    for (int i = 0; i < first[lane + 1]; i++) {
        int *tok = i < first[lane] ? &t0 : &nt, *out = i < first[lane] ? &o0 : &no;
        *tok += sp->en[i].n_tokens;
        *out += entry_outputs(&sp->en[i]);
    }
    struct lane_run r = *w;
    r.s = &m->s[lane];
    r.b.n_tokens = nt;
    r.b.pos = w->b.pos + t0;
    r.b.seq = w->b.seq + t0;
    r.b.slots = w->b.slots + t0;
    r.tokens = w->tokens + t0;
    r.out_idx = w->out_idx + o0;
    r.n_out = no;
    r.logits = w->logits + (size_t)o0 * (size_t)m->hp.n_vocab;
    r.timed = w->timed && lane == 0;
    int rc = scratch_reserve(m, r.s, nt, no > 0 ? no : 1);
    return rc ? rc : run_lane(&r);
}

int model_forward(struct model *m, const struct kv_cache *kv,
                  const struct model_batch_entry *entries, int n_entries, const float **logits,
                  int *n_rows)
{
    if (!m->kv_ready || n_entries <= 0 || !entries)
        return n_entries <= 0 ? ERR_INVAL : ERR_BAD_STATE;
    struct lane_run whole = {.m = m, .timed = m->prof != NULL};
    int rc = step_build(m, kv, entries, n_entries, &whole.b, &whole.n_out);
    if (rc) return rc;
    int n_lanes = m->st.n_lanes;
    whole.s = &m->s[0];
    whole.tokens = m->st.tokens;
    whole.out_idx = m->st.out_idx;
    whole.logits = m->st.logits;

    double t_step = model_prof_begin(m);
    if (n_lanes == 1) {
        rc = scratch_reserve(m, whole.s, whole.b.n_tokens, whole.n_out > 0 ? whole.n_out : 1);
        if (!rc) rc = run_lane(&whole);
    } else {
        struct split_step sp = {&whole, entries};
        rc = m->be->ops->run_lanes(m->be, n_lanes, split_lane_main, &sp);
    }
    if (rc) return rc;
    if (m->prof) {
        m->prof->step_seconds += clock_mono_s() - t_step;
        m->prof->steps++;
        m->prof->lanes = n_lanes;
    }
    *logits = m->st.logits;
    *n_rows = whole.n_out;
    return 0;
}

int model_forward_lanes(const struct model *m)
{
    return m->st.n_lanes > 0 ? m->st.n_lanes : 1;
}
