/* Internals of the quant module shared by quant.c, quant_k.c and quant_iq.c: the per-format row
 * codecs the type table dispatches to, and ggml's integer conversions reproduced exactly. Nothing
 * outside engine/gguf/quant*.c includes this header. */
#ifndef CINFER_ENGINE_QUANT_PRIV_H
#define CINFER_ENGINE_QUANT_PRIV_H

#include "engine/gguf/quant.h"

#include <stdint.h>
#include <string.h>

/* Each decodes (encodes) `nb` consecutive blocks; src/dst may have any alignment. */
typedef void (*quant_dequant_fn)(const uint8_t *src, float *dst, size_t nb);
typedef void (*quant_quant_fn)(const float *src, uint8_t *dst, size_t nb);

void quant_dequant_q2_k(const uint8_t *src, float *dst, size_t nb);
void quant_dequant_q3_k(const uint8_t *src, float *dst, size_t nb);
void quant_dequant_q4_k(const uint8_t *src, float *dst, size_t nb);
void quant_dequant_q5_k(const uint8_t *src, float *dst, size_t nb);
void quant_dequant_q6_k(const uint8_t *src, float *dst, size_t nb);
void quant_dequant_q8_k(const uint8_t *src, float *dst, size_t nb);
void quant_quant_q2_k(const float *x, uint8_t *dst, size_t nb);
void quant_quant_q3_k(const float *x, uint8_t *dst, size_t nb);
void quant_quant_q4_k(const float *x, uint8_t *dst, size_t nb);
void quant_quant_q5_k(const float *x, uint8_t *dst, size_t nb);
void quant_quant_q6_k(const float *x, uint8_t *dst, size_t nb);
void quant_quant_q8_k(const float *x, uint8_t *dst, size_t nb);

void quant_dequant_iq4_nl(const uint8_t *src, float *dst, size_t nb);
void quant_dequant_iq4_xs(const uint8_t *src, float *dst, size_t nb);
void quant_quant_iq4_nl(const float *x, uint8_t *dst, size_t nb);
void quant_quant_iq4_xs(const float *x, uint8_t *dst, size_t nb);

/* ggml's nearest_int: round half to even via the 1.5 * 2^23 trick; exact for |x| <= 4194303, and
 * for anything else (NaN included) the same bits ggml's code gives. */
static inline int quant_nearest_int(float fval)
{
    float val = fval + 12582912.f;
    int32_t i;
    memcpy(&i, &val, sizeof(i));
    return (i & 0x007fffff) - 0x00400000;
}

/* A float converted to a narrow integer type the way ggml's casts compile on x86-64: cvttss2si
 * truncates toward zero and gives INT32_MIN for NaN and out-of-range values, then the low byte is
 * kept. Written out because the C cast is undefined for those inputs. */
static inline uint8_t quant_trunc_u8(float v)
{
    int32_t i = v > -2147483648.0f && v < 2147483648.0f ? (int32_t)v : INT32_MIN;
    return (uint8_t)((uint32_t)i & 0xff);
}

/* The half float at p (any alignment). */
static inline uint16_t quant_load_u16(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, sizeof(h));
    return h;
}

#endif
