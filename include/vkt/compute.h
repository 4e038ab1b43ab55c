/*
 * vkt/compute.h - direct compute: device buffers and views, streams of recorded
 * dispatches, and the kernels (GEMM, elementwise, broadcasting binary ops, reductions,
 * softmax, fill, copy) recorded into them. For programs that drive the kernels
 * themselves; the graph and the trainer are built on it. Part of vkt.h, readable alone.
 * The conventions of every part (statuses, messages, NULL options, ...): vkt/base.h.
 */
#ifndef VKT_COMPUTE_H
#define VKT_COMPUTE_H

#include "base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------ */
/* Buffers (suballocated from large device-memory blocks)                         */
/* ------------------------------------------------------------------------------ */

typedef struct vkt_buffer vkt_buffer;

typedef enum vkt_memory_kind {
    VKT_MEMORY_DEVICE = 0, /* device-local where the device has it; read/write via staging */
    VKT_MEMORY_HOST        /* host-visible, coherent: staging, mappable */
} vkt_memory_kind;

VKT_API vkt_status vkt_buffer_create(vkt_context *context, uint64_t bytes, vkt_memory_kind kind,
                                     vkt_buffer **out_buffer /* OUT */);
VKT_API void vkt_buffer_destroy(vkt_buffer *buffer);
VKT_API uint64_t vkt_buffer_size(const vkt_buffer *buffer);
/* Host pointer of a VKT_MEMORY_HOST buffer (NULL for device buffers). */
VKT_API void *vkt_buffer_map(vkt_buffer *buffer);

/* Synchronous copies between host memory and a buffer, byte offsets. They wait for the
 * device; use streams for work that should overlap. */
VKT_API vkt_status vkt_buffer_write(vkt_buffer *buffer, uint64_t offset, const void *data,
                                    uint64_t bytes);
VKT_API vkt_status vkt_buffer_read(vkt_buffer *buffer, uint64_t offset, void *data /* OUT */,
                                   uint64_t bytes);

/* A view of fp32 (or uint32) elements inside a buffer; offset counts elements (of the
 * operand's type where a call takes another: vkt_gemm_desc's 16-bit operands). */
typedef struct vkt_view {
    vkt_buffer *buffer;
    uint64_t offset;
} vkt_view;

/* ------------------------------------------------------------------------------ */
/* Streams: a command buffer of many dispatches, barriers inserted only where     */
/* a later command touches what an earlier one wrote; recorded once, replayable.  */
/* ------------------------------------------------------------------------------ */

typedef struct vkt_stream vkt_stream;

typedef struct vkt_stream_options {
    int timestamps; /* 1: write a GPU timestamp around every dispatch */
} vkt_stream_options;

VKT_API vkt_status vkt_stream_create(vkt_context *context, const vkt_stream_options *options,
                                     vkt_stream **out_stream /* OUT */);
VKT_API void vkt_stream_destroy(vkt_stream *stream);

/* Ends recording (on first use), submits, and returns without waiting. A stream can be
 * submitted again after it finished: the same commands replay. */
VKT_API vkt_status vkt_stream_submit(vkt_stream *stream);
VKT_API vkt_status vkt_stream_wait(vkt_stream *stream);
/* submit + wait */
VKT_API vkt_status vkt_stream_run(vkt_stream *stream);
/* Discards the recorded commands (waits if running) so new ones can be recorded. */
VKT_API vkt_status vkt_stream_reset(vkt_stream *stream);

/* Copy bytes between buffers inside the stream (vkCmdCopyBuffer). */
VKT_API vkt_status vkt_stream_copy(vkt_stream *stream, vkt_buffer *src, uint64_t src_offset,
                                   vkt_buffer *dst, uint64_t dst_offset, uint64_t bytes);

typedef struct vkt_stream_stats {
    uint32_t dispatches;
    uint32_t copies;
    uint32_t barriers;   /* vkCmdPipelineBarrier calls recorded */
} vkt_stream_stats;

VKT_API vkt_status vkt_stream_stats_get(const vkt_stream *stream, vkt_stream_stats *out /* OUT */);

typedef struct vkt_timing {
    const char *kernel; /* static string: the kernel's name */
    double microseconds;
} vkt_timing;

/* After a run of a stream created with timestamps: one entry per dispatch, in order. */
VKT_API vkt_status vkt_stream_timings(vkt_stream *stream, vkt_timing *out /* OUT */,
                                      uint32_t capacity, uint32_t *out_count /* OUT */);

/* ------------------------------------------------------------------------------ */
/* Kernels: each records one or a few dispatches into a stream                    */
/* ------------------------------------------------------------------------------ */

/* C[M,N] = alpha * op(A) * op(B) + beta * C, row-major.
 * op(A) is [M,K]: A is stored [M,K] (lda >= K), or [K,M] if trans_a (lda >= M).
 * op(B) is [K,N]: B is stored [K,N] (ldb >= N), or [N,K] if trans_b (ldb >= K).
 * ldc >= N. A leading dimension of 0 means "packed". beta == 0 ignores C's contents.
 *
 * Element types (zero: fp32 everywhere): A and B both fp32, or both fp16, or both bf16;
 * C fp32, or the inputs' 16-bit type. A view of a 16-bit operand counts its offset, and
 * its leading dimension, in 2-byte elements. 16-bit products accumulate in fp32 (every
 * variant: the cooperative-matrix kernels on devices with VK_KHR_cooperative_matrix, the
 * others elsewhere; README, "Kernels") and a 16-bit C is rounded once, at the end (as
 * vkt_convert rounds). alpha and beta are applied in fp32. Other combinations fail with
 * VKT_ERROR_INVALID_ARGUMENT naming them; a device without 16-bit storage buffers fails
 * 16-bit products with VKT_ERROR_NO_DEVICE naming what it lacks. */
