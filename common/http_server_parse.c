/* Strict HTTP/1.1 request parsing (see http_server_parse.h): request line, header fields and their
 * framing rules (RFC 9112 sections 2-7), targets and chunked bodies. No I/O, no allocation. */
#include "common/http_server_parse.h"

#include "common/err.h"

#include <string.h>
#include <strings.h>

/* tchar (RFC 9110 section 5.6.2): the characters of a token. */
static bool http_tchar(unsigned char c)
{
    if (c >= '0' && c <= '9') return true;
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return true;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* field-vchar, SP, HTAB or obs-text: what a field value may hold (RFC 9110 section 5.5). */
static bool http_value_char(unsigned char c)
{
    return c == '\t' || (c >= 0x20 && c != 0x7f);
}

static long http_fail(struct http_parse_err *err, int status, const char *message)
{
    err->status = status;
    err->message = message;
    return -1;
}

static bool http_span_is(const char *buf, struct http_span s, const char *lit)
{
    size_t n = strlen(lit);
    return s.len == n && strncasecmp(buf + s.off, lit, n) == 0;
}

static enum http_method http_method_of(const char *p, size_t n)
{
    static const struct {
        const char *tok;
        enum http_method m;
    } methods[] = {{"GET", HTTP_GET},       {"POST", HTTP_POST},   {"PUT", HTTP_PUT},
                   {"DELETE", HTTP_DELETE}, {"PATCH", HTTP_PATCH}, {"OPTIONS", HTTP_OPTIONS},
                   {"HEAD", HTTP_HEAD}};
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
        if (strlen(methods[i].tok) == n && memcmp(methods[i].tok, p, n) == 0) return methods[i].m;
    return 0; /* methods are case-sensitive (RFC 9110 section 9.1) */
}

/* Whether p[0..n) is one of the methods above (complete) or the start of one (!complete). */
static bool http_method_prefix(const char *p, size_t n, bool complete)
{
    static const char *const toks[] = {"GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"};
    for (size_t i = 0; i < sizeof(toks) / sizeof(toks[0]); i++) {
        size_t tn = strlen(toks[i]);
        if (complete ? tn == n && memcmp(toks[i], p, n) == 0
                     : n <= tn && memcmp(toks[i], p, n) == 0)
            return true;
    }
    return false;
}

/* Parses the request line starting at buf[off]. Returns the offset after its CRLF, 0 when the line
 * is incomplete but valid so far, or -1 (err set). */
static long http_request_line(const char *buf, size_t len, size_t off, size_t max_head,
                              struct http_head *h, struct http_parse_err *err)
{
    size_t i = off;
    while (i < len && http_tchar((unsigned char)buf[i])) i++;
    if (i == off) return http_fail(err, 400, "malformed HTTP request: bad request line");
    /* A method we do not serve is refused as soon as its token says so (RFC 9110 section 9.1):
     * 501 for a well-formed token, 400 for one that cannot become a request line. */
    if (!http_method_prefix(buf + off, i - off, i < len)) {
        if (i < len && buf[i] == ' ') return http_fail(err, 501, "method not implemented");
        return http_fail(err, 400, "malformed HTTP request: bad request line");
    }
    if (i == len) return 0;
    if (buf[i] != ' ') return http_fail(err, 400, "malformed HTTP request: bad request line");
    h->method_tok = (struct http_span){(uint32_t)off, (uint32_t)(i - off)};
    size_t t = ++i;
    while (i < len && (unsigned char)buf[i] > 0x20 && (unsigned char)buf[i] < 0x7f) i++;
    if (i - t > max_head) return http_fail(err, 414, "request target too long");
    if (i == len) return 0;
    if (buf[i] != ' ' || i == t)
        return http_fail(err, 400, "malformed HTTP request: bad request target");
    h->target = (struct http_span){(uint32_t)t, (uint32_t)(i - t)};
    i++;
    static const char ver[] = "HTTP/1.1\r\n";
    for (size_t k = 0; k < sizeof(ver) - 1; k++, i++) {
        if (i == len) return 0;
        char c = buf[i];
        bool ok = k == 5 ? (c >= '0' && c <= '9') : k == 7 ? (c >= '0' && c <= '9') : c == ver[k];
        if (!ok) return http_fail(err, 400, "malformed HTTP request: bad HTTP version");
    }
    if (buf[i - 5] != '1') return http_fail(err, 505, "HTTP version not supported (HTTP/1.x only)");
    h->minor = buf[i - 3] == '0' ? 0 : 1;
    return (long)i;
}

/* Walks a comma-separated list in s[0..n), calling back each trimmed element. */
static void http_list_each(const char *s, size_t n, void (*fn)(const char *, size_t, void *),
                           void *ud)
{
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && s[j] != ',') j++;
        size_t a = i, b = j;
        while (a < b && (s[a] == ' ' || s[a] == '\t')) a++;
        while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t')) b--;
        if (b > a) fn(s + a, b - a, ud);
        i = j + 1;
    }
}

