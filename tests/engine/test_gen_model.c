/* Tests for `cinfer-engine gen-model` (engine/tools/gen_model.c, engine/cmd/cmd_gen_model.c) and
 * `cinfer-engine quantize` (engine/cmd/cmd_quantize.c), driven through their command entry points:
 * llama.cpp names, shapes, types and metadata; determinism per seed; weight statistics; and
 * quantize output identical, tensor by tensor, to llama.cpp's stories260K Q8_0/Q4_0 files. */
#include "engine/cmd/cmd.h"
#include "engine/gguf/gguf.h"
#include "engine/model/model.h"
#include "engine/tools/gen_model.h"

#include "common/err.h"
#include "tests/testutil.h"

#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void tmp_path(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/cinfer_test_gen_%ld_%s", test_tmpdir(), (long)getpid(), name);
}

/* Runs a command main with a NULL-terminated argument list. */
static int run_cmd(int (*fn)(int, char **), const char *first, ...)
{
    char *argv[40];
    int argc = 0;
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a && argc < 39; a = va_arg(ap, const char *))
        argv[argc++] = (char *)a;
    va_end(ap);
    argv[argc] = NULL;
    return fn(argc, argv);
}

static struct gguf *open_ok(const char *path)
{
    struct gguf *g = NULL;
    char err[256];
    ck_assert_msg(gguf_open(path, &g, err, sizeof(err)) == 0, "%s", err);
    return g;
}

static uint32_t get_u32(const struct gguf *g, const char *key)
{
    uint32_t v = 0;
    ck_assert_msg(gguf_get_u32(g, key, &v) == 0, "missing %s", key);
    return v;
}

static bool files_equal(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    ck_assert(fa && fb);
    bool eq = true;
    int ca, cb;
    do {
        ca = fgetc(fa);
        cb = fgetc(fb);
        if (ca != cb) eq = false;
    } while (eq && ca != EOF);
    fclose(fa);
    fclose(fb);
    return eq;
}

#define SMALL_SHAPE "--dim", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--ffn", "80"

