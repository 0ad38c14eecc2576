/* Synchronous HTTP(S) client on a libcurl easy handle (see http_client.h). The handle is reset and
 * reconfigured for every request, which keeps libcurl's connection and TLS session caches (so
 * keep-alive works) while no option of one request leaks into the next. Not a general HTTP library:
 * no redirects, no cookies, no proxies beyond what the environment tells libcurl. */
#include "common/http_client.h"

#include "common/assert.h"
#include "common/err.h"
#include "common/shutdown.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HTTP_DEFAULT_CONNECT_TIMEOUT_MS 10000L
#define HTTP_DEFAULT_TIMEOUT_MS         30000L
#define HTTP_DEFAULT_MAX_RESPONSE       ((size_t)16 << 20)
#define HTTP_STREAM_ERROR_BODY_MAX      ((size_t)64 << 10)

#ifndef CURL_WRITEFUNC_ERROR /* libcurl < 7.87: any count other than the one given aborts */
#define CURL_WRITEFUNC_ERROR 0
#endif

struct http_client {
    CURL *curl;
    char *ca_file, *cert_file, *key_file; /* owned copies or NULL */
    struct buf ca_pem, cert_pem, key_pem; /* owned copies; len 0 = not set */
    bool insecure;
    bool ignore_shutdown; /* requests run to completion (or timeout) even during shutdown */
    long connect_timeout_ms, timeout_ms;
    size_t max_response;
    char *user_agent;
    char curl_err[CURL_ERROR_SIZE];
    char errmsg[HTTP_CLIENT_ERRMSG_MAX];
};

/* State of one transfer, shared by the write and progress callbacks. */
struct http_xfer {
    struct http_client *c;
    struct http_response *resp;
    size_t max; /* limit for resp->body */
    http_stream_fn fn;
    void *fn_ctx;
    int status_known; /* stream mode: 0 until the first write, then 1 = 2xx, -1 = not 2xx */
    int rc;           /* error set by a callback that aborted the transfer */
    bool stopped;     /* fn asked to stop: not an error */
};

static pthread_once_t http_global_once = PTHREAD_ONCE_INIT;
static CURLcode http_global_rc = CURLE_FAILED_INIT;

