/* cinfer-operator: parses its flag table, serves probes (/healthz, /readyz, /metrics on
 * --probe-addr) and runs the controller until SIGTERM (exit 0) or loss of leadership (exit 1). */
#include "common/cli.h"
#include "common/err.h"
#include "common/k8s/names.h"
#include "common/log.h"
#include "common/probe_server.h"
#include "common/prom/prom.h"
#include "common/shutdown.h"
#include "operator/controller.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct operator_cfg {
    const char *kubeconfig, *context, *ns;
    int workers;
    bool leader_elect;
    const char *lease_ns, *identity;
    int resync_seconds;
    const char *engine_image, *engine_pull_policy;
    int engine_shutdown_timeout, engine_shutdown_delay;
    bool network_policy;
    const char *network_policy_ns, *network_policy_allow;
    uint64_t model_download_limit;
    const char *probe_addr;
    const char *log_level, *log_format;
};

#define OPT(name, type, field, def, lo, hi, help, choices)                                         \
    {                                                                                              \
        name, type, offsetof(struct operator_cfg, field), def, lo, hi, help, choices, 0            \
    }

static const struct cfg_opt opts[] = {
    OPT("kubeconfig", CFG_STRING, kubeconfig, NULL, 1, 0,
        "Path to a kubeconfig; default $KUBECONFIG, in-cluster credentials, ~/.kube/config", NULL),
    OPT("context", CFG_STRING, context, NULL, 1, 0, "kubeconfig context (default: current)", NULL),
    OPT("namespace", CFG_STRING, ns, "", 1, 0,
        "Watch these namespaces (a or a,b,c; RBAC: a Role in each); empty watches all", NULL),
    OPT("workers", CFG_INT, workers, "2", 1, 64, "Concurrent reconciles", NULL),
    OPT("leader-elect", CFG_BOOL, leader_elect, "true", 1, 0,
        "Elect a leader on the Lease cinfer-operator so only one replica reconciles", NULL),
    OPT("leader-election-namespace", CFG_STRING, lease_ns, NULL, 1, 0,
        "Namespace of the Lease (default: the namespace the operator runs in)", NULL),
    OPT("identity", CFG_STRING, identity, NULL, 1, 0,
        "Leader-election identity (default: hostname_pid_random)", NULL),
    OPT("resync-period", CFG_INT, resync_seconds, "600", 0, 86400,
        "Seconds between full resyncs of every InferenceService (0 = never)", NULL),
    OPT("engine-image", CFG_STRING, engine_image, "ghcr.io/cinfer/cinfer-engine:0.1.0", 1, 0,
        "Engine image for InferenceServices that do not set spec.engine.image", NULL),
    OPT("engine-image-pull-policy", CFG_STRING, engine_pull_policy, "IfNotPresent", 1, 0,
        "Pull policy for that image", "Always|IfNotPresent|Never"),
    OPT("engine-shutdown-timeout", CFG_INT, engine_shutdown_timeout, "30", 1, 3600,
        "Engine --shutdown-timeout in seconds; pods get this plus a margin to drain", NULL),
    OPT("engine-shutdown-delay", CFG_INT, engine_shutdown_delay, "10", 0, 600,
        "Engine --shutdown-delay-seconds: after SIGTERM engines serve on this long (with /health "
        "503) while endpoints drop them; added to the pods' grace period",
        NULL),
    OPT("network-policy", CFG_BOOL, network_policy, "true", 1, 0,
        "A NetworkPolicy per InferenceService admitting only the router, the autoscaler and the "
        "namespaces it lists; false deletes the ones the operator made",
        NULL),
    OPT("network-policy-namespace", CFG_STRING, network_policy_ns, NULL, 1, 0,
        "Namespace of the router and the autoscaler the policies admit (default: the operator's "
        "own)",
        NULL),
    OPT("network-policy-allow-namespaces", CFG_STRING, network_policy_allow, "", 1, 0,
        "Namespaces every policy admits as well (a,b; e.g. where Prometheus runs)", NULL),
    OPT("model-download-limit", CFG_SIZE, model_download_limit, "64G", 1, 1e15,
        "Size limit of a downloaded model without spec.model.sizeBytes (its emptyDir sizeLimit "
        "and fetch-model --max-bytes)",
        NULL),
    OPT("probe-addr", CFG_STRING, probe_addr, "127.0.0.1:8081", 1, 0,
        "Address for /healthz, /readyz and /metrics", NULL),
    CLI_LOG_OPTS(struct operator_cfg),
};

