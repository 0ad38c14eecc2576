/* Tests for engine/gguf/gguf_read.c and engine/gguf/gguf_write.c: the shared llama.cpp files parse with the
 * expected metadata and shapes; writer output round-trips (byte-identical for a copied llama.cpp
 * file); and a table of malformed inputs, made by mutating a small file the writer produced, each
 * fails with its own error code and message. Inputs live in exact-size allocations so ASan sees
 * any read past the end. */
#include "engine/gguf/gguf.h"

#include "common/buf.h"
#include "common/err.h"
#include "tests/testutil.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct blob {
    uint8_t *p;
    size_t n;
};

static void tmp_path(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/cinfer_test_gguf_%ld_%s", test_tmpdir(), (long)getpid(), name);
}

static struct blob read_file(const char *path)
{
    struct blob b = {NULL, 0};
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    b.n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    b.p = malloc(b.n ? b.n : 1);
    ck_assert_ptr_nonnull(b.p);
    ck_assert_uint_eq(fread(b.p, 1, b.n, f), b.n);
    fclose(f);
    return b;
}

static struct blob blob_copy(const struct blob *b, size_t n)
{
    struct blob c = {malloc(n ? n : 1), n};
    ck_assert_ptr_nonnull(c.p);
    memcpy(c.p, b->p, n);
    return c;
}

static size_t blob_find(const struct blob *b, const char *s)
{
    const void *hit = memmem(b->p, b->n, s, strlen(s));
    ck_assert_msg(hit != NULL, "'%s' not in blob", s);
    return (size_t)((const uint8_t *)hit - b->p);
}

