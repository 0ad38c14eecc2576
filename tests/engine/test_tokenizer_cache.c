/* The tokenizer's word cache (engine/text/tokenizer_cache.c): ids with the cache, warm or cold, full
 * or thrashing, equal the uncached encoder's (tokenizer_set_cache(t, 0): the whole-text merge loop)
 * on seeded random text with repeated words, runs of spaces, multi-byte and invalid UTF-8, words
 * longer than a cache key and special-token texts, on every shared vocabulary and both models;
 * a vocabulary with U+2581 inside an entry is encoded whole; eviction keeps the memory fixed;
 * threads sharing one tokenizer and a small cache all get the uncached ids. */
#include "common/err.h"
#include "engine/gguf/gguf.h"
#include "engine/text/tokenizer.h"
#include "engine/text/tokenizer_priv.h"
#include "tests/testutil.h"

#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const paths[] = {
    "testdata/tokenizer/ggml-vocab-llama-spm.gguf",
    "testdata/tokenizer/ggml-vocab-phi-3.gguf",
    "testdata/tokenizer/ggml-vocab-gpt-2.gguf",
    "testdata/tokenizer/ggml-vocab-starcoder.gguf",
    "testdata/tokenizer/ggml-vocab-falcon.gguf",
    "testdata/tokenizer/ggml-vocab-deepseek-coder.gguf",
    "testdata/tokenizer/ggml-vocab-deepseek-llm.gguf",
    "models/tinyllamas/stories260K.gguf",
    "models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
};

/* Loads shared file `rel` twice: *cached with the default cache, *plain with none. false (after a
 * SKIP line) when the shared data is absent. */
static bool load_pair(const char *rel, struct tokenizer **cached, struct tokenizer **plain)
{
    const char *path = test_shared_path(rel);
    if (!path) return false;
    char err[256];
    struct gguf *g;
    ck_assert_msg(gguf_open(path, &g, err, sizeof(err)) == 0, "%s: %s", path, err);
    ck_assert_msg(tokenizer_load(g, cached, err, sizeof(err)) == 0, "%s: %s", path, err);
    ck_assert_msg(tokenizer_load(g, plain, err, sizeof(err)) == 0, "%s: %s", path, err);
    gguf_close(g);
    ck_assert_int_eq(tokenizer_set_cache(*plain, 0), 0);
    return true;
}

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static const char *const words[] = {
    "the",
    "The",
    "little",
    "girl",
    "Lily",
    "park",
    "play",
    "once",
    "upon",
    "a",
    "time",
    "tokenization",
    "don't",
    "it's",
    "3.14159",
    "12345678",
    "hello,",
    "world!",
    "(x)",
    "\"quoted\"",
    "caf\xc3\xa9",
    "na\xc3\xafve",
    "\xe4\xb8\xad\xe6\x96\x87",
    "\xf0\x9f\x98\x80",
    "<s>",
    "</s>",
    "<|endoftext|>",
    "<|im_start|>",
    "\xe2\x96\x81",
    "foo_bar",
    "x=1;",
    "->",
    "...",
    "\t",
};

/* A seeded random text of about `len` bytes into buf (cap >= len + 256); returns its length. */
static size_t random_text(uint64_t *seed, char *buf, size_t len)
{
    size_t n = 0;
    while (n < len) {
        uint64_t r = rnd(seed);
        switch (r % 16) {
        case 0: /* a run of spaces */
            for (size_t k = 1 + (r >> 8) % 5; k > 0; k--) buf[n++] = ' ';
            break;
        case 1:
            buf[n++] = '\n';
            if (r & 0x100) buf[n++] = '\n';
            break;
        case 2: /* invalid UTF-8: stray continuation and lead bytes */
            for (size_t k = 1 + (r >> 8) % 3; k > 0; k--)
                buf[n++] = (char)(0x80 + (rnd(seed) % 0x80));
            break;
        case 3: /* a word longer than a cache key */
            for (size_t k = 40 + (r >> 8) % 160; k > 0; k--)
                buf[n++] = (char)('a' + rnd(seed) % 26);
            break;
        case 4: /* random letters */
            for (size_t k = 1 + (r >> 8) % 12; k > 0; k--) buf[n++] = (char)('a' + rnd(seed) % 26);
            break;
        default: {
            const char *w = words[(r >> 8) % (sizeof(words) / sizeof(words[0]))];
            memcpy(buf + n, w, strlen(w));
            n += strlen(w);
            if (r & 0x10000) buf[n++] = ' ';
        }
        }
    }
    return n;
}

