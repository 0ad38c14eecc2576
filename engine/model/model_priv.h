/* Internals shared by model_load.c (hparams, weights), model_forward.c (the batched step),
 * model_lanes.c and model_profile.c.
 * Nothing outside engine/model*.c includes this header. */
#ifndef CINFER_ENGINE_MODEL_PRIV_H
#define CINFER_ENGINE_MODEL_PRIV_H

#include "engine/model/model.h"

/* One expert set of a mixture-of-experts layer: each expert's matrices are zero-copy slices of the
 * stacked ffn_{gate,up,down}_exps tensors (ne = {cols, rows, n_expert}). */
struct model_experts {
    struct backend_weight *gate_inp; /* (n_expert, n_embd) router */
    struct backend_weight **gate;    /* (n_expert) each (n_ff_exp, n_embd) */
    struct backend_weight **up;      /* (n_expert) each (n_ff_exp, n_embd) */
    struct backend_weight **down;    /* (n_expert) each (n_embd, n_ff_exp) */
    /* qwen2moe's shared expert and its gate; NULL elsewhere */
    struct backend_weight *sh_gate_inp;     /* (1, n_embd) */
    struct backend_weight *sh_gate, *sh_up; /* (n_ff_shexp, n_embd) */
    struct backend_weight *sh_down;         /* (n_embd, n_ff_shexp) */
};

struct model_layer {
    struct backend_weight *attn_norm; /* (1, n_embd) */
    /* Q, K, V: separate tensors or row slices of a fused attn_qkv (phi3) */
    struct backend_weight *wq;           /* (n_head * head_dim, n_embd) */
    struct backend_weight *wk;           /* (n_head_kv * head_dim, n_embd) */
    struct backend_weight *wv;           /* (n_head_kv * head_dim, n_embd) */
    struct backend_weight *wo;           /* (n_embd, n_head * head_dim) */
    struct backend_weight *bq, *bk, *bv; /* biases (1, rows of wq/wk/wv) when present; else NULL */
    struct backend_weight *bo;           /* attn_output.bias (1, n_embd) when present */
    struct backend_weight *q_norm,
        *k_norm; /* qwen3, gemma3 per-head gains (1, head_dim); else NULL */
    struct backend_weight *attn_post_norm; /* gemma (1, n_embd); else NULL */
    struct backend_weight *ffn_norm;       /* (1, n_embd) */
    struct backend_weight *ffn_post_norm;  /* gemma (1, n_embd); else NULL */
    /* dense FFN (NULL with experts): separate tensors, or phi3's fused ffn_up split in halves */
    struct backend_weight *w_gate;                 /* (n_ff, n_embd) */
    struct backend_weight *w_up;                   /* (n_ff, n_embd) */
    struct backend_weight *w_down;                 /* (n_embd, n_ff) */
    struct backend_weight *b_gate, *b_up, *b_down; /* llama's optional FFN biases; else NULL */
    struct model_experts *moe;                     /* with n_expert > 0; else NULL */
    bool swa;                                      /* a sliding-window layer */
};

