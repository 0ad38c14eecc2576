/* Detokenizer: per-token pieces (byte tokens, U+2581, byte-level BPE), round trips
 * decode(encode(s)) == s over every test string of every shared vocabulary, llama.cpp's greedy text
 * for stories260K, and the streaming detokenizer with characters split across tokens and with
 * invalid byte sequences. */
#include "common/buf.h"
#include "common/utf8.h"
#include "common/err.h"
#include "engine/gguf/gguf.h"
#include "engine/text/tokenizer.h"
#include "engine/text/unicode.h"
#include "tests/testutil.h"

#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const char *const vocabs[] = {
    "llama-spm", "phi-3", "gpt-2", "starcoder", "falcon", "deepseek-coder", "deepseek-llm",
};

static struct tokenizer *load_path(const char *path)
{
    char err[256];
    struct gguf *g;
    struct tokenizer *t;
    ck_assert_msg(gguf_open(path, &g, err, sizeof(err)) == 0, "%s: %s", path, err);
    ck_assert_msg(tokenizer_load(g, &t, err, sizeof(err)) == 0, "%s: %s", path, err);
    gguf_close(g);
    return t;
}

static struct tokenizer *load_vocab(const char *name)
{
    char rel[256];
    snprintf(rel, sizeof(rel), "testdata/tokenizer/ggml-vocab-%s.gguf", name);
    const char *path = test_shared_path(rel);
    return path ? load_path(path) : NULL;
}

static void piece_eq(const struct tokenizer *t, int32_t id, bool special, const char *want)
{
    size_t len;
    const char *p = tokenizer_token_piece(t, id, special, &len);
    ck_assert_ptr_nonnull(p);
    ck_assert_msg(len == strlen(want) && memcmp(p, want, len) == 0,
                  "token %d: piece \"%.*s\", want \"%s\"", id, (int)len, p, want);
}

START_TEST(test_tokenizer_token_piece_maps_back_to_bytes)
{
    struct tokenizer *t = load_vocab("llama-spm");
    if (!t) return;
    piece_eq(t, 15043, false, " Hello"); /* "▁Hello" */
    piece_eq(t, 13, false, "\n");        /* "<0x0A>" */
    piece_eq(t, 1, false, "");           /* <s> is control: hidden unless special */
    piece_eq(t, 1, true, "<s>");
    size_t len = 7;
    ck_assert_ptr_null(tokenizer_token_piece(t, 32000, true, &len));
    ck_assert_uint_eq(len, 0);
    ck_assert_ptr_null(tokenizer_token_piece(t, -1, true, &len));
    tokenizer_free(t);

    t = load_vocab("gpt-2");
    if (!t) return;
    piece_eq(t, 995, false, " world"); /* "Ġworld" */
    piece_eq(t, 198, false, "\n");     /* "Ċ" */
    piece_eq(t, 50256, false, "");
    piece_eq(t, 50256, true, "<|endoftext|>");
    tokenizer_free(t);
}
END_TEST

/* Streams ids through a detokenizer, checking after every token that the output so far is valid
 * UTF-8; returns the flushed text in `out`. */
static void stream_all(const struct tokenizer *t, const int32_t *ids, size_t n, struct buf *out)
{
    struct tokenizer_detok d;
    tokenizer_detok_init(&d, t, false);
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(tokenizer_detok_push(&d, ids[i], out), 0);
        ck_assert_msg(utf8_valid(out->data ? out->data : "", out->len),
                      "invalid UTF-8 after token %zu", i);
    }
    ck_assert_int_eq(tokenizer_detok_flush(&d, out), 0);
}

/* Every vocabulary here is lossless on valid UTF-8: decoding the ids gives the input back (the
 * SentencePiece space prefix is dropped by tokenizer_decode), and streaming gives the same text. */
