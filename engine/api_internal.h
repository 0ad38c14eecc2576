/* Helpers shared by the api_*.c files only; not part of the API layer's public surface. */
#ifndef CINFER_ENGINE_API_INTERNAL_H
#define CINFER_ENGINE_API_INTERNAL_H

#include <stddef.h>

/* Returns the offset of the first invalid UTF-8 sequence in s[0..len), or len when valid.
 * Rejects overlong forms, surrogates and code points above U+10FFFF (RFC 3629). */
size_t api_utf8_invalid_at(const unsigned char *s, size_t len);

#endif
