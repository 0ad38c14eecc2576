/* GGUF lookups and typed getters over a parsed file (gguf_read.c builds the sorted indices these
 * binary-search). Integer getters accept any integer type whose value fits the requested one. */
#include "engine/gguf/gguf.h"
#include "engine/gguf/gguf_priv.h"

#include "common/err.h"

#include <math.h>
#include <string.h>

uint64_t gguf_le(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Bytes of one element of a fixed-size type; 0 for STRING/ARRAY and unknown types. */
size_t gguf_type_size(uint32_t t)
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
