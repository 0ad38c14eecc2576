/* Fuzz target for the trace parsers (autoscaler/sim/trace.c): the first byte picks the format, the
 * rest is parsed. On success the result must be sorted, relative to 0 and every request's hash
 * range must lie inside the hash array; tie spreading must keep the order. */
#include "autoscaler/sim/trace.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_trace: check failed: %s (line %d)\n", #cond, __LINE__);          \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    enum trace_format fmt = data[0] & 1 ? TRACE_MOONCAKE : TRACE_AZURE;
    struct trace *t = NULL;
    char err[256];
    if (trace_parse((const char *)data + 1, size - 1, fmt, &t, err, sizeof(err)) != 0) {
        CHECK(t == NULL);
        CHECK(err[0] != 0);
        return 0;
    }
    CHECK(t && t->n > 0);
    CHECK(t->reqs[0].t_s == 0);
    for (size_t i = 0; i < t->n; i++) {
        const struct trace_req *r = &t->reqs[i];
        CHECK((size_t)r->hash_off + r->n_hash <= t->n_hashes);
        CHECK(r->prompt_tokens <= TRACE_MAX_TOKENS && r->output_tokens <= TRACE_MAX_TOKENS);
        if (i) CHECK(r->t_s >= t->reqs[i - 1].t_s);
    }
    trace_spread_ties(t, 1);
    for (size_t i = 1; i < t->n; i++) CHECK(t->reqs[i].t_s >= t->reqs[i - 1].t_s);
    trace_free(t);
    return 0;
}
