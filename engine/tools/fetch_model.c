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

#define URL_MAX 4096

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
            snprintf(err, errlen, "hf:// URI must be hf://org/repo/file.gguf: %s", uri);
            return ERR_INVAL;
        }
        const char *ep = hf_endpoint ? hf_endpoint : getenv("HF_ENDPOINT");
        if (!ep || !*ep) ep = "https://huggingface.co";
        size_t eplen = strlen(ep);
        while (eplen > 0 && ep[eplen - 1] == '/') eplen--;
        n = snprintf(out, outlen, "%.*s/%.*s/resolve/main/%s", (int)eplen, ep, (int)(file - org),
                     org, file + 1);
    } else {
        snprintf(err, errlen, "unsupported model URI (fetch-model takes https:// or hf://): %s",
                 uri);
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
    time_t last_log;
    int progress_seconds;
    bool write_failed;
    long status; /* HTTP status of the final response, set by the header callback */
};

static size_t on_write(char *data, size_t size, size_t nmemb, void *arg)
{
    struct transfer *t = arg;
    size_t n = size * nmemb;
    /* Only the final (post-redirect) answer's body reaches here, and only a 2xx/206 is kept. */
    if (t->status != 200 && t->status != 206) return n;
    if (fwrite(data, 1, n, t->out) != n) {
        t->write_failed = true;
        return 0; /* aborts the transfer */
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
    if (dltotal > 0) t->total = t->start_offset + (long long)dltotal;
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

/* One HTTP attempt appending to `part`. Sets *rc and `err` for fatal outcomes. */
static enum attempt_result attempt(const struct fetch_model_opts *o, const char *url,
                                   const char *part, int *rc, char *err, size_t errlen)
{
    long long have = file_size(part);
    if (have < 0) have = 0;
    struct transfer t = {.start_offset = have,
                         .total = -1,
                         .last_log = time(NULL),
                         .progress_seconds = o->progress_seconds};
    t.out = fopen(part, "ab");
    if (!t.out) {
        snprintf(err, errlen, "cannot open %s: %s", part, strerror(errno));
        *rc = ERR_IO;
        return ATTEMPT_FATAL;
    }
    CURL *h = curl_easy_init();
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
    if (fclose(t.out) != 0) t.write_failed = true;
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);

    enum attempt_result res = ATTEMPT_DONE;
    if (t.write_failed) {
        snprintf(err, errlen, "writing %s failed: %s", part, strerror(errno));
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
        snprintf(err, errlen, "%s: %s", url, cerr[0] ? cerr : curl_easy_strerror(cc));
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
        snprintf(err, errlen, "%s: HTTP %ld", url, status);
        return ATTEMPT_RETRY;
    }
    snprintf(err, errlen, "%s: HTTP %ld%s", url, status,
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
    char url[URL_MAX], part[4200], hex[SHA256_HEX_LEN];
    int rc = fetch_model_resolve(o->uri, o->hf_endpoint, url, sizeof(url), err, errlen);
    if (rc) return rc;
    if (o->sha256 && !valid_sha256(o->sha256)) {
        snprintf(err, errlen, "--sha256 must be 64 lowercase hex digits");
        return ERR_INVAL;
    }
    if (snprintf(part, sizeof(part), "%s.part", o->dest) >= (int)sizeof(part)) {
        snprintf(err, errlen, "destination path too long");
        return ERR_INVAL;
    }
    /* Already there and verified: an init container restarting after success does nothing. */
    if (file_size(o->dest) >= 0 && o->sha256 && sha256_file_hex(o->dest, hex) == 0 &&
        strcmp(hex, o->sha256) == 0) {
        log_info("model already present and verified", LOG_S("dest", o->dest));
        return 0;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    log_info("fetching model", LOG_S("uri", o->uri), LOG_S("dest", o->dest),
             LOG_I("resume_from", file_size(part) > 0 ? file_size(part) : 0));
    int backoff = 1;
    for (int i = 0;; i++) {
        rc = 0;
        enum attempt_result r = attempt(o, url, part, &rc, err, errlen);
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
    if (o->sha256) {
        if (sha256_file_hex(part, hex) != 0) {
            rc = ERR_IO;
            snprintf(err, errlen, "cannot read %s to verify it", part);
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
    curl_global_cleanup();
    return rc;
}
