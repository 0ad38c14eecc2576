/* The block decoder every CUDA kernel reads weights through: cuda_dq8<T>(row, g, out) writes the
 * elements 8g..8g+7 of a row of type T, exactly as quant.c's dequantizers give them (the same
 * formulas in the same order; on the device the compiler may fuse a multiply-add, a last-bit
 * difference). Eight consecutive elements share one scale in every format, so a group is the unit
 * of all the kernels. The code is __host__ __device__: cuda_host_dequant_row runs it on the CPU so
 * `make test` checks it against quant.c without a GPU. Rows of a type with 256-element blocks hold
 * whole blocks, so g indexes across them. */
#ifndef CINFER_ENGINE_BACKEND_CUDA_QUANT_CUH
#define CINFER_ENGINE_BACKEND_CUDA_QUANT_CUH

#include "engine/backend/cuda/cuda_common.cuh"

/* ggml's kvalues_iq4nl (quant_iq4nl_values), packed into two words a device function can read
 * without a global table; test_backend_cuda checks the decoded values against quant.c. */
static __host__ __device__ __forceinline__ float cuda_iq4nl(int i)
{
    const uint64_t lo = 0xF6EADDCFBFAD9881ull, hi = 0x7159453526190D01ull;
    return (float)(int8_t)(uint8_t)((i < 8 ? lo : hi) >> (8 * (i & 7)));
}

template <int T> struct cuda_qtraits;
#define CUDA_QTRAITS(t, qk, bytes)                                                                 \
    template <> struct cuda_qtraits<t> {                                                           \
        static constexpr int QK = qk, BYTES = bytes;                                               \
    }
CUDA_QTRAITS(QUANT_F32, 1, 4);
CUDA_QTRAITS(QUANT_F16, 1, 2);
CUDA_QTRAITS(QUANT_BF16, 1, 2);
CUDA_QTRAITS(QUANT_Q4_0, 32, 18);
CUDA_QTRAITS(QUANT_Q4_1, 32, 20);
CUDA_QTRAITS(QUANT_Q5_0, 32, 22);
CUDA_QTRAITS(QUANT_Q5_1, 32, 24);
CUDA_QTRAITS(QUANT_Q8_0, 32, 34);
CUDA_QTRAITS(QUANT_Q2_K, 256, 84);
CUDA_QTRAITS(QUANT_Q3_K, 256, 110);
CUDA_QTRAITS(QUANT_Q4_K, 256, 144);
CUDA_QTRAITS(QUANT_Q5_K, 256, 176);
CUDA_QTRAITS(QUANT_Q6_K, 256, 210);
CUDA_QTRAITS(QUANT_Q8_K, 256, 292);
CUDA_QTRAITS(QUANT_IQ4_NL, 32, 18);
CUDA_QTRAITS(QUANT_IQ4_XS, 256, 136);
#undef CUDA_QTRAITS