static void http_conn_token(const char *s, size_t n, void *ud)
{
    struct http_head *h = ud;
    if (n == 5 && strncasecmp(s, "close", 5) == 0) h->conn_close = true;
    if (n == 10 && strncasecmp(s, "keep-alive", 10) == 0) h->conn_keep_alive = true;
}

struct http_te {
    int n; /* codings seen */
    bool last_chunked;
    bool other;  /* a coding other than chunked */
    int chunked; /* times chunked appeared */
};

static void http_te_token(const char *s, size_t n, void *ud)
{
    struct http_te *te = ud;
    te->n++;
    te->last_chunked = n == 7 && strncasecmp(s, "chunked", 7) == 0;
    if (te->last_chunked)
        te->chunked++;
    else
        te->other = true;
}

/* Decodes the fields that frame the request or steer the connection. Returns 0 or -1. */
static long http_framing(const char *buf, struct http_head *h, struct http_parse_err *err)
{
    struct http_te te = {0};
    int n_length = 0, n_host = 0;
    for (size_t i = 0; i < h->n_fields; i++) {
        const struct http_field *f = &h->fields[i];
        const char *v = buf + f->value.off;
        size_t vn = f->value.len;
        if (http_span_is(buf, f->name, "content-length")) {
            if (++n_length > 1) return http_fail(err, 400, "more than one Content-Length");
            if (vn == 0 || vn > 18) return http_fail(err, 400, "invalid Content-Length");
            uint64_t x = 0;
            for (size_t k = 0; k < vn; k++) {
                if (v[k] < '0' || v[k] > '9') return http_fail(err, 400, "invalid Content-Length");
                x = x * 10 + (uint64_t)(v[k] - '0');
            }
            h->has_length = true;
            h->length = x;
        } else if (http_span_is(buf, f->name, "transfer-encoding")) {
            http_list_each(v, vn, http_te_token, &te);
        } else if (http_span_is(buf, f->name, "connection")) {
            http_list_each(v, vn, http_conn_token, h);
        } else if (http_span_is(buf, f->name, "upgrade")) {
            h->upgrade = true;
        } else if (http_span_is(buf, f->name, "host")) {
            if (++n_host > 1) return http_fail(err, 400, "more than one Host");
        } else if (http_span_is(buf, f->name, "expect")) {
            if (vn != 12 || strncasecmp(v, "100-continue", 12) != 0)
                return http_fail(err, 417, "unsupported Expect (only 100-continue)");
            h->expect_continue = true;
        }
    }
    bool has_te = false;
    for (size_t i = 0; i < h->n_fields; i++)
        if (http_span_is(buf, h->fields[i].name, "transfer-encoding")) has_te = true;
    if (has_te) {
        /* RFC 9112 section 6.1: with HTTP/1.0 the framing is faulty; both framings at once is a
         * request-smuggling shape. Either way refused (and the connection closed after). */
        if (h->minor == 0) return http_fail(err, 400, "Transfer-Encoding in an HTTP/1.0 request");
        if (h->has_length) return http_fail(err, 400, "both Content-Length and Transfer-Encoding");
        if (te.other || te.chunked != 1 || !te.last_chunked)
            return http_fail(err, 501, "unsupported Transfer-Encoding (only chunked)");
        h->chunked = true;
    }
    return 0;
}

