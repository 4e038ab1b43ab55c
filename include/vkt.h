/*
 * vkt.h - the public contract of vktrain, a neural-network training engine whose
 * kernels are GLSL compute shaders run through Vulkan.
 *
 * Conventions (read once, they hold everywhere):
 *  - Handles are opaque: `vkt_instance`, `vkt_context`, `vkt_buffer`, `vkt_stream`.
 *  - Every fallible call returns a `vkt_status`. On failure, outputs are set to NULL/0
 *    and nothing is created. The message of the failure is kept by the handle the call
 *    was made on (`vkt_instance_errmsg`, `vkt_context_errmsg`) and, for calls that have
 *    no handle yet (the *_create functions), by the calling thread (`vkt_last_error`).
 *    Messages name the failing Vulkan call and its VkResult where there is one.
 *  - Every `*_destroy(NULL)` is a harmless no-op.
 *  - Option structs may be passed as NULL for defaults; a zero-initialised struct means
 *    "all defaults", so new fields can be appended without breaking callers.
 *  - Matrices and tensors are row-major, fp32. Buffer views count in 4-byte elements.
 *  - Nothing in the library calls exit() or abort() on user error.
 */
#ifndef VKT_H
#define VKT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VKT_VERSION_MAJOR 0
#define VKT_VERSION_MINOR 1
#define VKT_VERSION_PATCH 0

/* ------------------------------------------------------------------------------ */
/* Status codes                                                                   */
/* ------------------------------------------------------------------------------ */

typedef enum vkt_status {
    VKT_OK = 0,
    VKT_ERROR_INVALID_ARGUMENT, /* NULL where a value is needed, bad enum, zero size */
    VKT_ERROR_SHAPE,            /* shapes or sizes that do not agree */
    VKT_ERROR_NO_VULKAN,        /* the Vulkan loader library could not be loaded */
    VKT_ERROR_NO_DEVICE,        /* no Vulkan device, or a device index out of range */
    VKT_ERROR_OUT_OF_MEMORY,    /* host or device memory exhausted */
    VKT_ERROR_LIMIT,            /* a device limit (e.g. maxStorageBufferRange) exceeded */
    VKT_ERROR_VULKAN,           /* another Vulkan failure; the message names call and VkResult */
    VKT_ERROR_DEVICE_LOST,      /* the device was lost; the context must be destroyed */
    VKT_ERROR_STATE,            /* call not valid now (e.g. recording into a running stream) */
    VKT_ERROR_IO,               /* a file could not be read or written */
    VKT_ERROR_FORMAT,           /* a file or string is corrupt, truncated or malformed */
    VKT_ERROR_INTERNAL          /* a bug in vktrain: please report the message */
} vkt_status;

/* "VKT_OK", "VKT_ERROR_SHAPE", ...; never NULL. */
const char *vkt_status_name(vkt_status status);

/* The most recent error message set on the calling thread, by any call ("" if none).
 * Valid until the next vktrain call on this thread. */
const char *vkt_last_error(void);

/* ------------------------------------------------------------------------------ */
/* Instance and devices                                                           */
/* ------------------------------------------------------------------------------ */

typedef struct vkt_instance vkt_instance;

typedef struct vkt_instance_options {
    /* Enable VK_LAYER_KHRONOS_validation and count its messages. Also enabled when the
     * environment variable VKT_VALIDATION=1. Fails with VKT_ERROR_VULKAN if the layer
     * is not installed. */
    int enable_validation;
    /* Path of the Vulkan loader library to open (default: the environment variable
     * VKT_VULKAN_LIBRARY, else the platform's libvulkan). */
    const char *loader_path;
    /* Print validation messages to stderr (default on when validation is on). 1 = quiet. */
    int quiet_validation;
} vkt_instance_options;

/* Opens the Vulkan loader, creates a VkInstance and lists the physical devices.
 * Fails with VKT_ERROR_NO_VULKAN (no loader) or VKT_ERROR_NO_DEVICE (no device). */
vkt_status vkt_instance_create(const vkt_instance_options *options,
                               vkt_instance **out_instance /* OUT */);
void vkt_instance_destroy(vkt_instance *instance);
const char *vkt_instance_errmsg(const vkt_instance *instance);