START_TEST(test_tokenizer_decode_round_trips_every_test_string)
{
    const char *name = vocabs[_i];
    struct tokenizer *t = load_vocab(name);
    if (!t) return;
    char rel[256];
    size_t n_inp;
    snprintf(rel, sizeof(rel), "testdata/tokenizer/ggml-vocab-%s.gguf.inp", name);
    char *inp = test_read_file(test_shared_path(rel), &n_inp);
    ck_assert_ptr_nonnull(inp);
    static const char sep[] = "\n__ggml_vocab_test__\n";
    int n_cases = 0;
    for (char *s = inp, *e; (e = strstr(s, sep)) != NULL; s = e + strlen(sep), n_cases++) {
        size_t len = (size_t)(e - s);
        int32_t *ids = NULL;
        size_t n = 0;
        struct buf dec, streamed;
        buf_init(&dec, 0);
        buf_init(&streamed, 0);
        ck_assert_int_eq(tokenizer_encode(t, s, len, false, false, &ids, &n), 0);
        ck_assert_int_eq(tokenizer_decode(t, ids, n, false, &dec), 0);
        ck_assert_msg(dec.len == len && memcmp(buf_cstr(&dec), s, len) == 0,
                      "%s case %d: decode gives \"%s\" for \"%.*s\"", name, n_cases, buf_cstr(&dec),
                      (int)len, s);
        stream_all(t, ids, n, &streamed);
        const char *sp = buf_cstr(&streamed);
        size_t sl = streamed.len;
        if (tokenizer_kind(t) == TOKENIZER_SPM && len > 0) { /* the stream keeps the prefix */
            ck_assert(sl > 0 && sp[0] == ' ');
            sp++, sl--;
        }
        ck_assert_msg(sl == len && memcmp(sp, s, len) == 0, "%s case %d: stream gives \"%s\"", name,
                      n_cases, buf_cstr(&streamed));
        buf_fini(&dec);
        buf_fini(&streamed);
        free(ids);
    }
    ck_assert_int_eq(n_cases, 46);
    free(inp);
    tokenizer_free(t);
}
END_TEST

START_TEST(test_tokenizer_detok_matches_llama_cpp_greedy_text)
{
    /* test_shared_path returns a static buffer: use each path before asking for the next. */
    const char *mpath = test_shared_path("models/tinyllamas/stories260K.gguf");
    if (!mpath) return;
    struct tokenizer *t = load_path(mpath);
    const char *jpath = test_shared_path("testdata/llamacpp/stories260K-F32.p0.json");
    if (!jpath) {
        tokenizer_free(t);
        return;
    }
    json_error_t jerr;
    json_t *j = json_load_file(jpath, 0, &jerr);
    ck_assert_msg(j, "%s", jerr.text);
    json_t *toks = json_object_get(j, "greedy_tokens");
    size_t n = json_array_size(toks);
    ck_assert_uint_gt(n, 0);
    int32_t *ids = malloc(n * sizeof(*ids));
    ck_assert_ptr_nonnull(ids);
    for (size_t i = 0; i < n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(toks, i));
    struct buf out;
    buf_init(&out, 0);
    stream_all(t, ids, n, &out);
    ck_assert_str_eq(buf_cstr(&out), json_string_value(json_object_get(j, "greedy_text")));
    buf_fini(&out);
    free(ids);
    json_decref(j);
    tokenizer_free(t);
}
END_TEST

/* SentencePiece byte fallback spells an emoji as four <0xXX> tokens: nothing may come out until
 * the fourth. */
START_TEST(test_tokenizer_detok_holds_split_characters)
{
    struct tokenizer *t = load_vocab("llama-spm");
    if (!t) return;
    /* <0xF0> <0x9F> <0xA6> <0x99> = U+1F999; byte token ids are byte + 3 in this vocabulary. */
    static const int32_t llama[] = {0xF0 + 3, 0x9F + 3, 0xA6 + 3, 0x99 + 3};
    struct tokenizer_detok d;
    struct buf out;
    buf_init(&out, 0);
    tokenizer_detok_init(&d, t, false);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(tokenizer_detok_push(&d, llama[i], &out), 0);
        ck_assert_uint_eq(out.len, 0);
    }
    ck_assert_int_eq(tokenizer_detok_push(&d, llama[3], &out), 0);
    ck_assert_str_eq(buf_cstr(&out), "\xf0\x9f\xa6\x99");
    ck_assert_int_eq(tokenizer_detok_flush(&d, &out), 0);
    ck_assert_str_eq(buf_cstr(&out), "\xf0\x9f\xa6\x99");

    /* An out-of-range id is refused without touching the state. */
    buf_reset(&out);
    ck_assert_int_eq(tokenizer_detok_push(&d, 0xE6 + 3, &out), 0); /* first byte of U+6211 */
    ck_assert_int_eq(tokenizer_detok_push(&d, 99999, &out), ERR_RANGE);
    ck_assert_int_eq(tokenizer_detok_push(&d, 0x88 + 3, &out), 0);
    ck_assert_uint_eq(out.len, 0);
    ck_assert_int_eq(tokenizer_detok_push(&d, 0x91 + 3, &out), 0);
    ck_assert_str_eq(buf_cstr(&out), "\xe6\x88\x91");
    buf_fini(&out);
    tokenizer_free(t);

    /* Byte-level BPE splits CJK and emoji across tokens too; every prefix stays valid. */
    static const char text[] = "\xe6\x88\x91\xe6\x83\xb3 \xf0\x9f\x98\xb6\xe2\x80\x8d\xf0\x9f"
                               "\x8c\xab\xef\xb8\x8f \xe1\x9e\x80\xe1\x9e\xb6 \xf0\x9f\xa6\x99";
    for (size_t v = 2; v < sizeof(vocabs) / sizeof(vocabs[0]); v++) {
        t = load_vocab(vocabs[v]);
        if (!t) return;
        int32_t *ids = NULL;
        size_t n = 0;
        ck_assert_int_eq(tokenizer_encode(t, text, sizeof(text) - 1, false, false, &ids, &n), 0);
        buf_init(&out, 0);
        stream_all(t, ids, n, &out);
        ck_assert_str_eq(buf_cstr(&out), text);
        buf_fini(&out);
        free(ids);
        tokenizer_free(t);
    }
}
END_TEST

