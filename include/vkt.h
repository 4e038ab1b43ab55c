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
 *  - Matrices and tensors are row-major, fp32. Buffer views count in 4-byte elements
 *    (the GEMM's 16-bit operands in 2-byte elements: vkt_gemm_desc).
 *  - Nothing in the library calls exit() or abort() on user error.
 */
#ifndef VKT_H
#define VKT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* VKT_API marks the functions of this contract: the only symbols the shared library
 * exports (everything else is built with -fvisibility=hidden). On Windows a program
 * using the DLL defines VKT_SHARED (the CMake package and vktrain.pc do it) so the
 * declarations are dllimport; the DLL's own build defines VKT_BUILDING_DLL too.
 * Static builds need neither. */
#if defined(_WIN32) || defined(__CYGWIN__)
#  if defined(VKT_BUILDING_DLL)
#    define VKT_API __declspec(dllexport)
#  elif defined(VKT_SHARED)
#    define VKT_API __declspec(dllimport)
#  else
#    define VKT_API
#  endif
#elif defined(__GNUC__) || defined(__clang__)
#  define VKT_API __attribute__((visibility("default")))
#else
#  define VKT_API
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
    VKT_ERROR_INTERNAL,         /* a bug in vktrain: please report the message */
    VKT_ERROR_TIMEOUT,          /* another rank did not take part in time (the message names
                                   the late ranks and the step) */
    VKT_ERROR_REMOTE,           /* another rank failed; the message names it, its own message
                                   is in its output */
    VKT_ERROR_DIVERGED          /* training diverged: a non-finite loss, or a state the
                                   divergence guard refuses to save or restore (non-finite
                                   values, parameters grown past vkt_trainer_options.
                                   divergence_growth); the message names the step, what was
                                   found and, across ranks, the rank; training stops there */
} vkt_status;

/* "VKT_OK", "VKT_ERROR_SHAPE", ...; never NULL. */
VKT_API const char *vkt_status_name(vkt_status status);

/* The most recent error message set on the calling thread, by any call ("" if none).
 * Valid until the next vktrain call on this thread. */
VKT_API const char *vkt_last_error(void);

/* ------------------------------------------------------------------------------ */
/* Element types                                                                  */
/* ------------------------------------------------------------------------------ */

/* The element types of the low-precision kernels (vkt_gemm_desc's a_type, b_type,
 * c_type). Zero is fp32, so a zeroed struct means fp32 everywhere. fp16 is IEEE binary16
 * (5 exponent bits, 10 mantissa bits: 2^-24 to 65504), bf16 the top half of an fp32 (8
 * exponent bits, 7 mantissa bits: fp32's range at 3 significant digits). */
typedef enum vkt_dtype {
    VKT_DTYPE_FP32 = 0,
    VKT_DTYPE_FP16,
    VKT_DTYPE_BF16,
    VKT_DTYPE_COUNT
} vkt_dtype;

/* "fp32", "fp16", "bf16"; "?" for anything else. */
VKT_API const char *vkt_dtype_name(vkt_dtype dtype);
/* Bytes per element: 4, 2, 2; 0 for anything else. */
VKT_API size_t vkt_dtype_size(vkt_dtype dtype);
/* Converts n elements of type `from` at src into type `to` at dst (host memory; 16-bit
 * elements are uint16_t bit patterns in the machine's byte order). To fp16 or bf16:
 * round to nearest, ties to even; magnitudes past the largest finite value (fp16 65504)
 * by half an ulp or more become infinities, NaNs stay (quiet) NaNs. To fp32: exact. The
 * same type on both sides copies. src and dst must not overlap unless they are equal and
 * the types have the same size. VKT_ERROR_INVALID_ARGUMENT for a type outside the enum or
 * a NULL pointer with n > 0. The kernels' 16-bit outputs round exactly the same way
 * (shaders/dtype.h holds the one definition). */
VKT_API vkt_status vkt_convert(vkt_dtype from, const void *src, vkt_dtype to, void *dst,
                               size_t n);

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
VKT_API vkt_status vkt_instance_create(const vkt_instance_options *options,
                                       vkt_instance **out_instance /* OUT */);
VKT_API void vkt_instance_destroy(vkt_instance *instance);
VKT_API const char *vkt_instance_errmsg(const vkt_instance *instance);

/* Number of validation-layer warnings and errors reported so far (0 if validation off). */
VKT_API uint64_t vkt_instance_validation_count(const vkt_instance *instance);

typedef enum vkt_device_type {
    VKT_DEVICE_TYPE_OTHER = 0,
    VKT_DEVICE_TYPE_INTEGRATED_GPU,
    VKT_DEVICE_TYPE_DISCRETE_GPU,
    VKT_DEVICE_TYPE_VIRTUAL_GPU,
    VKT_DEVICE_TYPE_CPU
} vkt_device_type;

VKT_API const char *vkt_device_type_name(vkt_device_type type);

#define VKT_MAX_HEAPS 16
#define VKT_DEVICE_NAME_SIZE 256 /* bytes of vkt_device_info's strings, NUL included */

