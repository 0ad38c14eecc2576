/* Row-interleaved ("packed") quantized weights for the VNNI GEMM kernels.
 *
 * Why: the row-major kernels get one Q8_0 block's 32 products per row and token as eight int32
 * lanes, which must be converted, scaled and summed per block: three float ops per (row, token,
 * block) that cost more than the integer products themselves. Interleaving 16 rows four bytes at a
 * time makes each 32-bit lane of a vpdpbusd belong to one row, so one instruction advances 16 rows
 * by four products each, eight of them finish a block of 32, and the float and scale work is done
 * once per 16 rows.
 *
 * "Interleaved" below: a chunk of n bytes (a multiple of 4) of each of the 16 rows becomes n / 4
 * vectors of 64 bytes; vector k holds bytes [4k, 4k+4) of row 0, row 1, ..., row 15. The last group
 * of a matrix is padded with zero rows (zero scales: they add nothing). All scales are per row,
 * 16 to a vector, in row order.
 *
 * 32-element formats, per group: all block scales first (f16 [nb][16]; Q4_1/Q5_1 then their offsets
 * m, f16 [nb][16]), then per block its quants:
 *   Q8_0: the 32 quants + 128 (unsigned, as vpdpbusd wants them), interleaved (512 bytes);
 *   Q4_0, Q4_1, IQ4_NL: the 16 nibble bytes, interleaved (256 bytes);
 *   Q5_0, Q5_1: the same, then one vector of fifth bits: row r's 32 bits rearranged so that bit
 *     8i + k is element 4k + i's and bit 8i + 4 + k element 16 + 4k + i's (i, k < 4), which puts
 *     the bits of vector k's bytes one shift away from bit 4 of each byte (320 bytes).
 * Scales come first so that a kernel streaming the groups in address order, prefetching a fixed
 * distance ahead, has a group's scales requested before its first block.
 *
 * K formats, per group one record per super-block of 256 (header first, then quants; sub-block j of
 * 32 elements is the 8 vectors whose vector k holds elements 32j + 4k .. 32j + 4k + 3 once unpacked):
 *   Q4_K (2368 B): d[16], dmin[16] (f16), scales u8 [8][16], mins u8 [4][16][2] (row r's mins of
 *     sub-blocks 2k and 2k+1 side by side: int16 pairs for vpdpwssd once widened), then the four
 *     32-byte chunks of qs interleaved (low nibbles: sub-block 2c, high: 2c + 1);
 *   Q5_K (2880 B): the same header, qh interleaved (bit j of byte l: element 32j + l), then qs;
 *   Q6_K (3360 B): d[16], scales i8 [16][16], the four 32-byte ql chunks (ql[64h + 32a ..]: low
 *     nibbles elements 128h + 32a + l, high 128h + 64 + 32a + l) interleaved, then qh's two halves;
 *   Q3_K (1824 B): d[16], scales i8 [16][16] (minus 32 already), qs's two halves, then hmask;
 *   Q2_K (1344 B): d[16], dmin[16], the 16 scale bytes u8 [16][16] (scale low nibble, min high),
 *     then qs's two halves;
 *   IQ4_XS (2208 B): d[16], scales i8 [8][16] (minus 32 already), then per sub-block its 16 nibble
 *     bytes interleaved (4 vectors).
 * A group is cpu_qpack_group_bytes apart from the next; the arithmetic is cpu_qdot.c's. */
#include "engine/backend/cpu/cpu_backend.h"

#include <string.h>

/* Bytes per row per block (32-element formats: quants only, scales counted separately) or per
 * super-block record share (K formats: the record's bytes / 16). */
struct qpack_fmt {
    int k;          /* a K format (records per 256) */
    size_t scales;  /* 32-element formats: f16 scales + offsets per row per block */
    size_t per_row; /* quant bytes per row per block (32-element) or record bytes / 16 (K) */
};

static int qpack_fmt(enum quant_type type, struct qpack_fmt *f)
{
    switch (type) {
    case QUANT_Q8_0: *f = (struct qpack_fmt){0, 2, 32}; return 1;
    case QUANT_Q4_0:
    case QUANT_IQ4_NL: *f = (struct qpack_fmt){0, 2, 16}; return 1;
    case QUANT_Q4_1: *f = (struct qpack_fmt){0, 4, 16}; return 1;
    case QUANT_Q5_0: *f = (struct qpack_fmt){0, 2, 20}; return 1;
    case QUANT_Q5_1: *f = (struct qpack_fmt){0, 4, 20}; return 1;
    case QUANT_Q4_K: *f = (struct qpack_fmt){1, 0, 2368 / 16}; return 1;
    case QUANT_Q5_K: *f = (struct qpack_fmt){1, 0, 2880 / 16}; return 1;
    case QUANT_Q6_K: *f = (struct qpack_fmt){1, 0, 3360 / 16}; return 1;
    case QUANT_Q3_K: *f = (struct qpack_fmt){1, 0, 1824 / 16}; return 1;
    case QUANT_Q2_K: *f = (struct qpack_fmt){1, 0, 1344 / 16}; return 1;
    case QUANT_IQ4_XS: *f = (struct qpack_fmt){1, 0, 2208 / 16}; return 1;
    default: return 0;
    }
}

