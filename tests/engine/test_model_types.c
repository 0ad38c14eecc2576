/* Every tensor type end to end against llama.cpp. A tiny random llama (gen-model; llamacpp-quantize
 * .json pins its bytes) is quantized here tensor by tensor to the types llama.cpp's quantizer chose
 * for each file type (Q4_K_M, Q3_K_M, Q2_K, IQ4_XS, ...: byte-identical to llama.cpp's files, see
 * test_quant.c), loaded and run; its prompt logits and greedy steps are compared with llama.cpp's on
 * its own file (hack/gen-quant-refs.py wrote tests/testdata/quant/llamacpp-logits.gguf).
 *
 * Why the outputs differ at all, and the bounds. Both engines multiply the same integer quants, and
 * the activations are quantized as llama.cpp's x86 CPU backend does: Q8_K by quantize_row_q8_K_ref;
 * Q8_0 as its AVX quantize_row_q8_0 (127 / amax, halves to even: not the reference's 1 / d and
 * halves away from zero, which differ on every exact tie, and a Q4_0 or Q4_1 embedding row after RMS
 * norm is full of ties: that alone made Q4_0/Q5_0 differ by 1.5e-2 to 1.7e-2); Q4_1/Q5_1's offset
 * term with Q8_1's s (d * sum rounded to f16: exact sums made Q5_1 differ by 1.7e-2). What remains
 * is float summation order (we do not reproduce ggml's eight-lane partial sums in every kernel),
 * which the f16 KV cache and the int8 activations now and then round to different values. On a
 * model this small (random weights, logits about +-1) one such rounding decision moves the logits
 * by 1e-3 to 1e-2, so the bounds are in three tiers, measured 2026-12-02 (max / mean |diff|):
 *  - F16, BF16: llama.cpp multiplies F16/BF16 weights with activations rounded to F16/BF16 (their
 *    vec_dot_type); we keep them f32. Measured 6.5e-4 / 1.2e-4 (F16) and 4.3e-3 / 8.3e-4 (BF16);
 *    with the activations rounded as llama.cpp does (a temporary experiment) 2.2e-6 and 1.2e-7.
 *  - Q4_1, Q3_K_M: some rounding decision differs: 1.0e-2 / 1.6e-3 and 1.3e-2 / 1.4e-3. llama.cpp
 *    against itself with flash attention on and off (different f16 roundings in attention) differs
 *    by 1.5e-2 / 2.7e-3 and 1.7e-2 / 3.1e-3 on the same files: this is the model's noise floor.
 *  - every other type: no rounding decision differs on this model, at most 1.8e-7 / 2.0e-8. The
 *    bound is tight on purpose: a quantizer change (rounding, scale) shows here as 1e-2. If a
 *    kernel change that only reorders float operations fails it, compare with the noise floor
 *    above before moving the type to that tier.
 * Greedy steps are teacher-forced with llama.cpp's tokens and must agree wherever its top-2 margin
 * exceeds twice the type's logit bound (plus 1e-3), which a difference within the bound cannot
 * overturn. */
#include "engine/gguf/gguf.h"
#include "engine/gguf/quant.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/model.h"
#include "engine/tools/gen_model.h"

#include "common/err.h"
#include "tests/testutil.h"

#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define REF_QUANTIZE "tests/testdata/quant/llamacpp-quantize.json"
#define REF_LOGITS   "tests/testdata/quant/llamacpp-logits.gguf"

/* The file types recorded, with the largest and mean absolute logit difference allowed. */
static const struct {
    const char *ftype;
    double max_tol, mean_tol;
} ftypes[] = {
    {"F16", 2e-3, 3e-4},    {"BF16", 1e-2, 2e-3},   {"Q8_0", 1e-5, 1e-6},   {"Q4_0", 1e-5, 1e-6},
    {"Q4_1", 3e-2, 5e-3},   {"Q5_0", 1e-5, 1e-6},   {"Q5_1", 1e-5, 1e-6},   {"Q2_K", 1e-5, 1e-6},
    {"Q3_K_M", 3e-2, 5e-3}, {"Q4_K_M", 1e-5, 1e-6}, {"Q5_K_M", 1e-5, 1e-6}, {"Q6_K", 1e-5, 1e-6},
    {"IQ4_NL", 1e-5, 1e-6}, {"IQ4_XS", 1e-5, 1e-6},
};

/* Writes the gen-model llama of the references, its tensors quantized to the types of `file` in the
 * quantize references, to `out`. */