static void expect_same(const struct tokenizer *a, const struct tokenizer *b, const char *text,
                        size_t len, bool special, const char *what)
{
    int32_t *ia, *ib;
    size_t na, nb;
    ck_assert_int_eq(tokenizer_encode(a, text, len, special, special, &ia, &na), 0);
    ck_assert_int_eq(tokenizer_encode(b, text, len, special, special, &ib, &nb), 0);
    ck_assert_msg(na == nb, "%s: %zu ids cached, %zu uncached", what, na, nb);
    for (size_t i = 0; i < na; i++)
        ck_assert_msg(ia[i] == ib[i], "%s: id %zu is %d cached, %d uncached", what, i, ia[i],
                      ib[i]);
    free(ia);
    free(ib);
}

START_TEST(test_tokenizer_cache_exact_on_random_text)
{
    struct tokenizer *c, *p;
    if (!load_pair(paths[_i], &c, &p)) return;
    static char buf[8192];
    uint64_t seed = 0x9e3779b97f4a7c15ull + (uint64_t)_i;
    for (int round = 0; round < 40; round++) {
        size_t n = random_text(&seed, buf, 1 + rnd(&seed) % 4000);
        /* Twice: the first pass fills the cache, the second reads it. */
        expect_same(c, p, buf, n, round & 1, paths[_i]);
        expect_same(c, p, buf, n, round & 1, paths[_i]);
    }
    struct tokenizer_cache_stats st;
    tokenizer_cache_stats(c, &st);
    ck_assert_uint_gt(st.hits, st.misses); /* the repeated words were read back */
    ck_assert_uint_gt(st.inserts, 0);
    tokenizer_cache_stats(p, &st);
    ck_assert_uint_eq(st.hits + st.misses + st.words + st.bytes, 0);
    /* A 4-slot cache: nearly every word evicts another; still the same ids. */
    ck_assert_int_eq(tokenizer_set_cache(c, 4), 0);
    for (int round = 0; round < 10; round++) {
        size_t n = random_text(&seed, buf, 1 + rnd(&seed) % 2000);
        expect_same(c, p, buf, n, true, paths[_i]);
        expect_same(c, p, buf, n, false, paths[_i]);
    }
    tokenizer_cache_stats(c, &st);
    ck_assert_uint_gt(st.evictions, 0);
    ck_assert_uint_eq(st.words, 4);
    tokenizer_free(c);
    tokenizer_free(p);
}
END_TEST

START_TEST(test_tokenizer_cache_memory_is_fixed)
{
    struct tokenizer *c, *p;
    if (!load_pair(paths[0], &c, &p)) return;
    ck_assert_int_eq(tokenizer_set_cache(c, 100), 0);
    struct tokenizer_cache_stats before, after;
    tokenizer_cache_stats(c, &before);
    ck_assert_uint_eq(before.words, 128); /* rounded up to a power of two */
    ck_assert_uint_ge(before.bytes, 128 * (TOKENIZER_CACHE_KEY_MAX + 4 * TOKENIZER_CACHE_IDS_MAX));
    ck_assert_uint_le(before.bytes, 128 * 256);
    /* 5000 distinct words through 128 slots. */
    char w[32];
    for (int i = 0; i < 5000; i++) {
        int n = snprintf(w, sizeof(w), " w%dx%d", i, i * 7);
        expect_same(c, p, w, (size_t)n, false, "distinct words");
    }
    tokenizer_cache_stats(c, &after);
    ck_assert_uint_eq(after.bytes, before.bytes);
    ck_assert_uint_eq(after.words, before.words);
    ck_assert_uint_ge(after.evictions, after.inserts - 128);
    ck_assert_int_eq(tokenizer_set_cache(c, (size_t)1 << 25), ERR_TOO_BIG);
    tokenizer_cache_stats(c, &after);
    ck_assert_uint_eq(after.words, 128); /* the old cache kept */
    tokenizer_free(c);
    tokenizer_free(p);
}
END_TEST

/* A SentencePiece vocabulary with U+2581 inside an entry ("a▁b", reached through "▁b"): a merge may join two words, so the
 * encoder must not split the text into words; with the cache on it still gives "a▁b". */
