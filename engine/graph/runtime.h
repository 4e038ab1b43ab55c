/*
 * runtime.h - what the layers above the graph (engine/parallel: trainers, replicas,
 * pipelines) may know of graphs, models and splits: ids, counts, names, shapes and opaque
 * pointers, never the structs behind them. It includes the public header only, so a file
 * that includes nothing else of engine/graph cannot read a node's fields; check_layers.sh
 * holds engine/parallel to this header (docs/architecture.md, "Layers").
 *
 * graph.h, model.h and stage.h include it: the functions are defined beside the
 * internals they read (runtime.c for the small walks over a graph).
 */
#ifndef VKT_GRAPH_RUNTIME_H
#define VKT_GRAPH_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "vkt.h"

#define GRAPH_MAX_STAGES VKT_MAX_STAGES

/* ---- graphs: nodes by id (runtime.c) ---- */

/* What a node is, as the layers above see it. */
typedef struct graph_node_info {
    uint32_t id;          /* position in the graph: inputs have smaller ids */
    const char *name;
    vkt_shape shape;      /* at the batch the graph was built with */
    uint64_t count;       /* elements of that shape */
    uint64_t row_elems;   /* elements of one row: the dimensions after the first */
    int param;            /* a parameter (vkt_param or vkt_state) */
    int state;            /*   that the optimizer does not train (vkt_state) */
    int fed;              /* an input or labels: data the caller feeds every step */
    int computed;         /* an op with inputs (not a leaf) */
} graph_node_info;

uint32_t graph_node_count(const vkt_graph *g);
/* Node `id` (NULL past the last). */
vkt_tensor *graph_node_at(const vkt_graph *g, uint32_t id);
/* t's id in g, or -1 when t is NULL or a tensor of another graph. */
int64_t graph_node_id(const vkt_graph *g, const vkt_tensor *t);
/* Node id's facts (id < graph_node_count). */
void graph_node_info_at(const vkt_graph *g, uint32_t id, graph_node_info *out);
/* 1 + the highest stage of an op of g (1 for a graph built without placement). */
uint32_t graph_placed_stages(const vkt_graph *g);
/* Sets needed[id] = 1 for t and every node t depends on (needed: one flag per node of g,
 * set by the caller to 0 or to what is needed already). */
void graph_mark_needed(const vkt_graph *g, const vkt_tensor *t, uint8_t *needed);

/* The flat parameter layout of one model of the first `nodes` nodes of g: trainable
 * parameters in node order, then states, each at a multiple of GRAPH_FLAT_ALIGN
 * elements (alignment gaps belong to no parameter). off[i] is node i's offset (UINT64_MAX:
 * not a parameter); *trained the elements before the first state, *total all. The one
 * rule of the layout: models (autodiff.c), checkpoints and pipelines all use it. */
#define GRAPH_FLAT_ALIGN 16 /* elements: 64 bytes */
void graph_flat_layout(const vkt_graph *g, uint32_t nodes, uint64_t *off, uint64_t *trained,
                       uint64_t *total);
/* Parameter node id's initial values (its initializer, deterministic for the graph's
 * seed): count elements into out. */
void graph_init_param_at(const vkt_graph *g, uint32_t id, float *out);
/* What processes training one model together compare: a hash of the ops with their
 * settings and shapes (random seeds left out: each rank's graph may draw its own), and
 * one of the parameters' names and shapes. */
void graph_signature(const vkt_graph *g, uint64_t *ops_hash, uint64_t *params_hash);

/* ---- compiled models (model.c, autodiff.c, run.c) ---- */

typedef vkt_status (*graph_record_fn)(vkt_stream *stream, void *user);
/* Records work on a parameter's final gradient: elements [offset, offset+count) of the
 * flat gradient buffer. */
typedef vkt_status (*graph_grad_fn)(vkt_stream *stream, void *user, uint64_t offset,
                                    uint64_t count);

/* vkt_model_create, plus the inputs (vkt_input nodes of the graph) whose gradients the
 * training step computes and keeps: n of them, each read afterwards with
 * graph_model_read_input_grad. A model parallel stage receives its inputs from another
 * stage and sends their gradients back. */
vkt_status graph_model_create(vkt_context *ctx, vkt_graph *g, vkt_tensor *loss,
                              const vkt_model_options *options,
                              const vkt_tensor *const *grad_inputs, uint32_t n,
                              uint32_t flags, vkt_model **out);