template <int T>
static __host__ __device__ __forceinline__ void cuda_dq8(const uint8_t *row, int g, float *o)
{
    constexpr int QK = cuda_qtraits<T>::QK, BYTES = cuda_qtraits<T>::BYTES;
    if constexpr (T == QUANT_F32) {
        const float4 *p = reinterpret_cast<const float4 *>(row) + 2 * g;
        float4 a = p[0], b = p[1];
        o[0] = a.x, o[1] = a.y, o[2] = a.z, o[3] = a.w, o[4] = b.x, o[5] = b.y, o[6] = b.z,
        o[7] = b.w;
    } else if constexpr (T == QUANT_F16 || T == QUANT_BF16) {
        uint4 v = reinterpret_cast<const uint4 *>(row)[g];
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
        for (int i = 0; i < 4; i++) {
            uint16_t h0 = (uint16_t)(w[i] & 0xffff), h1 = (uint16_t)(w[i] >> 16);
            o[2 * i] = T == QUANT_F16 ? cuda_h2f(h0) : cuda_bf2f(h0);
            o[2 * i + 1] = T == QUANT_F16 ? cuda_h2f(h1) : cuda_bf2f(h1);
        }
    } else {
        const uint8_t *b = row + (size_t)(g * 8 / QK) * BYTES;
        const int e0 = (g * 8) % QK; /* first element within the block */
        if constexpr (T == QUANT_Q8_0) {
            const float d = cuda_h2f(cuda_ld16(b));
            for (int i = 0; i < 8; i += 2) {
                uint16_t q = cuda_ld16(b + 2 + e0 + i);
                o[i] = (float)(int8_t)(q & 0xff) * d;
                o[i + 1] = (float)(int8_t)(q >> 8) * d;
            }
        } else if constexpr (T == QUANT_Q4_0 || T == QUANT_IQ4_NL) {
            const float d = cuda_h2f(cuda_ld16(b));
            const uint8_t *qs = b + 2 + (e0 & 15);
            for (int i = 0; i < 8; i++) {
                int q = e0 < 16 ? qs[i] & 0x0F : qs[i] >> 4;
                o[i] = T == QUANT_Q4_0 ? (float)(q - 8) * d : d * cuda_iq4nl(q);
            }
        } else if constexpr (T == QUANT_Q4_1) {
            const float d = cuda_h2f(cuda_ld16(b)), m = cuda_h2f(cuda_ld16(b + 2));
            const uint8_t *qs = b + 4 + (e0 & 15);
            for (int i = 0; i < 8; i++) o[i] = (float)(e0 < 16 ? qs[i] & 0x0F : qs[i] >> 4) * d + m;
        } else if constexpr (T == QUANT_Q5_0 || T == QUANT_Q5_1) {
            const bool q51 = T == QUANT_Q5_1;
            const float d = cuda_h2f(cuda_ld16(b)), m = q51 ? cuda_h2f(cuda_ld16(b + 2)) : 0.0f;
            const uint8_t *qhp = b + (q51 ? 4 : 2);
            const uint32_t qh = (uint32_t)qhp[0] | (uint32_t)qhp[1] << 8 | (uint32_t)qhp[2] << 16 |
                                (uint32_t)qhp[3] << 24;
            const uint8_t *qs = b + (q51 ? 8 : 6) + (e0 & 15);
            for (int i = 0; i < 8; i++) {
                const int e = e0 + i;
                const int q = (e0 < 16 ? qs[i] & 0x0F : qs[i] >> 4) | (int)(((qh >> e) & 1) << 4);
                o[i] = q51 ? (float)q * d + m : (float)(q - 16) * d;
            }
        } else if constexpr (T == QUANT_Q2_K) {
            const float d = cuda_h2f(cuda_ld16(b + 80)), min = cuda_h2f(cuda_ld16(b + 82));
            const uint8_t sc = b[e0 / 16];
            const float dl = d * (float)(sc & 0xF), ml = min * (float)(sc >> 4);
            const int shift = ((e0 % 128) / 32) * 2;
            const uint8_t *q = b + 16 + (e0 / 128) * 32 + e0 % 32;
            for (int i = 0; i < 8; i++) o[i] = dl * (float)((q[i] >> shift) & 3) - ml;
        } else if constexpr (T == QUANT_Q3_K) {
            const float d_all = cuda_h2f(cuda_ld16(b + 108));
            const float dl = d_all * (float)quant_scale_q3_k(b + 96, e0 / 16);
            const int shift = ((e0 % 128) / 32) * 2, l0 = e0 % 32;
            const uint8_t m = (uint8_t)(1u << (e0 / 32));
            const uint8_t *q = b + 32 + (e0 / 128) * 32 + l0, *hm = b + l0;
            for (int i = 0; i < 8; i++) {
                const int v = ((q[i] >> shift) & 3) - ((hm[i] & m) ? 0 : 4);
                o[i] = dl * (float)v;
            }
        } else if constexpr (T == QUANT_Q4_K || T == QUANT_Q5_K) {
            const bool q5 = T == QUANT_Q5_K;
            const float d = cuda_h2f(cuda_ld16(b)), min = cuda_h2f(cuda_ld16(b + 2));
            const int j = e0 / 64, hi = (e0 % 64) / 32, l0 = e0 % 32;
            uint8_t sc, mn;
            quant_scale_min_k4(2 * j + hi, b + 4, &sc, &mn);
            const float d1 = d * (float)sc, m1 = min * (float)mn;
            const uint8_t *q = b + (q5 ? 48 : 16) + 32 * j + l0, *qh = b + 16 + l0;
            const uint8_t u = (uint8_t)(1u << (2 * j + hi));
            for (int i = 0; i < 8; i++) {
                int v = hi ? q[i] >> 4 : q[i] & 0xF;
                if (q5) v += qh[i] & u ? 16 : 0;
                o[i] = d1 * (float)v - m1;
            }
        } else if constexpr (T == QUANT_Q6_K) {
            const float d = cuda_h2f(cuda_ld16(b + 208));
            const int n = e0 / 128, r = e0 % 128, qd = r / 32, l0 = r % 32;
            const uint8_t *ql = b + 64 * n + l0 + (qd & 1) * 32, *qh = b + 128 + 32 * n + l0;
            const int8_t sc = (int8_t)b[192 + 8 * n + l0 / 16 + 2 * qd];
            for (int i = 0; i < 8; i++) {
                const int lo = qd < 2 ? ql[i] & 0xF : ql[i] >> 4;
                const int q = (int)(lo | (((qh[i] >> (2 * qd)) & 3) << 4)) - 32;
                o[i] = d * (float)sc * (float)q;
            }
        } else if constexpr (T == QUANT_IQ4_XS) {
            const float d = cuda_h2f(cuda_ld16(b));
            const int ib = e0 / 32, j0 = e0 % 32;
            const float dl = d * (float)quant_scale_iq4_xs(cuda_ld16(b + 2), b + 4, ib);
            const uint8_t *qs = b + 8 + 16 * ib + (j0 & 15);
            for (int i = 0; i < 8; i++) o[i] = dl * cuda_iq4nl(j0 < 16 ? qs[i] & 0xf : qs[i] >> 4);
        } else if constexpr (T == QUANT_Q8_K) {
            float d;
            memcpy(&d, b, sizeof(d));
            for (int i = 0; i < 8; i++) o[i] = d * (float)(int8_t)b[4 + e0 + i];
        }
    }
}

