/* Tensor element types of GGUF files and their block layouts (the ggml formats, bit for bit), plus
 * the scalar reference codecs: ggml's dequantizers and its reference quantizers (quantize_row_*_ref;
 * for IQ4_NL and IQ4_XS what llama.cpp's quantizer runs without an importance matrix). Type ids are
 * the on-disk ids of the GGUF spec, so a tensor's type field is cast directly after
 * quant_type_known() accepts it. This module is the reference: backends use faster kernels but must
 * agree with it. quant.c holds the type table, the float conversions and the 32-element formats;
 * quant_k.c the 256-element K-quants; quant_iq.c the non-linear IQ4 formats. */
#ifndef CINFER_ENGINE_QUANT_H
#define CINFER_ENGINE_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum quant_type {
    QUANT_F32 = 0,
    QUANT_F16 = 1,
    QUANT_Q4_0 = 2,
    QUANT_Q4_1 = 3,
    QUANT_Q5_0 = 6,
    QUANT_Q5_1 = 7,
    QUANT_Q8_0 = 8,
    QUANT_Q2_K = 10,
    QUANT_Q3_K = 11,
    QUANT_Q4_K = 12,
    QUANT_Q5_K = 13,
    QUANT_Q6_K = 14,
    QUANT_Q8_K = 15, /* mostly the activations of K-quant dot products; files may hold it too */
    QUANT_IQ4_NL = 20,
    QUANT_IQ4_XS = 23,
    QUANT_BF16 = 30,
};

/* One past the largest id above (for tables indexed by type). */
#define QUANT_TYPE_END 31

#define QUANT_QK4_0        32
#define QUANT_QK4_1        32
#define QUANT_QK5_0        32
#define QUANT_QK5_1        32
#define QUANT_QK8_0        32
#define QUANT_QK4_NL       32
#define QUANT_QK_K         256
#define QUANT_K_SCALE_SIZE 12

/* Block layouts. `d`, `m`, `dmin` are IEEE half floats stored as raw bits; multi-byte fields are
 * little-endian (the only byte order GGUF files are written in). */
struct quant_block_q4_0 {
    uint16_t d;                  /* scale */
    uint8_t qs[QUANT_QK4_0 / 2]; /* nibbles: element j in low nibble of qs[j], j+16 in the high */
};
struct quant_block_q4_1 {
    uint16_t d, m;               /* x = d * q + m */
    uint8_t qs[QUANT_QK4_1 / 2]; /* as Q4_0 */
};
struct quant_block_q5_0 {
    uint16_t d;
    uint8_t qh[4];               /* bit j: the fifth bit of element j (a little-endian uint32) */
    uint8_t qs[QUANT_QK5_0 / 2]; /* low four bits, as Q4_0; x = d * (q - 16) */
};
struct quant_block_q5_1 {
    uint16_t d, m; /* x = d * q + m */
    uint8_t qh[4];
    uint8_t qs[QUANT_QK5_1 / 2];
};
struct quant_block_q8_0 {
    uint16_t d; /* scale */
    int8_t qs[QUANT_QK8_0];
};
/* K-quants: super-blocks of 256 elements in sub-blocks of 16 or 32 with quantized scales. */
struct quant_block_q2_k {
    uint8_t scales[QUANT_QK_K / 16]; /* low nibble scale, high nibble min of each 16 elements */
    uint8_t
        qs[QUANT_QK_K / 4]; /* 2-bit quants: byte l of each 32 holds elements l, +32, +64, +96 */
    uint16_t d, dmin;       /* x = d * scale * q - dmin * min */
};
struct quant_block_q3_k {
    uint8_t hmask[QUANT_QK_K / 8]; /* high bits: bit k of hmask[l] for element 32k + l */
    uint8_t qs[QUANT_QK_K / 4];    /* low 2 bits, as Q2_K */
    uint8_t scales[12];            /* 16 six-bit scales, packed; x = d * (scale - 32) * (q - 4) */
    uint16_t d;
};
struct quant_block_q4_k {
    uint16_t d;                         /* super-block scale for the 6-bit scales */
    uint16_t dmin;                      /* super-block scale for the 6-bit mins */
    uint8_t scales[QUANT_K_SCALE_SIZE]; /* 8 scales + 8 mins, 6 bits each, packed */
    uint8_t qs[QUANT_QK_K / 2];         /* 4-bit quants: byte l of each 32 holds elements l, l+32 */
};
struct quant_block_q5_k {
    uint16_t d, dmin;
    uint8_t scales[QUANT_K_SCALE_SIZE]; /* as Q4_K */
    uint8_t qh[QUANT_QK_K / 8];         /* fifth bits: bit k of qh[l] for element 32k + l */
    uint8_t qs[QUANT_QK_K / 2];         /* low four bits, as Q4_K */
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
/* Non-linear 4-bit: a nibble indexes quant_iq4nl_values. */
struct quant_block_iq4_nl {
    uint16_t d;
    uint8_t qs[QUANT_QK4_NL / 2]; /* as Q4_0; x = d * values[q] */
};
struct quant_block_iq4_xs {
    uint16_t d;
    uint16_t scales_h;                 /* high 2 bits of the 8 six-bit scales */
    uint8_t scales_l[QUANT_QK_K / 64]; /* low 4 bits; x = d * (scale - 32) * values[q] */
    uint8_t qs[QUANT_QK_K / 2];        /* per 32 elements, as Q4_0 */
};

_Static_assert(sizeof(struct quant_block_q4_0) == 18, "q4_0 layout");
_Static_assert(sizeof(struct quant_block_q4_1) == 20, "q4_1 layout");
_Static_assert(sizeof(struct quant_block_q5_0) == 22, "q5_0 layout");
_Static_assert(sizeof(struct quant_block_q5_1) == 24, "q5_1 layout");
_Static_assert(sizeof(struct quant_block_q8_0) == 34, "q8_0 layout");
_Static_assert(sizeof(struct quant_block_q2_k) == 84, "q2_k layout");
_Static_assert(sizeof(struct quant_block_q3_k) == 110, "q3_k layout");
_Static_assert(sizeof(struct quant_block_q4_k) == 144, "q4_k layout");
_Static_assert(sizeof(struct quant_block_q5_k) == 176, "q5_k layout");
_Static_assert(sizeof(struct quant_block_q6_k) == 210, "q6_k layout");
_Static_assert(sizeof(struct quant_block_q8_k) == 292, "q8_k layout");
_Static_assert(sizeof(struct quant_block_iq4_nl) == 18, "iq4_nl layout");
_Static_assert(sizeof(struct quant_block_iq4_xs) == 136, "iq4_xs layout");

/* The 16 values of the IQ4_NL / IQ4_XS codebook (ggml's kvalues_iq4nl). */
extern const int8_t quant_iq4nl_values[16];

/* Sub-block scales of the packed K formats, for the decoders here and the backends' kernels (under
 * nvcc they are device functions too: backend/cuda decodes blocks with these same helpers). */
#ifdef __CUDACC__
#define QUANT_INLINE static inline __host__ __device__
#else
#define QUANT_INLINE static inline
#endif
/* The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block (ggml's get_scale_min_k4):
 * entries 0-3 sit in the low 6 bits of bytes 0-3 (scales) and 4-7 (mins); entries 4-7 take their
 * low nibble from bytes 8-11 and their top two bits from the spare high bits of bytes 0-7. */
QUANT_INLINE void quant_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m)
{
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
    }
}

