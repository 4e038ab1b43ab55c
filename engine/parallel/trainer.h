/*
 * trainer.h - internals of vkt_trainer: replicas (context, model, optimizer), feeding
 * global batches, evaluation models. The parallel layer: it knows models and
 * optimizers, not file formats.
 */
#ifndef VKT_PARALLEL_TRAINER_H
#define VKT_PARALLEL_TRAINER_H

#include "graph/model.h"

#define TRAINER_MAX_REPLICAS 64
#define TRAINER_MAX_EVAL 4      /* evaluation models cached, one per output tensor */
#define TRAINER_EVAL_BATCH 500  /* rows per evaluation chunk */

typedef struct eval_model {
    const vkt_tensor *output;
    vkt_model *model;
} eval_model;

typedef struct replica {
    uint32_t index;
    vkt_context *ctx;
    vkt_model *model;
    vkt_optimizer *opt;
    uint32_t row0, rows;        /* its share of the global batch */
    eval_model eval[TRAINER_MAX_EVAL];
    uint32_t n_eval;
} replica;

struct vkt_trainer {
    vkt_instance *inst;
    vkt_graph *graph;
    vkt_tensor *loss;
    vkt_trainer_options opt;
    vkt_optimizer_options optim;
    replica *rep;
    uint32_t n_rep;
    uint64_t steps;
    vkt_trainer_stats stats;
    char errmsg[VKT_ERRMSG_SIZE];
};

vkt_status trainer_fail(vkt_trainer *t, vkt_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Copies a model's or context's message into the trainer's after a failed call. */
vkt_status trainer_from_model(vkt_trainer *t, const vkt_model *m, vkt_status st);

/* Bytes of one row (batch dimension 1) of an input of model m. */
vkt_status trainer_row_bytes(vkt_trainer *t, vkt_model *m, const vkt_tensor *input,
                             uint64_t *out);
/* Writes rows [row0, row0+rows) of every feed into the model's inputs; checks that
 * every input the model computes from is fed. */
vkt_status trainer_feed(vkt_trainer *t, vkt_model *m, const vkt_feed *feeds, uint32_t n,
                        uint32_t row0, uint32_t rows, uint32_t pad_to);

#endif
