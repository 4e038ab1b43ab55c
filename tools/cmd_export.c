/* vkt export: the parameters of the newest valid checkpoint of a folder as a
 * safetensors file (F32, F16 or BF16 tensors by name: --dtype), for other frameworks. Corrupt newer
 * checkpoints it passes over are warned about on stderr, as vkt train does. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: vkt export --checkpoint-dir DIR -o FILE.safetensors [--dtype fp32|fp16|bf16]\n"
               "  writes the parameters of the newest valid checkpoint in DIR (from vkt train\n"
               "  --checkpoint-dir) as safetensors: tensors named as in the model, F32 (default),\n"
               "  F16 or BF16 rounded from the checkpoint's fp32 masters; a corrupt newer\n"
               "  checkpoint is named on stderr and skipped\n");
}

int cmd_export(int argc, char **argv)
{
    const char *dir = NULL, *out = NULL;
    vkt_dtype dtype = VKT_DTYPE_FP32;
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(k, "--help") == 0 || strcmp(k, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (!v || (strcmp(k, "--checkpoint-dir") != 0 && strcmp(k, "-o") != 0 &&
                   strcmp(k, "--dtype") != 0)) {
            fprintf(stderr, "vkt export: %s '%s'\n", v ? "unknown option" : "no value for", k);
            usage(stderr);
            return 2;
        }
        if (strcmp(k, "--dtype") == 0) {
            if (vkt_dtype_from_name(v, &dtype) != VKT_OK) {
                fprintf(stderr, "vkt export: --dtype '%s': not fp32, fp16 or bf16\n", v);
                return 2;
            }
        } else if (strcmp(k, "-o") == 0)
            out = v;
        else
            dir = v;
        i++;
    }
    if (!dir || !out) {
        usage(stderr);
        return 2;
    }
    uint64_t step = 0;
    char notes[CLI_NOTES_SIZE];
    vkt_status st =
        vkt_checkpoint_export_safetensors_v3(dir, out, dtype, &step, notes, sizeof notes);
    for (const char *line = notes; *line;) { /* each corrupt newer checkpoint, as train says */
        size_t n = strcspn(line, "\n");
        fprintf(stderr, "vkt: warning: %.*s; trying an older checkpoint\n", (int)n, line);
        line += n + (line[n] == '\n');
    }
    if (st != VKT_OK)
        return cli_fail("cannot export", st, vkt_last_error());
    printf("exported the parameters of step %llu to %s (%s)\n", (unsigned long long)step, out,
           vkt_dtype_name(dtype));
    return 0;
}
