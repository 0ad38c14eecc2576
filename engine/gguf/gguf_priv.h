/* Internals shared by the GGUF reader (gguf_read.c) and its accessors (gguf_get.c); not part of the
 * public API in gguf.h. */
#ifndef CINFER_ENGINE_GGUF_PRIV_H
#define CINFER_ENGINE_GGUF_PRIV_H

#include "engine/gguf/gguf.h"

#include <stddef.h>
#include <stdint.h>

/* Allocations for keys, names, string and nested-array tables: freed together by gguf_close. */
struct gguf_chunk {
    struct gguf_chunk *next;
    max_align_t data[];
};

struct gguf {
    const uint8_t *base; /* the whole file */
    size_t size;
    void *map; /* non-NULL when gguf_open mapped the file, until gguf_release_data */
    size_t map_size;
    const uint8_t *meta; /* gguf_open: the copy of the metadata bytes that values point into */
    char *path;          /* gguf_open: the file's path (gguf_file_changed), else NULL */
    struct gguf_file_id {
        uint64_t dev, ino, size;
        int64_t mtime_s, mtime_ns;
    } file_id; /* gguf_open: the file as fstat saw it when it was mapped */
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset; /* start of the tensor data section */
    struct gguf_kv *kvs;
    size_t n_kv;
    struct gguf_tensor *tensors;
    size_t n_tensors;
    size_t *kv_sorted; /* kv indices sorted by key, for gguf_find */
    size_t *tensor_sorted;
    struct gguf_chunk *chunks;
};

/* Bytes of one element of a fixed-size value type; 0 for STRING, ARRAY and unknown ids. */
size_t gguf_type_size(uint32_t t);
/* Reads an n-byte (n <= 8) little-endian unsigned integer from unaligned `p`. */
uint64_t gguf_le(const uint8_t *p, size_t n);

#endif
