/* Small synchronous HTTP(S) client on one libcurl easy handle: one request at a time, TLS with a CA
 * file or in-memory CA PEM, optional client certificate, bearer token, per-request timeouts, bounded
 * response bodies, and a streaming mode that hands the body to a callback as it arrives (watches).
 * It knows nothing about JSON or Kubernetes; common/k8s builds on it.
 *
 * Threads: an http_client is not thread-safe; use one per thread. http_client_new() performs
 * curl_global_init() exactly once per process (pthread_once), so no caller needs to. */
#ifndef CINFER_COMMON_HTTP_CLIENT_H
#define CINFER_COMMON_HTTP_CLIENT_H

#include "common/buf.h"

#include <stdbool.h>
#include <stddef.h>

#define HTTP_CLIENT_ERRMSG_MAX 512

/* TLS settings; all strings borrowed for the duration of http_client_new (the client copies them).
 * For each of CA, certificate and key, give either a file or an in-memory PEM, not both. */
struct http_tls {
    const char *ca_file;       /* PEM bundle used instead of the system store, or NULL */
    const char *ca_pem;        /* in-memory PEM bundle, or NULL */
    size_t ca_pem_len;         /* 0 = strlen(ca_pem) */
    const char *cert_file;     /* client certificate (PEM) */
    const char *cert_pem;      /* in-memory client certificate (PEM) */
    size_t cert_pem_len;       /* 0 = strlen(cert_pem) */
    const char *key_file;      /* client private key (PEM) */
    const char *key_pem;       /* in-memory client private key (PEM) */
    size_t key_pem_len;        /* 0 = strlen(key_pem) */
    bool insecure_skip_verify; /* do not verify the server certificate or host name (tests only) */
};

struct http_client_opts {
    struct http_tls tls;
    long connect_timeout_ms; /* 0 = 10 s */
    long timeout_ms;         /* whole-request default; 0 = 30 s */
    size_t max_response;     /* default body limit in bytes; 0 = 16 MiB */
    const char *user_agent;  /* borrowed during http_client_new; NULL = "cinfer" */
};

struct http_request {
    const char *method;         /* "GET", "POST", "PUT", "PATCH", "DELETE", ...; NULL = GET */
    const char *url;            /* absolute URL, already escaped */
    const char *const *headers; /* "Name: value" lines, NULL-terminated array, or NULL */
    const char *body;           /* request body or NULL */
    size_t body_len;            /* bytes of body */
    const char *bearer_token;   /* adds "Authorization: Bearer <token>" when non-NULL */
    long timeout_ms;            /* 0 = client default; < 0 = no overall limit (streams) */
    size_t max_response;        /* 0 = client default */
};

struct http_response {
    long status;     /* HTTP status code; 0 if no response arrived */
    struct buf body; /* response body (bounded); in stream mode only filled for non-2xx answers */
};

/* Streaming callback: receives each piece of the body of a 2xx answer in order (`data` borrowed for
 * the call). Return 0 to continue, HTTP_STREAM_STOP to end the transfer successfully, or a negative
 * err.h code to abort the transfer with that code. */
#define HTTP_STREAM_STOP 1
typedef int (*http_stream_fn)(void *ctx, const char *data, size_t len);

struct http_client;

/* Creates a client with `opts` (borrowed; NULL = defaults). Returns 0, ERR_NOMEM, ERR_INVAL (a file
 * and a PEM given for the same item), or ERR_INTERNAL (libcurl could not initialise); `errmsg` (may
 * be NULL, HTTP_CLIENT_ERRMSG_MAX bytes) says why. *out is new; free with http_client_free. */
int http_client_new(const struct http_client_opts *opts, struct http_client **out, char *errmsg);
/* Frees the client and its connection cache. NULL-safe. */
void http_client_free(struct http_client *c);

/* By default a process shutdown (common/shutdown.h) aborts a client's requests within a second, so
 * nothing blocks a SIGTERM. `ignore` lets them run to completion or their timeout instead: for the
 * few requests made on the way out (releasing a leader lease). Not thread-safe with requests. */
void http_client_ignore_shutdown(struct http_client *c, bool ignore);

/* Initialises / releases a response. http_response_init sets an empty body with no limit (the
 * request's limit is applied when it runs). */
void http_response_init(struct http_response *r);
void http_response_fini(struct http_response *r);

/* Performs `req` (borrowed) and stores the status and body in `resp` (initialised by the caller;
 * its previous contents are replaced). Any HTTP status counts as success here: the caller decides
 * what a 404 means. Returns 0, ERR_TOO_BIG (body over the limit), ERR_TIMEOUT, ERR_IO (connection
 * failed, refused, reset), ERR_AUTH (TLS verification or client certificate failure), ERR_INVAL
 * (bad URL or request), ERR_NOMEM. On failure http_client_errmsg() has curl's message. */
int http_client_do(struct http_client *c, const struct http_request *req,
                   struct http_response *resp);

/* Like http_client_do, but the body of a 2xx answer goes to `fn` as it arrives instead of into
 * resp->body; a non-2xx body is collected into resp->body (bounded) so the caller can read the
 * error. Returns 0 when the stream ended (server closed it or `fn` returned HTTP_STREAM_STOP), the
 * negative code `fn` returned, or the codes of http_client_do. */
int http_client_stream(struct http_client *c, const struct http_request *req, http_stream_fn fn,
                       void *ctx, struct http_response *resp);

/* The message for the last failed request ("" after a success); borrowed, valid until the next
 * request on `c`. Never contains the bearer token. */
const char *http_client_errmsg(const struct http_client *c);

#endif
