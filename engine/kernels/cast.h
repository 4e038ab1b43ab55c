/*
 * cast.h - a matrix converted between element types on the device (shaders/cast.comp):
 * fp32 <-> fp16 / bf16, rounding as vkt_convert does on the host (shaders/dtype.h), the
 * same type copied bit for bit. The 16-bit GEMM's widening variants use it (gemm_lowp.c).
 */
#ifndef VKT_KERNELS_CAST_H
#define VKT_KERNELS_CAST_H

#include "gpu/gpu.h"

/* y[r][c] = x[r][c] for r < rows, c < cols (rows ldx / ldy elements apart; views and
 * leading dimensions in elements of each side's type); nothing else of y is written. The
 * caller has checked the views (their extents inside their buffers) and the types. Records
 * one dispatch per binding-sized band of rows. VKT_ERROR_LIMIT when one row is longer
 * than a binding may be. */
vkt_status kcast_matrix(vkt_stream *s, vkt_dtype from, vkt_view x, uint32_t ldx, vkt_dtype to,
                        vkt_view y, uint32_t ldy, uint32_t rows, uint32_t cols);

#endif
