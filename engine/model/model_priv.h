/* Internals shared by model_load.c (hparams, weights), model_forward.c (the batched step) and
 * model_profile.c.
 * Nothing outside engine/model*.c includes this header. */
#ifndef CINFER_ENGINE_MODEL_PRIV_H
#define CINFER_ENGINE_MODEL_PRIV_H

#include "engine/model/model.h"

struct model_layer {
    struct backend_weight *attn_norm;       /* (1, n_embd) */
    struct backend_weight *wq;              /* (n_head * head_dim, n_embd) */
    struct backend_weight *wk;              /* (n_head_kv * head_dim, n_embd) */
    struct backend_weight *wv;              /* (n_head_kv * head_dim, n_embd) */
    struct backend_weight *wo;              /* (n_embd, n_head * head_dim) */
    struct backend_weight *bq, *bk, *bv;    /* qwen2 biases (1, rows of wq/wk/wv); else NULL */
    struct backend_weight *q_norm, *k_norm; /* qwen3 per-head gains (1, head_dim); else NULL */
    struct backend_weight *ffn_norm;        /* (1, n_embd) */
    struct backend_weight *w_gate;          /* (n_ff, n_embd) */
    struct backend_weight *w_up;            /* (n_ff, n_embd) */
    struct backend_weight *w_down;          /* (n_embd, n_ff) */
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
    float *hb;  /* (cap, n_ff) */
    float *hb2; /* (cap, n_ff) */
    float *xo;  /* (cap_out, n_embd) rows whose logits are wanted */
    float *out; /* (cap_out, n_vocab) logits in backend memory */
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
    struct model_options opt;
    struct backend *be;
    struct backend_weight *tok_embd; /* (n_vocab, n_embd) */
    struct backend_weight *out_norm; /* (1, n_embd) */
    struct backend_weight *output; /* (n_vocab, n_embd); == tok_embd when tied (not freed twice) */
    struct model_layer *layers;    /* (n_layer) */
    uint64_t weight_bytes;
    bool kv_ready;
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

/* Frees every lane's activations and their array (model_free). */
void model_scratch_release(struct model *m);

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
