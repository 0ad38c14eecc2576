/* Damped-trend Holt and additive Holt-Winters (see forecast.h). The seasonal model keeps one
 * seasonal index per phase in a ring of `season` values; it initialises the level from the first
 * season's mean and the indices from deviations of that first season, emitting level-only
 * forecasts until then. Not a general time-series library: one series, one step size. */
#include "autoscaler/forecast.h"

#include "common/err.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

struct forecast {
    struct forecast_params p;
    size_t n;       /* observations seen */
    double level;   /* l_t */
    double trend;   /* b_t */
    double *season; /* s_{t-m+1..t}, indexed by step % m; NULL without a season */
    double *warm;   /* first season's observations while initialising; NULL afterwards */
};

void forecast_params_defaults(struct forecast_params *p, int season)
{
    p->alpha = 0.3;
    p->beta = 0.1;
    p->phi = 0.9;
    p->gamma = 0.2;
    p->season = season > 1 ? season : 0;
}

static bool params_ok(const struct forecast_params *p)
{
    return p->alpha > 0 && p->alpha <= 1 && p->beta >= 0 && p->beta <= 1 && p->phi > 0 &&
           p->phi <= 1 && p->gamma >= 0 && p->gamma <= 1 && p->season >= 0 &&
           p->season <= FORECAST_MAX_SEASON;
}

struct forecast *forecast_new(const struct forecast_params *p)
{
    if (!p || !params_ok(p)) return NULL;
    struct forecast *f = calloc(1, sizeof(*f));
    if (!f) return NULL;
    f->p = *p;
    if (f->p.season <= 1) f->p.season = 0;
    if (f->p.season) {
        f->season = calloc((size_t)f->p.season, sizeof(double));
        f->warm = calloc((size_t)f->p.season, sizeof(double));
        if (!f->season || !f->warm) {
            forecast_free(f);
            return NULL;
        }
    }
    return f;
}

void forecast_free(struct forecast *f)
{
    if (!f) return;
    free(f->season);
    free(f->warm);
    free(f);
}

size_t forecast_count(const struct forecast *f)
{
    return f->n;
}

/* Holt's damped trend: l = a*y + (1-a)(l + phi b); b = B(l - l_prev) + (1-B) phi b. */
static void update_holt(struct forecast *f, double y)
{
    if (f->n == 0) {
        f->level = y;
        f->trend = 0;
        return;
    }
    const struct forecast_params *p = &f->p;
    double prev = f->level;
    f->level = p->alpha * y + (1 - p->alpha) * (prev + p->phi * f->trend);
    f->trend = p->beta * (f->level - prev) + (1 - p->beta) * p->phi * f->trend;
}

static void update_seasonal(struct forecast *f, double y)
{
    const struct forecast_params *p = &f->p;
    size_t m = (size_t)p->season;
    if (f->warm) {
        f->warm[f->n] = y;
        if (f->n + 1 < m) {
            f->level = y; /* level-only forecasts during the first season */
            return;
        }
        double mean = 0;
        for (size_t i = 0; i < m; i++) mean += f->warm[i];
        mean /= (double)m;
        for (size_t i = 0; i < m; i++) f->season[i] = f->warm[i] - mean;
        f->level = mean;
        f->trend = 0;
        free(f->warm);
        f->warm = NULL;
        return;
    }
    size_t phase = f->n % m;
    double s = f->season[phase];
    double prev = f->level;
    f->level = p->alpha * (y - s) + (1 - p->alpha) * (prev + p->phi * f->trend);
    f->trend = p->beta * (f->level - prev) + (1 - p->beta) * p->phi * f->trend;
    f->season[phase] = p->gamma * (y - prev - p->phi * f->trend) + (1 - p->gamma) * s;
}

void forecast_update(struct forecast *f, double y)
{
    if (!isfinite(y)) return;
    if (f->p.season)
        update_seasonal(f, y);
    else
        update_holt(f, y);
    f->n++;
}

double forecast_predict(const struct forecast *f, int h)
{
    if (f->n == 0) return 0;
    if (h < 1) h = 1;
    /* Damped sum phi + phi^2 + ... + phi^h. */
    double damp = 0, pw = 1;
    for (int i = 0; i < h; i++) {
        pw *= f->p.phi;
        damp += pw;
    }
    double y = f->level + damp * f->trend;
    if (f->p.season && !f->warm) {
        size_t m = (size_t)f->p.season;
        /* Observation n-1 used phase (n-1) % m; step h ahead uses phase (n-1+h) % m. */
        y += f->season[(f->n - 1 + (size_t)h) % m];
    }
    return y > 0 ? y : 0;
}

static double one_step_sse(const double *y, size_t n, const struct forecast_params *p)
{
    struct forecast *f = forecast_new(p);
    if (!f) return INFINITY;
    double sse = 0;
    size_t skip = p->season > 1 ? (size_t)p->season : 1; /* score after initialisation */
    for (size_t i = 0; i < n; i++) {
        if (i >= skip) {
            double e = y[i] - forecast_predict(f, 1);
            sse += e * e;
        }
        forecast_update(f, y[i]);
    }
    forecast_free(f);
    return sse;
}

int forecast_fit(const double *y, size_t n, struct forecast_params *p)
{
    static const double alphas[] = {0.1, 0.2, 0.3, 0.5, 0.7, 0.9};
    static const double betas[] = {0.0, 0.05, 0.1, 0.2, 0.4};
    static const double phis[] = {0.8, 0.9, 0.98};
    static const double gammas[] = {0.05, 0.1, 0.2, 0.4};
    bool seasonal = p->season > 1;
    if (!y || (seasonal && n < 2 * (size_t)p->season) || (!seasonal && n < 4)) return ERR_INVAL;
    struct forecast_params best = *p, cand = *p;
    double best_sse = INFINITY;
    size_t n_gamma = seasonal ? sizeof(gammas) / sizeof(gammas[0]) : 1;
    for (size_t a = 0; a < sizeof(alphas) / sizeof(alphas[0]); a++)
        for (size_t b = 0; b < sizeof(betas) / sizeof(betas[0]); b++)
            for (size_t d = 0; d < sizeof(phis) / sizeof(phis[0]); d++)
                for (size_t g = 0; g < n_gamma; g++) {
                    cand.alpha = alphas[a];
                    cand.beta = betas[b];
                    cand.phi = phis[d];
                    cand.gamma = seasonal ? gammas[g] : p->gamma;
                    double sse = one_step_sse(y, n, &cand);
                    if (sse < best_sse) {
                        best_sse = sse;
                        best = cand;
                    }
                }
    if (!isfinite(best_sse)) return ERR_INVAL;
    *p = best;
    return 0;
}
