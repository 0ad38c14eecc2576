/* cinfer-engine fetch-model URI DEST: the InferenceService init container's download step; and
 * fetch-model --verify PATH --sha256 HEX, its check of a model that is not downloaded (file://,
 * pvc://) before the engine loads it. */
#include "common/cli.h"
#include "common/err.h"
#include "common/log.h"
#include "common/shutdown.h"
#include "engine/cmd/cmd.h"
#include "engine/tools/fetch_model.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

struct fetch_cfg {
    const char *sha256, *cacert, *hf_endpoint, *token_env, *verify;
    int retries, progress_seconds, connect_timeout, stall_timeout;
    uint64_t max_bytes;
    const char *log_level, *log_format;
};

static const struct cfg_opt opts[] = {
    {"sha256", CFG_STRING, offsetof(struct fetch_cfg, sha256), NULL, 1, 0,
     "Expected SHA-256 of the file (hex); the download fails on mismatch", NULL, 0},
    {"cacert", CFG_STRING, offsetof(struct fetch_cfg, cacert), NULL, 1, 0,
     "CA bundle (PEM) to trust instead of the system store", NULL, 0},
    {"hf-endpoint", CFG_STRING, offsetof(struct fetch_cfg, hf_endpoint), NULL, 1, 0,
     "Hugging Face endpoint for hf:// URIs (default $HF_ENDPOINT or https://huggingface.co)", NULL,
     0},
    {"token-env", CFG_STRING, offsetof(struct fetch_cfg, token_env), "HF_TOKEN", 1, 0,
     "Environment variable holding a bearer token (sent only to the URI's host)", NULL, 0},
    {"retries", CFG_INT, offsetof(struct fetch_cfg, retries), "8", 0, 100,
     "Retries of transient failures (network errors, 5xx, 429), resuming each time", NULL, 0},
    {"progress-seconds", CFG_INT, offsetof(struct fetch_cfg, progress_seconds), "5", 1, 3600,
     "Seconds between progress log lines", NULL, 0},
    {"connect-timeout", CFG_INT, offsetof(struct fetch_cfg, connect_timeout), "30", 1, 600,
     "Connection timeout in seconds", NULL, 0},
    {"stall-timeout", CFG_INT, offsetof(struct fetch_cfg, stall_timeout), "60", 1, 3600,
     "Abort and retry when no data arrived for this many seconds", NULL, 0},
    {"max-bytes", CFG_SIZE, offsetof(struct fetch_cfg, max_bytes), "0", 0, 1e15,
     "Refuse a model larger than this (by its Content-Length or what arrived); 0 = no limit", NULL,
     0},
    {"verify", CFG_STRING, offsetof(struct fetch_cfg, verify), NULL, 1, 0,
     "Download nothing: check that the file at this path has the --sha256 digest (no URI, no DEST)",
     NULL, 0},
    CLI_LOG_OPTS(struct fetch_cfg),
};

static const struct cfg_spec spec = {
    .program = "cinfer-engine fetch-model",
    .usage = "URI DEST  |  --verify PATH --sha256 HEX",
    .summary = "Download a GGUF model (https:// or hf://org/repo/file) to DEST, resuming and "
               "verifying it; or verify a model already on disk.",
    .env_prefix = "CINFER_ENGINE_",
    .opts = opts,
    .n_opts = sizeof(opts) / sizeof(opts[0]),
    .min_positional = 0,
    .max_positional = 2,
};

/* The download: URI DEST. */
static int download(const struct fetch_cfg *cfg, const struct cfg_result *res, char *err,
                    size_t errlen)
{
    struct fetch_model_opts o = {
        .uri = res->positional[0],
        .dest = res->positional[1],
        .sha256 = cfg->sha256,
        .cacert = cfg->cacert,
        .token = getenv(cfg->token_env),
        .hf_endpoint = cfg->hf_endpoint,
        .retries = cfg->retries,
        .progress_seconds = cfg->progress_seconds,
        .connect_timeout_s = cfg->connect_timeout,
        .stall_timeout_s = cfg->stall_timeout,
        .backoff_max_s = 30,
        .max_bytes = cfg->max_bytes,
    };
    shutdown_install();
    return fetch_model(&o, err, errlen);
}

int cmd_fetch_model_main(int argc, char **argv)
{
    struct fetch_cfg cfg;
    struct cfg_result res;
    enum cli_parse_result pr = cli_parse(&spec, &cfg, argc, argv, &res);
    if (pr != CLI_RUN) return pr == CLI_EXIT_OK ? 0 : 2;
    cli_log_setup("fetch-model", cfg.log_level, cfg.log_format);
    if (cfg.verify ? res.n_positional != 0 || !cfg.sha256 : res.n_positional != 2) {
        fprintf(stderr, "cinfer-engine fetch-model: expected URI DEST, or --verify PATH with "
                        "--sha256 (see --help)\n");
        return 2;
    }
    char err[1024] = "";
    int rc = cfg.verify ? fetch_model_verify(cfg.verify, cfg.sha256, err, sizeof(err))
                        : download(&cfg, &res, err, sizeof(err));
    if (rc) {
        log_error(cfg.verify ? "verify failed" : "fetch failed", LOG_S("error", err),
                  LOG_S("code", err_str(rc)));
        fprintf(stderr, "cinfer-engine fetch-model: %s\n", err);
        return rc == ERR_INVAL ? 2 : 1;
    }
    return 0;
}
