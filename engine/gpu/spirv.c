/* spirv.c - a small reader of the embedded SPIR-V: which descriptor bindings (set,
 * binding, kind, texel format) and which specialization constant ids a shader declares,
 * so that a pipeline whose description disagrees with its shader fails at creation with
 * a message naming the shader, instead of binding the wrong thing or writing constants
 * the shader never reads (see gpu_kernel_check in gpu.h). Only the instructions it needs
 * are read: OpDecorate (SpecId, Binding, DescriptorSet, Block, BufferBlock, NonWritable),
 * OpMemberDecorate (NonWritable), OpTypePointer, OpTypeImage, OpTypeSampledImage,
 * OpTypeStruct, OpTypeArray / OpTypeRuntimeArray and OpVariable. It also says which
 * bindings the shader may write (gpu_kernel_writable). */
#include "gpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    SPV_MAGIC = 0x07230203u,
    OP_TYPE_IMAGE = 25,
    OP_TYPE_SAMPLED_IMAGE = 27,
    OP_TYPE_ARRAY = 28,
    OP_TYPE_RUNTIME_ARRAY = 29,
    OP_TYPE_STRUCT = 30,
    OP_TYPE_POINTER = 32,
    OP_VARIABLE = 59,
    OP_DECORATE = 71,
    OP_MEMBER_DECORATE = 72,
    DEC_SPEC_ID = 1,
    DEC_BLOCK = 2,
    DEC_BUFFER_BLOCK = 3,
    DEC_NON_WRITABLE = 24,
    DEC_BINDING = 33,
    DEC_DESCRIPTOR_SET = 34,
    SC_UNIFORM_CONSTANT = 0,
    SC_UNIFORM = 2,
    SC_STORAGE_BUFFER = 12,
    DIM_BUFFER = 5,
    FMT_UNKNOWN = 0,
    FMT_RGBA32F = 1,
    FMT_R32F = 3,
};

/* What the reader keeps of one result id. */
typedef struct spv_id {
    int32_t binding, set, spec_id; /* decorations; -1: none */
    uint8_t block, buffer_block, non_writable; /* non_writable: of a variable */
    uint32_t members, members_non_writable;      /* of a struct type */
    uint16_t op;                   /* the type or variable instruction defining it */
    uint32_t a, b, c;              /* its operands: pointer (storage class, pointee);
                                      image (dim, sampled, format); sampled image
                                      (image); array (element); variable (type, class) */
} spv_id;

/* The descriptor kind of a binding as the shader declares it. */
typedef enum spv_kind {
    KIND_STORAGE_BUFFER,
    KIND_UNIFORM_BUFFER,
    KIND_UNIFORM_TEXEL,
    KIND_STORAGE_TEXEL,
    KIND_OTHER
} spv_kind;

static const char *kind_name(spv_kind k, uint32_t format)
{
    switch (k) {
    case KIND_STORAGE_BUFFER: return "a storage buffer";
    case KIND_UNIFORM_BUFFER: return "a uniform buffer";
    case KIND_UNIFORM_TEXEL: return "a uniform texel buffer (textureBuffer)";
    case KIND_STORAGE_TEXEL:
        return format == FMT_R32F      ? "a storage texel buffer of r32f"
               : format == FMT_RGBA32F ? "a storage texel buffer of rgba32f"
                                       : "a storage texel buffer of another format";
    default: return "a kind vktrain does not bind";
    }
}

/* The kind (and texel format) a description's binding type means. */
static spv_kind kind_of_bind(gpu_bind_type t, uint32_t *format)
{
    *format = FMT_UNKNOWN;
    switch (t) {
    case GPU_BIND_STORAGE: return KIND_STORAGE_BUFFER;
    case GPU_BIND_TEXEL_R:
    case GPU_BIND_TEXEL_RGBA: return KIND_UNIFORM_TEXEL;
    case GPU_BIND_STORAGE_TEXEL_R: *format = FMT_R32F; return KIND_STORAGE_TEXEL;
    case GPU_BIND_STORAGE_TEXEL_RGBA: *format = FMT_RGBA32F; return KIND_STORAGE_TEXEL;
    default: return KIND_OTHER;
    }
}

