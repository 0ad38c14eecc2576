/* cinfer-router: one OpenAI endpoint for every model (router/router_server.h), routing each request
 * to a replica scored by its cached prefix and load (router/router_proxy.h), replicas found through
 * the Kubernetes API (router/router_discovery.h) or given with --target. Parses its flag table,
 * serves probes (/healthz, /readyz, /metrics on --probe-addr) and drains on SIGTERM. Thin: every
 * module it wires links into the tests. */
#include "common/cli.h"
#include "common/err.h"
#include "common/log.h"
#include "common/probe_server.h"
#include "common/prom/prom.h"
#include "common/shutdown.h"
#include "router/router_discovery.h"
#include "router/router_metrics.h"
#include "router/router_proxy.h"
#include "router/router_server.h"
#include "router/router_targets.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

struct router_cfg {
    const char *host;
    int port;
    const char *probe_addr;
    const char *targets;
    const char *kubeconfig, *ns;
    const char *policy;
    double load_factor, load_weight, prefill_weight, offload_weight, evict_weight;
    int load_floor;
    int max_attempts;
    double connect_timeout, health_interval, failure_backoff, hold_timeout;
    int hold_queue;
    uint64_t index_max_blocks;
    uint64_t max_body_bytes;
    const char *session_header;
    const char *engine_api_key;
    int shutdown_delay_s, shutdown_timeout_s;
    const char *log_level, *log_format;
};

#define OPT(name, type, field, def, lo, hi, help)                                                  \
    {                                                                                              \
        name, type, offsetof(struct router_cfg, field), def, lo, hi, help, NULL, 0                 \
    }

static const struct cfg_opt opts[] = {
    OPT("host", CFG_STRING, host, "127.0.0.1", 1, 0,
        "Address for the OpenAI API (0.0.0.0 for every address)"),
    OPT("port", CFG_INT, port, "8080", 0, 65535, "TCP port for the OpenAI API (0 picks one)"),
    OPT("probe-addr", CFG_STRING, probe_addr, "127.0.0.1:8081", 1, 0,
        "Address for /healthz, /readyz and /metrics"),
    OPT("target", CFG_STRING, targets, NULL, 1, 0,
        "Out-of-cluster mode: model=url,url,other=url serves these engines (base URLs) instead "
        "of discovering InferenceServices"),
    OPT("kubeconfig", CFG_STRING, kubeconfig, NULL, 1, 0,
        "Path to a kubeconfig; default $KUBECONFIG, in-cluster credentials, ~/.kube/config"),
    OPT("namespace", CFG_STRING, ns, "", 1, 0,
        "Serve the InferenceServices of these namespaces (a or a,b,c); empty serves all"),
    {"policy", CFG_STRING, offsetof(struct router_cfg, policy), "prefix", 1, 0,
     "Replica choice: prefix (cached prefix and load), least-loaded, random",
     "prefix|least-loaded|random", 0},
    OPT("load-factor", CFG_DOUBLE, load_factor, "1.25", 1, 100,
        "Bounded load: no replica takes a request that would put it above this times the mean "
        "load"),
    OPT("load-floor", CFG_INT, load_floor, "4", 1, 1 << 20,
        "The load bound never falls below this many requests per replica (an engine batches "
        "many sequences)"),
    OPT("load-weight", CFG_DOUBLE, load_weight, "64", 0, 1e9,
        "Prompt tokens one request in flight on a replica is worth when weighing cache against "
        "load"),
    OPT("prefill-weight", CFG_DOUBLE, prefill_weight, "0.5", 0, 1e6,
        "Cost of one prompt token a replica has still to prefill (its queue), in prompt tokens of "
        "the request's own: 0 routes by request counts only"),
    OPT("offload-weight", CFG_DOUBLE, offload_weight, "0.1", 0, 1,
        "Cost of one prompt token a replica would load back from its KV offload tiers (host "
        "memory, disk), in prompt tokens computed: a replica with the prefix in its KV pool "
        "beats one with it offloaded, which beats recomputing"),
    OPT("evict-weight", CFG_DOUBLE, evict_weight, "0.5", 0, 100,
        "Cost of one cached token a replica would evict to take a request (its KV pool full), in "
        "prompt tokens computed: spreads an idle fleet's prefixes over its caches"),
    OPT("max-attempts", CFG_INT, max_attempts, "3", 1, ROUTER_MAX_ATTEMPTS,
        "Replicas a request may be sent to when engines refuse it before its first byte"),
    OPT("connect-timeout", CFG_DOUBLE, connect_timeout, "2", 0.01, 60,
        "Seconds to connect to an engine"),
    OPT("health-interval", CFG_DOUBLE, health_interval, "1", 0.05, 60,
        "Seconds between /health probes of each engine"),
    OPT("failure-backoff", CFG_DOUBLE, failure_backoff, "2", 0, 600,
        "Seconds an engine that refused a connection gets no requests"),
    OPT("hold-timeout", CFG_DOUBLE, hold_timeout, "120", 0, 3600,
        "Seconds a request waits for a replica of a model that has none ready (scale from "
        "zero); then 503 with Retry-After"),
    OPT("hold-queue", CFG_INT, hold_queue, "1024", 0, 1 << 20,
        "Requests held per model; more get 503 at once"),
    OPT("index-max-blocks", CFG_SIZE, index_max_blocks, "4M", 1, 1 << 30,
        "KV block hashes indexed per engine"),
    OPT("max-body-bytes", CFG_SIZE, max_body_bytes, "16M", 1024, 1024.0 * 1024 * 1024,
        "Largest accepted request body; larger ones get 413"),
    OPT("session-header", CFG_STRING, session_header, "X-Session-Id", 0, 0,
        "Request header whose value keeps a session on one replica (empty: off)"),
    {"engine-api-key", CFG_STRING, offsetof(struct router_cfg, engine_api_key), NULL, 1, 0,
     "Bearer token for the router's own engine requests (events, tokenizer); prefer "
     "CINFER_ROUTER_ENGINE_API_KEY",
     NULL, CFG_SECRET},
    OPT("shutdown-delay-seconds", CFG_INT, shutdown_delay_s, "0", 0, 600,
        "After SIGTERM, keep serving (with /readyz at 503) this long before refusing requests"),
    OPT("shutdown-timeout", CFG_INT, shutdown_timeout_s, "30", 0, 3600,
        "Then how long requests in flight may take before they are cut"),
    CLI_LOG_OPTS(struct router_cfg),
};

