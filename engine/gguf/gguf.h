/* GGUF reader and writer (the llama.cpp / Ollama model format, v2 and v3).
 * Spec: https://github.com/ggerganov/ggml/blob/master/docs/gguf.md
 * The reader memory-maps the file and never copies tensor data: tensor pointers borrow from the
 * mapping, which lives until gguf_release_data() or gguf_close(). gguf_open copies the metadata
 * (keys, values, tensor infos: everything before the tensor data) out of the mapping, so key/values
 * outlive the mapping and a file truncated or rewritten on disk cannot change or fault them. Every
 * malformed input yields a precise message and an error code, never a crash or an out-of-bounds read
 * (tests/engine/test_gguf.c, tests/fuzz/fuzz_gguf.c).
 * Not thread-safe for writing; a parsed file may be read from any thread. */
#ifndef CINFER_ENGINE_GGUF_H
#define CINFER_ENGINE_GGUF_H

#include "engine/gguf/quant.h"

#include "common/sha256.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum gguf_value_type {
    GGUF_UINT8 = 0,
    GGUF_INT8 = 1,
    GGUF_UINT16 = 2,
    GGUF_INT16 = 3,
    GGUF_UINT32 = 4,
    GGUF_INT32 = 5,
    GGUF_FLOAT32 = 6,
    GGUF_BOOL = 7,
    GGUF_STRING = 8,
    GGUF_ARRAY = 9,
    GGUF_UINT64 = 10,
    GGUF_INT64 = 11,
    GGUF_FLOAT64 = 12,
};

#define GGUF_MAX_DIMS          4
#define GGUF_DEFAULT_ALIGNMENT 32

/* A string inside the file: not NUL-terminated; borrowed from the gguf (its metadata copy after
 * gguf_open, the caller's buffer after gguf_parse). */
struct gguf_str {
    const char *data;
    uint64_t len;
};

struct gguf_array {
    enum gguf_value_type type; /* element type */
    uint64_t n;
    const void *data;              /* fixed-size elements: little-endian, unaligned, in the gguf */
    const struct gguf_str *strs;   /* GGUF_STRING elements (owned by the gguf) */
    const struct gguf_array *arrs; /* GGUF_ARRAY elements, nested (owned by the gguf) */
};

struct gguf_kv {
    const char *key; /* NUL-terminated copy, owned by the gguf */
    enum gguf_value_type type;
    union {
        uint64_t u64; /* UINT8..UINT64 */
        int64_t i64;  /* INT8..INT64 */
        double f64;   /* FLOAT32, FLOAT64 */
        bool b;
        struct gguf_str str;
        struct gguf_array arr;
    } v;
};

struct gguf_tensor {
    const char *name; /* NUL-terminated copy, owned by the gguf */
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS]; /* elements per dimension, ne[0] fastest; unused dims are 1 */
    enum quant_type type;
    uint64_t offset;  /* from the start of the data section */
    const void *data; /* borrowed from the mapping; NULL for a vocabulary-only parse and after
                       * gguf_release_data */
    uint64_t size;    /* bytes */
};

struct gguf;

/* Maps and parses the file at `path` (borrowed). On success *out is new (gguf_close frees it).
 * On failure returns ERR_IO / ERR_PARSE / ERR_UNSUPPORTED / ERR_RANGE / ERR_NOMEM with a message
 * naming the problem and the byte offset in `err`. */
int gguf_open(const char *path, struct gguf **out, char *err, size_t errlen);
/* Parses an in-memory file (borrowed; must outlive the result). Same errors as gguf_open. */
int gguf_parse(const void *data, size_t size, struct gguf **out, char *err, size_t errlen);
/* Frees everything and unmaps. NULL-safe. */
void gguf_close(struct gguf *g);
/* Gives up the tensor data: unmaps the file (gguf_open) and sets every tensor's data to NULL;
 * names, shapes, sizes and the key/values stay readable. For a loader that has copied what it
 * keeps, so that nothing can fault on a file truncated underneath (SIGBUS) or read a file
 * rewritten in place. Idempotent; NULL-safe. Not concurrently with readers of tensor data. */
void gguf_release_data(struct gguf *g);

/* SHA-256 of the whole mapped file as lowercase hex (gguf_open, before gguf_release_data; reads
 * every page). 0, ERR_BAD_STATE (nothing mapped: gguf_parse, or released) or ERR_NOMEM. */
