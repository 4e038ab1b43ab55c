/*
 * exec_pipe.h - the pipeline executor's state (exec_pipe.c, layout.c, exec_pipe_eval.c):
 * D data-parallel copies of a P-stage pipeline (the engine, pipe.h) behind the trainer.
 * The trainer keeps one driving replica (rep[0]: the loader, the loss, the statistics; no
 * context of its own) and the engine's P x D contexts. Parameters and optimizer state are
 * seen through the layout one unpipelined model of the whole graph would have
 * (graph_flat_layout), so read_params, write_params and checkpoints are the same bytes
 * with or without stages, and a checkpoint restores with any stage count.
 */
#ifndef VKT_PARALLEL_EXEC_PIPE_H
#define VKT_PARALLEL_EXEC_PIPE_H

#include "parallel/exec.h"
#include "parallel/pipe.h"

typedef struct pipe_exec {
    vkt_pipeline *engine;
    uint32_t nodes;            /* graph nodes at creation */
    uint64_t *off;             /* per node: its offset in the flat parameters of one
                                  unpipelined model (UINT64_MAX: not a parameter) */
    float *host;               /* [param_count]: the values of parameters no stage holds
                                  (the loss does not use them); scratch */
    vkt_feed *feeds;           /* the step's feeds (exec_ops.feed), n_feeds of cap */
    uint32_t n_feeds, cap_feeds;
    int feeds_null;            /*   given as NULL */
    struct pipe_eval *eval;    /* [TRAINER_MAX_EVAL] stage-wise evaluation chains */
    uint32_t n_eval;
    void *opt_host;            /* across ranks: the optimizer blob (one unpipelined model's)
                                  as of the last sync, for the stages of other ranks */
    uint64_t opt_host_bytes;
    uint64_t gen;              /* bumped whenever the parameters may change (a step, a write,
                                  a sync): across ranks an evaluation model loaded at this
                                  generation is not loaded again (sampling text calls it per
                                  character) */
    struct {
        vkt_model *m;
        uint64_t gen;
    } loaded[TRAINER_MAX_EVAL];
} pipe_exec;

static inline pipe_exec *pipe_exec_of(const vkt_trainer *t) { return (pipe_exec *)t->ex; }

/* layout.c: the unpipelined layout, and the initial values of every parameter (those no
 * stage holds keep them); parameters and the optimizer blob through it (exec_ops). */
vkt_status pipe_layout_make(vkt_trainer *t);
void pipe_layout_free(pipe_exec *pe);
uint32_t pipe_layout_nodes(const vkt_trainer *t);
vkt_status pipe_layout_offset(const vkt_trainer *t, const vkt_tensor *p, uint64_t *off);
vkt_status pipe_layout_read(vkt_trainer *t, uint32_t copy, float *flat, uint64_t count);
vkt_status pipe_layout_write(vkt_trainer *t, const float *flat, uint64_t count);
vkt_status pipe_layout_read_param(vkt_trainer *t, const vkt_tensor *param, float *out,
                                  uint64_t count);
uint64_t pipe_layout_opt_size(vkt_trainer *t);
vkt_status pipe_layout_read_opt(vkt_trainer *t, void *blob, uint64_t bytes);
vkt_status pipe_layout_write_opt(vkt_trainer *t, const char *path, const void *blob,
                                 uint64_t bytes);
/* An evaluation model (whole graph, forward) loaded with copy 0's parameters. */
vkt_status pipe_layout_load_eval(vkt_trainer *t, vkt_model *m);

/* exec_pipe_eval.c: vkt_trainer_predict through the stages, each running its part of the
 * forward on its own context with the stage's parameters, a micro-batch of rows at a time
 * (so evaluation needs no more device memory per stage than training); *handled 0: the
 * output is not computed by the stages (not on the loss's path), use the whole graph. */
/* The stages' due updates run now (pipe_flush); on failure t's message. */
vkt_status pipe_exec_flush(vkt_trainer *t);
vkt_status pipe_exec_predict(vkt_trainer *t, const vkt_feed *feeds, uint32_t n_feeds,
                             uint32_t rows, const vkt_tensor *output, float *out,
                             int *handled);
void pipe_exec_eval_free(vkt_trainer *t);

/* exec_pipe_world.c: across ranks, after a fit or a step (collective; alone: nothing):
 * copy 0's stages' parameters and optimizer moments gathered into every rank's host
 * copies (pe->host, pe->opt_host), so the chief reads, evaluates and saves the whole
 * model as one process would. */
vkt_status pipe_exec_sync(vkt_trainer *t);
/* vkt_trainer_predict across ranks: the whole graph on this rank's context with the host
 * copies' parameters, in chunks of the training batch's rows (not the facade's 500: a
 * text sampler predicts one row at a time, and attention's arrays grow with the rows). */
vkt_status pipe_world_predict(vkt_trainer *t, const vkt_feed *feeds, uint32_t n_feeds,
                              uint32_t rows, const vkt_tensor *output, float *out);

#endif