/* graph_model_create's flags. ACCUMULATE: the backward adds every contribution into the
 * parameters' gradients (none writes them), so the gradients of successive training steps
 * sum in the gradient buffer (fp32, in step order) until graph_model_zero_grads: a
 * pipeline stage sums its micro-batches there and reads the sum once per step. */
#define GRAPH_MODEL_ACCUMULATE 1u
/* SHARE_GRADS (with options.share_params, a training model of the same graph and
 * context, created with the same flags): a "slot" model. It shares that model's parameter
 * buffer (states included) and also its gradient buffer and its pending zeroing
 * (graph_model_zero_grads on either zeroes the one buffer), and has its own activation
 * arena, inputs and control block. Several slots of one model hold several training steps
 * in flight (graph_model_step_forward on each, then graph_model_step_backward in any
 * order), their gradients summing into the one buffer (ACCUMULATE). The owner must
 * outlive its slots. */
#define GRAPH_MODEL_SHARE_GRADS 2u
/* The next training step starts from zero gradients: its submission first fills the
 * gradient buffer with zeros (vkCmdFillBuffer, no round trip of its own). */
void graph_model_zero_grads(vkt_model *m);
/* The gradient the backward starts from, dloss/dloss: 1 unless set (fp16's dynamic loss
 * scaling multiplies every gradient by s; the optimizer divides it out). A model of
 * precision fp16 does not fuse its loss with its backward so that its backward reads it;
 * others may (their scale stays 1). Takes effect from the next step on. */
void graph_model_set_loss_scale(vkt_model *m, float s);
/* The gradient of the loss with respect to input t (one of graph_model_create's
 * grad_inputs) after the last training step: count must be its element count. */
vkt_status graph_model_read_input_grad(vkt_model *m, const vkt_tensor *t, float *out,
                                       uint64_t count);
/* The graph nodes the model was compiled with (the graph may have grown since). */
uint32_t graph_model_nodes(const vkt_model *m);
/* Every input or labels node the model computes from is among the n feeds; else
 * VKT_ERROR_INVALID_ARGUMENT naming the first one missing (in errmsg). */
vkt_status graph_model_check_fed(const vkt_model *m, const vkt_feed *feeds, uint32_t n,
                                 char *errmsg);

/* The flat parameter and gradient buffers (views at element 0) and their length. grads
 * is {NULL, 0} for a forward-only model. */
vkt_status graph_model_flat(vkt_model *m, vkt_view *params, vkt_view *grads, uint64_t *count);
/* Adds commands recorded at the end of every training step (after the backward), e.g.
 * an optimizer update. Only before the first step (the step is recorded once). */
vkt_status graph_model_add_epilogue(vkt_model *m, graph_record_fn fn, void *user);
/* Records fn for each parameter right after the backward step that completes its
 * gradient (parameters the loss does not reach: after the backward), so work on early
 * gradients (copying them out for averaging) overlaps the rest of the backward on
 * devices that run independent commands concurrently. Only before the first step. */
vkt_status graph_model_on_grad_ready(vkt_model *m, graph_grad_fn fn, void *user);
/* The training step in two halves, for callers that work while it runs (on marks that
 * grad_ready hooks record with gpu_stream_mark): submit, then wait. In check mode
 * submit runs the whole step (and marks count as passed). */
vkt_status graph_model_step_submit(vkt_model *m);
vkt_status graph_model_step_wait(vkt_model *m);
/* submit with the streams before[0..n) (NULL entries skipped; each recorded ending with
 * gpu_stream_barrier_all, on the model's context) run first in the same submission, so
 * one fence covers them and the step (gpu_stream_submit_after): a trainer's previous
 * update goes in with the next step. In check mode they run first on their own. */
vkt_status graph_model_step_submit_after(vkt_model *m, vkt_stream *const *before, uint32_t n);
/* The same with the streams after[0..n_after) run after the step (which ends with a
 * barrier over all its writes) and the submission ordered by timelines (gpu.h's
 * gpu_submit_sync; NULL: none): replicas averaging on their shared device. Not in check
 * mode (VKT_ERROR_INTERNAL). */
struct gpu_submit_sync;
vkt_status graph_model_step_submit_ext(vkt_model *m, vkt_stream *const *before, uint32_t n,
                                       vkt_stream *const *after, uint32_t n_after,
                                       const struct gpu_submit_sync *sync);
