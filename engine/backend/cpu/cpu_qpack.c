/* Row-interleaved ("packed") Q8_0 and Q4_0 weights for the VNNI GEMM kernels.
 *
 * Why: the row-major kernels get one Q8_0 block's 32 products per row and token as eight int32
 * lanes, which must be converted, scaled and summed per block: three float ops per (row, token,
 * block) that cost more than the integer products themselves. Interleaving 16 rows four bytes at a
 * time makes each 32-bit lane of a vpdpbusd belong to one row, so one instruction advances 16 rows
 * by four products each, eight of them finish a block, and the float work is three ops per 16 rows.
 *
 * Layout, per group of CPU_QPACK_ROWS rows (the last group is padded with zero rows):
 *   scales: nb blocks of CPU_QPACK_ROWS f16 block scales;
 *   quants: nb blocks, each CPU_QPACK_ROWS * qbytes bytes, chunk k (64 bytes) of a block holds bytes
 *           [4k, 4k+4) of the block of row 0, row 1, ..., row 15 (qbytes: Q8_0 32, Q4_0 16).
 *           Q8_0 quants are stored plus 128 (unsigned, as vpdpbusd wants them); Q4_0 nibbles raw.
 * Scales come first so that a kernel streaming the groups in address order, prefetching a fixed
 * distance ahead, has a group's scales requested before its first block. nb * 32 is a multiple of
 * 64 for even nb, so the quant chunks are then cache-line aligned (the kernels load unaligned).
 * A group is cpu_qpack_group_bytes apart from the next; the arithmetic is the row-major kernels'. */
#include "engine/backend/cpu/cpu_backend.h"

#include <string.h>

static size_t qpack_qbytes(enum quant_type type)
{
    return type == QUANT_Q8_0 ? QUANT_QK8_0 : QUANT_QK4_0 / 2;
}

int cpu_qpack_supported(enum quant_type type)
{
    return type == QUANT_Q8_0 || type == QUANT_Q4_0;
}

size_t cpu_qpack_group_bytes(enum quant_type type, int64_t cols)
{
    size_t nb = (size_t)cols / QUANT_QK8_0;
    return nb * CPU_QPACK_ROWS * (qpack_qbytes(type) + sizeof(uint16_t));
}

size_t cpu_qpack_bytes(enum quant_type type, int64_t rows, int64_t cols)
{
    size_t groups = (size_t)(rows + CPU_QPACK_ROWS - 1) / CPU_QPACK_ROWS;
    return groups * cpu_qpack_group_bytes(type, cols);
}

/* One block of one row: its f16 scale and its quants (Q8_0: 32 int8; Q4_0: 16 nibble pairs). */
static void qpack_block(enum quant_type type, const void *row, size_t b, uint16_t *d,
                        const uint8_t **qs)
{
    if (type == QUANT_Q8_0) {
        const struct quant_block_q8_0 *blk = (const struct quant_block_q8_0 *)row + b;
        *d = blk->d;
        *qs = (const uint8_t *)blk->qs;
    } else {
        const struct quant_block_q4_0 *blk = (const struct quant_block_q4_0 *)row + b;
        *d = blk->d;
        *qs = blk->qs;
    }
}

void cpu_qpack_weights(enum quant_type type, const void *src, size_t row_bytes, int64_t rows,
                       int64_t cols, void *dst)
{
    size_t nb = (size_t)cols / QUANT_QK8_0, qb = qpack_qbytes(type);
    size_t block_q = CPU_QPACK_ROWS * qb, gbytes = cpu_qpack_group_bytes(type, cols);
    uint8_t flip = type == QUANT_Q8_0 ? 0x80 : 0x00;
    memset(dst, 0, cpu_qpack_bytes(type, rows, cols));
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *g = (uint8_t *)dst + (size_t)(r / CPU_QPACK_ROWS) * gbytes;
        uint16_t *scales = (uint16_t *)g;
        size_t lane = (size_t)(r % CPU_QPACK_ROWS);
        const char *row = (const char *)src + (size_t)r * row_bytes;
        for (size_t b = 0; b < nb; b++) {
            const uint8_t *qs;
            qpack_block(type, row, b, &scales[b * CPU_QPACK_ROWS + lane], &qs);
            uint8_t *out = g + nb * CPU_QPACK_ROWS * sizeof(uint16_t) + b * block_q;
            for (size_t k = 0; k < qb / 4; k++)
                for (size_t i = 0; i < 4; i++)
                    out[k * CPU_QPACK_ROWS * 4 + lane * 4 + i] = (uint8_t)(qs[4 * k + i] ^ flip);
        }
    }
}
