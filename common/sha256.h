/* SHA-256 of files and buffers as lowercase hex, on OpenSSL's EVP interface; the one module that
 * includes OpenSSL's headers directly. Errors are -1 with errno, like the stdio calls it wraps. */
#ifndef CINFER_COMMON_SHA256_H
#define CINFER_COMMON_SHA256_H

#include <stddef.h>

#define SHA256_HEX_LEN 65 /* 64 digits and the terminator */

/* Hashes the file at `path` (borrowed) into `hex`. Returns 0, or -1 with errno set (EIO when
 * OpenSSL fails). Any thread. */
int sha256_file_hex(const char *path, char hex[SHA256_HEX_LEN]);
/* Hashes `len` bytes at `data` into `hex`. Returns 0 or -1. */
int sha256_hex(const void *data, size_t len, char hex[SHA256_HEX_LEN]);

#endif
