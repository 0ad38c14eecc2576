/* The offload tiers' unit: one KV block of every layer serialized as one self-checking record,
 * named by the prefix cache's chained block hash inside a namespace of everything that decides what
 * the bytes mean (model file digest, KV element type, block size, head layout, layout version), so
 * a record written under another model or layout can never be read back as this one's K/V.
 *
 * Record (little endian, KV_BLOCK_HEADER_BYTES of header, then the block's tokens, then the
 * payload, the backend's kv_block_read layout):
 *   0  "CINFERKV"              8 bytes of magic
 *   8  SHA-256 of bytes [72, end), 64 lowercase hex digits
 *   72 u32 layout version      76 u32 block_size (tokens)
 *   80 u64 namespace           88 u64 block hash      96 u64 parent hash
 *   104 u64 payload bytes      112 i32 tokens[block_size], then the payload
 * A record is identified by (namespace, hash) and verified against its parent hash and tokens, so a
 * 64-bit hash collision costs a miss, never another prefix's K/V.
 *
 * Pure functions over caller-owned buffers; any thread. */
#ifndef CINFER_ENGINE_KV_BLOCK_H
#define CINFER_ENGINE_KV_BLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KV_BLOCK_LAYOUT_VERSION 1
#define KV_BLOCK_HEADER_BYTES   112
#define KV_BLOCK_DIGEST_HEX     64

/* What the bytes of a block depend on. */
struct kv_block_layout {
    char model_digest[KV_BLOCK_DIGEST_HEX + 1]; /* SHA-256 hex of the GGUF file */
    int kv_type;                                /* enum quant_type of the cache */
    int block_size;                             /* tokens per block */
    int n_layers, n_kv_heads, head_dim;
    uint64_t payload_bytes; /* model_kv_block_bytes */
};

/* One block's identity and contents as the prefix cache knows them. tokens borrowed. */
struct kv_block_meta {
    uint64_t ns;     /* kv_block_namespace */
    uint64_t hash;   /* prefix_cache_block_hash(parent, tokens, block_size) */
    uint64_t parent; /* the chain value hash was computed from */
    int block_size;
    const int32_t *tokens; /* (block_size) */
    uint64_t payload_bytes;
};

/* The namespace of a layout: the first 64 bits of SHA-256 over its canonical text (every field and
 * KV_BLOCK_LAYOUT_VERSION). 0 only if OpenSSL cannot allocate (callers then disable offload). */
uint64_t kv_block_namespace(const struct kv_block_layout *l);

/* Bytes of a whole record for this block geometry; 0 on overflow. */
size_t kv_block_record_bytes(int block_size, uint64_t payload_bytes);

/* Writes the header fields and tokens of m into rec (record_bytes long, caller's); the payload
 * (kv_block_payload) is the caller's to fill before kv_block_seal. ERR_INVAL when the sizes
 * disagree. */
int kv_block_encode(uint8_t *rec, size_t record_bytes, const struct kv_block_meta *m);
/* Where the payload starts in a record of block_size tokens. */
uint8_t *kv_block_payload(uint8_t *rec, int block_size);
const uint8_t *kv_block_payload_const(const uint8_t *rec, int block_size);
/* Computes and stores the digest over the finished record. 0, or ERR_NOMEM (OpenSSL). */
int kv_block_seal(uint8_t *rec, size_t record_bytes);

/* Checks a record read back (borrowed, len bytes): magic, version, length, namespace, hash,
 * parent, tokens and block size against `want`, and the digest when `digest` (a record that never
 * left this process's memory may skip it). 0 when it is exactly that block;
 * ERR_NOT_FOUND when it is well-formed but another block (a hash collision); ERR_PARSE when it is
 * truncated or corrupt. */
int kv_block_check(const uint8_t *rec, size_t len, const struct kv_block_meta *want, bool digest);

#endif