typedef struct vkt_gemm_desc {
    int trans_a, trans_b;
    uint32_t m, n, k;
    float alpha, beta;
    vkt_view a; uint32_t lda;
    vkt_view b; uint32_t ldb;
    vkt_view c; uint32_t ldc;
    vkt_dtype a_type, b_type, c_type; /* VKT_DTYPE_FP32 (0) unless set */
} vkt_gemm_desc;

VKT_API vkt_status vkt_gemm(vkt_stream *stream, const vkt_gemm_desc *desc);

typedef enum vkt_unary_op {
    VKT_UNARY_SCALE = 0,  /* y = alpha * x */
    VKT_UNARY_RELU,       /* y = max(x, 0) */
    VKT_UNARY_LEAKY_RELU, /* y = x > 0 ? x : alpha * x */
    VKT_UNARY_GELU,       /* tanh approximation */
    VKT_UNARY_TANH,
    VKT_UNARY_SIGMOID,
    VKT_UNARY_EXP,
    VKT_UNARY_LOG,
    VKT_UNARY_SILU,       /* y = x * sigmoid(x) (swish) */
    VKT_UNARY_COUNT
} vkt_unary_op;

VKT_API const char *vkt_unary_op_name(vkt_unary_op op);

/* y[i] = f(x[i]) for i < n. y may equal x (in place). */
VKT_API vkt_status vkt_unary(vkt_stream *stream, vkt_unary_op op, float alpha, vkt_view x,
                             vkt_view y, uint64_t n);
/* dx[i] = dy[i] * f'(x[i]). */
VKT_API vkt_status vkt_unary_backward(vkt_stream *stream, vkt_unary_op op, float alpha, vkt_view x,
                                      vkt_view dy, vkt_view dx, uint64_t n);

#define VKT_MAX_DIMS 4

/* A shape of up to VKT_MAX_DIMS dimensions, outermost first. */
typedef struct vkt_shape {
    uint32_t ndim;
    uint32_t dims[VKT_MAX_DIMS];
} vkt_shape;

typedef enum vkt_binary_op {
    VKT_BINARY_ADD = 0,
    VKT_BINARY_SUB,
    VKT_BINARY_MUL,
    VKT_BINARY_DIV,
    VKT_BINARY_COUNT
} vkt_binary_op;

VKT_API const char *vkt_binary_op_name(vkt_binary_op op);

/* The broadcast shape of a and b (NumPy rules: trailing dimensions aligned, a dimension
 * of 1 stretches). VKT_ERROR_SHAPE names both shapes when they do not broadcast. */
VKT_API vkt_status vkt_broadcast_shape(const vkt_shape *a, const vkt_shape *b,
                                       vkt_shape *out /* OUT */, char *msg, size_t msg_size);

/* out = a (op) b with broadcasting; out has the broadcast shape. */
VKT_API vkt_status vkt_binary(vkt_stream *stream, vkt_binary_op op, vkt_view a,
                              const vkt_shape *a_shape, vkt_view b, const vkt_shape *b_shape,
                              vkt_view out);
/* Gradient of a (op) b with respect to operand `which` (0 = a, 1 = b), given dy of the
 * broadcast shape; summed over the dimensions that operand was broadcast along, so the
 * result `grad` has that operand's shape. An operand the gradient does not read may be
 * passed as {NULL, 0}: both for add and sub, `a` for mul's gradient of a and for div's
 * gradient of a (only b, and a's shape, are needed there). */
VKT_API vkt_status vkt_binary_backward(vkt_stream *stream, vkt_binary_op op, int which, vkt_view a,
                                       const vkt_shape *a_shape, vkt_view b,
                                       const vkt_shape *b_shape, vkt_view dy, vkt_view grad);

typedef enum vkt_reduce_op {
    VKT_REDUCE_SUM = 0,
    VKT_REDUCE_MEAN,
    VKT_REDUCE_MAX,
    VKT_REDUCE_ARGMAX, /* writes uint32 indices (first maximum) */
    VKT_REDUCE_COUNT
} vkt_reduce_op;

VKT_API const char *vkt_reduce_op_name(vkt_reduce_op op);

/* Reduces x of shape `shape` along `axis`; out has the shape with dims[axis] removed. */
VKT_API vkt_status vkt_reduce(vkt_stream *stream, vkt_reduce_op op, vkt_view x,
                              const vkt_shape *shape, uint32_t axis, vkt_view out);

/* Row softmax (log_softmax when `log`) of x[rows, cols] into y[rows, cols]. */
VKT_API vkt_status vkt_softmax_rows(vkt_stream *stream, int log, vkt_view x, vkt_view y,
                                    uint32_t rows, uint32_t cols);
/* dx from y (the forward output) and dy. */
VKT_API vkt_status vkt_softmax_rows_backward(vkt_stream *stream, int log, vkt_view y, vkt_view dy,
                                        vkt_view dx, uint32_t rows, uint32_t cols);

/* y[i] = value for i < n. */
VKT_API vkt_status vkt_fill(vkt_stream *stream, vkt_view y, uint64_t n, float value);
/* y[i] = x[i] for i < n (ranges must not overlap). */
VKT_API vkt_status vkt_copy(vkt_stream *stream, vkt_view x, vkt_view y, uint64_t n);

#ifdef __cplusplus
}
#endif

#endif /* VKT_COMPUTE_H */
