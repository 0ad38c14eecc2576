/* How much to speculate (see spec.h): a learned model of step time against tokens, and the plan
 * that picks each sequence's proposals for one step from it and from measured acceptance.
 *
 * Why a model of the step and not a fixed k: a decode step reads every weight once, so while the
 * step is bound by those reads (one sequence on a GPU, a few on a CPU) k extra tokens cost little;
 * at larger batches the matmuls' arithmetic dominates, extra tokens cost nearly what they would as
 * other sequences' decodes, and proposals that are rejected are pure loss. Published engines lose
 * 1.4-1.8x throughput at high load with a fixed k. Here a step's expected output (the decodes, plus
 * accept^j for a sequence's j-th proposal) over its expected time (the target at base + proposals
 * tokens, plus one draft step per proposal depth) is maximised each step. */
#include "engine/sched/spec.h"

#include "common/err.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SPEC_COST_ALPHA 0.05 /* weight of a new measurement once a bucket has 20 */
#define SPEC_CTL_MARGIN 1.05 /* speculate only when the plan beats not speculating by 5% */

void spec_cost_init(struct spec_cost *c)
{
    memset(c, 0, sizeof(*c));
}

static int cost_bucket(int n)
{
    int b = 0;
    while (b < SPEC_COST_BUCKETS - 1 && (n >> (b + 1)) > 0) b++;
    return b;
}

/* The curve's shape: seconds at n_tokens from the buckets alone (without the level). */
static double cost_shape(const struct spec_cost *c, int n_tokens);

static double cost_level(const struct spec_cost *c)
{
    return c->lw > 0.0 ? c->level : 1.0;
}

void spec_cost_link(struct spec_cost *c, const struct spec_cost *peer)
{
    c->peer = peer;
    c->anchor = peer ? cost_level(peer) : 0.0;
}

void spec_cost_observe(struct spec_cost *c, int n_tokens, double seconds)
{
    if (n_tokens < 1 || !(seconds >= 0.0) || !isfinite(seconds)) return;
    int b = cost_bucket(n_tokens);
    double level = cost_level(c);
    double shape = cost_shape(c, n_tokens);
    /* every step moves the level of the whole curve: a context that grows slows the sizes the
     * controller is not using now as much as the one it is, so cost(k) / cost(1) stays the
     * calibrated one and a decision is never flipped by one bucket going stale */
    if (c->w[b] > 0.0 && shape > 0.0) { /* a size seen before: its shape is measured */
        double a = c->lw < 1.0 / SPEC_COST_ALPHA ? 1.0 / (c->lw + 1.0) : SPEC_COST_ALPHA;
        c->level = level + a * (seconds / shape - level);
        c->lw += 1.0;
        level = c->level;
    }
    /* the shape: a bucket's first 20 steps (at the level then), a running mean */
    if (c->peer) c->anchor = cost_level(c->peer);
    if (c->w[b] >= 1.0 / SPEC_COST_ALPHA) return;
    double a = 1.0 / (c->w[b] + 1.0);
    c->n[b] += a * ((double)n_tokens - c->n[b]);
    c->t[b] += a * (seconds / level - c->t[b]);
    c->w[b] += 1.0;
}

double spec_cost_estimate(const struct spec_cost *c, int n_tokens)
{
    if (n_tokens <= 0) return 0.0;
    double drift = c->peer && c->anchor > 0.0 ? cost_level(c->peer) / c->anchor : 1.0;
    return cost_shape(c, n_tokens) * cost_level(c) * drift;
}

