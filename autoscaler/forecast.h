/* Short-horizon forecasting of a rate series sampled once per interval: Holt's linear trend with a
 * damped trend (Gardner & McKenzie), or additive Holt-Winters when a season length is set
 * (Hyndman & Athanasopoulos, "Forecasting: Principles and Practice", 2nd ed., sections 7.2-7.3).
 * Pure arithmetic: no clock, no I/O; the caller feeds one observation per step.
 *
 * Defaults (forecast_params_defaults): alpha 0.3 (level), beta 0.1 (trend), phi 0.9 (damping),
 * gamma 0.2 (season). They suit noisy per-interval request rates: a level that follows a step within
 * ~10 steps, a trend that reacts to a ramp within ~10-20 steps and fades (phi^h) over long horizons
 * so one noisy interval never extrapolates into a huge forecast. forecast_fit() replaces them by a
 * small grid search minimising one-step-ahead squared error over a warm-up series. */
#ifndef CINFER_AUTOSCALER_FORECAST_H
#define CINFER_AUTOSCALER_FORECAST_H

#include <stddef.h>

#define FORECAST_MAX_SEASON 4096 /* season length bound in steps */

struct forecast_params {
    double alpha; /* level smoothing, (0, 1] */
    double beta;  /* trend smoothing, [0, 1] */
    double phi;   /* trend damping, (0, 1]; 1 = undamped Holt */
    double gamma; /* seasonal smoothing, [0, 1]; used only when season > 1 */
    int season;   /* season length in steps; 0 or 1 = no seasonal component */
};

/* Fills `p` with the documented defaults and the given season length. */
void forecast_params_defaults(struct forecast_params *p, int season);

struct forecast; /* opaque model state */

/* Returns new state, or NULL on bad parameters (out of range, season > FORECAST_MAX_SEASON) or no
 * memory. */
struct forecast *forecast_new(const struct forecast_params *p);
void forecast_free(struct forecast *f); /* NULL-safe */

/* Adds one observation (non-finite values are ignored: the model holds its state). Not thread-safe
 * per model. */
void forecast_update(struct forecast *f, double y);

/* Forecast `h` >= 1 steps after the last observation; 0 before any observation. Never negative
 * (rates cannot be), so callers get max(0, level + damped trend + season). */
double forecast_predict(const struct forecast *f, int h);

/* Number of observations fed so far. */
size_t forecast_count(const struct forecast *f);

/* Grid search over alpha, beta, phi (and gamma when p->season > 1) minimising the one-step-ahead
 * squared error over `y[0..n)` (borrowed); the season length is taken from `p`. Writes `p` on
 * success. Returns 0, or ERR_INVAL when n is too short (< 2 seasons, or < 4 without a season). */
int forecast_fit(const double *y, size_t n, struct forecast_params *p);

#endif
