/* Prompt lookup (n-gram) proposals: the tokens that followed the latest earlier occurrence of the
 * sequence's longest recent suffix, as llama.cpp's lookup decoding and vLLM's ngram proposer do.
 * Input-grounded text (quoting, code edits, summaries of a given text) repeats long runs of its
 * prompt, and these proposals cost a scan of the sequence's own tokens, no model. */
#include "engine/sched/spec.h"

int spec_ngram_propose(const int32_t *tokens, int n, int ngram_min, int ngram_max, int k,
                       int32_t *out)
{
    if (n < ngram_min + 1 || k <= 0 || ngram_min < 1) return 0;
    if (ngram_max > n - 1) ngram_max = n - 1;
    const int32_t *tail = tokens + n - 1; /* the suffix ends here */
    int best = 0, best_end = -1;
    /* Candidate occurrences end at e (< n - 1), latest first; the match length is the common
     * suffix of tokens[..e] and tokens[..n-1], capped at ngram_max. The first longest one wins. */
    for (int e = n - 2; e >= ngram_min - 1; e--) {
        if (tokens[e] != *tail) continue;
        int len = 1, cap = ngram_max < e + 1 ? ngram_max : e + 1;
        while (len < cap && tokens[e - len] == tail[-len]) len++;
        if (len > best && len >= ngram_min) {
            best = len;
            best_end = e;
            if (best == ngram_max) break;
        }
    }
    if (best_end < 0) return 0;
    int avail = n - 1 - best_end;
    int m = avail < k ? avail : k;
    for (int i = 0; i < m; i++) out[i] = tokens[best_end + 1 + i];
    return m;
}