int cpu_qpack_supported(enum quant_type type)
{
    struct qpack_fmt f;
    return qpack_fmt(type, &f);
}

size_t cpu_qpack_group_bytes(enum quant_type type, int64_t cols)
{
    struct qpack_fmt f;
    if (!qpack_fmt(type, &f)) return 0;
    size_t nb = (size_t)cols / (f.k ? QUANT_QK_K : QUANT_QK8_0);
    return nb * CPU_QPACK_ROWS * (f.scales + f.per_row);
}

size_t cpu_qpack_bytes(enum quant_type type, int64_t rows, int64_t cols)
{
    size_t groups = (size_t)(rows + CPU_QPACK_ROWS - 1) / CPU_QPACK_ROWS;
    return groups * cpu_qpack_group_bytes(type, cols);
}

/* Row `lane`'s n bytes at src into the interleaved vectors at dst (n / 4 vectors). */
static void qpack_interleave(uint8_t *dst, size_t lane, const uint8_t *src, size_t n, uint8_t flip)
{
    for (size_t k = 0; k < n / 4; k++)
        for (size_t i = 0; i < 4; i++)
            dst[k * CPU_QPACK_ROWS * 4 + lane * 4 + i] = (uint8_t)(src[4 * k + i] ^ flip);
}

static void qpack_f16(uint8_t *dst, size_t lane, uint16_t h)
{
    memcpy(dst + lane * 2, &h, 2);
}

/* The fifth bits of a Q5_0/Q5_1 block rearranged as described above. */
static uint32_t qpack_q5_bits(const uint8_t *qh)
{
    uint32_t h = (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 |
                 (uint32_t)qh[3] << 24,
             out = 0;
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 4; i++) {
            out |= ((h >> (4 * k + i)) & 1u) << (8 * i + k);
            out |= ((h >> (16 + 4 * k + i)) & 1u) << (8 * i + 4 + k);
        }
    return out;
}

/* One row of a 32-element format into its group (g) at `lane`. */
static void qpack_row32(enum quant_type type, const uint8_t *row, size_t nb, uint8_t *g,
                        size_t lane)
{
    struct qpack_fmt f;
    qpack_fmt(type, &f);
    size_t bsz = quant_block_bytes(type), qbytes = type == QUANT_Q8_0 ? 32 : 16;
    int has_m = type == QUANT_Q4_1 || type == QUANT_Q5_1,
        q5 = type == QUANT_Q5_0 || type == QUANT_Q5_1;
    uint8_t *dsc = g, *msc = g + nb * CPU_QPACK_ROWS * 2;
    uint8_t *q = g + nb * CPU_QPACK_ROWS * f.scales;
    size_t rec = CPU_QPACK_ROWS * f.per_row;
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *blk = row + b * bsz;
        uint16_t h;
        memcpy(&h, blk, 2);
        qpack_f16(dsc + b * CPU_QPACK_ROWS * 2, lane, h);
        if (has_m) {
            memcpy(&h, blk + 2, 2);
            qpack_f16(msc + b * CPU_QPACK_ROWS * 2, lane, h);
        }
        const uint8_t *qs = blk + (has_m ? 4 : 2) + (q5 ? 4 : 0);
        qpack_interleave(q + b * rec, lane, qs, qbytes, type == QUANT_Q8_0 ? 0x80 : 0x00);
        if (q5) {
            uint32_t bits = qpack_q5_bits(blk + (has_m ? 4 : 2));
            uint8_t v[4] = {(uint8_t)bits, (uint8_t)(bits >> 8), (uint8_t)(bits >> 16),
                            (uint8_t)(bits >> 24)};
            qpack_interleave(q + b * rec + CPU_QPACK_ROWS * 16, lane, v, 4, 0);
        }
    }
}

