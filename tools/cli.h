/* The vkt command: one file per subcommand, each a function of (argc, argv) that
 * returns the process exit code. Uses only the public API in vkt.h. */
#ifndef VKT_CLI_H
#define VKT_CLI_H

#include "vkt.h"

int cmd_devices(int argc, char **argv);
int cmd_bench(int argc, char **argv);
/* vkt bench train (cmd_bench_train.c): argv holds the options after "train". */
int cmd_bench_train(int argc, char **argv);
/* vkt bench parallel (cmd_bench_parallel.c): argv holds the options after "parallel". */
int cmd_bench_parallel(int argc, char **argv);
/* vkt bench layers (cmd_bench_layers.c): argv holds the options after "layers". */
int cmd_bench_layers(int argc, char **argv);
/* vkt bench allreduce (cmd_bench_allreduce.c), under mpirun: argv holds the options
 * after "allreduce". */
int cmd_bench_allreduce(int argc, char **argv);
int cmd_train(int argc, char **argv);
/* vkt export (cmd_export.c): a checkpoint's parameters as safetensors. */
int cmd_export(int argc, char **argv);
/* vkt plot LOGDIR -o FILE.png (cmd_plot.c): curves from vkt train --logdir's CSV. */
int cmd_plot(int argc, char **argv);

/* Bytes for the notes of the checkpoint calls (corrupt checkpoints passed over, ...):
 * each message is whole, those beyond it counted in a last line "... and N more like
 * these" (vkt_checkpoint_save_dir_v2). */
#define CLI_NOTES_SIZE 16384

/* A whole number string s (nothing after it), finite and in [lo, hi], into *out;
 * returns 0 otherwise. */
int cli_parse_double(const char *s, double lo, double hi, double *out);
/* A whole non-negative decimal integer s (digits only: no sign, spaces, fraction or
 * trailing text) in [lo, hi], into *out; returns 0 otherwise. */
int cli_parse_uint(const char *s, uint64_t lo, uint64_t hi, uint64_t *out);
/* Monotonic wall-clock seconds. */
double cli_now(void);
/* The shipped text for --model charlm (Pride and Prejudice, data/austen). */
const char *cli_default_text(void);
/* The data folder when --data is not given: $VKT_DATA_DIR, else the shipped digits of
 * the source tree the tool was built from, else data/mnist under the current folder. */
const char *cli_default_data_dir(void);

/* Prints "vkt: <what>: <status name>: <message>" to stderr ("vkt: rank R: ..." in a job
 * of several processes); returns the exit code: 3 for VKT_ERROR_TIMEOUT (a rank did not
 * take part in time), else 1. */
int cli_fail(const char *what, vkt_status st, const char *msg);
/* The status of the last cli_fail (VKT_OK if none). */
vkt_status cli_last_failure(void);
/* Names this process's rank in cli_fail's messages when ranks > 1. */
void cli_set_rank(uint32_t rank, uint32_t ranks);
/* Creates an instance, printing the error if it fails. */
vkt_instance *cli_instance(void);

#endif
