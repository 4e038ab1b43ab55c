/*
 * vkt/base.h - the base of vktrain's public contract (include/vkt.h includes it and
 * the four other parts): the export macro, the version, status codes and messages, the
 * element types, the instance and its devices, and contexts (one logical device each).
 * Readable alone; every other part includes it.
 *
 * Conventions (read once, they hold everywhere):
 *  - Handles are opaque: `vkt_instance`, `vkt_context`, `vkt_buffer`, `vkt_stream`,
 *    `vkt_graph`, `vkt_model`, `vkt_trainer`, ...
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
#ifndef VKT_BASE_H
#define VKT_BASE_H

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
/* The type named `name` ("fp32", "fp16", "bf16", or safetensors' "F32", "F16", "BF16")
 * into *out; VKT_ERROR_INVALID_ARGUMENT naming it otherwise (vkt_last_error). */
VKT_API vkt_status vkt_dtype_from_name(const char *name, vkt_dtype *out /* OUT */);
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
     * environment variable VKT_VALIDATION=1. 2 (or VKT_VALIDATION=sync or 2): its
     * synchronization validation too (hazards between commands no barrier orders). Fails
     * with VKT_ERROR_VULKAN if the layer is not installed, and with
     * VKT_ERROR_INVALID_ARGUMENT if VKT_VALIDATION is not 0, 1, 2, sync or empty. */
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
    /* What the ways of placing replicas and stages need (README "Data parallelism"): */
    uint32_t compute_queues;  /* queues of the family a context takes (the compute-only one
                                 where it exists): replicas sharing the device
                                 (VKT_SHARE_DEVICE) run side by side on up to this many,
                                 beyond it in turns */
    int timeline_semaphores;  /* timelineSemaphore (Vulkan 1.2): the device reducer, the
                                 async master on the device, the pipeline's device edges */
    int host_import;          /* VK_EXT_external_memory_host: VKT_HOST_IMPORT, and
                                 VKT_PIPE_EDGES=import */
    uint32_t group;           /* its device group (vkEnumeratePhysicalDeviceGroups order) */
    uint32_t group_size;      /* devices the driver links in that group: 1 alone; 0 if the
                                 groups could not be listed */
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

/* A training precision (vkt_trainer_options.precision, vkt train --precision): a fixed
 * vkt_dtype for the matrix products (README, "Mixed precision"), or AUTO, the fastest the
 * device supports. Zero is fp32. */
typedef enum vkt_precision {
    VKT_PRECISION_FP32 = 0, /* = VKT_DTYPE_FP32 */
    VKT_PRECISION_FP16,     /* = VKT_DTYPE_FP16 */
    VKT_PRECISION_BF16,     /* = VKT_DTYPE_BF16 */
    VKT_PRECISION_AUTO,
    VKT_PRECISION_COUNT
} vkt_precision;

/* Whether a pipeline stage keeps its micro-batches' activations between forward and
 * backward (one arena per micro-batch in flight) or recomputes its forward in the backward
 * (one arena; about 1.3x the compute): vkt_trainer_options and vkt_pipeline_options,
 * docs/model_parallel.md, "Keeping activations". AUTO keeps where the arenas fit the
 * device's free memory, ALWAYS recomputes, NEVER keeps (creation fails with
 * VKT_ERROR_OUT_OF_MEMORY where they cannot be allocated). */
typedef enum vkt_recompute {
    VKT_RECOMPUTE_AUTO = 0,
    VKT_RECOMPUTE_ALWAYS,
    VKT_RECOMPUTE_NEVER
} vkt_recompute;

/* "fp32", "fp16", "bf16", "auto"; "?" for anything else. */
VKT_API const char *vkt_precision_name(vkt_precision precision);
/* The precision named `name` into *out; VKT_ERROR_INVALID_ARGUMENT naming it otherwise. */
VKT_API vkt_status vkt_precision_from_name(const char *name, vkt_precision *out /* OUT */);
/* The element type `precision` trains the matrix products in on `context`, into *out, and
 * a sentence saying why into `why` (may be NULL). AUTO: bf16 where the context's bf16 GEMM
 * runs on cooperative matrices, else fp16 where its fp16 GEMM does, else fp32 (a 16-bit
 * product elsewhere is fp32 arithmetic plus casts: no faster). fp16 or bf16 on a device
 * that runs no such product: VKT_ERROR_NO_DEVICE naming what it lacks. */
VKT_API vkt_status vkt_context_precision(vkt_context *context, vkt_precision precision,
                                         vkt_dtype *out /* OUT */, char *why /* OUT */,
                                         size_t why_size);

#ifdef __cplusplus
}
#endif

#endif /* VKT_BASE_H */