static void http_global_init(void)
{
    http_global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static int http_dup(const char *s, char **out)
{
    *out = NULL;
    if (!s) return 0;
    *out = strdup(s);
    return *out ? 0 : ERR_NOMEM;
}

static int http_dup_pem(const char *pem, size_t len, struct buf *out)
{
    buf_init(out, 0);
    if (!pem) return 0;
    return buf_append(out, pem, len ? len : strlen(pem));
}

int http_client_new(const struct http_client_opts *opts, struct http_client **out, char *errmsg)
{
    static const struct http_client_opts defaults;
    struct http_client *c = NULL;
    int rc = ERR_INVAL;
    const char *why = "";

    if (!opts) opts = &defaults;
    const struct http_tls *t = &opts->tls;
    if ((t->ca_file && t->ca_pem) || (t->cert_file && t->cert_pem) || (t->key_file && t->key_pem)) {
        why = "give either a file or an in-memory PEM for the CA, certificate and key, not both";
        goto out;
    }
    if (!(t->cert_file || t->cert_pem) != !(t->key_file || t->key_pem)) {
        why = "a client certificate needs its key and a key needs its certificate";
        goto out;
    }
    pthread_once(&http_global_once, http_global_init);
    rc = ERR_INTERNAL;
    if (http_global_rc != CURLE_OK) {
        why = "curl_global_init failed";
        goto out;
    }
    rc = ERR_NOMEM;
    why = "out of memory";
    c = calloc(1, sizeof(*c));
    if (!c) goto out;
    buf_init(&c->ca_pem, 0);
    buf_init(&c->cert_pem, 0);
    buf_init(&c->key_pem, 0);
    if (http_dup(t->ca_file, &c->ca_file) || http_dup(t->cert_file, &c->cert_file) ||
        http_dup(t->key_file, &c->key_file) ||
        http_dup(opts->user_agent ? opts->user_agent : "cinfer", &c->user_agent) ||
        http_dup_pem(t->ca_pem, t->ca_pem_len, &c->ca_pem) ||
        http_dup_pem(t->cert_pem, t->cert_pem_len, &c->cert_pem) ||
        http_dup_pem(t->key_pem, t->key_pem_len, &c->key_pem))
        goto out;
    c->insecure = t->insecure_skip_verify;
    c->connect_timeout_ms =
        opts->connect_timeout_ms > 0 ? opts->connect_timeout_ms : HTTP_DEFAULT_CONNECT_TIMEOUT_MS;
    c->timeout_ms = opts->timeout_ms > 0 ? opts->timeout_ms : HTTP_DEFAULT_TIMEOUT_MS;
    c->max_response = opts->max_response ? opts->max_response : HTTP_DEFAULT_MAX_RESPONSE;
    c->curl = curl_easy_init();
    if (!c->curl) {
        rc = ERR_INTERNAL;
        why = "curl_easy_init failed";
        goto out;
    }
    *out = c;
    c = NULL;
    rc = 0;
    why = "";
out:
    if (errmsg) snprintf(errmsg, HTTP_CLIENT_ERRMSG_MAX, "%s", why);
    http_client_free(c);
    return rc;
}

void http_client_free(struct http_client *c)
{
    if (!c) return;
    if (c->curl) curl_easy_cleanup(c->curl);
    free(c->ca_file);
    free(c->cert_file);
    free(c->key_file);
    free(c->user_agent);
    buf_fini(&c->ca_pem);
    buf_fini(&c->cert_pem);
    /* The key is a secret: do not leave it in freed heap memory. */
    if (c->key_pem.data) memset(c->key_pem.data, 0, c->key_pem.cap);
    buf_fini(&c->key_pem);
    free(c);
}

void http_response_init(struct http_response *r)
{
    r->status = 0;
    buf_init(&r->body, 0);
}

void http_response_fini(struct http_response *r)
{
    if (!r) return;
    buf_fini(&r->body);
    r->status = 0;
}

const char *http_client_errmsg(const struct http_client *c)
{
    return c->errmsg;
}

static size_t http_on_write(char *data, size_t size, size_t nmemb, void *arg)
{
    struct http_xfer *x = arg;
    size_t len = size * nmemb;

    if (x->fn && x->status_known == 0) {
        long status = 0;
        curl_easy_getinfo(x->c->curl, CURLINFO_RESPONSE_CODE, &status);
        x->status_known = status >= 200 && status < 300 ? 1 : -1;
    }
    if (x->fn && x->status_known > 0) {
        int r = x->fn(x->fn_ctx, data, len);
        if (r == 0) return len;
        if (r == HTTP_STREAM_STOP)
            x->stopped = true;
        else
            x->rc = r < 0 ? r : ERR_INVAL;
        return CURL_WRITEFUNC_ERROR;
    }
    if (x->resp->body.len + len > x->max || buf_append(&x->resp->body, data, len) != 0) {
        x->rc = ERR_TOO_BIG;
        return CURL_WRITEFUNC_ERROR;
    }
    return len;
}

/* Called by libcurl at least once a second: lets a process shutdown abort a long request. */
static int http_on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                            curl_off_t ulnow)
{
    struct http_xfer *x = arg;
    if (!shutdown_requested() || x->c->ignore_shutdown) return 0;
    x->rc = ERR_CANCELLED;
    return 1;
}

static bool http_has_crlf(const char *s)
{
    return strpbrk(s, "\r\n") != NULL;
}

/* Builds the header list: caller's headers, the bearer token, and "Expect:" (no 100-continue
 * round trip for large bodies). */