static void write_typed_model(json_t *ref, const char *file, const char *out)
{
    json_t *gm = json_object_get(ref, "gen_model");
    struct gen_model_opts o;
    gen_model_defaults(&o);
    o.type = QUANT_F32;
    o.dim = (uint32_t)json_integer_value(json_object_get(gm, "dim"));
    o.layers = (uint32_t)json_integer_value(json_object_get(gm, "layers"));
    o.heads = (uint32_t)json_integer_value(json_object_get(gm, "heads"));
    o.kv_heads = (uint32_t)json_integer_value(json_object_get(gm, "kv_heads"));
    o.ffn = (uint32_t)json_integer_value(json_object_get(gm, "ffn"));
    o.vocab_size = (uint32_t)json_integer_value(json_object_get(gm, "vocab_size"));
    o.context_length = (uint32_t)json_integer_value(json_object_get(gm, "context_length"));
    o.seed = (uint64_t)json_integer_value(json_object_get(gm, "seed"));
    char src_path[600], err[256];
    snprintf(src_path, sizeof(src_path), "%s.f32", out);
    ck_assert_msg(gen_model_write(&o, src_path, err, sizeof(err)) == 0, "%s", err);
    struct gguf *src = NULL;
    ck_assert_msg(gguf_open(src_path, &src, err, sizeof(err)) == 0, "%s", err);
    json_t *types = json_object_get(json_object_get(ref, "files"), file);
    ck_assert_msg(types != NULL, "%s not in %s", file, REF_QUANTIZE);
    struct gguf_writer *w = gguf_writer_new();
    ck_assert_ptr_nonnull(w);
    for (size_t i = 0; i < gguf_kv_count(src); i++)
        ck_assert_int_eq(gguf_writer_set_kv(w, gguf_kv_at(src, i)), 0);
    size_t n = gguf_tensor_count(src);
    void **bufs = calloc(n, sizeof(*bufs));
    for (size_t i = 0; i < n; i++) {
        const struct gguf_tensor *t = gguf_tensor_at(src, i);
        enum quant_type type;
        const char *tn =
            json_string_value(json_object_get(json_object_get(types, t->name), "type"));
        ck_assert_msg(tn && quant_type_parse(tn, &type), "%s: %s has no type", file, t->name);
        size_t elems = (size_t)(t->size / sizeof(float));
        size_t bytes = quant_row_bytes(type, t->ne[0]) * (elems / (size_t)t->ne[0]);
        float *x = malloc(t->size);
        bufs[i] = malloc(bytes);
        memcpy(x, t->data, t->size);
        ck_assert_int_eq(quant_quantize_row(type, x, bufs[i], elems), 0);
        free(x);
        ck_assert_int_eq(gguf_writer_add_tensor(w, t->name, type, t->n_dims, t->ne, bufs[i], bytes),
                         0);
    }
    ck_assert_int_eq(gguf_writer_write(w, out), 0);
    gguf_writer_free(w);
    for (size_t i = 0; i < n; i++) free(bufs[i]);
    free(bufs);
    gguf_close(src);
    unlink(src_path);
}

