/* GGUF writer: collects key/values (each encoded once, in insertion order) and borrowed tensor data,
 * then writes a v3 file whose tensor data is aligned to general.alignment (32 unless a caller sets
 * that key). The file is written under a temporary name and renamed, so a reader never sees half a
 * model. Spec: https://github.com/ggerganov/ggml/blob/master/docs/gguf.md */
#include "engine/gguf/gguf.h"
#include "engine/gguf/gguf_priv.h"

#include "common/buf.h"
#include "common/err.h"
#include "common/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GGUF_WRITER_MAX_NAME    63 /* as the reader (ggml's GGML_MAX_NAME - 1) */
#define GGUF_WRITER_MAX_NESTING 8

struct gguf_wkv {
    char *key;       /* owned */
    struct buf blob; /* value type + encoded value (the key is written separately) */
};

struct gguf_wtensor {
    char *name; /* owned */
    enum quant_type type;
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS];
    const void *data; /* borrowed until gguf_writer_write */
    uint64_t size;
};

struct gguf_writer {
    struct gguf_wkv *kvs;
    size_t n_kv, cap_kv;
    struct gguf_wtensor *tensors;
    size_t n_tensors, cap_tensors;
    uint64_t alignment;
};

struct gguf_writer *gguf_writer_new(void)
{
    struct gguf_writer *w = calloc(1, sizeof(*w));
    if (w) w->alignment = GGUF_DEFAULT_ALIGNMENT;
    return w;
}

void gguf_writer_free(struct gguf_writer *w)
{
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kvs[i].key);
        buf_fini(&w->kvs[i].blob);
    }
    for (size_t i = 0; i < w->n_tensors; i++) free(w->tensors[i].name);
    free(w->kvs);
    free(w->tensors);
    free(w);
}

static int gguf_put_u32(struct buf *b, uint32_t v)
{
    uint8_t le[4];
    for (int i = 0; i < 4; i++) le[i] = (uint8_t)(v >> (8 * i));
    return buf_append(b, le, sizeof(le));
}

static int gguf_put_u64(struct buf *b, uint64_t v)
{
    uint8_t le[8];
    for (int i = 0; i < 8; i++) le[i] = (uint8_t)(v >> (8 * i));
    return buf_append(b, le, sizeof(le));
}

static int gguf_put_str(struct buf *b, const char *s, uint64_t len)
{
    int rc = gguf_put_u64(b, len);
    return rc ? rc : buf_append(b, s, (size_t)len);
}

static int gguf_put_array(struct buf *b, const struct gguf_array *a, int depth)
{
    int rc;
    if (depth > GGUF_WRITER_MAX_NESTING) return ERR_INVAL;
    if ((rc = gguf_put_u32(b, (uint32_t)a->type)) || (rc = gguf_put_u64(b, a->n))) return rc;
    if (a->n == 0) return 0;
    if (a->type == GGUF_STRING) {
        if (!a->strs) return ERR_INVAL;
        for (uint64_t i = 0; i < a->n; i++)
            if ((rc = gguf_put_str(b, a->strs[i].data, a->strs[i].len))) return rc;
        return 0;
    }
    if (a->type == GGUF_ARRAY) {
        if (!a->arrs) return ERR_INVAL;
        for (uint64_t i = 0; i < a->n; i++)
            if ((rc = gguf_put_array(b, &a->arrs[i], depth + 1))) return rc;
        return 0;
    }
    size_t sz = gguf_type_size((uint32_t)a->type);
    if (sz == 0 || !a->data || a->n > SIZE_MAX / sz) return ERR_INVAL;
    /* Elements are little-endian already (parsed files and this host alike). */
    return buf_append(b, a->data, (size_t)a->n * sz);
}

