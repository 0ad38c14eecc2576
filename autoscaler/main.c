/* cinfer-autoscaler: parses its flag table, serves probes (/healthz, /readyz, /metrics on
 * --probe-addr) and runs the control loop (autoscaler/loop.h) until SIGTERM (exit 0) or loss of
 * leadership (exit 1); `cinfer-autoscaler simulate` runs the offline simulator instead
 * (autoscaler/sim/cmd_simulate.h). Thin: every module it wires links into the tests. */
#include "autoscaler/sim/cmd_simulate.h"
#include "autoscaler/loop.h"
#include "common/cli.h"
#include "common/err.h"
#include "common/log.h"
#include "common/probe_server.h"
#include "common/prom/prom.h"
#include "common/shutdown.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

struct autoscaler_cfg {
    const char *kubeconfig, *ns;
    double interval, scrape_timeout, startup;
    bool leader_elect;
    const char *lease_ns, *identity;
    const char *targets;
    const char *router_urls, *router_selector, *router_ns;
    int router_port;
    const char *probe_addr;
    const char *log_level, *log_format;
};

#define OPT(name, type, field, def, lo, hi, help)                                                  \
    {                                                                                              \
        name, type, offsetof(struct autoscaler_cfg, field), def, lo, hi, help, NULL, 0             \
    }

static const struct cfg_opt opts[] = {
    OPT("kubeconfig", CFG_STRING, kubeconfig, NULL, 1, 0,
        "Path to a kubeconfig; default $KUBECONFIG, in-cluster credentials, ~/.kube/config"),
    OPT("namespace", CFG_STRING, ns, "", 1, 0,
        "Manage InferenceServices in one namespace; empty manages all"),
    OPT("interval", CFG_DOUBLE, interval, "5", 0.1, 3600,
        "Seconds between decision rounds (scrape, decide, scale)"),
    OPT("scrape-timeout", CFG_DOUBLE, scrape_timeout, "2", 0.05, 600,
        "Seconds one engine /metrics scrape may take"),
    OPT("replica-startup", CFG_DOUBLE, startup, "60", 0, 86400,
        "Seconds from a scale-up to a ready engine: the horizon objectives and forecasts plan "
        "over"),
    OPT("leader-elect", CFG_BOOL, leader_elect, "true", 1, 0,
        "Elect a leader on the Lease cinfer-autoscaler so only one replica scales"),
    OPT("leader-election-namespace", CFG_STRING, lease_ns, NULL, 1, 0,
        "Namespace of the Lease (default: the namespace the autoscaler runs in)"),
    OPT("identity", CFG_STRING, identity, NULL, 1, 0,
        "Leader-election identity (default: hostname_pid_random)"),
    OPT("target", CFG_STRING, targets, NULL, 1, 0,
        "Out-of-cluster mode: name=url,... scrapes InferenceService <name> at these URLs instead "
        "of its pods (repeat a name for several engines; a URL without a path means its /metrics)"),
    OPT("router-url", CFG_STRING, router_urls, NULL, 1, 0,
        "cinfer-router /metrics URLs (comma-separated; a bare http://host:port means its "
        "/metrics): requests they hold scale a minReplicas 0 service from zero"),
    OPT("router-selector", CFG_STRING, router_selector, NULL, 1, 0,
        "Label selector of cinfer-router pods whose /metrics (--router-port) to read, e.g. "
        "app.kubernetes.io/name=cinfer-router"),
    OPT("router-namespace", CFG_STRING, router_ns, NULL, 1, 0,
        "Namespace of those pods (default: the autoscaler's own)"),
    OPT("router-port", CFG_INT, router_port, "8081", 1, 65535,
        "The routers' probe port, which serves their /metrics"),
    OPT("probe-addr", CFG_STRING, probe_addr, "127.0.0.1:8081", 1, 0,
        "Address for /healthz, /readyz and /metrics"),
    CLI_LOG_OPTS(struct autoscaler_cfg),
};

static const struct cfg_spec spec = {
    .program = "cinfer-autoscaler",
    .summary =
        "Scales InferenceServices to latency objectives from engine metrics (TTFT and "
        "inter-token histograms, queued prefill tokens, token rates, queue depth, KV cache).",
    .env_prefix = "CINFER_AUTOSCALER_",
    .opts = opts,
    .n_opts = sizeof(opts) / sizeof(opts[0]),
};

static void set_ready(void *ctx, bool ready)
{
    probe_server_set_ready(ctx, ready);
}

int main(int argc, char **argv)
{
    /* `cinfer-autoscaler simulate ...` replays a trace offline; everything else runs the loop. */
    if (argc > 1 && strcmp(argv[1], "simulate") == 0) return cmd_simulate_main(argc - 1, argv + 1);
    struct autoscaler_cfg cfg;
    struct cfg_result res;
    enum cli_parse_result pr = cli_parse(&spec, &cfg, argc, argv, &res);
    if (pr != CLI_RUN) return pr == CLI_EXIT_OK ? 0 : 2;
    cli_log_setup("autoscaler", cfg.log_level, cfg.log_format);
    struct loop_targets check = {0};
    char err[256] = "";
    if (loop_targets_parse(cfg.targets, &check, err, sizeof(err)) != 0) {
        fprintf(stderr, "cinfer-autoscaler: %s\n", err);
        return 2;
    }
    loop_targets_fini(&check);
    if (shutdown_install() != 0) {
        log_error("cannot install signal handlers");
        return 1;
    }
    struct prom_registry *metrics = NULL;
    struct probe_server *probe = NULL;
    int status = 1;
    if (probe_server_start_standard(cfg.probe_addr, &metrics, &probe) != 0) goto out;
    struct loop_cfg lc = {
        .kubeconfig = cfg.kubeconfig,
        .ns = cfg.ns,
        .interval_s = cfg.interval,
        .scrape_timeout_s = cfg.scrape_timeout,
        .startup_s = cfg.startup,
        .leader_elect = cfg.leader_elect,
        .lease_ns = cfg.lease_ns,
        .identity = cfg.identity,
        .targets = cfg.targets,
        .router_urls = cfg.router_urls,
        .router_selector = cfg.router_selector,
        .router_ns = cfg.router_ns,
        .router_port = cfg.router_port,
        .metrics = metrics,
        .set_ready = set_ready,
        .ready_ctx = probe,
    };
    int rc = loop_run(&lc);
    if (rc == 0) {
        log_info("shutting down", LOG_S("reason", "signal"));
        status = 0;
    } else if (rc != ERR_BAD_STATE) {
        log_error("control loop failed", LOG_S("error", err_str(rc)));
    }
out:
    probe_server_free(probe);
    prom_registry_free(metrics);
    return status;
}
