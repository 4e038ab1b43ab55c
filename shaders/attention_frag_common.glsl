/*
 * attention_frag_common.glsl - what the fused attention's forward (attention_frag.glsl)
 * and backward (attention_frag_bwd.glsl) on warps of TM x TN fragments share, included
 * first by both: their headers, the workgroup and fragment constants (SPEC_ATTN_FRAG_*,
 * spec.h), the push constants, the element type SH_T of the shared 16-bit rows and their
 * strides LD (DP + PAD) and LDP (BN + PAD), widen and round16, the cooperative-matrix
 * fragment types (LOWP_COOPMAT). The includer declares its bindings, shared arrays,
 * staging and products (attention_frag.glsl states the tiling). Only declarations move
 * here: the SPIR-V of both, and of the prebuilt attention_coopmat_*.spv, is the same byte
 * for byte as when each file spelled them out.
 */
#extension GL_EXT_control_flow_attributes : require
#include "ctrl.h"
#include "dropout_hash.h"
#include "dtype.h"
#include "push_attention.h"
#include "spec.h"

layout(local_size_x_id = SPEC_WG) in;
layout(constant_id = SPEC_ATTN_FRAG_D) const uint D = 64;
layout(constant_id = SPEC_ATTN_FRAG_DP) const uint DP = 64;
layout(constant_id = SPEC_ATTN_FRAG_BN) const uint BN = 16;
layout(constant_id = SPEC_ATTN_FRAG_TM) const uint TM = 8;
layout(constant_id = SPEC_ATTN_FRAG_TN) const uint TN = 8;
layout(constant_id = SPEC_ATTN_FRAG_TK) const uint TK = 8;
layout(constant_id = SPEC_ATTN_FRAG_SG) const uint SG = 8;
layout(constant_id = SPEC_ATTN_FRAG_WARPS) const uint WARPS = 2;
layout(constant_id = SPEC_ATTN_FRAG_BF16) const bool BF16 = false;

const uint BM = WARPS * TM;          /* rows of a workgroup (the backward's block) */
const uint THREADS = WARPS * SG;
const uint FS = BN / TN;             /* score fragments per warp */
const uint FO = DP / TN;             /* output (accumulator) fragments per warp */
const uint PER_LANE = TM * TN / SG;  /* fragment elements per lane (twin) */

layout(push_constant) uniform Push { push_attention p; };

#if defined(LOWP_COOPMAT)
#define SH_T LOWP_ELEM
#define PAD 8u
#else
#define SH_T float
#define PAD 1u
#endif
const uint LD = DP + PAD, LDP = BN + PAD;

float widen(uint h) { return BF16 ? dtype_bf16_value(h) : dtype_f16_value(h); }

/* x rounded to the 16-bit type (nearest even), as an fp32 value */
float round16(float x)
{
    uint u = floatBitsToUint(x);
    return BF16 ? dtype_bf16_value(dtype_f32_to_bf16(u)) : dtype_f16_value(dtype_f32_to_f16(u));
}

#if defined(LOWP_COOPMAT)
#define ACC_T coopmat<float, gl_ScopeSubgroup, TM, TN, gl_MatrixUseAccumulator>
#define A_T coopmat<LOWP_ELEM, gl_ScopeSubgroup, TM, TK, gl_MatrixUseA>
#define B_T coopmat<LOWP_ELEM, gl_ScopeSubgroup, TK, TN, gl_MatrixUseB>
#endif
