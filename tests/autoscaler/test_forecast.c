/* Forecast models on synthetic series with known futures: a step, a ramp, a periodic signal. The
 * error bounds are stated per case; all series are noise-free or use a fixed-seed LCG. */
#include "autoscaler/forecast.h"

#include "common/err.h"

#include <check.h>
#include <math.h>

static double noise(unsigned *s) /* uniform in [-1, 1), deterministic */
{
    *s = *s * 1103515245u + 12345u;
    return ((*s >> 8) & 0xffff) / 32768.0 - 1.0;
}

START_TEST(test_forecast_predict_empty_and_bad_params)
{
    struct forecast_params p;
    forecast_params_defaults(&p, 0);
    struct forecast *f = forecast_new(&p);
    ck_assert_ptr_nonnull(f);
    ck_assert_double_eq(forecast_predict(f, 3), 0);
    forecast_update(f, NAN);
    ck_assert_uint_eq(forecast_count(f), 0);
    forecast_free(f);
    forecast_free(NULL);
    p.alpha = 0;
    ck_assert_ptr_null(forecast_new(&p));
    forecast_params_defaults(&p, FORECAST_MAX_SEASON + 1);
    ck_assert_ptr_null(forecast_new(&p));
    ck_assert_ptr_null(forecast_new(NULL));
}
END_TEST

/* Step 10 -> 30 at t=50: within 15 steps of the step the forecast is within 5% of 30. */
START_TEST(test_forecast_step_tracks_within_5_percent)
{
    struct forecast_params p;
    forecast_params_defaults(&p, 0);
    struct forecast *f = forecast_new(&p);
    for (int t = 0; t < 50; t++) forecast_update(f, 10);
    ck_assert_double_eq_tol(forecast_predict(f, 1), 10, 1e-9);
    for (int t = 50; t < 65; t++) forecast_update(f, 30);
    ck_assert_double_eq_tol(forecast_predict(f, 1), 30, 1.5);
    /* ... and once the step is past, the damped trend dies out: no overshoot beyond 10%. */
    for (int t = 65; t < 120; t++) forecast_update(f, 30);
    ck_assert_double_eq_tol(forecast_predict(f, 8), 30, 3);
    forecast_free(f);
}
END_TEST

/* Ramp y = 5 + 0.5 t with +-1 noise: after 100 steps the 4-step-ahead forecast is within 10% of
 * the true value, and above the last level (it extrapolates the trend). */
START_TEST(test_forecast_ramp_extrapolates_within_10_percent)
{
    struct forecast_params p;
    forecast_params_defaults(&p, 0);
    struct forecast *f = forecast_new(&p);
    unsigned seed = 7;
    for (int t = 0; t < 100; t++) forecast_update(f, 5 + 0.5 * t + noise(&seed));
    double truth = 5 + 0.5 * 103;
    double y = forecast_predict(f, 4);
    ck_assert_double_eq_tol(y, truth, 0.1 * truth);
    ck_assert_double_gt(y, 5 + 0.5 * 99);
    forecast_free(f);
}
END_TEST

/* Periodic: period 24, amplitude 10 around 20. Holt-Winters after 5 seasons predicts the next
 * half-season within 1.5 (7.5% of amplitude x 2); plain Holt cannot (error > 5 somewhere). */
START_TEST(test_forecast_seasonal_tracks_period)
{
    const int m = 24;
    struct forecast_params p;
    forecast_params_defaults(&p, m);
    struct forecast *hw = forecast_new(&p);
    forecast_params_defaults(&p, 0);
    struct forecast *holt = forecast_new(&p);
    int n = 5 * m;
    for (int t = 0; t < n; t++) {
        double y = 20 + 10 * sin(2 * M_PI * t / m);
        forecast_update(hw, y);
        forecast_update(holt, y);
    }
    double worst_hw = 0, worst_holt = 0;
    for (int h = 1; h <= m / 2; h++) {
        double truth = 20 + 10 * sin(2 * M_PI * (n - 1 + h) / m);
        worst_hw = fmax(worst_hw, fabs(forecast_predict(hw, h) - truth));
        worst_holt = fmax(worst_holt, fabs(forecast_predict(holt, h) - truth));
    }
    ck_assert_msg(worst_hw < 1.5, "Holt-Winters worst error %g", worst_hw);
    ck_assert_msg(worst_holt > 5, "Holt worst error %g", worst_holt);
    forecast_free(hw);
    forecast_free(holt);
}
END_TEST

START_TEST(test_forecast_never_negative)
{
    struct forecast_params p;
    forecast_params_defaults(&p, 0);
    p.phi = 1;
    struct forecast *f = forecast_new(&p);
    for (int t = 0; t < 30; t++) forecast_update(f, 30 - t);
    ck_assert_double_eq(forecast_predict(f, 100), 0);
    forecast_free(f);
}
END_TEST

/* Fitting on a clean ramp prefers a strong trend; on a series too short it refuses. */
START_TEST(test_forecast_fit_grid)
{
    double y[60];
    for (int t = 0; t < 60; t++) y[t] = 3 * t;
    struct forecast_params p;
    forecast_params_defaults(&p, 0);
    ck_assert_int_eq(forecast_fit(y, 3, &p), ERR_INVAL);
    ck_assert_int_eq(forecast_fit(y, 60, &p), 0);
    ck_assert_double_ge(p.beta, 0.2);
    ck_assert_double_ge(p.phi, 0.9);
    struct forecast *f = forecast_new(&p);
    for (int t = 0; t < 60; t++) forecast_update(f, y[t]);
    ck_assert_double_eq_tol(forecast_predict(f, 1), 180, 180 * 0.03);
    forecast_free(f);
    forecast_params_defaults(&p, 12);
    ck_assert_int_eq(forecast_fit(y, 20, &p), ERR_INVAL);
    ck_assert_int_eq(forecast_fit(y, 60, &p), 0);
    ck_assert_int_eq(p.season, 12);
}
END_TEST

Suite *forecast_suite(void)
{
    Suite *s = suite_create("forecast");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_forecast_predict_empty_and_bad_params);
    tcase_add_test(tc, test_forecast_step_tracks_within_5_percent);
    tcase_add_test(tc, test_forecast_ramp_extrapolates_within_10_percent);
    tcase_add_test(tc, test_forecast_seasonal_tracks_period);
    tcase_add_test(tc, test_forecast_never_negative);
    tcase_add_test(tc, test_forecast_fit_grid);
    suite_add_tcase(s, tc);
    return s;
}
