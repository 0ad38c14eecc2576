/* A trivial upstream for measuring cinfer-router alone (router/BENCHMARKS.md): answers
 * POST /v1/completions and /v1/chat/completions at once with a fixed completion (usage included),
 * GET /health with 200, and GET /cinfer/tokenizer with the tokenizer document of a real model (the
 * engine's own serve_router_tokenizer_doc), so the router hashes prompts exactly as in front of an
 * engine. No event stream: the router's index stays empty (prefix scoring still runs).
 * Built and run by hack/router-bench.sh (not by the Makefile); not part of any program.
 *
 *   upstream MODEL.gguf PORT */
#include "common/buf.h"
#include "common/http_server.h"
#include "common/log.h"
#include "common/shutdown.h"
#include "engine/gguf/gguf.h"
#include "engine/serve/serve_router.h"

#include <stdio.h>
#include <stdlib.h>

static struct buf doc;

static const char completion[] =
    "{\"id\":\"cmpl-0\",\"object\":\"text_completion\",\"created\":0,\"model\":\"bench\","
    "\"choices\":[{\"text\":\" ok\",\"index\":0,\"logprobs\":null,\"finish_reason\":\"length\"}],"
    "\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1,\"total_tokens\":2,"
    "\"prompt_tokens_details\":{\"cached_tokens\":0}}}";

static void on_completion(struct http_req *req, void *ud)
{
    (void)ud;
    http_respond(req, 200, "application/json", completion, sizeof(completion) - 1, NULL, 0);
}

static void on_health(struct http_req *req, void *ud)
{
    (void)ud;
    http_respond(req, 200, "application/json", "{\"status\":\"ok\"}", 15, NULL, 0);
}

static void on_tokenizer(struct http_req *req, void *ud)
{
    (void)ud;
    http_respond(req, 200, "application/octet-stream", doc.data, doc.len, NULL, 0);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s MODEL.gguf PORT\n", argv[0]);
        return 2;
    }
    log_setup("upstream", LOG_WARN, LOG_FORMAT_TEXT);
    char err[256];
    struct gguf *g;
    if (gguf_open(argv[1], &g, err, sizeof(err)) != 0) {
        fprintf(stderr, "upstream: %s\n", err);
        return 1;
    }
    struct serve_router_cfg rc = {.model = g,
                                  .model_name = "bench",
                                  .block_size = 16,
                                  .max_context = 1 << 20,
                                  .n_vocab = 1 << 20};
    buf_init(&doc, 0);
    if (serve_router_tokenizer_doc(&rc, &doc) != 0) return 1;
    gguf_close(g);
    static const struct http_route routes[] = {
        {HTTP_POST, "/v1/completions", on_completion, NULL},
        {HTTP_POST, "/v1/chat/completions", on_completion, NULL},
        {HTTP_GET, "/health", on_health, NULL},
        {HTTP_GET, "/cinfer/tokenizer", on_tokenizer, NULL},
    };
    struct http_server_cfg hc = HTTP_SERVER_CFG_DEFAULT;
    hc.port = (int)strtol(argv[2], NULL, 10);
    hc.max_body_bytes = 64u << 20;
    hc.name = "upstream";
    struct http_server *srv;
    if (shutdown_install() != 0 || http_server_start(&hc, routes, 4, &srv) != 0) return 1;
    while (!shutdown_wait(1000)) {
    }
    http_server_free(srv);
    buf_fini(&doc);
    return 0;
}