/* Number of validation-layer warnings and errors reported so far (0 if validation off). */
uint64_t vkt_instance_validation_count(const vkt_instance *instance);

typedef enum vkt_device_type {
    VKT_DEVICE_TYPE_OTHER = 0,
    VKT_DEVICE_TYPE_INTEGRATED_GPU,
    VKT_DEVICE_TYPE_DISCRETE_GPU,
    VKT_DEVICE_TYPE_VIRTUAL_GPU,
    VKT_DEVICE_TYPE_CPU
} vkt_device_type;

const char *vkt_device_type_name(vkt_device_type type);

#define VKT_MAX_HEAPS 16

typedef struct vkt_device_info {
    char name[256];
    char driver_name[256];
    char driver_info[256];
    uint32_t vendor_id, device_id;
    vkt_device_type type;
    uint32_t api_version;             /* VK_MAKE_API_VERSION encoding */
    uint32_t heap_count;
    uint64_t heap_size[VKT_MAX_HEAPS];
    int heap_device_local[VKT_MAX_HEAPS];
    uint32_t subgroup_size;
    uint64_t max_storage_buffer_range; /* bytes one storage binding may span */
    uint32_t max_shared_memory;        /* maxComputeSharedMemorySize, bytes */
    uint32_t max_workgroup_invocations;
    uint64_t max_allocation_size;      /* maxMemoryAllocationSize */
    int compute_only_queue;            /* 1 if a compute-without-graphics family exists */
    int timestamps;                    /* 1 if compute queues support timestamps */
} vkt_device_info;

uint32_t vkt_instance_device_count(const vkt_instance *instance);
vkt_status vkt_instance_device_info(vkt_instance *instance, uint32_t index,
                                    vkt_device_info *out_info /* OUT */);

/* Parses a device list such as "0", "0,0,1" or " 1 , 0 " into indices. The same index
 * may repeat: each entry becomes its own logical device (one replica each). */
vkt_status vkt_parse_device_list(const char *text, uint32_t *indices /* OUT */,
                                 uint32_t capacity, uint32_t *out_count /* OUT */);

/* The devices to use: the environment variable VKT_DEVICES if set, else device 0.
 * Every index is checked against the instance's device count. */
vkt_status vkt_instance_select_devices(vkt_instance *instance, uint32_t *indices /* OUT */,
                                       uint32_t capacity, uint32_t *out_count /* OUT */);

/* ------------------------------------------------------------------------------ */
/* Contexts: one logical device + compute queue each (one per replica)            */
/* ------------------------------------------------------------------------------ */

typedef struct vkt_context vkt_context;

typedef enum vkt_kernel_variant {
    VKT_KERNELS_AUTO = 0, /* from device properties; env VKT_KERNELS=cpu|gpu overrides */
    VKT_KERNELS_CPU,      /* for CPU-type devices (lavapipe): texel reads, register blocks */
    VKT_KERNELS_GPU       /* for GPUs: shared-memory tiles */
} vkt_kernel_variant;

typedef struct vkt_context_options {
    uint32_t device_index;          /* index into the instance's device list */
    vkt_kernel_variant kernels;
    uint64_t block_size;            /* device memory block size; 0 = 64 MiB */
    int force_staging;              /* 1: always go through staging even on host-visible
                                       device memory (tests the discrete-GPU path) */
    int no_pipeline_cache_file;     /* 1: do not read or write the on-disk pipeline cache */
} vkt_context_options;

/* The instance must outlive the context. A context is used by one thread at a time.
 * Destroying a context also destroys the buffers and streams still alive in it. */
vkt_status vkt_context_create(vkt_instance *instance, const vkt_context_options *options,
                              vkt_context **out_context /* OUT */);
void vkt_context_destroy(vkt_context *context);
const char *vkt_context_errmsg(const vkt_context *context);
vkt_status vkt_context_device_info(const vkt_context *context,
                                   vkt_device_info *out_info /* OUT */);
vkt_kernel_variant vkt_context_kernel_variant(const vkt_context *context);