/* Whether an integer kv's value fits its declared width (u64 for unsigned, i64 for signed). */
static bool gguf_int_fits(const struct gguf_kv *kv)
{
    switch (kv->type) {
    case GGUF_UINT8: return kv->v.u64 <= UINT8_MAX;
    case GGUF_UINT16: return kv->v.u64 <= UINT16_MAX;
    case GGUF_UINT32: return kv->v.u64 <= UINT32_MAX;
    case GGUF_INT8: return kv->v.i64 >= INT8_MIN && kv->v.i64 <= INT8_MAX;
    case GGUF_INT16: return kv->v.i64 >= INT16_MIN && kv->v.i64 <= INT16_MAX;
    case GGUF_INT32: return kv->v.i64 >= INT32_MIN && kv->v.i64 <= INT32_MAX;
    default: return true;
    }
}

/* Encodes the scalar or array value of `kv` after its type. */
static int gguf_put_value(struct buf *b, const struct gguf_kv *kv)
{
    int rc = gguf_put_u32(b, (uint32_t)kv->type);
    if (rc) return rc;
    switch (kv->type) {
    case GGUF_UINT8:
    case GGUF_INT8:
    case GGUF_UINT16:
    case GGUF_INT16:
    case GGUF_UINT32:
    case GGUF_INT32:
    case GGUF_UINT64:
    case GGUF_INT64: {
        if (!gguf_int_fits(kv)) return ERR_INVAL;
        uint8_t le[8];
        for (int i = 0; i < 8; i++) le[i] = (uint8_t)(kv->v.u64 >> (8 * i));
        return buf_append(b, le, gguf_type_size((uint32_t)kv->type));
    }
    case GGUF_FLOAT32: {
        float f = (float)kv->v.f64;
        uint32_t u;
        memcpy(&u, &f, sizeof(u));
        return gguf_put_u32(b, u);
    }
    case GGUF_FLOAT64: {
        uint64_t u;
        memcpy(&u, &kv->v.f64, sizeof(u));
        return gguf_put_u64(b, u);
    }
    case GGUF_BOOL: {
        uint8_t v = kv->v.b ? 1 : 0;
        return buf_append(b, &v, 1);
    }
    case GGUF_STRING:
        if (!kv->v.str.data && kv->v.str.len) return ERR_INVAL;
        return gguf_put_str(b, kv->v.str.data, kv->v.str.len);
    case GGUF_ARRAY: return gguf_put_array(b, &kv->v.arr, 1);
    }
    return ERR_INVAL;
}

/* Finds the slot for `key`, appending an empty one when absent. */
static struct gguf_wkv *gguf_writer_slot(struct gguf_writer *w, const char *key)
{
    for (size_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kvs[i].key, key) == 0) return &w->kvs[i];
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? 2 * w->cap_kv : 32;
        struct gguf_wkv *p = realloc(w->kvs, cap * sizeof(*p));
        if (!p) return NULL;
        w->kvs = p;
        w->cap_kv = cap;
    }
    struct gguf_wkv *s = &w->kvs[w->n_kv];
    s->key = strdup(key);
    if (!s->key) return NULL;
    buf_init(&s->blob, 0); /* our own encoding of a value already in memory: bounded by it */
    w->n_kv++;
    return s;
}

int gguf_writer_set_kv(struct gguf_writer *w, const struct gguf_kv *kv)
{
    if (!kv->key) return ERR_INVAL;
    if (strcmp(kv->key, "general.alignment") == 0) {
        if (kv->type != GGUF_UINT32 || kv->v.u64 == 0 || kv->v.u64 > UINT32_MAX ||
            (kv->v.u64 & (kv->v.u64 - 1)) != 0)
            return ERR_INVAL;
    }
    struct buf enc;
    buf_init(&enc, 0);
    int rc = gguf_put_value(&enc, kv);
    if (rc) {
        buf_fini(&enc);
        return rc;
    }
    struct gguf_wkv *s = gguf_writer_slot(w, kv->key);
    if (!s) {
        buf_fini(&enc);
        return ERR_NOMEM;
    }
    buf_fini(&s->blob);
    s->blob = enc;
    if (strcmp(kv->key, "general.alignment") == 0) w->alignment = kv->v.u64;
    return 0;
}

int gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v)
{
    struct gguf_kv kv = {.key = key, .type = GGUF_UINT32, .v.u64 = v};
    return gguf_writer_set_kv(w, &kv);
}

int gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v)
{
    struct gguf_kv kv = {.key = key, .type = GGUF_INT32, .v.i64 = v};
    return gguf_writer_set_kv(w, &kv);
}

int gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v)
{
    struct gguf_kv kv = {.key = key, .type = GGUF_FLOAT32, .v.f64 = v};
    return gguf_writer_set_kv(w, &kv);
}

int gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool v)
{
    struct gguf_kv kv = {.key = key, .type = GGUF_BOOL, .v.b = v};
    return gguf_writer_set_kv(w, &kv);
}

int gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *v)
{
    struct gguf_kv kv = {.key = key, .type = GGUF_STRING, .v.str = {v, strlen(v)}};
    return gguf_writer_set_kv(w, &kv);
}

int gguf_writer_set_arr(struct gguf_writer *w, const char *key, enum gguf_value_type type,
                        const void *data, uint64_t n)
{
    if (gguf_type_size((uint32_t)type) == 0) return ERR_INVAL;
    struct gguf_kv kv = {
        .key = key, .type = GGUF_ARRAY, .v.arr = {.type = type, .n = n, .data = data}};
    return gguf_writer_set_kv(w, &kv);
}

int gguf_writer_set_arr_str(struct gguf_writer *w, const char *key, const char *const *strs,
                            uint64_t n)
{
    struct gguf_str *s = calloc(n ? (size_t)n : 1, sizeof(*s));
    if (!s) return ERR_NOMEM;
    for (uint64_t i = 0; i < n; i++) s[i] = (struct gguf_str){strs[i], strlen(strs[i])};
    struct gguf_kv kv = {
        .key = key, .type = GGUF_ARRAY, .v.arr = {.type = GGUF_STRING, .n = n, .strs = s}};
    int rc = gguf_writer_set_kv(w, &kv);
    free(s);
    return rc;
}

int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, enum quant_type type,
                           uint32_t n_dims, const uint64_t *ne, const void *data, uint64_t size)
{
    if (strlen(name) > GGUF_WRITER_MAX_NAME || n_dims < 1 || n_dims > GGUF_MAX_DIMS ||
        !quant_type_known((uint32_t)type) || (!data && size))
        return ERR_INVAL;
    uint64_t rows = 1;
    for (uint32_t i = 1; i < n_dims; i++) {
        if (ne[i] == 0 || rows > UINT64_MAX / ne[i]) return ERR_INVAL;
        rows *= ne[i];
    }
    size_t row = quant_row_bytes(type, ne[0]);
    if (ne[0] == 0 || row == 0 || rows > UINT64_MAX / row || rows * row != size) return ERR_INVAL;
    for (size_t i = 0; i < w->n_tensors; i++)
        if (strcmp(w->tensors[i].name, name) == 0) return ERR_EXISTS;
    if (w->n_tensors == w->cap_tensors) {
        size_t cap = w->cap_tensors ? 2 * w->cap_tensors : 64;
        struct gguf_wtensor *p = realloc(w->tensors, cap * sizeof(*p));
        if (!p) return ERR_NOMEM;
        w->tensors = p;
        w->cap_tensors = cap;
    }
    struct gguf_wtensor *t = &w->tensors[w->n_tensors];
    if (!(t->name = strdup(name))) return ERR_NOMEM;
    t->type = type;
    t->n_dims = n_dims;
    for (uint32_t i = 0; i < GGUF_MAX_DIMS; i++) t->ne[i] = i < n_dims ? ne[i] : 1;
    t->data = data;
    t->size = size;
    w->n_tensors++;
    return 0;
}

static uint64_t gguf_pad(uint64_t n, uint64_t align)
{
    return (align - n % align) % align;
}

