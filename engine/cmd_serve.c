/* cinfer-engine serve: configuration table, signal handling and the serve lifecycle
 * (starting -> serving -> draining). Routes and metrics live in engine/http_api.c; model loading and
 * the inference thread join here when the model-serving API lands. */
#include "common/cli.h"
#include "common/err.h"
#include "common/log.h"
#include "common/shutdown.h"
#include "engine/cmd.h"
#include "engine/http_api.h"

#include <stddef.h>
#include <stdint.h>
#include <time.h>

struct serve_cfg {
    const char *host;
    int port;
    uint64_t max_body_bytes;
    const char *served_model_name;
    int shutdown_delay_s;
    int shutdown_timeout_s;
    const char *log_level, *log_format;
};

static const struct cfg_opt serve_opts[] = {
    {"host", CFG_STRING, offsetof(struct serve_cfg, host), "127.0.0.1", 1, 0,
     "Address to listen on (IPv4/IPv6 literal, localhost, or 0.0.0.0 for every address)", NULL, 0},
    {"port", CFG_INT, offsetof(struct serve_cfg, port), "8000", 0, 65535,
     "TCP port for the HTTP API (0 picks a free port; the log line says which)", NULL, 0},
    {"max-body-bytes", CFG_SIZE, offsetof(struct serve_cfg, max_body_bytes), "1M", 1024,
     1024.0 * 1024 * 1024, "Largest accepted request body; larger ones get 413", NULL, 0},
    {"served-model-name", CFG_STRING, offsetof(struct serve_cfg, served_model_name), "default", 1,
     0, "Model name reported in the API and in the model_name metric label", NULL, 0},
    {"shutdown-delay-seconds", CFG_INT, offsetof(struct serve_cfg, shutdown_delay_s), "0", 0, 600,
     "After SIGTERM, keep serving (with /health at 503) this long before refusing new requests",
     NULL, 0},
    {"shutdown-timeout", CFG_INT, offsetof(struct serve_cfg, shutdown_timeout_s), "30", 0, 3600,
     "After that, how long in-flight requests may take to finish before they are cancelled", NULL,
     0},
    CLI_LOG_OPTS(struct serve_cfg),
};

static const struct cfg_spec serve_spec = {
    .program = "cinfer-engine serve",
    .summary = "Serve a GGUF model over an OpenAI-compatible HTTP API.",
    .env_prefix = "CINFER_ENGINE_",
    .opts = serve_opts,
    .n_opts = sizeof(serve_opts) / sizeof(serve_opts[0]),
};

int cmd_serve_main(int argc, char **argv)
{
    struct serve_cfg cfg;
    struct cfg_result res;
    enum cli_parse_result pr = cli_parse(&serve_spec, &cfg, argc, argv, &res);
    if (pr != CLI_RUN) return pr == CLI_EXIT_OK ? 0 : 2;
    cli_log_setup("engine", cfg.log_level, cfg.log_format);
    if (shutdown_install() != 0) {
        log_error("cannot install signal handlers");
        return 1;
    }
    struct http_api_cfg acfg = {
        .host = cfg.host,
        .port = cfg.port,
        .max_body_bytes = (size_t)cfg.max_body_bytes,
        .model_name = cfg.served_model_name,
    };
    struct http_api *api = NULL;
    int rc = http_api_start(&acfg, &api);
    if (rc) {
        log_error("cannot start the HTTP API", LOG_S("err", err_str(rc)), LOG_S("host", cfg.host),
                  LOG_I("port", cfg.port));
        return rc == ERR_INVAL ? 2 : 1;
    }
    /* Nothing to load yet: serving at once. Model loading goes between start and this line. */
    http_api_set_state(api, HTTP_API_SERVING);
    log_info("serving", LOG_S("host", cfg.host), LOG_I("port", http_api_port(api)),
             LOG_S("model", cfg.served_model_name));
    while (!shutdown_wait(1000)) {
    }
    /* SIGTERM: fail the readiness probe at once, optionally keep serving while endpoints update,
     * then refuse new requests and let in-flight ones finish. */
    http_api_set_state(api, HTTP_API_DRAINING);
    log_info("draining", LOG_I("delay_s", cfg.shutdown_delay_s),
             LOG_I("grace_s", cfg.shutdown_timeout_s));
    for (int i = 0; i < cfg.shutdown_delay_s * 10; i++) {
        struct timespec ts = {0, 100000000L};
        nanosleep(&ts, NULL);
    }
    rc = http_api_shutdown(api, cfg.shutdown_timeout_s * 1000);
    if (rc) log_warn("in-flight requests cancelled at the end of the grace period");
    http_api_free(api);
    log_info("stopped");
    return 0;
}
