/* lowp_case.h - what the 16-bit kernel families' tests share about their
 * cooperative-matrix rows (test_conv_lowp.c, test_attention_lowp.c): whether this device
 * runs the row, the row's choice on stated devices, and the stated devices' rows of the
 * fragment-plan checks. */
#ifndef VKT_TESTS_LOWP_CASE_H
#define VKT_TESTS_LOWP_CASE_H

#include "harness.h"
#include "gpu/gpu.h"

/* A stated device whose fragment plans a test checks: its name, profile, the matrix shape
 * of the plans (NULL: the kernel without the matrix instruction), the warp's rows and the
 * subgroup size. */
typedef struct lowp_device {
    const char *name;
    const gpu_profile *p;
    const gpu_mat_shape *mat;
    uint32_t tm, sg;
} lowp_device;

/* Whether this device runs the cooperative-matrix row `coopmat`. If not: prints that it is
 * skipped and why, and checks that it is not required (VKT_TEST_LOWP_ROWS names it) and
 * that only cooperative matrices are missing. If so: prints its f16 matrices and how bf16
 * runs (`bf16_kernel` where the device has bf16 matrices, else `bf16_fallback`). */
int lowp_coopmat_runs(gpu_variant coopmat, const char *bf16_kernel, const char *bf16_fallback);

/* The choice in `family` on stated devices: h100 (with cooperative matrices, bf16 ones too)
 * chooses `coopmat`; plain (h100 without them) chooses `plain_choice`, and `coopmat` lacks
 * cooperative matrices there; lvp26 (lavapipe 26: CPU style, 8x8x8 matrices) chooses
 * `cpu_choice` unless told, and can run `coopmat`. */
void lowp_check_choice(gpu_family family, gpu_variant coopmat, const gpu_profile *h100,
                       const gpu_profile *plain, gpu_variant plain_choice,
                       const gpu_profile *lvp26, gpu_variant cpu_choice);

#endif /* VKT_TESTS_LOWP_CASE_H */
