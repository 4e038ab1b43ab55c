/* vkt - the vktrain command line. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "platform/platform.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: vkt <command> [options]\n"
            "\n"
            "commands:\n"
            "  train              train a model (vkt train --help for options)\n"
            "  export             a checkpoint's parameters as safetensors\n"
            "                     (--checkpoint-dir DIR -o FILE)\n"
            "  devices            list Vulkan devices and their limits\n"
            "  bench gemm         GEMM GFLOP/s at 256..2048 with a correctness check\n"
            "                     (--mlp: an MLP training step's GEMMs; --shape M,N,K,ta,tb,beta)\n"
            "  bench train        MLP training step time vs its GEMMs alone (the ratio)\n"
            "  bench parallel     data-parallel samples/s (1, 2, 4 replicas, sync and async),\n"
            "                     averaging GB/s vs memcpy, waiting for a slowed replica\n"
            "  bench layers       per-op forward and backward times of the CNN and the\n"
            "                     character transformer (--model cnn|charlm)\n"
            "  plot LOGDIR        loss and accuracy curves of vkt train --logdir to a PNG\n"
            "                     (-o FILE.png, default curves.png)\n"
            "  version            print the version\n"
            "  help               this text\n"
            "\n"
            "environment:\n"
            "  VKT_DEVICES=0,0    devices to use (an index may repeat: one replica each)\n"
            "  VKT_KERNELS=cpu|gpu[,variant...]  kernel style and forced variants (default:\n"
            "                     from the device; `vkt devices` lists them)\n"
            "  VKT_VALIDATION=1   enable the Khronos validation layer (sync: with its\n"
            "                     synchronization check)\n"
            "  VKT_CACHE_DIR=DIR  where the pipeline cache is kept (default ~/.cache/vktrain)\n");
}

static uint32_t g_rank, g_ranks = 1; /* this process in a multi-process job */

void cli_set_rank(uint32_t rank, uint32_t ranks)
{
    g_rank = rank;
    g_ranks = ranks;
}

static vkt_status g_last_failure;

vkt_status cli_last_failure(void) { return g_last_failure; }

int cli_fail(const char *what, vkt_status st, const char *msg)
{
    g_last_failure = st;
    if (g_ranks > 1)
        fprintf(stderr, "vkt: rank %u: %s: %s: %s\n", g_rank, what, vkt_status_name(st), msg);
    else
        fprintf(stderr, "vkt: %s: %s: %s\n", what, vkt_status_name(st), msg);
    return st == VKT_ERROR_TIMEOUT ? 3 : 1;
}

vkt_instance *cli_instance(void)
{
    vkt_instance *inst = NULL;
    vkt_status st = vkt_instance_create(NULL, &inst);
    if (st != VKT_OK) {
        cli_fail("cannot start Vulkan", st, vkt_last_error());
        return NULL;
    }
    return inst;
}

#if defined(__ELF__)
/* Which termination signals vkt was started with ignored (nohup), noted before any shared
 * library's constructor runs: the .preinit_array of an executable runs ahead of them all
 * (the ELF gABI), and on Debian 13 one of them (UCX's libucs, through Open MPI 5's libmpi)
 * replaces an ignored SIGHUP with a handler of its own. The training loop keeps such a
 * signal ignored (platform.h, plat_signals_note_start). */
static void note_start_signals(void) { plat_signals_note_start(); }
__attribute__((used, section(".preinit_array"))) static void (*const preinit_signals)(void) =
    note_start_signals;
#endif

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "devices") == 0)
        return cmd_devices(argc - 1, argv + 1);
    if (strcmp(cmd, "train") == 0)
        return cmd_train(argc - 1, argv + 1);
    if (strcmp(cmd, "export") == 0)
        return cmd_export(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0)
        return cmd_bench(argc - 1, argv + 1);
    if (strcmp(cmd, "plot") == 0)
        return cmd_plot(argc - 1, argv + 1);
    if (strcmp(cmd, "version") == 0) {
        printf("vkt %d.%d.%d\n", VKT_VERSION_MAJOR, VKT_VERSION_MINOR, VKT_VERSION_PATCH);
        return 0;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "vkt: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