/* Activations of one step in backend memory, sized for `cap` tokens / `cap_out` logits rows. */
struct model_scratch {
    int cap, cap_out;
    float *x;   /* (cap, n_embd) residual stream */
    float *xb;  /* (cap, n_embd) normed input */
    float *xb2; /* (cap, n_embd) attention / ffn output */
    float *q;   /* (cap, n_head * head_dim) */
    float *k;   /* (cap, n_head_kv * head_dim) */
    float *v;   /* (cap, n_head_kv * head_dim) */
    float *att; /* (cap, n_head * head_dim) */
    float *hb;  /* (cap, max(n_ff, n_ff_shexp)) */
    float *hb2; /* (cap, max(n_ff, n_ff_shexp)) */
    float *xo;  /* (cap_out, n_embd) rows whose logits are wanted */
    float *out; /* (cap_out, n_vocab) logits in backend memory */
    /* mixture of experts (NULL without): K = n_expert_used, F = n_ff_exp */
    float *moe_logits; /* (cap, n_expert) router logits */
    float *moe_x;      /* (cap * K, n_embd) inputs grouped by expert, then outputs by slot */
    float *moe_g;      /* (cap * K, F) gate activations grouped by expert */
    float *moe_u;      /* (cap * K, F) up activations grouped by expert */
    float *moe_y;      /* (cap * K, n_embd) expert outputs grouped by expert */
    float *sh_out;     /* (cap, n_embd) shared expert output (qwen2moe) */
    float *sh_g;       /* (cap) shared expert gate logits (qwen2moe) */
    /* host: the routing of the step's rows (model_moe_plan) */
    int32_t *moe_ids;   /* (cap * K) expert of each (row, slot) */
    float *moe_w;       /* (cap * K) its weight */
    int32_t *moe_rows;  /* (cap * K) by expert: the row each routed input comes from */
    int32_t *moe_slot;  /* (cap * K) by slot: where in the expert order its output is */
    int32_t *moe_start; /* (n_expert + 1) each expert's first index in the expert order */
};

/* Host-side arrays describing one step (grown on demand). out_idx holds each output row's token
 * index relative to the first token of its lane (model_forward.c), so a lane reads its slice. */
struct model_step {
    int cap_tok, cap_seq, cap_out, cap_bt;
    int32_t *tokens, *pos, *seq_row, *out_idx, *block_tables;
    int64_t *slots;
    int n_lanes;     /* lanes of the step (model_lanes_plan) */
    int *lane_first; /* (lanes_max + 1) each lane's first entry, then the entry count */
    float *logits;   /* (cap_out, n_vocab) host copy returned to the caller */
};

struct model {
    struct gguf *gguf;
    struct model_hparams hp;
    /* rope frequency factors (n_rot / 2 floats, owned): Llama 3.1's rope_freqs, or the long or
     * short long-rope factors picked for opt.n_ctx_seq; NULL when the model has none */
    float *rope_factors;
    struct model_options opt;
    struct backend *be;
    struct backend_weight *tok_embd; /* (n_vocab, n_embd) */
    struct backend_weight *out_norm; /* (1, n_embd) */
    struct backend_weight *out_bias; /* output.bias (1, n_vocab) of qwen2 / phi3 files; else NULL */
    struct backend_weight *output; /* (n_vocab, n_embd); == tok_embd when tied (not freed twice) */
    struct model_layer *layers;    /* (n_layer) */
    uint64_t weight_bytes;
    /* load progress (model_load.c): tensor bytes read so far of the file's total, and when */
    uint64_t load_total, load_done;
    double load_t0, load_logged;
    bool kv_ready;
    int kv_block_size; /* tokens per block of the storage model_kv_init allocated */
    /* (lanes_max) activations, one set per lane; s[0] serves unsplit steps */
    struct model_scratch *s;
    /* The backend's lanes_max; 1 without run_lanes, with no_lanes or with float_matmuls. */
    int lanes_max;
    /* Some matrix is multiplied on the backend's float path (weight_float_path): each lane
     * would then convert or stream every weight itself, so steps never split (bench b16 with F32
     * weights: 308 vs 433 tok/s split). Set while the weights load. */
    bool float_matmuls;
    struct model_step st;
    struct model_profile *prof; /* borrowed; NULL unless profiling */
};

