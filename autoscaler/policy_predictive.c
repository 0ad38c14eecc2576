/* Predictive half of the policy: forecasts the arrival rate at a horizon of pod start-up plus one
 * interval and converts it to replicas through the capacity model of policy_objective.c (work per
 * request x forecast arrivals over the work one replica carries while the objective holds). It only
 * ever raises the recommendation (policy.c takes max(reactive, predictive)); it never scales down
 * on its own. The recommendation plans for `headroom` (0.9) of capacity: the forecast errs. */
#include "autoscaler/forecast.h"
#include "autoscaler/policy_priv.h"

#include "common/err.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int policy_predictor_init(struct policy_predictor *p, const struct policy_spec *spec)
{
    memset(p, 0, sizeof(*p));
    struct forecast_params fp;
    int season = 0;
    if (spec->season_s > 0 && spec->interval_s > 0)
        season = (int)lround(spec->season_s / spec->interval_s);
    if (season > FORECAST_MAX_SEASON) return ERR_RANGE;
    forecast_params_defaults(&fp, season);
    p->rps = forecast_new(&fp);
    if (!p->rps) return ERR_NOMEM;
    if (spec->forecast_fit_intervals > 0) {
        if (spec->forecast_fit_intervals > 100000) return ERR_RANGE;
        p->history = calloc((size_t)spec->forecast_fit_intervals, sizeof(double));
        if (!p->history) return ERR_NOMEM;
    }
    return 0;
}

void policy_predictor_fini(struct policy_predictor *p)
{
    forecast_free(p->rps);
    p->rps = NULL;
    free(p->history);
    p->history = NULL;
}

/* Keeps the warm-up window; once full, refits alpha/beta/phi(/gamma) on it and replays it into a
 * model with the fitted parameters. A failed fit keeps the defaults. */
static void maybe_fit(struct policy_predictor *p, const struct policy_spec *spec, double y)
{
    if (!p->history || p->fitted) return;
    p->history[p->n_history++] = y;
    if (p->n_history < (size_t)spec->forecast_fit_intervals) return;
    p->fitted = true;
    struct forecast_params fp;
    int season = 0;
    if (spec->season_s > 0 && spec->interval_s > 0)
        season = (int)lround(spec->season_s / spec->interval_s);
    forecast_params_defaults(&fp, season);
    struct forecast *f = NULL;
    if (forecast_fit(p->history, p->n_history, &fp) == 0 && (f = forecast_new(&fp)) != NULL) {
        for (size_t i = 0; i < p->n_history; i++) forecast_update(f, p->history[i]);
        forecast_free(p->rps);
        p->rps = f;
    }
    free(p->history);
    p->history = NULL;
}

int policy_predictor_step(struct policy_predictor *p, const struct policy_capacity *c,
                          const struct policy_spec *spec, const struct policy_signals *sig,
                          struct policy_decision *out)
{
    if (sig->metrics_ok && isfinite(sig->arrival_rate) && sig->arrival_rate >= 0) {
        forecast_update(p->rps, sig->arrival_rate);
        maybe_fit(p, spec, sig->arrival_rate);
    }
    if (forecast_count(p->rps) == 0) return 0;
    double interval = spec->interval_s > 0 ? spec->interval_s : 15;
    int h = (int)ceil((spec->startup_s + interval) / interval - 1e-9);
    if (h < 1) h = 1;
    if (h > 100000) h = 100000;
    /* The peak over the horizon: replicas ordered now serve every interval until it. */
    double peak = 0;
    for (int k = 1; k <= h; k++) {
        double y = forecast_predict(p->rps, k);
        if (y > peak) peak = y;
    }
    out->forecast_rps = peak;
    double cap_rps = policy_capacity_rps(c, spec);
    out->capacity_rps = cap_rps;
    /* A capacity that is only a lower bound would over-provision every forecast. */
    if (!(cap_rps > 0) ||
        (!c->confirmed && spec->capacity_rps <= 0 && policy_spec_has_objective(spec)))
        return 0;
    double headroom = spec->headroom > 0 && spec->headroom <= 1 ? spec->headroom : 1;
    double want = ceil(peak / (cap_rps * headroom) - 1e-9);
    if (want > 1e6) want = 1e6;
    return (int)want;
}
