/* Kubernetes API client (client.h): builds the URL for a reference, sends JSON over http_client
 * with the configured credentials, maps error answers to err.h codes and keeps the server's Status
 * for the caller. Watches feed the streamed body through watch.c's bounded line splitter.
 * The bearer token from a token file is re-read every token_refresh_s seconds (projected
 * service-account tokens rotate about hourly). */
#include "common/k8s/client.h"

#include "common/buf.h"
#include "common/err.h"
#include "common/http_client.h"
#include "common/k8s/url.h"
#include "common/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define K8S_DEFAULT_MAX_RESPONSE ((size_t)64 << 20)
#define K8S_URL_MAX              ((size_t)16 << 10)
#define K8S_WATCH_SLACK_S        30 /* client-side limit beyond the server's timeoutSeconds */

struct k8s_client {
    struct k8s_config *cfg; /* owned */
    struct http_client *http;
    char *field_manager; /* default for writes, or NULL */
    size_t max_response;
    struct timespec token_read_at; /* CLOCK_MONOTONIC of the last token file read */
    struct buf url;                /* the request URL being built (bounded) */
    struct k8s_status status;
    char errmsg[K8S_ERRMSG_MAX + K8S_STATUS_MSG_MAX];
};

static void client_now(struct timespec *ts)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
}

int k8s_client_new(struct k8s_config *cfg, const struct k8s_client_opts *opts,
                   struct k8s_client **out, char *err, size_t errlen)
{
    static const struct k8s_client_opts defaults;
    struct k8s_client *c = NULL;
    char herr[HTTP_CLIENT_ERRMSG_MAX];
    int rc = ERR_NOMEM;

    if (!opts) opts = &defaults;
    if (!cfg || !cfg->server) {
        snprintf(err, errlen, "k8s client: config has no server");
        rc = ERR_INVAL;
        goto out;
    }
    if (!(c = calloc(1, sizeof(*c)))) goto out;
    c->cfg = cfg;
    cfg = NULL;
    buf_init(&c->url, K8S_URL_MAX);
    c->max_response = opts->max_response ? opts->max_response : K8S_DEFAULT_MAX_RESPONSE;
    if (opts->field_manager && !(c->field_manager = strdup(opts->field_manager))) goto out;
    struct http_client_opts h = {
        .tls = {.ca_pem = c->cfg->ca_pem,
                .cert_pem = c->cfg->cert_pem,
                .key_pem = c->cfg->key_pem,
                .insecure_skip_verify = c->cfg->insecure_skip_verify},
        .connect_timeout_ms = opts->connect_timeout_ms,
        .timeout_ms = opts->timeout_ms,
        .max_response = c->max_response,
        .user_agent = opts->user_agent,
    };
    rc = http_client_new(&h, &c->http, herr);
    if (rc) {
        snprintf(err, errlen, "k8s client: %s", herr);
        goto out;
    }
    client_now(&c->token_read_at);
    *out = c;
    c = NULL;
    rc = 0;
out:
    if (rc == ERR_NOMEM) snprintf(err, errlen, "k8s client: out of memory");
    k8s_config_free(cfg);
    k8s_client_free(c);
    return rc;
}

void k8s_client_free(struct k8s_client *c)
{
    if (!c) return;
    http_client_free(c->http);
    k8s_config_free(c->cfg);
    free(c->field_manager);
    buf_fini(&c->url);
    free(c);
}

const struct k8s_config *k8s_client_config(const struct k8s_client *c)
{
    return c->cfg;
}

const char *k8s_client_errmsg(const struct k8s_client *c)
{
    return c->errmsg;
}

const struct k8s_status *k8s_client_status(const struct k8s_client *c)
{
    return &c->status;
}

/* Re-reads the token file when it is due. A failed read keeps the previous token (a rotation in
 * progress may briefly remove the file) and is logged; the API server will say 401 if it matters. */
static void client_token_refresh(struct k8s_client *c)
{
    struct timespec now;
    char err[K8S_ERRMSG_MAX], *tok = NULL;

    if (!c->cfg->token_file) return;
    client_now(&now);
    if (now.tv_sec - c->token_read_at.tv_sec < c->cfg->token_refresh_s) return;
    c->token_read_at = now;
    if (k8s_config_read_token(c->cfg->token_file, &tok, err, sizeof(err)) != 0) {
        log_warn("k8s token re-read failed; keeping the previous token", LOG_S("error", err));
        return;
    }
    if (c->cfg->token) memset(c->cfg->token, 0, strlen(c->cfg->token));
    free(c->cfg->token);
    c->cfg->token = tok;
}

