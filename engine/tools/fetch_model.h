/* Downloads a model file for the fetch-model init container: https:// URLs and hf://org/repo/file
 * (Hugging Face, resolved against $HF_ENDPOINT or https://huggingface.co), following redirects
 * (https only; the bearer token is never sent to another host), resuming an interrupted download
 * from DEST.part with a Range request, retrying transient failures with exponential backoff,
 * logging progress every few seconds, verifying an expected SHA-256, refusing a file larger than a
 * byte limit, and renaming into place only when the file is complete and verified. URLs are logged
 * and put in error messages only through fetch_model_redact_url (no userinfo, no query values).
 * Runs on the calling thread; libcurl directly (a file download with resume is a different job from
 * common/http_client's bounded in-memory bodies). */
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
    long stall_timeout_s;         /* abort (and retry) when no byte arrived for this long */
    int backoff_max_s;            /* cap of the exponential retry delay (1, 2, 4, ... seconds) */
    unsigned long long max_bytes; /* refuse a file larger than this (0 = no limit) */
};

/* Resolves `uri` to the URL to download into `out`. Returns 0, ERR_INVAL or ERR_TOO_BIG. */
int fetch_model_resolve(const char *uri, const char *hf_endpoint, char *out, size_t outlen,
                        char *err, size_t errlen);

/* Writes `url` (borrowed) into `out` with what may be a credential replaced by REDACTED: the
 * userinfo (https://REDACTED@host/...), the value of every query parameter (?token=REDACTED&a=REDACTED:
 * presigned S3, GCS and Azure SAS URLs carry signatures and key ids under many names, so no list of
 * names would be complete; a parameter without '=' is replaced whole) and the fragment. Scheme, host,
 * port, path and parameter names stay, so the line still says which file it was. A result longer
 * than `outlen` is cut (always terminated). Any thread. */
void fetch_model_redact_url(const char *url, char *out, size_t outlen);

/* Downloads as described above. Returns 0; ERR_INVAL (bad URI or options); ERR_HTTP (a 4xx/5xx
 * answer that retries did not fix; `err` has the status); ERR_IO (network or file error after all
 * retries; a write error names its errno, e.g. "No space left on device"); ERR_AUTH (TLS
 * verification or 401/403); ERR_BAD_STATE (SHA-256 mismatch: the partial file is deleted so the next
 * attempt starts clean); ERR_TOO_BIG (the file is larger than max_bytes, by its Content-Length or
 * by what arrived; the partial file is deleted). `err` says what happened in one line, with the URL
 * redacted. */
int fetch_model(const struct fetch_model_opts *opts, char *err, size_t errlen);

/* Checks that the file at `path` (borrowed) has SHA-256 `sha256` (64 lowercase hex digits): the
 * check of a model that is not downloaded (file://, pvc://) before the engine loads it. Returns 0;
 * ERR_INVAL (malformed digest); ERR_IO (cannot read the file; `err` names errno); ERR_BAD_STATE
 * (mismatch; `err` has both digests). */
int fetch_model_verify(const char *path, const char *sha256, char *err, size_t errlen);

#endif