/* One element of a float-typed row (F32, F16, BF16), for rows whose length is no multiple of 8. */
template <int T>
static __host__ __device__ __forceinline__ float cuda_dq1(const uint8_t *row, int64_t i)
{
    if constexpr (T == QUANT_F32) return reinterpret_cast<const float *>(row)[i];
    uint16_t h = reinterpret_cast<const uint16_t *>(row)[i];
    return T == QUANT_F16 ? cuda_h2f(h) : cuda_bf2f(h);
}

/* Calls F.template operator()<T>() for the weight type `t`, false for a type no kernel decodes.
 * Every kernel family is instantiated once per type through it. */
template <class F> static bool cuda_type_dispatch(enum quant_type t, F &&f)
{
    switch (t) {
#define CUDA_CASE(x)                                                                               \
    case x: f.template operator()<x>(); return true
        CUDA_CASE(QUANT_F32);
        CUDA_CASE(QUANT_F16);
        CUDA_CASE(QUANT_BF16);
        CUDA_CASE(QUANT_Q4_0);
        CUDA_CASE(QUANT_Q4_1);
        CUDA_CASE(QUANT_Q5_0);
        CUDA_CASE(QUANT_Q5_1);
        CUDA_CASE(QUANT_Q8_0);
        CUDA_CASE(QUANT_Q2_K);
        CUDA_CASE(QUANT_Q3_K);
        CUDA_CASE(QUANT_Q4_K);
        CUDA_CASE(QUANT_Q5_K);
        CUDA_CASE(QUANT_Q6_K);
        CUDA_CASE(QUANT_Q8_K);
        CUDA_CASE(QUANT_IQ4_NL);
        CUDA_CASE(QUANT_IQ4_XS);
#undef CUDA_CASE
    default: return false;
    }
}

#endif
