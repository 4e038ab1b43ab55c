#version 450
/*
 * attention_flash.comp - the attention_flash variant: attention_flash.glsl on fp32 qkv
 * and dy.
 */
#extension GL_GOOGLE_include_directive : require
#include "attention_flash.glsl"
