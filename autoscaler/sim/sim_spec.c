/* Speculative decoding in the simulator's replica model (see sim.h): how fast each of b decoding
 * sequences advances when the engine speculates. The choice of proposals is the engine's own
 * controller (spec_ctl_plan in engine/sched/spec_ctl.c), not a copy of its rule: its cost curve
 * is the replica model's step time observed at every power-of-two step size, as the engine
 * learns its own while serving, and every sequence's acceptance is the model's spec_accept. What
 * the plan chooses is then charged at the model's step time, so the simulator and the engine
 * disagree only where the model of the step does. */
#include "autoscaler/sim/sim_priv.h"

#include "common/err.h"
#include "engine/sched/spec.h"

#include <stdlib.h>

/* The engine's step budget (serve's --max-num-batched-tokens default): proposals fill at most
 * what the decodes leave of it. */
#define SIM_SPEC_STEP_TOKENS 2048

struct sim_spec {
    struct spec_cost target, draft; /* draft unused for n-gram proposals */
    bool has_draft;
    int max_b;
    double *rate;        /* (max_b + 1) tokens/s per sequence at batch b; 0 = not computed */
    struct spec_cand *c; /* (max_b) the plan's candidates */
    void *scratch;       /* SPEC_CTL_SCRATCH_BYTES(max_b) */
};

double sim_step_seconds(const struct sim_world *w, double n)
{
    return (1 + (n - 1) * w->decode_k) / w->m->decode_tps;
}

void sim_spec_free(struct sim_spec *sp)
{
    if (!sp) return;
    free(sp->rate);
    free(sp->c);
    free(sp->scratch);
    free(sp);
}

int sim_spec_new(struct sim_world *w)
{
    w->spec = NULL;
    const struct sim_replica_model *m = w->m;
    if (m->spec_tokens <= 0) return 0;
    struct sim_spec *sp = calloc(1, sizeof(*sp));
    if (!sp) return ERR_NOMEM;
    sp->max_b = m->max_running;
    sp->rate = calloc((size_t)sp->max_b + 1, sizeof(*sp->rate));
    sp->c = calloc((size_t)sp->max_b, sizeof(*sp->c));
    sp->scratch = malloc(SPEC_CTL_SCRATCH_BYTES(sp->max_b));
    if (!sp->rate || !sp->c || !sp->scratch) {
        sim_spec_free(sp);
        return ERR_NOMEM;
    }
    spec_cost_init(&sp->target);
    spec_cost_init(&sp->draft);
    sp->has_draft = m->spec_draft_cost > 0;
    for (int n = 1; n <= SIM_SPEC_STEP_TOKENS; n *= 2) {
        double t = sim_step_seconds(w, n);
        spec_cost_observe(&sp->target, n, t);
        if (sp->has_draft) spec_cost_observe(&sp->draft, n, t * m->spec_draft_cost);
    }
    w->spec = sp;
    return 0;
}

/* The controller's plan for b sequences and its expected rate per sequence. */
static double plan_rate(const struct sim_world *w, int b)
{
    const struct sim_replica_model *m = w->m;
    struct sim_spec *sp = w->spec;
    for (int i = 0; i < b; i++)
        sp->c[i] = (struct spec_cand){.accept = (float)m->spec_accept, .kmax = m->spec_tokens};
    struct spec_plan_in in = {.base_tokens = b,
                              .n_decodes = b,
                              .budget = SIM_SPEC_STEP_TOKENS - b,
                              .target = &sp->target,
                              .draft = sp->has_draft ? &sp->draft : NULL,
                              .adaptive = true};
    spec_ctl_plan(&in, sp->c, b, sp->scratch);
    int in_round[SPEC_MAX_TOKENS + 1] = {0}, proposals = 0;
    double tokens = b;
    for (int i = 0; i < b; i++) {
        double g = 1;
        for (int j = 1; j <= sp->c[i].k && j <= SPEC_MAX_TOKENS; j++) {
            g *= m->spec_accept;
            tokens += g;
            in_round[j]++;
            proposals++;
        }
    }
    double t = sim_step_seconds(w, b + proposals);
    for (int j = 1; j <= SPEC_MAX_TOKENS; j++)
        if (in_round[j]) t += m->spec_draft_cost * sim_step_seconds(w, in_round[j]);
    return tokens / b / t;
}

double sim_decode_rate(const struct sim_world *w, int b)
{
    if (!w->spec || b > w->spec->max_b) return w->m->decode_tps / (1 + (b - 1) * w->decode_k);
    if (!(w->spec->rate[b] > 0)) w->spec->rate[b] = plan_rate(w, b);
    return w->spec->rate[b];
}