static const struct cfg_spec spec = {
    .program = "cinfer-router",
    .summary = "One OpenAI endpoint for every model: routes each request to the engine replica "
               "that holds most of its prompt in cache without overloading it, retries on "
               "another before the first byte, and holds requests while a model scales from zero.",
    .env_prefix = "CINFER_ROUTER_",
    .opts = opts,
    .n_opts = sizeof(opts) / sizeof(opts[0]),
};

/* --target: every model with its engines, given to the proxy once. */
static int apply_targets(struct router_proxy *proxy, const struct router_targets *t)
{
    for (size_t i = 0; i < t->n; i++) {
        bool first = true;
        for (size_t j = 0; j < i; j++) first &= strcmp(t->v[j].model, t->v[i].model) != 0;
        if (!first) continue;
        struct router_endpoint eps[256];
        size_t n = 0;
        for (size_t j = i; j < t->n && n < 256; j++)
            if (strcmp(t->v[j].model, t->v[i].model) == 0) eps[n++] = t->v[j].ep;
        int rc = router_proxy_set_model(proxy, t->v[i].model, eps, n);
        if (rc) return rc;
        log_info("target", LOG_S("model", t->v[i].model), LOG_I("engines", n));
    }
    return 0;
}

static void sleep_s(int s)
{
    for (int i = 0; i < s * 10 && !shutdown_wait(0); i++) {
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

int main(int argc, char **argv)
{
    struct router_cfg cfg;
    struct cfg_result res;
    memset(&cfg, 0, sizeof(cfg));
    enum cli_parse_result pr = cli_parse(&spec, &cfg, argc, argv, &res);
    if (pr != CLI_RUN) return pr == CLI_EXIT_OK ? 0 : 2;
    cli_log_setup("router", cfg.log_level, cfg.log_format);
    struct router_targets targets = {0};
    char err[256] = "";
    if (router_targets_parse(cfg.targets, &targets, err, sizeof(err)) != 0) {
        fprintf(stderr, "cinfer-router: %s\n", err);
        return 2;
    }
    struct router_policy_cfg pol = {.load_factor = cfg.load_factor,
                                    .load_floor = cfg.load_floor,
                                    .load_weight = cfg.load_weight,
                                    .prefill_weight = cfg.prefill_weight,
                                    .offload_weight = cfg.offload_weight,
                                    .evict_weight = cfg.evict_weight};
    router_policy_parse(cfg.policy, &pol.policy); /* the table's choices admit only known names */
    if (shutdown_install() != 0) {
        log_error("cannot install signal handlers");
        return 1;
    }
    int status = 1, rc;
    struct prom_registry *registry = NULL;
    struct probe_server *probe = NULL;
    struct router_metrics *metrics = NULL;
    struct router_proxy *proxy = NULL;
    struct router_server *server = NULL;
    struct router_discovery *disc = NULL;
    if (probe_server_start_standard(cfg.probe_addr, &registry, &probe) != 0) goto out;
    if ((rc = router_metrics_new(registry, &metrics)) != 0) {
        log_error("cannot register metrics", LOG_S("err", err_str(rc)));
        goto out;
    }
    struct router_proxy_cfg pc = {
        .policy = pol,
        .max_attempts = cfg.max_attempts,
        .connect_timeout_ms = (int)(cfg.connect_timeout * 1000),
        .health_interval_ms = (int)(cfg.health_interval * 1000),
        .failure_backoff_ms = (int)(cfg.failure_backoff * 1000),
        .hold_timeout_ms = (int)(cfg.hold_timeout * 1000),
        .hold_max = cfg.hold_queue,
        .index_max_blocks = (size_t)cfg.index_max_blocks,
        .engine_api_key = cfg.engine_api_key && *cfg.engine_api_key ? cfg.engine_api_key : NULL,
        .metrics = metrics,
    };
    if ((rc = router_proxy_start(&pc, &proxy)) != 0) {
        log_error("cannot start the proxy", LOG_S("err", err_str(rc)));
        goto out;
    }
    if (targets.n) {
        if ((rc = apply_targets(proxy, &targets)) != 0) goto out;
    } else {
        struct router_discovery_cfg dc = {
            .kubeconfig = cfg.kubeconfig, .ns = cfg.ns, .proxy = proxy};
        if ((rc = router_discovery_start(&dc, &disc)) != 0) {
            log_error("cannot start discovery", LOG_S("err", err_str(rc)));
            goto out;
        }
        while (!router_discovery_synced(disc) && !shutdown_wait(50)) {
        }
        if (shutdown_requested()) goto drained;
    }
    struct router_server_cfg sc = {
        .host = cfg.host,
        .port = cfg.port,
        .max_body_bytes = (size_t)cfg.max_body_bytes,
        .session_header = cfg.session_header,
        .hash_prompts = pol.policy == ROUTER_POLICY_PREFIX,
        .proxy = proxy,
    };
    if ((rc = router_server_start(&sc, &server)) != 0) {
        log_error("cannot start the HTTP API", LOG_S("err", err_str(rc)), LOG_S("host", cfg.host),
                  LOG_I("port", cfg.port));
        goto out;
    }
    probe_server_set_ready(probe, true);
    log_info("serving", LOG_S("host", cfg.host), LOG_I("port", router_server_port(server)),
             LOG_S("policy", cfg.policy), LOG_S("mode", targets.n ? "target" : "kubernetes"));
    while (!shutdown_wait(1000)) {
    }
    /* SIGTERM: not ready at once (load balancers stop sending), then refuse, then drain. */
    probe_server_set_ready(probe, false);
    log_info("draining", LOG_I("delay_s", cfg.shutdown_delay_s),
             LOG_I("timeout_s", cfg.shutdown_timeout_s));
    sleep_s(cfg.shutdown_delay_s);
    if (router_server_shutdown(server, cfg.shutdown_timeout_s * 1000) != 0)
        log_warn("requests still in flight were cut at the end of the shutdown timeout");
drained:
    status = 0;
out:
    router_discovery_free(disc);
    router_proxy_stop(proxy);
    router_server_free(server);
    router_proxy_free(proxy);
    router_metrics_free(metrics);
    probe_server_free(probe);
    prom_registry_free(registry);
    router_targets_fini(&targets);
    log_info("stopped");
    return status;
}
