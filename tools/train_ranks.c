/* `vkt train` under mpirun: the options every rank must share, compared at start-up, before
 * any other collective. Which options are compared comes from train_options.c's table (its
 * `ranks` column, SAME unless an option says otherwise), so a new option is compared
 * unless it is marked as each rank's own. The chief's values go to every rank (one
 * broadcast of a fixed-size table), each rank compares them with its own, and a sum tells
 * every rank which options differ and on how many ranks; then every rank stops alike, with
 * status 2 (a usage error: another attempt with the same command cannot succeed), and no
 * rank is left waiting in a collective the others never reach. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "train.h"

#define SHOWN 48 /* characters of a value carried for the message */

/* One option's value on one rank: its exact hash, and text for the message. */
typedef struct slot {
    uint64_t hash;
    char text[SHOWN];
} slot;

/* The chief's table: which build of the option table (names, in order), then a slot per
 * option. Fixed-size, so the broadcast matches on every rank whatever its build. */
typedef struct table {
    uint64_t layout;
    slot opt[TRAIN_MAX_OPTIONS];
} table;

static int refused;

int train_ranks_refused(void) { return refused; }

static uint64_t layout_hash(void)
{
    uint64_t h = train_hash(0, "vkt train options", 17);
    for (size_t i = 0; i < train_option_count; i++)
        h = train_hash(h, train_options[i].name, strlen(train_options[i].name) + 1);
    return h;
}

static void fill(const train_args *a, table *t)
{
    memset(t, 0, sizeof *t);
    t->layout = layout_hash();
    for (size_t i = 0; i < train_option_count; i++) {
        const train_option *o = &train_options[i];
        if (o->ranks == TRAIN_RANKS_OWN)
            continue; /* hash 0 everywhere: never differs */
        t->opt[i].hash = train_option_hash(a, o);
        train_option_text(a, o, t->opt[i].text, sizeof t->opt[i].text);
    }
}

static int transport_failed(const train_args *a, vkt_status st)
{
    cli_fail("cannot compare the options of the ranks", st, vkt_world_errmsg(a->world));
    return 1;
}

/* "vkt: rank R: the ranks disagree on WHAT (DETAIL): ADVICE", from the chief (DETAIL: its
 * value and on how many ranks it differs) and from each rank that differs (its value and
 * the chief's); the other ranks stay silent. */
static void report(const train_args *a, const char *what, const char *here, const char *chief,
                   int differs, double n_differ, const char *advice)
{
    uint32_t rank = vkt_world_rank(a->world), ranks = vkt_world_size(a->world);
    if (rank == 0)
        fprintf(stderr, "vkt: rank 0: the ranks disagree on %s (%s on the chief; different on "
                "%.0f of the %u ranks): %s\n", what, chief, n_differ, ranks, advice);
    else if (differs)
        fprintf(stderr, "vkt: rank %u: the ranks disagree on %s (%s here, %s on the chief): "
                "%s\n", rank, what, here, chief, advice);
}

int train_ranks_agree(const train_args *a)
{
    if (vkt_world_size(a->world) < 2)
        return 0;
    table *mine = malloc(sizeof *mine), *chief = malloc(sizeof *chief);
    double *differ = calloc(TRAIN_MAX_OPTIONS + 1, sizeof *differ);
    if (!mine || !chief || !differ) {
        free(mine), free(chief), free(differ);
        return cli_fail("out of host memory", VKT_ERROR_OUT_OF_MEMORY, "");
    }
    fill(a, mine);
    *chief = *mine;
    int rc = 0;
    vkt_status st = vkt_world_broadcast(a->world, chief, sizeof *chief);
    if (st != VKT_OK)
        rc = transport_failed(a, st);
    /* [0]: another build of the table; [1 + i]: option i differs from the chief's */
    differ[0] = mine->layout != chief->layout;
    for (size_t i = 0; !rc && !differ[0] && i < train_option_count; i++)
        differ[1 + i] = mine->opt[i].hash != chief->opt[i].hash;
    if (!rc && (st = vkt_world_sum(a->world, differ, TRAIN_MAX_OPTIONS + 1)) != VKT_OK)
        rc = transport_failed(a, st);
    if (!rc && differ[0] > 0) {
        report(a, "the options vkt train takes", "another build", "another build",
               mine->layout != chief->layout, differ[0],
               "run the same build of vkt on every rank");
        rc = 2;
    }
    for (size_t i = 0; !rc && i < train_option_count; i++)
        if (differ[1 + i] > 0) {
            report(a, train_options[i].name, mine->opt[i].text, chief->opt[i].text,
                   mine->opt[i].hash != chief->opt[i].hash, differ[1 + i],
                   "start every rank with the same options (docs/distributed.md)");
            refused = 1;
        }
    if (refused)
        rc = 2;
    refused |= rc == 2;
    free(mine);
    free(chief);
    free(differ);
    return rc;
}

int train_ranks_same(const train_args *a, const char *what, uint64_t value)
{
    if (vkt_world_size(a->world) < 2)
        return 0;
    uint64_t chief = value;
    vkt_status st = vkt_world_broadcast(a->world, &chief, sizeof chief);
    if (st != VKT_OK)
        return transport_failed(a, st);
    double differ = chief != value;
    if ((st = vkt_world_sum(a->world, &differ, 1)) != VKT_OK)
        return transport_failed(a, st);
    if (differ == 0)
        return 0;
    char here_s[32], chief_s[32];
    snprintf(here_s, sizeof here_s, "fingerprint %016llx", (unsigned long long)value);
    snprintf(chief_s, sizeof chief_s, "fingerprint %016llx", (unsigned long long)chief);
    report(a, what, here_s, chief_s, chief != value, differ,
           "give every rank the same file (docs/distributed.md)");
    refused = 1;
    return 2;
}
