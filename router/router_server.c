/* Client-facing routes of cinfer-router (see router_server.h). */
#include "router/router_server.h"

#include "common/clock.h"
#include "common/err.h"
#include "common/http_server.h"
#include "common/log.h"
#include "engine/api/api.h"
#include "router/router_proxy.h"
#include "router/router_request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RS_HEADER_MAX     1024
#define RS_ERROR_BODY_MAX (1u << 16)
#define RS_STREAM_QUEUE   (1u << 20) /* bytes buffered per client before back-pressure */

struct router_server {
    struct router_server_cfg cfg;
    struct http_server *srv;
    struct http_route routes[3];
};

static void respond_api_error(struct http_req *req, const struct api_error *e)
{
    struct buf b;
    buf_init(&b, RS_ERROR_BODY_MAX);
    if (api_error_body(e, &b) == 0)
        http_respond(req, e->status, "application/json", b.data, b.len, NULL, 0);
    else
        http_respond_error(req, 500, "server_error", "cannot format the error");
    buf_fini(&b);
}

static void respond_error(struct http_req *req, int status, enum api_error_kind kind,
                          const char *param, const char *msg)
{
    struct api_error e;
    api_error_set(&e, kind, param, "%s", msg);
    e.status = status;
    respond_api_error(req, &e);
}

/* The model a request goes to; false after answering it. */
static bool pick_model(struct router_server *s, struct http_req *req, const char *body, size_t len,
                       bool chat, char *model, size_t cap)
{
    if (router_request_model(body, len, model, cap) == 0) return true;
    /* With one model, whatever the router cannot read goes to it: the engine answers its own
     * error (or serves a request without "model", as OpenAI-compatible servers do). */
    if (router_proxy_only_model(s->cfg.proxy, model, cap)) return true;
    /* With several, the engine's own parser (its code, linked here) says what is wrong, in the
     * words the engine would use. */
    struct api_request *r = NULL;
    struct api_error e;
    if (api_request_parse(body, len, chat ? API_KIND_CHAT : API_KIND_COMPLETION, NULL, &r, &e)) {
        respond_api_error(req, &e);
        return false;
    }
    bool ok = r->model && strlen(r->model) < cap;
    if (ok) memcpy(model, r->model, strlen(r->model) + 1);
    api_request_free(r);
    if (!ok)
        respond_error(req, 400, API_ERR_INVALID, "model",
                      "you must provide a model parameter (this router serves several models: "
                      "GET /v1/models lists them)");
    return ok;
}

static char *header_dup(struct http_req *req, const char *name)
{
    char v[RS_HEADER_MAX];
    int n = http_req_header(req, name, v, sizeof(v));
    return n >= 0 ? strdup(v) : NULL;
}

static void handle(struct http_req *req, void *ud, bool chat)
{
    struct router_server *s = ud;
    double arrival = clock_mono_s();
    size_t len = 0;
    const char *body = http_req_body(req, &len);
    char model[ROUTER_MODEL_MAX];
    if (!pick_model(s, req, body, len, chat, model, sizeof(model))) return;
    struct router_model_info *info = NULL;
    if (router_proxy_model_info(s->cfg.proxy, model, &info) != 0) {
        char msg[ROUTER_MODEL_MAX + 64];
        snprintf(msg, sizeof(msg), "The model '%s' does not exist", model);
        respond_error(req, 404, API_ERR_MODEL_NOT_FOUND, "model", msg);
        return;
    }
    struct router_job *job = router_job_new();
    if (!job || !(job->body = malloc(len + 1))) {
        router_model_info_unref(info);
        router_job_free(job);
        respond_error(req, 500, API_ERR_INTERNAL, NULL, "out of memory");
        return;
    }
    memcpy(job->body, body, len);
    job->body[len] = '\0';
    job->body_len = len;
    snprintf(job->model, sizeof(job->model), "%s", model);
    snprintf(job->path, sizeof(job->path), "%s", chat ? "/v1/chat/completions" : "/v1/completions");
    job->arrival = arrival;
    /* A request the engine would refuse is forwarded unhashed: the engine answers it. */
    if (info && s->cfg.hash_prompts &&
        router_model_prompt(info, body, len, chat, &job->prompt) != 0)
        router_prompt_fini(&job->prompt);
    router_model_info_unref(info);
    char rid[RS_HEADER_MAX];
    if (http_req_header(req, "X-Request-Id", rid, sizeof(rid)) >= 0 && router_request_id_valid(rid))
        memcpy(job->request_id, rid, strlen(rid) + 1); /* valid ids fit: at most 64 chars */
    else
        router_request_id_new(job->request_id);
    job->authorization = header_dup(req, "Authorization");
    if (s->cfg.session_header && *s->cfg.session_header) {
        char sess[RS_HEADER_MAX];
        int n = http_req_header(req, s->cfg.session_header, sess, sizeof(sess));
        if (n > 0) job->session = router_policy_hash(sess, (size_t)n) | 1;
    }
    job->stream = http_req_defer(req);
    if (!job->stream) { /* http_req_defer answered 500 */
        router_job_free(job);
        return;
    }
    http_stream_on_cancel(job->stream, router_proxy_client_gone, s->cfg.proxy);
    router_proxy_submit(s->cfg.proxy, job);
}

static void on_completions(struct http_req *req, void *ud)
{
    handle(req, ud, false);
}

static void on_chat(struct http_req *req, void *ud)
{
    handle(req, ud, true);
}

static void on_models(struct http_req *req, void *ud)
{
    struct router_server *s = ud;
    json_t *j = router_proxy_models_json(s->cfg.proxy);
    if (!j) {
        respond_error(req, 500, API_ERR_INTERNAL, NULL, "out of memory");
        return;
    }
    http_respond_json(req, 200, j, NULL, 0);
    json_decref(j);
}

int router_server_start(const struct router_server_cfg *cfg, struct router_server **out)
{
    if (!cfg->proxy) return ERR_INVAL;
    struct router_server *s = calloc(1, sizeof(*s));
    if (!s) return ERR_NOMEM;
    s->cfg = *cfg;
    s->cfg.host = NULL;
    s->routes[0] = (struct http_route){HTTP_POST, "/v1/completions", on_completions, s};
    s->routes[1] = (struct http_route){HTTP_POST, "/v1/chat/completions", on_chat, s};
    s->routes[2] = (struct http_route){HTTP_GET, "/v1/models", on_models, s};
    struct http_server_cfg hc = HTTP_SERVER_CFG_DEFAULT;
    hc.host = cfg->host;
    hc.port = cfg->port;
    hc.max_body_bytes = cfg->max_body_bytes;
    hc.stream_queue_bytes = RS_STREAM_QUEUE;
    hc.name = "router";
    int rc = http_server_start(&hc, s->routes, sizeof(s->routes) / sizeof(s->routes[0]), &s->srv);
    if (rc) {
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

int router_server_port(const struct router_server *s)
{
    return http_server_port(s->srv);
}

int router_server_shutdown(struct router_server *s, int grace_ms)
{
    return http_server_shutdown(s->srv, grace_ms);
}

void router_server_free(struct router_server *s)
{
    if (!s) return;
    http_server_free(s->srv);
    free(s);
}