typedef struct vkt_memory_stats {
    uint64_t device_bytes_allocated; /* sum of vkAllocateMemory sizes */
    uint64_t bytes_in_use;           /* sum of live suballocations */
    uint32_t block_count;            /* number of vkAllocateMemory blocks */
    uint32_t allocation_count;       /* number of live suballocations */
    uint32_t pipeline_count;         /* pipelines created so far */
} vkt_memory_stats;

vkt_status vkt_context_memory_stats(const vkt_context *context,
                                    vkt_memory_stats *out_stats /* OUT */);

/* ------------------------------------------------------------------------------ */
/* Buffers (suballocated from large device-memory blocks)                         */
/* ------------------------------------------------------------------------------ */

typedef struct vkt_buffer vkt_buffer;

typedef enum vkt_memory_kind {
    VKT_MEMORY_DEVICE = 0, /* device-local where the device has it; read/write via staging */
    VKT_MEMORY_HOST        /* host-visible, coherent: staging, mappable */
} vkt_memory_kind;

vkt_status vkt_buffer_create(vkt_context *context, uint64_t bytes, vkt_memory_kind kind,
                             vkt_buffer **out_buffer /* OUT */);
void vkt_buffer_destroy(vkt_buffer *buffer);
uint64_t vkt_buffer_size(const vkt_buffer *buffer);
/* Host pointer of a VKT_MEMORY_HOST buffer (NULL for device buffers). */
void *vkt_buffer_map(vkt_buffer *buffer);

/* Synchronous copies between host memory and a buffer, byte offsets. They wait for the
 * device; use streams for work that should overlap. */
vkt_status vkt_buffer_write(vkt_buffer *buffer, uint64_t offset, const void *data,
                            uint64_t bytes);
vkt_status vkt_buffer_read(vkt_buffer *buffer, uint64_t offset, void *data /* OUT */,
                           uint64_t bytes);

/* A view of fp32 (or uint32) elements inside a buffer; offset counts elements. */
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

vkt_status vkt_stream_create(vkt_context *context, const vkt_stream_options *options,
                             vkt_stream **out_stream /* OUT */);
void vkt_stream_destroy(vkt_stream *stream);

/* Ends recording (on first use), submits, and returns without waiting. A stream can be
 * submitted again after it finished: the same commands replay. */
vkt_status vkt_stream_submit(vkt_stream *stream);
vkt_status vkt_stream_wait(vkt_stream *stream);
/* submit + wait */
vkt_status vkt_stream_run(vkt_stream *stream);
/* Discards the recorded commands (waits if running) so new ones can be recorded. */
vkt_status vkt_stream_reset(vkt_stream *stream);

/* Copy bytes between buffers inside the stream (vkCmdCopyBuffer). */
vkt_status vkt_stream_copy(vkt_stream *stream, vkt_buffer *src, uint64_t src_offset,
                           vkt_buffer *dst, uint64_t dst_offset, uint64_t bytes);

typedef struct vkt_stream_stats {
    uint32_t dispatches;
    uint32_t copies;
    uint32_t barriers;   /* vkCmdPipelineBarrier calls recorded */
} vkt_stream_stats;

vkt_status vkt_stream_stats_get(const vkt_stream *stream, vkt_stream_stats *out /* OUT */);

typedef struct vkt_timing {
    const char *kernel; /* static string: the kernel's name */
    double microseconds;
} vkt_timing;

/* After a run of a stream created with timestamps: one entry per dispatch, in order. */
vkt_status vkt_stream_timings(vkt_stream *stream, vkt_timing *out /* OUT */,
                              uint32_t capacity, uint32_t *out_count /* OUT */);

/* ------------------------------------------------------------------------------ */
/* Kernels (fp32). Each records one or a few dispatches into a stream.            */
/* ------------------------------------------------------------------------------ */

/* C[M,N] = alpha * op(A) * op(B) + beta * C, row-major.
 * op(A) is [M,K]: A is stored [M,K] (lda >= K), or [K,M] if trans_a (lda >= M).
 * op(B) is [K,N]: B is stored [K,N] (ldb >= N), or [N,K] if trans_b (ldb >= K).
 * ldc >= N. A leading dimension of 0 means "packed". beta == 0 ignores C's contents. */
