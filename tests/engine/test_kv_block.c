/* KV block records (engine/kv/kv_block.h) and the CPU backend's block I/O: a record round-trips;
 * every flipped byte and every truncation is detected (ERR_PARSE), another block under the same
 * name is refused (ERR_NOT_FOUND), namespaces differ for every layout field; kv_block_read/write
 * move exactly one block of every layer and agree with kv_copy_block. */
#include "engine/kv/kv_block.h"

#include "common/err.h"
#include "engine/backend/backend.h"
#include "engine/gguf/quant.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#define BS      4
#define PAYLOAD 96

static void fill_meta(struct kv_block_meta *m, int32_t *tokens)
{
    for (int i = 0; i < BS; i++) tokens[i] = 100 + i;
    *m = (struct kv_block_meta){.ns = 0x1234,
                                .hash = 0x55aa,
                                .parent = 0x8000000000000001ull,
                                .block_size = BS,
                                .tokens = tokens,
                                .payload_bytes = PAYLOAD};
}

static uint8_t *make_record(const struct kv_block_meta *m, size_t *len)
{
    *len = kv_block_record_bytes(m->block_size, m->payload_bytes);
    uint8_t *rec = malloc(*len);
    ck_assert_ptr_nonnull(rec);
    ck_assert_int_eq(kv_block_encode(rec, *len, m), 0);
    uint8_t *p = kv_block_payload(rec, m->block_size);
    for (int i = 0; i < PAYLOAD; i++) p[i] = (uint8_t)(i * 7 + 3);
    ck_assert_int_eq(kv_block_seal(rec, *len), 0);
    return rec;
}

START_TEST(test_kv_block_round_trip)
{
    int32_t tokens[BS];
    struct kv_block_meta m;
    fill_meta(&m, tokens);
    size_t len;
    uint8_t *rec = make_record(&m, &len);
    ck_assert_uint_eq(len, KV_BLOCK_HEADER_BYTES + BS * 4 + PAYLOAD);
    ck_assert_int_eq(kv_block_check(rec, len, &m, true), 0);
    const uint8_t *p = kv_block_payload_const(rec, BS);
    for (int i = 0; i < PAYLOAD; i++) ck_assert_uint_eq(p[i], (uint8_t)(i * 7 + 3));
    /* A size that disagrees with the geometry is refused before anything is written. */
    ck_assert_int_eq(kv_block_encode(rec, len - 1, &m), ERR_INVAL);
    free(rec);
}
END_TEST

START_TEST(test_kv_block_detects_every_flipped_byte_and_truncation)
{
    int32_t tokens[BS];
    struct kv_block_meta m;
    fill_meta(&m, tokens);
    size_t len;
    uint8_t *rec = make_record(&m, &len);
    for (size_t i = 0; i < len; i++) {
        rec[i] ^= 0x01;
        ck_assert_int_ne(kv_block_check(rec, len, &m, true), 0);
        rec[i] ^= 0x01;
    }
    for (size_t n = 0; n < len; n++) ck_assert_int_eq(kv_block_check(rec, n, &m, true), ERR_PARSE);
    ck_assert_int_eq(kv_block_check(rec, len, &m, true), 0);
    free(rec);
}
END_TEST

START_TEST(test_kv_block_other_block_is_a_miss)
{
    int32_t tokens[BS], other[BS];
    struct kv_block_meta m;
    fill_meta(&m, tokens);
    size_t len;
    uint8_t *rec = make_record(&m, &len);
    struct kv_block_meta w = m;
    memcpy(other, tokens, sizeof(other));
    other[2]++;
    w.tokens = other; /* same hash, other tokens: a collision */
    ck_assert_int_eq(kv_block_check(rec, len, &w, true), ERR_NOT_FOUND);
    w = m;
    w.parent ^= 1;
    ck_assert_int_eq(kv_block_check(rec, len, &w, true), ERR_NOT_FOUND);
    w = m;
    w.ns ^= 1;
    ck_assert_int_eq(kv_block_check(rec, len, &w, true), ERR_NOT_FOUND);
    w = m;
    w.payload_bytes++; /* another layout under the same name: damaged */
    ck_assert_int_eq(kv_block_check(rec, len, &w, true), ERR_PARSE);
    free(rec);
}
END_TEST