static const struct cfg_spec spec = {
    .program = "cinfer-operator",
    .summary = "Reconciles InferenceService resources into engine Deployments and Services.",
    .env_prefix = "CINFER_OPERATOR_",
    .opts = opts,
    .n_opts = sizeof(opts) / sizeof(opts[0]),
};

/* True when `v` is unset, empty or a namespace (or with `many` a list a,b,c); says why not. */
static bool namespaces_ok(const char *flag, const char *v, bool many)
{
    for (const char *p = v && *v ? v : NULL; p;) {
        const char *comma = many ? strchr(p, ',') : NULL;
        if (!k8s_name_is_dns_label(p, comma ? (size_t)(comma - p) : strlen(p))) {
            fprintf(stderr, "cinfer-operator: %s: \"%s\" is not a namespace%s\n", flag, v,
                    many ? " list (a,b,...)" : "");
            return false;
        }
        p = comma ? comma + 1 : NULL;
    }
    return true;
}

static void set_ready(void *ctx, bool ready)
{
    probe_server_set_ready(ctx, ready);
}

int main(int argc, char **argv)
{
    struct operator_cfg cfg;
    struct cfg_result res;
    enum cli_parse_result pr = cli_parse(&spec, &cfg, argc, argv, &res);
    if (pr != CLI_RUN) return pr == CLI_EXIT_OK ? 0 : 2;
    cli_log_setup("operator", cfg.log_level, cfg.log_format);
    if (!namespaces_ok("--namespace", cfg.ns, true) ||
        !namespaces_ok("--network-policy-namespace", cfg.network_policy_ns, false) ||
        !namespaces_ok("--network-policy-allow-namespaces", cfg.network_policy_allow, true))
        return 2;
    if (shutdown_install() != 0) {
        log_error("cannot install signal handlers");
        return 1;
    }
    struct prom_registry *metrics = NULL;
    struct probe_server *probe = NULL;
    int status = 1;
    if (probe_server_start_standard(cfg.probe_addr, &metrics, &probe) != 0) goto out;
    struct controller_cfg cc = {
        .kubeconfig = cfg.kubeconfig,
        .context = cfg.context,
        .ns = cfg.ns,
        .workers = cfg.workers,
        .leader_elect = cfg.leader_elect,
        .lease_namespace = cfg.lease_ns,
        .identity = cfg.identity,
        .resync_seconds = cfg.resync_seconds,
        .desired = {.engine_image = cfg.engine_image,
                    .image_pull_policy = cfg.engine_pull_policy,
                    .shutdown_timeout_seconds = cfg.engine_shutdown_timeout,
                    .shutdown_delay_seconds = cfg.engine_shutdown_delay,
                    .network_policy = cfg.network_policy,
                    .system_namespace = cfg.network_policy_ns,
                    .allowed_namespaces = cfg.network_policy_allow,
                    .download_limit_bytes = cfg.model_download_limit},
        .metrics = metrics,
        .set_ready = set_ready,
        .ready_ctx = probe,
    };
    int rc = controller_run(&cc);
    if (rc == 0) {
        log_info("shutting down", LOG_S("reason", "signal"));
        status = 0;
    } else if (rc != ERR_BAD_STATE) {
        log_error("controller failed", LOG_S("error", err_str(rc)));
    }
out:
    probe_server_free(probe);
    prom_registry_free(metrics);
    return status;
}
