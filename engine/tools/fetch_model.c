/* Resumable, verified model download (see fetch_model.h). */
#include "engine/tools/fetch_model.h"

#include "common/err.h"
#include "common/log.h"
#include "common/sha256.h"
#include "common/shutdown.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define URL_MAX  4096
#define REDACTED "REDACTED"

/* Appends s[0..n) to out (capacity cap, length *len), cutting what does not fit; keeps it
 * terminated. */
static void put(char *out, size_t cap, size_t *len, const char *s, size_t n)
{
    if (*len + 1 >= cap) return;
    if (n > cap - 1 - *len) n = cap - 1 - *len;
    memcpy(out + *len, s, n);
    *len += n;
    out[*len] = 0;
}

void fetch_model_redact_url(const char *url, char *out, size_t outlen)
{
    size_t len = 0;
    if (!outlen) return;
    out[0] = 0;
    if (!url) return;
    const char *p = url, *scheme = strstr(url, "://");
    if (scheme && !memchr(url, '/', (size_t)(scheme - url)) &&
        !memchr(url, '?', (size_t)(scheme - url))) {
        p = scheme + 3;
        put(out, outlen, &len, url, (size_t)(p - url));
        size_t auth = strcspn(p, "/?#");
        const char *at = NULL;
        for (const char *c = p; c < p + auth; c++)
            if (*c == '@') at = c; /* the last '@': a password may contain another */
        if (at) {
            put(out, outlen, &len, REDACTED, strlen(REDACTED));
            p = at;
        }
    }
    size_t path = strcspn(p, "?#");
    put(out, outlen, &len, p, path);
    p += path;
    if (*p == '?') {
        put(out, outlen, &len, "?", 1);
        p++;
        while (*p && *p != '#') {
            size_t n = strcspn(p, "&#");
            const char *eq = memchr(p, '=', n);
            if (eq) {
                put(out, outlen, &len, p, (size_t)(eq - p) + 1);
                put(out, outlen, &len, REDACTED, strlen(REDACTED));
            } else if (n) {
                put(out, outlen, &len, REDACTED, strlen(REDACTED));
            }
            p += n;
            if (*p == '&') put(out, outlen, &len, p++, 1);
        }
    }
    if (*p == '#') put(out, outlen, &len, "#" REDACTED, strlen(REDACTED) + 1);
}

int fetch_model_resolve(const char *uri, const char *hf_endpoint, char *out, size_t outlen,
                        char *err, size_t errlen)
{
    int n;
    if (!uri) uri = "";
    if (strncmp(uri, "https://", 8) == 0) {
        n = snprintf(out, outlen, "%s", uri);
    } else if (strncmp(uri, "hf://", 5) == 0) {
        /* hf://org/repo/path/in/repo -> <endpoint>/org/repo/resolve/main/path/in/repo */
        const char *org = uri + 5, *repo = strchr(org, '/');
        const char *file = repo ? strchr(repo + 1, '/') : NULL;
        if (!repo || repo == org || !file || file == repo + 1 || !file[1]) {
            char shown[URL_MAX];
            fetch_model_redact_url(uri, shown, sizeof(shown));
            snprintf(err, errlen, "hf:// URI must be hf://org/repo/file.gguf: %s", shown);
            return ERR_INVAL;
        }
        const char *ep = hf_endpoint ? hf_endpoint : getenv("HF_ENDPOINT");
        if (!ep || !*ep) ep = "https://huggingface.co";
        size_t eplen = strlen(ep);
        while (eplen > 0 && ep[eplen - 1] == '/') eplen--;
        n = snprintf(out, outlen, "%.*s/%.*s/resolve/main/%s", (int)eplen, ep, (int)(file - org),
                     org, file + 1);
    } else {
        char shown[URL_MAX];
        fetch_model_redact_url(uri, shown, sizeof(shown));
        snprintf(err, errlen, "unsupported model URI (fetch-model takes https:// or hf://): %s",
                 shown);
        return ERR_INVAL;
    }
    if (n < 0 || (size_t)n >= outlen) {
        snprintf(err, errlen, "model URI too long");
        return ERR_TOO_BIG;
    }
    return 0;
}