/* One super-block of one row of a K format into its record at `lane`. */
static void qpack_super(enum quant_type type, const uint8_t *blk, uint8_t *r, size_t lane)
{
    const size_t R = CPU_QPACK_ROWS, V = R * 4; /* bytes of one f16 scale vector / one vector */
    uint16_t h;
    switch (type) {
    case QUANT_Q4_K:
    case QUANT_Q5_K: {
        const uint8_t *sc = blk + 4;
        memcpy(&h, blk, 2);
        qpack_f16(r, lane, h);
        memcpy(&h, blk + 2, 2);
        qpack_f16(r + 2 * R, lane, h);
        for (int j = 0; j < 8; j++) {
            uint8_t s, m;
            quant_scale_min_k4(j, sc, &s, &m);
            r[4 * R + (size_t)j * R + lane] = s;
            r[12 * R + (size_t)(j / 2) * 2 * R + lane * 2 + (size_t)(j % 2)] = m;
        }
        uint8_t *q = r + 20 * R;
        const uint8_t *qs = blk + 16;
        if (type == QUANT_Q5_K) {
            qpack_interleave(q, lane, blk + 16, 32, 0);
            q += 8 * V;
            qs = blk + 48;
        }
        for (int c = 0; c < 4; c++)
            qpack_interleave(q + (size_t)c * 8 * V, lane, qs + 32 * c, 32, 0);
        break;
    }
    case QUANT_Q6_K: {
        const struct quant_block_q6_k *b = (const void *)blk;
        memcpy(&h, &b->d, 2);
        qpack_f16(r, lane, h);
        for (int k = 0; k < 16; k++) r[2 * R + (size_t)k * R + lane] = (uint8_t)b->scales[k];
        uint8_t *q = r + 18 * R;
        for (int c = 0; c < 4; c++)
            qpack_interleave(q + (size_t)c * 8 * V, lane, b->ql + 32 * c, 32, 0);
        for (int hh = 0; hh < 2; hh++)
            qpack_interleave(q + (size_t)(4 + hh) * 8 * V, lane, b->qh + 32 * hh, 32, 0);
        break;
    }
    case QUANT_Q3_K: {
        const struct quant_block_q3_k *b = (const void *)blk;
        memcpy(&h, &b->d, 2);
        qpack_f16(r, lane, h);
        for (int k = 0; k < 16; k++)
            r[2 * R + (size_t)k * R + lane] = (uint8_t)(int8_t)quant_scale_q3_k(b->scales, k);
        uint8_t *q = r + 18 * R;
        for (int hh = 0; hh < 2; hh++)
            qpack_interleave(q + (size_t)hh * 8 * V, lane, b->qs + 32 * hh, 32, 0);
        qpack_interleave(q + 16 * V, lane, b->hmask, 32, 0);
        break;
    }
    case QUANT_Q2_K: {
        const struct quant_block_q2_k *b = (const void *)blk;
        memcpy(&h, &b->d, 2);
        qpack_f16(r, lane, h);
        memcpy(&h, &b->dmin, 2);
        qpack_f16(r + 2 * R, lane, h);
        for (int k = 0; k < 16; k++) r[4 * R + (size_t)k * R + lane] = b->scales[k];
        uint8_t *q = r + 20 * R;
        for (int hh = 0; hh < 2; hh++)
            qpack_interleave(q + (size_t)hh * 8 * V, lane, b->qs + 32 * hh, 32, 0);
        break;
    }
    default: { /* IQ4_XS */
        const struct quant_block_iq4_xs *b = (const void *)blk;
        memcpy(&h, &b->d, 2);
        qpack_f16(r, lane, h);
        for (int j = 0; j < 8; j++)
            r[2 * R + (size_t)j * R + lane] =
                (uint8_t)(int8_t)quant_scale_iq4_xs(b->scales_h, b->scales_l, j);
        uint8_t *q = r + 10 * R;
        for (int j = 0; j < 8; j++)
            qpack_interleave(q + (size_t)j * 4 * V, lane, b->qs + 16 * j, 16, 0);
        break;
    }
    }
}

void cpu_qpack_weights(enum quant_type type, const void *src, size_t row_bytes, int64_t rows,
                       int64_t cols, void *dst)
{
    struct qpack_fmt f;
    if (!qpack_fmt(type, &f)) return;
    size_t gbytes = cpu_qpack_group_bytes(type, cols);
    size_t nb = (size_t)cols / (f.k ? QUANT_QK_K : QUANT_QK8_0);
    size_t bsz = quant_block_bytes(type), rec = CPU_QPACK_ROWS * f.per_row;
    memset(dst, 0, cpu_qpack_bytes(type, rows, cols));
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *g = (uint8_t *)dst + (size_t)(r / CPU_QPACK_ROWS) * gbytes;
        size_t lane = (size_t)(r % CPU_QPACK_ROWS);
        const uint8_t *row = (const uint8_t *)src + (size_t)r * row_bytes;
        if (!f.k) {
            qpack_row32(type, row, nb, g, lane);
            continue;
        }
        for (size_t b = 0; b < nb; b++) qpack_super(type, row + b * bsz, g + b * rec, lane);
    }
}
