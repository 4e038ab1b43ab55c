#version 450
/*
 * attention_coopmat_bwd_bf16.comp - attention_coopmat_bwd_f16.comp on bfloat16 matrices
 * (variant attention_lowp_coopmat with bf16 q, k, v, where the device has
 * VK_KHR_shader_bfloat16 and a bf16 shape). Needs glslang 15.3 or newer (GL_EXT_bfloat16):
 * built by the shader toolchain, shipped prebuilt (shaders/spv/, docs/toolchain.md).
 */
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_bfloat16 : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#define LOWP_COOPMAT
#define LOWP_ELEM bfloat16_t
#include "attention_frag_bwd.glsl"