/* One transfer's state for the write and progress callbacks. */
struct transfer {
    FILE *out;
    long long start_offset; /* bytes already on disk when the transfer began */
    long long written;      /* bytes written by this transfer */
    long long total;        /* expected final size, or -1 */
    long long max_bytes;    /* largest accepted file, or 0 */
    time_t last_log;
    int progress_seconds;
    int write_errno; /* errno of the failed write or close, 0 = none: saved at once, since
                        libcurl's cleanup calls would overwrite errno before it is reported */
    bool too_big;    /* the file is larger than max_bytes */
    long status;     /* HTTP status of the final response, set by the header callback */
};

/* Bytes the finished file will hold once `extra` more body bytes are written: a 206 continues
 * what is on disk, a 200 is the whole file (what is on disk gets truncated). */
static long long file_bytes_after(const struct transfer *t, long long extra)
{
    return (t->status == 206 ? t->start_offset : 0) + extra;
}

static size_t on_write(char *data, size_t size, size_t nmemb, void *arg)
{
    struct transfer *t = arg;
    size_t n = size * nmemb;
    /* Only the final (post-redirect) answer's body reaches here, and only a 2xx/206 is kept. */
    if (t->status != 200 && t->status != 206) return n;
    if (t->max_bytes && file_bytes_after(t, t->written + (long long)n) > t->max_bytes) {
        t->too_big = true;
        return 0; /* aborts the transfer */
    }
    if (fwrite(data, 1, n, t->out) != n) {
        t->write_errno = errno ? errno : EIO;
        return 0;
    }
    t->written += (long long)n;
    return n;
}

static size_t on_header(char *line, size_t size, size_t nmemb, void *arg)
{
    struct transfer *t = arg;
    size_t n = size * nmemb;
    long status;
    /* A new status line starts each response of a redirect chain. */
    if (n > 5 && strncmp(line, "HTTP/", 5) == 0 && sscanf(line, "HTTP/%*s %ld", &status) == 1)
        t->status = status;
    return n;
}

static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    (void)ultotal;
    (void)ulnow;
    struct transfer *t = arg;
    if (shutdown_requested()) return 1;
    if (dltotal > 0 && (t->status == 200 || t->status == 206)) {
        t->total = file_bytes_after(t, (long long)dltotal);
        if (t->max_bytes && t->total > t->max_bytes) { /* refused by its Content-Length */
            t->too_big = true;
            return 1;
        }
    }
    time_t now = time(NULL);
    if (now - t->last_log >= t->progress_seconds) {
        t->last_log = now;
        long long have = t->start_offset + (long long)dlnow;
        log_info("downloading", LOG_I("bytes", have), LOG_I("total_bytes", t->total),
                 LOG_F("percent", t->total > 0 ? 100.0 * (double)have / (double)t->total : -1));
    }
    return 0;
}

enum attempt_result { ATTEMPT_DONE, ATTEMPT_RETRY, ATTEMPT_FATAL };

static long long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

/* What one download works on: the URL to fetch, the same URL redacted for messages, the partial
 * file. */
struct target {
    char url[URL_MAX];
    char shown[URL_MAX];
    char part[4200];
};

