/* vkt train --init-from FILE [--init-map FILE|torch] (docs/import.md): the trainer's
 * parameters from a safetensors file before the first step, through a name map read from
 * a file or built in (torch_map.c). A run resumed from --checkpoint-dir keeps the
 * checkpoint's parameters: the file is not read then. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "platform/platform.h"
#include "train.h"

#define MAP_BYTES (1u << 20) /* a map file's size limit: thousands of lines */

/* The map's text for --init-map (NULL: none) into *text (malloc'd); 0 on failure, the
 * message printed. */
static int map_text(const train_args *a, const cli_torch_model *tm, char **text)
{
    *text = NULL;
    if (!a->init_map)
        return 1;
    if (!strcmp(a->init_map, "torch")) {
        *text = malloc(64 * 1024 + (size_t)tm->layers * 1024);
        if (*text && cli_torch_map(tm, *text, 64 * 1024 + (size_t)tm->layers * 1024))
            return 1;
        free(*text);
        *text = NULL;
        return !cli_fail("--init-map torch", VKT_ERROR_INTERNAL, "the built-in map does not fit");
    }
    void *data = NULL;
    size_t size = 0;
    if (plat_read_file(a->init_map, &data, &size) != 0) {
        fprintf(stderr, "vkt: --init-map: cannot read the name map '%s' (a file of 'PARAM "
                "TENSOR [transpose]' lines, or 'torch')\n", a->init_map);
        return 0;
    }
    if (size > MAP_BYTES || memchr(data, '\0', size)) {
        fprintf(stderr, "vkt: --init-map: '%s' is not a name map (%s)\n", a->init_map,
                size > MAP_BYTES ? "larger than 1 MiB" : "it holds a NUL byte");
        free(data);
        return 0;
    }
    *text = malloc(size + 1);
    if (*text) {
        memcpy(*text, data, size);
        (*text)[size] = '\0';
    }
    free(data);
    return *text != NULL || !cli_fail("--init-map", VKT_ERROR_OUT_OF_MEMORY, "");
}

int train_init_from(const train_args *a, vkt_trainer *tr, const cli_torch_model *tm, int resumed)
{
    if (!a->init_from)
        return 1;
    int chief = vkt_world_is_chief(a->world);
    if (resumed) {
        if (chief)
            printf("--init-from '%s' not applied: the run resumed from its checkpoint\n",
                   a->init_from);
        return 1;
    }
    char *text = NULL;
    /* the chief alone reads the file and the map (the library sends the values) */
    if (chief && !map_text(a, tm, &text))
        return 0;
    vkt_import_options io = {.map = text};
    vkt_import_report rep;
    vkt_status st = vkt_trainer_import_safetensors(tr, a->init_from, &io, &rep);
    free(text);
    if (st != VKT_OK) {
        char what[64 + 1024];
        snprintf(what, sizeof what, "cannot start from --init-from '%.1000s'", a->init_from);
        cli_fail(what, st, vkt_trainer_errmsg(tr));
        return 0;
    }
    if (chief) { /* as "resumed from step N": printed with --quiet too */
        printf("initialized from '%s': %u parameters", a->init_from, rep.loaded);
        if (rep.transposed)
            printf(" (%u transposed)", rep.transposed);
        if (rep.kept)
            printf(", %u kept their initial values", rep.kept);
        if (rep.ignored)
            printf(", %u tensors of the file left unused", rep.ignored);
        printf("\n");
        fflush(stdout);
    }
    return 1;
}
