/* trainer_import.c - a trainer's parameters from a safetensors file, by name through a
 * name map (vkt_trainer_import_safetensors; docs/import.md). The file is read and checked
 * whole (engine/io/safetensors*.c) into a copy of the flat parameters before anything
 * changes; then every replica (or stage) gets it, as vkt_trainer_write_params gives it.
 * Across ranks the chief reads the file and sends the result, so the file need exist only
 * where the chief runs and every rank starts from the same bits. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/safetensors.h"
#include "parallel/trainer.h"

/* The parameters (and states) of the trainer's flat layout, by name. */
static vkt_status list_params(vkt_trainer *t, st_param **out, uint32_t *n)
{
    uint32_t nodes = trainer_flat_nodes(t), k = 0;
    st_param *p = calloc(nodes ? nodes : 1, sizeof *p);
    if (!p)
        return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    for (uint32_t id = 0; id < nodes; id++) {
        graph_node_info info;
        uint64_t off;
        graph_node_info_at(t->graph, id, &info);
        if (!info.param || trainer_param_offset(t, graph_node_at(t->graph, id), &off) != VKT_OK)
            continue;
        p[k++] = (st_param){.name = info.name, .shape = info.shape, .count = info.count,
                            .offset = off};
    }
    *out = p;
    *n = k;
    return VKT_OK;
}

/* The chief's part: the file through the map into flat (which holds the current values,
 * so parameters the map keeps and the layout's gaps stay as they are). */
static vkt_status read_into(vkt_trainer *t, const char *path, const vkt_import_options *o,
                            float *flat, st_result *res)
{
    st_map map;
    char why[VKT_ERRMSG_SIZE - 64];
    if (st_map_parse(o ? o->map : NULL, &map, why, sizeof why) != VKT_OK)
        return trainer_fail(t, VKT_ERROR_INVALID_ARGUMENT, "the name map, %s", why);
    st_param *params = NULL;
    uint32_t n = 0;
    st_file f;
    vkt_status st = list_params(t, &params, &n);
    if (st == VKT_OK)
        st = st_load(path, &f, t->errmsg);
    if (st == VKT_OK) {
        st = st_assign(&f, path, &map, params, n, flat, res, t->errmsg);
        st_free(&f);
    }
    free(params);
    st_map_free(&map);
    return st;
}

/* Across ranks: the chief's status, its counts and, when it succeeded, the parameters. */
static vkt_status share(vkt_trainer *t, vkt_status st, float *flat, st_result *res)
{
    if (!t->world)
        return st;
    uint32_t head[5] = {(uint32_t)st, res->loaded, res->transposed, res->kept, res->ignored};
    vkt_status cst = trainer_world_bcast(t, head, sizeof head);
    if (cst == VKT_OK && head[0] == VKT_OK)
        cst = trainer_world_bcast(t, flat, t->param_count * sizeof *flat);
    if (cst != VKT_OK)
        return cst;
    if (head[0] == VKT_OK && st != VKT_OK) /* this rank's own failure (reading its params) */
        return st;
    if (head[0] != VKT_OK)
        return t->rank == 0 ? st
                            : trainer_fail(t, VKT_ERROR_REMOTE, "the chief (rank 0) could not "
                                           "import a safetensors file (its message is in its "
                                           "output)");
    *res = (st_result){head[1], head[2], head[3], head[4]};
    return VKT_OK;
}

vkt_status vkt_trainer_import_safetensors(vkt_trainer *t, const char *path,
                                          const vkt_import_options *options,
                                          vkt_import_report *out_report)
{
    if (out_report)
        memset(out_report, 0, sizeof *out_report);
    if (!t || !path)
        return err_fail(t ? t->errmsg : NULL, VKT_ERROR_INVALID_ARGUMENT,
                        "vkt_trainer_import_safetensors: trainer and path are required");
    if (t->lost)
        return trainer_fail(t, VKT_ERROR_DEVICE_LOST, "%s", t->lost_msg);
    float *flat = malloc((t->param_count ? t->param_count : 1) * sizeof *flat);
    if (!flat)
        return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    st_result res = {0};
    vkt_status st = vkt_trainer_read_params(t, flat, t->param_count);
    if (st == VKT_OK && trainer_is_chief(t))
        st = read_into(t, path, options, flat, &res);
    st = share(t, st, flat, &res);
    if (st == VKT_OK)
        st = vkt_trainer_write_params(t, flat, t->param_count);
    free(flat);
    if (st == VKT_OK && out_report)
        *out_report = (vkt_import_report){.loaded = res.loaded, .transposed = res.transposed,
                                          .kept = res.kept, .ignored = res.ignored};
    return st;
}
