#version 450
/*
 * attention_flash_lowp.comp - the attention_lowp_flash variant: attention_flash.glsl with
 * qkv and dy fp16 or bf16 (specialization constant BF16) in 16-bit storage, widened
 * exactly to fp32 as they are loaded (shaders/dtype.h); y, the row logsumexps, D, dqkv
 * and every sum fp32. The tiles, plans and indexing are attention_flash's.
 */
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_16bit_storage : require
#define ATTN_LOWP
#include "attention_flash.glsl"
