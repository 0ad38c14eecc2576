/* Per-op timing of forward steps (model.h: model_profile_attach). Off unless a profile is attached:
 * then each op is timed by the wall clock and followed by a backend sync. */
#include "engine/model/model.h"
#include "engine/model/model_priv.h"

#include "common/clock.h"

static const char *const model_op_names[MODEL_OP_COUNT] = {
    [MODEL_OP_EMBED] = "embed",
    [MODEL_OP_NORM] = "norm",
    [MODEL_OP_QKV] = "qkv",
    [MODEL_OP_ROPE] = "rope",
    [MODEL_OP_KV_STORE] = "kv_store",
    [MODEL_OP_ATTENTION] = "attention",
    [MODEL_OP_ATTN_OUT] = "attn_out",
    [MODEL_OP_RESIDUAL] = "residual",
    [MODEL_OP_FFN_UP] = "ffn_gate_up",
    [MODEL_OP_SILU] = "silu_mul",
    [MODEL_OP_FFN_DOWN] = "ffn_down",
    [MODEL_OP_MOE] = "moe_route",
    [MODEL_OP_OUTPUT] = "output",
    [MODEL_OP_OTHER] = "other",
};

void model_profile_attach(struct model *m, struct model_profile *p)
{
    m->prof = p;
}

const char *model_op_name(enum model_op op)
{
    return (unsigned)op < MODEL_OP_COUNT ? model_op_names[op] : "?";
}

double model_prof_begin(const struct model *m)
{
    return m->prof ? clock_mono_s() : 0.0;
}

int model_prof_end(struct model *m, enum model_op kind, double t0)
{
    if (!m->prof) return 0;
    int rc = m->be->ops->sync(m->be);
    m->prof->seconds[kind] += clock_mono_s() - t0;
    m->prof->calls[kind]++;
    return rc;
}