/* The kind of variable v (ids[v] an OpVariable), following pointers and arrays. */
static spv_kind kind_of_var(const spv_id *ids, uint32_t bound, uint32_t v, uint32_t *format)
{
    *format = FMT_UNKNOWN;
    uint32_t ptr = ids[v].a, sc = ids[v].b;
    if (ptr >= bound || ids[ptr].op != OP_TYPE_POINTER)
        return KIND_OTHER;
    uint32_t t = ids[ptr].b;
    for (int hops = 0; hops < 4 && t < bound; hops++) {
        const spv_id *d = &ids[t];
        if (d->op == OP_TYPE_ARRAY || d->op == OP_TYPE_RUNTIME_ARRAY) {
            t = d->a; /* an array of descriptors: the element's kind */
            continue;
        }
        if (d->op == OP_TYPE_SAMPLED_IMAGE) {
            uint32_t img = d->a;
            return img < bound && ids[img].op == OP_TYPE_IMAGE && ids[img].a == DIM_BUFFER
                       ? KIND_UNIFORM_TEXEL
                       : KIND_OTHER;
        }
        if (sc == SC_STORAGE_BUFFER)
            return KIND_STORAGE_BUFFER;
        if (sc == SC_UNIFORM)
            return d->buffer_block ? KIND_STORAGE_BUFFER
                   : d->block      ? KIND_UNIFORM_BUFFER
                                   : KIND_OTHER;
        if (sc == SC_UNIFORM_CONSTANT && d->op == OP_TYPE_IMAGE && d->a == DIM_BUFFER) {
            *format = d->c;
            return d->b == 2   ? KIND_STORAGE_TEXEL
                   : d->b == 1 ? KIND_UNIFORM_TEXEL
                               : KIND_OTHER;
        }
        return KIND_OTHER;
    }
    return KIND_OTHER;
}

/* Reads the ids of a module: NULL with the reason in why if it is not well-formed. */
static spv_id *read_ids(const uint32_t *w, size_t n, uint32_t *bound, const char **why)
{
    if (n < 5 || w[0] != SPV_MAGIC) {
        *why = "no SPIR-V header";
        return NULL;
    }
    *bound = w[3];
    if (*bound == 0 || *bound > (1u << 22)) {
        *why = "an implausible id bound";
        return NULL;
    }
    spv_id *ids = calloc(*bound, sizeof *ids);
    if (!ids) {
        *why = "out of host memory";
        return NULL;
    }
    for (uint32_t i = 0; i < *bound; i++)
        ids[i].binding = ids[i].set = ids[i].spec_id = -1;
    for (size_t at = 5; at < n;) {
        uint32_t wc = w[at] >> 16, op = w[at] & 0xffffu;
        if (wc == 0 || at + wc > n) {
            free(ids);
            *why = "a truncated instruction";
            return NULL;
        }
        const uint32_t *o = &w[at + 1];
        uint32_t id = wc >= 2 ? o[0] : 0;
        if (op == OP_DECORATE && wc >= 3 && id < *bound) {
            uint32_t dec = o[1];
            if (dec == DEC_BLOCK)
                ids[id].block = 1;
            else if (dec == DEC_BUFFER_BLOCK)
                ids[id].buffer_block = 1;
            else if (dec == DEC_NON_WRITABLE)
                ids[id].non_writable = 1;
            else if (wc >= 4 && dec == DEC_SPEC_ID)
                ids[id].spec_id = (int32_t)o[2];
            else if (wc >= 4 && dec == DEC_BINDING)
                ids[id].binding = (int32_t)o[2];
            else if (wc >= 4 && dec == DEC_DESCRIPTOR_SET)
                ids[id].set = (int32_t)o[2];
        } else if (op == OP_MEMBER_DECORATE && wc >= 4 && id < *bound) {
            if (o[2] == DEC_NON_WRITABLE)
                ids[id].members_non_writable++;
        } else if (op == OP_TYPE_STRUCT && id < *bound) {
            ids[id].op = (uint16_t)op;
            ids[id].members = wc - 2;
        } else if (op == OP_TYPE_POINTER && wc >= 4 && id < *bound) {
            ids[id].op = (uint16_t)op;
            ids[id].a = o[1]; /* storage class */
            ids[id].b = o[2]; /* pointee */
        } else if (op == OP_TYPE_IMAGE && wc >= 9 && id < *bound) {
            ids[id].op = (uint16_t)op;
            ids[id].a = o[2]; /* Dim */
            ids[id].b = o[6]; /* Sampled: 1 with a sampler, 2 storage */
            ids[id].c = o[7]; /* Image Format */
        } else if ((op == OP_TYPE_SAMPLED_IMAGE || op == OP_TYPE_ARRAY ||
                    op == OP_TYPE_RUNTIME_ARRAY) && wc >= 3 && id < *bound) {
            ids[id].op = (uint16_t)op;
            ids[id].a = o[1];
        } else if (op == OP_VARIABLE && wc >= 4 && o[1] < *bound) {
            ids[o[1]].op = (uint16_t)op;
            ids[o[1]].a = o[0]; /* result type: a pointer */
            ids[o[1]].b = o[2]; /* storage class */
        }
        at += wc;
    }
    return ids;
}

