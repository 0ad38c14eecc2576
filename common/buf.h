/* Bounded growable byte buffers: every buffer filled from outside (HTTP bodies, watch lines, scrapes)
 * has a maximum size, and appends past it fail with ERR_TOO_BIG instead of growing without limit.
 * The data is always NUL-terminated so text can be read as a C string. Not thread-safe. */
#ifndef CINFER_COMMON_BUF_H
#define CINFER_COMMON_BUF_H

#include <stdarg.h>
#include <stddef.h>

struct buf {
    char *data; /* owned; NULL until the first append; NUL-terminated when non-NULL */
    size_t len; /* bytes used, not counting the terminator */
    size_t cap; /* bytes allocated */
    size_t max; /* largest allowed len; 0 means unbounded (only for data we generate ourselves) */
};

/* Initialises an empty buffer that may hold at most `max` bytes (0 = no limit). */
void buf_init(struct buf *b, size_t max);
/* Frees the storage; the buffer may be reused after buf_init. NULL-safe. */
void buf_fini(struct buf *b);
/* Empties the buffer, keeping its storage. */
void buf_reset(struct buf *b);

/* Append bytes (borrowed). Return 0, ERR_TOO_BIG (nothing appended) or ERR_NOMEM. */
int buf_append(struct buf *b, const void *p, size_t n);
int buf_puts(struct buf *b, const char *s);
int buf_putc(struct buf *b, char c);
int buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int buf_vprintf(struct buf *b, const char *fmt, va_list ap);
/* Appends the whole file at `path` (borrowed). Returns 0, ERR_IO (cannot open or read),
 * ERR_TOO_BIG (past the buffer's maximum; what fitted stays appended) or ERR_NOMEM. */
int buf_append_file(struct buf *b, const char *path);

/* Returns the contents as a C string ("" when empty); borrowed, valid until the next append. */
const char *buf_cstr(const struct buf *b);
/* Returns the storage (new, caller frees; "" when empty, NULL on ERR_NOMEM) and empties the buffer. */
char *buf_steal(struct buf *b);

#endif