typedef struct vkt_gemm_desc {
    int trans_a, trans_b;
    uint32_t m, n, k;
    float alpha, beta;
    vkt_view a; uint32_t lda;
    vkt_view b; uint32_t ldb;
    vkt_view c; uint32_t ldc;
} vkt_gemm_desc;

vkt_status vkt_gemm(vkt_stream *stream, const vkt_gemm_desc *desc);

typedef enum vkt_unary_op {
    VKT_UNARY_SCALE = 0,  /* y = alpha * x */
    VKT_UNARY_RELU,       /* y = max(x, 0) */
    VKT_UNARY_LEAKY_RELU, /* y = x > 0 ? x : alpha * x */
    VKT_UNARY_GELU,       /* tanh approximation */
    VKT_UNARY_TANH,
    VKT_UNARY_SIGMOID,
    VKT_UNARY_EXP,
    VKT_UNARY_LOG,
    VKT_UNARY_COUNT
} vkt_unary_op;

const char *vkt_unary_op_name(vkt_unary_op op);

/* y[i] = f(x[i]) for i < n. y may equal x (in place). */
vkt_status vkt_unary(vkt_stream *stream, vkt_unary_op op, float alpha, vkt_view x,
                     vkt_view y, uint64_t n);
/* dx[i] = dy[i] * f'(x[i]). */
vkt_status vkt_unary_backward(vkt_stream *stream, vkt_unary_op op, float alpha, vkt_view x,
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

const char *vkt_binary_op_name(vkt_binary_op op);

/* The broadcast shape of a and b (NumPy rules: trailing dimensions aligned, a dimension
 * of 1 stretches). VKT_ERROR_SHAPE names both shapes when they do not broadcast. */
vkt_status vkt_broadcast_shape(const vkt_shape *a, const vkt_shape *b,
                               vkt_shape *out /* OUT */, char *msg, size_t msg_size);

/* out = a (op) b with broadcasting; out has the broadcast shape. */
vkt_status vkt_binary(vkt_stream *stream, vkt_binary_op op, vkt_view a, const vkt_shape *a_shape,
                      vkt_view b, const vkt_shape *b_shape, vkt_view out);
/* Gradient of a (op) b with respect to operand `which` (0 = a, 1 = b), given dy of the
 * broadcast shape; summed over the dimensions that operand was broadcast along, so the
 * result `grad` has that operand's shape. */
vkt_status vkt_binary_backward(vkt_stream *stream, vkt_binary_op op, int which, vkt_view a,
                               const vkt_shape *a_shape, vkt_view b, const vkt_shape *b_shape,
                               vkt_view dy, vkt_view grad);

typedef enum vkt_reduce_op {
    VKT_REDUCE_SUM = 0,
    VKT_REDUCE_MEAN,
    VKT_REDUCE_MAX,
    VKT_REDUCE_ARGMAX, /* writes uint32 indices (first maximum) */
    VKT_REDUCE_COUNT
} vkt_reduce_op;

const char *vkt_reduce_op_name(vkt_reduce_op op);

/* Reduces x of shape `shape` along `axis`; out has the shape with dims[axis] removed. */
vkt_status vkt_reduce(vkt_stream *stream, vkt_reduce_op op, vkt_view x, const vkt_shape *shape,
                      uint32_t axis, vkt_view out);

/* Row softmax (log_softmax when `log`) of x[rows, cols] into y[rows, cols]. */
vkt_status vkt_softmax(vkt_stream *stream, int log, vkt_view x, vkt_view y, uint32_t rows,
                       uint32_t cols);
/* dx from y (the forward output) and dy. */
vkt_status vkt_softmax_backward(vkt_stream *stream, int log, vkt_view y, vkt_view dy,
                                vkt_view dx, uint32_t rows, uint32_t cols);

/* y[i] = value for i < n. */
vkt_status vkt_fill(vkt_stream *stream, vkt_view y, uint64_t n, float value);
/* y[i] = x[i] for i < n (ranges must not overlap). */
vkt_status vkt_copy(vkt_stream *stream, vkt_view x, vkt_view y, uint64_t n);

#ifdef __cplusplus
}
#endif

#endif /* VKT_H */
