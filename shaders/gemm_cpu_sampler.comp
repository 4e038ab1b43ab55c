#version 450
/* gemm_cpu_sampler.comp - the CPU-device GEMM with A and B as uniform texel buffers
 * (texelFetch) and C as a storage buffer: the fallback for devices whose R32F or
 * RGBA32F formats lack storage-texel-buffer support. The kernel is in gemm_cpu.glsl. */
#extension GL_GOOGLE_include_directive : require
#define GEMM_STORAGE_TEXEL 0
#include "gemm_cpu.glsl"