/* Writes the printf-style message into err (when errlen > 0) and returns rc (model_hparams.c). */
int model_fail(char *err, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Tensors (model_tensor.c). `flags` are MODEL_WEIGHT_* bits. */
enum {
    MODEL_WEIGHT_OPTIONAL = 1,    /* a missing tensor leaves the weight NULL, not an error */
    MODEL_WEIGHT_LOOKUP_ONLY = 2, /* only read by get_rows (see backend_weight_desc) */
    MODEL_WEIGHT_LOOKUP = 4,      /* read by get_rows and matmul (a tied embedding table) */
};
/* Finds tensor `name` and checks it against the shape ne = {cols, rows, n}: n == 0 means a 2-D
 * tensor, or a 1-D one when rows == 1; n > 0 a 3-D stack of n matrices. Checks its type can be
 * loaded and its data size. *out is NULL for a missing optional tensor. Errors name the tensor. */
int model_tensor_find(struct model *m, const char *name, int64_t rows, int64_t cols, int64_t n,
                      unsigned flags, const struct gguf_tensor **out, char *err, size_t errlen);
/* Faults in the tensor's pages and counts its bytes; logs progress every opt.progress_s. */
void model_tensor_progress(struct model *m, const struct gguf_tensor *t);
/* Validates `name` as (rows, cols) (1-D when rows == 1) and prepares it into *out. */
int model_tensor_load(struct model *m, const char *name, int64_t rows, int64_t cols, unsigned flags,
                      struct backend_weight **out, char *err, size_t errlen);
/* A fused tensor of sum(parts) rows as n weights of parts[i] rows (zero-copy slices), or with
 * cols == 0 a fused 1-D bias split by columns into parts of parts[i] values. */
int model_tensor_load_split(struct model *m, const char *name, const int64_t *parts, int n,
                            int64_t cols, unsigned flags, struct backend_weight **out, char *err,
                            size_t errlen);
/* A stack ne = {cols, rows, n_expert} as a new array of n_expert weights (*out, freed by the
 * caller with each weight), one slice per expert. */
int model_tensor_load_experts(struct model *m, const char *name, int64_t rows, int64_t cols,
                              struct backend_weight ***out, char *err, size_t errlen);

/* Frees every lane's activations and their array (model_free). */
void model_scratch_release(struct model *m);

/* The expert order of a routed step (pure, model_forward.c): from ids (n_rows * k, each in
 * [0, n_expert)), start (n_expert + 1) gets each expert's first index in the order that lists the
 * (row, slot) pairs expert by expert, rows ascending within an expert; rows[i] the row of the i-th
 * pair in that order, slot[r * k + j] the index of pair (r, j) in it. */
void model_moe_plan(const int32_t *ids, int n_rows, int k, int n_expert, int32_t *start,
                    int32_t *rows, int32_t *slot);

/* Lanes (model_lanes.c). A step whose decodes are many and alike runs as n_lanes contiguous runs of
 * its entries, each a whole forward pass on one thread (backend.h run_lanes), rather than op by op
 * over all threads: the step then has no thread barrier between its ops (a decode step has about
 * a hundred), and small ops run without the pool's hand-offs.
 *
 * Each lane reads every weight, so its matmuls need tokens enough to be bound by arithmetic, not
 * memory: on the 2-core VM lanes of 4 tokens lost to op-parallel steps (bench b8: 790 vs 874
 * tok/s), lanes of 8 won (b16 +4%, 16-client serving +3%; engine/BENCHMARKS.md, session 6). With
 * more threads a split needs 8 tokens for each, which also keeps many-core pods with few
 * sequences op-parallel.
 *
 * model_lanes_plan writes the first entry of each lane to first[0..n_lanes-1] and n_en to
 * first[n_lanes] (first holds lanes_max + 1), and returns n_lanes: 1 (no split) unless lanes_max
 * lanes each get at least MODEL_LANE_MIN_TOKENS tokens with estimated costs within
 * MODEL_LANE_MAX_SKEW of an even share. */
#define MODEL_LANE_MIN_TOKENS 8
#define MODEL_LANE_MAX_SKEW   1.25
int model_lanes_plan(const struct model_batch_entry *en, int n_en, int lanes_max, int *first);

/* Profiling (model_profile.c): the clock at the start of an op when a profile is attached, else 0;
 * then, after the op, a backend sync and the time added to `kind` (0 or the sync's error). */
double model_prof_begin(const struct model *m);
int model_prof_end(struct model *m, enum model_op kind, double t0);

#endif
