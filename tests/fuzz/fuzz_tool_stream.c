/* Fuzz target for the incremental tool-call scanner (engine/api/api_tool_stream.c). The first byte
 * picks forced or not and seeds the chunking; the rest is a choice's text, fed in those chunks.
 * What the events assemble to (content, each call's name and joined argument fragments) must be
 * exactly api_tool_calls_parse's answer for the whole text, and the events must come in a valid
 * order (content only before the first call, calls numbered in turn, fragments of the latest
 * call). Any mismatch aborts, so libFuzzer reports it as a crash. */
#include "engine/api/api.h"

#include "common/buf.h"
#include "common/utf8.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_tool_stream: check failed: %s (line %d)\n", #cond, __LINE__);    \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

struct got {
    struct buf content;
    int n_calls, cap;
    struct buf *name, *args;
};

static int got_ev(void *ud, enum api_tool_ev ev, int call, const char *text, size_t len)
{
    struct got *g = ud;
    CHECK(len > 0);
    if (ev == API_TOOL_EV_CONTENT) {
        CHECK(g->n_calls == 0);
        return buf_append(&g->content, text, len);
    }
    if (ev == API_TOOL_EV_ARGS) {
        CHECK(call == g->n_calls - 1);
        return buf_append(&g->args[call], text, len);
    }
    CHECK(call == g->n_calls);
    if (g->n_calls == g->cap) {
        int cap = g->cap ? g->cap * 2 : 4;
        struct buf *n = realloc(g->name, (size_t)cap * sizeof(*n));
        CHECK(n);
        g->name = n;
        struct buf *a = realloc(g->args, (size_t)cap * sizeof(*a));
        CHECK(a);
        g->args = a;
        g->cap = cap;
    }
    buf_init(&g->name[call], 0);
    buf_init(&g->args[call], 0);
    g->n_calls++;
    return buf_append(&g->name[call], text, len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!size) return 0;
    bool forced = data[0] & 1;
    uint32_t seed = data[0];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;

    struct got g = {0};
    buf_init(&g.content, 0);
    struct api_tool_stream s;
    api_tool_stream_init(&s, forced);
    for (size_t at = 0;;) {
        seed = seed * 1103515245u + 12345u;
        size_t step = (seed >> 16) % 8; /* pieces of 0..7 bytes, as tokens come */
        if (step > len - at) step = len - at;
        bool final = at + step == len && (seed >> 8 & 1);
        CHECK(api_tool_stream_feed(&s, text + at, step, final, got_ev, &g) == 0);
        at += step;
        if (final) break;
    }
    api_tool_stream_fini(&s);

    json_t *calls = NULL;
    size_t clen = len;
    int rc = api_tool_calls_parse(text, len, forced, "f", &calls, &clen);
    CHECK(rc == 0 || rc == 1);
    CHECK(g.content.len == clen && (!clen || !memcmp(g.content.data, text, clen)));
    CHECK(g.n_calls == (int)json_array_size(calls));
    for (int i = 0; i < g.n_calls; i++) {
        json_t *fn = json_object_get(json_array_get(calls, (size_t)i), "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        const json_t *args = json_object_get(fn, "arguments");
        CHECK(name && g.name[i].len == strlen(name) &&
              !memcmp(g.name[i].data, name, g.name[i].len));
        size_t alen = json_string_length(args);
        CHECK(json_is_string(args));
        /* parse makes invalid UTF-8 U+FFFD; where the raw bytes are valid they must match */
        if (utf8_valid(g.args[i].data, g.args[i].len))
            CHECK(g.args[i].len == alen &&
                  (!alen || !memcmp(g.args[i].data, json_string_value(args), alen)));
        buf_fini(&g.name[i]);
        buf_fini(&g.args[i]);
    }
    json_decref(calls);
    free(g.name);
    free(g.args);
    buf_fini(&g.content);
    return 0;
}
