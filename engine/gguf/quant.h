/* Tensor element types of GGUF files and their block layouts (the ggml formats, bit for bit), plus
 * scalar conversions between them. Type ids are the on-disk ids of the GGUF spec, so a tensor's type
 * field is cast directly after quant_type_known() accepts it.
 * This module is the reference: backends may use faster kernels but must agree with it. */
#ifndef CINFER_ENGINE_QUANT_H
#define CINFER_ENGINE_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum quant_type {
    QUANT_F32 = 0,
    QUANT_F16 = 1,
    QUANT_Q4_0 = 2,
    QUANT_Q8_0 = 8,
    QUANT_Q4_K = 12,
    QUANT_Q6_K = 14,
    QUANT_Q8_K = 15, /* activations only: the partner of Q4_K/Q6_K in dot products */
    QUANT_BF16 = 30,
};

#define QUANT_QK4_0        32
#define QUANT_QK8_0        32
#define QUANT_QK_K         256
#define QUANT_K_SCALE_SIZE 12

/* Block layouts. `d`/`dmin` are IEEE half floats stored as raw bits. */
struct quant_block_q4_0 {
    uint16_t d;                  /* scale */
    uint8_t qs[QUANT_QK4_0 / 2]; /* nibbles: element j in low nibble of qs[j], j+16 in the high */
};
struct quant_block_q8_0 {
    uint16_t d; /* scale */
    int8_t qs[QUANT_QK8_0];
};
struct quant_block_q4_k {
    uint16_t d;                         /* super-block scale for the 6-bit scales */
    uint16_t dmin;                      /* super-block scale for the 6-bit mins */
    uint8_t scales[QUANT_K_SCALE_SIZE]; /* 8 scales + 8 mins, 6 bits each, packed */
    uint8_t qs[QUANT_QK_K / 2];         /* 4-bit quants */
};
struct quant_block_q6_k {
    uint8_t ql[QUANT_QK_K / 2];     /* low 4 bits */
    uint8_t qh[QUANT_QK_K / 4];     /* high 2 bits */
    int8_t scales[QUANT_QK_K / 16]; /* 8-bit scales of 16-element groups */
    uint16_t d;                     /* super-block scale */
};
struct quant_block_q8_k {
    float d;
    int8_t qs[QUANT_QK_K];
    int16_t bsums[QUANT_QK_K / 16]; /* sums of groups of 16 quants */
};

_Static_assert(sizeof(struct quant_block_q4_0) == 18, "q4_0 layout");
_Static_assert(sizeof(struct quant_block_q8_0) == 34, "q8_0 layout");
_Static_assert(sizeof(struct quant_block_q4_k) == 144, "q4_k layout");
_Static_assert(sizeof(struct quant_block_q6_k) == 210, "q6_k layout");
_Static_assert(sizeof(struct quant_block_q8_k) == 292, "q8_k layout");

/* True for the type ids this engine can load (all of the enum above except Q8_K). */
bool quant_type_known(uint32_t id);
/* "f32", "q4_K", ...; "unknown" otherwise. Static string. */
const char *quant_type_name(enum quant_type t);
/* Elements per block (1 for float types) and bytes per block. 0 for unknown types. */
size_t quant_block_elems(enum quant_type t);
size_t quant_block_bytes(enum quant_type t);
/* Bytes of a row of `n` elements; 0 when `n` is not a multiple of the block size (a malformed file). */
size_t quant_row_bytes(enum quant_type t, uint64_t n);

float quant_f16_to_f32(uint16_t h);
uint16_t quant_f32_to_f16(float f); /* round to nearest even, as ggml */
float quant_bf16_to_f32(uint16_t h);
uint16_t quant_f32_to_bf16(float f); /* round to nearest even; NaN stays NaN */

/* Decodes `n` elements of type `t` at `src` (borrowed) into `dst`. `n` must be a multiple of the block
 * size. Scalar reference; thread-safe. */
void quant_dequantize_row(enum quant_type t, const void *src, float *dst, size_t n);
/* Encodes `n` floats into type `t` (F32, F16, BF16, Q8_0, Q4_0, Q8_K) exactly as ggml's reference
 * quantizers do. Returns 0 or ERR_UNSUPPORTED for types without an encoder. */
int quant_quantize_row(enum quant_type t, const float *src, void *dst, size_t n);

#endif
