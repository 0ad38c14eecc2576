/* Strict UTF-8 (RFC 3629): shortest forms only, no surrogates (U+D800..U+DFFF), nothing above
 * U+10FFFF. The one validator of the tree: request bodies (engine/api), the detokenizer's output
 * (engine/text), Prometheus label values and HELP text (common/prom). Lenient decoding as the
 * tokenizers need it (invalid bytes become U+FFFD) is engine/text/unicode.h's. Pure functions; any
 * thread. */
#ifndef CINFER_COMMON_UTF8_H
#define CINFER_COMMON_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The sequence starting at s[0] (n > 0 bytes available): returns its length (1-4) when it is a
 * complete, valid, shortest-form scalar value; 0 when the n bytes are a valid but incomplete
 * prefix (more bytes may complete it); -1 when s[0] cannot start a valid sequence with the bytes
 * that follow. */
int utf8_seq_check(const uint8_t *s, size_t n);

/* Offset of the first byte of s[0..n) that does not begin a complete valid sequence (a truncated
 * sequence at the end counts as invalid), or n when all of it is valid UTF-8. */
size_t utf8_invalid_at(const void *s, size_t n);

/* True when all of s[0..n) is valid UTF-8 (n == 0 is). */
bool utf8_valid(const void *s, size_t n);

#endif