typedef struct vkt_device_info {
    char name[VKT_DEVICE_NAME_SIZE];
    char driver_name[VKT_DEVICE_NAME_SIZE];
    char driver_info[VKT_DEVICE_NAME_SIZE];
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

VKT_API uint32_t vkt_instance_device_count(const vkt_instance *instance);
VKT_API vkt_status vkt_instance_device_info(vkt_instance *instance, uint32_t index,
                                            vkt_device_info *out_info /* OUT */);

/* Parses a device list such as "0", "0,0,1" or " 1 , 0 " into indices. The same index
 * may repeat: each entry becomes its own logical device (one replica each). */
VKT_API vkt_status vkt_parse_device_list(const char *text, uint32_t *indices /* OUT */,
                                         uint32_t capacity, uint32_t *out_count /* OUT */);

/* The devices to use: the environment variable VKT_DEVICES if set, else device 0.
 * Every index is checked against the instance's device count. */
VKT_API vkt_status vkt_instance_select_devices(vkt_instance *instance, uint32_t *indices /* OUT */,
                                               uint32_t capacity, uint32_t *out_count /* OUT */);

/* ------------------------------------------------------------------------------ */
/* Contexts: one logical device + compute queue each (one per replica)            */
/* ------------------------------------------------------------------------------ */

typedef struct vkt_context vkt_context;

/* The kernels' style, a filter over the table of kernel variants (README, "Kernels"):
 * each kernel family (gemm, conv, attention, rows, elementwise, pool, embedding,
 * optimizer) picks the first of its variants that suits the style and that the device
 * can run (subgroups, shared memory, float16, ...), and the tuning constants (workgroups,
 * grids) follow the style and the device's profile. */
typedef enum vkt_kernel_variant {
    VKT_KERNELS_AUTO = 0, /* from the device type; env VKT_KERNELS overrides */
    VKT_KERNELS_CPU,      /* for CPU-type devices (lavapipe): texel reads, register blocks,
                             few workgroups that loop */
    VKT_KERNELS_GPU       /* for GPUs: shared-memory tiles, grids that fill the device */
} vkt_kernel_variant;

/* The memory paths a context takes. AUTO uses what the device offers: on unified memory
 * (lavapipe, integrated GPUs) the host maps every buffer; on a discrete GPU device buffers
 * live in memory the host cannot map (reads and writes go through a staging buffer and a
 * copy), except the buffers the host reads or writes every step (the model's activations
 * and inputs), which go to device-local host-visible memory where the device offers it
 * over its whole heap (resizable BAR, as the H100/H200 do). The others force one path on
 * any device that can take it, so that all of them run (and are tested) on lavapipe:
 * docs/memory.md. */
typedef enum vkt_memory_profile {
    VKT_MEMORY_PROFILE_AUTO = 0,
    VKT_MEMORY_PROFILE_STAGING,  /* host reads and writes of device buffers always through a
                                    staging copy, though the memory stays mapped (= the
                                    force_staging option) */
    VKT_MEMORY_PROFILE_UNMAPPED, /* device buffers in memory the host cannot map, host
                                    buffers in memory of their own: a discrete GPU without
                                    device-local host-visible memory */
    VKT_MEMORY_PROFILE_REBAR     /* as UNMAPPED, but the activations and inputs in device-
                                    local host-visible (uncached) memory: a discrete GPU with
                                    resizable BAR; refused where no memory type is both
                                    over the device's memory heap */
} vkt_memory_profile;

typedef struct vkt_context_options {
    uint32_t device_index;          /* index into the instance's device list */
    vkt_kernel_variant kernels;     /* AUTO: the filter's style, else the device type's */
    uint64_t block_size;            /* device memory block size; 0 = 64 MiB */
    int force_staging;              /* 1: always go through staging even on host-visible
                                       device memory (tests the discrete-GPU path) */
    int no_pipeline_cache_file;     /* 1: do not read or write the on-disk pipeline cache */
    uint64_t memory_limit;          /* bytes of device-local memory this context may allocate
                                       (a smaller device, for tests and planning); 0: the
                                       environment's VKT_DEVICE_MEMORY_LIMIT ("512M", "2G",
                                       bytes), unset: the device's heaps. Past it an allocation
                                       fails with VKT_ERROR_OUT_OF_MEMORY naming the limit */
    const char *kernel_variants;    /* the kernel filter, as $VKT_KERNELS takes it (which it
                                       replaces; NULL: $VKT_KERNELS): comma-separated
                                       terms, "cpu" or "gpu" (a style) or a variant's name,
                                       which that family then runs ("gemm_shared",
                                       "gpu,gemm_shared"). An unknown term, or a variant
                                       the device cannot run, fails the creation */
    vkt_memory_profile memory;      /* which memory paths the context takes (AUTO: the
                                       environment's VKT_MEMORY_PROFILE, unset: the device's) */
} vkt_context_options;

/* The instance must outlive the context. A context is used by one thread at a time.
 * Destroying a context also destroys the buffers and streams still alive in it. */
VKT_API vkt_status vkt_context_create(vkt_instance *instance, const vkt_context_options *options,
                                      vkt_context **out_context /* OUT */);
VKT_API void vkt_context_destroy(vkt_context *context);
VKT_API const char *vkt_context_errmsg(const vkt_context *context);
VKT_API vkt_status vkt_context_device_info(const vkt_context *context,
                                           vkt_device_info *out_info /* OUT */);
/* The style the context's kernels run in: VKT_KERNELS_CPU or VKT_KERNELS_GPU. */
VKT_API vkt_kernel_variant vkt_context_kernel_variant(const vkt_context *context);
/* A device's kernel profile and the variant each kernel family would run there, as text
 * (one "name  value" line each; `vkt devices` prints it), for the given style and the
 * filter in $VKT_KERNELS. Fails on a bad filter, with the message a context would give. */
VKT_API vkt_status vkt_instance_device_kernels(vkt_instance *instance, uint32_t index,
                                               vkt_kernel_variant kernels, char *out /* OUT */,
                                               size_t out_size);
/* The memory profile in effect: the one asked for (options, else VKT_MEMORY_PROFILE), AUTO
 * when none was. */
VKT_API vkt_memory_profile vkt_context_memory_profile(const vkt_context *context);
/* Its name: "auto", "staging", "unmapped", "rebar" ("?" for anything else). */
VKT_API const char *vkt_memory_profile_name(vkt_memory_profile profile);

typedef struct vkt_memory_stats {
    uint64_t device_bytes_allocated; /* sum of vkAllocateMemory sizes */
    uint64_t bytes_in_use;           /* sum of live suballocations */
    uint32_t block_count;            /* number of vkAllocateMemory blocks */
    uint32_t allocation_count;       /* number of live suballocations */
    uint32_t pipeline_count;         /* pipelines created so far */
    uint64_t device_local_bytes;     /* of device_bytes_allocated: in device-local heaps */
    uint64_t memory_limit;           /* the context's cap on device_local_bytes (0: none) */
} vkt_memory_stats;

VKT_API vkt_status vkt_context_memory_stats(const vkt_context *context,
                                            vkt_memory_stats *out_stats /* OUT */);

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
/* Kernels (fp32). Each records one or a few dispatches into a stream.            */
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

/* ------------------------------------------------------------------------------ */
/* Graphs: a static dataflow graph of tensors, built once through the functions   */
/* below, then compiled into a model for a context (forward, backward, memory      */
/* plan, one recorded step).                                                       */
/* ------------------------------------------------------------------------------ */
/*
 * Building: every function that makes a tensor takes the graph first and returns a
 * `vkt_tensor *` owned by the graph (valid until vkt_graph_destroy). Shapes are inferred
 * and checked as the graph is built. Errors are sticky, so calls can be chained and
 * checked once: a call given a NULL tensor returns NULL; a call whose shapes do not
 * agree returns NULL and records a message naming the op and both shapes; the graph
 * keeps the first error (vkt_graph_status, vkt_graph_errmsg) and no model can be made
 * from it.
 *
 * Batch: the first dimension of every input is the batch. A model may be compiled for
 * another batch size (vkt_model_options.batch): every input takes it as its first
 * dimension and every shape is inferred again; a reshape whose target has a 0
 * dimension infers that one (use 0 for the batch).
 *
 * Shapes below: B is the batch; scalars have ndim 0.
 */

typedef struct vkt_graph vkt_graph;
typedef struct vkt_tensor vkt_tensor;

typedef struct vkt_graph_options {
    uint64_t seed; /* seeds parameter initializers and dropout; 0 = a fixed default */
} vkt_graph_options;

VKT_API vkt_status vkt_graph_create(const vkt_graph_options *options,
                                    vkt_graph **out_graph /* OUT */);
/* Models made from the graph must be destroyed first. */
VKT_API void vkt_graph_destroy(vkt_graph *graph);
/* VKT_OK, or the first error met while building (VKT_ERROR_SHAPE for shapes that do
 * not agree, VKT_ERROR_INVALID_ARGUMENT for NULL or bad arguments). */
VKT_API vkt_status vkt_graph_status(const vkt_graph *graph);
/* Message of that first error ("" if none), e.g. "vkt_matmul: inner dimensions differ:
 * a [128,784] and b [512,256]". */
VKT_API const char *vkt_graph_errmsg(const vkt_graph *graph);

/* The tensor's shape as built ({0} for NULL) and its name (never NULL; ops get names
 * such as "relu#7"). */
VKT_API vkt_shape vkt_tensor_shape(const vkt_tensor *tensor);
VKT_API const char *vkt_tensor_name(const vkt_tensor *tensor);
/* Names a tensor (copied, at most 63 characters kept); returns it. */
VKT_API vkt_tensor *vkt_set_name(vkt_graph *graph, vkt_tensor *tensor, const char *name);
/* The first tensor with that name, or NULL. */
VKT_API vkt_tensor *vkt_graph_find(const vkt_graph *graph, const char *name);
/* Marks a tensor to be kept after a step so vkt_model_read can read it (the memory
 * plan does not reuse its memory); returns it. The loss, inputs and parameters are
 * always readable. */
VKT_API vkt_tensor *vkt_keep(vkt_graph *graph, vkt_tensor *tensor);

/* Model parallelism: placement. Every tensor records a pipeline stage, an index into a
 * pipeline's device list (vkt_pipeline_create), taken from the graph's current stage
 * when it is built: 0 until vkt_graph_set_stage changes it, so a graph built without
 * these calls is wholly on stage 0, as before. Ops run on their stage; leaves live where
 * they are read (an input is fed to every stage that reads it; a parameter belongs to
 * the one stage whose ops read it). Values must flow to higher stages and the loss sits
 * on the last one: vkt_pipeline_create checks it all and names what is wrong.
 * VKT_ERROR_INVALID_ARGUMENT for a stage >= VKT_MAX_STAGES or a NULL handle. */
#define VKT_MAX_STAGES 16
VKT_API vkt_status vkt_graph_set_stage(vkt_graph *graph, uint32_t stage);
VKT_API uint32_t vkt_graph_stage(const vkt_graph *graph);
/* Moves one tensor (an op) to a stage after building: automatic splits. */
VKT_API vkt_status vkt_tensor_set_stage(vkt_tensor *tensor, uint32_t stage);
VKT_API uint32_t vkt_tensor_stage(const vkt_tensor *tensor);

/* ---- leaves ---- */

/* A placeholder of fp32 data set before each step; shape->dims[0] is the batch. */
VKT_API vkt_tensor *vkt_input(vkt_graph *graph, const char *name, const vkt_shape *shape);
/* Integer class labels [B] (int32 data), for vkt_softmax_cross_entropy. */
VKT_API vkt_tensor *vkt_input_labels(vkt_graph *graph, const char *name, uint32_t batch);
/* Integer labels of any shape whose first dimension is the batch, e.g. [B,T] targets of
 * a sequence model: one label per row of the logits [B,T,C]. */
VKT_API vkt_tensor *vkt_input_labels_shape(vkt_graph *graph, const char *name,
                                           const vkt_shape *shape);

typedef enum vkt_init_kind {
    VKT_INIT_ZEROS = 0,
    VKT_INIT_CONSTANT, /* a */
    VKT_INIT_UNIFORM,  /* uniform in [a, b) */
    VKT_INIT_NORMAL,   /* mean a, standard deviation b */
    VKT_INIT_GLOROT,   /* uniform in +-sqrt(6 / (fan_in + fan_out)) (Glorot/Xavier) */
    VKT_INIT_HE,       /* normal, mean 0, standard deviation sqrt(2 / fan_in) (He/Kaiming) */
    VKT_INIT_COUNT
} vkt_init_kind;

/* fan_out is the last dimension, fan_in the product of the others (a [in,out] weight);
 * for 1-D shapes both are the length; for 4-D (a conv weight [out, in/groups, kh, kw])
 * fan_in = in/groups * kh * kw and fan_out = out * kh * kw. */
typedef struct vkt_init {
    vkt_init_kind kind;
    float a, b;
    uint64_t seed; /* 0: derived from the graph's seed and the parameter's position */
} vkt_init;

/* A trainable parameter; NULL init means zeros. Parameters have no batch dimension. */
VKT_API vkt_tensor *vkt_param(vkt_graph *graph, const char *name, const vkt_shape *shape,
                              const vkt_init *init);
/* A state: a parameter the optimizer does not train, updated by the op that owns it (batch
 * normalization's running averages). Saved in checkpoints and exported like parameters;
 * it stays per replica (replica 0's is saved) and async training with several replicas
 * refuses graphs that have one. */
VKT_API vkt_tensor *vkt_state(vkt_graph *graph, const char *name, const vkt_shape *shape,
                              const vkt_init *init);

/* ---- ops ---- */

/* [M,K] x [K,N] -> [M,N] */
VKT_API vkt_tensor *vkt_matmul(vkt_graph *graph, vkt_tensor *a, vkt_tensor *b);
/* x[B,in] w[in,out] + b[out] -> [B,out]; b may be NULL. An activation applied to the
 * result (its only use) is fused into it when the model is compiled. */
VKT_API vkt_tensor *vkt_linear(vkt_graph *graph, vkt_tensor *x, vkt_tensor *w, vkt_tensor *b);
/* Elementwise with broadcasting (NumPy rules); the result has the broadcast shape. */
VKT_API vkt_tensor *vkt_add(vkt_graph *graph, vkt_tensor *a, vkt_tensor *b);
VKT_API vkt_tensor *vkt_sub(vkt_graph *graph, vkt_tensor *a, vkt_tensor *b);
VKT_API vkt_tensor *vkt_mul(vkt_graph *graph, vkt_tensor *a, vkt_tensor *b);
/* s * x */
VKT_API vkt_tensor *vkt_scale(vkt_graph *graph, vkt_tensor *x, float s);
/* Activations, same shape as x. leaky_relu: x > 0 ? x : alpha * x. gelu: tanh form. */
VKT_API vkt_tensor *vkt_relu(vkt_graph *graph, vkt_tensor *x);
VKT_API vkt_tensor *vkt_leaky_relu(vkt_graph *graph, vkt_tensor *x, float alpha);
VKT_API vkt_tensor *vkt_gelu(vkt_graph *graph, vkt_tensor *x);
VKT_API vkt_tensor *vkt_tanh(vkt_graph *graph, vkt_tensor *x);
VKT_API vkt_tensor *vkt_sigmoid(vkt_graph *graph, vkt_tensor *x);
/* x * sigmoid(x), the SiLU (swish) of LLaMA-style feed-forward layers. */
VKT_API vkt_tensor *vkt_silu(vkt_graph *graph, vkt_tensor *x);
/* Along the last axis, same shape as x (vkt_softmax_rows is the kernel it records). */
VKT_API vkt_tensor *vkt_softmax(vkt_graph *graph, vkt_tensor *x);
VKT_API vkt_tensor *vkt_log_softmax(vkt_graph *graph, vkt_tensor *x);
/* logits[B,C], labels[B] (vkt_input_labels) -> scalar: mean over the batch of
 * -log softmax(logits)[label]. Labels must lie in [0, C). */
VKT_API vkt_tensor *vkt_softmax_cross_entropy(vkt_graph *graph, vkt_tensor *logits,
                                              vkt_tensor *labels);
/* pred, target of one shape -> scalar: mean of (pred - target)^2 over all elements. */
VKT_API vkt_tensor *vkt_mse(vkt_graph *graph, vkt_tensor *pred, vkt_tensor *target);
/* axis < 0: over all elements -> scalar; else the shape with dims[axis] removed. */
VKT_API vkt_tensor *vkt_sum(vkt_graph *graph, vkt_tensor *x, int axis);
VKT_API vkt_tensor *vkt_mean(vkt_graph *graph, vkt_tensor *x, int axis);
/* Same elements, new shape (one dimension may be 0: inferred). No copy is made. */
VKT_API vkt_tensor *vkt_reshape(vkt_graph *graph, vkt_tensor *x, const vkt_shape *shape);
/* [M,N] -> [N,M] */
VKT_API vkt_tensor *vkt_transpose(vkt_graph *graph, vkt_tensor *x);
/* Joins n tensors (n <= 32) along axis; the other dimensions must agree. */
VKT_API vkt_tensor *vkt_concat(vkt_graph *graph, vkt_tensor *const *tensors, uint32_t n,
                               uint32_t axis);
/* Splits x along axis into n parts of sizes[i] (which sum to dims[axis]); writes the n
 * parts to outs (all NULL on error). Returns outs[0]. */
VKT_API vkt_tensor *vkt_split(vkt_graph *graph, vkt_tensor *x, uint32_t axis, const uint32_t *sizes,
                              uint32_t n, vkt_tensor **outs /* OUT */);
/* Training: zeroes each element with probability p and scales the others by 1/(1-p);
 * the pattern comes from a counter-based hash of (seed, step, element), so a run is
 * reproducible. Evaluation (vkt_model_forward): the identity. 0 <= p < 1.
 * The element is its index in the global batch: in a model created with
 * options.row_offset = r, element i of a tensor laid out by batch row (n elements at the
 * model's batch B) is keyed as element r * n / B + i (modulo 2^32), and attention
 * dropout's sequence b as sequence r + b. So replicas that split a batch by rows (on any
 * number of ranks) draw exactly the masks one model on the whole batch draws. Tensors
 * not laid out by row (parameters, losses, reductions over the batch) are keyed by their
 * own indices, the same in every replica. */
VKT_API vkt_tensor *vkt_dropout(vkt_graph *graph, vkt_tensor *x, float p);

/* ---- layers: convolution, pooling, normalization, embedding, attention ----
 * Images are NCHW. Every op has a backward; a shape that breaks a device limit
 * (maxStorageBufferRange, lavapipe's loop limit for attention's sequence length) is tiled
 * where the op can (conv2d's workspace) or refused with VKT_ERROR_LIMIT and a message:
 * conv2d's when the model is created, the others when its step is first recorded (the
 * first vkt_model_forward or step; vkt_trainer_create records it). */

typedef struct vkt_conv2d_options {
    uint32_t stride_h, stride_w;     /* 0: 1 */
    uint32_t pad_h, pad_w;           /* zero padding on both sides */
    uint32_t dilation_h, dilation_w; /* 0: 1 */
    uint32_t groups;                 /* 0: 1; must divide both channel counts */
} vkt_conv2d_options;

/* x [N,C,H,W], w [OC, C/groups, KH, KW], b [OC] or NULL -> [N, OC, OH, OW] with
 * OH = (H + 2 pad_h - dilation_h (KH - 1) - 1) / stride_h + 1. NULL options: stride 1,
 * no padding. Runs as im2col + the tuned GEMM. */
VKT_API vkt_tensor *vkt_conv2d(vkt_graph *graph, vkt_tensor *x, vkt_tensor *w, vkt_tensor *b,
                               const vkt_conv2d_options *options);
/* x [N,C,H,W] -> [N,C,OH,OW], OH = (H + 2 padding - kernel) / stride + 1 (square windows;
 * padding <= kernel / 2). Max: padding never wins. Average: divides by kernel^2. */
VKT_API vkt_tensor *vkt_max_pool2d(vkt_graph *graph, vkt_tensor *x, uint32_t kernel,
                                   uint32_t stride, uint32_t padding);
VKT_API vkt_tensor *vkt_avg_pool2d(vkt_graph *graph, vkt_tensor *x, uint32_t kernel,
                                   uint32_t stride, uint32_t padding);
/* x [N,C,H,W] -> [N,C]: the mean of each channel (a reshape and vkt_mean). */
VKT_API vkt_tensor *vkt_global_avg_pool(vkt_graph *graph, vkt_tensor *x);

/* Layer normalization over the last axis of x [..., C]: (x - mean) / sqrt(var + eps) *
 * gamma + beta, gamma and beta [C] (eps 0: 1e-5). */
VKT_API vkt_tensor *vkt_layer_norm(vkt_graph *graph, vkt_tensor *x, vkt_tensor *gamma,
                                   vkt_tensor *beta, float eps);
/* RMS normalization over the last axis of x [..., C]: x / sqrt(mean(x^2) + eps) * gamma,
 * gamma [C] (no mean subtracted, no beta; eps 0: 1e-5), as LLaMA-style transformers use. */
VKT_API vkt_tensor *vkt_rms_norm(vkt_graph *graph, vkt_tensor *x, vkt_tensor *gamma, float eps);
/* Batch normalization of x [N,C] or [N,C,H,W] per channel. Training steps normalize with
 * the batch's mean and (biased) variance and update the running averages:
 * running = (1 - momentum) running + momentum * batch value (unbiased variance), as
 * PyTorch does; evaluation (vkt_model_forward, vkt_trainer_evaluate) uses the running
 * averages. gamma, beta: vkt_param [C]; running_mean, running_var: vkt_state [C], which
 * the caller should initialize to 0 and 1 (VKT_INIT_CONSTANT 1; NULL gives zeros). With
 * several sync replicas each keeps the statistics of its own rows (no cross-replica
 * batch norm); a checkpoint saves replica 0's. eps 0: 1e-5; momentum 0: 0.1. */
VKT_API vkt_tensor *vkt_batch_norm(vkt_graph *graph, vkt_tensor *x, vkt_tensor *gamma,
                                   vkt_tensor *beta, vkt_tensor *running_mean,
                                   vkt_tensor *running_var, float eps, float momentum);

/* Embedding lookup: ids [...] (a vkt_input of token ids held as floats: exact integers in
 * [0, vocab), checked by vkt_model_set_input), table [vocab, dim] -> [..., dim]. The table's
 * gradient sums the rows of repeated ids in a fixed order (deterministic). */
VKT_API vkt_tensor *vkt_embedding(vkt_graph *graph, vkt_tensor *ids, vkt_tensor *table);
/* Causal multi-head self-attention on qkv [B,T,3C] (queries, keys, values side by side,
 * head h in columns h*C/heads.. of each) -> [B,T,C]: for each head softmax(q k^T /
 * sqrt(C/heads)) with position i seeing positions <= i, dropout p on the attention weights
 * in training (0 <= p < 1), times v. Fused kernels, head size C/heads up to 128. The
 * backward reads the weights the forward saved (CPU devices: [B,heads,T,T]) or recomputes
 * them from each row's saved logsumexp (GPUs, and long sequences on CPU devices: no
 * [T,T] array, only [B,heads,T]). */
VKT_API vkt_tensor *vkt_causal_attention(vkt_graph *graph, vkt_tensor *qkv, uint32_t heads,
                                         float dropout);

/* ------------------------------------------------------------------------------ */
/* Models: a graph compiled for a context                                          */
/* ------------------------------------------------------------------------------ */
/*
 * A model owns, per category, one flat device allocation: parameters (tensors are
 * views into it; gaps between them for alignment are zero and stay zero), gradients
 * (the same layout), and an activation arena planned by liveness so values whose
 * lifetimes do not overlap share memory. A training step (copy inputs in, forward,
 * loss, backward into the gradient buffer) is recorded once into a stream on first use
 * and replayed by every later step; the gradient of a tensor used several times is the
 * sum of its uses' contributions (the first use writes, the others add, so no
 * zero-fill is needed).
 *
 * VKT_CHECK=1 in the environment (or options.check) runs every op on the CPU reference
 * too after each step, from the device's own inputs of that op, and fails the step with
 * VKT_ERROR_INTERNAL naming the first op (in execution order) whose output differs.
 * It disables memory reuse so every value can be read back.
 */

typedef struct vkt_model vkt_model;

typedef struct vkt_model_options {
    uint32_t batch;          /* 0: every input as built; else the first dimension of
                                every input becomes `batch` */
    int forward_only;        /* 1: no backward and no gradients (evaluation, inference) */
    vkt_model *share_params; /* use that model's parameter buffer (same graph and context;
                                it must outlive this model); else parameters are
                                initialized from their vkt_init */
    int no_memory_reuse;     /* 1: every value its own memory (debugging) */
    int no_fusion;           /* 1: record every op alone (debugging, benchmarks) */
    int check;               /* 1: VKT_CHECK mode (see above) */
    uint32_t row_offset;     /* the global row of this model's first batch row: dropout
                                masks (vkt_dropout, attention dropout) are keyed by the
                                global row, so replicas that split a batch draw the masks
                                one model on the whole batch would (0: rows from 0) */
} vkt_model_options;

/* Compiles `graph` for `context`; the graph must outlive the model, and the model must
 * be destroyed before its context. `loss` is the scalar to differentiate; NULL (or
 * forward_only) makes a forward-only model. Only the loss, the kept tensors and what
 * they depend on are computed (everything when both are absent). Fails with the graph's
 * status if building it failed, VKT_ERROR_SHAPE if the shapes do not agree at
 * options.batch, VKT_ERROR_INVALID_ARGUMENT if loss is not a scalar of this graph. */
VKT_API vkt_status vkt_model_create(vkt_context *context, vkt_graph *graph, vkt_tensor *loss,
                                    const vkt_model_options *options,
                                    vkt_model **out_model /* OUT */);
VKT_API void vkt_model_destroy(vkt_model *model);
VKT_API const char *vkt_model_errmsg(const vkt_model *model);
VKT_API uint32_t vkt_model_batch(const vkt_model *model);
/* A tensor's shape in this model (at its batch). */
VKT_API vkt_status vkt_model_shape(const vkt_model *model, const vkt_tensor *tensor,
                                   vkt_shape *out_shape /* OUT */);

/* Copies one batch of an input into the model: `count` must be the input's element
 * count at the model's batch. fp32 for vkt_input, int32 for vkt_input_labels (checked
 * against the classes of the cross-entropy that reads them). */
VKT_API vkt_status vkt_model_set_input(vkt_model *model, const vkt_tensor *input, const void *data,
                                       uint64_t count);

/* One training step: forward (dropout on), loss, backward into the gradient buffer.
 * Waits for the device. Advances the step counter that seeds dropout. */
VKT_API vkt_status vkt_model_forward_backward(vkt_model *model);
/* Forward only, in evaluation mode (dropout is the identity). Waits for the device. */
VKT_API vkt_status vkt_model_forward(vkt_model *model);

/* The loss of the last step or forward. */
VKT_API vkt_status vkt_model_loss(vkt_model *model, float *out_loss /* OUT */);
/* Reads a tensor after a step: the loss, inputs, parameters, kept tensors (vkt_keep);
 * any tensor with options.no_memory_reuse. `count` must be its element count. */
VKT_API vkt_status vkt_model_read(vkt_model *model, const vkt_tensor *tensor, float *out /* OUT */,
                                  uint64_t count);
/* Writes one parameter's values. */
VKT_API vkt_status vkt_model_write(vkt_model *model, const vkt_tensor *param, const float *data,
                                   uint64_t count);
/* The gradient of a parameter after vkt_model_forward_backward. */
VKT_API vkt_status vkt_model_read_grad(vkt_model *model, const vkt_tensor *param,
                                       float *out /* OUT */, uint64_t count);

/* The flat parameter and gradient buffers (same layout): for optimizers, checkpoints
 * and averaging across replicas. count must equal vkt_model_param_count. The trained
 * parameters come first; states (vkt_state) follow them, so an optimizer working on the
 * flat buffer must stop before the first state (vkt_model_param_offset of it). */
VKT_API uint64_t vkt_model_param_count(const vkt_model *model);
VKT_API vkt_status vkt_model_param_offset(const vkt_model *model, const vkt_tensor *param,
                                          uint64_t *out_offset /* OUT: elements */);
VKT_API vkt_status vkt_model_read_params(vkt_model *model, float *out /* OUT */, uint64_t count);
VKT_API vkt_status vkt_model_write_params(vkt_model *model, const float *data, uint64_t count);
VKT_API vkt_status vkt_model_read_grads(vkt_model *model, float *out /* OUT */, uint64_t count);
VKT_API vkt_status vkt_model_write_grads(vkt_model *model, const float *data, uint64_t count);

/* The step counter that seeds dropout (advanced by every vkt_model_forward_backward);
 * set it when resuming from a checkpoint. */
VKT_API uint64_t vkt_model_step_index(const vkt_model *model);
VKT_API void vkt_model_set_step_index(vkt_model *model, uint64_t step);

typedef struct vkt_model_stats {
    uint64_t param_count;               /* elements of the flat parameter buffer */
    uint64_t param_bytes, grad_bytes;   /* grad_bytes 0 for forward-only models */
    uint64_t activation_bytes;          /* the arena: the planned peak, with reuse */
    uint64_t activation_no_reuse_bytes; /* the same values without reuse */
    uint32_t values;                    /* values planned into the arena */
    uint32_t step_dispatches, step_copies, step_barriers; /* one training step */
    uint32_t forward_dispatches, forward_barriers;        /* one vkt_model_forward */
} vkt_model_stats;

/* Records the streams if that has not happened yet. */
VKT_API vkt_status vkt_model_stats_get(vkt_model *model, vkt_model_stats *out /* OUT */);

/* Device time of each op in one step (a profile): the forward steps, then (training
 * models) the backward steps, each with the op's name ("conv2d"), the tensor's name, and
 * the dispatches it records. Timed from a separate stream with a timestamp around every
 * dispatch, run `runs` times (the first as a warm-up; the rest averaged); parameters are
 * not updated, and states the forwards update (running averages) are put back. */
#define VKT_OP_NAME_SIZE 48   /* bytes of vkt_op_timing's op name, NUL included */
#define VKT_NAME_SIZE 64      /* bytes of a tensor's name as reported, NUL included */
typedef struct vkt_op_timing {
    char op[VKT_OP_NAME_SIZE]; /* "conv2d"; a fused pair as "conv2d+relu", "linear+gelu" */
    char name[VKT_NAME_SIZE];
    int backward;
    uint32_t dispatches;
    double microseconds;
} vkt_op_timing;
VKT_API vkt_status vkt_model_profile(vkt_model *model, uint32_t runs, vkt_op_timing *out /* OUT */,
                                     uint32_t capacity, uint32_t *out_count /* OUT */);

/* ------------------------------------------------------------------------------ */
/* Optimizers: one update of every parameter, recorded once and replayed each step */
/* ------------------------------------------------------------------------------ */

/* An optimizer updates one flat parameter buffer of n elements from the gradient buffer
 * of the same layout, on the device: one dispatch for all parameters (two with
 * clipping; more only past maxStorageBufferRange, one per binding-sized chunk). The
 * update is recorded into a stream once; the per-step values (learning rate after the
 * schedule, Adam's step, betas, weight decay, clipping) live in a small host-visible
 * buffer that vkt_optimizer_set_step / _set_options rewrite, so every replay of the
 * same stream uses the current values without re-recording.
 * Messages of failed calls are kept by the optimizer's context (vkt_context_errmsg).
 * Destroy an optimizer before its context. */
typedef struct vkt_optimizer vkt_optimizer;

typedef enum vkt_optimizer_kind {
    VKT_OPTIMIZER_SGD = 0, /* with optional momentum and Nesterov */
    VKT_OPTIMIZER_ADAM,    /* weight decay as L2 added to the gradient */
    VKT_OPTIMIZER_ADAMW    /* weight decay decoupled: w -= lr * weight_decay * w */
} vkt_optimizer_kind;

typedef enum vkt_schedule_kind {
    VKT_SCHEDULE_CONSTANT = 0, /* lr */
    VKT_SCHEDULE_STEP,         /* lr * gamma^floor(step / step_size) */
    /* lr * (step + 1) / warmup_steps for step < warmup_steps; then
     * min_lr + (lr - min_lr) * (1 + cos(pi * (step - warmup_steps) /
     * (total_steps - warmup_steps))) / 2; min_lr from total_steps on. */
    VKT_SCHEDULE_WARMUP_COSINE
} vkt_schedule_kind;

/* A zero-initialised struct (or NULL) is plain SGD at lr 0.01 with a constant schedule.
 * Fields marked "0 = x" take that default when 0; the others mean what 0 says. Fields
 * that do not apply to the kind must stay 0 (a set momentum for Adam is an error). */
typedef struct vkt_optimizer_options {
    vkt_optimizer_kind kind;
    float lr;             /* base learning rate, >= 0; 0 = 0.01 (SGD), 0.001 (Adam, AdamW) */
    /* SGD: buf = momentum * buf + g; step along buf, or g + momentum * buf (Nesterov).
     * The velocity buffer exists only if momentum > 0 at creation. */
    float momentum;       /* [0, 1) */
    int nesterov;         /* 1: Nesterov momentum (needs momentum > 0) */
    /* Adam, AdamW (bias-corrected moments, t = step + 1) */
    float beta1;          /* (0, 1); 0 = 0.9 */
    float beta2;          /* (0, 1); 0 = 0.999 */
    float eps;            /* > 0; 0 = 1e-8, added to sqrt(v_hat) */
    /* every kind */
    float weight_decay;   /* >= 0: L2 added to the gradient (SGD, Adam); decoupled (AdamW) */
    float clip_norm;      /* > 0: scale the gradient so its global L2 norm is at most this,
                             by min(1, clip_norm / (norm + 1e-6)); 0 = no clipping */
    float grad_scale;     /* the gradient is multiplied by this first (e.g. 1/replicas
                             when they are summed); 0 = 1 */
    /* learning-rate schedule; `step` counts updates from 0 */
    vkt_schedule_kind schedule;
    uint64_t step_size;   /* STEP: > 0 */
    float gamma;          /* STEP: > 0; 0 = 0.1 */
    uint64_t warmup_steps; /* WARMUP_COSINE: <= total_steps (0 = no warmup) */
    uint64_t total_steps; /* WARMUP_COSINE: > 0 */
    float min_lr;         /* WARMUP_COSINE: in [0, lr] */
} vkt_optimizer_options;

VKT_API const char *vkt_optimizer_kind_name(vkt_optimizer_kind kind);   /* "sgd", "adam", "adamw" */
VKT_API const char *vkt_schedule_kind_name(vkt_schedule_kind kind);     /* "constant", "step",
                                           ... */

/* The learning rate of update number `step` (0 = the first) under `options` (defaults
 * applied). NaN if the options are invalid (vkt_optimizer_create says why). */
VKT_API float vkt_schedule_lr(const vkt_optimizer_options *options, uint64_t step);

/* An optimizer of n_params parameters with its moments (zero) on the device: SGD with
 * momentum keeps n floats, Adam and AdamW 2n. Ready for step 0. */
VKT_API vkt_status vkt_optimizer_create(vkt_context *context, const vkt_optimizer_options *options,
                                        uint64_t n_params, vkt_optimizer **out_optimizer /* OUT */);
VKT_API void vkt_optimizer_destroy(vkt_optimizer *optimizer);

/* Records one update of params[0, n) from grads[0, n) (views of n_params elements that
 * do not overlap) into the stream; every submission of the stream applies it again.
 * Record it once per stream. Clipping needs clip_norm > 0 at recording (it adds the
 * norm pass). Views that start at a multiple of 4 elements take a vec4 path (about
 * twice as fast on lavapipe); SGD without momentum needs only the two to agree mod 4. */
VKT_API vkt_status vkt_optimizer_record(vkt_optimizer *optimizer, vkt_stream *stream,
                                        vkt_view params, vkt_view grads);

/* Writes the hyperparameters of update number `step` (0 = the first; the schedule's
 * step and Adam's t - 1) for the next submission. Call it while no submission that
 * runs the update is in flight (after vkt_stream_wait). */
VKT_API vkt_status vkt_optimizer_set_step(vkt_optimizer *optimizer, uint64_t step);
/* The step the hyperparameters are set for (0 after creation). */
VKT_API uint64_t vkt_optimizer_step(const vkt_optimizer *optimizer);
VKT_API uint64_t vkt_optimizer_size(const vkt_optimizer *optimizer); /* n_params */

/* Changes the options from the current step on (rewrites its hyperparameters), without
 * re-recording: lr, schedule, momentum, betas, eps, weight decay, clip_norm, grad_scale.
 * The kind cannot change; momentum cannot be turned on for an SGD optimizer created
 * without it, nor clipping on after an update was recorded without it
 * (VKT_ERROR_STATE). Same timing rule as vkt_optimizer_set_step. */
VKT_API vkt_status vkt_optimizer_set_options(vkt_optimizer *optimizer,
                                             const vkt_optimizer_options *options);
/* The options in use, defaults applied. */
VKT_API vkt_status vkt_optimizer_get_options(const vkt_optimizer *optimizer,
                                             vkt_optimizer_options *out /* OUT */);

/* The optimizer's state as one blob, for checkpoints and for moving state between
 * replicas: a small header (kind, n_params, step; host byte order) and the moments.
 * write_state checks the header against the optimizer (VKT_ERROR_FORMAT,
 * VKT_ERROR_SHAPE) and restores the step; `bytes` must equal the state size. Both wait
 * for the device. */
VKT_API uint64_t vkt_optimizer_state_size(const vkt_optimizer *optimizer);
VKT_API vkt_status vkt_optimizer_read_state(vkt_optimizer *optimizer, void *host /* OUT */,
                                            uint64_t bytes);
VKT_API vkt_status vkt_optimizer_write_state(vkt_optimizer *optimizer, const void *host,
                                             uint64_t bytes);

/* ------------------------------------------------------------------------------ */
/* Data sets and loaders (host side)                                              */
/* ------------------------------------------------------------------------------ */

/* A data set of `count` samples, each `features` floats and one int32 class label in
 * [0, classes). Held in host memory. */
typedef struct vkt_dataset vkt_dataset;

/* Copies x[count, features] and y[count] (y may be NULL: labels all 0, classes 0).
 * Labels outside [0, classes) are refused with a message naming the index. */
VKT_API vkt_status vkt_dataset_create(uint32_t count, uint32_t features, uint32_t classes,
                                      const float *x, const int32_t *y,
                                      vkt_dataset **out_dataset /* OUT */);
/* Loads an MNIST-style folder: train-images-idx3-ubyte, train-labels-idx1-ubyte,
 * t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, each plain or with ".gz" appended.
 * Pixels become floats in [0, 1]. Truncated or corrupt files: VKT_ERROR_FORMAT (or
 * VKT_ERROR_SHAPE, VKT_ERROR_IO) with a message (vkt_last_error) naming the file. */
VKT_API vkt_status vkt_dataset_load_mnist(const char *dir, vkt_dataset **out_train /* OUT */,
                                          vkt_dataset **out_test /* OUT */);
/* Loads a CSV file with a header line of column names: the column named `label_column`
 * holds integer labels >= 0 (classes: the largest + 1), every other column a numeric
 * feature, in order. Blank lines are skipped. Errors: VKT_ERROR_FORMAT naming the file,
 * the line (and column) and what was expected (a bad number, a missing label column, a
 * ragged row, an empty file); VKT_ERROR_IO when unreadable. */
VKT_API vkt_status vkt_dataset_load_csv(const char *path, const char *label_column,
                                        vkt_dataset **out_dataset /* OUT */);
/* Reads a raw binary token file: uint8 (bytes_per_token 1) or little-endian uint16 (2).
 * *out_tokens is malloc'd (release with free). An empty file or, for uint16, an odd byte
 * count: VKT_ERROR_FORMAT naming the file and the offset. */
VKT_API vkt_status vkt_dataset_load_tokens(const char *path, uint32_t bytes_per_token,
                                           uint32_t **out_tokens /* OUT */,
                                           uint64_t *out_count /* OUT */);
VKT_API void vkt_dataset_destroy(vkt_dataset *dataset);
VKT_API uint32_t vkt_dataset_count(const vkt_dataset *dataset);
VKT_API uint32_t vkt_dataset_features(const vkt_dataset *dataset);
VKT_API uint32_t vkt_dataset_classes(const vkt_dataset *dataset);
/* Row-major [count, features] and [count]; owned by the data set. */
VKT_API const float *vkt_dataset_x(const vkt_dataset *dataset);
VKT_API const int32_t *vkt_dataset_y(const vkt_dataset *dataset);

/* A character-level corpus: a text file's bytes, its vocabulary (the distinct bytes,
 * sorted: ids are stable for a given file), a training part and a validation part (the
 * last val_fraction of the text). Split 0 is training, 1 validation. */
typedef struct vkt_text vkt_text;

VKT_API vkt_status vkt_text_load(const char *path, float val_fraction,
                                 vkt_text **out_text /* OUT */);
VKT_API void vkt_text_destroy(vkt_text *text);
VKT_API uint32_t vkt_text_vocab(const vkt_text *text);
VKT_API uint64_t vkt_text_length(const vkt_text *text, int split);
/* The id of a byte (-1: not in the vocabulary) and the byte of an id. */
VKT_API int32_t vkt_text_encode(const vkt_text *text, unsigned char c);
VKT_API unsigned char vkt_text_decode(const vkt_text *text, uint32_t id);
/* `batch` windows of `context` ids at random positions of a split: ids[b,t] as floats (for
 * vkt_embedding) and targets[b,t] = the id that follows. *rng is the generator's state
 * (splitmix64): the same state gives the same batches. */
VKT_API vkt_status vkt_text_batch(const vkt_text *text, int split, uint32_t batch, uint32_t context,
                                  uint64_t *rng, float *ids /* OUT */, int32_t *targets /* OUT */);

/* Batches of a data set in a seeded random order that is new every epoch. */
typedef struct vkt_loader vkt_loader;

typedef struct vkt_loader_options {
    uint32_t batch;     /* rows per batch (required) */
    uint64_t seed;      /* permutation seed; epoch e uses a permutation of (seed, e) */
    int no_shuffle;     /* 1: samples in stored order */
    int keep_partial;   /* 1: the last batch of an epoch may be short; default: dropped */
    /* Batches prepared ahead by a background thread (the same batches in the same order
     * as without it), 0: none, each batch gathered inside vkt_loader_next. */
    uint32_t prefetch;
} vkt_loader_options;

/* The data set must outlive the loader. */
VKT_API vkt_status vkt_loader_create(const vkt_dataset *dataset, const vkt_loader_options *options,
                                     vkt_loader **out_loader /* OUT */);
VKT_API void vkt_loader_destroy(vkt_loader *loader);
/* Copies the next batch into x[batch, features] and y[batch]; *out_rows says how many
 * rows were written (the batch, or fewer for a kept partial batch). Moves to the next
 * epoch (a new permutation) when one ends. */
VKT_API vkt_status vkt_loader_next(vkt_loader *loader, float *x /* OUT */, int32_t *y /* OUT */,
                                   uint32_t *out_rows /* OUT */);
VKT_API uint32_t vkt_loader_batches_per_epoch(const vkt_loader *loader);
/* Position: the epoch and the number of batches already taken from it (delivered by
 * vkt_loader_next, not merely prepared by the prefetch thread). */
VKT_API void vkt_loader_position(const vkt_loader *loader, uint64_t *epoch, uint64_t *batch_index);
/* Seconds vkt_loader_next spent waiting for a prefetched batch not yet ready, summed. */
VKT_API double vkt_loader_wait_seconds(const vkt_loader *loader);
/* Moves to a position (e.g. restored from a checkpoint); discards prefetched batches. */
VKT_API vkt_status vkt_loader_seek(vkt_loader *loader, uint64_t epoch, uint64_t batch_index);

/* ------------------------------------------------------------------------------ */
/* World: one training job across processes and machines (MPI; docs/distributed.md) */
/* ------------------------------------------------------------------------------ */
/*
 * `mpirun -np R prog` (or `srun`) starts R processes, the ranks; rank 0 is the chief.
 * Every rank calls the collective functions (marked "collective") in the same order with
 * the same arguments. Built without MPI (VKT_MPI=OFF), or started without an MPI
 * launcher, the world is one rank and makes no MPI call. One thread at a time may use a
 * world (MPI_THREAD_SERIALIZED); the trainer uses it from its own threads during a run.
 * Every wait is a nonblocking operation polled with a short sleep, against a deadline:
 * a rank that does not take part in time gives VKT_ERROR_TIMEOUT naming the late ranks.
 */
typedef struct vkt_world vkt_world;

typedef struct vkt_world_options {
    double timeout_seconds;  /* a collective still incomplete after this: VKT_ERROR_TIMEOUT
                                naming the late ranks (0: 60) */
    uint32_t poll_max_us;    /* longest sleep between polls while waiting (0: 200) */
    int require_launcher;    /* 1: VKT_ERROR_STATE unless started by an MPI launcher */
} vkt_world_options;

/* MPI_Init_thread(MPI_THREAD_SERIALIZED) when started by an MPI launcher (Open MPI,
 * PMIx or PMI environment); a one-rank world otherwise. Call once per process, before
 * threads that use it. argc/argv may be NULL. */
VKT_API vkt_status vkt_world_init(int *argc, char ***argv, const vkt_world_options *options,
                                  vkt_world **out_world /* OUT */);
/* Collective; after every trainer using the world is destroyed. NULL: no-op. The ranks
 * wait there for each other: a rank other than the chief waits for the chief for as long
 * as the chief answers, and gives up (saying so on stderr, leaving MPI unfinalized, so
 * that the launcher ends the job) after timeout_seconds (+ 2 s) without a word from it. */
VKT_API void vkt_world_finalize(vkt_world *world);
/* For work a rank does alone while the others wait for it, typically the chief's final
 * save, evaluation and report while the others wait in vkt_world_finalize: with on = 1 a
 * thread of the world sends this rank's heartbeats (every timeout / 4 s, at most 0.5 s)
 * until vkt_world_keepalive(world, 0), vkt_world_finalize or vkt_world_abort, so that the
 * waiting ranks know it is alive however long the work takes. Make no other call on the
 * world in between (one thread at a time). VKT_OK in a one-rank world. */
VKT_API vkt_status vkt_world_keepalive(vkt_world *world, int on);
/* NULL stands for a one-rank world in these. */
VKT_API uint32_t vkt_world_rank(const vkt_world *world);
VKT_API uint32_t vkt_world_size(const vkt_world *world);
VKT_API uint32_t vkt_world_local_rank(const vkt_world *world); /* among this host's ranks */
VKT_API uint32_t vkt_world_local_size(const vkt_world *world);
VKT_API int vkt_world_is_chief(const vkt_world *world);        /* rank 0 */
VKT_API const char *vkt_world_errmsg(const vkt_world *world);
/* The time limit of every wait from now on (seconds > 0). */
VKT_API void vkt_world_set_timeout(vkt_world *world, double seconds);
/* Collective: `bytes` of data from rank 0 to every rank. */
VKT_API vkt_status vkt_world_broadcast(vkt_world *world, void *data, uint64_t bytes);
/* Collective: element-wise sum over the ranks, in place. */
VKT_API vkt_status vkt_world_sum(vkt_world *world, double *values, uint32_t n);
/* Ends every rank of the job: writes "vkt: rank R: <message>" to stderr, then MPI_Abort
 * with `code` (exit(code) in a one-rank world). For an application after an error that
 * the other ranks cannot see (they may be waiting in a collective); the library itself
 * never calls it. */
VKT_API void vkt_world_abort(vkt_world *world, int code, const char *message);
/* Benchmark (collective): `iters` in-place sums of `bytes` of floats through vktrain's
 * path (nonblocking allreduce, polled) and through a plain blocking MPI_Allreduce on the
 * same bytes, alternating; the mean seconds of each (the slowest rank's). */
VKT_API vkt_status vkt_world_bench_allreduce(vkt_world *world, uint64_t bytes, uint32_t iters,
                                             double *out_vkt_seconds /* OUT */,
                                             double *out_mpi_seconds /* OUT */);

/* ------------------------------------------------------------------------------ */
/* Trainers: model + optimizer + replicas, one call per training step             */
/* ------------------------------------------------------------------------------ */
/*
 * A trainer compiles a graph on one or more replicas (one vkt_context each, from the
 * device list), attaches the optimizer to each replica's recorded step, and runs steps
 * on global batches fed from the host. With one replica a step is one submission:
 * inputs, forward, loss, backward and the optimizer update in one command buffer.
 * It owns its contexts; the instance and graph must outlive it.
 */

typedef struct vkt_trainer vkt_trainer;

typedef enum vkt_parallel_mode {
    VKT_PARALLEL_SYNC = 0, /* averaged gradients, identical replicas */
    VKT_PARALLEL_ASYNC     /* lock-free updates of a host master copy */
} vkt_parallel_mode;

#define VKT_MAX_REPLICAS 64 /* replicas of one trainer (in one process) */

typedef struct vkt_trainer_options {
    uint32_t batch;                   /* global batch (required), split across replicas */
    vkt_optimizer_options optimizer;  /* zeroed: SGD with its default lr */
    const uint32_t *devices;          /* device index per replica; NULL: VKT_DEVICES, */
    uint32_t device_count;            /*   else device 0; at most VKT_MAX_REPLICAS */
    vkt_parallel_mode mode;
    vkt_kernel_variant kernels;
    int check;                        /* VKT_CHECK mode on every replica */
    /* Async: bound the staleness (stale-synchronous parallel). A replica waits before
     * its k-th read of the master until every replica has pushed at least k - staleness
     * updates; with staleness 0 it also waits before pushing until every replica has
     * read for the same step, so the result equals synchronous training (SGD). */
    int bounded_staleness;
    uint32_t staleness;
    /* Linear learning-rate scaling with the number of replicas N: lr grows from lr to
     * N * lr over `scale_lr_warmup` steps (0: at once). */
    int scale_lr;
    uint32_t scale_lr_warmup;
    /* Sync: after `balance_after` steps of vkt_trainer_fit (0: never), split the global
     * batch in proportion to each replica's measured speed (rows per second of device
     * time), so a mixed set of devices is not held back by the slowest. */
    uint32_t balance_after;
    /* Benchmarking: replica `slow_replica` (an index over all ranks' replicas; UINT32_MAX:
     * the last) is slowed by `slow_seconds` per step at an even share of the batch, in
     * proportion to its rows (as a slower device would be). */
    uint32_t slow_replica;
    double slow_seconds;
    /* Across processes (docs/distributed.md): NULL or a one-rank world trains in this
     * process alone. Otherwise every rank creates its trainer from the same graph and
     * options (checked: VKT_ERROR_INVALID_ARGUMENT naming the first difference), the
     * chief's initial parameters are broadcast, `batch` is the global batch split by
     * rows over every rank's replicas, and create, fit, step and restore are collective
     * (every rank calls them in the same order; a rank's failure inside a step stops
     * every rank there, the others with VKT_ERROR_REMOTE). set_optimizer and
     * write_params are local: call them alike on every rank, or the ranks drift apart
     * (check_identical finds it). Saving writes on the chief only (every rank checks its
     * own copy with the divergence guard, so all return the same status in sync mode);
     * restoring reads on the chief only and sends the bytes to the others. Without
     * `devices` and VKT_DEVICES, a rank uses device local_rank % device count. */
    vkt_world *world;
    /* Sync across ranks: gradient bytes per allreduce (0: 4 MiB). */
    uint32_t bucket_bytes;
    /* Sync across ranks: sum and send a bucket of gradients while the device computes the
     * rest of the backward (1), or after the step (-1). 0: on for GPU kernels, off on CPU
     * devices such as lavapipe, whose host threads share the cores with the device and
     * where it measured slower (docs/distributed.md). */
    int overlap;
    /* Sync across ranks: every N steps compare a hash of the parameters of every rank and
     * fail (VKT_ERROR_INTERNAL) if any differ (0: never). */
    uint32_t check_identical;
    /* Model parallelism (docs/model_parallel.md): `stages` P (0: 1 + the highest stage an
     * op of the graph is placed on, so a graph built without vkt_graph_set_stage trains as
     * before; 1: the whole graph on each replica, whatever its placement) and
     * `micro_batches` m (0: 1). With P > 1 or m > 1 the trainer runs D data-parallel
     * copies of a P-stage pipeline (vkt_pipeline's engine) on P x D contexts. The device
     * list (devices, else VKT_DEVICES) names them: copy d's stage s on entry d * P + s, so
     * it holds P x D entries (D = its length / P); a list shorter than P, such as the
     * default device 0 alone, gives D = 1 with stage s on entry s mod its length. The
     * global batch (a multiple of D x m) is split over the copies and each copy's share
     * into m micro-batches; each stage's gradients are averaged over the copies, and every
     * copy of a stage applies the same update, so the copies stay identical. fit, step,
     * read/write_params (the layout of one unpipelined model), predict and evaluate (a
     * forward model on copy 0's stage 0 context, loaded with the parameters first),
     * checkpoints (the whole model, restorable with any stage count) work. Refused at
     * creation: async mode, a world of several ranks, scale_lr, balance_after,
     * slow_seconds, gradient clipping with P > 1, and what a pipeline refuses (dropout,
     * batch normalization; vkt_pipeline_create). */
    uint32_t stages;
    uint32_t micro_batches;
    /* The divergence guard (docs/checkpoint.md, "Divergence"): a checkpoint is written
     * (vkt_trainer_save, vkt_checkpoint_save_dir) or restored only if every parameter,
     * state and optimizer moment in it is finite and the RMS of the trained parameters is
     * at most `divergence_growth` times their RMS at the start of the run (at creation,
     * at vkt_trainer_write_params, or carried by the checkpoint the run resumed from; a
     * start below 0.05 counts as 0.05). 0: 10; negative: no limit on the growth
     * (non-finite values are still refused). */
    float divergence_growth;
} vkt_trainer_options;

/* One input's data for a step or a prediction: rows of `tensor` (fp32, or int32 for
 * labels), the batch dimension first. */
typedef struct vkt_feed {
    const vkt_tensor *tensor;
    const void *data;
} vkt_feed;

/* ------------------------------------------------------------------------------ */
/* Model parallelism: a pipeline of stages (docs/model_parallel.md)               */
/* ------------------------------------------------------------------------------ */

/* A graph placed on P stages (vkt_graph_set_stage), each stage compiled on its own
 * context holding only its parameters, gradients, optimizer state and activations.
 * Values crossing stages go through host memory forward, their gradients backward. A
 * step cuts the global batch into m equal micro-batches that flow through the stages,
 * one thread per stage, in the one-forward-one-backward order (1F1B); the gradients of
 * the micro-batches are summed (weighted rows / batch) on the host, then every stage
 * applies one optimizer update: the same step as one model on the whole batch, up to
 * the order of float sums. Stages that send values recompute their forward with the
 * backward (so a stage keeps one micro-batch of activations), which is why dropout and
 * batch normalization are refused for now. Gradient clipping (a global norm) is refused
 * too. The instance and graph must outlive the pipeline. vkt_trainer runs the same engine
 * (options.stages, micro_batches) with data-parallel copies, fit and checkpoints. */
/* Automatic placement (vkt train --pipeline P): cuts the ops the loss depends on, in the
 * order they were built, into P consecutive groups and moves each op to its group's stage
 * (vkt_tensor_set_stage), so values flow to higher stages and the loss is on the last.
 * The groups balance a cost per op: its measured device time, forward plus backward
 * (vkt_model_profile of the whole training model on `context`, unfused, at `batch` rows:
 * give the micro-batch; every stage but the last also pays its ops' forward once more, as
 * it recomputes it with the backward), or the bytes of the parameters it reads where times are unknown
 * (no context, or the whole model does not fit one: a model that needs the split). The
 * split minimizes the largest group's cost, then, among splits within `tolerance` of it,
 * the bytes that cross stages. It never cuts between two readers of one parameter, or
 * across a value that is not laid out by batch rows. Refused (VKT_ERROR_INVALID_ARGUMENT,
 * vkt_last_error says why): fewer ops than stages, no valid cut, ops that cannot run in a
 * pipeline (dropout, batch normalization) when P > 1; VKT_SPLIT_COST_TIME when the times
 * cannot be measured. The graph is unchanged on failure. */
typedef enum vkt_split_cost {
    VKT_SPLIT_COST_AUTO = 0, /* TIME where it can be measured, else PARAMS */
    VKT_SPLIT_COST_TIME,     /* measured microseconds per op, forward + backward */
    VKT_SPLIT_COST_PARAMS    /* bytes of the parameters each op reads */
} vkt_split_cost;

typedef struct vkt_split_options {
    uint32_t stages;         /* P, 1..VKT_MAX_STAGES */
    vkt_split_cost cost;
    vkt_context *context;    /* where ops are timed; NULL: parameter bytes */
    uint32_t batch;          /* rows to time at; 0: as built */
    uint32_t runs;           /* timed runs, each after a warm-up; an op's cost is its
                                fastest (robust to other work on the device); 0: 3 */
    double tolerance;        /* a split this much above the best max cost may be chosen for
                                fewer crossing bytes; 0: 0.05 */
} vkt_split_options;

typedef struct vkt_split_stage {
    uint32_t ops;                    /* ops placed on it */
    char first[VKT_NAME_SIZE];       /* its first and last op (tensor names) */
    char last[VKT_NAME_SIZE];
    double cost;                     /* microseconds or bytes, as the report's cost says */
    uint64_t param_bytes;            /* parameters it holds */
    uint64_t send_bytes;             /* values it sends on, at the graph's batch */
} vkt_split_stage;

typedef struct vkt_split_report {
    uint32_t stages;
    vkt_split_cost cost;             /* what the split balanced: TIME or PARAMS */
    char note[256];                  /* why TIME was not used ("" when it was) */
    double imbalance;                /* largest stage cost / mean stage cost (1: perfect) */
    vkt_split_stage stage[VKT_MAX_STAGES];
} vkt_split_report;

VKT_API vkt_status vkt_graph_split(vkt_graph *graph, vkt_tensor *loss,
                                   const vkt_split_options *options,
                                   vkt_split_report *out_report /* OUT, may be NULL */);

typedef struct vkt_pipeline vkt_pipeline;

typedef struct vkt_pipeline_options {
    uint32_t batch;            /* global batch rows (required): a multiple of micro_batches */
    uint32_t micro_batches;    /* m; 0 = 1 */
    uint32_t stages;           /* P, 1..VKT_MAX_STAGES; 0 = 1 + the highest stage of an op */
    const uint32_t *devices;   /* device index per stage (may repeat: several contexts on
                                  one device); NULL: VKT_DEVICES (stage s on entry s mod
                                  its length), else device 0 */
    vkt_optimizer_options optimizer; /* zeroed: SGD with its default lr */
    int sequential;            /* 1: one stage at a time, micro-batch after micro-batch (no
                                  overlap): the baseline that measures the bubble */
} vkt_pipeline_options;

VKT_API vkt_status vkt_pipeline_create(vkt_instance *instance, vkt_graph *graph, vkt_tensor *loss,
                                       const vkt_pipeline_options *options,
                                       vkt_pipeline **out_pipeline /* OUT */);
VKT_API void vkt_pipeline_destroy(vkt_pipeline *pipeline);
VKT_API const char *vkt_pipeline_errmsg(const vkt_pipeline *pipeline);
VKT_API uint32_t vkt_pipeline_stages(const vkt_pipeline *pipeline);
/* One training step on a global batch: every feed holds options.batch
 * rows. *out_loss (may be NULL): the batch's mean loss before the update. */
VKT_API vkt_status vkt_pipeline_step(vkt_pipeline *pipeline, const vkt_feed *feeds,
                                     uint32_t n_feeds, float *out_loss /* OUT */);
/* One parameter's values, from the stage that holds it. */
VKT_API vkt_status vkt_pipeline_read(vkt_pipeline *pipeline, const vkt_tensor *param,
                                     float *out /* OUT */, uint64_t count);

typedef struct vkt_pipeline_stage_stats {
    uint32_t device;           /* its device index */
    uint32_t ops;              /* ops of the graph placed on it */
    uint64_t param_bytes, grad_bytes, optimizer_bytes; /* on its device */
    uint64_t activation_bytes; /* its arena: one micro-batch */
    uint64_t sent_bytes;       /* values sent forward and gradients sent back, last step */
    double busy_seconds;       /* last step: time in its forwards, backwards and update */
    uint64_t device_bytes;     /* device-local memory its context holds (all of the above,
                                  staging and block slack: vkt_memory_stats) */
} vkt_pipeline_stage_stats;
VKT_API vkt_status vkt_pipeline_stage_stats_get(vkt_pipeline *pipeline, uint32_t stage,
                                                vkt_pipeline_stage_stats *out /* OUT */);
/* The last step's wall time. */
VKT_API double vkt_pipeline_step_seconds(const vkt_pipeline *pipeline);

VKT_API vkt_status vkt_trainer_create(vkt_instance *instance, vkt_graph *graph, vkt_tensor *loss,
                                      const vkt_trainer_options *options,
                                      vkt_trainer **out_trainer /* OUT */);
VKT_API void vkt_trainer_destroy(vkt_trainer *trainer);
VKT_API const char *vkt_trainer_errmsg(const vkt_trainer *trainer);
VKT_API uint32_t vkt_trainer_replicas(const vkt_trainer *trainer);        /* this rank's */
VKT_API uint32_t vkt_trainer_world_replicas(const vkt_trainer *trainer);  /* over all ranks */

/* One synchronous step on a global batch: every feed holds options.batch rows, split
 * across the replicas by rows. *out_loss (may be NULL) is the batch's mean loss before
 * the update. In async mode use vkt_trainer_fit. */
VKT_API vkt_status vkt_trainer_step(vkt_trainer *trainer, const vkt_feed *feeds, uint32_t n_feeds,
                                    float *out_loss /* OUT */);
/* Steps taken so far (the schedule's position). */
VKT_API uint64_t vkt_trainer_step_count(const vkt_trainer *trainer);
/* Changes hyperparameters (same optimizer kind) from the next step on. */
VKT_API vkt_status vkt_trainer_set_optimizer(vkt_trainer *trainer, const vkt_optimizer_options *o);

/* Called from one training thread after each global step (sync) or each of replica 0's
 * updates (async); may call vkt_trainer_evaluate and save checkpoints. Returning nonzero
 * stops training; a save in it that the divergence guard refuses ends the fit with
 * VKT_ERROR_DIVERGED, whatever it returns. Across ranks it is called on the chief (rank
 * 0) only, and a stop (or that failure) stops every rank after the same step. */
typedef int (*vkt_progress_fn)(void *user, uint64_t step, uint64_t total, float loss);

/* Trains `steps` global steps on a classification data set: batches of options.batch
 * rows in a seeded per-epoch order (vkt_loader), `input` fed the features and `labels`
 * the labels. Sync: every step splits one global batch across the replicas. Async:
 * every replica makes `steps` updates on its share of the same batch sequence,
 * without waiting for the others (except for a staleness bound), lock-free on the
 * master; afterwards every replica holds the master. The data-set position continues
 * across calls. */
VKT_API vkt_status vkt_trainer_fit(vkt_trainer *trainer, const vkt_dataset *train,
                                   const vkt_tensor *input, const vkt_tensor *labels,
                                   uint64_t steps, uint64_t seed, vkt_progress_fn progress,
                                   void *user);

/* One replica's flat parameters (sync mode keeps them bitwise equal). */
VKT_API vkt_status vkt_trainer_read_replica_params(vkt_trainer *trainer, uint32_t replica,
                                                   float *out /* OUT */, uint64_t count);

/* Forward in evaluation mode (no dropout) over `rows` rows of the feeds, any number, in
 * chunks; writes `output` ([rows, ...] fp32) to out. */
VKT_API vkt_status vkt_trainer_predict(vkt_trainer *trainer, const vkt_feed *feeds,
                                       uint32_t n_feeds, uint32_t rows, const vkt_tensor *output,
                                       float *out /* OUT */);

typedef struct vkt_eval_result {
    float loss;      /* mean softmax cross-entropy over the set, in nats */
    float accuracy;  /* fraction of samples whose largest logit is the label */
    uint32_t count;
} vkt_eval_result;

/* Classification metrics of a data set: `input` takes its features, `logits` ([B, C])
 * is the graph's class-score tensor. */
VKT_API vkt_status vkt_trainer_evaluate(vkt_trainer *trainer, const vkt_dataset *dataset,
                                        const vkt_tensor *input, const vkt_tensor *logits,
                                        vkt_eval_result *out /* OUT */);

/* Language models on a vkt_text (ids [B,T] fed from the text, logits [B,T,vocab]): the
 * mean next-character cross-entropy, in nats per character, over up to max_windows (0:
 * all) evenly spread consecutive windows of `context` characters of a split. */
VKT_API vkt_status vkt_trainer_evaluate_text(vkt_trainer *trainer, const vkt_text *text, int split,
                                             const vkt_tensor *ids, const vkt_tensor *logits,
                                             uint32_t context, uint32_t max_windows,
                                             float *out_loss /* OUT */);
/* Writes n characters sampled one at a time after `prompt` (NULL or "": a line break) into
 * out (n + 1 bytes, NUL-terminated), each from softmax(logits / temperature) of the last
 * `context` characters (temperature 0: the most likely), with a batch-1 forward model
 * sharing the trainer's parameters. The same seed gives the same text. */
VKT_API vkt_status vkt_trainer_sample_text(vkt_trainer *trainer, const vkt_text *text,
                                           const vkt_tensor *ids, const vkt_tensor *logits,
                                           uint32_t context, const char *prompt, uint32_t n,
                                           float temperature, uint64_t seed, char *out /* OUT */);

/* Parameters (replica 0's, which all replicas equal in sync mode; states such as batch
 * norm's running averages are each replica's own). */
VKT_API uint64_t vkt_trainer_param_count(const vkt_trainer *trainer);
VKT_API vkt_status vkt_trainer_read_params(vkt_trainer *trainer, float *out /* OUT */,
                                           uint64_t count);
VKT_API vkt_status vkt_trainer_write_params(vkt_trainer *trainer, const float *data,
                                            uint64_t count);
/* One parameter's values. */
VKT_API vkt_status vkt_trainer_read(vkt_trainer *trainer, const vkt_tensor *param,
                                    float *out /* OUT */, uint64_t count);

typedef struct vkt_replica_stats {
    double step_seconds;      /* forward + backward (+ update) on the device, summed */
    double wait_seconds;      /* waiting at barriers or staleness gates, summed */
    double data_wait_seconds; /* fit: inside vkt_loader_next (waiting for the prefetch
                                 thread's batch, copying it), summed */
    uint64_t steps;
    uint32_t rows;            /* its current share of the global batch */
} vkt_replica_stats;

typedef struct vkt_trainer_stats {
    uint64_t steps;               /* global steps (sync); updates / replicas (async) */
    double step_seconds;          /* wall time inside vkt_trainer_step / _fit, summed */
    double host_cpu_seconds;      /* process CPU time inside them, summed */
    uint32_t step_dispatches;     /* per step, per replica, optimizer included */
    uint64_t activation_bytes, activation_no_reuse_bytes; /* replica 0's plan */
    uint32_t replicas;
    double average_seconds;       /* sync: host averaging of the gradients, summed */
    uint64_t bytes_staged_per_step; /* host <-> device bytes per global step, all replicas */
    /* async: staleness of each update = master updates between its read and its write */
    double staleness_mean;
    uint64_t staleness_p99, staleness_max, updates;
    /* fit: the largest replica's data_wait_seconds; over step_seconds it is the fraction
     * of step time the training loop waited for data */
    double data_wait_seconds;
    vkt_replica_stats replica[VKT_MAX_REPLICAS]; /* this rank's replicas */
    /* across processes: this rank and the world's size; replicas over all ranks */
    uint32_t rank, ranks, world_replicas;
    double comm_seconds;          /* sync: from each bucket's allreduce start to its end
                                     (it overlaps the rest of the backward), summed;
                                     async: waiting for parameter servers */
    double comm_exposed_seconds;  /* sync: of comm_seconds, the part after the device
                                     finished the step (not hidden by the backward) */
    uint64_t comm_bytes;          /* bytes this rank handed to MPI */
    /* Host round trips since creation, summed over this process's holders: its replicas'
     * contexts, or a pipelined trainer's stages x copies. Per holder and step: divide the
     * difference across a run by holders x steps (README "Data parallelism"). */
    uint32_t holders;
    uint64_t submits;             /* vkQueueSubmit calls */
    uint64_t fence_waits;         /* blocking waits for a submission (vkWaitForFences) */
    uint64_t sync_transfers;      /* synchronous staged copies, where the host cannot map
                                     device memory (each also counted as a submit and a wait) */
    double exposed_seconds;       /* inside fit and step: a device waiting for this host, from
                                     the wait that completed a holder's last submission to
                                     its next one, summed over the holders */
    uint32_t average_threads;     /* sync: host threads that sum the gradients (0: none) */
    int32_t stage_cached;         /* the replicas' host staging (N > 1) in host-cached memory
                                     (1: host reads at memory speed) or not (0); -1: none */
} vkt_trainer_stats;

VKT_API vkt_status vkt_trainer_stats_get(const vkt_trainer *trainer,
                                         vkt_trainer_stats *out /* OUT */);
/* A pipelined trainer's stage (options.stages): copy 0's (the copies are alike).
 * VKT_ERROR_INVALID_ARGUMENT for a trainer without stages or a stage out of range. */
VKT_API vkt_status vkt_trainer_stage_stats_get(vkt_trainer *trainer, uint32_t stage,
                                               vkt_pipeline_stage_stats *out /* OUT */);

/* ------------------------------------------------------------------------------ */
/* Summaries: scalars for TensorBoard and a CSV file                              */
/* ------------------------------------------------------------------------------ */
/*
 * A summary writer appends scalars (tag, step, value) to two files it creates in a log
 * folder (made if missing), named from the Unix time of creation and the host name. Both
 * are new files of this writer: when a name is taken (another run started in the same
 * second on the same folder), "-2", "-3", ... follows <time> in both names, so no two
 * writers ever share or truncate a file:
 *  - events.out.tfevents.<time>.<host>: a TensorBoard event file (`tensorboard --logdir
 *    DIR` draws one curve per tag). TFRecord framing, little endian: uint64 length,
 *    masked CRC32C of the length's 8 bytes, an Event protobuf, masked CRC32C of it
 *    (mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8). The first Event carries
 *    file_version "brain.Event:2"; each later one wall_time, step and one
 *    Summary.Value { tag, simple_value }.
 *  - scalars.<time>.<host>.csv: the header `step,wall_time,tag,value`, then one row per
 *    scalar in the order written (wall_time in Unix seconds; value as %.9g, which reads
 *    back to the same float).
 * Records are buffered: vkt_summary_flush makes them visible to readers. One thread at a
 * time per writer.
 */
typedef struct vkt_summary vkt_summary;

/* Unwritable or uncreatable folder: VKT_ERROR_IO, with a message (vkt_last_error)
 * naming the path and the system's reason. */
VKT_API vkt_status vkt_summary_create(const char *logdir, vkt_summary **out_writer /* OUT */);
/* A tag is 1 to VKT_MAX_TAG_BYTES bytes without commas, quotes or line breaks
 * ("train/loss"). */
#define VKT_MAX_TAG_BYTES 256
VKT_API vkt_status vkt_summary_scalar(vkt_summary *writer, const char *tag, uint64_t step,
                                      float value);
VKT_API vkt_status vkt_summary_flush(vkt_summary *writer);
/* Closes the files (buffered records are written; use flush to see write errors). */
VKT_API void vkt_summary_destroy(vkt_summary *writer);
VKT_API const char *vkt_summary_errmsg(const vkt_summary *writer);
/* Paths of the two files. */
VKT_API const char *vkt_summary_event_path(const vkt_summary *writer);
VKT_API const char *vkt_summary_csv_path(const vkt_summary *writer);

/* ------------------------------------------------------------------------------ */
/* Checkpoints (docs/checkpoint.md)                                               */
/* ------------------------------------------------------------------------------ */
/*
 * A checkpoint is one versioned little-endian file with a CRC32 of its payload: the
 * parameters (each tensor's name, shape and values), the optimizer state (moments and
 * step) of replica 0, the step count (the schedule's position), the dropout step index
 * and the data-set position (loader epoch, batch index, seed). Saving reads replica 0,
 * the chief (in async mode during a run: the master parameters); it may be called from
 * the progress callback of vkt_trainer_fit. Restoring writes every replica, whatever the
 * number of replicas the file was saved with: the same parameters everywhere and replica
 * 0's optimizer state copied to each. The data position is resumed by the next
 * vkt_trainer_fit with the same seed and global batch (otherwise the order starts anew).
 */

/* Writes a checkpoint atomically (temporary file in the same folder, fsync, rename, fsync
 * of the folder): a crash at any moment leaves the old file or the new one. A checkpoint
 * is a regular file only: a path naming a device, a pipe or a folder is VKT_ERROR_IO
 * naming it, and nothing is replaced (a symbolic link keeps pointing where it did). A
 * state the divergence guard refuses (vkt_trainer_options.divergence_growth) is not
 * written: VKT_ERROR_DIVERGED, "training diverged by step N: <what was found>; not saved
 * ..."; refused inside vkt_trainer_fit's progress callback, it also ends that fit with
 * VKT_ERROR_DIVERGED (on every rank). */
VKT_API vkt_status vkt_trainer_save(vkt_trainer *trainer, const char *path);
/* Restores a checkpoint. A corrupt, truncated, empty or foreign file, or one of another
 * version: VKT_ERROR_FORMAT with "checkpoint '<path>' is corrupt: <why>" (why such as
 * "checksum mismatch ..."). Another model (a parameter missing or of another shape) or
 * another optimizer kind: VKT_ERROR_SHAPE naming the tensor. A diverged one (the guard,
 * measured against the start the file carries, or for older files the trainer's own):
 * VKT_ERROR_DIVERGED, "checkpoint '<path>' (step N) holds a diverged model: ...". On
 * failure the trainer is unchanged. */
VKT_API vkt_status vkt_trainer_restore(vkt_trainer *trainer, const char *path);
/* The step a checkpoint saved now records (inside a progress callback: that step). */
VKT_API uint64_t vkt_trainer_checkpoint_step(const vkt_trainer *trainer);
/* The divergence guard (vkt_trainer_options.divergence_growth) on the trainer's state
 * now, as a save would check it, writing nothing: VKT_OK, or VKT_ERROR_DIVERGED with
 * "training diverged by step N: <what was found>" (a non-finite parameter, state or
 * optimizer moment, or the parameters' RMS, its start and the limit). For runs that save
 * no checkpoint (vkt train without --checkpoint-dir calls it at the end). Across ranks
 * every rank checks its own copy: identical in sync mode, so the same status. */
VKT_API vkt_status vkt_trainer_check_divergence(vkt_trainer *trainer);

/* Saves `dir`/ckpt-<step>.vkt (creating dir), then keeps the newest `keep` checkpoints
 * of the folder that verify (parse with their checksums; 0: keeps all), the one just
 * saved always among them, and deletes older ones and temporary files of interrupted
 * saves. A corrupt checkpoint among the newest is never counted nor deleted: it is
 * renamed ckpt-<step>.vkt.corrupt ("moved aside"). Verification results are cached in
 * the process by path, size and modification time, so each file is read once.
 * The folder's lock (vkt_checkpoint_dir_lock) is taken for the call unless this process
 * holds it; held by another process: VKT_ERROR_STATE naming the folder and the holder,
 * and nothing is written. Across ranks (vkt_world) only the chief touches the folder. A
 * state the divergence guard refuses: VKT_ERROR_DIVERGED, nothing written or deleted,
 * and the message names the newest checkpoint of the folder (from before) to go back to. */
VKT_API vkt_status vkt_checkpoint_save_dir(vkt_trainer *trainer, const char *dir, uint32_t keep);
/* The same, and describes what retention found, one message per line, in `notes` (may
 * be NULL; "" if nothing): each corrupt file moved aside ("checkpoint '<path>' is
 * corrupt: <why> (moved aside to '<path>.corrupt')"), each unreadable one left in place.
 * Messages go in whole or not at all: those that do not fit notes_size are counted in a
 * last line "... and <n> more like these" (so a small buffer never cuts a sentence). */
VKT_API vkt_status vkt_checkpoint_save_dir_v2(vkt_trainer *trainer, const char *dir, uint32_t keep,
                                              char *notes /* OUT */, size_t notes_size);
/* Restores the newest valid checkpoint of `dir`. Corrupt newer files are skipped and
 * described, one message per line, in `notes` (may be NULL; whole messages, the rest
 * counted, as by vkt_checkpoint_save_dir_v2); once an older valid one is
 * found they are moved aside as by vkt_checkpoint_save_dir, and each line ends with
 * "(moved aside to '<path>.corrupt')". No checkpoint (or no folder): VKT_OK with
 * *out_found = 0. Only corrupt ones: VKT_ERROR_FORMAT, and the files stay. Diverged
 * ones (as vkt_trainer_restore finds them) are gone back past the same way, moved aside as
 * ckpt-<step>.vkt.diverged ("checkpoint '<path>' (step N) holds a diverged model: ...
 * (moved aside to '...')"); with none sound: VKT_ERROR_DIVERGED ("no checkpoint in
 * '<dir>' is from before training diverged ..."), and the files stay. A checkpoint of
 * another model: VKT_ERROR_SHAPE (no fallback to older files). The folder locked by
 * another process: VKT_ERROR_STATE, as for saving. */
VKT_API vkt_status vkt_checkpoint_restore_latest(vkt_trainer *trainer, const char *dir,
                                                 int *out_found /* OUT */,
                                                 uint64_t *out_step /* OUT */,
                                                 char *notes /* OUT */, size_t notes_size);
/* One run per checkpoint folder. Two runs saving into one folder would delete each
 * other's checkpoints, and one would resume from the other's. A lock is an OS advisory
 * lock on the hidden file `dir`/.vkt.lock (created with `dir` if missing; it holds the
 * holder's "pid <n> on <host>" and stays in the folder), held until
 * vkt_checkpoint_dir_unlock or the end of the process, however it ends: a killed run
 * leaves no lock behind. Take it before the first restore and keep it for the whole run
 * (vkt train does); save_dir and restore_latest then use the folder freely in this
 * process and refuse it to others. Held by another process: VKT_ERROR_STATE with
 * "checkpoint folder '<dir>' is in use by another run (pid <n> on <host>): ..." (the
 * holder is named once it has written its note); already locked by this process:
 * VKT_ERROR_STATE; the folder cannot be created or locked: VKT_ERROR_IO. Messages:
 * vkt_last_error. On failure *out_lock is NULL. Across ranks only the chief (rank 0)
 * touches the folder: lock it there alone. */
typedef struct vkt_checkpoint_lock vkt_checkpoint_lock;
VKT_API vkt_status vkt_checkpoint_dir_lock(const char *dir,
                                           vkt_checkpoint_lock **out_lock /* OUT */);
/* Releases the lock; NULL is harmless. */
VKT_API void vkt_checkpoint_dir_unlock(vkt_checkpoint_lock *lock);

/* Writes the parameters of the newest valid checkpoint of `dir` as a safetensors file
 * (8-byte little-endian header length, JSON header: dtype F32, shape, data_offsets;
 * little-endian data), by vkt_file_write's rule. An out_path that is a file of the folder
 * (a checkpoint, a corrupt one moved aside, its lock), a name in it that would be taken for
 * a checkpoint (ckpt-...), or any other checkpoint is VKT_ERROR_INVALID_ARGUMENT, naming
 * it, with nothing written. *out_step (may be NULL): its step. Messages: vkt_last_error. */
VKT_API vkt_status vkt_checkpoint_export_safetensors(const char *dir, const char *out_path,
                                                     uint64_t *out_step /* OUT */);
/* The same, and describes each corrupt newer checkpoint it skipped, one message per line,
 * in `notes` (may be NULL; "" if none), as vkt_checkpoint_restore_latest does; the files
 * stay where they are. */
VKT_API vkt_status vkt_checkpoint_export_safetensors_v2(const char *dir, const char *out_path,
                                                        uint64_t *out_step /* OUT */,
                                                        char *notes /* OUT */, size_t notes_size);

/* Writes `size` bytes of `data` to `path` by the rule every file vktrain writes for the
 * user follows (README, "Outputs never clobber"): a new name or a regular file is written
 * to a temporary file in the same folder (a short name, whatever the final name's
 * length), flushed and renamed over it, so a crash leaves the old or the new file whole (a
 * symbolic link keeps pointing where it did: the file it names is replaced); a character
 * device such as /dev/null or /dev/full, or a pipe, is written in place, never replaced.
 * Refused with VKT_ERROR_INVALID_ARGUMENT, naming the file, and nothing written: `path`
 * being the same file as one of the n_inputs paths of `inputs` (may be NULL; compared by
 * file identity, so links, hard links and other spellings count), an existing vktrain
 * checkpoint, a folder, a block device or a socket. A failed write (a full disk,
 * /dev/full) is VKT_ERROR_IO. Messages: vkt_last_error. */
VKT_API vkt_status vkt_file_write(const char *path, const void *data, size_t size,
                                  const char *const *inputs, size_t n_inputs);

/* ------------------------------------------------------------------------------ */
/* Interruption: Ctrl-C and termination requests                                  */
/* ------------------------------------------------------------------------------ */
/*
 * A training program stopped by Ctrl-C (SIGINT), by SIGTERM (kill, a job scheduler, a
 * container stop) or by SIGHUP (its terminal or ssh session closed) dies at once and
 * loses the work since its last checkpoint. With
 * vkt_interrupt_install the first such request only marks the process: the program sees
 * it with vkt_interrupted() between steps (e.g. in the progress callback of
 * vkt_trainer_fit, returning nonzero to stop after the current step), saves a
 * checkpoint and exits, conventionally with status 128 + the signal number (130 for
 * SIGINT, 143 for SIGTERM, 129 for SIGHUP). A second request ends the process at once,
 * as the signal would have without the handlers (status 128 + n), so a stuck program can
 * still be stopped. The handlers are process-wide and do nothing else (async-signal-safe); a
 * signal ignored when vkt_interrupt_install is called (a background job of a script)
 * stays ignored (nohup makes SIGHUP so). POSIX: SIGINT, SIGTERM and SIGHUP; Win32
 * (SetConsoleCtrlHandler): Ctrl-C as SIGINT, closing the console as SIGHUP (1: Win32's
 * <signal.h> has no SIGHUP), Ctrl-Break, logoff and shutdown as SIGTERM; for the last
 * three (close, logoff, shutdown) Windows ends the process a few seconds later whatever
 * the program does (5 s for a closed console). The library never installs
 * them by itself; `vkt train` does. Across MPI ranks the launcher forwards the signal
 * to every rank: decide on the chief (fit's callback runs there; its stop reaches every
 * rank at the same step), and let the others learn it from the chief (e.g.
 * vkt_world_broadcast of the signal number after fit returns).
 */
/* Installs the handlers (a second call does nothing). VKT_ERROR_INTERNAL if the system
 * refuses (message: vkt_last_error). */
VKT_API vkt_status vkt_interrupt_install(void);
/* The signal number of the first request (SIGINT, SIGTERM, SIGHUP from <signal.h>); 0 if
 * none has come. Safe from any thread. */
VKT_API int vkt_interrupted(void);
/* Restores the handlers found by vkt_interrupt_install and forgets a request. */
VKT_API void vkt_interrupt_uninstall(void);

/* ------------------------------------------------------------------------------ */
/* Importing weights: safetensors files by name (docs/import.md)                  */
/* ------------------------------------------------------------------------------ */
/*
 * vkt_trainer_import_safetensors sets a trainer's parameters (and states) from a
 * safetensors file, such as PyTorch's safetensors.torch.save_file or vkt export writes:
 * tensors of dtype F32, F16, BF16 or F64 (converted to fp32), each assigned to the
 * parameter of the same name or to the one a name map gives it. A name map is text, one
 * line each (blank lines and words from '#' on are ignored; names have no spaces):
 *
 *   PARAM TENSOR              parameter PARAM gets the file's tensor TENSOR
 *   PARAM TENSOR transpose    ... transposed: a 2-D [a,b] tensor for a [b,a] parameter.
 *                             PyTorch's nn.Linear keeps its weight as [out, in], vkt_linear
 *                             takes [in, out]: map every Linear weight with transpose
 *   PARAM -                   PARAM keeps the values it has (a new head, say)
 *   - TENSOR                  the file's TENSOR is left unused
 *   - *                       every tensor no parameter takes is left unused
 *
 * The whole file is checked before anything changes (on failure the trainer is
 * unchanged): its format (a truncated file, a header length past the end, JSON that is
 * not the format's, an unknown dtype, offsets that overlap, leave holes or pass the end,
 * a size that does not match dtype and shape, a name twice: VKT_ERROR_FORMAT naming the
 * header byte or the tensor), and its match with the model: a parameter without a tensor,
 * a tensor of another shape, a tensor no parameter takes and the map does not leave
 * unused (VKT_ERROR_SHAPE), a dtype that cannot be loaded, a NaN or an infinity
 * (VKT_ERROR_FORMAT), a map line that names no parameter of the model or is malformed
 * (VKT_ERROR_INVALID_ARGUMENT), each named, as many as the message holds. A file that
 * cannot be read: VKT_ERROR_IO. The values become the divergence guard's new start (as
 * with vkt_trainer_write_params); the optimizer state and step are unchanged. Across
 * ranks it is collective: the chief reads the file and every rank gets its values.
 */
typedef struct vkt_import_options {
    const char *map;       /* a name map's text; NULL or "": every parameter by its own name */
} vkt_import_options;

typedef struct vkt_import_report {
    uint32_t loaded;       /* parameters given a tensor's values */
    uint32_t transposed;   /*   of which transposed */
    uint32_t kept;         /* parameters the map kept ("PARAM -") */
    uint32_t ignored;      /* tensors of the file the map left unused */
} vkt_import_report;

/* options may be NULL; out_report (may be NULL) is zero on failure. Messages:
 * vkt_trainer_errmsg and vkt_last_error. */
VKT_API vkt_status vkt_trainer_import_safetensors(vkt_trainer *trainer, const char *path,
                                                  const vkt_import_options *options,
                                                  vkt_import_report *out_report /* OUT */);

#ifdef __cplusplus
}
#endif

#endif /* VKT_H */