static double cost_shape(const struct spec_cost *c, int n_tokens)
{
    double x = n_tokens;
    int lo = -1, hi = -1; /* the known points around x */
    int first = -1, last = -1, prev = -1;
    for (int b = 0; b < SPEC_COST_BUCKETS; b++) {
        if (c->w[b] <= 0.0) continue;
        if (first < 0) first = b;
        if (c->n[b] <= x) lo = b;
        if (c->n[b] >= x && hi < 0) hi = b;
        if (last >= 0) prev = last;
        last = b;
    }
    if (first < 0) return x; /* unknown: proportional to tokens, where nothing pays */
    if (first == last) return c->t[first] * x / c->n[first];
    if (lo >= 0 && hi >= 0) {
        if (lo == hi || c->n[hi] <= c->n[lo]) return c->t[lo];
        double f = (x - c->n[lo]) / (c->n[hi] - c->n[lo]);
        return c->t[lo] + f * (c->t[hi] - c->t[lo]);
    }
    if (lo < 0) { /* below every point: proportional to the first one */
        return c->t[first] * x / c->n[first];
    }
    /* above: the last segment's slope, never falling */
    double slope = (c->t[last] - c->t[prev]) / (c->n[last] - c->n[prev]);
    if (!(slope > 0.0)) slope = c->t[last] / c->n[last];
    return c->t[last] + slope * (x - c->n[last]);
}

/* ---------------------------------------------------------------- the plan */

struct plan_item {
    float gain; /* accept^j: expected tokens the sequence's j-th proposal adds */
    uint16_t i, j;
};

static int item_cmp(const void *a, const void *b)
{
    const struct plan_item *x = a, *y = b;
    if (x->gain != y->gain) return x->gain > y->gain ? -1 : 1;
    if (x->j != y->j) return x->j < y->j ? -1 : 1; /* a sequence's proposals in order */
    return (x->i > y->i) - (x->i < y->i);
}

/* Seconds of draft round j (1-based) with `n` sequences and, in round 1, `catchup` more tokens. */
static double round_cost(const struct spec_plan_in *in, int j, int n, int catchup)
{
    if (!in->draft || n == 0) return 0.0;
    return spec_cost_estimate(in->draft, n + (j == 1 ? catchup : 0));
}

void spec_ctl_plan(const struct spec_plan_in *in, struct spec_cand *c, int n, void *scratch)
{
    int budget = in->budget;
    for (int i = 0; i < n; i++) c[i].k = 0;
    if (!in->adaptive) {
        for (int i = 0; i < n && budget > 0; i++) {
            c[i].k = c[i].kmax < budget ? c[i].kmax : budget;
            budget -= c[i].k;
        }
        return;
    }
    struct plan_item *items = scratch;
    int m = 0;
    for (int i = 0; i < n; i++) {
        double g = 1.0;
        int kmax = c[i].kmax < SPEC_MAX_TOKENS ? c[i].kmax : SPEC_MAX_TOKENS;
        for (int j = 1; j <= kmax; j++) {
            g *= c[i].accept;
            if (!(g > 1e-6)) break;
            items[m++] = (struct plan_item){(float)g, (uint16_t)i, (uint16_t)j};
        }
    }
    if (m == 0 || budget <= 0) return;
    qsort(items, (size_t)m, sizeof(*items), item_cmp);

    /* Walk the items best first, scoring every prefix; remember the best one. */
    int in_round[SPEC_MAX_TOKENS + 1] = {0};
    int catchup = 0;
    double gain = in->n_decodes, draft_t = 0.0;
    double base_rate = in->n_decodes / spec_cost_estimate(in->target, in->base_tokens);
    double best_rate = base_rate * SPEC_CTL_MARGIN;
    int best = 0;
    for (int p = 0; p < m && p < budget; p++) {
        const struct plan_item *it = &items[p];
        int j = it->j;
        draft_t -= round_cost(in, j, in_round[j], catchup);
        in_round[j]++;
        if (j == 1) catchup += c[it->i].catchup;
        draft_t += round_cost(in, j, in_round[j], catchup);
        gain += it->gain;
        double t = spec_cost_estimate(in->target, in->base_tokens + p + 1) + draft_t;
        double rate = gain / t;
        if (rate > best_rate) {
            best_rate = rate;
            best = p + 1;
        }
    }
    for (int p = 0; p < best; p++) c[items[p].i].k++;
}