/* Parses the header fields in buf[i..end), end being the start of the blank line. */
static long http_fields(const char *buf, size_t i, size_t end, struct http_head *h,
                        struct http_parse_err *err)
{
    while (i < end) {
        const char *eol = memchr(buf + i, '\r', end - i + 1);
        size_t le = (size_t)(eol - buf);
        if (buf[le + 1] != '\n') return http_fail(err, 400, "malformed header: CR without LF");
        if (buf[i] == ' ' || buf[i] == '\t')
            return http_fail(err, 400, "malformed header: obsolete line folding");
        size_t n = i;
        while (n < le && http_tchar((unsigned char)buf[n])) n++;
        if (n == i || n == le || buf[n] != ':')
            return http_fail(err, 400, "malformed header field (name: value)");
        if (h->n_fields == HTTP_PARSE_MAX_FIELDS)
            return http_fail(err, 431, "too many request header fields");
        size_t a = n + 1, b = le;
        for (size_t k = a; k < b; k++)
            if (!http_value_char((unsigned char)buf[k]))
                return http_fail(err, 400, "malformed header: control character in a value");
        while (a < b && (buf[a] == ' ' || buf[a] == '\t')) a++;
        while (b > a && (buf[b - 1] == ' ' || buf[b - 1] == '\t')) b--;
        h->fields[h->n_fields++] =
            (struct http_field){{(uint32_t)i, (uint32_t)(n - i)}, {(uint32_t)a, (uint32_t)(b - a)}};
        i = le + 2;
    }
    return 0;
}

long http_parse_head(const char *buf, size_t len, size_t max_head, struct http_head *h,
                     struct http_parse_err *err)
{
    memset(h, 0, sizeof(*h));
    size_t off = 0;
    /* Empty lines before a request (a stray CRLF after a POST body, RFC 9112 section 2.2). */
    while (off + 1 < len && buf[off] == '\r' && buf[off + 1] == '\n' && off < 64) off += 2;
    if (off < len && buf[off] == '\n')
        return http_fail(err, 400, "malformed HTTP request: bare LF");
    if (off == len || (off + 1 == len && buf[off] == '\r')) return 0;
    static const char h2[] = "PRI * HTTP/2.0";
    if (memcmp(buf + off, h2, len - off < sizeof(h2) - 1 ? len - off : sizeof(h2) - 1) == 0)
        return len - off < sizeof(h2) - 1
                   ? 0
                   : http_fail(err, 505, "HTTP/2 is not supported: HTTP/1.1 only");
    if (len > max_head) len = max_head + 1; /* what lies further cannot be part of a valid head */
    long rl = http_request_line(buf, len, off, max_head, h, err);
    if (rl < 0) return -1;
    if (rl == 0) {
        if (len > max_head) return http_fail(err, 414, "request line too long");
        if (memchr(buf + off, '\n', len - off))
            return http_fail(err, 400, "malformed HTTP request: bad request line");
        return 0;
    }
    /* The field lines, up to the blank line. Every LF must follow a CR: a bare LF is refused at
     * once rather than waited on. */
    size_t start = (size_t)rl, i = start, end;
    for (;;) {
        if (i + 2 > len) {
            if (len > max_head) return http_fail(err, 431, "request header fields too large");
            return 0;
        }
        if (buf[i] == '\r' && buf[i + 1] == '\n') {
            end = i;
            break;
        }
        const char *lf = memchr(buf + i, '\n', len - i);
        if (!lf) {
            if (len > max_head) return http_fail(err, 431, "request header fields too large");
            return 0;
        }
        if (lf == buf + i || lf[-1] != '\r')
            return http_fail(err, 400, "malformed header: bare LF");
        i = (size_t)(lf - buf) + 1;
    }
    if (end + 2 > max_head) return http_fail(err, 431, "request header fields too large");
    if (http_fields(buf, start, end, h, err) < 0) return -1;
    h->method = http_method_of(buf + h->method_tok.off, h->method_tok.len);
    const char *t = buf + h->target.off;
    if (t[0] == '/') {
        h->form = HTTP_TARGET_ORIGIN;
    } else if (h->target.len == 1 && t[0] == '*') {
        if (h->method != HTTP_OPTIONS)
            return http_fail(err, 400, "\"*\" is a request target for OPTIONS only");
        h->form = HTTP_TARGET_ASTERISK;
    } else if ((h->target.len > 7 && strncasecmp(t, "http://", 7) == 0) ||
               (h->target.len > 8 && strncasecmp(t, "https://", 8) == 0)) {
        h->form = HTTP_TARGET_ABSOLUTE;
    } else {
        return http_fail(err, 400, "malformed request target");
    }
    if (http_framing(buf, h, err) < 0) return -1;
    return (long)(end + 2);
}

