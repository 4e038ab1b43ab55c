#version 450
/*
 * gemm_half_f16.comp - the fp16 GEMM in fp16 arithmetic (variant gemm_f16_half, chosen
 * only by name): each output's products over one K slab summed by fp16 multiply-adds,
 * those sums added in fp32. gemm_lowp.glsl has the tiling.
 */
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#define LOWP_HALF
#include "gemm_lowp.glsl"
