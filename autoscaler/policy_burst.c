/* Burst headroom (policy_priv.h). A fleet sized for the load it sees cannot serve a burst that is
 * over before a new replica starts; if such bursts are rare they cost less than the violation
 * budget and are not worth paying for, if they carry more than it they are part of the traffic
 * and the fleet must hold capacity for them. Which is which is measured: an episode starts when the
 * smoothed arrivals (in work) stand 1.5x or more above their level one horizon earlier, and is a
 * burst when they fall back by half the rise within ten minutes (else it was a new level, or a
 * ramp, and is forgotten); the work that arrived during bursts, over about the last hour, is
 * compared with the budget (1 - percentile). The amplitude held for is the typical peak of past
 * bursts over the load before them. Pure arithmetic. */
#include "autoscaler/policy_priv.h"

#include <math.h>

#define BURST_RISE      1.5  /* an episode starts: the smoothed load this much above h ago */
#define BURST_BACK      0.5  /* it was a burst when the load falls back by this much of the rise */
#define BURST_MAX_S     600  /* ... within this long */
#define BURST_DECAY_S   3600 /* the shares of work weigh about the last hour */
#define BURST_AMP_ALPHA 0.3  /* the typical amplitude follows recent bursts */
#define BURST_AMP_MAX   8.0
#define RISE_BIN        0.01 /* log width of a rise bin */

/* Smoothed load k intervals ago (1 = the last one kept); the oldest when fewer are kept. */
static double ago(const struct policy_burst *b, size_t k)
{
    if (k > b->n) k = b->n;
    return b->ring[(b->head + POLICY_BURST_RING - k) % POLICY_BURST_RING];
}

void policy_burst_observe(struct policy_burst *b, double load_s, double work, int h,
                          double seed_tau, double interval_s)
{
    if (!(load_s >= 0) || !isfinite(load_s)) return;
    if (h < 1) h = 1;
    if (h > POLICY_BURST_RING - 1) h = POLICY_BURST_RING - 1;
    double iv = interval_s > 0 ? interval_s : 15;
    double w = isfinite(work) && work > 0 ? work : 0;
    double then = b->n ? ago(b, (size_t)h) : load_s, least = load_s;
    for (size_t k = 1; k <= b->n && k <= (size_t)h; k++) least = fmin(least, ago(b, k));
    b->ring[b->head] = load_s;
    b->head = (b->head + 1) % POLICY_BURST_RING;
    if (b->n < POLICY_BURST_RING) b->n++;
    b->seen++;
    b->base = least;
    double f = exp(-iv / BURST_DECAY_S);
    /* The window that started h intervals ago is complete: its rise is the peak since then. The
     * smoother is seeded with its first value, whose weight in the value k intervals later is
     * e^(-k / seed_tau): a window starting from it measures the smoother converging as much as
     * the load rising, so the rise counts with the weight of the measurements (1 - that). */
    if (b->n > (size_t)h && then > 0) {
        double wt = seed_tau > 0 ? 1 - exp(-(double)(b->seen - 1 - (size_t)h) / seed_tau) : 1;
        double peak = load_s;
        for (size_t k = 1; k < (size_t)h; k++) peak = fmax(peak, ago(b, k + 1));
        double r = log(fmax(peak / then, 1)) / log1p(RISE_BIN);
        int bin = r >= POLICY_RISE_BINS - 1 ? POLICY_RISE_BINS - 1 : (int)r;
        for (int i = 0; i < POLICY_RISE_BINS; i++) b->rise[i] *= f;
        b->rise_mass = b->rise_mass * f + wt;
        b->rise[bin] += wt;
    }
    b->work_all = b->work_all * f + w;
    b->work_in *= f;
    if (b->in) {
        b->ep_peak = fmax(b->ep_peak, load_s);
        b->ep_work += w;
        b->ep_age_s += iv;
        if (load_s < b->ep_peak - BURST_BACK * (b->ep_peak - b->ep_base)) { /* fell back */
            double a = fmin(b->ep_peak / b->ep_base, BURST_AMP_MAX);
            b->amp = b->amp > 0 ? b->amp + BURST_AMP_ALPHA * (a - b->amp) : a;
            b->work_in += b->ep_work;
            b->in = false;
        } else if (b->ep_age_s > BURST_MAX_S) { /* stayed up: a new level */
            b->in = false;
        }
    } else if (then > 0 && load_s >= BURST_RISE * then) {
        b->in = true;
        b->ep_base = then;
        b->ep_peak = load_s;
        b->ep_work = w;
        b->ep_age_s = 0;
    }
}

double policy_burst_rise(const struct policy_burst *b, double q)
{
    if (!(b->rise_mass > 0)) return 1;
    double want = q * b->rise_mass, cum = 0;
    for (int i = 0; i < POLICY_RISE_BINS; i++) {
        cum += b->rise[i];
        if (cum >= want) return pow(1 + RISE_BIN, i + 1);
    }
    return pow(1 + RISE_BIN, POLICY_RISE_BINS);
}

double policy_burst_share(const struct policy_burst *b)
{
    return b->work_all > 0 ? b->work_in / b->work_all : 0;
}

double policy_burst_plan(const struct policy_burst *b, double budget)
{
    if (!(b->amp > 0) || policy_burst_share(b) <= budget) return 0;
    /* During a burst the base is the level it rose from: headroom is not stacked on a burst. */
    return (b->in ? fmin(b->base, b->ep_base) : b->base) * b->amp;
}