/* The training forward alone (no loss gradient, no backward, no epilogue), recorded on
 * first use: dropout drawn and batch normalization from the batch's statistics, as in
 * the training step, but states (batch norm's running averages) left as they are. A
 * pipeline stage runs it to send its values on, and its backward recomputes it in the
 * training step, which draws the same masks and moves the running averages: once per
 * micro-batch. The kept values are readable afterwards, as after vkt_model_forward. */
vkt_status graph_model_forward_train(vkt_model *m);
/* The global batch row of the model's row 0 from the next run on (dropout keys: element
 * i of a batch-major value draws the mask of the global index row * row elements + i);
 * it starts as vkt_model_options.row_offset. The control block carries it (shaders/
 * ctrl.h), so a recorded step serves every micro-batch (dropout and attention dropout). */
void graph_model_set_row_offset(vkt_model *m, uint32_t row);
/* The training step (vkt_model_forward_backward) in two halves, each a submission waited
 * for. step_forward: the inputs, the zeroing of the gradients if pending, the forward and
 * the loss, in training mode as the whole step (dropout drawn, batch norm's running
 * averages moved); the loss and kept values are readable afterwards. step_backward: the
 * inputs again (so inputs set in between, e.g. the gradient a pipeline stage receives for
 * its surrogate loss, are seen), the backward from the loss gradient, the gradient hooks
 * and the epilogue; input gradients are readable afterwards; the step index advances. The
 * plan's lifetimes hold across the cut (the halves are the step's forward and backward
 * steps; no fused kernel spans both); nothing else may run on the model in between: any
 * other run makes step_backward fail with VKT_ERROR_STATE. Together they compute the
 * whole step's bits. */
vkt_status graph_model_step_forward(vkt_model *m);
vkt_status graph_model_step_backward(vkt_model *m);
/* ---- a run's companions: device edges between pipeline stages on one VkDevice ---- */
/* fp32 views of count elements for device copies (a pipeline's device edges): where, after
 * a run, the value of t lies (a value vkt_model_read may read: kept, or an input) and the
 * gradient of input t (graph_model_read_input_grad's); and where input t goes before a
 * run (the buffer the run starts from, which vkt_model_set_input writes: staging where
 * inputs are staged). VKT_ERROR_STATE where the value cannot be read so (the reason in
 * the model's message). */
vkt_status graph_model_value_view(vkt_model *m, const vkt_tensor *t, vkt_view *out);
vkt_status graph_model_input_grad_view(vkt_model *m, const vkt_tensor *t, vkt_view *out);
vkt_status graph_model_input_view(vkt_model *m, const vkt_tensor *t, vkt_view *out);
/* Inputs in[0..n_in) are written on the device (by streams before its runs, into
 * graph_model_input_view, which is then the device buffer itself): the run's copy of the
 * staged inputs leaves them alone; and the values and input gradients of out[0..n_out)
 * are read on the device only: no run copies them into the host-visible readback. Passes
 * recorded already are recorded again at their next run. vkt_model_set_input and
 * vkt_model_read still work on them, through transfers of their own. */
vkt_status graph_model_device_io(vkt_model *m, const vkt_tensor *const *in, uint32_t n_in,
                                 const vkt_tensor *const *out, uint32_t n_out);
/* What the model's next run (any: a step, a half, a training forward) carries: streams
 * run before its commands (each ending with gpu_stream_barrier_all) and after them (each
 * starting with one), in its one submission, ordered by `sync` (NULL: none); once it is
 * submitted, before the host waits for it, submitted(user) (NULL: none), so that another
 * thread may submit what waits for its signal. For that run only; the arrays must live
 * until it returns. Not in check mode (that run fails with VKT_ERROR_STATE). */
