/* Verification of proposals against the target's logits (see spec.h, spec_verify_row). The
 * target's distribution p is the sampler's own (sampler_probs: bias, penalties, top-k, top-p,
 * min-p and temperature applied), so speculation changes which tokens are computed together, never
 * what is drawn. Randomness comes from the sequence's sampler, whose seeded stream advances by the
 * same rule whatever else is in the batch.
 *
 * A structured-output grammar masks inside the sampler (sampler_sample, sampler_probs): each row
 * is then verified under the state after the tokens before it, which the scheduler accepts in
 * order, so a proposal the grammar forbids is simply rejected. */
#include "engine/sched/spec.h"

#include "engine/sched/sampler.h"

#include "common/err.h"

int32_t spec_draw(const float *p, int n, double u)
{
    double z = 0.0;
    for (int i = 0; i < n; i++) z += (double)p[i];
    if (!(z > 0.0)) return -1;
    double target = u * z, cum = 0.0;
    int32_t last = -1;
    for (int i = 0; i < n; i++) {
        if (!(p[i] > 0.0f)) continue;
        last = i;
        cum += (double)p[i];
        if (target < cum) return i;
    }
    return last; /* u * z rounded past the sum */
}

int spec_verify_row(struct sampler *smp, const float *logits, int32_t proposal, const float *q,
                    float *scratch, struct sampler_result *out)
{
    int rc;
    if (!q || proposal < 0) {
        if ((rc = sampler_sample(smp, logits, out)) != 0) return rc;
        if (proposal < 0) return SPEC_BONUS;
        return out->token == proposal ? SPEC_ACCEPTED : SPEC_CORRECTED;
    }
    int n_vocab = sampler_n_vocab(smp);
    float *p = scratch;
    if ((rc = sampler_probs(smp, logits, p)) != 0) return rc;
    double u = sampler_uniform(smp);
    /* accept with probability min(1, p(d) / q(d)); q(d) > 0 since d was drawn from q */
    if (q[proposal] > 0.0f && u * (double)q[proposal] < (double)p[proposal]) {
        sampler_result_fill(smp, logits, proposal, out);
        return SPEC_ACCEPTED;
    }
    /* the residual max(0, p - q), normalised by spec_draw; p(d) < q(d) here, so d has none */
    bool any = false;
    for (int i = 0; i < n_vocab; i++) {
        float r = p[i] - q[i];
        p[i] = r > 0.0f ? r : 0.0f;
        any |= p[i] > 0.0f;
    }
    double u2 = sampler_uniform(smp);
    int32_t tok = -1;
    if (any) tok = spec_draw(p, n_vocab, u2);
    if (tok < 0) { /* p == q up to rounding: the rejection was rounding too; p itself is exact */
        if ((rc = sampler_probs(smp, logits, p)) != 0) return rc;
        tok = spec_draw(p, n_vocab, u2);
        if (tok < 0) return ERR_INVAL;
    }
    sampler_result_fill(smp, logits, tok, out);
    return tok == proposal ? SPEC_ACCEPTED : SPEC_CORRECTED;
}
