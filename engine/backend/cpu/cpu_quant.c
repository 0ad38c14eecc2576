/* Activation quantization for the CPU backend's integer matmul kernels: every token row becomes Q8_0
 * or Q8_K blocks split into quants, scales and quant sums, as llama.cpp's CPU backend quantizes
 * them on x86: Q8_0 as ggml-cpu's quantize_row_q8_0 (the AVX code, which its repacked kernels'
 * quantizers copy), Q8_K as quantize_row_q8_K_ref (engine/gguf/quant.c's encoder itself). */
#include "engine/backend/cpu/cpu_backend.h"

#include <math.h>
#include <string.h>

void cpu_quant_q8_0_row(const float *x, int k, int8_t *qs, float *d, int32_t *sum, float *s)
{
    for (int b = 0; b < k / QUANT_QK8_0; b++) {
        const float *xb = x + b * QUANT_QK8_0;
        float amax = 0.0f;
        for (int j = 0; j < QUANT_QK8_0; j++) amax = fmaxf(amax, fabsf(xb[j]));
        float db = amax / 127.0f;
        /* Not ggml's reference (1 / db, rounding halves away from zero), which llama.cpp only runs
         * where it has no SIMD quantizer: 127 / amax and halves to even. The two differ on every
         * exact tie, and ties are common in a row that is a scaled quantized tensor (a Q4_0
         * embedding row after RMS norm has x * id = 127 * k / 8: k = 4 gives 63.5). */
        float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        /* the scale is stored as f16 in ggml's block; round-trip it so products match ggml */
        d[b] = quant_f16_to_f32(quant_f32_to_f16(db));
        int32_t n = 0;
        for (int j = 0; j < QUANT_QK8_0; j++) {
            float v = rintf(xb[j] * id); /* the default rounding mode: nearest, halves to even */
            /* |v| <= 127 for finite input; NaN/inf activations must not reach the int conversion */
            int q = v >= -127.0f && v <= 127.0f ? (int)v : 0;
            qs[b * QUANT_QK8_0 + j] = (int8_t)q;
            n += q;
        }
        sum[b] = n;
        s[b] = quant_f16_to_f32(quant_f32_to_f16(db * (float)n));
    }
}

void cpu_quant_q8_k_row(const float *x, int k, int8_t *qs, float *d, int16_t *sum16, int16_t *sum32)
{
    for (int b = 0; b < k / QUANT_QK_K; b++) {
        struct quant_block_q8_k blk;
        quant_quantize_row(QUANT_Q8_K, x + b * QUANT_QK_K, &blk, QUANT_QK_K);
        memcpy(qs + b * QUANT_QK_K, blk.qs, sizeof(blk.qs));
        d[b] = blk.d;
        for (int j = 0; j < QUANT_QK_K / 16; j++) {
            sum16[b * 16 + j] = blk.bsums[j];
            if (j % 2) sum32[b * 8 + j / 2] = (int16_t)(blk.bsums[j - 1] + blk.bsums[j]);
        }
    }
}
