/* Incremental stop-string matching over streamed text (see stop_matcher.h).
 * Invariant between calls: `held` is shorter than the longest stop string plus 3 bytes, contains no
 * complete stop string, and is exactly the tail that is a proper prefix of some stop string (or an
 * unfinished UTF-8 character); everything before it has already been emitted. */
#include "engine/text/stop_matcher.h"

#include "common/err.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct stop_matcher {
    char *stops[STOP_MATCHER_MAX]; /* owned */
    size_t lens[STOP_MATCHER_MAX];
    size_t n;
    struct buf held; /* bytes not yet emitted */
    struct buf work; /* held + the new piece, rebuilt on each feed */
    int matched;     /* index of the stop that matched, or -1 */
};

int stop_matcher_new(const char *const *stops, size_t n, struct stop_matcher **out)
{
    if (n > STOP_MATCHER_MAX || (n && !stops)) return ERR_INVAL;
    for (size_t i = 0; i < n; i++)
        if (!stops[i] || !stops[i][0] || strlen(stops[i]) > STOP_MATCHER_MAX_LEN) return ERR_INVAL;
    struct stop_matcher *m = calloc(1, sizeof(*m));
    if (!m) return ERR_NOMEM;
    m->matched = -1;
    buf_init(&m->held, 0); /* bounded by the invariant above */
    buf_init(&m->work, 0); /* held + one piece, both bounded by the caller's decode */
    for (size_t i = 0; i < n; i++) {
        m->stops[i] = strdup(stops[i]);
        if (!m->stops[i]) {
            stop_matcher_free(m);
            return ERR_NOMEM;
        }
        m->lens[i] = strlen(stops[i]);
        m->n = i + 1;
    }
    *out = m;
    return 0;
}

void stop_matcher_free(struct stop_matcher *m)
{
    if (!m) return;
    for (size_t i = 0; i < m->n; i++) free(m->stops[i]);
    buf_fini(&m->held);
    buf_fini(&m->work);
    free(m);
}

/* Start of the stop occurrence in s[0..len) that COMPLETES first (smallest end; on a tie the
 * longer one, i.e. the earlier start); writes its index to *which. Returns len when none occurs.
 * Deciding by the end makes the result independent of how the text was split into pieces: it is
 * what byte-by-byte streaming would give. Per stop, the first occurrence also ends first. */
static size_t stop_find(const struct stop_matcher *m, const char *s, size_t len, int *which)
{
    size_t best = len, best_end = (size_t)-1;
    for (size_t i = 0; i < m->n; i++) {
        const char *hit = memmem(s, len, m->stops[i], m->lens[i]);
        if (!hit) continue;
        size_t at = (size_t)(hit - s), end = at + m->lens[i];
        if (end < best_end || (end == best_end && at < best)) {
            best = at;
            best_end = end;
            *which = (int)i;
        }
    }
    return best;
}

/* Length of the longest tail of s[0..len) that is a proper prefix of some stop string. */
static size_t stop_partial_tail(const struct stop_matcher *m, const char *s, size_t len)
{
    size_t best = 0;
    for (size_t i = 0; i < m->n; i++) {
        size_t k = m->lens[i] - 1 < len ? m->lens[i] - 1 : len;
        for (; k > best; k--)
            if (memcmp(s + len - k, m->stops[i], k) == 0) break;
        if (k > best) best = k;
    }
    return best;
}

/* Largest cut <= len that does not split a UTF-8 character: backs off over an incomplete
 * multi-byte sequence at the end. Invalid bytes are not held (the JSON layer replaces them). */
static size_t stop_utf8_cut(const char *s, size_t len)
{
    size_t i = len, cont = 0;
    while (i > 0 && cont < 3 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) i--, cont++;
    if (i == 0) return len;
    unsigned char lead = (unsigned char)s[i - 1];
    size_t need = lead >= 0xF8 ? 0 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 0;
    return need && cont + 1 < need ? i - 1 : len;
}

int stop_matcher_feed(struct stop_matcher *m, const char *piece, size_t len, struct buf *out)
{
    if (m->matched >= 0) return 1;
    buf_reset(&m->work);
    if (buf_append(&m->work, m->held.data ? m->held.data : "", m->held.len) ||
        buf_append(&m->work, piece ? piece : "", piece ? len : 0))
        return ERR_NOMEM;
    const char *s = buf_cstr(&m->work);
    size_t n = m->work.len;
    if (n == 0) return 0; /* nothing held and an empty piece */
    int which = -1;
    size_t at = stop_find(m, s, n, &which);
    size_t emit = at < n ? at : stop_utf8_cut(s, n - stop_partial_tail(m, s, n));
    int rc = buf_append(out, s, emit);
    if (rc) return rc;
    if (at < n) {
        m->matched = which;
        buf_reset(&m->held);
        return 1;
    }
    /* Keep the tail: slide it to the front of `work` and swap buffers, so no allocation can fail
     * after text has been emitted. */
    memmove(m->work.data, m->work.data + emit, n - emit);
    m->work.len = n - emit;
    m->work.data[m->work.len] = '\0';
    struct buf tmp = m->held;
    m->held = m->work;
    m->work = tmp;
    return 0;
}

int stop_matcher_flush(struct stop_matcher *m, struct buf *out)
{
    if (m->matched >= 0 || m->held.len == 0) return 0;
    int rc = buf_append(out, m->held.data, m->held.len);
    if (rc == 0) buf_reset(&m->held);
    return rc;
}

int stop_matcher_matched(const struct stop_matcher *m)
{
    return m->matched;
}

size_t stop_matcher_held(const struct stop_matcher *m)
{
    return m->held.len;
}
