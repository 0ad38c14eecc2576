/* Tensor validation and preparation for model_load.c: a tensor found by name and checked against
 * the shape the hyper-parameters imply (type, dimensions, data size), then prepared on the backend
 * whole, as row slices of a fused tensor, or as one matrix per expert of a stacked one; each read
 * once (its pages faulted in) with progress lines for large files. */
#include "engine/model/model.h"
#include "engine/model/model_priv.h"

#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"

#include <stdio.h>
#include <stdlib.h>

static void format_shape(const struct gguf_tensor *t, char *buf, size_t len)
{
    size_t off = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i < t->n_dims && off < len; i++) {
        int n =
            snprintf(buf + off, len - off, "%s%llu", i ? ", " : "", (unsigned long long)t->ne[i]);
        if (n < 0) break;
        off += (size_t)n;
    }
}

/* Seconds between load progress lines by default (model_options.progress_s). */
#define MODEL_LOAD_LOG_S 2.0

/* Faults in the pages of a tensor before the backend prepares it (so a large model's weights are
 * read while /health still says loading, not by the first requests) and logs progress: bytes,
 * percent and rate, at most every progress_s seconds, and at the end if it logged before. */
void model_tensor_progress(struct model *m, const struct gguf_tensor *t)
{
    const volatile char *p = t->data;
    for (uint64_t off = 0; off < t->size; off += 4096) (void)p[off];
    m->load_done += t->size;
    double now = clock_mono_s();
    double every = m->opt.progress_s > 0 ? m->opt.progress_s : MODEL_LOAD_LOG_S;
    if (now - m->load_logged < every) return;
    m->load_logged = now;
    double s = now - m->load_t0;
    log_info("loading weights", LOG_I("bytes", (long long)m->load_done),
             LOG_I("total", (long long)m->load_total),
             LOG_F("percent",
                   m->load_total ? 100.0 * (double)m->load_done / (double)m->load_total : 100.0),
             LOG_F("mb_per_s", s > 0 ? (double)m->load_done / s / 1e6 : 0.0));
}

int model_tensor_find(struct model *m, const char *name, int64_t rows, int64_t cols, int64_t n,
                      unsigned flags, const struct gguf_tensor **out, char *err, size_t errlen)
{
    *out = NULL;
    const struct gguf_tensor *t = gguf_find_tensor(m->gguf, name);
    if (!t && (flags & MODEL_WEIGHT_OPTIONAL)) return 0;
    if (!t) return model_fail(err, errlen, ERR_NOT_FOUND, "missing tensor %s", name);
    if (!quant_type_known(t->type))
        return model_fail(err, errlen, ERR_UNSUPPORTED, "tensor %s: type %s (%u) cannot be loaded",
                          name, quant_type_name(t->type), (unsigned)t->type);
    bool ok = t->ne[0] == (uint64_t)cols && t->ne[1] == (uint64_t)rows && t->ne[3] == 1;
    if (n > 0)
        ok = ok && t->ne[2] == (uint64_t)n && t->n_dims == 3;
    else
        ok = ok && t->ne[2] == 1 && (rows == 1 ? t->n_dims <= 2 : t->n_dims == 2);
    if (!ok) {
        char got[96];
        format_shape(t, got, sizeof(got));
        if (n > 0)
            return model_fail(err, errlen, ERR_INVAL,
                              "tensor %s: shape [%s], expected [%lld, %lld, %lld]", name, got,
                              (long long)cols, (long long)rows, (long long)n);
        if (rows == 1)
            return model_fail(err, errlen, ERR_INVAL, "tensor %s: shape [%s], expected [%lld]",
                              name, got, (long long)cols);
        return model_fail(err, errlen, ERR_INVAL, "tensor %s: shape [%s], expected [%lld, %lld]",
                          name, got, (long long)cols, (long long)rows);
    }
    size_t row_bytes = quant_row_bytes(t->type, (uint64_t)cols);
    if (row_bytes == 0)
        return model_fail(err, errlen, ERR_INVAL,
                          "tensor %s: row of %lld is not a multiple of the %s block size", name,
                          (long long)cols, quant_type_name(t->type));
    uint64_t want = (uint64_t)rows * row_bytes * (uint64_t)(n > 0 ? n : 1);
    if (!t->data || t->size != want)
        return model_fail(err, errlen, ERR_INVAL, "tensor %s: %llu bytes of data, expected %llu",
                          name, (unsigned long long)t->size, (unsigned long long)want);
    *out = t;
    return 0;
}

/* Prepares rows [row0, row0 + rows) of t (a matrix of `cols` columns) as one backend weight: the
 * rows are contiguous, so the weight borrows the mapping at their offset. */