/* Starts c->url for `ref`; the caller appends query parameters. */
static int client_url(struct k8s_client *c, const char *method, const struct k8s_ref *ref,
                      bool want_name)
{
    char err[256];
    buf_reset(&c->url);
    memset(&c->status, 0, sizeof(c->status));
    c->errmsg[0] = 0;
    if (want_name != (ref->name != NULL)) {
        snprintf(c->errmsg, sizeof(c->errmsg), "%s: bad resource reference: %s", method,
                 want_name ? "an object name is required" : "a collection request takes no name");
        return ERR_INVAL;
    }
    int rc = k8s_url_build(&c->url, c->cfg->server, ref, err, sizeof(err));
    if (rc) snprintf(c->errmsg, sizeof(c->errmsg), "%s: %s", method, err);
    return rc;
}

static int client_query_fail(struct k8s_client *c, const char *method, int rc)
{
    snprintf(c->errmsg, sizeof(c->errmsg), "%s: building the query: %s", method, err_str(rc));
    return rc;
}

/* The request path for messages: the URL without the server. */
static const char *client_path(const struct k8s_client *c)
{
    size_t n = strlen(c->cfg->server);
    return c->url.len >= n ? buf_cstr(&c->url) + n : buf_cstr(&c->url);
}

/* Records an API error answer and returns its err.h code. */
static int client_api_error(struct k8s_client *c, const char *method, long status,
                            const struct buf *body)
{
    k8s_status_parse(status, body->data ? body->data : "", body->len, &c->status);
    int rc = k8s_status_to_err(status, c->status.reason);
    snprintf(c->errmsg, sizeof(c->errmsg), "%s %s: %ld %s: %s", method, client_path(c), status,
             c->status.reason[0] ? c->status.reason : "error", c->status.message);
    return rc;
}

/* Sends c->url with `method`, an optional JSON body, and decodes a 2xx JSON answer into *out
 * (when out is non-NULL). */
static int client_exchange(struct k8s_client *c, const char *method, const char *content_type,
                           const json_t *body, json_t **out)
{
    char ct[96], *text = NULL;
    const char *headers[] = {"Accept: application/json", body ? ct : NULL, NULL};
    struct http_response resp;
    json_error_t jerr;
    int rc = ERR_NOMEM;

    http_response_init(&resp);
    snprintf(ct, sizeof(ct), "Content-Type: %s", content_type ? content_type : "application/json");
    if (body && !(text = json_dumps(body, K8S_JSON_DUMP_FLAGS))) {
        snprintf(c->errmsg, sizeof(c->errmsg), "%s %s: cannot encode the body", method,
                 client_path(c));
        rc = ERR_INVAL;
        goto out;
    }
    client_token_refresh(c);
    struct http_request req = {
        .method = method,
        .url = buf_cstr(&c->url),
        .headers = headers,
        .body = text,
        .body_len = text ? strlen(text) : 0,
        .bearer_token = c->cfg->token,
    };
    rc = http_client_do(c->http, &req, &resp);
    if (rc) {
        snprintf(c->errmsg, sizeof(c->errmsg), "%s", http_client_errmsg(c->http));
        goto out;
    }
    if (resp.status < 200 || resp.status >= 300) {
        rc = client_api_error(c, method, resp.status, &resp.body);
        goto out;
    }
    if (out) {
        json_t *j = json_loadb(resp.body.data ? resp.body.data : "", resp.body.len, 0, &jerr);
        if (!j) {
            snprintf(c->errmsg, sizeof(c->errmsg), "%s %s: answer is not JSON: %s", method,
                     client_path(c), jerr.text);
            rc = ERR_PARSE;
            goto out;
        }
        *out = j;
    }
    rc = 0;
out:
    free(text);
    http_response_fini(&resp);
    return rc;
}

int k8s_client_get(struct k8s_client *c, const struct k8s_ref *ref, json_t **out)
{
    int rc = client_url(c, "GET", ref, true);
    return rc ? rc : client_exchange(c, "GET", NULL, NULL, out);
}

