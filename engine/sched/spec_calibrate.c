/* The step-cost curve's start-up calibration (see spec.h): timed forward passes of 1, 2, 4, ..
 * tokens on the still empty pool. Apart from spec_ctl.c, which is pure (the cost curve and the
 * plan) and which the autoscaler's simulator links without the model code. */
#include "engine/sched/spec.h"

#include "common/clock.h"
#include "common/err.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/model.h"

#define SPEC_CALIB_MAX_N 64 /* calibration step sizes 1, 2, 4, .. 64 */

int spec_cost_calibrate(struct spec_cost *c, struct model *m, struct kv_cache *kv, int max_tokens)
{
    int seq, rc = 0;
    if (max_tokens > SPEC_CALIB_MAX_N) max_tokens = SPEC_CALIB_MAX_N;
    int bs = kv_cache_block_size(kv);
    int cap = kv_cache_max_blocks_per_seq(kv) * bs;
    if (max_tokens > cap) max_tokens = cap;
    if (kv_cache_seq_open(kv, &seq) != 0) return ERR_AGAIN;
    int32_t ids[SPEC_CALIB_MAX_N];
    int n_vocab = model_hparams(m)->n_vocab;
    for (int i = 0; i < SPEC_CALIB_MAX_N; i++) ids[i] = (int32_t)((i * 7919 + 13) % n_vocab);
    for (int n = 1; n <= max_tokens && !rc; n *= 2) {
        double best = -1.0;
        for (int rep = 0; rep < 3 && !rc; rep++) {
            if ((rc = kv_cache_seq_truncate(kv, seq, 0)) != 0) break;
            if (kv_cache_seq_append(kv, seq, n, NULL) != 0) {
                rc = ERR_AGAIN;
                break;
            }
            /* every row's logits: a verification step's cost, not a prefill's */
            struct model_batch_entry e = {seq, 0, n, ids, MODEL_LOGITS_ALL};
            const float *logits;
            int rows;
            double t0 = clock_mono_s();
            rc = model_forward(m, kv, &e, 1, &logits, &rows);
            double dt = clock_mono_s() - t0;
            if (!rc && (best < 0 || dt < best)) best = dt;
        }
        if (!rc) spec_cost_observe(c, n, best);
    }
    kv_cache_seq_close(kv, seq);
    return rc;
}