START_TEST(test_tokenizer_cache_spm_entry_across_words)
{
    static const char *const toks[] = {"<unk>",
                                       "<s>",
                                       "</s>",
                                       "a",
                                       "b",
                                       "\xe2\x96\x81",
                                       "\xe2\x96\x81"
                                       "a",
                                       "a\xe2\x96\x81"
                                       "b",
                                       "\xe2\x96\x81"
                                       "b"};
    static const float scores[] = {0, 0, 0, -1, -1, -1, -2, -0.5f, -1.5f};
    static const int32_t types[] = {2, 3, 3, 1, 1, 1, 1, 1, 1};
    char path[512];
    snprintf(path, sizeof(path), "%s/cinfer-test-cache-vocab-%d.gguf", test_tmpdir(),
             (int)getpid());
    struct gguf_writer *w = gguf_writer_new();
    ck_assert_ptr_nonnull(w);
    ck_assert_int_eq(gguf_writer_set_str(w, "tokenizer.ggml.model", "llama"), 0);
    ck_assert_int_eq(gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 9), 0);
    ck_assert_int_eq(gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_FLOAT32, scores, 9), 0);
    ck_assert_int_eq(gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, types, 9), 0);
    ck_assert_int_eq(gguf_writer_write(w, path), 0);
    gguf_writer_free(w);
    struct gguf *g;
    char err[256];
    ck_assert_msg(gguf_open(path, &g, err, sizeof(err)) == 0, "%s", err);
    unlink(path);
    struct tokenizer *c, *p;
    ck_assert_msg(tokenizer_load(g, &c, err, sizeof(err)) == 0, "%s", err);
    ck_assert_msg(tokenizer_load(g, &p, err, sizeof(err)) == 0, "%s", err);
    gguf_close(g);
    ck_assert(!c->spm_words);
    ck_assert_int_eq(tokenizer_set_cache(p, 0), 0);
    int32_t *ids;
    size_t n;
    ck_assert_int_eq(tokenizer_encode(c, "xa b a b", 8, false, false, &ids, &n), 0);
    bool joined = false;
    for (size_t i = 0; i < n; i++) joined |= ids[i] == 7;
    ck_assert_msg(joined, "the entry across two words was not used");
    free(ids);
    expect_same(c, p, "xa b a b", 8, false, "across words");
    expect_same(c, p, "a b  a  b a b", 13, true, "across words");
    tokenizer_free(c);
    tokenizer_free(p);
    /* The shared SentencePiece vocabularies have no such entry: they are encoded word by word. */
    if (!load_pair(paths[0], &c, &p)) return;
    ck_assert(c->spm_words);
    tokenizer_free(c);
    tokenizer_free(p);
}
END_TEST

struct worker {
    const struct tokenizer *t;
    const char *text;
    size_t len;
    const int32_t *want;
    size_t n_want;
    int bad;
};

static void *encode_loop(void *arg)
{
    struct worker *w = arg;
    for (int i = 0; i < 200; i++) {
        int32_t *ids;
        size_t n;
        if (tokenizer_encode(w->t, w->text, w->len, true, true, &ids, &n) != 0 || n != w->n_want ||
            memcmp(ids, w->want, n * sizeof(*ids)) != 0)
            w->bad++;
        free(ids);
    }
    return NULL;
}

START_TEST(test_tokenizer_cache_shared_by_threads)
{
    struct tokenizer *c, *p;
    if (!load_pair(paths[_i], &c, &p)) return;
    ck_assert_int_eq(tokenizer_set_cache(c, 64),
                     0); /* small: the threads evict each other's words */
    enum { N = 4 };
    static char texts[N][2048];
    struct worker w[N];
    pthread_t th[N];
    uint64_t seed = 42;
    for (int k = 0; k < N; k++) {
        w[k] = (struct worker){.t = c, .text = texts[k]};
        w[k].len = random_text(&seed, texts[k], 1500);
        int32_t *ids;
        ck_assert_int_eq(tokenizer_encode(p, w[k].text, w[k].len, true, true, &ids, &w[k].n_want),
                         0);
        w[k].want = ids;
    }
    for (int k = 0; k < N; k++)
        ck_assert_int_eq(pthread_create(&th[k], NULL, encode_loop, &w[k]), 0);
    for (int k = 0; k < N; k++) {
        pthread_join(th[k], NULL);
        ck_assert_int_eq(w[k].bad, 0);
        free((void *)w[k].want);
    }
    tokenizer_free(c);
    tokenizer_free(p);
}
END_TEST

Suite *tokenizer_cache_suite(void);
Suite *tokenizer_cache_suite(void)
{
    Suite *s = suite_create("tokenizer_cache");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    int n = (int)(sizeof(paths) / sizeof(paths[0]));
    tcase_add_loop_test(tc, test_tokenizer_cache_exact_on_random_text, 0, n);
    tcase_add_test(tc, test_tokenizer_cache_memory_is_fixed);
    tcase_add_test(tc, test_tokenizer_cache_spm_entry_across_words);
    tcase_add_loop_test(tc, test_tokenizer_cache_shared_by_threads, 0, n);
    suite_add_tcase(s, tc);
    return s;
}