int gguf_sha256_hex(const struct gguf *g, char hex[SHA256_HEX_LEN]);
/* Whether the file gguf_open mapped is no longer the same at its path: another inode, size or
 * modification time, or gone. False for gguf_parse. When true and `why` is non-NULL, it gets what
 * changed ("size 10 bytes, was 4096"), else "". A stat(2); any thread. */
bool gguf_file_changed(const struct gguf *g, char *why, size_t whylen);

uint32_t gguf_version(const struct gguf *g);
uint64_t gguf_alignment(const struct gguf *g);
size_t gguf_kv_count(const struct gguf *g);
const struct gguf_kv *gguf_kv_at(const struct gguf *g, size_t i);
/* Looks a key up; NULL when absent. Borrowed. */
const struct gguf_kv *gguf_find(const struct gguf *g, const char *key);

/* Typed getters: 0, ERR_NOT_FOUND when the key is absent, ERR_INVAL on a type mismatch or a value
 * that does not fit. Integers accept any integer type whose value fits; floats accept F32/F64. */
int gguf_get_u32(const struct gguf *g, const char *key, uint32_t *out);
int gguf_get_i32(const struct gguf *g, const char *key, int32_t *out);
int gguf_get_f32(const struct gguf *g, const char *key, float *out);
int gguf_get_bool(const struct gguf *g, const char *key, bool *out);
int gguf_get_str(const struct gguf *g, const char *key, struct gguf_str *out);
int gguf_get_arr(const struct gguf *g, const char *key, const struct gguf_array **out);
/* Copies a string value into `buf` (NUL-terminated); ERR_TOO_BIG if it does not fit. */
int gguf_get_cstr(const struct gguf *g, const char *key, char *buf, size_t buflen);
/* Reads element i of a fixed-size numeric array as int64/double (bounds and type checked). */
int gguf_arr_get_i64(const struct gguf_array *a, uint64_t i, int64_t *out);
int gguf_arr_get_f64(const struct gguf_array *a, uint64_t i, double *out);

size_t gguf_tensor_count(const struct gguf *g);
const struct gguf_tensor *gguf_tensor_at(const struct gguf *g, size_t i);
const struct gguf_tensor *gguf_find_tensor(const struct gguf *g, const char *name);

/* Writer: collects key/values and tensors, then writes a v3 file. */
struct gguf_writer;
struct gguf_writer *gguf_writer_new(void);    /* returns new or NULL */
void gguf_writer_free(struct gguf_writer *w); /* NULL-safe */
/* Adds or replaces a key with a deep copy of `kv` (borrowed), e.g. copied from a parsed file. */
int gguf_writer_set_kv(struct gguf_writer *w, const struct gguf_kv *kv);
int gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v);
int gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v);
int gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v);
int gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool v);
int gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *v);
/* Arrays: `n` fixed-size elements of `type` (little-endian, as in memory on this host) at `data`, or
 * `n` NUL-terminated strings; both borrowed and copied. ERR_INVAL for STRING/ARRAY in set_arr. */
int gguf_writer_set_arr(struct gguf_writer *w, const char *key, enum gguf_value_type type,
                        const void *data, uint64_t n);
int gguf_writer_set_arr_str(struct gguf_writer *w, const char *key, const char *const *strs,
                            uint64_t n);
/* Setters return 0, ERR_INVAL (an integer that does not fit its type, an unknown type, or a
 * general.alignment that is not a uint32 power of two) or ERR_NOMEM. Keys keep their first insertion position when replaced. */
/* Adds a tensor; `data` (size bytes, matching type and shape) is borrowed until gguf_writer_write. */
int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, enum quant_type type,
                           uint32_t n_dims, const uint64_t *ne, const void *data, uint64_t size);
/* add_tensor returns 0, ERR_INVAL (name over 63 bytes, bad shape/type, size not matching the
 * shape) or ERR_EXISTS (duplicate name). */
/* Writes the file (alignment 32, or general.alignment when set) to `path` via a temporary file
 * renamed into place; ERR_IO with errno logged on failure. The writer stays usable. */
int gguf_writer_write(struct gguf_writer *w, const char *path);
/* The same file appended to `out` (borrowed; its max bounds it): for documents served over HTTP,
 * such as a tokenizer without tensors. 0, ERR_TOO_BIG or ERR_NOMEM (out keeps what it had). */
struct buf;
int gguf_writer_write_buf(struct gguf_writer *w, struct buf *out);

#endif
