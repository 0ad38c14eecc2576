/* The violation curve of the capacity model (policy_priv.h): how the share of observations above
 * the objective grows with the work per replica, learned from every judged interval, and the load
 * where it crosses the share aimed at. Pure arithmetic: no clock, no I/O.
 *
 * Each interval adds its observations (first tokens or token gaps) and those above the objective
 * to the bin of its work per replica; bins are log-spaced (2.5% wide) and decay with a two-hour
 * time constant of traffic (an interval without observations ages nothing), so the curve
 * re-learns when the model or the traffic changes. The curve is read
 * through an isotonic (non-decreasing) fit, pool-adjacent-violators weighted by observations: a
 * burst of long prompts at a light load does not make that load look bad on its own, it is pooled
 * with its neighbours. The capacity is the bottom of the first fitted block whose share is
 * significantly over the aim (two standard errors, with enough observations). While none is,
 * the capacity is only a lower bound and the model probes 5% beyond the load 95% of the
 * observations were seen at; once loads above it were seen missing, the crossing is known and
 * the capacity sits on it. */
#include "autoscaler/policy_priv.h"

#include <math.h>
#include <string.h>

#define BIN_RATIO   1.025 /* bin width */
#define BIN_MIN     1e-3  /* work/s per replica of bin 0 */
#define DECAY_S     7200  /* observations lose weight with this time constant */
#define MIN_MASS    200.0 /* observations a block needs to count as evidence */
#define PROBE       0.05  /* beyond the best load seen fine while it is only a lower bound */
#define SIGNIFICANT 2.0   /* standard errors over the aim that make loads miss it */
#define SEEN_MASS   0.95  /* a lower bound probes past the load this much of the mass was seen at */

static int bin_of(double x)
{
    if (!(x > BIN_MIN)) return 0;
    double b = floor(log(x / BIN_MIN) / log(BIN_RATIO));
    return b >= POLICY_CURVE_BINS - 1 ? POLICY_CURVE_BINS - 1 : (int)b;
}

/* Lower edge of bin b (its upper edge is the next bin's lower edge). */
static double edge(int b)
{
    return BIN_MIN * pow(BIN_RATIO, b);
}

void policy_curve_add(struct policy_curve *c, double per_pod, double n, double over,
                      double interval_s)
{
    if (!(per_pod > 0) || !(n > 0) || !isfinite(per_pod) || !isfinite(n)) return;
    if (c->any) { /* decay what is there */
        double f = exp(-(interval_s > 0 ? interval_s : 15) / DECAY_S);
        for (int b = c->lo; b <= c->hi; b++) {
            c->obs[b] *= f;
            c->over[b] *= f;
        }
    }
    int b = bin_of(per_pod);
    if (!c->any) {
        c->lo = c->hi = b;
        c->any = true;
    } else {
        if (b < c->lo) c->lo = b;
        if (b > c->hi) c->hi = b;
    }
    c->obs[b] += n;
    c->over[b] += fmin(fmax(over, 0), n);
}

void policy_curve_read(const struct policy_curve *c, double aim, struct policy_curve_fit *out)
{
    memset(out, 0, sizeof(*out));
    if (!c->any) return;
    /* Isotonic fit (pool adjacent violators) over the occupied bins, ascending; each bin gets
     * its block's share. */
    static const int none = -1;
    struct block {
        double obs, over;
        int first, last;
    } st[POLICY_CURVE_BINS];
    int n = 0;
    for (int b = c->lo; b <= c->hi; b++) {
        if (!(c->obs[b] > 0)) continue;
        st[n++] = (struct block){c->obs[b], c->over[b], b, b};
        while (n > 1 && st[n - 2].over * st[n - 1].obs > st[n - 1].over * st[n - 2].obs) {
            st[n - 2].obs += st[n - 1].obs;
            st[n - 2].over += st[n - 1].over;
            st[n - 2].last = st[n - 1].last;
            n--;
        }
    }
    /* The first block whose share is significantly over the aim (two standard errors, enough
     * observations: a 2% floor measured on a few hundred is noisy) bounds the capacity. */
    double obs = 0;
    int bound = none;
    for (int i = 0; i < n; i++) {
        obs += st[i].obs;
        double excess = st[i].over - aim * st[i].obs;
        if (bound == none && st[i].obs >= MIN_MASS &&
            excess > SIGNIFICANT * sqrt(aim * (1 - aim) * st[i].obs) + 1)
            bound = i;
    }
    out->mass = obs;
    if (bound == 0) { /* missing even at the lightest load seen: capacity is below it */
        out->capacity = edge(c->lo) / BIN_RATIO;
        out->confirmed = true;
        return;
    }
    if (bound != none) {
        out->capacity = edge(st[bound].first);
        out->confirmed = true;
        return;
    }
    /* Nothing misses: a lower bound, probing past the load most observations were seen at (the
     * top 5% of the mass may be one noisy interval). */
    double seen = 0;
    int top = c->lo;
    for (int b = c->lo; b <= c->hi; b++) {
        seen += c->obs[b];
        if (c->obs[b] > 0) top = b;
        if (seen >= SEEN_MASS * obs) break;
    }
    out->capacity = edge(top + 1) * (1 + PROBE);
    out->confirmed = false;
}