/* Header, key/values and tensor infos, padded to the start of the data section. */
static int gguf_writer_header(const struct gguf_writer *w, struct buf *b)
{
    int rc;
    if ((rc = buf_append(b, "GGUF", 4)) || (rc = gguf_put_u32(b, 3)) ||
        (rc = gguf_put_u64(b, w->n_tensors)) || (rc = gguf_put_u64(b, w->n_kv)))
        return rc;
    for (size_t i = 0; i < w->n_kv; i++) {
        const struct gguf_wkv *kv = &w->kvs[i];
        if ((rc = gguf_put_str(b, kv->key, strlen(kv->key))) ||
            (rc = buf_append(b, kv->blob.data, kv->blob.len)))
            return rc;
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_tensors; i++) {
        const struct gguf_wtensor *t = &w->tensors[i];
        if ((rc = gguf_put_str(b, t->name, strlen(t->name))) || (rc = gguf_put_u32(b, t->n_dims)))
            return rc;
        for (uint32_t d = 0; d < t->n_dims; d++)
            if ((rc = gguf_put_u64(b, t->ne[d]))) return rc;
        if ((rc = gguf_put_u32(b, (uint32_t)t->type)) || (rc = gguf_put_u64(b, off))) return rc;
        off += t->size + gguf_pad(t->size, w->alignment);
    }
    static const uint8_t zeros[64];
    for (uint64_t pad = gguf_pad(b->len, w->alignment); pad > 0;) {
        size_t n = pad < sizeof(zeros) ? (size_t)pad : sizeof(zeros);
        if ((rc = buf_append(b, zeros, n))) return rc;
        pad -= n;
    }
    return 0;
}

int gguf_writer_write_buf(struct gguf_writer *w, struct buf *out)
{
    static const uint8_t zeros[64];
    size_t start = out->len;
    int rc = gguf_writer_header(w, out);
    for (size_t i = 0; rc == 0 && i < w->n_tensors; i++) {
        const struct gguf_wtensor *t = &w->tensors[i];
        if (t->size && (rc = buf_append(out, t->data, (size_t)t->size))) break;
        for (uint64_t pad = gguf_pad(t->size, w->alignment); rc == 0 && pad > 0;) {
            size_t n = pad < sizeof(zeros) ? (size_t)pad : sizeof(zeros);
            rc = buf_append(out, zeros, n);
            pad -= n;
        }
    }
    if (rc) out->len = start; /* out keeps what it had */
    if (rc && out->data) out->data[start] = '\0';
    return rc;
}

static int gguf_write_zeros(FILE *f, uint64_t n)
{
    static const uint8_t zeros[64];
    while (n > 0) {
        size_t k = n < sizeof(zeros) ? (size_t)n : sizeof(zeros);
        if (fwrite(zeros, 1, k, f) != k) return ERR_IO;
        n -= k;
    }
    return 0;
}

int gguf_writer_write(struct gguf_writer *w, const char *path)
{
    int rc = ERR_NOMEM;
    struct buf hdr, tmp;
    FILE *f = NULL;
    bool created = false;
    buf_init(&hdr, 0);
    buf_init(&tmp, 0);
    if ((rc = gguf_writer_header(w, &hdr)) ||
        (rc = buf_printf(&tmp, "%s.tmp.%ld", path, (long)getpid())))
        goto out;
    rc = ERR_IO;
    if (!(f = fopen(buf_cstr(&tmp), "wb"))) goto out;
    created = true;
    if (fwrite(hdr.data, 1, hdr.len, f) != hdr.len) goto out;
    for (size_t i = 0; i < w->n_tensors; i++) {
        const struct gguf_wtensor *t = &w->tensors[i];
        if (t->size && fwrite(t->data, 1, (size_t)t->size, f) != t->size) goto out;
        if (gguf_write_zeros(f, gguf_pad(t->size, w->alignment))) goto out;
    }
    int cerr = fclose(f);
    f = NULL;
    if (cerr != 0 || rename(buf_cstr(&tmp), path) != 0) goto out;
    created = false;
    rc = 0;
out:
    if (rc == ERR_IO)
        log_error("gguf: write failed", LOG_S("path", path), LOG_S("error", strerror(errno)));
    if (f) fclose(f);
    if (created) unlink(buf_cstr(&tmp));
    buf_fini(&hdr);
    buf_fini(&tmp);
    return rc;
}
