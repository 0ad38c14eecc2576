/* Signals: one InferenceService's policy inputs (struct policy_signals, autoscaler/policy.h) from
 * two consecutive scrape rounds of its pods. Pure: no I/O, no clock (times are inputs).
 *
 * Gauges (waiting, running, prefill tokens waiting) are summed and the KV-cache ratio averaged over the pods scraped this
 * round. Rates come from counter deltas of pods seen in both rounds, divided by each pod's own
 * interval and summed (a pod seen for the first time contributes gauges but no rates, as a
 * Prometheus rate() needs two samples). A counter that went down means the engine restarted: the
 * new value is the whole delta, as Prometheus' rate() treats resets.
 *
 * Arrival rate: requests are conserved inside an engine, so
 *   arrivals = finished (delta of cinfer_requests_total over every finished_reason)
 *            + growth of the requests in the engine (running + waiting, now minus before),
 * clamped at 0 per pod. After a restart the old incarnation's requests are gone (they never finish
 * there), so arrivals = finished since the restart + everything in the engine now. */
#ifndef CINFER_AUTOSCALER_SIGNALS_H
#define CINFER_AUTOSCALER_SIGNALS_H

#include "autoscaler/policy.h"
#include "autoscaler/scrape.h"

#include <stdbool.h>
#include <stddef.h>

/* One pod's scrape in one round. */
struct signals_pod {
    const char *key; /* stable identity (pod UID or name, or the URL in --target mode); borrowed */
    double time_s;   /* when scraped (monotonic seconds) */
    bool ok;         /* scrape succeeded; `m` valid */
    struct scrape_metrics m;
};

/* Computes *out from the previous round `prev` (n_prev pods; may be 0) and this round `cur`
 * (n_cur pods, including failed scrapes with ok == false), at `now_s`. `extra_unready` counts pods
 * that exist but were not scraped (not ready, no IP). metrics_ok is true when at least one pod's
 * scrape this round had the queue gauges (waiting or running); ttft_p99_s is -1 when no first
 * token was observed over the interval; prefill_waiting is the sum over the pods that export it (-1
 * when none does); ttft and itl are the summed bucket deltas of the pods seen in both rounds (the
 * latency objective is judged on them). All arguments borrowed. */
void signals_compute(const struct signals_pod *prev, size_t n_prev, const struct signals_pod *cur,
                     size_t n_cur, int extra_unready, double now_s, struct policy_signals *out);

/* Delta of a counter between two readings, with Prometheus' reset rule (cur < prev: cur). */
double signals_counter_delta(double prev, double cur);

#endif
