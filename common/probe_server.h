/* Probe endpoints for cinfer-operator and cinfer-autoscaler on their --probe-addr: /healthz (200 while
 * the process serves), /readyz (200 once the program marks itself ready, 503 before and while
 * draining) and /metrics (Prometheus text rendered by a callback). A thin wrapper over
 * common/http_server; the engine serves its own /health, /live and /metrics instead. */
#ifndef CINFER_COMMON_PROBE_SERVER_H
#define CINFER_COMMON_PROBE_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include "common/buf.h"

struct probe_server; /* opaque */

/* Renders the /metrics body into `out` (borrowed; bounded). Returns 0 or a negative code (the probe
 * answers 500). Runs on the probe server's service thread; must not block for long. */
typedef int (*probe_metrics_fn)(struct buf *out, void *ud);

/* A probe_metrics_fn that renders the struct prom_registry passed as `ud` (common/prom/prom.h). */
int probe_metrics_prom(struct buf *out, void *registry);

/* Registers the gauge process_start_time_seconds (the standard Prometheus name) in `registry` and
 * sets it to the current time. Returns 0 or the prom_registry_add error. Owning thread, at start. */
struct prom_registry;
int probe_register_process_metrics(struct prom_registry *registry);

/* Splits "host:port", "[v6]:port" or ":port" (every address) into `host` (hostlen bytes) and
 * *port. Returns 0 or ERR_INVAL (missing or non-numeric port, port outside 0..65535, host too long,
 * unbalanced brackets). Any thread. */
int probe_addr_parse(const char *addr, char *host, size_t hostlen, int *port);

/* Starts serving on `addr` (borrowed). `metrics` may be NULL (an empty /metrics). `ud` is passed to
 * it (borrowed; must outlive the server). Readiness starts false. Writes a new server to *out.
 * Returns 0, ERR_INVAL (bad address), ERR_IO (cannot bind) or ERR_NOMEM. Owning thread. */
int probe_server_start(const char *addr, probe_metrics_fn metrics, void *ud,
                       struct probe_server **out);

/* What every cinfer controller's main does: a new metrics registry with the process metrics,
 * served with /healthz and /readyz on `addr`, and a "started" log line naming the bound port. On
 * success *metrics and *probe are new (free with probe_server_free, then prom_registry_free). Returns
 * 0 or an err.h code, after logging why. Owning thread. */
int probe_server_start_standard(const char *addr, struct prom_registry **metrics,
                                struct probe_server **probe);

/* Sets what /readyz answers. Any thread. */
void probe_server_set_ready(struct probe_server *p, bool ready);

/* The bound TCP port (useful with ":0"). Any thread. */
int probe_server_port(const struct probe_server *p);

/* Marks not ready, stops serving (1 s grace for in-flight probes) and frees. NULL-safe. Owning
 * thread. */
void probe_server_free(struct probe_server *p);

#endif