struct gpu_submit_sync;
typedef struct graph_run_with {
    vkt_stream *const *before;
    uint32_t n_before;
    vkt_stream *const *after;
    uint32_t n_after;
    const struct gpu_submit_sync *sync;
    void (*submitted)(void *user);
    void *user;
    /* 1: the run returns once submitted; the model's next run, and every read or write of
     * its memory through this API (vkt_model_set_input, _loss, _read*, _write*,
     * graph_model_read_input_grad) first wait for it (graph_model_settle). */
    int no_wait;
    /* 1: the host writes nothing before this run: its control words come from a stream
     * before it (graph_model_record_ctrl), or stay as the model's last run left them, and
     * its inputs are written on the device; the run then waits for no run of the model
     * in flight (only its own pass's last run, as any replay does). */
    int ctrl_by_copy;
} graph_run_with;
/* The control words of a run at step `step` whose row 0 is the global row `row` (dropout
 * keys), as an image of GRAPH_CTRL_WORDS words for graph_model_record_ctrl, which records
 * their copy from `image` at byte `offset` into the model's control block (the other words
 * untouched). */
#define GRAPH_CTRL_WORDS 8
void graph_ctrl_image(uint64_t step, uint32_t row, uint32_t out[GRAPH_CTRL_WORDS]);
vkt_status graph_model_record_ctrl(vkt_model *m, vkt_stream *x, vkt_buffer *image,
                                   uint64_t offset);
/* vkt_model_set_input's checks of data for input or labels t (labels in range, token ids
 * in the vocabulary), without writing it: for data a stream copies in. */
vkt_status graph_model_check_input(vkt_model *m, const vkt_tensor *t, const void *data,
                                   uint64_t count);
void graph_model_run_with(vkt_model *m, const graph_run_with *w);
/* Stream x (ending with gpu_stream_barrier_all; NULL: none) goes first in m's next run
 * (any pass, with or without graph_model_run_with), in its one submission: ahead of the
 * pending zeroing of the gradients too, so x may read the gradients the previous runs
 * summed (a pipeline stage's update: pipe_sched.c). In check mode it runs alone first.
 * graph_model_ahead: x until that run was submitted (or ran), then NULL; a run that fails
 * before its submission leaves it there (the caller then takes it back with NULL). */
void graph_model_run_ahead(vkt_model *m, vkt_stream *x);
vkt_stream *graph_model_ahead(const vkt_model *m);
/* Waits for m's run submitted with no_wait, if one is in flight; its status (the model's
 * message on a failure). Models sharing buffers (slots) are settled one by one. */
vkt_status graph_model_settle(vkt_model *m);
int graph_model_in_flight(const vkt_model *m); /* such a run not yet waited for */
/* Whether m runs in check mode (vkt_model_options.check, or VKT_CHECK); whether a model
 * made with options.check = option would. */
int graph_model_checks(const vkt_model *m);
int graph_check_asked(int option);
/* Mark `index` of the running training step: 1 passed (or the step is over), 0 not yet,
 * -1 on an error (the model's message says it). */
int graph_model_mark_passed(vkt_model *m, uint32_t index);

/* ---- splits: a graph cut into pipeline stages (stage.c, stage.h) ---- */

typedef struct graph_stage {
    vkt_graph *g;          /* the stage's sub-graph (owned) */
    vkt_tensor *loss;      /* the loss (last stage) or the surrogate L_s */
    vkt_tensor **map;      /* full graph id -> its copy in g (NULL: not on this stage) */
    uint32_t ops;          /* ops of the full graph placed here */
    uint32_t *recv;        /* full graph ids of the values received (inputs of g) */
    uint32_t n_recv;
    uint32_t *send;        /* full graph ids of the values sent to later stages (kept) */
    vkt_tensor **send_grad; /* per sent value: the input of g fed its gradient */
    uint32_t n_send;
    uint32_t *feed;        /* full graph ids of the graph's inputs and labels read here */
    uint32_t n_feed;
    uint32_t *params;      /* full graph ids of the parameters (and states) placed here */
    uint32_t n_params;
} graph_stage;

typedef struct graph_split {
    const vkt_graph *g;
    uint32_t n_stages;
    graph_stage *stage;
    uint32_t *node_stage;  /* per full graph node: its stage (UINT32_MAX: not needed by
                              the loss; inputs and labels: the first stage reading it) */
    uint32_t nodes;        /* full graph nodes at the split (node_stage's length) */
    uint32_t batch;        /* the batch the graph was built with */
} graph_split;

/* Cuts g into n_stages sub-graphs by the nodes' stages. On failure returns the status
 * with a message in msg (naming the op or tensor) and leaves *out empty. */
vkt_status graph_split_stages(const vkt_graph *g, const vkt_tensor *loss, uint32_t n_stages,
                              graph_split *out, char *msg, size_t msg_size);
void graph_split_free(graph_split *s);

#endif
