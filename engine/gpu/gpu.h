/*
 * gpu.h - the internal Vulkan layer: instance, contexts (one logical device + compute
 * queue each), suballocated memory, buffers, streams with automatic barriers, lazily
 * created and cached pipelines. Knows nothing of graphs, ops or training.
 */
#ifndef VKT_GPU_H
#define VKT_GPU_H

#include <volk.h>

#include <stdarg.h>
#include <stdatomic.h>

#include "vkt.h"
#include "../core/error.h"
#include "../platform/platform.h"

/* ---- errors (err_fail and VKT_ERRMSG_SIZE come from core/error.h) ------------ */
const char *gpu_result_name(VkResult result);
/* Maps a VkResult to a status: OOM results to VKT_ERROR_OUT_OF_MEMORY, DEVICE_LOST... */
vkt_status gpu_status_of(VkResult result);

/* Reports a failed Vulkan call on a context: "vkQueueSubmit failed: VK_ERROR_DEVICE_LOST". */
#define GPU_CHECK(ctx, call)                                                          \
    do {                                                                              \
        VkResult gpu_r_ = (call);                                                     \
        if (gpu_r_ != VK_SUCCESS)                                                     \
            return err_fail((ctx)->errmsg, gpu_status_of(gpu_r_), "%s failed: %s",    \
                            gpu_call_name_(#call), gpu_result_name(gpu_r_));          \
    } while (0)
/* "vkCreateBuffer(dev, ...)" -> "vkCreateBuffer" (static buffer per thread). */
const char *gpu_call_name_(const char *expr);

/* Fault injection for tests of error paths: when the environment variable
 * VKT_FAULT_INJECT names `call` (e.g. "vkQueueSubmit", "vkAllocateMemory"), returns the
 * failure that call would report (VK_ERROR_DEVICE_LOST for submits and waits,
 * VK_ERROR_OUT_OF_DEVICE_MEMORY for allocations, VK_ERROR_INVALID_EXTERNAL_HANDLE for
 * vkGetMemoryHostPointerPropertiesEXT: a host pointer the device cannot import); else
 * VK_SUCCESS. "call:N" lets the
 * first N such calls of the process through and fails the later ones. */
VkResult gpu_fault(const char *call);

/* Internal invariant: a bug, not a user error. Reports file and line, returns
 * VKT_ERROR_INTERNAL from the enclosing function. */
#define VKT_ASSERT(ctx_errmsg, cond)                                                  \
    do {                                                                              \
        if (!(cond))                                                                  \
            return err_fail((ctx_errmsg), VKT_ERROR_INTERNAL,                         \
                            "internal error at %s:%d: assertion '%s' failed", __FILE__, \
                            __LINE__, #cond);                                         \
    } while (0)

/* ---- instance ---------------------------------------------------------------- */

struct vkt_instance {
    VkInstance instance;
    VkDebugUtilsMessengerEXT messenger;
    uint32_t device_count;
    VkPhysicalDevice *devices;
    vkt_device_info *infos;
    int validation, quiet; /* validation: 0 off, 1 on, 2 with synchronization validation */
    atomic_uint_fast64_t validation_count;
    char errmsg[VKT_ERRMSG_SIZE];
};

/* Fills infos[i] from devices[i]'s properties, its group and the group's size among them
 * (vkEnumeratePhysicalDeviceGroups; group_size stays 0 where the groups cannot be listed). */
void gpu_describe_devices(VkInstance instance, const VkPhysicalDevice *devices, uint32_t n,
                          vkt_device_info *infos);
/* The queue family a context takes (context.c): compute-only where one exists, else the
 * first with compute; 0 if none has compute. `count`: its queues. */
int gpu_pick_queue_family(VkPhysicalDevice phys, uint32_t *family, uint32_t *count);

/* ---- portability (portability.c): what to enable, which kernel paths run ------- */

/* The instance extensions and flags to create with: VK_EXT_debug_utils with validation,
 * VK_EXT_validation_features too with synchronization validation (validation 2; the
 * layer brings it, the caller checked), VK_KHR_portability_enumeration + ENUMERATE_PORTABILITY when the loader lists it (so
 * MoltenVK's devices are enumerated). Pure: `available` is the loader's list. */
typedef struct gpu_instance_plan {
    const char *extensions[3];
    uint32_t extension_count;
    VkInstanceCreateFlags flags;
    int portability_enumeration;
} gpu_instance_plan;
void gpu_plan_instance(const char *const *available, uint32_t n, int validation,
                       gpu_instance_plan *out);

/* VK_KHR_portability_subset lives in vulkan_beta.h (VK_ENABLE_BETA_EXTENSIONS, which
 * would change volk's tables for the whole build): its name and features struct, with
 * the layout of the registry's VkPhysicalDevicePortabilitySubsetFeaturesKHR. */
#define GPU_PORTABILITY_SUBSET_NAME "VK_KHR_portability_subset"
/* VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PORTABILITY_SUBSET_FEATURES_KHR (beta-only too) */
#define GPU_PORTABILITY_SUBSET_FEATURES_STYPE ((VkStructureType)1000163000)
typedef struct gpu_portability_subset_features {
    VkStructureType sType;
    void *pNext;
    VkBool32 constantAlphaColorBlendFactors, events, imageViewFormatReinterpretation,
        imageViewFormatSwizzle, imageView2DOn3DImage, multisampleArrayImage,
        mutableComparisonSamplers, pointPolygons, samplerMipLodBias, separateStencilMaskRef,
        shaderSampleRateInterpolationFunctions, tessellationIsolines, tessellationPointMode,
        triangleFans, vertexAttributeAccessBeyondStride;
} gpu_portability_subset_features;

/* ---- VK_KHR_cooperative_matrix and VK_KHR_shader_bfloat16 ------------------------------
 * Debian 12's headers (1.3.239) predate both: the few structures and values vktrain uses,
 * with the registry's layouts (enums as uint32_t, as C stores them), under names of its
 * own, so any header version builds (docs/toolchain.md). */
#define GPU_KHR_COOPERATIVE_MATRIX_NAME "VK_KHR_cooperative_matrix"
#define GPU_KHR_SHADER_BFLOAT16_NAME "VK_KHR_shader_bfloat16"
#define GPU_COOPERATIVE_MATRIX_FEATURES_STYPE ((VkStructureType)1000506000)
#define GPU_COOPERATIVE_MATRIX_PROPERTIES_STYPE ((VkStructureType)1000506001)
#define GPU_SHADER_BFLOAT16_FEATURES_STYPE ((VkStructureType)1000141000)
/* VkComponentTypeKHR values */
#define GPU_COMPONENT_F16 0u
#define GPU_COMPONENT_F32 1u
#define GPU_COMPONENT_BF16 1000141000u
#define GPU_SCOPE_SUBGROUP 3u /* VkScopeKHR */
typedef struct gpu_cooperative_matrix_properties { /* VkCooperativeMatrixPropertiesKHR */
    VkStructureType sType;
    void *pNext;
    uint32_t MSize, NSize, KSize;
    uint32_t AType, BType, CType, ResultType; /* VkComponentTypeKHR */
    VkBool32 saturatingAccumulation;
    uint32_t scope;                           /* VkScopeKHR */
} gpu_cooperative_matrix_properties;
typedef struct gpu_cooperative_matrix_features { /* VkPhysicalDeviceCooperativeMatrixFeaturesKHR */
    VkStructureType sType;
    void *pNext;
    VkBool32 cooperativeMatrix, cooperativeMatrixRobustBufferAccess;
} gpu_cooperative_matrix_features;
typedef struct gpu_bfloat16_features { /* VkPhysicalDeviceShaderBfloat16FeaturesKHR */
    VkStructureType sType;
    void *pNext;
    VkBool32 shaderBFloat16Type, shaderBFloat16DotProduct, shaderBFloat16CooperativeMatrix;
} gpu_bfloat16_features;
typedef VkResult(VKAPI_PTR *gpu_pfn_cooperative_matrix_properties)(
    VkPhysicalDevice, uint32_t *, gpu_cooperative_matrix_properties *);

/* One cooperative-matrix shape of a device, subgroup scope: A [m, k] x B [k, n] + C [m, n]
 * -> R [m, n], component types as VkComponentTypeKHR values. */
typedef struct gpu_mat_shape {
    uint32_t m, n, k;
    uint32_t a, b, c, r;
} gpu_mat_shape;
#define GPU_MAX_MAT_SHAPES 16

/* What a device offers that the decision needs: filled from Vulkan by
 * gpu_query_device_caps, or by hand in a test (then `name` and `extensions` may point
 * anywhere; the _buf fields are the query's storage). */
typedef struct gpu_device_caps {
    const char *name;
    uint32_t api_version;
    const char *const *extensions; /* device extension names */
    uint32_t extension_count;
    int compute_queue;                            /* a queue family with compute */
    uint32_t subgroup_size, subgroup_stages;      /* VkPhysicalDeviceSubgroupProperties */
    uint32_t subgroup_operations;
    int storage_texel_r32, storage_texel_rgba32;  /* STORAGE_TEXEL_BUFFER in bufferFeatures */
    int uniform_texel_r32, uniform_texel_rgba32;  /* UNIFORM_TEXEL_BUFFER in bufferFeatures */
    int portability_events; /* the subset's `events` feature (read when the subset is listed) */
    /* for the kernel profile (profile.c) */
    vkt_device_type type;
    uint32_t shared_memory, max_invocations; /* per workgroup */
    uint32_t compute_units;         /* as a vendor extension reports them; 0: none does */
    const char *compute_units_from; /* that extension */
    int storage16;                  /* storageBuffer16BitAccess (Vulkan 1.1) */
    int float16;                    /* shaderFloat16 (Vulkan 1.2) */
    int bfloat16;                   /* VK_KHR_shader_bfloat16: its type and cooperative
                                       matrices of it */
    int cooperative_matrix;         /* VK_KHR_cooperative_matrix with its feature and the
                                       Vulkan memory model (Vulkan 1.2) */
    uint32_t mat_count;             /* its shapes of subgroup scope */
    gpu_mat_shape mats[GPU_MAX_MAT_SHAPES];
    int host_visible_device_local;  /* a device-local + host-visible type on a big heap */
    int timeline;                   /* timelineSemaphore (Vulkan 1.2 core) */
    uint32_t host_import;           /* VK_EXT_external_memory_host: its pointer alignment
                                       (minImportedHostPointerAlignment); 0: not offered */
    int llvmpipe;                   /* Mesa's CPU driver (its shader loop limit) */
    char name_buf[VK_MAX_PHYSICAL_DEVICE_NAME_SIZE];
    const char *extensions_buf[1];
} gpu_device_caps;

/* The decision for one device: extensions to enable and which kernel paths run. */
typedef struct gpu_device_plan {
    const char *extensions[4];
    uint32_t extension_count;
    /* features enabled at creation (each where the device has it) */
    int storage16, float16, memory_model, cooperative_matrix, bfloat16;
    int portability_subset; /* VK_KHR_portability_subset listed: enabled, features chained */
    int events;             /* VkEvent usable (marks); else marks wait for the fence */
    int storage_texel;      /* R32F and RGBA32F storage texel buffers (spec: mandatory) */
    int subgroup_shuffle;   /* basic + shuffle subgroup operations in compute shaders */
    int timeline;           /* timelineSemaphore (1.2) enabled: queues of one VkDevice
                               ordered without the host (sync.c) */
    uint32_t host_import;   /* VK_EXT_external_memory_host enabled: the alignment; 0: off */
} gpu_device_plan;

/* Pure. Refuses (VKT_ERROR_NO_DEVICE, message naming the device and what it lacks) a
 * device without Vulkan 1.1, a compute queue, or the mandatory R32F/RGBA32F uniform
 * texel buffers; everything else the kernels can go without (gpu_device_plan). */
vkt_status gpu_plan_device(const gpu_device_caps *caps, gpu_device_plan *out, char *errmsg);
vkt_status gpu_query_device_caps(VkPhysicalDevice phys, gpu_device_caps *caps, char *errmsg);
/* The caps' fields for the kernel profile (profile.c), given the device's extensions. */
void gpu_query_profile_caps(VkPhysicalDevice phys, const VkExtensionProperties *ext,
                            uint32_t n, gpu_device_caps *caps);

/* ---- the kernel profile and the kernel variants (profile.c, variants.c) -------- */

/* What a kernel variant may need of a device (gpu_profile.caps, gpu_variant_row.needs). */
enum {
    GPU_CAP_SUBGROUP_BASIC = 1u << 0,      /* subgroup operations in compute shaders */
    GPU_CAP_SUBGROUP_SHUFFLE = 1u << 1,
    GPU_CAP_SUBGROUP_ARITHMETIC = 1u << 2,
    GPU_CAP_STORAGE_TEXEL = 1u << 3,       /* R32F and RGBA32F storage texel buffers */
    GPU_CAP_FLOAT16 = 1u << 4,             /* float16 arithmetic (shaderFloat16) */
    GPU_CAP_COOPERATIVE_MATRIX = 1u << 5,  /* VK_KHR_cooperative_matrix usable */
    GPU_CAP_HOST_VISIBLE_DEVICE_LOCAL = 1u << 6,
    GPU_CAP_STORAGE16 = 1u << 7,           /* 16-bit storage buffers */
    GPU_CAP_BFLOAT16 = 1u << 8             /* VK_KHR_shader_bfloat16, cooperative matrices too */
};
#define GPU_CAP_COUNT 9

/* A device as the kernels are tuned for it: what it offers, and the tuning constants
 * derived from that and from its style. The style says how the device runs a workgroup:
 * VKT_KERNELS_CPU, as SIMD loops on one core (lavapipe: few workgroups, long loops per
 * lane, texel reads); VKT_KERNELS_GPU, across many compute units (wide grids, many
 * threads per row). The device type decides it unless VKT_KERNELS or the context options
 * name one. Built from a device (gpu_profile_make on gpu_query_device_caps) or for a
 * stated device without one (gpu_profile_stated), so a test can plan for an H100. */
typedef struct gpu_profile {
    char name[VK_MAX_PHYSICAL_DEVICE_NAME_SIZE];
    vkt_device_type type;
    uint32_t compute_units;          /* SMs, CUs, Xe cores, CPU threads */
    const char *compute_units_from;  /* the extension that reported them, or "default" */
    uint32_t subgroup_size;
    uint32_t shared_memory;          /* bytes per workgroup (maxComputeSharedMemorySize) */
    uint32_t max_invocations;        /* per workgroup */
    uint32_t caps;                   /* GPU_CAP_* */
    uint32_t mat_count;              /* cooperative-matrix shapes, subgroup scope */
    gpu_mat_shape mats[GPU_MAX_MAT_SHAPES];
    uint64_t loop_budget;            /* loop iterations an invocation may run */
    vkt_kernel_variant style;        /* VKT_KERNELS_CPU or VKT_KERNELS_GPU */
    /* tuning */
    uint32_t wg;                     /* workgroup of the elementwise and row kernels */
    uint32_t max_groups_1d;          /* grid cap of the grid-stride 1-D kernels */
    uint32_t grid_cap;               /* grid cap of conv's and pooling's grid-stride loops */
    uint32_t row_walk;               /* CPU style: elements a thread walks before its row
                                        gets another thread */
    uint64_t busy_threads;           /* GPU style: threads worth keeping busy at once */
    uint32_t conv_run;               /* im2col / col2im work items per lane */
    uint32_t conv_move_run;          /* conv's row moves: runs of 4 per lane */
    uint32_t pool_run;               /* pooling: runs of 4 outputs per lane */
    uint32_t embedding_accumulators; /* vec4 accumulators per thread of the backward */
    uint32_t optim_norm_groups, optim_update_groups; /* the optimizer's two passes */
} gpu_profile;

/* Pure. style VKT_KERNELS_AUTO: the device type's (CPU devices: CPU, others: GPU).
 * Compute units: the caps' (a vendor extension's) where reported, else a default by
 * device type (discrete 32, integrated and others 8, CPU: the host's processors). */
void gpu_profile_make(const gpu_device_caps *caps, vkt_kernel_variant style,
                      gpu_profile *out);
/* A profile for a device described by a few numbers, without the device: a conformant
 * Vulkan 1.3 device of `type` with basic, shuffle and arithmetic subgroup operations,
 * storage texel buffers and 1024 invocations per workgroup. */
void gpu_profile_stated(vkt_device_type type, uint32_t compute_units, uint32_t shared_memory,
                        uint32_t subgroup_size, gpu_profile *out);
/* The name of a GPU_CAP_* bit ("subgroup shuffle", "float16", ...). */
const char *gpu_cap_name(uint32_t cap);
/* Adds a shape (subgroup scope) to a stated profile: a test's H100 offers f16 x f16 + f32
 * -> f32 at 16x16x16 (and sets GPU_CAP_COOPERATIVE_MATRIX). Ignored past
 * GPU_MAX_MAT_SHAPES. */
void gpu_profile_add_mat(gpu_profile *p, gpu_mat_shape shape);

/* The matrix inputs a kernel variant multiplies on cooperative matrices
 * (gpu_variant_row.mat). */
typedef enum gpu_mat_type { GPU_MAT_NONE = 0, GPU_MAT_F16, GPU_MAT_BF16 } gpu_mat_type;
/* The shape the cooperative-matrix GEMM uses on a profile for inputs of `type`: A and B
 * of that type, C and the result fp32, each side 8, 16 or 32 and m * n a multiple of the
 * subgroup size (the shader's epilogue gives each lane whole rows of it); the largest
 * m * n * k first. NULL when the profile has no such shape or lacks
 * GPU_CAP_COOPERATIVE_MATRIX (and GPU_CAP_BFLOAT16 for bf16). Pure. */
const gpu_mat_shape *gpu_mat_for(const gpu_profile *p, gpu_mat_type type);
/* "f16", "bf16", "f32", "s8", ... for a VkComponentTypeKHR value. */
const char *gpu_component_name(uint32_t component);

/* The kernel families; each picks one of its variants (rows of variants.c's table). */
#define GPU_FAMILIES(X)                                                              \
    X(GEMM, "gemm")               /* vkt_gemm: every product, conv's im2col GEMMs */ \
    X(GEMM_F16, "gemm_f16")       /* vkt_gemm of fp16 inputs, fp32 accumulation */   \
    X(GEMM_BF16, "gemm_bf16")     /* vkt_gemm of bf16 inputs, fp32 accumulation */   \
    X(CONV, "conv")               /* im2col, col2im, conv's row moves */             \
    X(CONV_LOWP, "conv_lowp")     /* conv of fp16 / bf16 operands, fp32 accumulation */ \
    X(ATTENTION, "attention")     /* causal self-attention */                        \
    X(ATTENTION_LOWP, "attention_lowp") /* attention of fp16 / bf16 q, k, v, fp32 sums */ \
    X(ROWS, "rows")               /* reductions, softmax, norms: rows per thread */   \
    X(ELEMENTWISE, "elementwise") /* unary, binary, fill, copy, training 1-D ops */  \
    X(POOL, "pool")               /* max and average pooling */                      \
    X(EMBEDDING, "embedding")                                                        \
    X(OPTIMIZER, "optimizer")
#define GPU_FAMILY_ENUM(ID, name) GPU_FAMILY_##ID,
typedef enum gpu_family { GPU_FAMILIES(GPU_FAMILY_ENUM) GPU_FAMILY_COUNT } gpu_family;
#undef GPU_FAMILY_ENUM

/* The kernel variants: one row each in variants.c's table (its family, name, the styles
 * it suits and what it needs), in order of preference within a family. */
#define GPU_VARIANTS(X)                                                              \
    X(GEMM_TEXEL) X(GEMM_SAMPLER) X(GEMM_TILE) X(GEMM_SHARED)           \
    X(GEMM_F16_COOPMAT) X(GEMM_F16_WIDEN) X(GEMM_F16_FLOAT) X(GEMM_F16_HALF)         \
    X(GEMM_BF16_COOPMAT) X(GEMM_BF16_WIDEN) X(GEMM_BF16_FLOAT)                       \
    X(CONV_IMPLICIT) X(CONV_IM2COL)                                                  \
    X(CONV_LOWP_COOPMAT) X(CONV_LOWP_IMPLICIT) X(CONV_LOWP_WIDEN) X(CONV_LOWP_FRAG)   \
    X(ATTENTION_SHUFFLE) X(ATTENTION_FLASH) X(ATTENTION_ROWS)                        \
    X(ATTENTION_LOWP_COOPMAT) X(ATTENTION_LOWP_FLASH) X(ATTENTION_LOWP_WIDEN)        \
    X(ATTENTION_LOWP_FRAG)                                                           \
    X(ROWS_THREAD) X(ROWS_SPREAD)                                                    \
    X(ELEMENTWISE_VEC4)                                                              \
    X(POOL_TEXEL) X(POOL_STORAGE)                                                    \
    X(EMBEDDING_ROWS)                                                                \
    X(OPTIMIZER_FLAT)
#define GPU_VARIANT_ENUM(ID) GPU_V_##ID,
typedef enum gpu_variant { GPU_VARIANTS(GPU_VARIANT_ENUM) GPU_VARIANT_COUNT } gpu_variant;
#undef GPU_VARIANT_ENUM
#define GPU_V_NONE GPU_VARIANT_COUNT /* a family none of whose rows the device runs */

/* Bits of gpu_variant_row.styles */
#define GPU_STYLE_CPU 1u
#define GPU_STYLE_GPU 2u

typedef struct gpu_variant_row {
    gpu_family family;
    const char *name;          /* as VKT_KERNELS names it */
    uint32_t styles;           /* GPU_STYLE_*: the styles it is chosen for */
    uint32_t needs;            /* GPU_CAP_* */
    uint32_t min_subgroup;     /* subgroup size at least */
    uint32_t min_shared;       /* bytes of shared memory per workgroup */
    uint32_t min_invocations;  /* per workgroup */
    const char *what;          /* one line: how it works */
    gpu_mat_type mat;          /* cooperative matrices of these inputs (gpu_mat_for) */
} gpu_variant_row;

const gpu_variant_row *gpu_variant_row_of(gpu_variant v);
const char *gpu_family_name(gpu_family f);
/* 1 when the profile meets the row's needs; else 0, with what it lacks in why (when
 * given). */
int gpu_variant_runs(const gpu_variant_row *row, const gpu_profile *p, char *why,
                     size_t why_size);

/* A parsed kernel filter: $VKT_KERNELS or vkt_context_options.kernel_variants. Terms
 * separated by commas: "cpu" or "gpu" (a style), or a variant's name (forces its family's
 * choice). */
typedef struct gpu_filter {
    vkt_kernel_variant style;             /* VKT_KERNELS_AUTO when no style term */
    int forced[GPU_FAMILY_COUNT];         /* a gpu_variant, or GPU_V_NONE */
} gpu_filter;
/* Fails with VKT_ERROR_INVALID_ARGUMENT on an unknown term or two variants of one family,
 * the message naming `source` ("VKT_KERNELS") and listing the accepted terms. NULL or "":
 * no filter. */
vkt_status gpu_filter_parse(const char *text, const char *source, gpu_filter *out,
                            char *errmsg);
/* Each family's variant for a profile: the forced one (an error naming what the device
 * lacks if it cannot run it), else the first row of the family that suits the profile's
 * style and runs on it, else GPU_V_NONE (the family's kernels refuse with a message).
 * Pure. */
vkt_status gpu_choose_variants(const gpu_profile *p, const gpu_filter *f,
                               gpu_variant out[GPU_FAMILY_COUNT], char *errmsg);
/* The style asked for (vkt_context_options.kernels), else the filter's, else AUTO. A
 * filter style contradicting the asked one is an error. */
vkt_status gpu_resolve_style(vkt_kernel_variant asked, const gpu_filter *f,
                             vkt_kernel_variant *out, char *errmsg);
/* Profile and choice for a device, from its caps and the options' kernels and filter
 * (NULL: $VKT_KERNELS, whose style term then yields to a style asked in `asked`, as
 * VKT_KERNELS=cpu|gpu always did; its variant names still apply). */
vkt_status gpu_kernel_setup(const gpu_device_caps *caps, vkt_kernel_variant asked,
                            const char *filter, gpu_profile *profile,
                            gpu_variant chosen[GPU_FAMILY_COUNT], char *errmsg);

/* The profile and the choices as text, one "name  value" line each. */
void gpu_kernel_report(const gpu_profile *p, const gpu_variant chosen[GPU_FAMILY_COUNT],
                       char *out, size_t size);

/* ---- memory ------------------------------------------------------------------ */

/* A suballocation: [offset, offset+size) inside a block's VkDeviceMemory. */
typedef struct gpu_alloc {
    struct gpu_block *block;
    VkDeviceSize offset, size;
} gpu_alloc;

typedef struct gpu_free_range {
    VkDeviceSize offset, size;
} gpu_free_range;

/* One vkAllocateMemory; suballocated first-fit with coalescing of freed ranges. */
typedef struct gpu_block {
    VkDeviceMemory memory;
    VkDeviceSize size, used;
    uint32_t type_index;          /* into gpu_memory.types (not the device's index) */
    void *mapped;                 /* persistent map if host-visible, else NULL */
    gpu_free_range *free;         /* sorted by offset */
    uint32_t free_count, free_cap;
    uint32_t live;                /* suballocations alive */
    struct gpu_block *next;
} gpu_block;

/* One memory type the engine chooses from (memory.c builds them from the device's under
 * the context's memory profile): the device's type `index` with the property flags the
 * engine may use of it. Under AUTO they are the device's own; a forced profile hides the
 * host-visible bits of device-local types, or splits a unified type into a device-only
 * one, a host one and a device-local host-visible one, as a discrete GPU has them. */
typedef struct gpu_mem_type {
    uint32_t index;              /* what vkAllocateMemory gets */
    VkMemoryPropertyFlags flags; /* mapped when HOST_VISIBLE | HOST_COHERENT */
    int local;                   /* counts as device-local memory (the memory limit) */
} gpu_mem_type;

#define GPU_MAX_MEM_TYPES (3 * VK_MAX_MEMORY_TYPES)

/* What a buffer is for, which decides its memory type (memory.c's table of preferences). */
typedef enum gpu_memory_use {
    GPU_USE_DEVICE = 0, /* device work only (VKT_MEMORY_DEVICE): device-local */
    GPU_USE_HOST,       /* staging, readback, small host-written blocks (VKT_MEMORY_HOST):
                           host-visible coherent, cached first */
    GPU_USE_SHARED,     /* device data the host also reads or writes each step (a model's
                           activations and inputs): device-local host-visible over the
                           device-local heap where offered, else as GPU_USE_DEVICE (the host
                           then goes through staging) */
    GPU_USE_COUNT
} gpu_memory_use;

typedef struct gpu_memory {
    gpu_mem_type types[GPU_MAX_MEM_TYPES];
    uint32_t type_count;
    gpu_block *blocks;
    VkDeviceSize block_size;
    uint64_t device_bytes, bytes_in_use;
    uint64_t local_bytes;          /* of device_bytes: blocks in device-local heaps */
    uint64_t limit;                /* cap on local_bytes (0: none): vkt_context_options */
    uint32_t block_count, alloc_count;
} gpu_memory;

/* ---- contexts ---------------------------------------------------------------- */

#define GPU_MAX_SPEC 16 /* specialization constants of one pipeline */

typedef struct gpu_pipeline {
    const struct gpu_kernel *kernel;
    uint32_t spec[GPU_MAX_SPEC];
    uint32_t n_spec;
    VkDescriptorSetLayout set_layout;
    VkPipelineLayout layout;
    VkPipeline pipeline;
    uint32_t writable; /* gpu_kernel_writable of its kernel */
    struct gpu_pipeline *next;
} gpu_pipeline;

/* A logical device and its compute queues, shared by the contexts made on it
 * (gpu_context_create_shared): each context keeps its own command pool, pipelines,
 * memory blocks, streams and counters, and submits to one of the queues; contexts that
 * share a queue take its lock around vkQueueSubmit (the spec's external synchronization
 * of a queue). Destroyed with its last context. */
#define GPU_MAX_QUEUES 16
typedef struct gpu_device {
    VkDevice device;
    uint32_t refs;                /* contexts on it (changed by their creator's thread) */
    uint32_t queue_count;         /* min(the family's queue count, GPU_MAX_QUEUES) */
    uint32_t next_queue;          /* the queue the next context gets (round robin) */
    VkQueue queues[GPU_MAX_QUEUES];
    plat_monitor *locks[GPU_MAX_QUEUES];
} gpu_device;

struct vkt_context {
    vkt_instance *inst;
    VkPhysicalDevice phys;
    VkDevice device;
    VkQueue queue;
    uint32_t queue_family;
    gpu_device *dev;              /* the device and queues it shares (or holds alone) */
    plat_monitor *queue_lock;     /* its queue's lock */
    VkPhysicalDeviceProperties props;
    VkPhysicalDeviceMemoryProperties mem_props;
    vkt_device_info info;
    vkt_kernel_variant variant;   /* the profile's style */
    gpu_profile profile;          /* what the kernels are tuned by */
    gpu_variant kv[GPU_FAMILY_COUNT]; /* each kernel family's variant */
    vkt_memory_profile memory_profile; /* as asked (AUTO: none forced) */
    int force_staging;            /* host access to device buffers through staging copies */
    int storage_texel;            /* GPU_BIND_STORAGE_TEXEL_* usable (gpu_device_plan) */
    int subgroup_shuffle;         /* gpu_device_plan: subgroup shuffles in compute shaders */
    int events;                   /* gpu_device_plan: VkEvents usable (marks, mark.c) */
    int timeline;                 /* gpu_device_plan: timeline semaphores usable (sync.c) */
    uint32_t host_import;         /* gpu_device_plan: host memory importable, alignment */
    VkCommandPool cmd_pool;
    VkPipelineCache pipeline_cache;
    char cache_path[1024];        /* "" when the file cache is off */
    gpu_memory mem;
    gpu_pipeline *pipelines;
    uint32_t pipeline_count;
    struct vkt_stream *transfer;  /* for synchronous buffer reads and writes */
    struct vkt_buffer *staging;   /* host-visible bounce buffer for them */
    struct vkt_buffer *buffers;   /* live buffers (destroyed with the context) */
    struct vkt_stream *streams;   /* live streams (destroyed with the context) */
    struct gpu_timeline *timelines; /* live timelines (destroyed with the context) */
    /* Host round trips (gpu_context_counters). Atomic: a trainer's progress callback may
     * read them while other threads' contexts count. in_flight and idle_since belong to
     * the thread using the context (one at a time). */
    atomic_uint_fast64_t n_submits, n_fence_waits, n_transfers, n_transfer_bytes, idle_ns;
    uint32_t in_flight;           /* submissions not yet waited for */
    double idle_since;            /* plat_now() when the last of them was waited for; 0:
                                     not counting (gpu_context_idle_disarm) */
    char errmsg[VKT_ERRMSG_SIZE];
};

/* ---- round trips (stream.c) ---------------------------------------------------- */

/* What a context cost the host in round trips since its creation. A round trip is a
 * vkQueueSubmit, a blocking vkWaitForFences, or a synchronous staged transfer (which is
 * one submit and one wait of the context's transfer stream per STAGING_CHUNK, counted
 * in both of those too). Polls of marks and memcpy through mapped memory are free. */
typedef struct gpu_counters {
    uint64_t submits;        /* successful vkQueueSubmit calls, every stream */
    uint64_t fence_waits;    /* waits for a submission (not calls that found none) */
    uint64_t sync_transfers; /* staged vkt_buffer_read/write chunks (buffer.c) */
    uint64_t transfer_bytes; /*   and the bytes they moved */
    double idle_seconds;     /* the device had nothing of this context's to run, waiting
                                for the host: from the wait that completed the last
                                pending submission to the next submission, summed; not
                                counted after gpu_context_idle_disarm until a wait */
} gpu_counters;
void gpu_context_counters(const vkt_context *ctx, gpu_counters *out);
/* The time until the next submission is not the device waiting for this host's work (a
 * run starts: what came before was the caller's). */
void gpu_context_idle_disarm(vkt_context *ctx);
/* buffer.c's staged copies: one chunk of `bytes`. */
void gpu_count_transfer(vkt_context *ctx, uint64_t bytes);

/* Fills ctx->mem.types for the profile (memory.c); VKT_ERROR_NO_DEVICE naming the device
 * when it cannot take the profile (REBAR without a device-local host-visible type). */
vkt_status gpu_memory_types_init(vkt_context *ctx, vkt_memory_profile profile);
/* 1 when memory type `type` lies on a heap at least half the size of the device's
 * largest device-local heap: memory over the whole device (resizable BAR, lavapipe's one
 * heap), not a 256 MiB window beside it (a GPU without resizable BAR). The one rule for
 * the profile's host-visible device-local capability and the memory profiles' placement. */
int gpu_memory_type_spans_heap(const VkPhysicalDeviceMemoryProperties *mp, uint32_t type);
/* The profile's row: its name and whether host access always goes through staging. NULL
 * for a value outside the enum. gpu_memory_profile_parse: by name; 0 when unknown. */
typedef struct gpu_memory_profile_row {
    vkt_memory_profile profile;
    const char *name;
    int staging;       /* host reads and writes of device buffers through staging copies */
    int device_host;   /* device-local host-visible types: GPU_DH_KEEP, _HIDE or _NEED */
    int host_apart;    /* unified memory: host buffers in a type of their own (memory.c) */
} gpu_memory_profile_row;
enum { GPU_DH_KEEP, GPU_DH_HIDE, GPU_DH_NEED };
const gpu_memory_profile_row *gpu_memory_profile_row_of(vkt_memory_profile profile);
int gpu_memory_profile_parse(const char *name, vkt_memory_profile *out);
/* The memory types (into ctx->mem.types) for a use among the device's `type_bits`, best
 * first; returns how many (0: none fits). */
uint32_t gpu_memory_types_for(const vkt_context *ctx, uint32_t type_bits, gpu_memory_use use,
                              uint32_t *out, uint32_t cap);
/* A buffer for a use (vkt_buffer_create is this with DEVICE or HOST). Where the preferred
 * type's heap is full it falls back to the next type that fits. `mapped` is set whenever
 * the memory is host-mapped; only HOST buffers expose it through vkt_buffer_map. */
vkt_status gpu_buffer_create(vkt_context *ctx, uint64_t bytes, gpu_memory_use use,
                             vkt_buffer **out);
/* Whether the buffer's memory is host-cached (host reads at memory speed; the trainer's
 * staging reports it). */
int gpu_buffer_host_cached(const vkt_buffer *b);
vkt_status gpu_memory_alloc(vkt_context *ctx, const VkMemoryRequirements *req,
                            uint32_t type_index, gpu_alloc *out);
void gpu_memory_free(vkt_context *ctx, gpu_alloc *alloc);
void gpu_memory_destroy(vkt_context *ctx);
/* 64 MiB, or maxMemoryAllocationSize if smaller. */
VkDeviceSize gpu_default_block_size(const vkt_context *ctx);
/* Parses a size ("512M", "1.5G", bytes); 0 when it is not one (context.c). */
int gpu_parse_bytes(const char *s, uint64_t *out);

/* Pipeline cache file under the user's cache directory ($VKT_CACHE_DIR, else
 * $XDG_CACHE_HOME/vktrain, else ~/.cache/vktrain), keyed by the device's cache UUID. */
vkt_status gpu_pipeline_cache_open(vkt_context *ctx, int use_file);
void gpu_pipeline_cache_close(vkt_context *ctx);

/* ---- buffers ----------------------------------------------------------------- */

struct vkt_buffer {
    vkt_context *ctx;
    VkBuffer buffer;
    VkDeviceSize size;
    vkt_memory_kind kind;
    gpu_alloc alloc;
    VkDeviceMemory imported;      /* host memory imported (gpu_buffer_import_host), not alloc */
    void *mapped;                 /* host pointer if the memory is host-visible */
    struct vkt_buffer *prev, *next;
};

/* ---- kernels and pipelines --------------------------------------------------- */

typedef enum gpu_bind_type {
    GPU_BIND_STORAGE = 0, /* layout(std430, binding=i) buffer */
    GPU_BIND_TEXEL_R = 1, /* layout(binding=i) uniform textureBuffer, R32_SFLOAT */
    GPU_BIND_TEXEL_RGBA = 2, /* uniform textureBuffer, R32G32B32A32_SFLOAT (vec4 texels) */
    /* layout(binding=i, r32f) uniform imageBuffer: imageLoad / imageStore, R32_SFLOAT.
     * Lavapipe inlines imageLoad where texelFetch is a call (bench/gemm_notes.md). Only
     * where ctx->storage_texel says the device supports the format for it. */
    GPU_BIND_STORAGE_TEXEL_R = 3,
    GPU_BIND_STORAGE_TEXEL_RGBA = 4 /* layout(..., rgba32f) uniform imageBuffer */
} gpu_bind_type;

/* The descriptor type of a binding type: STORAGE_BUFFER, UNIFORM_TEXEL_BUFFER or
 * STORAGE_TEXEL_BUFFER. */
VkDescriptorType gpu_descriptor_type(gpu_bind_type type);

#define GPU_MAX_BINDINGS 8

/* A compute kernel: embedded SPIR-V, its bindings (set 0, binding i = bind[i]), the
 * size of its push-constant struct and how many specialization constants its pipelines
 * get (ids 0..n_spec-1: the shader's SPEC_*_COUNT of shaders/spec.h). Defined
 * `static const` next to its dispatch code. */
typedef struct gpu_kernel {
    const char *name;
    const uint32_t *spv;
    size_t spv_bytes;
    uint32_t n_bindings;
    uint8_t bind[GPU_MAX_BINDINGS]; /* gpu_bind_type per binding */
    uint32_t push_bytes;
    uint32_t n_spec;
} gpu_kernel;

/* Checks a kernel's description, and the n_spec constants a dispatch gives, against its
 * SPIR-V (spirv.c reads the shader's OpDecorate Binding / DescriptorSet / SpecId and the
 * bound variables' types): n_spec equals k->n_spec; the shader's bindings are exactly
 * set 0, bindings 0..n_bindings-1, each of the kind (storage buffer, uniform or storage
 * texel buffer, and a storage texel buffer's format) its bind[] entry says (one of the
 * variables aliasing a binding must match); its constant_ids are exactly 0..n_spec-1.
 * VKT_ERROR_INTERNAL with a message naming the shader otherwise. gpu_pipeline_get runs it
 * before creating each pipeline. */
vkt_status gpu_kernel_check(const gpu_kernel *k, uint32_t n_spec, char *errmsg);
/* The bindings (bit i: binding i) the shader may write: a variable there not declared
 * readonly, whatever the specialization constants (a kernel's optional output is
 * writable in its SPIR-V even where the dispatch's constants never write it). The
 * validation layer's synchronization check takes these as written by every dispatch. */
uint32_t gpu_kernel_writable(const gpu_kernel *k);

/* One binding of a dispatch: bytes [offset, offset+bytes) of a buffer, read or written.
 * The descriptor starts at `offset` rounded down to the device's alignment; kernels add
 * gpu_arg_shift() elements to their indices (pass it in the push constants). */
typedef struct gpu_arg {
    vkt_buffer *buf;
    uint64_t offset, bytes;
    int write;
} gpu_arg;

/* Elements (4-byte units) between the aligned descriptor start and `offset_bytes`. For
 * the RGBA texel types the shift is in floats too; it is a multiple of 4 only if the
 * offset is 16-byte aligned (kernels check and fall back to the R types). */
uint32_t gpu_arg_shift(const vkt_context *ctx, uint64_t offset_bytes, gpu_bind_type type);
/* The same in bytes: the descriptor starts at offset_bytes minus this (for elements of
 * another size than 4: the 16-bit GEMM operands). */
uint32_t gpu_arg_shift_bytes(const vkt_context *ctx, uint64_t offset_bytes, gpu_bind_type type);

/* Looks up or creates the pipeline of (kernel, specialization constants 0..n_spec-1). */
vkt_status gpu_pipeline_get(vkt_context *ctx, const gpu_kernel *kernel, const uint32_t *spec,
                            uint32_t n_spec, gpu_pipeline **out);
void gpu_pipelines_destroy(vkt_context *ctx);

/* ---- streams ----------------------------------------------------------------- */

typedef struct gpu_range {
    VkBuffer buffer;
    VkDeviceSize begin, end;
} gpu_range;

typedef struct gpu_range_list {
    gpu_range *items;
    uint32_t count, cap;
} gpu_range_list;

#define GPU_MAX_CARRIED 4

struct vkt_stream {
    vkt_context *ctx;
    VkCommandBuffer cmd;
    VkFence fence;
    int recording, submitted, has_commands;
    int completed;                 /* a run finished since the last recording */
    VkDescriptorPool *pools;       /* grown as dispatches need descriptor sets */
    uint32_t pool_count, pool_cap;
    uint32_t sets_in_pool;         /* sets allocated from the newest pool */
    VkBufferView *views;           /* texel views owned by this stream */
    uint32_t view_count, view_cap;
    gpu_range_list pending_reads;  /* since the last barrier */
    gpu_range_list pending_writes;
    VkQueryPool queries;           /* NULL unless timestamps */
    uint32_t query_cap, query_count;
    const char **query_names;
    vkt_stream_stats stats;
    VkEvent *marks;                /* gpu_stream_mark's events, kept across recordings */
    uint32_t mark_count, mark_cap; /*   used by this recording, created */
    /* Set by a layer above while it records (the graph checks its memory plan against
     * what each op's recording touches): every command's accesses, as gpu_stream_access
     * sees them. NULL: none. */
    void (*observe)(void *user, const gpu_range *ranges, const int *writes, uint32_t n);
    void *observe_user;
    struct vkt_buffer **scratch;   /* gpu_stream_scratch's buffers, the newest largest */
    uint32_t scratch_count, scratch_cap;
    /* gpu_stream_submit_after: the stream whose submission (and fence) carries this one's
     * command buffer until it is waited for, and the streams this one carries */
    struct vkt_stream *carrier;
    struct vkt_stream *carried[GPU_MAX_CARRIED];
    uint32_t n_carried;
    struct vkt_stream *prev, *next;
};

/* A context on the logical device of `share_with` (same physical device: the options'
 * device_index must name it, and kernels and memory profile must be the ones it was made
 * with): one VkDevice, so its buffers and semaphores can meet the other's in one
 * submission; the next of the device's compute queues, or, where the family has fewer
 * queues than contexts, one shared under its lock (lavapipe has one). NULL share_with:
 * vkt_context_create. */
vkt_status gpu_context_create_shared(vkt_instance *inst, const vkt_context_options *o,
                                     vkt_context *share_with, vkt_context **out);
/* Whether a and b share one VkDevice; the compute queues of a's device. */
int gpu_context_same_device(const vkt_context *a, const vkt_context *b);
/* Until ctx's queue has nothing left to run (vkQueueWaitIdle under its lock): before
 * objects its submissions use go, even where a wait for them failed (a lost device). */
void gpu_context_wait_idle(vkt_context *ctx);
uint32_t gpu_context_queue_count(const vkt_context *ctx);

/* One vkQueueSubmit (one round trip: a submission, later one fence wait) of the command
 * buffers of before[0..n) and then s's, under s's fence: the `before` streams (up to
 * GPU_MAX_CARRIED; NULL entries skipped) run first in submission order. Each must end its
 * recording with gpu_stream_barrier_all, so that s's commands see its writes. Until s is
 * waited for, waiting for (or resetting, destroying) a carried stream waits for s. */
vkt_status gpu_stream_submit_after(vkt_stream *s, vkt_stream *const *before, uint32_t n);
/* Records a fill of bytes [offset, offset + bytes) of b with zeros (vkCmdFillBuffer: a
 * transfer, no kernel; offset and bytes multiples of 4), ordered like a copy. */
vkt_status gpu_stream_fill_zero(vkt_stream *s, vkt_buffer *b, uint64_t offset, uint64_t bytes);
/* Records a barrier ordering every earlier command of the stream, and every write of it,
 * before every later command in submission order (this stream's, and those of command
 * buffers submitted after it). */
vkt_status gpu_stream_barrier_all(vkt_stream *s);

/* Records one dispatch: binds the pipeline and a fresh descriptor set, pushes `push`
 * (kernel->push_bytes bytes), inserts the barriers its arguments need, dispatches
 * groups[0..2] workgroups. Checks every binding against maxStorageBufferRange /
 * maxTexelBufferElements and fails with VKT_ERROR_LIMIT naming the limit. */
vkt_status gpu_dispatch(vkt_stream *s, const gpu_kernel *kernel, const uint32_t *spec,
                        uint32_t n_spec, const gpu_arg *args, const void *push,
                        const uint32_t groups[3]);

/* Records one barrier if any of the n accesses (byte ranges, read or write) conflicts
 * with what the stream recorded since its last barrier (read-after-write,
 * write-after-write, write-after-read), then notes the accesses. Used by gpu_dispatch
 * and by transfer commands; accesses of one command never conflict with each other. */
vkt_status gpu_stream_access(vkt_stream *s, const gpu_range *ranges, const int *writes,
                             uint32_t n);
/* The same for a dispatch, whose descriptors may reach more than the kernel touches:
 * barriers are placed and cover by `ranges` and `writes` (what the descriptors reach: a
 * binding's offset aligned down, a texel view rounded up to whole texels; written where
 * the shader may write), the stream's observer is told `declared` and `declared_writes`
 * (the bytes the kernel touches, and how). */
vkt_status gpu_stream_access_reach(vkt_stream *s, const gpu_range *declared,
                                   const int *declared_writes, const gpu_range *ranges,
                                   const int *writes, uint32_t n);

/* Marks (mark.c): a point of a recording that the host can see the device pass while
 * the rest of the submission still runs, e.g. to work on results of the first half of a
 * step during the second. Recorded as a barrier making every earlier write visible to
 * the host, then a Vulkan event set by the device; marks are numbered in recording order
 * from 0, and every submission starts with none passed (the stream resets them). */
vkt_status gpu_stream_mark(vkt_stream *s, uint32_t *out_index);
/* 1 when mark `index` of the current submission has passed (or the submission has
 * finished), 0 when not yet; VKT status < 0 never: errors return -1 with the message in
 * the context (a lost device, say). Not submitted: 1. */
int gpu_stream_mark_passed(vkt_stream *s, uint32_t index);
/* Before a submission: every mark back to "not passed" (vkt_stream_submit). */
vkt_status gpu_stream_marks_reset(vkt_stream *s);
void gpu_stream_marks_destroy(vkt_stream *s);

/* Device memory for the intermediate results of a recording (a split-K GEMM's partial
 * tiles): a buffer of at least `bytes` owned by the stream, alive until the stream is
 * reset or destroyed (recorded commands refer to it). Successive calls may return the
 * same buffer: commands that use it are ordered by the stream's barriers like any other
 * access. A reset keeps the largest for the next recording. */
vkt_status gpu_stream_scratch(vkt_stream *s, uint64_t bytes, vkt_buffer **out);

/* Starts recording if the stream is not recording yet (after a reset). */
vkt_status gpu_stream_begin(vkt_stream *s);

/* Common argument check for kernels: a view inside its buffer with `count` elements. */
vkt_status gpu_check_view(vkt_context *ctx, const char *what, vkt_view v, uint64_t count);

/* Largest workgroup count per dimension that every Vulkan device supports. */
#define GPU_MAX_GROUPS 65535u

/* timelines, ordered submissions, host memory imported (sync.c, buffer.c) */
#include "gpu/sync.h"

#endif /* VKT_GPU_H */
