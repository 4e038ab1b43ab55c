#version 450
/*
 * attention_frag_bwd.comp - the 16-bit attention backward on the cooperative-matrix tiling
 * without the matrix instruction (variant attention_lowp_frag, chosen only by name; and
 * attention_lowp_coopmat's bf16 where the device has no bf16 matrices): fp32 shared memory
 * and multiply-adds. attention_frag_bwd.glsl has the tiling.
 */
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_16bit_storage : require
#define LOWP_FLOAT
#include "attention_frag_bwd.glsl"