static int argmax(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Runs n tokens of `seq` at the end of its context; returns the logits rows (borrowed). */
static const float *run(struct model *m, struct kv_cache *kv, int seq, const int32_t *tok, int n,
                        bool all)
{
    struct kv_cache_copy cp;
    int pos = kv_cache_seq_len(kv, seq);
    ck_assert_int_eq(kv_cache_seq_append(kv, seq, n, &cp), 0);
    struct model_batch_entry e = {seq, pos, n, tok, all ? MODEL_LOGITS_ALL : MODEL_LOGITS_LAST};
    const float *logits;
    int rows;
    ck_assert_int_eq(model_forward(m, kv, &e, 1, &logits, &rows), 0);
    ck_assert_int_eq(rows, all ? n : 1);
    return logits;
}

static int64_t arr_i64(const struct gguf_array *a, uint64_t i)
{
    int64_t v = 0;
    ck_assert_int_eq(gguf_arr_get_i64(a, i, &v), 0);
    return v;
}

START_TEST(test_model_every_type_matches_llamacpp)
{
    const char *ft = ftypes[_i].ftype;
    json_error_t je;
    json_t *ref = json_load_file(REF_QUANTIZE, 0, &je);
    ck_assert_msg(ref != NULL, "%s", je.text);
    char path[512], err[256], key[64];
    snprintf(path, sizeof(path), "%s/cinfer-types-%s-%d.gguf", test_tmpdir(), ft, (int)getpid());
    write_typed_model(ref, ft, path);
    json_decref(ref);

    struct gguf *lg = NULL;
    ck_assert_msg(gguf_open(REF_LOGITS, &lg, err, sizeof(err)) == 0, "%s", err);
    const struct gguf_array *prompt, *greedy, *margin;
    ck_assert_int_eq(gguf_get_arr(lg, "prompt", &prompt), 0);
    snprintf(key, sizeof(key), "%s.greedy", ft);
    ck_assert_int_eq(gguf_get_arr(lg, key, &greedy), 0);
    snprintf(key, sizeof(key), "%s.margin", ft);
    ck_assert_int_eq(gguf_get_arr(lg, key, &margin), 0);
    snprintf(key, sizeof(key), "logits.%s", ft);
    const struct gguf_tensor *want = gguf_find_tensor(lg, key);
    ck_assert_msg(want && want->type == QUANT_F32, "%s missing", key);

    struct model_options opt;
    model_options_default(&opt); /* an F16 KV cache, as llama.cpp's default */
    opt.n_threads = 2;
    struct model *m = NULL;
    ck_assert_msg(model_load(path, &opt, &m, err, sizeof(err)) == 0, "%s: %s", ft, err);
    unlink(path); /* the mapping stays valid */
    int n_vocab = model_hparams(m)->n_vocab, n_prompt = (int)prompt->n;
    ck_assert_uint_eq(want->ne[0], (uint64_t)n_vocab);
    ck_assert_uint_eq(want->ne[1], (uint64_t)n_prompt);
    struct kv_cache *kv = NULL;
    struct kv_cache_config kc = {8, 16, 1, 8};
    ck_assert_int_eq(kv_cache_new(&kc, &kv), 0);
    ck_assert_int_eq(model_kv_init(m, kv), 0);
    int seq;
    ck_assert_int_eq(kv_cache_seq_open(kv, &seq), 0);

    int32_t toks[64];
    for (int i = 0; i < n_prompt; i++) toks[i] = (int32_t)arr_i64(prompt, (uint64_t)i);
    const float *got = run(m, kv, seq, toks, n_prompt, true);
    double worst = 0.0, sum = 0.0;
    for (int t = 0; t < n_prompt; t++) {
        const float *w = (const float *)want->data + (size_t)t * n_vocab;
        for (int i = 0; i < n_vocab; i++) {
            double d = fabs((double)got[(size_t)t * n_vocab + i] - w[i]);
            worst = d > worst ? d : worst;
            sum += d;
        }
    }
    double mean = sum / ((double)n_prompt * n_vocab);
    ck_assert_msg(worst <= ftypes[_i].max_tol && mean <= ftypes[_i].mean_tol,
                  "%s: prompt logits differ from llama.cpp's by %.3g at most, %.3g on average "
                  "(bounds %.3g, %.3g)",
                  ft, worst, mean, ftypes[_i].max_tol, ftypes[_i].mean_tol);

    /* greedy, teacher-forced with llama.cpp's tokens */
    int32_t tok = (int32_t)argmax(got + (size_t)(n_prompt - 1) * n_vocab, n_vocab);
    int checked = 0;
    double need = 2.0 * ftypes[_i].max_tol + 1e-3;
    for (uint64_t i = 0; i < greedy->n; i++) {
        int32_t ref_tok = (int32_t)arr_i64(greedy, i);
        double mg = 0.0;
        ck_assert_int_eq(gguf_arr_get_f64(margin, i, &mg), 0);
        if (mg > need) {
            ck_assert_msg(tok == ref_tok, "%s: greedy step %d is %d, llama.cpp %d (margin %.3f)",
                          ft, (int)i, tok, ref_tok, mg);
            checked++;
        }
        if (i + 1 < greedy->n) tok = (int32_t)argmax(run(m, kv, seq, &ref_tok, 1, false), n_vocab);
    }
    ck_assert_msg(checked > 0, "%s: no greedy step with a margin above %.3g", ft, need);
    printf("%s: prompt logits max |diff| %.3g, mean %.3g; %d greedy steps checked\n", ft, worst,
           mean, checked);
    kv_cache_free(kv);
    model_free(m);
    gguf_close(lg);
}
END_TEST

Suite *model_types_suite(void)
{
    Suite *s = suite_create("model_types");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_model_every_type_matches_llamacpp, 0,
                        (int)(sizeof(ftypes) / sizeof(ftypes[0])));
    suite_add_tcase(s, tc);
    return s;
}