/* One HTTP attempt appending to `part`. Sets *rc and `err` for fatal outcomes. */
static enum attempt_result attempt(const struct fetch_model_opts *o, const struct target *tg,
                                   int *rc, char *err, size_t errlen)
{
    const char *url = tg->url, *part = tg->part;
    long long have = file_size(part);
    if (have < 0) have = 0;
    struct transfer t = {.start_offset = have,
                         .total = -1,
                         .max_bytes = (long long)o->max_bytes,
                         .last_log = time(NULL),
                         .progress_seconds = o->progress_seconds};
    t.out = fopen(part, "ab");
    if (!t.out) {
        snprintf(err, errlen, "cannot open %s: %s", part, strerror(errno));
        *rc = ERR_IO;
        return ATTEMPT_FATAL;
    }
    CURL *h = curl_easy_init();
    if (!h) {
        fclose(t.out);
        snprintf(err, errlen, "cannot start a transfer (libcurl)");
        *rc = ERR_NOMEM;
        return ATTEMPT_FATAL;
    }
    struct curl_slist *hdrs = NULL;
    char auth[8192], range[64], cerr[CURL_ERROR_SIZE] = "";
    if (o->token && *o->token) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", o->token);
        hdrs = curl_slist_append(hdrs, auth);
    }
    if (have > 0) {
        snprintf(range, sizeof(range), "%lld-", have);
        curl_easy_setopt(h, CURLOPT_RANGE, range);
    }
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(h, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "https");
    curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "https");
    curl_easy_setopt(h, CURLOPT_UNRESTRICTED_AUTH, 0L); /* no token to other hosts */
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &t);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, o->connect_timeout_s);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, o->stall_timeout_s);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "cinfer-engine fetch-model");
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    if (o->cacert) curl_easy_setopt(h, CURLOPT_CAINFO, o->cacert);

    CURLcode cc = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    errno = 0;
    if (fclose(t.out) != 0 && !t.write_errno) t.write_errno = errno ? errno : EIO;
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);

    enum attempt_result res = ATTEMPT_DONE;
    if (t.too_big) {
        snprintf(err, errlen,
                 "%s: the model is larger than the %llu-byte limit (--max-bytes; "
                 "spec.model.sizeBytes on an InferenceService)",
                 tg->shown, o->max_bytes);
        unlink(part); /* nothing of it can be used */
        *rc = ERR_TOO_BIG;
        return ATTEMPT_FATAL;
    }
    if (t.write_errno) {
        snprintf(err, errlen, "writing %s failed: %s", part, strerror(t.write_errno));
        *rc = ERR_IO;
        return ATTEMPT_FATAL;
    }
    if (cc == CURLE_ABORTED_BY_CALLBACK && shutdown_requested()) {
        snprintf(err, errlen, "cancelled by shutdown");
        *rc = ERR_CANCELLED;
        return ATTEMPT_FATAL;
    }
    if (cc == CURLE_PEER_FAILED_VERIFICATION || cc == CURLE_SSL_CACERT_BADFILE ||
        cc == CURLE_UNSUPPORTED_PROTOCOL) {
        snprintf(err, errlen, "%s: %s", tg->shown, cerr[0] ? cerr : curl_easy_strerror(cc));
        *rc = cc == CURLE_UNSUPPORTED_PROTOCOL ? ERR_INVAL : ERR_AUTH;
        return ATTEMPT_FATAL;
    }
    if (cc != CURLE_OK) {
        snprintf(err, errlen, "%s", cerr[0] ? cerr : curl_easy_strerror(cc));
        return ATTEMPT_RETRY; /* connection reset, timeout, stall: resume next time */
    }
    if (status == 200 && have > 0) {
        /* The server ignored the Range: what we appended restarted the file. Start over. */
        log_warn("server does not support resuming; restarting the download");
        truncate(part, 0);
        return ATTEMPT_RETRY;
    }
    if (status == 416 && have > 0) return ATTEMPT_DONE; /* nothing left to fetch: verify below */
    if (status == 200 || status == 206) return res;
    if (status == 408 || status == 429 || status >= 500) {
        snprintf(err, errlen, "%s: HTTP %ld", tg->shown, status);
        return ATTEMPT_RETRY;
    }
    snprintf(err, errlen, "%s: HTTP %ld%s", tg->shown, status,
             status == 401 || status == 403 ? " (check the token)"
             : status == 404                ? " (no such file)"
                                            : "");
    *rc = status == 401 || status == 403 ? ERR_AUTH : ERR_HTTP;
    return ATTEMPT_FATAL;
}

static bool valid_sha256(const char *s)
{
    if (!s || strlen(s) != 64) return false;
    for (; *s; s++)
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f'))) return false;
    return true;
}

