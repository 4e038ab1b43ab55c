/* test_readme_variants.c - README's kernel-variant table ("Variants chosen by what the
 * device offers": | family | variants, in order of preference |) against the compiled
 * table of engine/gpu/variants.c: one README row per family, in the families' order;
 * each row names every variant of its family (a `name` in backticks that is a variant's
 * name), in the table's order of preference, and no variant of another family; and what
 * it says of each one's style agrees with the row: "(cpu: ..." or "(cpu)" for a variant
 * of the cpu style only, "(gpu: ..." for the gpu style only, "by name only" in its parenthesis for
 * a variant of neither, nothing of the kind for one of both. Needs no device. The README
 * is found through VKT_SOURCE_DIR (set by CMake). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "gpu/gpu.h"

#ifndef VKT_SOURCE_DIR
#error "VKT_SOURCE_DIR: the source tree (tests/CMakeLists.txt sets it)"
#endif

#define MAX_README (1u << 20)

static char *read_readme(void)
{
    FILE *f = fopen(VKT_SOURCE_DIR "/README.md", "rb");
    if (!f)
        return NULL;
    char *text = malloc(MAX_README + 1);
    size_t n = text ? fread(text, 1, MAX_README, f) : 0;
    fclose(f);
    if (text)
        text[n] = '\0';
    return text;
}

/* The variant named by the n bytes at s, or GPU_V_NONE. */
static gpu_variant variant_named(const char *s, size_t n)
{
    for (int v = 0; v < GPU_VARIANT_COUNT; v++) {
        const char *name = gpu_variant_row_of((gpu_variant)v)->name;
        if (strlen(name) == n && strncmp(name, s, n) == 0)
            return (gpu_variant)v;
    }
    return GPU_V_NONE;
}

/* The style README gives a variant from the text after its name up to the next variant
 * (or the row's end): GPU_STYLE_CPU, GPU_STYLE_GPU, 0 (by name only) or both. */
static uint32_t style_said(const char *after, size_t len)
{
    if (len >= 6 && strncmp(after, " (cpu", 5) == 0 && (after[5] == ':' || after[5] == ')'))
        return GPU_STYLE_CPU;
    if (len >= 6 && strncmp(after, " (gpu", 5) == 0 && (after[5] == ':' || after[5] == ')'))
        return GPU_STYLE_GPU;
    const char *by = strstr(after, "by name only");
    if (by && (size_t)(by - after) < len)
        return 0;
    return GPU_STYLE_CPU | GPU_STYLE_GPU;
}

static const char *style_text(uint32_t s)
{
    return s == GPU_STYLE_CPU ? "cpu" : s == GPU_STYLE_GPU ? "gpu" : s == 0 ? "by name only"
                                                                             : "both";
}

/* One README row "| family ... | variants |": checks it against family f. */
static void check_row(gpu_family f, const char *cell, size_t len)
{
    gpu_variant named[GPU_VARIANT_COUNT];
    const char *at[GPU_VARIANT_COUNT];
    uint32_t n = 0;
    for (const char *p = cell; p < cell + len && n < GPU_VARIANT_COUNT;) {
        const char *open = memchr(p, '`', (size_t)(cell + len - p));
        if (!open)
            break;
        const char *close = memchr(open + 1, '`', (size_t)(cell + len - open - 1));
        if (!close)
            break;
        gpu_variant v = variant_named(open + 1, (size_t)(close - open - 1));
        if (v != GPU_V_NONE) {
            named[n] = v;
            at[n++] = close + 1;
        }
        p = close + 1;
    }
    /* the family's variants in the compiled order */
    uint32_t k = 0;
    for (int v = 0; v < GPU_VARIANT_COUNT; v++) {
        const gpu_variant_row *row = gpu_variant_row_of((gpu_variant)v);
        if (row->family != f)
            continue;
        TH_CHECK(k < n && named[k] == (gpu_variant)v,
                 "README, family %s: variant %u should be `%s` (it names %s)",
                 gpu_family_name(f), k + 1, row->name,
                 k < n ? gpu_variant_row_of(named[k])->name : "nothing more");
        if (k < n && named[k] == (gpu_variant)v) {
            size_t rest = (size_t)((k + 1 < n ? at[k + 1] : cell + len) - at[k]);
            uint32_t said = style_said(at[k], rest);
            TH_CHECK(said == row->styles,
                     "README, family %s: `%s` is described as %s, the table's row is %s",
                     gpu_family_name(f), row->name, style_text(said), style_text(row->styles));
        }
        k++;
    }
    TH_CHECK(k == n, "README, family %s: names %u variants, the table has %u",
             gpu_family_name(f), n, k);
}

int main(void)
{
    th_init_host("test_readme_variants");
    char *text = read_readme();
    TH_CHECK(text != NULL, "read %s/README.md", VKT_SOURCE_DIR);
    if (!text)
        return th_finish();
    const char *head = "| family | variants, in order of preference |\n|---|---|\n";
    const char *table = strstr(text, head);
    TH_CHECK(table != NULL, "README has the kernel-variant table ('%.46s')", head);
    uint32_t rows = 0;
    int seen[GPU_FAMILY_COUNT] = {0};
    for (const char *line = table ? table + strlen(head) : NULL; line && line[0] == '|';) {
        const char *end = strchr(line, '\n');
        if (!end)
            end = line + strlen(line);
        /* "| family (note) | cell |" */
        const char *name = line + 2, *bar = memchr(name, '|', (size_t)(end - name));
        size_t name_len = strcspn(name, " |");
        int f = -1;
        for (int i = 0; i < GPU_FAMILY_COUNT; i++)
            if (strlen(gpu_family_name((gpu_family)i)) == name_len &&
                strncmp(gpu_family_name((gpu_family)i), name, name_len) == 0)
                f = i;
        TH_CHECK(f >= 0 && bar, "README's variant table: row %u names no family ('%.*s')",
                 rows + 1, (int)name_len, name);
        if (f >= 0 && bar) {
            TH_CHECK(f == (int)rows, "README's variant table: row %u is family %s, the table's "
                     "family %u is %s", rows + 1, gpu_family_name((gpu_family)f), rows + 1,
                     rows < GPU_FAMILY_COUNT ? gpu_family_name((gpu_family)rows) : "none");
            seen[f]++;
            check_row((gpu_family)f, bar + 1, (size_t)(end - bar - 1));
        }
        rows++;
        line = *end ? end + 1 : NULL;
    }
    for (int f = 0; f < GPU_FAMILY_COUNT; f++)
        TH_CHECK(seen[f] == 1, "README's variant table: family %s has %d rows",
                 gpu_family_name((gpu_family)f), seen[f]);
    printf("README: %u family rows checked against %d variants\n", rows, GPU_VARIANT_COUNT);
    free(text);
    return th_finish();
}