START_TEST(test_gen_model_small_q8_0)
{
    char path[512];
    tmp_path(path, sizeof(path), "small_q8.gguf");
    ck_assert_int_eq(run_cmd(cmd_gen_model_main, "gen-model", "--out", path, "--type", "q8_0",
                             SMALL_SHAPE, "--vocab-size", "300", "--context-length", "512",
                             "--log-level", "error", NULL),
                     0);
    struct gguf *g = open_ok(path);
    char arch[16];
    ck_assert_int_eq(gguf_get_cstr(g, "general.architecture", arch, sizeof(arch)), 0);
    ck_assert_str_eq(arch, "llama");
    ck_assert_uint_eq(get_u32(g, "general.file_type"), 7);
    ck_assert_uint_eq(get_u32(g, "general.quantization_version"), 2);
    ck_assert_uint_eq(get_u32(g, "llama.context_length"), 512);
    ck_assert_uint_eq(get_u32(g, "llama.embedding_length"), 64);
    ck_assert_uint_eq(get_u32(g, "llama.block_count"), 2);
    ck_assert_uint_eq(get_u32(g, "llama.feed_forward_length"), 80);
    ck_assert_uint_eq(get_u32(g, "llama.attention.head_count"), 4);
    ck_assert_uint_eq(get_u32(g, "llama.attention.head_count_kv"), 2);
    ck_assert_uint_eq(get_u32(g, "llama.rope.dimension_count"), 16);
    ck_assert_uint_eq(get_u32(g, "llama.vocab_size"), 300);
    ck_assert_uint_eq(get_u32(g, "tokenizer.ggml.bos_token_id"), 1);
    float f;
    ck_assert_int_eq(gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f), 0);
    ck_assert_float_eq(f, 1e-5f);
    ck_assert_int_eq(gguf_get_f32(g, "llama.rope.freq_base", &f), 0);
    ck_assert_float_eq(f, 10000.0f);
    const struct gguf_array *toks, *types;
    ck_assert_int_eq(gguf_get_arr(g, "tokenizer.ggml.tokens", &toks), 0);
    ck_assert_uint_eq(toks->n, 300);
    ck_assert_int_eq(memcmp(toks->strs[3].data, "<0x00>", 6), 0);
    ck_assert_int_eq(memcmp(toks->strs[258].data, "<0xFF>", 6), 0);
    ck_assert_int_eq(gguf_get_arr(g, "tokenizer.ggml.token_type", &types), 0);
    int64_t tt;
    ck_assert_int_eq(gguf_arr_get_i64(types, 100, &tt), 0);
    ck_assert_int_eq(tt, 6); /* byte token */

    /* 1 + 9 per layer + output_norm + output */
    ck_assert_uint_eq(gguf_tensor_count(g), 1 + 9 * 2 + 2);
    const struct {
        const char *name;
        uint64_t ne0, ne1;
        enum quant_type type;
    } want[] = {
        {"token_embd.weight", 64, 300, QUANT_Q8_0},
        {"blk.0.attn_norm.weight", 64, 1, QUANT_F32},
        {"blk.0.attn_q.weight", 64, 64, QUANT_Q8_0},
        {"blk.1.attn_k.weight", 64, 32, QUANT_Q8_0},
        {"blk.1.attn_v.weight", 64, 32, QUANT_Q8_0},
        {"blk.1.attn_output.weight", 64, 64, QUANT_Q8_0},
        {"blk.1.ffn_norm.weight", 64, 1, QUANT_F32},
        {"blk.0.ffn_gate.weight", 64, 80, QUANT_Q8_0},
        {"blk.0.ffn_up.weight", 64, 80, QUANT_Q8_0},
        {"blk.0.ffn_down.weight", 80, 64, QUANT_F32},
        {"output_norm.weight", 64, 1, QUANT_F32},
        {"output.weight", 64, 300, QUANT_Q8_0},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        const struct gguf_tensor *t = gguf_find_tensor(g, want[i].name);
        ck_assert_msg(t != NULL, "missing %s", want[i].name);
        ck_assert_uint_eq(t->ne[0], want[i].ne0);
        ck_assert_uint_eq(t->ne[1], want[i].ne1);
        ck_assert_uint_eq(t->n_dims, want[i].ne1 == 1 ? 1 : 2);
        ck_assert_msg(t->type == want[i].type, "%s is %s", want[i].name, quant_type_name(t->type));
    }
    const struct gguf_tensor *norm = gguf_find_tensor(g, "blk.1.attn_norm.weight");
    for (int i = 0; i < 64; i++) ck_assert_float_eq(((const float *)norm->data)[i], 1.0f);
    gguf_close(g);
    unlink(path);
}
END_TEST

START_TEST(test_gen_model_weights_are_normal)
{
    char path[512];
    tmp_path(path, sizeof(path), "stats.gguf");
    ck_assert_int_eq(run_cmd(cmd_gen_model_main, "gen-model", "--out", path, "--dim", "256",
                             "--layers", "1", "--heads", "4", "--kv-heads", "4", "--ffn", "512",
                             "--vocab-size", "1000", "--log-level", "error", NULL),
                     0);
    struct gguf *g = open_ok(path);
    const struct gguf_tensor *t = gguf_find_tensor(g, "token_embd.weight");
    ck_assert_int_eq(t->type, QUANT_F32);
    size_t n = (size_t)(t->ne[0] * t->ne[1]);
    const float *x = t->data;
    double sum = 0, sq = 0;
    size_t beyond3 = 0;
    for (size_t i = 0; i < n; i++) {
        sum += x[i];
        sq += (double)x[i] * x[i];
        if (fabs(x[i]) > 3 * 0.02) beyond3++;
    }
    double mean = sum / (double)n, sd = sqrt(sq / (double)n - mean * mean);
    ck_assert_double_lt(fabs(mean), 0.0005); /* 256000 samples: standard error 4e-5 */
    ck_assert_double_lt(fabs(sd - 0.02), 0.0005);
    /* Normal tails: 0.27% beyond 3 sigma. */
    ck_assert_double_gt((double)beyond3 / (double)n, 0.0015);
    ck_assert_double_lt((double)beyond3 / (double)n, 0.004);
    /* Different tensors draw different streams. */
    const struct gguf_tensor *q = gguf_find_tensor(g, "blk.0.attn_q.weight");
    ck_assert(memcmp(q->data, t->data, 1024) != 0);
    gguf_close(g);
    unlink(path);
}
END_TEST