int fetch_model(const struct fetch_model_opts *o, char *err, size_t errlen)
{
    char hex[SHA256_HEX_LEN];
    struct target *tg = calloc(1, sizeof(*tg));
    if (!tg) {
        snprintf(err, errlen, "out of memory");
        return ERR_NOMEM;
    }
    const char *part = tg->part;
    bool curl_up = false;
    int rc = fetch_model_resolve(o->uri, o->hf_endpoint, tg->url, sizeof(tg->url), err, errlen);
    if (rc) goto out;
    fetch_model_redact_url(tg->url, tg->shown, sizeof(tg->shown));
    rc = ERR_INVAL;
    if (o->sha256 && !valid_sha256(o->sha256)) {
        snprintf(err, errlen, "--sha256 must be 64 lowercase hex digits");
        goto out;
    }
    if (snprintf(tg->part, sizeof(tg->part), "%s.part", o->dest) >= (int)sizeof(tg->part)) {
        snprintf(err, errlen, "destination path too long");
        goto out;
    }
    rc = 0;
    /* Already there and verified: an init container restarting after success does nothing. */
    if (file_size(o->dest) >= 0 && o->sha256 && sha256_file_hex(o->dest, hex) == 0 &&
        strcmp(hex, o->sha256) == 0) {
        log_info("model already present and verified", LOG_S("dest", o->dest));
        goto out;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    curl_up = true;
    log_info("fetching model", LOG_S("url", tg->shown), LOG_S("dest", o->dest),
             LOG_I("resume_from", file_size(part) > 0 ? file_size(part) : 0),
             LOG_I("max_bytes", (long long)o->max_bytes));
    int backoff = 1;
    for (int i = 0;; i++) {
        rc = 0;
        enum attempt_result r = attempt(o, tg, &rc, err, errlen);
        if (r == ATTEMPT_DONE) break;
        if (r == ATTEMPT_FATAL) goto out;
        if (i >= o->retries) {
            rc = strstr(err, "HTTP") ? ERR_HTTP : ERR_IO;
            goto out;
        }
        log_warn("download attempt failed; retrying", LOG_S("error", err), LOG_I("attempt", i + 1),
                 LOG_I("delay_s", backoff), LOG_I("have_bytes", file_size(part)));
        if (shutdown_wait(backoff * 1000)) {
            snprintf(err, errlen, "cancelled by shutdown");
            rc = ERR_CANCELLED;
            goto out;
        }
        backoff = backoff * 2 > o->backoff_max_s ? o->backoff_max_s : backoff * 2;
    }
    /* A partial file left by an earlier run may already be past the limit (a 416 ends the loop). */
    if (o->max_bytes && file_size(part) > (long long)o->max_bytes) {
        snprintf(err, errlen, "%s: the model is larger than the %llu-byte limit (--max-bytes)",
                 tg->shown, o->max_bytes);
        unlink(part);
        rc = ERR_TOO_BIG;
        goto out;
    }
    if (o->sha256) {
        if (sha256_file_hex(part, hex) != 0) {
            rc = ERR_IO;
            snprintf(err, errlen, "cannot read %s to verify it: %s", part, strerror(errno));
            goto out;
        }
        if (strcmp(hex, o->sha256) != 0) {
            snprintf(err, errlen, "sha256 mismatch: expected %s, got %s", o->sha256, hex);
            unlink(part); /* a corrupt prefix must not be resumed */
            rc = ERR_BAD_STATE;
            goto out;
        }
    }
    if (rename(part, o->dest) != 0) {
        snprintf(err, errlen, "cannot rename %s to %s: %s", part, o->dest, strerror(errno));
        rc = ERR_IO;
        goto out;
    }
    log_info("model fetched", LOG_S("dest", o->dest), LOG_I("bytes", file_size(o->dest)),
             LOG_B("verified", o->sha256 != NULL));
out:
    if (curl_up) curl_global_cleanup();
    free(tg);
    return rc;
}

int fetch_model_verify(const char *path, const char *sha256, char *err, size_t errlen)
{
    char hex[SHA256_HEX_LEN];
    if (!valid_sha256(sha256)) {
        snprintf(err, errlen, "--sha256 must be 64 lowercase hex digits");
        return ERR_INVAL;
    }
    if (sha256_file_hex(path, hex) != 0) {
        snprintf(err, errlen, "cannot read %s to verify it: %s", path, strerror(errno));
        return ERR_IO;
    }
    if (strcmp(hex, sha256) != 0) {
        snprintf(err, errlen, "sha256 mismatch: %s: expected %s, got %s", path, sha256, hex);
        return ERR_BAD_STATE;
    }
    log_info("model verified", LOG_S("path", path), LOG_I("bytes", file_size(path)));
    return 0;
}
