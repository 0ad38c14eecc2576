/* cinfer-operator: starts, serves its probes (/healthz, /readyz, /metrics on --probe-addr) and
 * exits cleanly on SIGTERM. The control loop arrives with its issue; this main stays thin and only
 * wires configuration to modules. */
#include "common/cli.h"
#include "common/log.h"
#include "common/probe_server.h"
#include "common/prom.h"
#include "common/shutdown.h"

#include <stddef.h>
#include <stdio.h>

struct operator_cfg {
    const char *kubeconfig;
    const char *probe_addr;
    const char *log_level, *log_format;
};

static const struct cfg_opt opts[] = {
    {"kubeconfig", CFG_STRING, offsetof(struct operator_cfg, kubeconfig), NULL, 1, 0,
     "Path to a kubeconfig; in-cluster service-account credentials when unset", NULL, 0},
    {"probe-addr", CFG_STRING, offsetof(struct operator_cfg, probe_addr), "127.0.0.1:8081", 1, 0,
     "Address for /healthz, /readyz and /metrics", NULL, 0},
    CLI_LOG_OPTS(struct operator_cfg),
};

static const struct cfg_spec spec = {
    .program = "cinfer-operator",
    .summary = "Reconciles InferenceService resources into engine Deployments and Services.",
    .env_prefix = "CINFER_OPERATOR_",
    .opts = opts,
    .n_opts = sizeof(opts) / sizeof(opts[0]),
};

int main(int argc, char **argv)
{
    struct operator_cfg cfg;
    struct cfg_result res;
    enum cli_parse_result pr = cli_parse(&spec, &cfg, argc, argv, &res);
    if (pr != CLI_RUN) return pr == CLI_EXIT_OK ? 0 : 2;
    cli_log_setup("operator", cfg.log_level, cfg.log_format);
    if (shutdown_install() != 0) {
        log_error("cannot install signal handlers");
        return 1;
    }
    struct prom_registry *metrics = prom_registry_new();
    struct probe_server *probe = NULL;
    int status = 1;
    if (!metrics || probe_register_process_metrics(metrics) != 0) {
        log_error("cannot create metrics registry");
        goto out;
    }
    if (probe_server_start(cfg.probe_addr, probe_metrics_prom, metrics, &probe) != 0) {
        log_error("cannot serve probes", LOG_S("probe_addr", cfg.probe_addr));
        goto out;
    }
    log_info("started", LOG_S("kubeconfig", cfg.kubeconfig), LOG_S("probe_addr", cfg.probe_addr),
             LOG_I("probe_port", probe_server_port(probe)));
    /* Ready as soon as the probes serve; the control loop marks readiness itself once it lands. */
    probe_server_set_ready(probe, true);
    while (!shutdown_wait(1000)) {
    }
    log_info("shutting down", LOG_S("reason", "signal"));
    status = 0;
out:
    probe_server_free(probe);
    prom_registry_free(metrics);
    return status;
}
