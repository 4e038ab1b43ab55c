/*
 * kernel_util.h - helpers shared by the dispatch code of the kernel library: workgroup
 * and grid sizing, splitting long 1-D ranges into bindings the device accepts, vec4
 * eligibility, views as dispatch arguments, shape checks and formatting.
 *
 * Loop budget: Mesa's llvmpipe (lavapipe) silently ends a shader's loops after 65535
 * iterations in all, counted across every loop an invocation runs (gallivm's loop
 * limiter, LP_MAX_TGSI_LOOP_ITERATIONS). Grids are sized so that no invocation comes
 * near that on such devices.
 */
#ifndef VKT_KERNEL_UTIL_H
#define VKT_KERNEL_UTIL_H

#include "gpu/gpu.h"

/* Workgroup size of the elementwise and row kernels: 64 on CPU devices (lavapipe runs a
 * workgroup as SIMD loops on one core), 256 on GPUs; never above the device limit. */
uint32_t ku_workgroup_size(const vkt_context *ctx);

/* Workgroups for `items` work items of which one workgroup takes `per_group` at a time,
 * capped at `max_groups` (kernels loop over the rest: grid-stride). Mind the loop budget
 * below: ku_groups_1d does. */
uint32_t ku_groups(uint64_t items, uint32_t per_group, uint32_t max_groups);

/* Workgroup cap of the grid-stride 1-D kernels: enough groups to fill the device (1024 on
 * CPU devices, GPU_MAX_GROUPS on GPUs). */
uint32_t ku_max_groups_1d(const vkt_context *ctx);

/* Loop iterations one invocation may run: about 60000 on llvmpipe, unbounded elsewhere. */
uint64_t ku_loop_budget(const vkt_context *ctx);

/* Workgroups of `wg` threads for a grid-stride loop over `items` (each thread takes one
 * item per iteration): enough to fill the device, at most GPU_MAX_GROUPS, and enough
 * that no thread loops past the budget. */
uint32_t ku_groups_1d(const vkt_context *ctx, uint64_t items, uint32_t wg);

/* The grid of a row kernel (reduction, softmax, broadcast gradient): `t` threads (a power
 * of 2) share a row and combine their partials in a tree; a workgroup of `wg` threads
 * takes wg / t rows at a time, `groups` workgroups loop over the rows. */
typedef struct ku_rows {
    uint32_t wg, t, groups;
} ku_rows;

/* Plans rows of `len` elements that each thread walks `passes` times. GPUs: enough
 * threads per row to fill the device, each with a few elements; CPU devices: one thread
 * per row unless the row is long. Fails with VKT_ERROR_LIMIT (message prefixed by `fn`)
 * if a row is too long for the device's loop budget even with the largest workgroup. */
vkt_status ku_plan_rows(vkt_context *ctx, const char *fn, uint64_t rows, uint64_t len,
                        uint32_t passes, ku_rows *out);

/* Most elements one storage binding may span wherever it starts (below
 * maxStorageBufferRange after rounding the start down to the offset alignment), so 1-D
 * kernels split longer ranges into several dispatches. */
uint64_t ku_chunk_elements(const vkt_context *ctx);

/* The vec4 split of elements [first, first + count) of the views (see shaders/push.h):
 * sets *head and returns nvec, or returns 0 (one element at a time) unless every view's
 * descriptor starts 16-byte aligned and all have the same phase modulo 4 elements. */
uint32_t ku_vec4_split(const vkt_context *ctx, const vkt_view *views, uint32_t n_views,
                       uint64_t first, uint64_t count, uint32_t *head);

/* Whether a view's element 0 can be read as a vec4: its descriptor starts 16-byte
 * aligned and its shift is a multiple of 4 elements. */
int ku_vec4_aligned(const vkt_context *ctx, vkt_view v);

/* A view of `count` 16-bit elements (its offset counts 2-byte elements) inside its buffer:
 * gpu_check_view's checks for 2 bytes. */
vkt_status ku_check_view16(vkt_context *ctx, const char *what, vkt_view v, uint64_t count);
/* The dispatch argument of `count` 16-bit elements from a view's offset (in 2-byte
 * elements), widened to whole 4-byte words (a shader reading or writing them as pairs in
 * uints), and the shift in 2-byte elements for the push constants. */
gpu_arg ku_arg16(vkt_view v, uint64_t count, int write);
uint32_t ku_shift16(const vkt_context *ctx, vkt_view v);
/* The dispatch argument of elements [first, first + count) of a view. */
gpu_arg ku_arg(vkt_view v, uint64_t first, uint64_t count, int write);
/* The element shift to pass in the push constants for that argument. */
uint32_t ku_shift(const vkt_context *ctx, vkt_view v, uint64_t first);

/* Fails with VKT_ERROR_INVALID_ARGUMENT unless `s` is a shape: not NULL, ndim <= 4,
 * every dimension >= 1. `fn` and `what` name the call and argument in the message. */
vkt_status ku_check_shape(char *errmsg, const char *fn, const char *what, const vkt_shape *s);
/* Writes the message into msg (when given) and the thread's last error; returns st. For
 * checks that run without a context (geometry validation). */
vkt_status ku_fail_to(char *msg, size_t msg_size, vkt_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Product of the dimensions (1 for ndim 0). */
uint64_t ku_shape_count(const vkt_shape *s);
/* "[3,1,5]" ("[]" for a scalar) into buf; returns buf. */
#define KU_SHAPE_STR 64
const char *ku_shape_str(const vkt_shape *s, char buf[KU_SHAPE_STR]);

#endif
