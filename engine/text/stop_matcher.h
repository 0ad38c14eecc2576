/* Stop sequences over streamed text: fed the decoded pieces of a generation one by one, it finds
 * any of up to API_MAX_STOP stop strings even when split across pieces, never lets any byte of a
 * matched stop string out, and holds back only the shortest tail that could still begin one (plus
 * an incomplete UTF-8 character, so every emitted chunk ends on a character boundary).
 * A stop ends the text as soon as it is complete, whatever the split: with stops "abcd" and "bc",
 * "xabcd" stops at "xa" because "bc" completes first.
 * Byte-exact matching; no normalisation. One matcher per sequence; not thread-safe. */
#ifndef CINFER_ENGINE_STOP_MATCHER_H
#define CINFER_ENGINE_STOP_MATCHER_H

#include <stddef.h>

#include "common/buf.h"

#define STOP_MATCHER_MAX     4    /* stop strings per matcher */
#define STOP_MATCHER_MAX_LEN 1024 /* bytes per stop string */

struct stop_matcher;

/* Copies n (0..STOP_MATCHER_MAX) non-empty stop strings of at most STOP_MATCHER_MAX_LEN bytes.
 * With n == 0 it only reassembles UTF-8 characters. Writes a new matcher to *out
 * (stop_matcher_free). Returns 0, ERR_INVAL or ERR_NOMEM. */
int stop_matcher_new(const char *const *stops, size_t n, struct stop_matcher **out);
void stop_matcher_free(struct stop_matcher *m); /* NULL-safe */

/* Feeds `len` bytes of decoded text (borrowed) and appends the text that is safe to emit now to
 * `out` (borrowed). Returns 1 when a stop string completed (the text before it has been appended;
 * the matcher is finished and later feeds append nothing), 0 when generation may continue, or
 * ERR_NOMEM / ERR_TOO_BIG (from `out`; the matcher's state is unchanged). */
int stop_matcher_feed(struct stop_matcher *m, const char *piece, size_t len, struct buf *out);

/* End of generation without a stop: appends whatever is still held back. Returns 0, ERR_NOMEM or
 * ERR_TOO_BIG. After a match it appends nothing. */
int stop_matcher_flush(struct stop_matcher *m, struct buf *out);

/* Index of the stop string that matched, or -1 while none has. */
int stop_matcher_matched(const struct stop_matcher *m);

/* Bytes currently held back (for tests and metrics). */
size_t stop_matcher_held(const struct stop_matcher *m);

#endif
