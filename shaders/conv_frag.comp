#version 450
/*
 * conv_frag.comp - the convolution on the cooperative-matrix tiling without the matrix
 * instruction (variant conv_lowp_frag, chosen only by name; and conv_lowp_coopmat's bf16
 * where the device has no bf16 matrices): fp16 or bf16 operands widened exactly to fp32,
 * fp32 shared memory and multiply-adds. conv_frag.glsl has the tiling.
 */
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_16bit_storage : require
#define LOWP_FLOAT
#include "conv_frag.glsl"