static void put_u32(struct blob *b, size_t at, uint32_t v)
{
    for (int i = 0; i < 4; i++) b->p[at + i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(struct blob *b, size_t at, uint64_t v)
{
    for (int i = 0; i < 8; i++) b->p[at + i] = (uint8_t)(v >> (8 * i));
}

/* The mutation base: six keys of several types and two tensors (F32 8x2 and Q8_0 32). */
static struct blob small_file(void)
{
    static float a[16];
    static uint8_t q8[34];
    for (int i = 0; i < 16; i++) a[i] = (float)i * 0.5f;
    for (int i = 0; i < 34; i++) q8[i] = (uint8_t)(i + 1);
    const char *toks[] = {"a", "bc"};
    struct gguf_writer *w = gguf_writer_new();
    ck_assert_ptr_nonnull(w);
    ck_assert_int_eq(gguf_writer_set_str(w, "general.architecture", "llama"), 0);
    ck_assert_int_eq(gguf_writer_set_u32(w, "test.k1", 7), 0);
    ck_assert_int_eq(gguf_writer_set_u32(w, "test.k2", 8), 0);
    ck_assert_int_eq(gguf_writer_set_arr_str(w, "test.tokens", toks, 2), 0);
    ck_assert_int_eq(gguf_writer_set_f32(w, "test.f", 0.5f), 0);
    ck_assert_int_eq(gguf_writer_set_u32(w, "general.alignment", 32), 0);
    uint64_t ne_a[2] = {8, 2}, ne_b[1] = {32};
    ck_assert_int_eq(gguf_writer_add_tensor(w, "t.a", QUANT_F32, 2, ne_a, a, sizeof(a)), 0);
    ck_assert_int_eq(gguf_writer_add_tensor(w, "t.b", QUANT_Q8_0, 1, ne_b, q8, sizeof(q8)), 0);
    char path[512];
    tmp_path(path, sizeof(path), "small.gguf");
    ck_assert_int_eq(gguf_writer_write(w, path), 0);
    gguf_writer_free(w);
    struct blob b = read_file(path);
    unlink(path);
    return b;
}

/* Parses `b` and expects failure `rc` with `needle` and a byte offset in the message. */
static void expect_fail(const struct blob *b, int rc, const char *needle)
{
    struct blob exact = blob_copy(b, b->n);
    struct gguf *g = NULL;
    char err[512];
    int got = gguf_parse(exact.p, exact.n, &g, err, sizeof(err));
    ck_assert_msg(got == rc, "want %d (%s), got %d: %s", rc, needle, got, err);
    ck_assert_ptr_null(g);
    ck_assert_msg(strstr(err, needle) != NULL, "'%s' not in '%s'", needle, err);
    ck_assert_msg(strstr(err, "offset") != NULL, "no offset in '%s'", err);
    free(exact.p);
}

START_TEST(test_gguf_small_file_parses)
{
    struct blob b = small_file();
    struct gguf *g = NULL;
    char err[256];
    ck_assert_msg(gguf_parse(b.p, b.n, &g, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(gguf_version(g), 3);
    ck_assert_uint_eq(gguf_alignment(g), 32);
    ck_assert_uint_eq(gguf_kv_count(g), 6);
    ck_assert_str_eq(gguf_kv_at(g, 0)->key, "general.architecture"); /* insertion order */
    ck_assert_str_eq(gguf_kv_at(g, 5)->key, "general.alignment");
    ck_assert_ptr_null(gguf_kv_at(g, 6));
    ck_assert_uint_eq(gguf_tensor_count(g), 2);
    const struct gguf_tensor *ta = gguf_find_tensor(g, "t.a"), *tb = gguf_find_tensor(g, "t.b");
    ck_assert(ta && tb);
    ck_assert_ptr_null(gguf_find_tensor(g, "t.c"));
    ck_assert_uint_eq(ta->n_dims, 2);
    ck_assert_uint_eq(ta->ne[0], 8);
    ck_assert_uint_eq(ta->ne[1], 2);
    ck_assert_uint_eq(ta->ne[2], 1);
    ck_assert_uint_eq(ta->size, 64);
    ck_assert_uint_eq(tb->type, QUANT_Q8_0);
    ck_assert_uint_eq(tb->size, 34);
    ck_assert_uint_eq(tb->offset, 64);
    size_t data_off = (size_t)((const uint8_t *)ta->data - b.p);
    ck_assert_uint_eq(data_off % 32, 0);
    ck_assert_uint_eq(((const uint8_t *)tb->data)[0], 1);
    float f;
    memcpy(&f, (const uint8_t *)ta->data + 4 * 3, sizeof(f));
    ck_assert_float_eq(f, 1.5f);
    gguf_close(g);
    free(b.p);
}
END_TEST

START_TEST(test_gguf_v2_accepted)
{
    struct blob b = small_file();
    put_u32(&b, 4, 2);
    struct gguf *g = NULL;
    char err[256];
    ck_assert_msg(gguf_parse(b.p, b.n, &g, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(gguf_version(g), 2);
    gguf_close(g);
    free(b.p);
}
END_TEST

/* Every prefix that cuts into the header or the tensor data is rejected: inside the header region as
 * a parse error, inside the data section because a tensor no longer fits. Only the trailing padding
 * after the last tensor may go. */
START_TEST(test_gguf_truncated_everywhere)
{
    struct blob b = small_file();
    struct gguf *g = NULL;
    char err[256];
    ck_assert_int_eq(gguf_parse(b.p, b.n, &g, err, sizeof(err)), 0);
    size_t data_off = (size_t)((const uint8_t *)gguf_find_tensor(g, "t.a")->data - b.p);
    size_t data_end = data_off + 64 + 34;
    gguf_close(g);
    ck_assert_uint_eq(b.n,
                      data_off + 64 + 64); /* the last tensor is padded too, as llama.cpp does */
    for (size_t n = 0; n < b.n; n++) {
        struct blob t = blob_copy(&b, n);
        g = NULL;
        int rc = gguf_parse(t.p, t.n, &g, err, sizeof(err));
        if (n >= data_end) {
            ck_assert_msg(rc == 0, "len %zu: %s", n, err);
            gguf_close(g);
        } else {
            ck_assert_ptr_null(g);
            ck_assert_msg(rc == (n < data_off ? ERR_PARSE : ERR_RANGE), "len %zu: rc %d: %s", n, rc,
                          err);
            ck_assert_msg(strstr(err, "offset") != NULL, "len %zu: %s", n, err);
        }
        free(t.p);
    }
    free(b.p);
}
END_TEST

START_TEST(test_gguf_bad_magic_and_versions)
{
    struct blob b = small_file();
    struct blob m = blob_copy(&b, b.n);
    m.p[0] = 'X';
    expect_fail(&m, ERR_PARSE, "bad magic");
    free(m.p);
    m = blob_copy(&b, b.n);
    put_u32(&m, 4, 1);
    expect_fail(&m, ERR_UNSUPPORTED, "version 1 is not supported");
    put_u32(&m, 4, 4);
    expect_fail(&m, ERR_UNSUPPORTED, "version 4 is not supported");
    put_u32(&m, 4, 0x03000000);
    expect_fail(&m, ERR_UNSUPPORTED, "big-endian");
    free(m.p);
    free(b.p);
}
END_TEST

START_TEST(test_gguf_huge_counts_fail_fast)
{
    struct blob b = small_file();
    struct blob m = blob_copy(&b, b.n);
    put_u64(&m, 16, UINT64_MAX);
    expect_fail(&m, ERR_PARSE, "key/value count 18446744073709551615 cannot fit");
    put_u64(&m, 16, 6);
    put_u64(&m, 8, (uint64_t)1 << 40);
    expect_fail(&m, ERR_PARSE, "tensor count 1099511627776 cannot fit");
    free(m.p);
    /* Array length far beyond the file. */
    m = blob_copy(&b, b.n);
    put_u64(&m, blob_find(&m, "test.tokens") + 19, (uint64_t)1 << 60);
    expect_fail(&m, ERR_PARSE, "array of 1152921504606846976 elements cannot fit");
    free(m.p);
    /* Key and string lengths beyond the file. */
    m = blob_copy(&b, b.n);
    put_u64(&m, blob_find(&m, "general.architecture") - 8, UINT64_MAX);
    expect_fail(&m, ERR_PARSE, "key length 18446744073709551615 exceeds");
    free(m.p);
    m = blob_copy(&b, b.n);
    put_u64(&m, blob_find(&m, "general.architecture") + 24, 1u << 30);
    expect_fail(&m, ERR_PARSE, "string value length 1073741824 exceeds");
    free(m.p);
    m = blob_copy(&b, b.n);
    put_u64(&m, blob_find(&m, "t.b") - 8, 1000000);
    expect_fail(&m, ERR_PARSE, "tensor name length 1000000 exceeds");
    free(m.p);
    free(b.p);
}
END_TEST

START_TEST(test_gguf_bad_values)
{
    struct blob b = small_file();
    struct blob m = blob_copy(&b, b.n);
    size_t al = blob_find(&m, "general.alignment") + 21;
    put_u32(&m, al, 48);
    expect_fail(&m, ERR_RANGE, "general.alignment 48 is not a nonzero power of two");
    put_u32(&m, al, 0);
    expect_fail(&m, ERR_RANGE, "general.alignment 0");
    put_u32(&m, al - 4, GGUF_INT32);
    put_u32(&m, al, 32);
    expect_fail(&m, ERR_PARSE, "general.alignment is not a uint32");
    free(m.p);
    m = blob_copy(&b, b.n);
    put_u32(&m, blob_find(&m, "test.k2") + 7, 13);
    expect_fail(&m, ERR_PARSE, "key 'test.k2' has unknown value type 13");
    free(m.p);
    m = blob_copy(&b, b.n);
    put_u32(&m, blob_find(&m, "test.tokens") + 15, 99);
    expect_fail(&m, ERR_PARSE, "unknown array element type 99");
    free(m.p);
    m = blob_copy(&b, b.n);
    m.p[blob_find(&m, "test.k1") + 4] = '\0';
    expect_fail(&m, ERR_PARSE, "key contains a NUL byte");
    free(m.p);
    m = blob_copy(&b, b.n);
    m.p[blob_find(&m, "test.k2") + 6] = '1';
    expect_fail(&m, ERR_PARSE, "duplicate key 'test.k1'");
    free(m.p);
    free(b.p);
}
END_TEST

START_TEST(test_gguf_bad_tensor_infos)
{
    struct blob b = small_file();
    size_t pa = blob_find(&b, "t.a"), pb = blob_find(&b, "t.b");
    struct blob m = blob_copy(&b, b.n);
    put_u32(&m, pb + 15, 99);
    expect_fail(&m, ERR_UNSUPPORTED, "tensor 't.b' has unknown type id 99");
    put_u32(&m, pb + 15, 16);
    expect_fail(
        &m, ERR_UNSUPPORTED,
        "tensor 't.b' has unknown type id 16 (ggml iq2_xxs, which this engine cannot read)");
    free(m.p);
    m = blob_copy(&b, b.n);
    put_u64(&m, pa + 7, (uint64_t)1 << 32);
    put_u64(&m, pa + 15, (uint64_t)1 << 32);
    expect_fail(&m, ERR_RANGE, "tensor 't.a' element count overflows");
    put_u64(&m, pa + 15, 0);
    expect_fail(&m, ERR_RANGE, "tensor 't.a' dimension 1 is 0");
    put_u64(&m, pa + 7, UINT64_MAX);
    expect_fail(&m, ERR_RANGE, "dimension 0 is 18446744073709551615");
    free(m.p);
    m = blob_copy(&b, b.n);
    put_u64(&m, pa + 7, (uint64_t)1 << 30); /* huge but representable: byte size leaves the file */
    put_u64(&m, pa + 15, (uint64_t)1 << 30);
    expect_fail(&m, ERR_RANGE, "lies outside");
    free(m.p);
    m = blob_copy(&b, b.n);
    put_u32(&m, pa + 3, 5);
    expect_fail(&m, ERR_RANGE, "tensor 't.a' has 5 dimensions");
    put_u32(&m, pa + 3, 0);
    expect_fail(&m, ERR_RANGE, "has 0 dimensions");
    free(m.p);
    m = blob_copy(&b, b.n);
    put_u64(&m, pb + 7, 16);
    expect_fail(&m, ERR_RANGE, "row of 16 elements is not a multiple of the q8_0 block size 32");
    free(m.p);
    m = blob_copy(&b, b.n);
    put_u64(&m, pb + 19, (uint64_t)1 << 40);
    expect_fail(&m, ERR_RANGE, "tensor 't.b' data [1099511627776, +34) lies outside");
    put_u64(&m, pb + 19, 65);
    expect_fail(&m, ERR_RANGE, "offset 65 is not a multiple of the alignment 32");
    put_u64(&m, pb + 19, UINT64_MAX - 31);
    expect_fail(&m, ERR_RANGE, "lies outside");
    put_u64(&m, pb + 19, 32);
    expect_fail(&m, ERR_RANGE, "tensor 't.b' overlaps tensor 't.a'");
    free(m.p);
    m = blob_copy(&b, b.n);
    m.p[pb + 2] = 'a';
    expect_fail(&m, ERR_PARSE, "duplicate tensor name 't.a'");
    free(m.p);
    free(b.p);
}
END_TEST

/* Hand-built headers for what the writer cannot produce. */
static void emit_u32(struct buf *b, uint32_t v)
{
    uint8_t le[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    ck_assert_int_eq(buf_append(b, le, 4), 0);
}

static void emit_u64(struct buf *b, uint64_t v)
{
    emit_u32(b, (uint32_t)v);
    emit_u32(b, (uint32_t)(v >> 32));
}

static void emit_str(struct buf *b, const char *s)
{
    emit_u64(b, strlen(s));
    ck_assert_int_eq(buf_append(b, s, strlen(s)), 0);
}

static void emit_header(struct buf *b, uint64_t n_tensors, uint64_t n_kv)
{
    ck_assert_int_eq(buf_append(b, "GGUF", 4), 0);
    emit_u32(b, 3);
    emit_u64(b, n_tensors);
    emit_u64(b, n_kv);
}

START_TEST(test_gguf_nesting_and_names)
{
    struct buf b;
    buf_init(&b, 0);
    emit_header(&b, 0, 1);
    emit_str(&b, "deep");
    emit_u32(&b, GGUF_ARRAY);
    for (int i = 0; i < 12; i++) {
        emit_u32(&b, GGUF_ARRAY);
        emit_u64(&b, 1);
    }
    emit_u32(&b, GGUF_UINT8);
    emit_u64(&b, 0);
    struct blob m = {(uint8_t *)b.data, b.len};
    expect_fail(&m, ERR_UNSUPPORTED, "arrays nested deeper than 8 levels");
    buf_reset(&b);

    /* Two levels are fine and readable. */
    emit_header(&b, 0, 1);
    emit_str(&b, "nested");
    emit_u32(&b, GGUF_ARRAY);
    emit_u32(&b, GGUF_ARRAY);
    emit_u64(&b, 2);
    emit_u32(&b, GGUF_INT16);
    emit_u64(&b, 1);
    ck_assert_int_eq(buf_append(&b, "\xfe\xff", 2), 0);
    emit_u32(&b, GGUF_STRING);
    emit_u64(&b, 1);
    emit_str(&b, "xy");
    struct gguf *g = NULL;
    char err[256];
    ck_assert_msg(gguf_parse(b.data, b.len, &g, err, sizeof(err)) == 0, "%s", err);
    const struct gguf_array *a;
    ck_assert_int_eq(gguf_get_arr(g, "nested", &a), 0);
    ck_assert_uint_eq(a->type, GGUF_ARRAY);
    ck_assert_uint_eq(a->n, 2);
    int64_t v;
    ck_assert_int_eq(gguf_arr_get_i64(&a->arrs[0], 0, &v), 0);
    ck_assert_int_eq(v, -2);
    ck_assert_int_eq(gguf_arr_get_i64(&a->arrs[0], 1, &v), ERR_RANGE);
    ck_assert_int_eq(gguf_arr_get_i64(&a->arrs[1], 0, &v), ERR_INVAL);
    ck_assert_uint_eq(a->arrs[1].strs[0].len, 2);
    gguf_close(g);
    buf_reset(&b);

    /* Tensor names longer than ggml's 63-byte limit. */
    emit_header(&b, 1, 0);
    emit_str(&b, "0123456789012345678901234567890123456789012345678901234567890123");
    emit_u32(&b, 1);
    emit_u64(&b, 4);
    emit_u32(&b, QUANT_F32);
    emit_u64(&b, 0);
    m = (struct blob){(uint8_t *)b.data, b.len};
    expect_fail(&m, ERR_RANGE, "tensor name of 64 bytes (max 63)");
    buf_fini(&b);
}
END_TEST

START_TEST(test_gguf_empty_and_open_errors)
{
    struct gguf *g = NULL;
    char err[256], path[512];
    ck_assert_int_eq(gguf_parse(NULL, 0, &g, err, sizeof(err)), ERR_PARSE);
    ck_assert(strstr(err, "empty file"));
    ck_assert_int_eq(gguf_parse("GGU", 3, &g, err, sizeof(err)), ERR_PARSE);
    ck_assert(strstr(err, "truncated magic"));
    ck_assert_int_eq(gguf_open("/nonexistent/x.gguf", &g, err, sizeof(err)), ERR_IO);
    ck_assert(strstr(err, "cannot open /nonexistent/x.gguf"));
    ck_assert_int_eq(gguf_open(test_tmpdir(), &g, err, sizeof(err)), ERR_IO);
    ck_assert(strstr(err, "not a regular file"));
    tmp_path(path, sizeof(path), "empty.gguf");
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    ck_assert_int_eq(gguf_open(path, &g, err, sizeof(err)), ERR_PARSE);
    ck_assert(strstr(err, "empty file"));
    unlink(path);
    ck_assert_ptr_null(g);
    gguf_close(NULL);
    /* A NULL error buffer is allowed. */
    ck_assert_int_eq(gguf_parse("XXXX", 4, &g, NULL, 0), ERR_PARSE);
}
END_TEST

START_TEST(test_gguf_getters)
{
    struct gguf_writer *w = gguf_writer_new();
    int16_t i16[3] = {-5, 0, 300};
    double f64[2] = {0.25, -1e300};
    uint64_t big[1] = {UINT64_MAX};
    ck_assert_int_eq(gguf_writer_set_u32(w, "u", 4000000000u), 0);
    ck_assert_int_eq(gguf_writer_set_i32(w, "i", -7), 0);
    ck_assert_int_eq(gguf_writer_set_f32(w, "f", 1.25f), 0);
    ck_assert_int_eq(gguf_writer_set_bool(w, "b", true), 0);
    ck_assert_int_eq(gguf_writer_set_str(w, "s", "hello"), 0);
    ck_assert_int_eq(gguf_writer_set_arr(w, "a16", GGUF_INT16, i16, 3), 0);
    ck_assert_int_eq(gguf_writer_set_arr(w, "af", GGUF_FLOAT64, f64, 2), 0);
    ck_assert_int_eq(gguf_writer_set_arr(w, "abig", GGUF_UINT64, big, 1), 0);
    ck_assert_int_eq(gguf_writer_set_arr(w, "bad", GGUF_STRING, big, 1), ERR_INVAL);
    struct gguf_kv f64kv = {.key = "d", .type = GGUF_FLOAT64, .v.f64 = 1e300};
    ck_assert_int_eq(gguf_writer_set_kv(w, &f64kv), 0);
    struct gguf_kv u8kv = {.key = "u8", .type = GGUF_UINT8, .v.u64 = 200};
    ck_assert_int_eq(gguf_writer_set_kv(w, &u8kv), 0);
    struct gguf_kv i64kv = {.key = "i64", .type = GGUF_INT64, .v.i64 = INT64_MIN};
    ck_assert_int_eq(gguf_writer_set_kv(w, &i64kv), 0);
    struct gguf_kv wide = {.key = "wide", .type = GGUF_UINT8, .v.u64 = 256};
    ck_assert_int_eq(gguf_writer_set_kv(w, &wide), ERR_INVAL);
    wide = (struct gguf_kv){.key = "wide", .type = GGUF_INT16, .v.i64 = -40000};
    ck_assert_int_eq(gguf_writer_set_kv(w, &wide), ERR_INVAL);
    wide = (struct gguf_kv){.key = "wide", .type = 13};
    ck_assert_int_eq(gguf_writer_set_kv(w, &wide), ERR_INVAL);
    ck_assert_int_eq(gguf_writer_set_u32(w, "u", 5), 0); /* replaced in place */
    ck_assert_int_eq(gguf_writer_set_u32(w, "general.alignment", 24), ERR_INVAL);
    char path[512];
    tmp_path(path, sizeof(path), "getters.gguf");
    ck_assert_int_eq(gguf_writer_write(w, path), 0);
    gguf_writer_free(w);

    struct gguf *g = NULL;
    char err[256];
    ck_assert_msg(gguf_open(path, &g, err, sizeof(err)) == 0, "%s", err);
    unlink(path);
    ck_assert_uint_eq(gguf_kv_count(g), 11);
    ck_assert_str_eq(gguf_kv_at(g, 0)->key, "u");
    ck_assert_uint_eq(gguf_tensor_count(g), 0);
    uint32_t u;
    int32_t i;
    float f;
    bool bo;
    struct gguf_str s;
    char small[4], big_buf[16];
    ck_assert_int_eq(gguf_get_u32(g, "u", &u), 0);
    ck_assert_uint_eq(u, 5);
    ck_assert_int_eq(gguf_get_u32(g, "u8", &u), 0);
    ck_assert_uint_eq(u, 200);
    ck_assert_int_eq(gguf_get_i32(g, "u8", &i), 0);
    ck_assert_int_eq(i, 200);
    ck_assert_int_eq(gguf_get_i32(g, "i", &i), 0);
    ck_assert_int_eq(i, -7);
    ck_assert_int_eq(gguf_get_u32(g, "i", &u), ERR_INVAL);   /* negative */
    ck_assert_int_eq(gguf_get_i32(g, "i64", &i), ERR_INVAL); /* does not fit */
    ck_assert_int_eq(gguf_get_u32(g, "s", &u), ERR_INVAL);   /* wrong type */
    ck_assert_int_eq(gguf_get_u32(g, "missing", &u), ERR_NOT_FOUND);
    ck_assert_int_eq(gguf_get_f32(g, "f", &f), 0);
    ck_assert_float_eq(f, 1.25f);
    ck_assert_int_eq(gguf_get_f32(g, "d", &f), ERR_INVAL); /* beyond float range */
    ck_assert_int_eq(gguf_get_f32(g, "u", &f), ERR_INVAL);
    ck_assert_int_eq(gguf_get_bool(g, "b", &bo), 0);
    ck_assert(bo);
    ck_assert_int_eq(gguf_get_bool(g, "u", &bo), ERR_INVAL);
    ck_assert_int_eq(gguf_get_str(g, "s", &s), 0);
    ck_assert_uint_eq(s.len, 5);
    ck_assert_int_eq(memcmp(s.data, "hello", 5), 0);
    ck_assert_int_eq(gguf_get_cstr(g, "s", small, sizeof(small)), ERR_TOO_BIG);
    ck_assert_int_eq(gguf_get_cstr(g, "s", big_buf, sizeof(big_buf)), 0);
    ck_assert_str_eq(big_buf, "hello");
    const struct gguf_array *a;
    int64_t v;
    double d;
    ck_assert_int_eq(gguf_get_arr(g, "a16", &a), 0);
    ck_assert_int_eq(gguf_arr_get_i64(a, 0, &v), 0);
    ck_assert_int_eq(v, -5);
    ck_assert_int_eq(gguf_arr_get_i64(a, 2, &v), 0);
    ck_assert_int_eq(v, 300);
    ck_assert_int_eq(gguf_arr_get_f64(a, 2, &d), 0);
    ck_assert_double_eq(d, 300.0);
    ck_assert_int_eq(gguf_arr_get_i64(a, 3, &v), ERR_RANGE);
    ck_assert_int_eq(gguf_get_arr(g, "af", &a), 0);
    ck_assert_int_eq(gguf_arr_get_f64(a, 1, &d), 0);
    ck_assert_double_eq(d, -1e300);
    ck_assert_int_eq(gguf_arr_get_i64(a, 0, &v), ERR_INVAL);
    ck_assert_int_eq(gguf_get_arr(g, "abig", &a), 0);
    ck_assert_int_eq(gguf_arr_get_i64(a, 0, &v), ERR_INVAL);
    ck_assert_int_eq(gguf_get_arr(g, "s", &a), ERR_INVAL);
    gguf_close(g);
}
END_TEST

/* gguf_release_data unmaps the tensor data but keeps the key/values (copied out of the mapping at
 * open), so they read the same after the file is truncated to nothing; tensors keep their names,
 * shapes and sizes, with data NULL. Idempotent, and harmless on a gguf_parse'd buffer. */
START_TEST(test_gguf_release_data_keeps_metadata)
{
    struct gguf_writer *w = gguf_writer_new();
    const char *toks[] = {"<s>", "hello", "world"};
    int32_t ids[3] = {7, -8, 9};
    float t[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    uint64_t ne[2] = {4, 2};
    ck_assert_int_eq(gguf_writer_set_str(w, "general.architecture", "llama"), 0);
    ck_assert_int_eq(gguf_writer_set_arr_str(w, "tokens", toks, 3), 0);
    ck_assert_int_eq(gguf_writer_set_arr(w, "ids", GGUF_INT32, ids, 3), 0);
    ck_assert_int_eq(gguf_writer_add_tensor(w, "w", QUANT_F32, 2, ne, t, sizeof(t)), 0);
    char path[512];
    tmp_path(path, sizeof(path), "release.gguf");
    ck_assert_int_eq(gguf_writer_write(w, path), 0);
    gguf_writer_free(w);
    struct gguf *g = NULL;
    char err[256];
    ck_assert_msg(gguf_open(path, &g, err, sizeof(err)) == 0, "%s", err);
    const struct gguf_tensor *ti = gguf_find_tensor(g, "w");
    ck_assert_ptr_nonnull(ti);
    ck_assert_int_eq(memcmp(ti->data, t, sizeof(t)), 0);
    char hex[SHA256_HEX_LEN], want[SHA256_HEX_LEN];
    ck_assert_int_eq(gguf_sha256_hex(g, hex), 0);
    ck_assert_int_eq(sha256_file_hex(path, want), 0);
    ck_assert_str_eq(hex, want);
    ck_assert(!gguf_file_changed(g, NULL, 0));
    gguf_release_data(g);
    ck_assert_int_eq(gguf_sha256_hex(g, hex), ERR_BAD_STATE); /* nothing mapped any more */
    ck_assert(!gguf_file_changed(g, NULL, 0));
    char why[160] = "x";
    ck_assert(!gguf_file_changed(g, why, sizeof(why)));
    ck_assert_str_eq(why, "");
    ck_assert_int_eq(truncate(path, 0), 0);
    ck_assert(gguf_file_changed(g, NULL, 0)); /* size */
    ck_assert(gguf_file_changed(g, why, sizeof(why)));
    ck_assert_msg(strncmp(why, "size 0 bytes, was ", 18) == 0, "%s", why);
    ck_assert_int_eq(unlink(path), 0);
    ck_assert(gguf_file_changed(g, why, sizeof(why)));
    ck_assert_msg(strstr(why, "cannot stat it") != NULL, "%s", why);
    gguf_release_data(g);
    ck_assert_ptr_null(ti->data);
    ck_assert_uint_eq(ti->size, sizeof(t));
    ck_assert_uint_eq(ti->ne[1], 2);
    char arch[16];
    ck_assert_int_eq(gguf_get_cstr(g, "general.architecture", arch, sizeof(arch)), 0);
    ck_assert_str_eq(arch, "llama");
    const struct gguf_array *a;
    ck_assert_int_eq(gguf_get_arr(g, "tokens", &a), 0);
    ck_assert_uint_eq(a->n, 3);
    ck_assert_uint_eq(a->strs[2].len, 5);
    ck_assert_int_eq(memcmp(a->strs[2].data, "world", 5), 0);
    int64_t v;
    ck_assert_int_eq(gguf_get_arr(g, "ids", &a), 0);
    ck_assert_int_eq(gguf_arr_get_i64(a, 1, &v), 0);
    ck_assert_int_eq(v, -8);
    gguf_close(g);

    struct blob b = small_file();
    ck_assert_int_eq(gguf_parse(b.p, b.n, &g, err, sizeof(err)), 0);
    ck_assert(!gguf_file_changed(g, NULL, 0));
    ck_assert_int_eq(gguf_sha256_hex(g, hex), ERR_BAD_STATE);
    gguf_release_data(g);
    for (size_t i = 0; i < gguf_tensor_count(g); i++)
        ck_assert_ptr_null(gguf_tensor_at(g, i)->data);
    gguf_close(g);
    gguf_release_data(NULL);
    free(b.p);
}
END_TEST

START_TEST(test_gguf_writer_rejects)
{
    struct gguf_writer *w = gguf_writer_new();
    float x[64] = {0};
    uint64_t ne[2] = {32, 2}, odd[1] = {33};
    ck_assert_int_eq(gguf_writer_add_tensor(w, "x", QUANT_F32, 2, ne, x, sizeof(x) - 4), ERR_INVAL);
    ck_assert_int_eq(gguf_writer_add_tensor(w, "x", QUANT_Q8_0, 1, odd, x, 36), ERR_INVAL);
    ck_assert_int_eq(gguf_writer_add_tensor(w, "x", QUANT_F32, 5, ne, x, sizeof(x)), ERR_INVAL);
    ck_assert_int_eq(gguf_writer_add_tensor(w, "x", (enum quant_type)16, 1, ne, x, 66), ERR_INVAL);
    ck_assert_int_eq(gguf_writer_add_tensor(
                         w, "0123456789012345678901234567890123456789012345678901234567890123",
                         QUANT_F32, 2, ne, x, sizeof(x)),
                     ERR_INVAL);
    ck_assert_int_eq(gguf_writer_add_tensor(w, "x", QUANT_F32, 2, ne, x, sizeof(x)), 0);
    ck_assert_int_eq(gguf_writer_add_tensor(w, "x", QUANT_F32, 2, ne, x, sizeof(x)), ERR_EXISTS);
    ck_assert_int_eq(gguf_writer_write(w, "/nonexistent-dir/out.gguf"), ERR_IO);
    gguf_writer_free(w);
    gguf_writer_free(NULL);
}
END_TEST

START_TEST(test_gguf_writer_alignment_64)
{
    struct gguf_writer *w = gguf_writer_new();
    float x[3] = {1, 2, 3};
    uint64_t ne[1] = {3};
    ck_assert_int_eq(gguf_writer_set_u32(w, "general.alignment", 64), 0);
    ck_assert_int_eq(gguf_writer_add_tensor(w, "a", QUANT_F32, 1, ne, x, sizeof(x)), 0);
    ck_assert_int_eq(gguf_writer_add_tensor(w, "b", QUANT_F32, 1, ne, x, sizeof(x)), 0);
    char path[512], err[256];
    tmp_path(path, sizeof(path), "align64.gguf");
    ck_assert_int_eq(gguf_writer_write(w, path), 0);
    gguf_writer_free(w);
    struct gguf *g = NULL;
    ck_assert_msg(gguf_open(path, &g, err, sizeof(err)) == 0, "%s", err);
    unlink(path);
    ck_assert_uint_eq(gguf_alignment(g), 64);
    ck_assert_uint_eq(gguf_find_tensor(g, "b")->offset, 64);
    ck_assert_uint_eq((uintptr_t)gguf_find_tensor(g, "b")->data % 64, 0);
    ck_assert_float_eq(((const float *)gguf_find_tensor(g, "b")->data)[2], 3.0f);
    gguf_close(g);
}
END_TEST

static void check_stories(const char *rel, enum quant_type wt)
{
    const char *p = test_shared_path(rel);
    if (!p) return;
    struct gguf *g = NULL;
    char err[256], s[64];
    ck_assert_msg(gguf_open(p, &g, err, sizeof(err)) == 0, "%s: %s", rel, err);
    ck_assert_uint_eq(gguf_version(g), 3);
    ck_assert_int_eq(gguf_get_cstr(g, "general.architecture", s, sizeof(s)), 0);
    ck_assert_str_eq(s, "llama");
    uint32_t u;
    float f;
    const struct {
        const char *key;
        uint32_t want;
    } keys[] = {{"llama.context_length", 2048},       {"llama.embedding_length", 64},
                {"llama.feed_forward_length", 172},   {"llama.attention.head_count", 8},
                {"llama.attention.head_count_kv", 4}, {"llama.block_count", 5},
                {"llama.rope.dimension_count", 8},    {"tokenizer.ggml.bos_token_id", 1}};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        ck_assert_int_eq(gguf_get_u32(g, keys[i].key, &u), 0);
        ck_assert_uint_eq(u, keys[i].want);
    }
    ck_assert_int_eq(gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f), 0);
    ck_assert_float_eq_tol(f, 1e-5f, 1e-12f);
    const struct gguf_array *toks;
    ck_assert_int_eq(gguf_get_arr(g, "tokenizer.ggml.tokens", &toks), 0);
    ck_assert_uint_eq(toks->type, GGUF_STRING);
    ck_assert_uint_eq(toks->n, 512);
    ck_assert_int_eq(memcmp(toks->strs[1].data, "<s>", 3), 0);
    ck_assert_uint_eq(gguf_tensor_count(g), 48);
    const struct gguf_tensor *t = gguf_find_tensor(g, "token_embd.weight");
    ck_assert(t && t->n_dims == 2 && t->ne[0] == 64 && t->ne[1] == 512 && t->type == wt);
    t = gguf_find_tensor(g, "blk.4.ffn_down.weight");
    ck_assert(t && t->ne[0] == 172 && t->ne[1] == 64);
    ck_assert_int_eq(t->type, QUANT_F32); /* llama.cpp keeps it F32 (172 is not a block multiple) */
    t = gguf_find_tensor(g, "blk.2.attn_k.weight");
    ck_assert(t && t->ne[0] == 64 && t->ne[1] == 32 && t->type == wt);
    t = gguf_find_tensor(g, "output_norm.weight");
    ck_assert(t && t->n_dims == 1 && t->ne[0] == 64 && t->type == QUANT_F32);
    ck_assert_uint_eq((uintptr_t)t->data % 32, 0);
    gguf_close(g);
}

START_TEST(test_gguf_shared_stories)
{
    check_stories("models/tinyllamas/stories260K.gguf", QUANT_F32);
    check_stories("models/tinyllamas/stories260K-F16.gguf", QUANT_F16);
    check_stories("models/tinyllamas/stories260K-Q8_0.gguf", QUANT_Q8_0);
    check_stories("models/tinyllamas/stories260K-Q4_0.gguf", QUANT_Q4_0);
}
END_TEST

START_TEST(test_gguf_shared_vocabs)
{
    static const char *names[] = {"deepseek-coder", "deepseek-llm", "falcon",   "gpt-2",
                                  "llama-spm",      "phi-3",        "starcoder"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char rel[128], err[256], model[32];
        snprintf(rel, sizeof(rel), "testdata/tokenizer/ggml-vocab-%s.gguf", names[i]);
        const char *p = test_shared_path(rel);
        if (!p) continue;
        struct gguf *g = NULL;
        ck_assert_msg(gguf_open(p, &g, err, sizeof(err)) == 0, "%s: %s", rel, err);
        ck_assert_uint_eq(gguf_tensor_count(g), 0);
        ck_assert_int_eq(gguf_get_cstr(g, "tokenizer.ggml.model", model, sizeof(model)), 0);
        const struct gguf_array *toks;
        ck_assert_int_eq(gguf_get_arr(g, "tokenizer.ggml.tokens", &toks), 0);
        ck_assert_uint_gt(toks->n, 1000);
        if (strcmp(names[i], "llama-spm") == 0) {
            ck_assert_str_eq(model, "llama");
            ck_assert_uint_eq(toks->n, 32000);
        }
        gguf_close(g);
    }
}
END_TEST

/* Copying every key and tensor of a llama.cpp file through the writer reproduces it byte for byte
 * (same key order, same alignment and padding). */
START_TEST(test_gguf_writer_copy_is_byte_identical)
{
    const char *p = test_shared_path("models/tinyllamas/stories260K-Q8_0.gguf");
    if (!p) return;
    struct gguf *g = NULL;
    char err[256], path[512];
    ck_assert_int_eq(gguf_open(p, &g, err, sizeof(err)), 0);
    struct gguf_writer *w = gguf_writer_new();
    for (size_t i = 0; i < gguf_kv_count(g); i++)
        ck_assert_int_eq(gguf_writer_set_kv(w, gguf_kv_at(g, i)), 0);
    for (size_t i = 0; i < gguf_tensor_count(g); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        ck_assert_int_eq(
            gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->size), 0);
    }
    tmp_path(path, sizeof(path), "copy.gguf");
    ck_assert_int_eq(gguf_writer_write(w, path), 0);
    gguf_writer_free(w);
    gguf_close(g);
    struct blob a = read_file(p), b = read_file(path);
    unlink(path);
    ck_assert_uint_eq(a.n, b.n);
    ck_assert_int_eq(memcmp(a.p, b.p, a.n), 0);
    free(a.p);
    free(b.p);
}
END_TEST

Suite *gguf_suite(void)
{
    Suite *s = suite_create("gguf");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_gguf_small_file_parses);
    tcase_add_test(tc, test_gguf_v2_accepted);
    tcase_add_test(tc, test_gguf_truncated_everywhere);
    tcase_add_test(tc, test_gguf_bad_magic_and_versions);
    tcase_add_test(tc, test_gguf_huge_counts_fail_fast);
    tcase_add_test(tc, test_gguf_bad_values);
    tcase_add_test(tc, test_gguf_bad_tensor_infos);
    tcase_add_test(tc, test_gguf_nesting_and_names);
    tcase_add_test(tc, test_gguf_empty_and_open_errors);
    tcase_add_test(tc, test_gguf_getters);
    tcase_add_test(tc, test_gguf_release_data_keeps_metadata);
    tcase_add_test(tc, test_gguf_writer_rejects);
    tcase_add_test(tc, test_gguf_writer_alignment_64);
    tcase_add_test(tc, test_gguf_shared_stories);
    tcase_add_test(tc, test_gguf_shared_vocabs);
    tcase_add_test(tc, test_gguf_writer_copy_is_byte_identical);
    suite_add_tcase(s, tc);
    return s;
}
