#version 450
/*
 * gemm_half.comp - the 16-bit GEMM without cooperative matrices and without float16
 * arithmetic (variants gemm_f16_float, gemm_bf16_float): fp16 or bf16 (AB_TYPE) read from
 * 16-bit storage, widened to fp32 exactly, fp32 multiply-adds. gemm_lowp.glsl has the
 * tiling it shares with the cooperative-matrix kernels.
 */
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_shader_16bit_storage : require
#define LOWP_FLOAT
#include "gemm_lowp.glsl"
