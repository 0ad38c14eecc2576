/* cinfer-engine quantize IN.gguf OUT.gguf TYPE: converts the F32/F16/BF16 2-D weights of a GGUF to
 * one tensor type with the reference quantizers (engine/gguf/quant.c; the bytes llama.cpp's
 * quantizer writes for that type without an importance matrix). 1-D tensors (norms) and tensors
 * whose rows are not a multiple of the type's block keep their type and bytes; unlike llama.cpp
 * there are no per-tensor mixtures (Q4_K_M) and no fallback types. All metadata is copied;
 * general.file_type and general.quantization_version are set. */
#include "common/cli.h"
#include "common/err.h"
#include "common/log.h"
#include "engine/cmd/cmd.h"
#include "engine/gguf/gguf.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct quantize_cfg {
    const char *log_level, *log_format;
};

static const struct cfg_opt quantize_opts[] = {
    CLI_LOG_OPTS(struct quantize_cfg),
};

static const struct cfg_spec quantize_spec = {
    .program = "cinfer-engine quantize",
    .usage = "IN.gguf OUT.gguf " QUANT_TYPE_NAMES,
    .summary = "Quantize the 2-D F32/F16/BF16 weights of a GGUF model to one tensor type",
    .env_prefix = "CINFER_ENGINE_",
    .opts = quantize_opts,
    .n_opts = sizeof(quantize_opts) / sizeof(quantize_opts[0]),
    .min_positional = 3,
    .max_positional = 3,
};

/* Whether llama.cpp would quantize this tensor: a float matrix whose rows fill whole blocks. */
static bool quantize_eligible(const struct gguf_tensor *t, enum quant_type to)
{
    if (t->type != QUANT_F32 && t->type != QUANT_F16 && t->type != QUANT_BF16) return false;
    return t->n_dims >= 2 && quant_row_bytes(to, t->ne[0]) != 0;
}

/* Returns new quantized data for `t` (caller frees) or NULL when out of memory. */
static void *quantize_tensor(const struct gguf_tensor *t, enum quant_type to, uint64_t *size)
{
    size_t n = (size_t)t->ne[0], in_row = quant_row_bytes(t->type, t->ne[0]);
    size_t out_row = quant_row_bytes(to, t->ne[0]);
    uint64_t rows = t->size / in_row;
    float *row = malloc(n * sizeof(float));
    uint8_t *out = malloc(out_row * (size_t)rows);
    if (!row || !out) {
        free(row);
        free(out);
        return NULL;
    }
    for (uint64_t r = 0; r < rows; r++) {
        quant_dequantize_row(t->type, (const uint8_t *)t->data + r * in_row, row, n);
        quant_quantize_row(to, row, out + r * out_row, n);
    }
    free(row);
    *size = out_row * rows;
    return out;
}

/* The conversion itself; messages go to stderr. Returns 0 or an error code. */
static int quantize_file(const char *in, const char *out, enum quant_type to, uint32_t ftype)
{
    char err[512];
    struct gguf *g = NULL;
    struct gguf_writer *w = NULL;
    void **bufs = NULL;
    size_t n_bufs = 0, n_quant = 0;
    int rc = gguf_open(in, &g, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "cinfer-engine quantize: %s\n", err);
        return rc;
    }
    rc = ERR_NOMEM;
    w = gguf_writer_new();
    bufs = calloc(gguf_tensor_count(g) + 1, sizeof(*bufs));
    if (!w || !bufs) goto out;
    for (size_t i = 0; i < gguf_kv_count(g); i++)
        if ((rc = gguf_writer_set_kv(w, gguf_kv_at(g, i)))) goto out;
    if ((rc = gguf_writer_set_u32(w, "general.quantization_version", 2)) ||
        (rc = gguf_writer_set_u32(w, "general.file_type", ftype)))
        goto out;
    for (size_t i = 0; i < gguf_tensor_count(g); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        const void *data = t->data;
        uint64_t size = t->size;
        enum quant_type type = t->type;
        if (quantize_eligible(t, to)) {
            rc = ERR_NOMEM;
            if (!(bufs[n_bufs] = quantize_tensor(t, to, &size))) goto out;
            data = bufs[n_bufs++];
            type = to;
            n_quant++;
        }
        if ((rc = gguf_writer_add_tensor(w, t->name, type, t->n_dims, t->ne, data, size))) goto out;
    }
    if ((rc = gguf_writer_write(w, out))) goto out;
    log_info("model quantized", LOG_S("in", in), LOG_S("out", out),
             LOG_S("type", quant_type_name(to)), LOG_I("quantized_tensors", n_quant),
             LOG_I("kept_tensors", gguf_tensor_count(g) - n_quant));
    rc = 0;
out:
    if (rc) fprintf(stderr, "cinfer-engine quantize: cannot write %s: %s\n", out, err_str(rc));
    for (size_t i = 0; i < n_bufs; i++) free(bufs[i]);
    free(bufs);
    gguf_writer_free(w);
    gguf_close(g);
    return rc;
}

int cmd_quantize_main(int argc, char **argv)
{
    struct quantize_cfg cfg;
    struct cfg_result res;
    memset(&cfg, 0, sizeof(cfg));
    enum cli_parse_result pr = cli_parse(&quantize_spec, &cfg, argc, argv, &res);
    if (pr != CLI_RUN) return pr == CLI_EXIT_OK ? 0 : 2;
    cli_log_setup("engine", cfg.log_level, cfg.log_format);
    const char *type = res.positional[2];
    enum quant_type to;
    if (!quant_type_parse(type, &to)) {
        fprintf(stderr, "cinfer-engine quantize: type \"%s\" is not one of %s\n", type,
                quant_type_names());
        return 2;
    }
    return quantize_file(res.positional[0], res.positional[1], to, quant_type_file_type(to)) ? 1
                                                                                             : 0;
}
