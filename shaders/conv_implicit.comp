#version 450
/*
 * conv_implicit.comp - the conv_implicit variant: conv_implicit.glsl on fp32 tensors.
 */
#extension GL_GOOGLE_include_directive : require
#include "conv_implicit.glsl"
