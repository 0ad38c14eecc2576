/* Fuzz target for the HTTP/1.1 request parser (common/http_server_parse.h), without sockets: the
 * input is parsed as a request head; every span of a parsed head must lie inside it, the target is
 * decoded, and the head parsed from the input one byte longer at a time must never be complete
 * earlier than the whole parse says nor disagree with it. What follows the head is fed to the
 * chunked decoder both at once and in pieces (split where the first byte says), which must agree on
 * the result and the decoded bytes. Any disagreement or sanitizer report aborts. */
#include "common/buf.h"
#include "common/http_server_parse.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_HEAD 4096

static void check_span(struct http_span s, long n)
{
    if ((long)s.off + (long)s.len > n) abort();
}

/* Decodes in[0..n) as one call or as pieces of `step` bytes; returns the result code. */
static int decode(const char *in, size_t n, size_t step, struct buf *out, size_t *consumed)
{
    struct http_chunked d;
    memset(&d, 0, sizeof(d));
    struct http_parse_err err;
    size_t off = 0;
    int rc = 0;
    while (off < n) {
        size_t len = step && n - off > step ? step : n - off;
        size_t used = 0;
        rc = http_chunked_feed(&d, in + off, len, &used, out, &err);
        if (used > len) abort();
        off += used;
        if (rc != 0) break;
        if (used != len) abort(); /* 0 means everything was consumed */
    }
    if (rc < 0 && err.status != 400 && err.status != 413 && err.status != 500) abort();
    *consumed = off;
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 65536) return 0;
    size_t step = data[0];
    const char *in = (const char *)data + 1;
    size_t n = size - 1;
    struct http_head *h = malloc(sizeof(*h)), *h2 = malloc(sizeof(*h2));
    struct http_parse_err err;
    long hl = http_parse_head(in, n, MAX_HEAD, h, &err);
    if (hl < -1 || hl > (long)n) abort();
    if (hl < 0 && (err.status < 400 || err.status > 599 || !err.message)) abort();
    if (hl > 0) {
        check_span(h->method_tok, hl);
        check_span(h->target, hl);
        for (size_t i = 0; i < h->n_fields; i++) {
            check_span(h->fields[i].name, hl);
            check_span(h->fields[i].value, hl);
        }
        if (h->chunked && h->has_length) abort();
        char path[256];
        if (h->form != HTTP_TARGET_ASTERISK &&
            http_parse_path(in + h->target.off, h->target.len, h->form, path, sizeof(path), &err) ==
                0 &&
            strlen(path) >= sizeof(path))
            abort();
        char v[64];
        (void)http_head_field(h, in, "content-type", v, sizeof(v));
    }
    /* Incremental: every shorter prefix is incomplete (0), or refused as the whole input is. */
    size_t stop = hl > 0 ? (size_t)hl : n;
    for (size_t k = 0; k < stop && k < 600; k++) {
        long r = http_parse_head(in, k, MAX_HEAD, h2, &err);
        if (r > 0) abort();            /* complete before the whole parse found the end */
        if (r < 0 && hl >= 0) abort(); /* refused a prefix of a valid or incomplete head */
    }
    /* The chunked decoder, at once and in pieces. */
    const char *body = in + (hl > 0 ? hl : 0);
    size_t bn = n - (size_t)(hl > 0 ? hl : 0);
    struct buf a, b;
    buf_init(&a, 8192);
    buf_init(&b, 8192);
    size_t ua = 0, ub = 0;
    int ra = decode(body, bn, 0, &a, &ua);
    int rb = decode(body, bn, step ? step : 1, &b, &ub);
    if (ra != rb || ua != ub || a.len != b.len || (a.len && memcmp(a.data, b.data, a.len) != 0)) {
        fprintf(stderr, "fuzz_http_parse: chunked decoding depends on the split (%d/%d)\n", ra, rb);
        abort();
    }
    buf_fini(&a);
    buf_fini(&b);
    free(h);
    free(h2);
    return 0;
}