START_TEST(test_gen_model_deterministic_per_seed)
{
    char a[512], b[512], c[512];
    tmp_path(a, sizeof(a), "seed_a.gguf");
    tmp_path(b, sizeof(b), "seed_b.gguf");
    tmp_path(c, sizeof(c), "seed_c.gguf");
    ck_assert_int_eq(run_cmd(cmd_gen_model_main, "gen-model", "--out", a, "--type", "q4_0",
                             SMALL_SHAPE, "--vocab-size", "260", "--seed", "7", "--log-level",
                             "error", NULL),
                     0);
    ck_assert_int_eq(run_cmd(cmd_gen_model_main, "gen-model", "--out", b, "--type", "q4_0",
                             SMALL_SHAPE, "--vocab-size", "260", "--seed", "7", "--log-level",
                             "error", NULL),
                     0);
    ck_assert_int_eq(run_cmd(cmd_gen_model_main, "gen-model", "--out", c, "--type", "q4_0",
                             SMALL_SHAPE, "--vocab-size", "260", "--seed", "8", "--log-level",
                             "error", NULL),
                     0);
    ck_assert(files_equal(a, b));
    ck_assert(!files_equal(a, c));
    unlink(a);
    unlink(b);
    unlink(c);
}
END_TEST

START_TEST(test_gen_model_tied_output_and_f16)
{
    char path[512];
    tmp_path(path, sizeof(path), "tied.gguf");
    ck_assert_int_eq(run_cmd(cmd_gen_model_main, "gen-model", "--out", path, "--type", "f16",
                             SMALL_SHAPE, "--vocab-size", "259", "--tied-output", "--log-level",
                             "error", NULL),
                     0);
    struct gguf *g = open_ok(path);
    ck_assert_ptr_null(gguf_find_tensor(g, "output.weight"));
    ck_assert_uint_eq(gguf_tensor_count(g), 1 + 9 * 2 + 1);
    ck_assert_uint_eq(get_u32(g, "general.file_type"), 1);
    ck_assert_int_eq(gguf_find_tensor(g, "blk.0.ffn_down.weight")->type, QUANT_F16);
    ck_assert_int_eq(gguf_find_tensor(g, "token_embd.weight")->type, QUANT_F16);
    ck_assert_int_eq(gguf_find_tensor(g, "output_norm.weight")->type, QUANT_F32);
    gguf_close(g);
    unlink(path);
}
END_TEST

START_TEST(test_gen_model_vocab_from_shared)
{
    const char *vocab = test_shared_path("testdata/tokenizer/ggml-vocab-llama-spm.gguf");
    if (!vocab) return;
    char path[512];
    tmp_path(path, sizeof(path), "vocab.gguf");
    ck_assert_int_eq(run_cmd(cmd_gen_model_main, "gen-model", "--out", path, "--type", "q8_0",
                             "--dim", "64", "--layers", "1", "--heads", "2", "--kv-heads", "1",
                             "--ffn", "128", "--vocab-from", vocab, "--log-level", "error", NULL),
                     0);
    struct gguf *g = open_ok(path), *v = open_ok(vocab);
    size_t copied = 0;
    for (size_t i = 0; i < gguf_kv_count(v); i++) {
        const struct gguf_kv *src = gguf_kv_at(v, i);
        if (strncmp(src->key, "tokenizer.", 10) != 0) continue;
        const struct gguf_kv *dst = gguf_find(g, src->key);
        ck_assert_msg(dst != NULL && dst->type == src->type, "%s not copied", src->key);
        copied++;
    }
    ck_assert_uint_ge(copied, 8);
    const struct gguf_array *toks;
    ck_assert_int_eq(gguf_get_arr(g, "tokenizer.ggml.tokens", &toks), 0);
    ck_assert_uint_eq(toks->n, 32000);
    ck_assert_uint_eq(get_u32(g, "llama.vocab_size"), 32000);
    ck_assert_uint_eq(gguf_find_tensor(g, "token_embd.weight")->ne[1], 32000);
    ck_assert_uint_eq(gguf_find_tensor(g, "blk.0.attn_k.weight")->ne[1], 32);
    gguf_close(g);
    gguf_close(v);
    unlink(path);
}
END_TEST