START_TEST(test_kv_block_namespace_covers_every_field)
{
    struct kv_block_layout a = {.kv_type = 1,
                                .block_size = 16,
                                .n_layers = 5,
                                .n_kv_heads = 4,
                                .head_dim = 8,
                                .payload_bytes = 1 << 14};
    memset(a.model_digest, 'a', KV_BLOCK_DIGEST_HEX);
    uint64_t base = kv_block_namespace(&a);
    ck_assert_uint_ne(base, 0);
    ck_assert_uint_eq(kv_block_namespace(&a), base); /* stable */
    struct kv_block_layout b;
    b = a, b.model_digest[3] = 'b';
    ck_assert_uint_ne(kv_block_namespace(&b), base);
    b = a, b.kv_type = 0;
    ck_assert_uint_ne(kv_block_namespace(&b), base);
    b = a, b.block_size = 32;
    ck_assert_uint_ne(kv_block_namespace(&b), base);
    b = a, b.n_layers = 6;
    ck_assert_uint_ne(kv_block_namespace(&b), base);
    b = a, b.n_kv_heads = 2;
    ck_assert_uint_ne(kv_block_namespace(&b), base);
    b = a, b.head_dim = 16;
    ck_assert_uint_ne(kv_block_namespace(&b), base);
    b = a, b.payload_bytes++;
    ck_assert_uint_ne(kv_block_namespace(&b), base);
}
END_TEST

START_TEST(test_kv_block_cpu_backend_read_write)
{
    struct backend *b;
    struct backend_options o = {.n_threads = 1};
    ck_assert_int_eq(backend_create("cpu", &o, &b), 0);
    struct backend_kv_desc d = {.n_layers = 3,
                                .n_blocks = 4,
                                .block_size = BS,
                                .n_kv_heads = 2,
                                .head_dim = 32,
                                .type = QUANT_F16};
    size_t bytes = 2 * 3 * BS * 2 * 32 * 2;
    uint8_t *in = malloc(bytes), *out = malloc(bytes), *zero = calloc(1, bytes);
    ck_assert_int_eq(b->ops->kv_block_read(b, 0, out, bytes), ERR_BAD_STATE);
    ck_assert_int_eq(b->ops->kv_alloc(b, &d), 0);
    for (size_t i = 0; i < bytes; i++) in[i] = (uint8_t)(i * 31 + 1);
    ck_assert_int_eq(b->ops->kv_block_write(b, 1, in, bytes - 1), ERR_INVAL);
    ck_assert_int_eq(b->ops->kv_block_write(b, 4, in, bytes), ERR_RANGE);
    ck_assert_int_eq(b->ops->kv_block_write(b, 1, in, bytes), 0);
    ck_assert_int_eq(b->ops->kv_block_read(b, 1, out, bytes), 0);
    ck_assert_mem_eq(out, in, bytes);
    /* Only block 1 was written; the copy op agrees with the block layout. */
    for (int blk = 0; blk < 4; blk += 2) {
        ck_assert_int_eq(b->ops->kv_block_read(b, blk, out, bytes), 0);
        ck_assert_mem_eq(out, zero, bytes);
    }
    ck_assert_int_eq(b->ops->kv_copy_block(b, 1, 3), 0);
    ck_assert_int_eq(b->ops->kv_block_read(b, 3, out, bytes), 0);
    ck_assert_mem_eq(out, in, bytes);
    free(in);
    free(out);
    free(zero);
    b->ops->destroy(b);
}
END_TEST

Suite *kv_block_suite(void);
Suite *kv_block_suite(void)
{
    Suite *s = suite_create("kv_block");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_kv_block_round_trip);
    tcase_add_test(tc, test_kv_block_detects_every_flipped_byte_and_truncation);
    tcase_add_test(tc, test_kv_block_other_block_is_a_miss);
    tcase_add_test(tc, test_kv_block_namespace_covers_every_field);
    tcase_add_test(tc, test_kv_block_cpu_backend_read_write);
    suite_add_tcase(s, tc);
    return s;
}