/* "ids 0-4" / "id 3" / "no ids" for a mask of ids below 64. */
static void ids_text(uint64_t mask, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < 64 && used + 1 < size; i++) {
        if (!(mask >> i & 1))
            continue;
        int j = i;
        while (j + 1 < 64 && (mask >> (j + 1) & 1))
            j++;
        used += (size_t)snprintf(buf + used, size - used, "%s%d", used ? ", " : "", i);
        if (j > i && used + 1 < size)
            used += (size_t)snprintf(buf + used, size - used, "%s%d", j == i + 1 ? ", " : "-", j);
        i = j;
    }
    if (!buf[0])
        snprintf(buf, size, "none");
}

vkt_status gpu_kernel_check(const gpu_kernel *k, uint32_t n_spec, char *errmsg)
{
    const char *name = k->name ? k->name : "(unnamed)";
    if (n_spec != k->n_spec)
        return err_fail(errmsg, VKT_ERROR_INTERNAL,
                        "shader '%s': the dispatch gives %u specialization constants, its "
                        "description says %u", name, n_spec, k->n_spec);
    if (k->n_bindings > GPU_MAX_BINDINGS || n_spec > GPU_MAX_SPEC)
        return err_fail(errmsg, VKT_ERROR_INTERNAL,
                        "shader '%s': %u bindings and %u specialization constants; at most %d "
                        "and %d", name, k->n_bindings, n_spec, GPU_MAX_BINDINGS, GPU_MAX_SPEC);
    if (k->spv_bytes % 4 != 0)
        return err_fail(errmsg, VKT_ERROR_INTERNAL, "shader '%s': SPIR-V of %zu bytes, not "
                        "whole words", name, k->spv_bytes);
    uint32_t bound;
    const char *why = NULL;
    spv_id *ids = read_ids(k->spv, k->spv_bytes / 4, &bound, &why);
    if (!ids)
        return err_fail(errmsg, why && strcmp(why, "out of host memory") == 0
                                    ? VKT_ERROR_OUT_OF_MEMORY : VKT_ERROR_INTERNAL,
                        "shader '%s': cannot read its SPIR-V: %s", name, why);
    vkt_status st = VKT_OK;
    uint64_t spec_ids = 0;
    uint32_t seen = 0, matched = 0; /* bit i: binding i declared / declared as described */
    spv_kind first_kind[GPU_MAX_BINDINGS] = {KIND_OTHER};
    uint32_t first_format[GPU_MAX_BINDINGS] = {0};
    for (uint32_t id = 0; id < bound && st == VKT_OK; id++) {
        const spv_id *d = &ids[id];
        if (d->spec_id >= 0) {
            if (d->spec_id >= 64)
                st = err_fail(errmsg, VKT_ERROR_INTERNAL, "shader '%s' declares constant_id "
                              "%d; vktrain gives ids below %d", name, d->spec_id, GPU_MAX_SPEC);
            else
                spec_ids |= 1ull << d->spec_id;
        }
        if (d->op != OP_VARIABLE || d->binding < 0)
            continue;
        uint32_t b = (uint32_t)d->binding, format;
        if (d->set != 0) {
            st = err_fail(errmsg, VKT_ERROR_INTERNAL, "shader '%s': binding %u is in "
                          "descriptor set %d; vktrain binds set 0 only", name, b, d->set);
        } else if (b >= k->n_bindings) {
            st = err_fail(errmsg, VKT_ERROR_INTERNAL, "shader '%s' declares binding %u; its "
                          "pipeline describes %u binding%s (0-%u)", name, b, k->n_bindings,
                          k->n_bindings == 1 ? "" : "s", k->n_bindings ? k->n_bindings - 1 : 0);
        } else {
            spv_kind kind = kind_of_var(ids, bound, id, &format), want;
            uint32_t want_format;
            want = kind_of_bind((gpu_bind_type)k->bind[b], &want_format);
            if (!(seen >> b & 1)) {
                first_kind[b] = kind;
                first_format[b] = format;
            }
            seen |= 1u << b;
            if (kind == want && (want != KIND_STORAGE_TEXEL || format == want_format))
                matched |= 1u << b;
        }
    }
    for (uint32_t b = 0; b < k->n_bindings && st == VKT_OK; b++) {
        uint32_t want_format;
        spv_kind want = kind_of_bind((gpu_bind_type)k->bind[b], &want_format);
        if (!(seen >> b & 1))
            st = err_fail(errmsg, VKT_ERROR_INTERNAL, "shader '%s' has no binding %u; its "
                          "pipeline describes %u bindings", name, b, k->n_bindings);
        else if (!(matched >> b & 1))
            st = err_fail(errmsg, VKT_ERROR_INTERNAL, "shader '%s': binding %u is described "
                          "as %s, the shader declares %s", name, b, kind_name(want, want_format),
                          kind_name(first_kind[b], first_format[b]));
    }
    uint64_t given = n_spec >= 64 ? ~0ull : (1ull << n_spec) - 1;
    if (st == VKT_OK && spec_ids != given) {
        char have[128], want[128];
        ids_text(spec_ids, have, sizeof have);
        ids_text(given, want, sizeof want);
        st = err_fail(errmsg, VKT_ERROR_INTERNAL, "shader '%s': the pipeline gives "
                      "specialization constants %s, the shader declares constant_id %s",
                      name, want, have);
    }
    free(ids);
    return st;
}

