/* libFuzzer target for the GGUF reader: parses the input in memory and, when it parses, reads every
 * key/value (nested arrays included) and every tensor (lookups, first row decoded), so any
 * out-of-bounds pointer the parser hands out is touched under ASan. */
#include "engine/gguf/gguf.h"
#include "engine/gguf/quant.h"

#include "common/assert.h"
#include "common/err.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t fuzz_sink;

static void fuzz_array(const struct gguf_array *a)
{
    for (uint64_t i = 0; i < a->n; i++) {
        int64_t v;
        double d;
        if (a->type == GGUF_STRING) {
            if (a->strs[i].len) fuzz_sink += (uint8_t)a->strs[i].data[a->strs[i].len - 1];
        } else if (a->type == GGUF_ARRAY) {
            fuzz_array(&a->arrs[i]);
        } else if (gguf_arr_get_i64(a, i, &v) == 0) {
            fuzz_sink += (uint64_t)v;
        } else if (gguf_arr_get_f64(a, i, &d) == 0) {
            fuzz_sink += d == d;
        }
    }
}

static void fuzz_tensor(const struct gguf_tensor *t)
{
    ASSERT(t->size > 0 && t->data);
    const uint8_t *p = t->data;
    fuzz_sink += p[0] + p[t->size - 1];
    if (t->ne[0] > 4096) return;
    float *row = malloc((size_t)t->ne[0] * sizeof(float));
    if (!row) return;
    quant_dequantize_row(t->type, t->data, row, (size_t)t->ne[0]);
    fuzz_sink += row[0] == row[0];
    free(row);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gguf *g = NULL;
    char err[256];
    int rc = gguf_parse(data, size, &g, err, sizeof(err));
    if (rc != 0) {
        ASSERT(g == NULL && (rc == ERR_NOMEM || strstr(err, "offset") != NULL));
        return 0;
    }
    ASSERT(gguf_version(g) == 2 || gguf_version(g) == 3);
    for (size_t i = 0; i < gguf_kv_count(g); i++) {
        const struct gguf_kv *kv = gguf_kv_at(g, i);
        ASSERT(gguf_find(g, kv->key) == kv);
        uint32_t u;
        float f;
        char buf[64];
        fuzz_sink += gguf_get_u32(g, kv->key, &u) == 0 ? u : 0;
        fuzz_sink += gguf_get_f32(g, kv->key, &f) == 0;
        fuzz_sink += gguf_get_cstr(g, kv->key, buf, sizeof(buf)) == 0 ? (uint8_t)buf[0] : 0;
        if (kv->type == GGUF_ARRAY) fuzz_array(&kv->v.arr);
    }
    for (size_t i = 0; i < gguf_tensor_count(g); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        ASSERT(gguf_find_tensor(g, t->name) == t);
        fuzz_tensor(t);
    }
    gguf_close(g);
    return 0;
}