START_TEST(test_tokenizer_detok_replaces_invalid_bytes)
{
    struct tokenizer *t = load_vocab("llama-spm");
    if (!t) return;
    struct tokenizer_detok d;
    struct buf out;
    buf_init(&out, 0);
    tokenizer_detok_init(&d, t, false);
    /* 0xFF can never start a character: replaced at once. */
    ck_assert_int_eq(tokenizer_detok_push(&d, 0xFF + 3, &out), 0);
    ck_assert_str_eq(buf_cstr(&out), "\xef\xbf\xbd");
    /* A lead byte followed by a non-continuation: U+FFFD, then the text. */
    buf_reset(&out);
    ck_assert_int_eq(tokenizer_detok_push(&d, 0xE6 + 3, &out), 0);
    ck_assert_int_eq(tokenizer_detok_push(&d, 15043, &out), 0); /* " Hello" */
    ck_assert_str_eq(buf_cstr(&out), "\xef\xbf\xbd Hello");
    /* Surrogates and overlong forms are invalid too. */
    buf_reset(&out);
    ck_assert_int_eq(tokenizer_detok_push(&d, 0xED + 3, &out), 0);
    ck_assert_int_eq(tokenizer_detok_push(&d, 0xA0 + 3, &out), 0);
    ck_assert_int_eq(tokenizer_detok_push(&d, 0xC0 + 3, &out), 0);
    ck_assert_str_eq(buf_cstr(&out), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
    /* A held incomplete character becomes U+FFFD at flush, and the stream is reusable. */
    buf_reset(&out);
    ck_assert_int_eq(tokenizer_detok_push(&d, 0xF0 + 3, &out), 0);
    ck_assert_int_eq(tokenizer_detok_push(&d, 0x9F + 3, &out), 0);
    ck_assert_uint_eq(out.len, 0);
    ck_assert_int_eq(tokenizer_detok_flush(&d, &out), 0);
    ck_assert_str_eq(buf_cstr(&out), "\xef\xbf\xbd");
    ck_assert_int_eq(tokenizer_detok_flush(&d, &out), 0);
    ck_assert_str_eq(buf_cstr(&out), "\xef\xbf\xbd");
    buf_fini(&out);

    /* tokenizer_decode refuses ids out of range before appending anything. */
    struct buf dec;
    buf_init(&dec, 0);
    ck_assert_int_eq(tokenizer_decode(t, (const int32_t[]){15043, -5}, 2, false, &dec), ERR_RANGE);
    ck_assert_uint_eq(dec.len, 0);
    /* A bounded output buffer reports ERR_TOO_BIG. */
    struct buf small;
    buf_init(&small, 3);
    ck_assert_int_eq(tokenizer_decode(t, (const int32_t[]){13, 15043}, 2, false, &small),
                     ERR_TOO_BIG);
    buf_fini(&small);
    buf_fini(&dec);
    tokenizer_free(t);
}
END_TEST

Suite *tokenizer_detok_suite(void);
Suite *tokenizer_detok_suite(void)
{
    Suite *s = suite_create("tokenizer_detok");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_tokenizer_token_piece_maps_back_to_bytes);
    tcase_add_loop_test(tc, test_tokenizer_decode_round_trips_every_test_string, 0,
                        (int)(sizeof(vocabs) / sizeof(vocabs[0])));
    tcase_add_test(tc, test_tokenizer_detok_matches_llama_cpp_greedy_text);
    tcase_add_test(tc, test_tokenizer_detok_holds_split_characters);
    tcase_add_test(tc, test_tokenizer_detok_replaces_invalid_bytes);
    suite_add_tcase(s, tc);
    return s;
}
