/* GGUF reader: validates and indexes a memory-mapped v2/v3 file without copying tensor data.
 * Spec: https://github.com/ggerganov/ggml/blob/master/docs/gguf.md
 * Every count and length read from the file is checked against the bytes that remain BEFORE anything
 * is allocated for it, so a huge count in a tiny file fails at once. Tensor data pointers borrow from
 * the mapping (or the caller's buffer for gguf_parse). Lookups and typed getters are in gguf_get.c,
 * the writer in gguf_write.c. */
#include "engine/gguf/gguf.h"
#include "engine/gguf/gguf_priv.h"

#include "common/err.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
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
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    err_vfmt(msg, sizeof(msg), 0, fmt, ap);
    va_end(ap);
    return err_fmt(c->err, c->errlen, rc, "gguf: %s at offset %zu", msg, at);
}

static void gguf_seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void gguf_seterr(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    err_vfmt(err, errlen, 0, fmt, ap);
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
    if (!quant_type_known(type)) {
        const char *ggml = quant_ggml_type_name(type);
        return gguf_fail(c, ERR_UNSUPPORTED, tat,
                         "tensor '%s' has unknown type id %" PRIu32 "%s%s%s", ti->name, type,
                         ggml ? " (ggml " : "", ggml ? ggml : "",
                         ggml ? ", which this engine cannot read)" : "");
    }
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

/* Re-points bytes of the mapping at `from` to the same offset in the copy at `to`. */
static const void *gguf_reloc(const void *p, const uint8_t *from, const uint8_t *to)
{
    return to + ((const uint8_t *)p - from);
}

static void gguf_reloc_array(struct gguf_array *a, const uint8_t *from, const uint8_t *to)
{
    if (a->type == GGUF_STRING) {
        struct gguf_str *strs = (struct gguf_str *)a->strs; /* allocated by gguf_alloc */
        for (uint64_t i = 0; i < a->n; i++) strs[i].data = gguf_reloc(strs[i].data, from, to);
    } else if (a->type == GGUF_ARRAY) {
        struct gguf_array *arrs = (struct gguf_array *)a->arrs;
        for (uint64_t i = 0; i < a->n; i++) gguf_reloc_array(&arrs[i], from, to);
    } else if (a->data) {
        a->data = gguf_reloc(a->data, from, to);
    }
}

/* Copies the metadata (every byte before the tensor data: keys, values, tensor infos) out of the
 * mapping and re-points string and array values at the copy, so that the key/values stay readable
 * after gguf_release_data, and a file changed on disk cannot change them. */
static int gguf_own_metadata(struct gguf *g)
{
    size_t n = g->data_offset < g->size ? (size_t)g->data_offset : g->size;
    uint8_t *meta = gguf_alloc(g, n ? n : 1);
    if (!meta) return ERR_NOMEM;
    memcpy(meta, g->base, n);
    for (size_t i = 0; i < g->n_kv; i++) {
        struct gguf_kv *kv = &g->kvs[i];
        if (kv->type == GGUF_STRING)
            kv->v.str.data = gguf_reloc(kv->v.str.data, g->base, meta);
        else if (kv->type == GGUF_ARRAY)
            gguf_reloc_array(&kv->v.arr, g->base, meta);
    }
    g->meta = meta;
    return 0;
}

void gguf_release_data(struct gguf *g)
{
    if (!g) return;
    for (size_t i = 0; i < g->n_tensors; i++) g->tensors[i].data = NULL;
    if (g->map) munmap(g->map, g->map_size);
    g->map = NULL;
    g->map_size = 0;
    g->base = g->meta; /* NULL for gguf_parse: the caller's buffer is not read again */
    g->size = g->meta ? (size_t)(g->data_offset < g->size ? g->data_offset : g->size) : 0;
}

static struct gguf_file_id gguf_file_id_of(const struct stat *st)
{
    return (struct gguf_file_id){(uint64_t)st->st_dev, (uint64_t)st->st_ino, (uint64_t)st->st_size,
                                 (int64_t)st->st_mtim.tv_sec, (int64_t)st->st_mtim.tv_nsec};
}

bool gguf_file_changed(const struct gguf *g, char *why, size_t whylen)
{
    if (why && whylen) why[0] = '\0';
    if (!g || !g->path) return false;
    struct stat st;
    if (stat(g->path, &st) != 0) {
        if (why) gguf_seterr(why, whylen, "cannot stat it: %s", strerror(errno));
        return true;
    }
    struct gguf_file_id now = gguf_file_id_of(&st), was = g->file_id;
    if (memcmp(&now, &was, sizeof(now)) == 0) return false;
    if (!why) return true;
    if (now.dev != was.dev || now.ino != was.ino)
        gguf_seterr(why, whylen, "replaced by another file (inode %llu, was %llu)",
                    (unsigned long long)now.ino, (unsigned long long)was.ino);
    else if (now.size != was.size)
        gguf_seterr(why, whylen, "size %llu bytes, was %llu", (unsigned long long)now.size,
                    (unsigned long long)was.size);
    else
        gguf_seterr(why, whylen,
                    "rewritten in place (modification time %lld.%09lld, was %lld.%09lld)",
                    (long long)now.mtime_s, (long long)now.mtime_ns, (long long)was.mtime_s,
                    (long long)was.mtime_ns);
    return true;
}

int gguf_sha256_hex(const struct gguf *g, char hex[SHA256_HEX_LEN])
{
    if (!g || !g->map) return ERR_BAD_STATE;
    return sha256_hex(g->map, g->map_size, hex) == 0 ? 0 : ERR_NOMEM;
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
    g->file_id = gguf_file_id_of(&st);
    if (!(g->path = gguf_alloc(g, strlen(path) + 1)))
        rc = ERR_NOMEM;
    else
        memcpy(g->path, path, strlen(path) + 1);
    if (rc || (rc = gguf_own_metadata(g))) {
        gguf_seterr(err, errlen, "gguf: out of memory copying the metadata of %s", path);
        gguf_close(g);
        goto out;
    }
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
