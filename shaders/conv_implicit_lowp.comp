#version 450
/*
 * conv_implicit_lowp.comp - the conv_lowp_implicit variant: conv_implicit.glsl with its
 * two GEMM operands (x and w, dy and w, x and dy) fp16 or bf16 in 16-bit storage, widened
 * exactly to fp32 as they are loaded (shaders/dtype.h), fp32 multiply-adds, fp32 bias,
 * relu_y and outputs. The tiles, plans and indexing are conv_implicit's.
 */
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_16bit_storage : require
#define CONV_LOWP
#include "conv_implicit.glsl"
