#version 450
/*
 * attention_coopmat_bwd_f16.comp - the fp16 attention backward on cooperative matrices
 * (variant attention_lowp_coopmat): attention_frag_bwd.glsl's tiles, S, dP, dQ (pass 1)
 * and S^T, dP^T, dK, dV (pass 2) multiplied by the matrix instruction into fp32
 * accumulators (VK_KHR_cooperative_matrix). Needs glslang 15 or newer: built by the shader
 * toolchain, shipped prebuilt (shaders/spv/, docs/toolchain.md).
 */
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#define LOWP_COOPMAT
#define LOWP_ELEM float16_t
#include "attention_frag_bwd.glsl"