/* The 6-bit scale j (0..15) of a Q3_K block minus 32 (-32..31): low nibbles in bytes 0-7 (j < 8 low,
 * else the high nibble of byte j - 8), top two bits in bytes 8-11. */
QUANT_INLINE int quant_scale_q3_k(const uint8_t *s, int j)
{
    int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
    return (lo | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
}

/* The 6-bit scale of sub-block ib (0..7) of an IQ4_XS block minus 32 (-32..31). */
QUANT_INLINE int quant_scale_iq4_xs(uint16_t scales_h, const uint8_t *scales_l, int ib)
{
    return (((scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | (((scales_h >> 2 * ib) & 3) << 4)) - 32;
}

/* True for every type id of the enum above. */
bool quant_type_known(uint32_t id);
/* "f32", "q4_K", ... (ggml's spelling); "unknown" otherwise. Static string. */
const char *quant_type_name(enum quant_type t);
/* ggml's name of any type id it has defined ("iq2_xxs", "mxfp4", ...), including those this engine
 * cannot read, for error messages; NULL for ids ggml never used. Static string. */
const char *quant_ggml_type_name(uint32_t id);
/* The type named `name`, ignoring case ("q4_k", "Q4_K", "iq4_nl"); false when none is. */
bool quant_type_parse(const char *name, enum quant_type *out);
/* Every type name, in id order, for --help and error messages (parsing ignores case). */
#define QUANT_TYPE_NAMES                                                                           \
    "f32|f16|q4_0|q4_1|q5_0|q5_1|q8_0|q2_K|q3_K|q4_K|q5_K|q6_K|q8_K|iq4_nl|iq4_xs|bf16"
const char *quant_type_names(void); /* QUANT_TYPE_NAMES */
/* llama.cpp's general.file_type (enum llama_ftype) of a file whose matrices are all of type `t`
 * (K-quants: the _S variant); 0 (all F32) for types without one. */
uint32_t quant_type_file_type(enum quant_type t);
/* Elements per block (1 for float types) and bytes per block. 0 for unknown types. */
size_t quant_block_elems(enum quant_type t);
size_t quant_block_bytes(enum quant_type t);
/* Bytes of a row of `n` elements; 0 when `n` is not a multiple of the block size (a malformed file). */
size_t quant_row_bytes(enum quant_type t, uint64_t n);

float quant_f16_to_f32(uint16_t h);
uint16_t quant_f32_to_f16(float f); /* round to nearest even, as ggml */
float quant_bf16_to_f32(uint16_t h);
uint16_t quant_f32_to_bf16(float f); /* round to nearest even; NaN stays NaN */

/* Decodes `n` elements of type `t` at `src` (borrowed, any alignment) into `dst`, exactly as ggml's
 * dequantize_row_* (NaN and infinite scales propagate as ggml's arithmetic gives them). `n` must be
 * a multiple of the block size. Scalar reference; thread-safe. */
void quant_dequantize_row(enum quant_type t, const void *src, float *dst, size_t n);
/* Encodes `n` floats into type `t` byte for byte as llama.cpp's quantizer does without an
 * importance matrix (NaN and infinite inputs give what ggml's code gives on x86-64). `dst` needs
 * quant_row_bytes(t, n) bytes (any alignment). Returns 0, or ERR_UNSUPPORTED for an unknown type. */
int quant_quantize_row(enum quant_type t, const float *src, void *dst, size_t n);

#endif
