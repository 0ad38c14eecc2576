/* Strict HTTP/1.1 request parsing for common/http_server.c (RFC 9112): the request head, the request
 * target and chunked request bodies. Pure functions over bytes the caller owns: no I/O, no
 * allocation except into the caller's bounded buffer, any thread. Private to common/http_server*.c,
 * its tests and fuzz targets; not a general-purpose HTTP library.
 *
 * Strict means: CRLF line ends only (a bare LF is an error, not a line end), no whitespace before a
 * field's colon, no obsolete line folding, no control characters (NUL included) in fields, one
 * Content-Length, no Content-Length together with Transfer-Encoding, "chunked" as the only transfer
 * coding. Each rejection names an HTTP status and a message for the client. */
#ifndef CINFER_COMMON_HTTP_SERVER_PARSE_H
#define CINFER_COMMON_HTTP_SERVER_PARSE_H

#include "common/buf.h"
#include "common/http_server.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HTTP_PARSE_MAX_FIELDS 64

/* A slice of the head buffer the head was parsed from. */
struct http_span {
    uint32_t off, len;
};

struct http_field {
    struct http_span name, value; /* value without surrounding whitespace */
};

enum http_target_form {
    HTTP_TARGET_ORIGIN = 1, /* "/path?query" */
    HTTP_TARGET_ABSOLUTE,   /* "http://host/path?query" (RFC 9112 section 3.2.2) */
    HTTP_TARGET_ASTERISK,   /* "*" (OPTIONS only) */
};

struct http_head {
    enum http_method method; /* 0 for a method token we do not serve */
    struct http_span method_tok, target;
    enum http_target_form form;
    int minor; /* HTTP/1.<minor>, 0 or 1 (a higher 1.x is read as 1.1) */
    size_t n_fields;
    struct http_field fields[HTTP_PARSE_MAX_FIELDS];
    /* Framing and connection fields, decoded: */
    bool has_length;
    uint64_t length; /* Content-Length */
    bool chunked;    /* Transfer-Encoding: chunked */
    bool conn_close, conn_keep_alive;
    bool upgrade;         /* an Upgrade field (h2c, websocket): ignored, RFC 9110 section 7.8 */
    bool expect_continue; /* Expect: 100-continue */
};

/* Why a request was refused: an HTTP status and a static message for the client. */
struct http_parse_err {
    int status;
    const char *message;
};

/* Parses the request head at the start of buf[0..len). Empty lines before the request line are
 * skipped (RFC 9112 section 2.2). Returns the head's length in bytes (through its blank line) once
 * complete and valid, with *h filled (spans index buf); 0 when more bytes are needed and those seen
 * so far can still start a valid head; -1 when malformed or larger than `max_head` bytes, with *err
 * set (400, 414, 417, 431, 501 or 505). Borrows buf; writes *h and *err. */
long http_parse_head(const char *buf, size_t len, size_t max_head, struct http_head *h,
                     struct http_parse_err *err);

/* Copies the first field named `name` (case-insensitive) of `h` (parsed from `buf`), or every such
 * field joined with ", " (RFC 9110 section 5.3), into out (outlen bytes, NUL-terminated). Returns the
 * value's length, ERR_NOT_FOUND or ERR_TOO_BIG. */
int http_head_field(const struct http_head *h, const char *buf, const char *name, char *out,
                    size_t outlen);

/* Decodes the path of an origin- or absolute-form target (without its query) into out (outlen
 * bytes, NUL-terminated): percent-escapes decoded, "%00" refused. Returns 0, or -1 with *err set
 * (400 for a malformed escape or target, 414 when it does not fit). */
int http_parse_path(const char *target, size_t len, enum http_target_form form, char *out,
                    size_t outlen, struct http_parse_err *err);

/* Incremental decoder of a chunked body (RFC 9112 section 7.1): chunk extensions and trailer fields
 * are read and dropped. Zero-initialise to start. */
struct http_chunked {
    int state;
    uint64_t left;   /* bytes left in the current chunk, or the size being read */
    size_t line;     /* bytes in the current size, extension or trailer line */
    size_t trailers; /* trailer bytes so far */
    bool digits;     /* the size line has a digit */
};

/* Feeds in[0..len) into the decoder, appending chunk data to `out` (whose max bounds the body).
 * Sets *used to the bytes consumed. Returns 1 when the body ended (bytes after it are not consumed),
 * 0 when all of `in` was consumed and more is needed, -1 for a malformed body (*err: 400) or one
 * over out's bound (*err: 413). */
int http_chunked_feed(struct http_chunked *d, const char *in, size_t len, size_t *used,
                      struct buf *out, struct http_parse_err *err);

#endif