START_TEST(test_gen_model_rejects_bad_options)
{
    char path[512];
    tmp_path(path, sizeof(path), "bad.gguf");
    ck_assert_int_eq(run_cmd(cmd_gen_model_main, "gen-model", "--log-level", "error", NULL), 2);
    ck_assert_int_eq(run_cmd(cmd_gen_model_main, "gen-model", "--out", path, "--type", "iq2_xxs",
                             "--log-level", "error", NULL),
                     2);
    ck_assert_int_eq(run_cmd(cmd_gen_model_main, "gen-model", "--out", path, "--dim", "100",
                             "--heads", "3", "--log-level", "error", NULL),
                     2);
    ck_assert_int_eq(run_cmd(cmd_gen_model_main, "gen-model", "--out", path, "--dim", "64",
                             "--heads", "4", "--kv-heads", "3", "--log-level", "error", NULL),
                     2);
    ck_assert_int_eq(run_cmd(cmd_gen_model_main, "gen-model", "--out", path, "--dim", "64",
                             "--heads", "4", "--kv-heads", "4", "--layers", "1", "--vocab-from",
                             "/nonexistent.gguf", "--log-level", "error", NULL),
                     1);
    static const char *const bad[][6] = {
        {"--arch", "gpt2"},
        {"--arch", "qwen2moe"},                             /* no experts */
        {"--arch", "qwen2", "--experts", "4"},              /* experts on a dense architecture */
        {"--experts", "2", "--experts-used", "3"},          /* more used than there are */
        {"--sliding-window", "8"},                          /* gemma only */
        {"--arch", "qwen2", "--rope-scaling", "llama3"},    /* llama only */
        {"--arch", "gemma2", "--rope-scaling", "longrope"}, /* phi3 only */
        {"--head-dim", "15"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(run_cmd(cmd_gen_model_main, "gen-model", "--out", path, SMALL_SHAPE,
                              "--log-level", "error", bad[i][0], bad[i][1], bad[i][2], bad[i][3],
                              bad[i][4], bad[i][5], NULL) == 2,
                      "bad case %zu accepted", i);
    ck_assert_int_eq(access(path, F_OK), -1);
    struct gen_model_opts o;
    gen_model_defaults(&o);
    ck_assert_uint_eq(gen_model_param_count(&o, 32000), 134105856);
    char err[256];
    o.type = (enum quant_type)16; /* IQ2_XXS: no encoder */
    ck_assert_int_eq(gen_model_write(&o, path, err, sizeof(err)), ERR_INVAL);
    ck_assert(strstr(err, "type 16") != NULL);
}
END_TEST

/* User-defined tokens replace the last fillers of a generated vocabulary, typed 4 (llama.cpp's
 * USER_DEFINED); they need a generated vocabulary with room for them. */
START_TEST(test_gen_model_user_tokens)
{
    char path[512];
    tmp_path(path, sizeof(path), "user_tokens.gguf");
    struct gen_model_opts o;
    gen_model_defaults(&o);
    o.dim = 64, o.layers = 1, o.heads = 4, o.kv_heads = 4, o.ffn = 80;
    o.vocab_size = 262;
    const char *user[] = {"<tool_call>", "</tool_call>"};
    o.user_tokens = user;
    o.n_user_tokens = 2;
    char err[256] = "";
    ck_assert_msg(gen_model_write(&o, path, err, sizeof(err)) == 0, "%s", err);
    struct gguf *g = open_ok(path);
    const struct gguf_array *toks, *types;
    ck_assert_int_eq(gguf_get_arr(g, "tokenizer.ggml.tokens", &toks), 0);
    ck_assert_uint_eq(toks->n, 262);
    ck_assert_int_eq(toks->strs[260].len, 11);
    ck_assert_int_eq(memcmp(toks->strs[260].data, "<tool_call>", 11), 0);
    ck_assert_int_eq(memcmp(toks->strs[261].data, "</tool_call>", 12), 0);
    ck_assert_int_eq(gguf_get_arr(g, "tokenizer.ggml.token_type", &types), 0);
    int64_t tt;
    ck_assert_int_eq(gguf_arr_get_i64(types, 261, &tt), 0);
    ck_assert_int_eq(tt, 4);
    ck_assert_int_eq(gguf_arr_get_i64(types, 259, &tt), 0);
    ck_assert_int_eq(tt, 1); /* the filler before them */
    gguf_close(g);
    unlink(path);
    o.n_user_tokens = 4; /* 262 - 259 = 3 fillers */
    const char *four[] = {"a", "b", "c", "d"};
    o.user_tokens = four;
    ck_assert_int_eq(gen_model_write(&o, path, err, sizeof(err)), ERR_INVAL);
    const char *empty[] = {""};
    o.user_tokens = empty;
    o.n_user_tokens = 1;
    ck_assert_int_eq(gen_model_write(&o, path, err, sizeof(err)), ERR_INVAL);
    ck_assert(strstr(err, "empty") != NULL);
    ck_assert_int_eq(access(path, F_OK), -1);
}
END_TEST

/* Every architecture: the tensors llama.cpp's loader looks for, with their shapes, the keys that
 * select the architecture's features, and a file the engine loads with those hyper-parameters. */
START_TEST(test_gen_model_architectures)
{
    static const struct {
        const char *arch;
        const char *extra[8];
        const char *tensor; /* one tensor only that architecture has */
        uint64_t ne[3];
        const char *key; /* one key it writes */
    } cases[] = {
        {"llama",
         {"--rope-scaling", "llama3", "--rope-factor", "8"},
         "rope_freqs.weight",
         {8, 1, 1},
         NULL},
        {"llama",
         {"--experts", "4", "--experts-used", "2"},
         "blk.1.ffn_down_exps.weight",
         {80, 64, 4},
         "llama.expert_count"},
        {"qwen2",
         {"--rope-scaling", "yarn"},
         "blk.0.attn_k.bias",
         {32, 1, 1},
         "qwen2.rope.scaling.original_context_length"},
        {"qwen3",
         {"--head-dim", "32"},
         "blk.0.attn_q_norm.weight",
         {32, 1, 1},
         "qwen3.attention.key_length"},
        {"qwen2moe",
         {"--experts", "4", "--experts-used", "2", "--shared-ffn", "48"},
         "blk.0.ffn_down_shexp.weight",
         {48, 64, 1},
         "qwen2moe.expert_shared_feed_forward_length"},
        {"qwen3moe",
         {"--experts", "8", "--experts-used", "2", "--expert-ffn", "32"},
         "blk.1.ffn_gate_exps.weight",
         {64, 32, 8},
         "qwen3moe.expert_feed_forward_length"},
        {"gemma2",
         {"--sliding-window", "8"},
         "blk.1.post_ffw_norm.weight",
         {64, 1, 1},
         "gemma2.attention.sliding_window"},
        {"gemma3",
         {"--sliding-window", "8", "--swa-pattern", "2"},
         "blk.0.post_attention_norm.weight",
         {64, 1, 1},
         "gemma3.attention.sliding_window_pattern"},
        {"phi3",
         {"--rope-scaling", "longrope", "--rope-orig-context", "128"},
         "blk.0.attn_qkv.weight",
         {64, 128, 1},
         "phi3.rope.scaling.attn_factor"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char path[512];
        tmp_path(path, sizeof(path), "arch.gguf");
        const char *const *x = cases[i].extra;
        ck_assert_msg(run_cmd(cmd_gen_model_main, "gen-model", "--out", path, "--arch",
                              cases[i].arch, SMALL_SHAPE, "--vocab-size", "300", "--log-level",
                              "error", x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], NULL) == 0,
                      "case %zu (%s)", i, cases[i].arch);
        struct gguf *g = open_ok(path);
        char arch[16];
        ck_assert_int_eq(gguf_get_cstr(g, "general.architecture", arch, sizeof(arch)), 0);
        ck_assert_str_eq(arch, cases[i].arch);
        const struct gguf_tensor *t = gguf_find_tensor(g, cases[i].tensor);
        ck_assert_msg(t != NULL, "%s: no %s", cases[i].arch, cases[i].tensor);
        for (int d = 0; d < 3; d++)
            ck_assert_msg(t->ne[d] == cases[i].ne[d], "%s: %s ne[%d] %llu", cases[i].arch,
                          cases[i].tensor, d, (unsigned long long)t->ne[d]);
        if (cases[i].key) ck_assert_msg(gguf_find(g, cases[i].key) != NULL, "no %s", cases[i].key);
        /* gemma2 never writes output.weight (llama.cpp always ties it) */
        if (strcmp(cases[i].arch, "gemma2") == 0)
            ck_assert_ptr_null(gguf_find_tensor(g, "output.weight"));
        gguf_close(g);
        struct model *m = NULL;
        char err[256] = "";
        struct model_options mo;
        model_options_default(&mo);
        mo.n_threads = 1;
        ck_assert_msg(model_load(path, &mo, &m, err, sizeof(err)) == 0, "%s: %s", cases[i].arch,
                      err);
        const struct model_hparams *hp = model_hparams(m);
        ck_assert_str_eq(hp->arch_name, cases[i].arch);
        if (strcmp(cases[i].arch, "gemma3") == 0) /* pattern 2: even layers slide */
            ck_assert(model_hparams_layer_swa(hp, 0) && !model_hparams_layer_swa(hp, 1));
        if (strcmp(cases[i].arch, "qwen3moe") == 0)
            ck_assert(hp->n_expert == 8 && hp->n_expert_used == 2 && hp->n_ff_exp == 32);
        model_free(m);
        unlink(path);
    }
}
END_TEST

/* quantize reproduces llama.cpp's quantized stories260K: same tensor types, same bytes, same
 * metadata plus general.file_type and general.quantization_version. */
static void check_quantize_matches(const char *type, const char *variant, uint32_t ftype)
{
    char rel[128], path[512];
    const char *in = test_shared_path("models/tinyllamas/stories260K.gguf");
    snprintf(rel, sizeof(rel), "models/tinyllamas/stories260K-%s.gguf", variant);
    if (!in) return;
    char in_copy[4096];
    snprintf(in_copy, sizeof(in_copy), "%s", in);
    const char *ref_path = test_shared_path(rel);
    if (!ref_path) return;
    tmp_path(path, sizeof(path), "quantized.gguf");
    ck_assert_int_eq(
        run_cmd(cmd_quantize_main, "quantize", in_copy, path, type, "--log-level", "error", NULL),
        0);
    struct gguf *out = open_ok(path), *ref = open_ok(ref_path);
    ck_assert_uint_eq(gguf_tensor_count(out), gguf_tensor_count(ref));
    for (size_t i = 0; i < gguf_tensor_count(ref); i++) {
        const struct gguf_tensor *r = gguf_tensor_at(ref, i), *o = gguf_tensor_at(out, i);
        ck_assert_str_eq(o->name, r->name);
        ck_assert_msg(o->type == r->type, "%s: %s vs %s", r->name, quant_type_name(o->type),
                      quant_type_name(r->type));
        ck_assert_uint_eq(o->size, r->size);
        ck_assert_uint_eq(o->offset, r->offset);
        ck_assert_msg(memcmp(o->data, r->data, r->size) == 0, "%s bytes differ", r->name);
    }
    ck_assert_uint_eq(gguf_kv_count(out), gguf_kv_count(ref) + 2);
    for (size_t i = 0; i < gguf_kv_count(ref); i++) { /* llama.cpp's files order keys differently */
        const struct gguf_kv *r = gguf_kv_at(ref, i), *o = gguf_find(out, r->key);
        ck_assert_msg(o != NULL && o->type == r->type, "%s missing", r->key);
    }
    ck_assert_uint_eq(get_u32(out, "general.file_type"), ftype);
    ck_assert_uint_eq(get_u32(out, "general.quantization_version"), 2);
    gguf_close(out);
    gguf_close(ref);
    unlink(path);
}

START_TEST(test_quantize_matches_llamacpp_q8_0)
{
    check_quantize_matches("q8_0", "Q8_0", 7);
}
END_TEST

START_TEST(test_quantize_matches_llamacpp_q4_0)
{
    check_quantize_matches("q4_0", "Q4_0", 2);
}
END_TEST

/* Quantizing a generated F32 model gives the same tensors as generating that type directly. */
START_TEST(test_quantize_agrees_with_gen_model)
{
    char f32[512], q4[512], direct[512];
    tmp_path(f32, sizeof(f32), "agree_f32.gguf");
    tmp_path(q4, sizeof(q4), "agree_q4.gguf");
    tmp_path(direct, sizeof(direct), "agree_direct.gguf");
    ck_assert_int_eq(run_cmd(cmd_gen_model_main, "gen-model", "--out", f32, SMALL_SHAPE,
                             "--vocab-size", "320", "--log-level", "error", NULL),
                     0);
    ck_assert_int_eq(run_cmd(cmd_gen_model_main, "gen-model", "--out", direct, "--type", "q4_0",
                             SMALL_SHAPE, "--vocab-size", "320", "--log-level", "error", NULL),
                     0);
    ck_assert_int_eq(
        run_cmd(cmd_quantize_main, "quantize", f32, q4, "q4_0", "--log-level", "error", NULL), 0);
    struct gguf *a = open_ok(q4), *b = open_ok(direct);
    ck_assert_uint_eq(gguf_tensor_count(a), gguf_tensor_count(b));
    for (size_t i = 0; i < gguf_tensor_count(a); i++) {
        const struct gguf_tensor *x = gguf_tensor_at(a, i), *y = gguf_tensor_at(b, i);
        ck_assert_str_eq(x->name, y->name);
        ck_assert_int_eq(x->type, y->type);
        ck_assert_uint_eq(x->size, y->size);
        ck_assert_msg(memcmp(x->data, y->data, x->size) == 0, "%s differs", x->name);
    }
    ck_assert_uint_eq(get_u32(a, "general.file_type"), 2);
    gguf_close(a);
    gguf_close(b);
    unlink(f32);
    unlink(q4);
    unlink(direct);
}
END_TEST

START_TEST(test_quantize_rejects_bad_input)
{
    char path[512], out[512];
    tmp_path(path, sizeof(path), "garbage.gguf");
    tmp_path(out, sizeof(out), "garbage_out.gguf");
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    static const char junk[] = "GGUF\3\0\0\0 not really a model";
    ck_assert_uint_eq(fwrite(junk, 1, sizeof(junk), f), sizeof(junk));
    fclose(f);
    ck_assert_int_eq(
        run_cmd(cmd_quantize_main, "quantize", path, out, "q8_0", "--log-level", "error", NULL), 1);
    ck_assert_int_eq(access(out, F_OK), -1);
    ck_assert_int_eq(
        run_cmd(cmd_quantize_main, "quantize", path, out, "q4_2", "--log-level", "error", NULL), 2);
    ck_assert_int_eq(run_cmd(cmd_quantize_main, "quantize", path, "--log-level", "error", NULL), 2);
    unlink(path);
}
END_TEST

Suite *gen_model_suite(void)
{
    Suite *s = suite_create("gen_model");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_gen_model_small_q8_0);
    tcase_add_test(tc, test_gen_model_weights_are_normal);
    tcase_add_test(tc, test_gen_model_deterministic_per_seed);
    tcase_add_test(tc, test_gen_model_tied_output_and_f16);
    tcase_add_test(tc, test_gen_model_vocab_from_shared);
    tcase_add_test(tc, test_gen_model_rejects_bad_options);
    tcase_add_test(tc, test_gen_model_user_tokens);
    tcase_add_test(tc, test_gen_model_architectures);
    tcase_add_test(tc, test_quantize_matches_llamacpp_q8_0);
    tcase_add_test(tc, test_quantize_matches_llamacpp_q4_0);
    tcase_add_test(tc, test_quantize_agrees_with_gen_model);
    tcase_add_test(tc, test_quantize_rejects_bad_input);
    suite_add_tcase(s, tc);
    return s;
}