int k8s_client_list(struct k8s_client *c, const struct k8s_ref *ref,
                    const struct k8s_list_opts *opts, json_t **out)
{
    static const struct k8s_list_opts none;
    char limit[32];
    int rc = client_url(c, "GET", ref, false);
    if (rc) return rc;
    if (!opts) opts = &none;
    snprintf(limit, sizeof(limit), "%ld", opts->limit);
    if ((rc = k8s_url_query(&c->url, "labelSelector", opts->label_selector)) ||
        (rc = k8s_url_query(&c->url, "fieldSelector", opts->field_selector)) ||
        (rc = k8s_url_query(&c->url, "limit", opts->limit > 0 ? limit : NULL)) ||
        (rc = k8s_url_query(&c->url, "continue", opts->continue_token)) ||
        (rc = k8s_url_query(&c->url, "resourceVersion", opts->resource_version)) ||
        (rc = k8s_url_query(&c->url, "resourceVersionMatch", opts->resource_version_match)))
        return client_query_fail(c, "GET", rc);
    return client_exchange(c, "GET", NULL, NULL, out);
}

int k8s_client_create(struct k8s_client *c, const struct k8s_ref *ref, const json_t *obj,
                      json_t **out)
{
    int rc = client_url(c, "POST", ref, false);
    if (!rc) rc = k8s_url_query(&c->url, "fieldManager", c->field_manager);
    return rc ? rc : client_exchange(c, "POST", NULL, obj, out);
}

int k8s_client_update(struct k8s_client *c, const struct k8s_ref *ref, const json_t *obj,
                      json_t **out)
{
    int rc = client_url(c, "PUT", ref, true);
    if (!rc) rc = k8s_url_query(&c->url, "fieldManager", c->field_manager);
    return rc ? rc : client_exchange(c, "PUT", NULL, obj, out);
}

int k8s_client_patch(struct k8s_client *c, const struct k8s_ref *ref, enum k8s_patch_type type,
                     const json_t *patch, const struct k8s_patch_opts *opts, json_t **out)
{
    static const char *const types[] = {
        [K8S_PATCH_MERGE] = "application/merge-patch+json",
        [K8S_PATCH_JSON] = "application/json-patch+json",
        [K8S_PATCH_STRATEGIC] = "application/strategic-merge-patch+json",
        [K8S_PATCH_APPLY] = "application/apply-patch+yaml", /* JSON is YAML */
    };
    static const struct k8s_patch_opts none;
    int rc = client_url(c, "PATCH", ref, true);
    if (rc) return rc;
    if (!opts) opts = &none;
    const char *fm = opts->field_manager ? opts->field_manager : c->field_manager;
    if ((unsigned)type >= sizeof(types) / sizeof(types[0]) || (type == K8S_PATCH_APPLY && !fm)) {
        snprintf(c->errmsg, sizeof(c->errmsg), "PATCH %s: %s", client_path(c),
                 type == K8S_PATCH_APPLY ? "server-side apply needs a field manager"
                                         : "unknown patch type");
        return ERR_INVAL;
    }
    if ((rc = k8s_url_query(&c->url, "fieldManager", fm)) ||
        (rc = k8s_url_query(&c->url, "force",
                            type == K8S_PATCH_APPLY && opts->force ? "true" : NULL)))
        return client_query_fail(c, "PATCH", rc);
    return client_exchange(c, "PATCH", types[type], patch, out);
}

int k8s_client_delete(struct k8s_client *c, const struct k8s_ref *ref,
                      const struct k8s_delete_opts *opts, json_t **out)
{
    json_t *body = NULL, *pre = NULL;
    int rc = client_url(c, "DELETE", ref, true);
    if (rc || !opts) return rc ? rc : client_exchange(c, "DELETE", NULL, NULL, out);

    rc = ERR_NOMEM;
    body = json_pack("{s:s, s:s}", "apiVersion", "v1", "kind", "DeleteOptions");
    if (!body) goto out;
    if (opts->propagation_policy &&
        json_object_set_new(body, "propagationPolicy", json_string(opts->propagation_policy)))
        goto out;
    if (opts->set_grace_period &&
        json_object_set_new(body, "gracePeriodSeconds", json_integer(opts->grace_period_seconds)))
        goto out;
    if (opts->precondition_uid || opts->precondition_resource_version) {
        if (!(pre = json_object())) goto out;
        if (opts->precondition_uid &&
            json_object_set_new(pre, "uid", json_string(opts->precondition_uid)))
            goto out;
        if (opts->precondition_resource_version &&
            json_object_set_new(pre, "resourceVersion",
                                json_string(opts->precondition_resource_version)))
            goto out;
        if (json_object_set(body, "preconditions", pre)) goto out;
    }
    rc = client_exchange(c, "DELETE", NULL, body, out);
out:
    if (rc == ERR_NOMEM && !c->errmsg[0])
        snprintf(c->errmsg, sizeof(c->errmsg), "DELETE %s: out of memory", client_path(c));
    json_decref(pre);
    json_decref(body);
    return rc;
}