static int http_headers_build(const struct http_request *req, struct curl_slist **out)
{
    struct curl_slist *list = NULL, *n;
    struct buf auth;
    int rc = ERR_INVAL;

    buf_init(&auth, 0);
    for (const char *const *h = req->headers; h && *h; h++) {
        if (http_has_crlf(*h)) goto out;
        if (!(n = curl_slist_append(list, *h))) goto nomem;
        list = n;
    }
    if (req->bearer_token) {
        if (http_has_crlf(req->bearer_token)) goto out;
        if (buf_printf(&auth, "Authorization: Bearer %s", req->bearer_token)) goto nomem;
        if (!(n = curl_slist_append(list, buf_cstr(&auth)))) goto nomem;
        list = n;
    }
    if (!(n = curl_slist_append(list, "Expect:"))) goto nomem;
    list = n;
    *out = list;
    list = NULL;
    rc = 0;
    goto out;
nomem:
    rc = ERR_NOMEM;
out:
    if (auth.data) memset(auth.data, 0, auth.cap);
    buf_fini(&auth);
    curl_slist_free_all(list);
    return rc;
}

static CURLcode http_set_blob(CURL *curl, CURLoption opt, const struct buf *b)
{
    struct curl_blob blob = {.data = b->data, .len = b->len, .flags = CURL_BLOB_COPY};
    return curl_easy_setopt(curl, opt, &blob);
}

static CURLcode http_setup_tls(struct http_client *c)
{
    CURL *h = c->curl;
    CURLcode e = CURLE_OK;

    if (c->insecure) {
        e = curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
        if (!e) e = curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    /* A configured CA replaces the system store entirely, so only that CA is trusted. */
    if (!e && (c->ca_file || c->ca_pem.len)) e = curl_easy_setopt(h, CURLOPT_CAPATH, NULL);
    if (!e && c->ca_file) e = curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
    if (!e && c->ca_pem.len) e = http_set_blob(h, CURLOPT_CAINFO_BLOB, &c->ca_pem);
    if (!e && c->cert_file) e = curl_easy_setopt(h, CURLOPT_SSLCERT, c->cert_file);
    if (!e && c->cert_pem.len) e = http_set_blob(h, CURLOPT_SSLCERT_BLOB, &c->cert_pem);
    if (!e && (c->cert_file || c->cert_pem.len))
        e = curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
    if (!e && c->key_file) e = curl_easy_setopt(h, CURLOPT_SSLKEY, c->key_file);
    if (!e && c->key_pem.len) e = http_set_blob(h, CURLOPT_SSLKEY_BLOB, &c->key_pem);
    if (!e && (c->key_file || c->key_pem.len)) e = curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
    return e;
}

static CURLcode http_setup_method(CURL *h, const struct http_request *req)
{
    const char *m = req->method ? req->method : "GET";
    CURLcode e = CURLE_OK;

    if (strcmp(m, "GET") == 0 && !req->body) return curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    if (strcmp(m, "HEAD") == 0) return curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    if (req->body || strcmp(m, "POST") == 0) {
        e = curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
        if (!e) e = curl_easy_setopt(h, CURLOPT_POSTFIELDS, req->body ? req->body : "");
    }
    if (!e && strcmp(m, "POST") != 0) e = curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, m);
    return e;
}

static CURLcode http_setup(struct http_client *c, const struct http_request *req,
                           struct curl_slist *headers, struct http_xfer *x)
{
    CURL *h = c->curl;
    long timeout = req->timeout_ms == 0 ? c->timeout_ms : req->timeout_ms < 0 ? 0 : req->timeout_ms;

