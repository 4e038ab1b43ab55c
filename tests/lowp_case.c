/* lowp_case.c - the cooperative-matrix rows' shared checks (lowp_case.h). */
#include "lowp_case.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int lowp_coopmat_runs(gpu_variant coopmat, const char *bf16_kernel, const char *bf16_fallback)
{
    const gpu_variant_row *row = gpu_variant_row_of(coopmat);
    const char *only = getenv("VKT_TEST_LOWP_ROWS");
    int required = only && strstr(only, row->name);
    vkt_context *probe = th_context(VKT_KERNELS_AUTO);
    char why[256];
    int runs = gpu_variant_runs(row, &probe->profile, why, sizeof why);
    if (!runs) {
        printf("  %s: skipped, not on '%s' (it lacks %s)\n", row->name, probe->profile.name,
               why);
        TH_CHECK(!required, "%s is required (VKT_TEST_LOWP_ROWS) but '%s' lacks %s",
                 row->name, probe->profile.name, why);
        TH_CHECK(strstr(why, "cooperative") != NULL,
                 "%s: only cooperative matrices may be missing (it lacks %s)", row->name, why);
    } else {
        const gpu_mat_shape *m = gpu_mat_for(&probe->profile, GPU_MAT_F16);
        printf("  %s: f16 matrices %ux%ux%u, subgroups of %u; bf16 through %s\n", row->name,
               m->m, m->n, m->k, probe->profile.subgroup_size,
               gpu_mat_for(&probe->profile, GPU_MAT_BF16) &&
                       (probe->profile.caps & GPU_CAP_BFLOAT16)
                   ? bf16_kernel
                   : bf16_fallback);
    }
    th_context_release(probe);
    return runs;
}

void lowp_check_choice(gpu_family family, gpu_variant coopmat, const gpu_profile *h100,
                       const gpu_profile *plain, gpu_variant plain_choice,
                       const gpu_profile *lvp26, gpu_variant cpu_choice)
{
    const char *name = gpu_variant_row_of(coopmat)->name;
    gpu_variant c[GPU_FAMILY_COUNT];
    TH_OK(NULL, gpu_choose_variants(h100, NULL, c, NULL));
    TH_CHECK(c[family] == coopmat, "H100 with cooperative matrices: %s chosen (%s)", name,
             gpu_variant_row_of(c[family])->name);
    TH_OK(NULL, gpu_choose_variants(plain, NULL, c, NULL));
    TH_CHECK(c[family] == plain_choice, "without cooperative matrices: %s (%s)",
             gpu_variant_row_of(plain_choice)->name, gpu_variant_row_of(c[family])->name);
    char why[256];
    TH_CHECK(!gpu_variant_runs(gpu_variant_row_of(coopmat), plain, why, sizeof why) &&
                 strstr(why, "cooperative matrices"),
             "%s without them: lacks '%s'", name, why);
    TH_OK(NULL, gpu_choose_variants(lvp26, NULL, c, NULL));
    TH_CHECK(c[family] == cpu_choice && gpu_variant_runs(gpu_variant_row_of(coopmat), lvp26,
                                                          NULL, 0),
             "lavapipe 26 (CPU style) runs %s unless told, and can run %s (%s)",
             gpu_variant_row_of(cpu_choice)->name, name, gpu_variant_row_of(c[family])->name);
}
