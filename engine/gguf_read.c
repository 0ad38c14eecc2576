/* GGUF reader: validates and indexes a memory-mapped v2/v3 file without copying tensor data.
 * Spec: https://github.com/ggerganov/ggml/blob/master/docs/gguf.md
 * Every count and length read from the file is checked against the bytes that remain BEFORE anything
 * is allocated for it, so a huge count in a tiny file fails at once. Tensor data pointers borrow from
 * the mapping (or the caller's buffer for gguf_parse). The writer lives in gguf_write.c. */
#include "engine/gguf.h"

#include "common/err.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Arrays may nest; real files use one level. A bound keeps recursion off the stack's edge. */
#define GGUF_MAX_NESTING 8
/* ggml's GGML_MAX_NAME is 64 including the terminator; llama.cpp rejects longer tensor names. */
#define GGUF_MAX_TENSOR_NAME 63

/* Allocations for keys, names, string and nested-array tables: freed together by gguf_close. */
struct gguf_chunk {
    struct gguf_chunk *next;
    max_align_t data[];
};

struct gguf {
    const uint8_t *base; /* the whole file */
    size_t size;
    void *map; /* non-NULL when gguf_open mapped the file */
    size_t map_size;
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

/* Parse cursor over the file; `err` receives the first failure. */
struct gguf_cur {
    struct gguf *g;
    size_t pos;
    char *err;
    size_t errlen;
};

static int gguf_fail(struct gguf_cur *c, int rc, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int gguf_fail(struct gguf_cur *c, int rc, size_t at, const char *fmt, ...)
{
    if (c->err && c->errlen) {
        char msg[384];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        snprintf(c->err, c->errlen, "gguf: %s at offset %zu", msg, at);
    }
    return rc;
}

static void gguf_seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void gguf_seterr(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static void *gguf_alloc(struct gguf *g, size_t n)
{
    if (n > SIZE_MAX - sizeof(struct gguf_chunk)) return NULL;
    struct gguf_chunk *ch = malloc(sizeof(*ch) + n);
    if (!ch) return NULL;
    ch->next = g->chunks;
    g->chunks = ch;
    return ch->data;
}

static size_t gguf_left(const struct gguf_cur *c)
{
    return c->g->size - c->pos;
}

static int gguf_need(struct gguf_cur *c, size_t n, const char *what)
{
    if (gguf_left(c) < n)
        return gguf_fail(c, ERR_PARSE, c->pos, "truncated %s (need %zu bytes, %zu left)", what, n,
                         gguf_left(c));
    return 0;
}

static uint64_t gguf_le(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static int gguf_rd_u32(struct gguf_cur *c, uint32_t *out, const char *what)
{
    int rc = gguf_need(c, 4, what);
    if (rc) return rc;
    *out = (uint32_t)gguf_le(c->g->base + c->pos, 4);
    c->pos += 4;
    return 0;
}

static int gguf_rd_u64(struct gguf_cur *c, uint64_t *out, const char *what)
{
    int rc = gguf_need(c, 8, what);
    if (rc) return rc;
    *out = gguf_le(c->g->base + c->pos, 8);
    c->pos += 8;
    return 0;
}

static int gguf_rd_str(struct gguf_cur *c, struct gguf_str *out, const char *what)
{
    size_t at = c->pos;
    uint64_t len;
    int rc = gguf_rd_u64(c, &len, what);
    if (rc) return rc;
    if (len > gguf_left(c))
        return gguf_fail(c, ERR_PARSE, at, "%s length %" PRIu64 " exceeds the %zu bytes left", what,
                         len, gguf_left(c));
    out->data = (const char *)c->g->base + c->pos;
    out->len = len;
    c->pos += (size_t)len;
    return 0;
}

/* Copies a key or name into a NUL-terminated string owned by the gguf; rejects embedded NULs. */
static int gguf_dup_name(struct gguf_cur *c, const struct gguf_str *s, size_t at, const char *what,
                         const char **out)
{
    if (memchr(s->data, '\0', (size_t)s->len))
        return gguf_fail(c, ERR_PARSE, at, "%s contains a NUL byte", what);
    char *p = gguf_alloc(c->g, (size_t)s->len + 1);
    if (!p) return gguf_fail(c, ERR_NOMEM, at, "out of memory copying %s", what);
    memcpy(p, s->data, (size_t)s->len);
    p[s->len] = '\0';
    *out = p;
    return 0;
}

/* Bytes of one element of a fixed-size type; 0 for STRING/ARRAY and unknown types. */
static size_t gguf_type_size(uint32_t t)
{
    switch (t) {
    case GGUF_UINT8:
    case GGUF_INT8:
    case GGUF_BOOL: return 1;
    case GGUF_UINT16:
    case GGUF_INT16: return 2;
    case GGUF_UINT32:
    case GGUF_INT32:
    case GGUF_FLOAT32: return 4;
    case GGUF_UINT64:
    case GGUF_INT64:
    case GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

/* Smallest encoding of one element, for bounding counts before allocating. */
static size_t gguf_min_elem_size(uint32_t t)
{
    if (t == GGUF_STRING) return 8;    /* u64 length */
    if (t == GGUF_ARRAY) return 4 + 8; /* u32 type + u64 count */
    return gguf_type_size(t);
}

static int gguf_parse_array(struct gguf_cur *c, struct gguf_array *a, int depth);

/* Reads a fixed-size scalar at the cursor into the kv's union. */
static void gguf_scalar(const uint8_t *p, uint32_t t, struct gguf_kv *kv)
{
    uint64_t raw = gguf_le(p, gguf_type_size(t));
    switch (t) {
    case GGUF_UINT8:
    case GGUF_UINT16:
    case GGUF_UINT32:
    case GGUF_UINT64: kv->v.u64 = raw; break;
    case GGUF_INT8: kv->v.i64 = (int8_t)raw; break;
    case GGUF_INT16: kv->v.i64 = (int16_t)raw; break;
    case GGUF_INT32: kv->v.i64 = (int32_t)raw; break;
    case GGUF_INT64: kv->v.i64 = (int64_t)raw; break;
    case GGUF_FLOAT32: {
        uint32_t u = (uint32_t)raw;
        float f;
        memcpy(&f, &u, sizeof(f));
        kv->v.f64 = f;
        break;
    }
    case GGUF_FLOAT64: memcpy(&kv->v.f64, &raw, sizeof(double)); break;
    case GGUF_BOOL: kv->v.b = raw != 0; break;
    default: break;
    }
}

static int gguf_parse_array(struct gguf_cur *c, struct gguf_array *a, int depth)
{
    size_t at = c->pos;
    uint32_t t;
    uint64_t n;
    int rc;
    if (depth > GGUF_MAX_NESTING)
        return gguf_fail(c, ERR_UNSUPPORTED, at, "arrays nested deeper than %d levels",
                         GGUF_MAX_NESTING);
    if ((rc = gguf_rd_u32(c, &t, "array element type"))) return rc;
    size_t min = gguf_min_elem_size(t);
    if (min == 0) return gguf_fail(c, ERR_PARSE, at, "unknown array element type %" PRIu32, t);
    size_t nat = c->pos;
    if ((rc = gguf_rd_u64(c, &n, "array length"))) return rc;
    if (n > gguf_left(c) / min)
        return gguf_fail(c, ERR_PARSE, nat,
                         "array of %" PRIu64 " elements cannot fit in the %zu bytes left", n,
                         gguf_left(c));
    a->type = (enum gguf_value_type)t;
    a->n = n;
    a->data = NULL;
    a->strs = NULL;
    a->arrs = NULL;
    if (t == GGUF_STRING) {
        struct gguf_str *strs = n ? gguf_alloc(c->g, (size_t)n * sizeof(*strs)) : NULL;
        if (n && !strs) return gguf_fail(c, ERR_NOMEM, nat, "out of memory for string array");
        for (uint64_t i = 0; i < n; i++)
            if ((rc = gguf_rd_str(c, &strs[i], "array string"))) return rc;
        a->strs = strs;
    } else if (t == GGUF_ARRAY) {
        struct gguf_array *arrs = n ? gguf_alloc(c->g, (size_t)n * sizeof(*arrs)) : NULL;
        if (n && !arrs) return gguf_fail(c, ERR_NOMEM, nat, "out of memory for nested arrays");
        for (uint64_t i = 0; i < n; i++)
            if ((rc = gguf_parse_array(c, &arrs[i], depth + 1))) return rc;
        a->arrs = arrs;
    } else {
        a->data = c->g->base + c->pos;
        c->pos += (size_t)n * min;
    }
    return 0;
}

static int gguf_parse_kv(struct gguf_cur *c, struct gguf_kv *kv)
{
    size_t at = c->pos;
    struct gguf_str key;
    uint32_t t;
    int rc;
    if ((rc = gguf_rd_str(c, &key, "key"))) return rc;
    if ((rc = gguf_dup_name(c, &key, at, "key", &kv->key))) return rc;
    size_t tat = c->pos;
    if ((rc = gguf_rd_u32(c, &t, "value type"))) return rc;
    kv->type = (enum gguf_value_type)t;
    if (t == GGUF_STRING) return gguf_rd_str(c, &kv->v.str, "string value");
    if (t == GGUF_ARRAY) return gguf_parse_array(c, &kv->v.arr, 1);
    size_t sz = gguf_type_size(t);
    if (sz == 0)
        return gguf_fail(c, ERR_PARSE, tat, "key '%s' has unknown value type %" PRIu32, kv->key, t);
    if ((rc = gguf_need(c, sz, "value"))) return rc;
    gguf_scalar(c->g->base + c->pos, t, kv);
    c->pos += sz;
    return 0;
}

static int gguf_parse_tensor_info(struct gguf_cur *c, struct gguf_tensor *ti)
{
    size_t at = c->pos;
    struct gguf_str name;
    uint32_t n_dims, type;
    int rc;
    if ((rc = gguf_rd_str(c, &name, "tensor name"))) return rc;
    if (name.len > GGUF_MAX_TENSOR_NAME)
        return gguf_fail(c, ERR_RANGE, at, "tensor name of %" PRIu64 " bytes (max %d)", name.len,
                         GGUF_MAX_TENSOR_NAME);
    if ((rc = gguf_dup_name(c, &name, at, "tensor name", &ti->name))) return rc;
    size_t dat = c->pos;
    if ((rc = gguf_rd_u32(c, &n_dims, "tensor dimension count"))) return rc;
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return gguf_fail(c, ERR_RANGE, dat,
                         "tensor '%s' has %" PRIu32 " dimensions (1..%d allowed)", ti->name, n_dims,
                         GGUF_MAX_DIMS);
    ti->n_dims = n_dims;
    uint64_t nelem = 1;
    for (uint32_t i = 0; i < GGUF_MAX_DIMS; i++) ti->ne[i] = 1;
    for (uint32_t i = 0; i < n_dims; i++) {
        size_t eat = c->pos;
        if ((rc = gguf_rd_u64(c, &ti->ne[i], "tensor dimension"))) return rc;
        if (ti->ne[i] == 0 || ti->ne[i] > INT64_MAX)
            return gguf_fail(c, ERR_RANGE, eat, "tensor '%s' dimension %" PRIu32 " is %" PRIu64,
                             ti->name, i, ti->ne[i]);
        if (nelem > (uint64_t)INT64_MAX / ti->ne[i])
            return gguf_fail(c, ERR_RANGE, eat, "tensor '%s' element count overflows", ti->name);
        nelem *= ti->ne[i];
    }
    size_t tat = c->pos;
    if ((rc = gguf_rd_u32(c, &type, "tensor type"))) return rc;
    if (!quant_type_known(type))
        return gguf_fail(c, ERR_UNSUPPORTED, tat, "tensor '%s' has unknown type id %" PRIu32,
                         ti->name, type);
    ti->type = (enum quant_type)type;
    size_t row = quant_row_bytes(ti->type, ti->ne[0]);
    if (row == 0)
        return gguf_fail(c, ERR_RANGE, tat,
                         "tensor '%s' row of %" PRIu64 " elements is not a multiple of the %s "
                         "block size %zu",
                         ti->name, ti->ne[0], quant_type_name(ti->type),
                         quant_block_elems(ti->type));
    uint64_t rows = nelem / ti->ne[0];
    if (rows > UINT64_MAX / row)
        return gguf_fail(c, ERR_RANGE, tat, "tensor '%s' byte size overflows", ti->name);
    ti->size = rows * row;
    size_t oat = c->pos;
    if ((rc = gguf_rd_u64(c, &ti->offset, "tensor offset"))) return rc;
    if (ti->offset % c->g->alignment != 0)
        return gguf_fail(c, ERR_RANGE, oat,
                         "tensor '%s' offset %" PRIu64
                         " is not a multiple of the alignment %" PRIu64,
                         ti->name, ti->offset, c->g->alignment);
    ti->data = NULL;
    return 0;
}

/* Orders indices by name so lookups are O(log n) and duplicates sit next to each other; ties keep
 * file order so the second occurrence is the one reported. */
static int gguf_cmp_kv(const void *a, const void *b, void *ctx)
{
    const struct gguf *g = ctx;
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    int r = strcmp(g->kvs[i].key, g->kvs[j].key);
    return r ? r : (i > j) - (i < j);
}

static int gguf_cmp_tensor(const void *a, const void *b, void *ctx)
{
    const struct gguf *g = ctx;
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    int r = strcmp(g->tensors[i].name, g->tensors[j].name);
    return r ? r : (i > j) - (i < j);
}

static int gguf_cmp_offset(const void *a, const void *b, void *ctx)
{
    const struct gguf *g = ctx;
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    uint64_t x = g->tensors[i].offset, y = g->tensors[j].offset;
    return x != y ? (x > y) - (x < y) : (i > j) - (i < j);
}

static size_t *gguf_index(struct gguf *g, size_t n, int (*cmp)(const void *, const void *, void *))
{
    size_t *idx = gguf_alloc(g, (n ? n : 1) * sizeof(*idx));
    if (!idx) return NULL;
    for (size_t i = 0; i < n; i++) idx[i] = i;
    qsort_r(idx, n, sizeof(*idx), cmp, g);
    return idx;
}

/* general.alignment: an unsigned 32-bit power of two (the spec's type), default 32. */
static int gguf_read_alignment(struct gguf_cur *c, const size_t *kv_at)
{
    c->g->alignment = GGUF_DEFAULT_ALIGNMENT;
    for (size_t i = 0; i < c->g->n_kv; i++) {
        const struct gguf_kv *kv = &c->g->kvs[i];
        if (strcmp(kv->key, "general.alignment") != 0) continue;
        if (kv->type != GGUF_UINT32)
            return gguf_fail(c, ERR_PARSE, kv_at[i], "general.alignment is not a uint32");
        if (kv->v.u64 == 0 || (kv->v.u64 & (kv->v.u64 - 1)) != 0)
            return gguf_fail(c, ERR_RANGE, kv_at[i],
                             "general.alignment %" PRIu64 " is not a nonzero power of two",
                             kv->v.u64);
        c->g->alignment = kv->v.u64;
    }
    return 0;
}

/* Places every tensor inside the data section and checks that no two overlap. */
static int gguf_place_tensors(struct gguf_cur *c, const size_t *ti_at)
{
    struct gguf *g = c->g;
    uint64_t pad = (g->alignment - c->pos % g->alignment) % g->alignment;
    g->data_offset = c->pos + pad;
    if (g->n_tensors == 0) return 0; /* vocabulary-only: the file may end before the padding */
    if (g->data_offset > g->size)
        return gguf_fail(c, ERR_PARSE, c->pos, "file ends before the tensor data section");
    uint64_t avail = g->size - g->data_offset;
    for (size_t i = 0; i < g->n_tensors; i++) {
        struct gguf_tensor *t = &g->tensors[i];
        if (t->offset > avail || t->size > avail - t->offset)
            return gguf_fail(c, ERR_RANGE, ti_at[i],
                             "tensor '%s' data [%" PRIu64 ", +%" PRIu64
                             ") lies outside the %" PRIu64 "-byte data section",
                             t->name, t->offset, t->size, avail);
        t->data = g->base + g->data_offset + t->offset;
    }
    size_t *by_off = malloc(g->n_tensors * sizeof(*by_off));
    if (!by_off) return gguf_fail(c, ERR_NOMEM, c->pos, "out of memory checking tensor overlap");
    for (size_t i = 0; i < g->n_tensors; i++) by_off[i] = i;
    qsort_r(by_off, g->n_tensors, sizeof(*by_off), gguf_cmp_offset, g);
    int rc = 0;
    for (size_t k = 1; k < g->n_tensors && rc == 0; k++) {
        const struct gguf_tensor *a = &g->tensors[by_off[k - 1]], *b = &g->tensors[by_off[k]];
        if (a->offset + a->size > b->offset)
            rc = gguf_fail(c, ERR_RANGE, ti_at[by_off[k]], "tensor '%s' overlaps tensor '%s'",
                           b->name, a->name);
    }
    free(by_off);
    return rc;
}

static int gguf_parse_header(struct gguf_cur *c, uint64_t *n_tensors, uint64_t *n_kv)
{
    int rc;
    uint32_t version;
    if ((rc = gguf_need(c, 4, "magic"))) return rc;
    if (memcmp(c->g->base, "GGUF", 4) != 0)
        return gguf_fail(c, ERR_PARSE, 0, "bad magic (not a GGUF file)");
    c->pos = 4;
    if ((rc = gguf_rd_u32(c, &version, "version"))) return rc;
    if (version == 1)
        return gguf_fail(c, ERR_UNSUPPORTED, 4,
                         "GGUF version 1 is not supported (obsolete; convert the file to v3)");
    if ((version & 0xFFFF) == 0 && version != 0)
        return gguf_fail(c, ERR_UNSUPPORTED, 4,
                         "big-endian GGUF (version bytes %08" PRIx32 ") is not supported", version);
    if (version != 2 && version != 3)
        return gguf_fail(c, ERR_UNSUPPORTED, 4,
                         "GGUF version %" PRIu32 " is not supported (2 or 3)", version);
    c->g->version = version;
    if ((rc = gguf_rd_u64(c, n_tensors, "tensor count"))) return rc;
    if ((rc = gguf_rd_u64(c, n_kv, "key/value count"))) return rc;
    /* Minimal encodings: a kv is a key length, a type and at least one value byte (13 bytes); a
     * tensor info is a name length, n_dims, one dimension, a type and an offset (32 bytes). */
    if (*n_kv > gguf_left(c) / 13)
        return gguf_fail(c, ERR_PARSE, 16, "key/value count %" PRIu64 " cannot fit in %zu bytes",
                         *n_kv, gguf_left(c));
    if (*n_tensors > gguf_left(c) / 32)
        return gguf_fail(c, ERR_PARSE, 8, "tensor count %" PRIu64 " cannot fit in %zu bytes",
                         *n_tensors, gguf_left(c));
    return 0;
}

static int gguf_parse_body(struct gguf_cur *c)
{
    struct gguf *g = c->g;
    uint64_t n_tensors, n_kv;
    int rc;
    if ((rc = gguf_parse_header(c, &n_tensors, &n_kv))) return rc;
    size_t *kv_at = gguf_alloc(g, (size_t)(n_kv ? n_kv : 1) * sizeof(size_t));
    size_t *ti_at = gguf_alloc(g, (size_t)(n_tensors ? n_tensors : 1) * sizeof(size_t));
    g->kvs = gguf_alloc(g, (size_t)(n_kv ? n_kv : 1) * sizeof(*g->kvs));
    g->tensors = gguf_alloc(g, (size_t)(n_tensors ? n_tensors : 1) * sizeof(*g->tensors));
    if (!kv_at || !ti_at || !g->kvs || !g->tensors)
        return gguf_fail(c, ERR_NOMEM, c->pos,
                         "out of memory for %" PRIu64 " keys and %" PRIu64 " tensors", n_kv,
                         n_tensors);
    for (size_t i = 0; i < n_kv; i++, g->n_kv++) {
        kv_at[i] = c->pos;
        if ((rc = gguf_parse_kv(c, &g->kvs[i]))) return rc;
    }
    if (!(g->kv_sorted = gguf_index(g, g->n_kv, gguf_cmp_kv)))
        return gguf_fail(c, ERR_NOMEM, c->pos, "out of memory indexing keys");
    for (size_t k = 1; k < g->n_kv; k++) {
        size_t dup = g->kv_sorted[k];
        if (strcmp(g->kvs[g->kv_sorted[k - 1]].key, g->kvs[dup].key) == 0)
            return gguf_fail(c, ERR_PARSE, kv_at[dup], "duplicate key '%s'", g->kvs[dup].key);
    }
    if ((rc = gguf_read_alignment(c, kv_at))) return rc;
    for (size_t i = 0; i < n_tensors; i++, g->n_tensors++) {
        ti_at[i] = c->pos;
        if ((rc = gguf_parse_tensor_info(c, &g->tensors[i]))) return rc;
    }
    if (!(g->tensor_sorted = gguf_index(g, g->n_tensors, gguf_cmp_tensor)))
        return gguf_fail(c, ERR_NOMEM, c->pos, "out of memory indexing tensors");
    for (size_t k = 1; k < g->n_tensors; k++) {
        size_t dup = g->tensor_sorted[k];
        if (strcmp(g->tensors[g->tensor_sorted[k - 1]].name, g->tensors[dup].name) == 0)
            return gguf_fail(c, ERR_PARSE, ti_at[dup], "duplicate tensor name '%s'",
                             g->tensors[dup].name);
    }
    return gguf_place_tensors(c, ti_at);
}

int gguf_parse(const void *data, size_t size, struct gguf **out, char *err, size_t errlen)
{
    if (err && errlen) err[0] = '\0';
    struct gguf *g = calloc(1, sizeof(*g));
    if (!g) {
        gguf_seterr(err, errlen, "gguf: out of memory");
        return ERR_NOMEM;
    }
    g->base = data;
    g->size = size;
    struct gguf_cur c = {.g = g, .pos = 0, .err = err, .errlen = errlen};
    int rc = size ? gguf_parse_body(&c) : gguf_fail(&c, ERR_PARSE, 0, "empty file");
    if (rc) {
        gguf_close(g);
        return rc;
    }
    *out = g;
    return 0;
}

int gguf_open(const char *path, struct gguf **out, char *err, size_t errlen)
{
    int rc = ERR_IO;
    void *map = NULL;
    size_t size = 0;
    struct gguf *g = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        gguf_seterr(err, errlen, "gguf: cannot open %s: %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > SIZE_MAX) {
        gguf_seterr(err, errlen, "gguf: %s is not a regular file", path);
        goto out;
    }
    size = (size_t)st.st_size;
    if (size > 0) {
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            map = NULL;
            gguf_seterr(err, errlen, "gguf: cannot map %s: %s", path, strerror(errno));
            goto out;
        }
    }
    if ((rc = gguf_parse(map, size, &g, err, errlen))) goto out;
    g->map = map;
    g->map_size = size;
    map = NULL;
    *out = g;
    rc = 0;
out:
    if (map) munmap(map, size);
    if (fd >= 0) close(fd);
    return rc;
}

void gguf_close(struct gguf *g)
{
    if (!g) return;
    while (g->chunks) {
        struct gguf_chunk *next = g->chunks->next;
        free(g->chunks);
        g->chunks = next;
    }
    if (g->map) munmap(g->map, g->map_size);
    free(g);
}

uint32_t gguf_version(const struct gguf *g)
{
    return g->version;
}

uint64_t gguf_alignment(const struct gguf *g)
{
    return g->alignment;
}

size_t gguf_kv_count(const struct gguf *g)
{
    return g->n_kv;
}

const struct gguf_kv *gguf_kv_at(const struct gguf *g, size_t i)
{
    return i < g->n_kv ? &g->kvs[i] : NULL;
}

const struct gguf_kv *gguf_find(const struct gguf *g, const char *key)
{
    size_t lo = 0, hi = g->n_kv;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct gguf_kv *kv = &g->kvs[g->kv_sorted[mid]];
        int r = strcmp(kv->key, key);
        if (r == 0) return kv;
        if (r < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

size_t gguf_tensor_count(const struct gguf *g)
{
    return g->n_tensors;
}

const struct gguf_tensor *gguf_tensor_at(const struct gguf *g, size_t i)
{
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf *g, const char *name)
{
    size_t lo = 0, hi = g->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct gguf_tensor *t = &g->tensors[g->tensor_sorted[mid]];
        int r = strcmp(t->name, name);
        if (r == 0) return t;
        if (r < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static bool gguf_is_unsigned(enum gguf_value_type t)
{
    return t == GGUF_UINT8 || t == GGUF_UINT16 || t == GGUF_UINT32 || t == GGUF_UINT64;
}

static bool gguf_is_signed(enum gguf_value_type t)
{
    return t == GGUF_INT8 || t == GGUF_INT16 || t == GGUF_INT32 || t == GGUF_INT64;
}

/* Any integer kv as a range-checked int64 window: [lo, hi]. */
static int gguf_get_int(const struct gguf *g, const char *key, int64_t lo, uint64_t hi, int64_t *s,
                        uint64_t *u)
{
    const struct gguf_kv *kv = gguf_find(g, key);
    if (!kv) return ERR_NOT_FOUND;
    if (gguf_is_unsigned(kv->type)) {
        if (kv->v.u64 > hi) return ERR_INVAL;
        *u = kv->v.u64;
        *s = (int64_t)(kv->v.u64 > INT64_MAX ? INT64_MAX : kv->v.u64);
        return 0;
    }
    if (gguf_is_signed(kv->type)) {
        if (kv->v.i64 < lo || (kv->v.i64 >= 0 && (uint64_t)kv->v.i64 > hi)) return ERR_INVAL;
        *s = kv->v.i64;
        *u = (uint64_t)kv->v.i64;
        return 0;
    }
    return ERR_INVAL;
}

int gguf_get_u32(const struct gguf *g, const char *key, uint32_t *out)
{
    int64_t s;
    uint64_t u;
    int rc = gguf_get_int(g, key, 0, UINT32_MAX, &s, &u);
    if (rc == 0) *out = (uint32_t)u;
    return rc;
}

int gguf_get_i32(const struct gguf *g, const char *key, int32_t *out)
{
    int64_t s;
    uint64_t u;
    int rc = gguf_get_int(g, key, INT32_MIN, INT32_MAX, &s, &u);
    if (rc == 0) *out = (int32_t)s;
    return rc;
}

int gguf_get_f32(const struct gguf *g, const char *key, float *out)
{
    const struct gguf_kv *kv = gguf_find(g, key);
    if (!kv) return ERR_NOT_FOUND;
    if (kv->type != GGUF_FLOAT32 && kv->type != GGUF_FLOAT64) return ERR_INVAL;
    if (isfinite(kv->v.f64) && fabs(kv->v.f64) > 3.4028234663852886e38) return ERR_INVAL;
    *out = (float)kv->v.f64;
    return 0;
}

int gguf_get_bool(const struct gguf *g, const char *key, bool *out)
{
    const struct gguf_kv *kv = gguf_find(g, key);
    if (!kv) return ERR_NOT_FOUND;
    if (kv->type != GGUF_BOOL) return ERR_INVAL;
    *out = kv->v.b;
    return 0;
}

int gguf_get_str(const struct gguf *g, const char *key, struct gguf_str *out)
{
    const struct gguf_kv *kv = gguf_find(g, key);
    if (!kv) return ERR_NOT_FOUND;
    if (kv->type != GGUF_STRING) return ERR_INVAL;
    *out = kv->v.str;
    return 0;
}

int gguf_get_arr(const struct gguf *g, const char *key, const struct gguf_array **out)
{
    const struct gguf_kv *kv = gguf_find(g, key);
    if (!kv) return ERR_NOT_FOUND;
    if (kv->type != GGUF_ARRAY) return ERR_INVAL;
    *out = &kv->v.arr;
    return 0;
}

int gguf_get_cstr(const struct gguf *g, const char *key, char *buf, size_t buflen)
{
    struct gguf_str s;
    int rc = gguf_get_str(g, key, &s);
    if (rc) return rc;
    if (s.len >= buflen) return ERR_TOO_BIG;
    memcpy(buf, s.data, (size_t)s.len);
    buf[s.len] = '\0';
    return 0;
}

int gguf_arr_get_i64(const struct gguf_array *a, uint64_t i, int64_t *out)
{
    if (i >= a->n) return ERR_RANGE;
    bool u = gguf_is_unsigned(a->type);
    if (!u && !gguf_is_signed(a->type) && a->type != GGUF_BOOL) return ERR_INVAL;
    size_t sz = gguf_type_size(a->type);
    uint64_t raw = gguf_le((const uint8_t *)a->data + i * sz, sz);
    if (u || a->type == GGUF_BOOL) {
        if (raw > INT64_MAX) return ERR_INVAL;
        *out = (int64_t)raw;
        return 0;
    }
    switch (sz) { /* sign-extend from sz bytes */
    case 1: *out = (int8_t)raw; break;
    case 2: *out = (int16_t)raw; break;
    case 4: *out = (int32_t)raw; break;
    default: *out = (int64_t)raw; break;
    }
    return 0;
}

int gguf_arr_get_f64(const struct gguf_array *a, uint64_t i, double *out)
{
    if (i >= a->n) return ERR_RANGE;
    size_t sz = gguf_type_size(a->type);
    if (a->type == GGUF_FLOAT32) {
        uint32_t u = (uint32_t)gguf_le((const uint8_t *)a->data + i * sz, sz);
        float f;
        memcpy(&f, &u, sizeof(f));
        *out = f;
        return 0;
    }
    if (a->type == GGUF_FLOAT64) {
        uint64_t u = gguf_le((const uint8_t *)a->data + i * sz, sz);
        memcpy(out, &u, sizeof(*out));
        return 0;
    }
    int64_t v;
    int rc = gguf_arr_get_i64(a, i, &v);
    if (rc == 0) *out = (double)v;
    return rc;
}