    curl_easy_reset(h);
    CURLcode e = curl_easy_setopt(h, CURLOPT_URL, req->url);
    if (!e) e = curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    if (!e) e = curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    if (!e) e = curl_easy_setopt(h, CURLOPT_ERRORBUFFER, c->curl_err);
    if (!e) e = curl_easy_setopt(h, CURLOPT_USERAGENT, c->user_agent);
    if (!e) e = curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    if (!e) e = curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, c->connect_timeout_ms);
    if (!e) e = curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout);
    /* Long watches may be idle for minutes: keepalive notices a dead peer without a timeout. */
    if (!e) e = curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    if (!e) e = curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, http_on_write);
    if (!e) e = curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    if (!e) e = curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, http_on_progress);
    if (!e) e = curl_easy_setopt(h, CURLOPT_XFERINFODATA, x);
    if (!e) e = curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    if (!e) e = http_setup_method(h, req);
    if (!e) e = http_setup_tls(c);
    return e;
}

static int http_curl_err(CURLcode e)
{
    switch (e) {
    case CURLE_OPERATION_TIMEDOUT: return ERR_TIMEOUT;
    case CURLE_OUT_OF_MEMORY: return ERR_NOMEM;
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_BAD_FUNCTION_ARGUMENT:
    case CURLE_UNKNOWN_OPTION: return ERR_INVAL;
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_CRL_BADFILE: return ERR_AUTH;
    default: return ERR_IO;
    }
}

static int http_perform(struct http_client *c, const struct http_request *req,
                        struct http_response *resp, http_stream_fn fn, void *ctx)
{
    struct curl_slist *headers = NULL;
    struct http_xfer x = {.c = c, .resp = resp, .fn = fn, .fn_ctx = ctx};
    const char *method = req->method ? req->method : "GET";
    int rc;

    ASSERT(req->url);
    c->errmsg[0] = 0;
    c->curl_err[0] = 0;
    resp->status = 0;
    buf_reset(&resp->body);
    x.max = fn                  ? HTTP_STREAM_ERROR_BODY_MAX
            : req->max_response ? req->max_response
                                : c->max_response;

    rc = http_headers_build(req, &headers);
    if (rc) {
        snprintf(c->errmsg, sizeof(c->errmsg), "%s %s: %s", method, req->url,
                 rc == ERR_INVAL ? "header or token contains a line break" : err_str(rc));
        goto out;
    }
    CURLcode e = http_setup(c, req, headers, &x);
    if (!e) e = curl_easy_perform(c->curl);
    curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &resp->status);
    if (e == CURLE_OK || (x.stopped && e == CURLE_WRITE_ERROR)) {
        rc = 0;
        goto out;
    }
    rc = x.rc ? x.rc : http_curl_err(e);
    if (rc == ERR_TOO_BIG)
        snprintf(c->errmsg, sizeof(c->errmsg), "%s %s: response body larger than %zu bytes", method,
                 req->url, x.max);
    else if (rc == ERR_CANCELLED && !fn)
        snprintf(c->errmsg, sizeof(c->errmsg), "%s %s: cancelled by shutdown", method, req->url);
    else if (x.rc)
        snprintf(c->errmsg, sizeof(c->errmsg), "%s %s: stream stopped: %s", method, req->url,
                 err_str(rc));
    else
        snprintf(c->errmsg, sizeof(c->errmsg), "%s %s: %s", method, req->url,
                 c->curl_err[0] ? c->curl_err : curl_easy_strerror(e));
out:
    /* The handle keeps pointers to these options until the next reset: drop them now. */
    curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(c->curl, CURLOPT_ERRORBUFFER, NULL);
    curl_slist_free_all(headers);
    return rc;
}

int http_client_do(struct http_client *c, const struct http_request *req,
                   struct http_response *resp)
{
    return http_perform(c, req, resp, NULL, NULL);
}

int http_client_stream(struct http_client *c, const struct http_request *req, http_stream_fn fn,
                       void *ctx, struct http_response *resp)
{
    ASSERT(fn);
    return http_perform(c, req, resp, fn, ctx);
}

void http_client_ignore_shutdown(struct http_client *c, bool ignore)
{
    c->ignore_shutdown = ignore;
}
