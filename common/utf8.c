/* Strict UTF-8 validation (see utf8.h), after the table of well-formed byte sequences in RFC 3629
 * section 4: the lead byte fixes the length and the allowed range of the second byte. */
#include "common/utf8.h"

int utf8_seq_check(const uint8_t *s, size_t n)
{
    uint8_t b = s[0];
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */

    if (b < 0x80) return 1;
    if (b < 0xC2) return -1; /* continuation byte or overlong 2-byte lead */
    if (b < 0xE0) {
        need = 2;
    } else if (b < 0xF0) {
        need = 3;
        if (b == 0xE0) lo = 0xA0; /* no overlong 3-byte forms */
        if (b == 0xED) hi = 0x9F; /* no surrogates */
    } else if (b < 0xF5) {
        need = 4;
        if (b == 0xF0) lo = 0x90; /* no overlong 4-byte forms */
        if (b == 0xF4) hi = 0x8F; /* nothing above U+10FFFF */
    } else {
        return -1;
    }
    for (size_t k = 1; k < need; k++) {
        if (k >= n) return 0;
        uint8_t c = s[k];
        if (k == 1 ? (c < lo || c > hi) : (c & 0xC0) != 0x80) return -1;
    }
    return (int)need;
}

size_t utf8_invalid_at(const void *p, size_t n)
{
    const uint8_t *s = p;
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) { /* ASCII runs, the common case, without the call */
            i++;
            continue;
        }
        int k = utf8_seq_check(s + i, n - i);
        if (k <= 0) return i;
        i += (size_t)k;
    }
    return n;
}

bool utf8_valid(const void *s, size_t n)
{
    return utf8_invalid_at(s, n) == n;
}
