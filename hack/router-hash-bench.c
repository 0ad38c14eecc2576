/* The router's prompt-hashing path and the engine tokenizer alone, for profiling
 * (router/BENCHMARKS.md, engine/BENCHMARKS.md): no sockets, no threads.
 *
 *   router-hash-bench hash MODEL.gguf BODY.json chat|completion N
 *       router_model_prompt (the engine's request parser, template, tokenizer and block hashes)
 *       on BODY N times, built from MODEL's tokenizer document as the router builds it
 *   router-hash-bench tokenize MODEL.gguf TEXT.txt N
 *       tokenizer_encode (add_special, parse_special) of TEXT N times; prints tokens/s.
 *       HB_CACHE=off: without the word cache; HB_CACHE=cold: an empty cache for every run
 *       (default: warm, the cache kept across runs)
 *
 * Built by hand against build/lib (the cc line is in engine/BENCHMARKS.md, "Tokenizer"); not part of any
 * program. Run it under `valgrind --tool=callgrind` for instruction counts. */
#include "common/buf.h"
#include "engine/gguf/gguf.h"
#include "engine/serve/serve_router.h"
#include "engine/text/tokenizer.h"
#include "router/router_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    struct buf b;
    buf_init(&b, 0);
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        if (buf_append(&b, chunk, n) != 0) break;
    fclose(f);
    *len = b.len;
    if (buf_append(&b, "", 1) != 0) return NULL;
    return b.data;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc != 5 && argc != 6) {
        fprintf(stderr,
                "usage: %s hash MODEL.gguf BODY.json chat|completion N\n"
                "       %s tokenize MODEL.gguf TEXT.txt N\n",
                argv[0], argv[0]);
        return 2;
    }
    bool hash = strcmp(argv[1], "hash") == 0;
    if ((hash && argc != 6) || (!hash && (argc != 5 || strcmp(argv[1], "tokenize") != 0))) {
        fprintf(stderr, "%s: bad arguments\n", argv[0]);
        return 2;
    }
    char err[256];
    struct gguf *g;
    if (gguf_open(argv[2], &g, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s: %s\n", argv[2], err);
        return 1;
    }
    size_t len;
    char *in = slurp(argv[3], &len);
    if (!in) {
        fprintf(stderr, "%s: cannot read\n", argv[3]);
        return 1;
    }
    long n = strtol(argv[hash ? 5 : 4], NULL, 10);
    long total = 0;
    double t0, t1;
    if (hash) {
        struct serve_router_cfg rc = {.model = g,
                                      .model_name = "bench",
                                      .block_size = 16,
                                      .max_context = 1 << 20,
                                      .n_vocab = 1 << 20};
        struct buf doc;
        buf_init(&doc, 0);
        struct router_model_info *mi;
        if (serve_router_tokenizer_doc(&rc, &doc) != 0 ||
            router_model_info_parse(doc.data, doc.len, &mi, err, sizeof(err)) != 0) {
            fprintf(stderr, "tokenizer document: %s\n", err);
            return 1;
        }
        buf_fini(&doc);
        bool chat = strcmp(argv[4], "chat") == 0;
        t0 = now_s();
        for (long i = 0; i < n; i++) {
            struct router_prompt p;
            if (router_model_prompt(mi, in, len, chat, &p) != 0) {
                fprintf(stderr, "router_model_prompt failed\n");
                return 1;
            }
            total += p.n_prompt;
            router_prompt_fini(&p);
        }
        t1 = now_s();
        router_model_info_unref(mi);
    } else {
        struct tokenizer *tok;
        if (tokenizer_load(g, &tok, err, sizeof(err)) != 0) {
            fprintf(stderr, "tokenizer: %s\n", err);
            return 1;
        }
        const char *mode = getenv("HB_CACHE") ? getenv("HB_CACHE") : "warm";
        bool cold = strcmp(mode, "cold") == 0;
        if (strcmp(mode, "off") == 0 && tokenizer_set_cache(tok, 0) != 0) return 1;
        t0 = now_s();
        for (long i = 0; i < n; i++) {
            if (cold && tokenizer_set_cache(tok, TOKENIZER_CACHE_WORDS) != 0) return 1;
            int32_t *ids;
            size_t n_ids;
            if (tokenizer_encode(tok, in, len, true, true, &ids, &n_ids) != 0) {
                fprintf(stderr, "tokenizer_encode failed\n");
                return 1;
            }
            total += (long)n_ids;
            free(ids);
        }
        t1 = now_s();
        tokenizer_free(tok);
    }
    printf("%s: %ld runs, %ld tokens each, %.1f us per run, %.0f tokens/s\n", argv[1], n,
           n ? total / n : 0, (t1 - t0) * 1e6 / (double)(n ? n : 1),
           (double)total / (t1 - t0 > 0 ? t1 - t0 : 1e-9));
    free(in);
    gguf_close(g);
    return 0;
}