/* Whether variable v may be written: not decorated NonWritable, and for a block (a
 * storage buffer) not every member NonWritable (glslang's `readonly` decorates each). */
static int may_write(const spv_id *ids, uint32_t bound, uint32_t v)
{
    if (ids[v].non_writable)
        return 0;
    uint32_t ptr = ids[v].a, type = ptr < bound ? ids[ptr].b : 0;
    if (type < bound && ids[type].op == OP_TYPE_STRUCT && ids[type].members &&
        ids[type].members_non_writable >= ids[type].members)
        return 0;
    uint32_t format;
    spv_kind kind = kind_of_var(ids, bound, v, &format);
    return kind == KIND_STORAGE_BUFFER || kind == KIND_STORAGE_TEXEL;
}

uint32_t gpu_kernel_writable(const gpu_kernel *k)
{
    uint32_t bound, mask = 0;
    const char *why = NULL;
    spv_id *ids = read_ids(k->spv, k->spv_bytes / 4, &bound, &why);
    if (!ids)
        return (uint32_t)((1ull << k->n_bindings) - 1); /* unreadable: all, to be safe */
    for (uint32_t id = 0; id < bound; id++)
        if (ids[id].op == OP_VARIABLE && ids[id].binding >= 0 && ids[id].binding < 32 &&
            may_write(ids, bound, id))
            mask |= 1u << ids[id].binding;
    free(ids);
    return mask;
}
