/* Downloads a model file for the fetch-model init container: https:// URLs and hf://org/repo/file
 * (Hugging Face, resolved against $HF_ENDPOINT or https://huggingface.co), following redirects
 * (https only; the bearer token is never sent to another host), resuming an interrupted download
 * from DEST.part with a Range request, retrying transient failures with exponential backoff,
 * logging progress every few seconds, verifying an expected SHA-256, and renaming into place only
 * when the file is complete and verified. Runs on the calling thread; libcurl directly (a file
 * download with resume is a different job from common/http_client's bounded in-memory bodies). */
#ifndef CINFER_ENGINE_TOOLS_FETCH_MODEL_H
#define CINFER_ENGINE_TOOLS_FETCH_MODEL_H

#include <stddef.h>

struct fetch_model_opts {
    const char *uri;         /* https://... or hf://org/repo/path (borrowed) */
    const char *dest;        /* final path; DEST.part holds a partial download */
    const char *sha256;      /* expected lowercase hex digest, or NULL */
    const char *cacert;      /* CA bundle instead of the system store, or NULL */
    const char *token;       /* bearer token (e.g. HF_TOKEN), or NULL; never logged */
    const char *hf_endpoint; /* NULL = $HF_ENDPOINT or https://huggingface.co */
    int retries;             /* attempts after the first for transient failures */
    int progress_seconds;    /* progress log period */
    long connect_timeout_s;
    long stall_timeout_s; /* abort (and retry) when no byte arrived for this long */
    int backoff_max_s;    /* cap of the exponential retry delay (1, 2, 4, ... seconds) */
};

/* Resolves `uri` to the URL to download into `out`. Returns 0, ERR_INVAL or ERR_TOO_BIG. */
int fetch_model_resolve(const char *uri, const char *hf_endpoint, char *out, size_t outlen,
                        char *err, size_t errlen);

/* Downloads as described above. Returns 0; ERR_INVAL (bad URI or options); ERR_HTTP (a 4xx/5xx
 * answer that retries did not fix; `err` has the status); ERR_IO (network or file error after all
 * retries); ERR_AUTH (TLS verification or 401/403); ERR_BAD_STATE (SHA-256 mismatch: the partial file
 * is deleted so the next attempt starts clean). `err` says what happened in one line. */
int fetch_model(const struct fetch_model_opts *opts, char *err, size_t errlen);

#endif
