/* Bounded growable byte buffers. */
#include "common/buf.h"

#include "common/err.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void buf_init(struct buf *b, size_t max)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->max = max;
}

void buf_fini(struct buf *b)
{
    if (!b) return;
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

void buf_reset(struct buf *b)
{
    b->len = 0;
    if (b->data) b->data[0] = 0;
}

/* Makes room for `extra` more bytes plus the terminator. */
static int buf_reserve(struct buf *b, size_t extra)
{
    if (b->max && (extra > b->max || b->len > b->max - extra)) return ERR_TOO_BIG;
    /* No object may exceed PTRDIFF_MAX bytes; larger requests are limits, not allocation failures. */
    if (extra > (size_t)PTRDIFF_MAX - b->len - 1) return ERR_TOO_BIG;
    size_t need = b->len + extra + 1;
    if (need <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *p = realloc(b->data, cap);
    if (!p) return ERR_NOMEM;
    b->data = p;
    b->cap = cap;
    return 0;
}

int buf_append(struct buf *b, const void *p, size_t n)
{
    int rc = buf_reserve(b, n);
    if (rc) return rc;
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0;
    return 0;
}

int buf_puts(struct buf *b, const char *s)
{
    return buf_append(b, s, strlen(s));
}

int buf_putc(struct buf *b, char c)
{
    return buf_append(b, &c, 1);
}

int buf_vprintf(struct buf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0) return ERR_INVAL;
    int rc = buf_reserve(b, (size_t)n);
    if (rc) return rc;
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return 0;
}

int buf_printf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = buf_vprintf(b, fmt, ap);
    va_end(ap);
    return rc;
}

const char *buf_cstr(const struct buf *b)
{
    return b->data ? b->data : "";
}

char *buf_steal(struct buf *b)
{
    char *p = b->data ? b->data : strdup("");
    b->data = NULL;
    b->len = b->cap = 0;
    return p;
}

int buf_append_file(struct buf *b, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return ERR_IO;
    char chunk[65536];
    size_t n;
    int rc = 0;
    while (rc == 0 && (n = fread(chunk, 1, sizeof(chunk), f)) > 0) rc = buf_append(b, chunk, n);
    if (rc == 0 && ferror(f)) rc = ERR_IO;
    fclose(f);
    return rc;
}