static int prepare_rows(struct model *m, const struct gguf_tensor *t, int64_t row0, int64_t rows,
                        int64_t cols, unsigned flags, struct backend_weight **out, char *err,
                        size_t errlen)
{
    size_t row_bytes = quant_row_bytes(t->type, (uint64_t)cols);
    bool lookup_only = (flags & MODEL_WEIGHT_LOOKUP_ONLY) != 0;
    struct backend_weight_desc d = {t->type,     rows,
                                    cols,        (const char *)t->data + (size_t)row0 * row_bytes,
                                    lookup_only, lookup_only || (flags & MODEL_WEIGHT_LOOKUP) != 0};
    int rc = m->be->ops->weight_prepare(m->be, &d, out);
    if (rc)
        return model_fail(err, errlen, rc, "tensor %s: backend cannot prepare it (%s)", t->name,
                          err_str(rc));
    if (rows > 1 && !lookup_only && m->be->ops->weight_float_path &&
        m->be->ops->weight_float_path(m->be, *out))
        m->float_matmuls = true;
    return 0;
}

/* Validates tensor `name` as (rows, cols) with ne[0] = cols (a 1-D tensor when rows == 1) and
 * prepares it; `flags` are WEIGHT_* bits. */
int model_tensor_load(struct model *m, const char *name, int64_t rows, int64_t cols, unsigned flags,
                      struct backend_weight **out, char *err, size_t errlen)
{
    const struct gguf_tensor *t;
    *out = NULL;
    int rc = model_tensor_find(m, name, rows, cols, 0, flags, &t, err, errlen);
    if (rc || !t) return rc;
    model_tensor_progress(m, t);
    m->weight_bytes += t->size;
    return prepare_rows(m, t, 0, rows, cols, flags, out, err, errlen);
}

/* A fused tensor of sum(rows[i]) rows split into n weights of rows[i] rows each (out[i]); with
 * MODEL_WEIGHT_OPTIONAL a missing tensor leaves them NULL. 1-D fused biases split by columns instead:
 * rows 1, `cols` the parts' widths, the parts contiguous in the row. */
int model_tensor_load_split(struct model *m, const char *name, const int64_t *parts, int n,
                            int64_t cols, unsigned flags, struct backend_weight **out, char *err,
                            size_t errlen)
{
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += parts[i];
    bool bias = cols == 0; /* parts are column widths of one row */
    const struct gguf_tensor *t;
    for (int i = 0; i < n; i++) out[i] = NULL;
    int rc = model_tensor_find(m, name, bias ? 1 : total, bias ? total : cols, 0, flags, &t, err,
                               errlen);
    if (rc || !t) return rc;
    model_tensor_progress(m, t);
    m->weight_bytes += t->size;
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        if (bias) {
            size_t ob = quant_row_bytes(t->type, (uint64_t)off);
            if (off > 0 && ob == 0)
                return model_fail(err, errlen, ERR_UNSUPPORTED,
                                  "tensor %s: %s parts do not start on block boundaries", name,
                                  quant_type_name(t->type));
            struct backend_weight_desc d = {t->type, 1,    parts[i], (const char *)t->data + ob,
                                            false,   false};
            if (quant_row_bytes(t->type, (uint64_t)parts[i]) == 0 ||
                (rc = m->be->ops->weight_prepare(m->be, &d, &out[i])))
                return model_fail(err, errlen, rc ? rc : ERR_UNSUPPORTED,
                                  "tensor %s: cannot split it", name);
        } else if ((rc = prepare_rows(m, t, off, parts[i], cols, 0, &out[i], err, errlen))) {
            return rc;
        }
        off += parts[i];
    }
    return 0;
}

/* A stack ne = {cols, rows, n_expert} as one weight per expert. */
int model_tensor_load_experts(struct model *m, const char *name, int64_t rows, int64_t cols,
                              struct backend_weight ***out, char *err, size_t errlen)
{
    int ne = m->hp.n_expert;
    const struct gguf_tensor *t;
    int rc = model_tensor_find(m, name, rows, cols, ne, 0, &t, err, errlen);
    if (rc) return rc;
    *out = calloc((size_t)ne, sizeof(**out));
    if (!*out) return model_fail(err, errlen, ERR_NOMEM, "out of memory");
    model_tensor_progress(m, t);
    m->weight_bytes += t->size;
    for (int e = 0; e < ne; e++)
        if ((rc = prepare_rows(m, t, (int64_t)e * rows, rows, cols, 0, &(*out)[e], err, errlen)))
            return rc;
    return 0;
}
