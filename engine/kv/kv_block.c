/* KV block records: encode, seal (SHA-256) and check. See kv_block.h for the format. */
#include "engine/kv/kv_block.h"

#include "common/err.h"
#include "common/sha256.h"

#include <stdio.h>
#include <string.h>

static const char kv_block_magic[8] = {'C', 'I', 'N', 'F', 'E', 'R', 'K', 'V'};
#define KV_BLOCK_DIGEST_OFF 8
#define KV_BLOCK_BODY_OFF   (KV_BLOCK_DIGEST_OFF + KV_BLOCK_DIGEST_HEX)

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

uint64_t kv_block_namespace(const struct kv_block_layout *l)
{
    char text[256], hex[SHA256_HEX_LEN];
    int n = snprintf(text, sizeof(text),
                     "cinfer-kv-block v%d model=%s type=%d bs=%d layers=%d "
                     "kv_heads=%d head_dim=%d payload=%llu",
                     KV_BLOCK_LAYOUT_VERSION, l->model_digest, l->kv_type, l->block_size,
                     l->n_layers, l->n_kv_heads, l->head_dim, (unsigned long long)l->payload_bytes);
    if (n < 0 || (size_t)n >= sizeof(text) || sha256_hex(text, (size_t)n, hex) != 0) return 0;
    uint64_t h = 0;
    for (int i = 0; i < 16; i++)
        h = h << 4 | (uint64_t)(hex[i] <= '9' ? hex[i] - '0' : hex[i] - 'a' + 10);
    return h ? h : 1;
}

size_t kv_block_record_bytes(int block_size, uint64_t payload_bytes)
{
    if (block_size <= 0 || payload_bytes > SIZE_MAX / 2) return 0;
    size_t tok = (size_t)block_size * sizeof(int32_t);
    return KV_BLOCK_HEADER_BYTES + tok + (size_t)payload_bytes;
}

uint8_t *kv_block_payload(uint8_t *rec, int block_size)
{
    return rec + KV_BLOCK_HEADER_BYTES + (size_t)block_size * sizeof(int32_t);
}

const uint8_t *kv_block_payload_const(const uint8_t *rec, int block_size)
{
    return rec + KV_BLOCK_HEADER_BYTES + (size_t)block_size * sizeof(int32_t);
}

int kv_block_encode(uint8_t *rec, size_t record_bytes, const struct kv_block_meta *m)
{
    if (record_bytes == 0 || record_bytes != kv_block_record_bytes(m->block_size, m->payload_bytes))
        return ERR_INVAL;
    memcpy(rec, kv_block_magic, sizeof(kv_block_magic));
    memset(rec + KV_BLOCK_DIGEST_OFF, '0', KV_BLOCK_DIGEST_HEX);
    put_u32(rec + 72, KV_BLOCK_LAYOUT_VERSION);
    put_u32(rec + 76, (uint32_t)m->block_size);
    put_u64(rec + 80, m->ns);
    put_u64(rec + 88, m->hash);
    put_u64(rec + 96, m->parent);
    put_u64(rec + 104, m->payload_bytes);
    for (int i = 0; i < m->block_size; i++)
        put_u32(rec + KV_BLOCK_HEADER_BYTES + 4 * (size_t)i, (uint32_t)m->tokens[i]);
    return 0;
}

int kv_block_seal(uint8_t *rec, size_t record_bytes)
{
    char hex[SHA256_HEX_LEN];
    if (sha256_hex(rec + KV_BLOCK_BODY_OFF, record_bytes - KV_BLOCK_BODY_OFF, hex) != 0)
        return ERR_NOMEM;
    memcpy(rec + KV_BLOCK_DIGEST_OFF, hex, KV_BLOCK_DIGEST_HEX);
    return 0;
}

int kv_block_check(const uint8_t *rec, size_t len, const struct kv_block_meta *want, bool digest)
{
    size_t expect = kv_block_record_bytes(want->block_size, want->payload_bytes);
    if (len < KV_BLOCK_HEADER_BYTES || memcmp(rec, kv_block_magic, sizeof(kv_block_magic)) != 0 ||
        get_u32(rec + 72) != KV_BLOCK_LAYOUT_VERSION)
        return ERR_PARSE;
    if (get_u32(rec + 76) != (uint32_t)want->block_size ||
        get_u64(rec + 104) != want->payload_bytes || len != expect)
        return ERR_PARSE; /* the name says this layout: a different size is a damaged file */
    char hex[SHA256_HEX_LEN];
    if (digest) {
        if (sha256_hex(rec + KV_BLOCK_BODY_OFF, len - KV_BLOCK_BODY_OFF, hex) != 0)
            return ERR_NOMEM;
        if (memcmp(hex, rec + KV_BLOCK_DIGEST_OFF, KV_BLOCK_DIGEST_HEX) != 0) return ERR_PARSE;
    }
    if (get_u64(rec + 80) != want->ns || get_u64(rec + 88) != want->hash ||
        get_u64(rec + 96) != want->parent)
        return ERR_NOT_FOUND;
    for (int i = 0; i < want->block_size; i++)
        if ((int32_t)get_u32(rec + KV_BLOCK_HEADER_BYTES + 4 * (size_t)i) != want->tokens[i])
            return ERR_NOT_FOUND;
    return 0;
}