int http_head_field(const struct http_head *h, const char *buf, const char *name, char *out,
                    size_t outlen)
{
    size_t n = 0;
    bool found = false;
    if (outlen == 0) return ERR_TOO_BIG;
    for (size_t i = 0; i < h->n_fields; i++) {
        const struct http_field *f = &h->fields[i];
        if (!http_span_is(buf, f->name, name)) continue;
        size_t need = f->value.len + (found ? 2 : 0);
        if (n + need >= outlen) return ERR_TOO_BIG;
        if (found) {
            memcpy(out + n, ", ", 2);
            n += 2;
        }
        memcpy(out + n, buf + f->value.off, f->value.len);
        n += f->value.len;
        found = true;
    }
    if (!found) return ERR_NOT_FOUND;
    out[n] = 0;
    return (int)n;
}

static int http_hex(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    c = (char)(c | 0x20);
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

int http_parse_path(const char *target, size_t len, enum http_target_form form, char *out,
                    size_t outlen, struct http_parse_err *err)
{
    size_t i = 0;
    if (form == HTTP_TARGET_ABSOLUTE) {
        i = target[4] == ':' ? 7 : 8; /* after "http://" or "https://" */
        while (i < len && target[i] != '/' && target[i] != '?') i++;
        if (i == (target[4] == ':' ? 7u : 8u))
            return (int)http_fail(err, 400, "absolute request target without a host");
    } else if (form != HTTP_TARGET_ORIGIN) {
        return (int)http_fail(err, 400, "malformed request target");
    }
    size_t n = 0;
    if (i == len || target[i] == '?') out[n++] = '/'; /* "http://host" is "/" */
    for (; i < len && target[i] != '?'; i++) {
        char c = target[i];
        if (c == '#') return (int)http_fail(err, 400, "malformed request target: '#'");
        if (c == '%') {
            int a = i + 2 < len ? http_hex(target[i + 1]) : -1;
            int b = a >= 0 ? http_hex(target[i + 2]) : -1;
            if (b < 0)
                return (int)http_fail(err, 400, "malformed percent-escape in the request target");
            c = (char)(a * 16 + b);
            if (c == 0) return (int)http_fail(err, 400, "%00 in the request target");
            i += 2;
        }
        if (n + 1 >= outlen) return (int)http_fail(err, 414, "request target too long");
        out[n++] = c;
    }
    out[n] = 0;
    return 0;
}

/* ---- Chunked bodies ---------------------------------------------------------------------------- */

enum {
    CH_SIZE = 0, /* hex digits */
    CH_EXT,      /* BWS, chunk extensions: up to CR */
    CH_SIZE_LF,  /* the LF ending the size line */
    CH_DATA,     /* chunk data */
    CH_DATA_CR,  /* the CRLF after the data */
    CH_DATA_LF,
    CH_TRAILER,     /* at the start of a trailer line (or the final blank line) */
    CH_TRAILER_TXT, /* inside a trailer line */
    CH_TRAILER_LF,  /* the LF ending a trailer line */
    CH_END_LF,      /* the LF of the final blank line */
    CH_DONE,
};

#define HTTP_CHUNK_LINE_MAX 1024
#define HTTP_TRAILERS_MAX   8192

int http_chunked_feed(struct http_chunked *d, const char *in, size_t len, size_t *used,
                      struct buf *out, struct http_parse_err *err)
{
    size_t i = 0;
    int rc = 0;
    while (i < len && d->state != CH_DONE) {
        unsigned char c = (unsigned char)in[i];
        switch (d->state) {
        case CH_SIZE: {
            int x = http_hex((char)c);
            if (x >= 0) {
                if (d->left >> 59) {
                    rc = (int)http_fail(err, 400, "malformed chunked body: chunk size too large");
                    goto out;
                }
                d->left = d->left * 16 + (uint64_t)x;
                d->digits = true;
                i++;
                break;
            }
            if (!d->digits) {
                rc = (int)http_fail(err, 400, "malformed chunked body: bad chunk size");
                goto out;
            }
            if (out->max && d->left > out->max - out->len) {
                rc = (int)http_fail(err, 413, "request body too large");
                goto out;
            }
            d->state = CH_EXT;
            d->line = 0;
            break;
        }
        case CH_EXT:
            if (c == '\r') {
                d->state = CH_SIZE_LF;
            } else if (c == '\n' || !http_value_char(c) || ++d->line > HTTP_CHUNK_LINE_MAX ||
                       (d->line == 1 && c != ';' && c != ' ' && c != '\t')) {
                rc = (int)http_fail(err, 400, "malformed chunked body: bad chunk size line");
                goto out;
            }
            i++;
            break;
        case CH_SIZE_LF:
            if (c != '\n') {
                rc = (int)http_fail(err, 400, "malformed chunked body: CR without LF");
                goto out;
            }
            i++;
            d->state = d->left ? CH_DATA : CH_TRAILER;
            d->digits = false;
            break;
        case CH_DATA: {
            size_t n = len - i;
            if (n > d->left) n = (size_t)d->left;
            int a = buf_append(out, in + i, n);
            if (a) {
                rc = (int)http_fail(err, a == ERR_TOO_BIG ? 413 : 500,
                                    a == ERR_TOO_BIG ? "request body too large" : "out of memory");
                goto out;
            }
            i += n;
            d->left -= n;
            if (!d->left) d->state = CH_DATA_CR;
            break;
        }
        case CH_DATA_CR:
        case CH_DATA_LF:
            if (c != (d->state == CH_DATA_CR ? '\r' : '\n')) {
                rc = (int)http_fail(err, 400,
                                    "malformed chunked body: chunk data not followed by CRLF");
                goto out;
            }
            i++;
            d->state = d->state == CH_DATA_CR ? CH_DATA_LF : CH_SIZE;
            break;
        case CH_TRAILER:
        case CH_TRAILER_TXT:
            if (c == '\r') {
                d->state = d->state == CH_TRAILER ? CH_END_LF : CH_TRAILER_LF;
            } else if (c == '\n' || !http_value_char(c) || ++d->trailers > HTTP_TRAILERS_MAX) {
                rc = (int)http_fail(err, 400, "malformed chunked body: bad trailer");
                goto out;
            } else {
                d->state = CH_TRAILER_TXT;
            }
            i++;
            break;
        case CH_TRAILER_LF:
        case CH_END_LF:
            if (c != '\n') {
                rc = (int)http_fail(err, 400, "malformed chunked body: CR without LF");
                goto out;
            }
            i++;
            d->state = d->state == CH_END_LF ? CH_DONE : CH_TRAILER;
            break;
        }
    }
    rc = d->state == CH_DONE ? 1 : 0;
out:
    *used = i;
    return rc;
}
