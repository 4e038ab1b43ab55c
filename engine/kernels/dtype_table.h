/*
 * dtype_table.h - the element types as rows (engine/kernels/dtype.c): what the rest of the
 * engine asks of a type (vkt_dtype_size, the safetensors name an export writes) reads its
 * row, never an `if` on the type.
 */
#ifndef VKT_KERNELS_DTYPE_TABLE_H
#define VKT_KERNELS_DTYPE_TABLE_H

#include <stdint.h>

#include "vkt.h"

typedef struct kdt_info {
    const char *name;        /* "fp16": vkt_dtype_name, the command line's spelling */
    uint32_t size;           /* bytes per element */
    const char *glsl;        /* the macro of shaders/dtype.h that holds its code */
    uint32_t glsl_code;      /* that macro's value (the shaders' flags and push constants) */
    const char *safetensors; /* the dtype a safetensors header names it by ("F16") */
} kdt_info;

/* The row of a type; NULL outside vkt_dtype. */
const kdt_info *kdt_info_of(vkt_dtype dtype);

#endif