/* State of one watch, shared by the stream and line callbacks. */
struct client_watch {
    struct k8s_client *c;
    struct k8s_watch_lines lines;
    k8s_watch_fn fn;
    void *ctx;
    bool stopped; /* fn returned K8S_WATCH_STOP */
};

static int client_watch_line(void *arg, const char *line, size_t len)
{
    struct client_watch *w = arg;
    struct k8s_watch_event ev;
    struct k8s_status st;
    int rc = k8s_watch_event_parse(line, len, &ev, &st);

    if (rc) {
        snprintf(w->c->errmsg, sizeof(w->c->errmsg), "watch %s: %s", client_path(w->c), st.message);
        return rc;
    }
    if (ev.type == K8S_WATCH_ERROR) {
        w->c->status = st;
        rc = k8s_status_to_err(st.code, st.reason);
        if (rc == 0) rc = ERR_HTTP; /* an ERROR event with a 2xx code is still an error */
        snprintf(w->c->errmsg, sizeof(w->c->errmsg), "watch %s: ERROR event: %ld %s: %s",
                 client_path(w->c), st.code, st.reason[0] ? st.reason : "error", st.message);
    } else {
        rc = w->fn(w->ctx, &ev);
        if (rc == K8S_WATCH_STOP) {
            w->stopped = true;
            rc = HTTP_STREAM_STOP;
        } else if (rc > 0) {
            rc = ERR_INVAL; /* not a documented return value */
        }
    }
    json_decref(ev.object);
    return rc;
}

static int client_watch_chunk(void *arg, const char *data, size_t len)
{
    struct client_watch *w = arg;
    int rc = k8s_watch_lines_feed(&w->lines, data, len, client_watch_line, w);
    if (rc == ERR_TOO_BIG)
        snprintf(w->c->errmsg, sizeof(w->c->errmsg), "watch %s: event line longer than %zu bytes",
                 client_path(w->c), w->lines.max_line);
    return rc;
}

int k8s_client_watch(struct k8s_client *c, const struct k8s_ref *ref,
                     const struct k8s_watch_opts *opts, k8s_watch_fn fn, void *ctx)
{
    static const struct k8s_watch_opts none;
    struct client_watch w = {.c = c, .fn = fn, .ctx = ctx};
    struct http_response resp;
    char tmo[32];
    int rc = client_url(c, "watch", ref, false);
    if (rc) return rc;
    if (!opts) opts = &none;
    snprintf(tmo, sizeof(tmo), "%ld", opts->timeout_seconds);
    const char *rv =
        opts->resource_version && *opts->resource_version ? opts->resource_version : NULL;
    if ((rc = k8s_url_query(&c->url, "watch", "true")) ||
        (rc = k8s_url_query(&c->url, "labelSelector", opts->label_selector)) ||
        (rc = k8s_url_query(&c->url, "fieldSelector", opts->field_selector)) ||
        (rc = k8s_url_query(&c->url, "resourceVersion", rv)) ||
        (rc = k8s_url_query(&c->url, "allowWatchBookmarks",
                            opts->allow_bookmarks ? "true" : NULL)) ||
        (rc = k8s_url_query(&c->url, "timeoutSeconds", opts->timeout_seconds > 0 ? tmo : NULL)))
        return client_query_fail(c, "watch", rc);

    const char *headers[] = {"Accept: application/json", NULL};
    client_token_refresh(c);
    struct http_request req = {
        .url = buf_cstr(&c->url),
        .headers = headers,
        .bearer_token = c->cfg->token,
        .timeout_ms =
            opts->timeout_seconds > 0 ? (opts->timeout_seconds + K8S_WATCH_SLACK_S) * 1000L : -1,
    };
    k8s_watch_lines_init(&w.lines, opts->max_line);
    http_response_init(&resp);
    rc = http_client_stream(c->http, &req, client_watch_chunk, &w, &resp);
    if (rc) {
        if (!c->errmsg[0])
            snprintf(c->errmsg, sizeof(c->errmsg), "%s", http_client_errmsg(c->http));
    } else if (resp.status < 200 || resp.status >= 300) {
        rc = client_api_error(c, "watch", resp.status, &resp.body);
    } else if (!w.stopped && (rc = k8s_watch_lines_finish(&w.lines))) {
        snprintf(c->errmsg, sizeof(c->errmsg), "watch %s: stream ended in the middle of an event",
                 client_path(c));
    }
    http_response_fini(&resp);
    k8s_watch_lines_fini(&w.lines);
    return rc;
}

void k8s_client_ignore_shutdown(struct k8s_client *c, bool ignore)
{
    http_client_ignore_shutdown(c->http, ignore);
}
