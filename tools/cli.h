/* The vkt command: one file per subcommand, each a function of (argc, argv) that
 * returns the process exit code. Uses only the public API in vkt.h. */
#ifndef VKT_CLI_H
#define VKT_CLI_H

#include "vkt.h"

int cmd_devices(int argc, char **argv);
int cmd_bench(int argc, char **argv);
/* vkt bench train (cmd_bench_train.c): argv holds the options after "train". */
int cmd_bench_train(int argc, char **argv);
int cmd_train(int argc, char **argv);

/* Prints "vkt: <what>: <status name>: <message>" to stderr; returns 1. */
int cli_fail(const char *what, vkt_status st, const char *msg);
/* Creates an instance, printing the error if it fails. */
vkt_instance *cli_instance(void);

#endif
