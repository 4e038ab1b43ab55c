#version 450
/* gemm_cpu.comp - the CPU-device GEMM with A, B and C as storage texel buffers
 * (imageLoad / imageStore). The kernel is in gemm_cpu.glsl. */
#extension GL_GOOGLE_include_directive : require
#define GEMM_STORAGE_TEXEL 1
#include "gemm_cpu.glsl"
