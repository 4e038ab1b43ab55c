/*
 * model.h - a graph compiled for a context: the internals shared by compilation
 * (model.c), autodiff and scheduling (autodiff.c), the memory plan (plan.c), recording
 * (record_fwd.c, record_bwd.c), execution (run.c) and check mode (check.c). What the
 * layers above use of a model (graph_model_create, graph_model_flat, the recording hooks,
 * the step in two halves) is declared in runtime.h.
 */
#ifndef VKT_GRAPH_MODEL_H
#define VKT_GRAPH_MODEL_H

#include "graph/graph.h"
#include "graph/runtime.h"

/* Where a value lives. */
typedef enum mspace {
    MS_NONE = 0,
    MS_ARENA,  /* activations, gradients of non-parameters, saved and scratch values */
    MS_PARAMS, /* the flat parameter buffer */
    MS_GRADS,  /* the flat gradient buffer (the parameters' layout) */
    MS_INPUTS, /* inputs and labels, written by the host before a step */
    MS_CTRL    /* the host-visible control block (step counter, constant 1) */
} mspace;

/* Control block: its layout is shared with the shaders (shaders/ctrl.h). */
#include "ctrl.h"

#define ALIGN_ELEMS GRAPH_FLAT_ALIGN /* offsets of planned values: 64 bytes */

/* A value: a forward result, a gradient, or a saved or scratch array of one node. */
typedef struct mval {
    mspace space;
    uint64_t offset; /* elements, in its space's buffer */
    uint64_t count;
    int32_t alias;   /* shares the storage of that value (-1: its own) */
    int32_t first, last; /* arena values: first and last position touching it (roots) */
    int kept;        /* live to the end of the step (readable afterwards) */
    vkt_dtype dtype; /* its elements' type; offset and count stay in 4-byte units (the plan's
                        and the buffers'), model_view gives offsets in the type's elements */
} mval;

typedef struct mnode {
    int active;       /* computed by this model's forward */
    int needs_grad;   /* a gradient flows to it from the loss */
    uint32_t uses;    /* input slots of active nodes that read it */
    uint32_t level;   /* longest path from a leaf */
    int32_t val;      /* forward value (-1: fused away, or inactive) */
    int32_t grad;     /* gradient value (-1: none) */
    int32_t aux;      /* saved for the backward: softmax-CE probabilities, pre-activation */
    int32_t tmp;      /* backward scratch: dz, or a contribution summed afterwards */
    int32_t fused_from; /* a fused node: the producer it absorbed (-1 none) */
    int32_t fused_into; /* an absorbed producer: the fused node that runs it (-1 none) */
    int32_t fpos, bpos; /* step positions (-1: none) */
    /* An autocast product (tensor dtype fp16/bf16): its operands cast to that type, x
     * (input 0) and w (input 1) by the forward and read again by the backward, and the
     * output's gradient cast by the backward (-1: none; autocast.c). lp_wb: a product's w
     * rounded again by the backward, where w is a parameter (then lp_w lives in the
     * forward alone, and no 16-bit weight waits for the backward). lp_y: attention's output
     * rounded for its backward (OPF_SAVES_Y16), so the fp32 y dies in the forward; y16_from:
     * the autocast product whose 16-bit x is that lp_y (it reads y as its x in the same
     * type, and its forward makes the copy), or -1 (the attention's forward casts y).
     * lp_xb: a product's 16-bit x rebuilt by its backward from the 16-bit pre-activation
     * of the fused linear+activation that makes x (OPF_REBUILD_X16), so lp_x lives in the
     * forward alone. */
    int32_t lp_x, lp_w, lp_dz, lp_wb, lp_y, y16_from, lp_xb;
    uint8_t acc[GRAPH_MAX_INPUTS]; /* backward: 1 adds to the input's gradient, 0 writes */
} mnode;

/* One step of the schedule: a node's forward or backward. */
typedef struct mstep {
    uint32_t node;
    int backward;
} mstep;

typedef struct model_hook {
    graph_record_fn fn;
    void *user;
} model_hook;

#define MODEL_MAX_HOOKS 4

struct vkt_model {
    vkt_context *ctx;
    vkt_graph *g;
    uint32_t n;               /* graph nodes at compilation */
    uint32_t batch;
    int batch_override;       /* inputs take `batch` as their first dimension */
    uint32_t row_offset;      /* the global row of batch row 0: dropout keys */
    vkt_tensor *loss;         /* NULL: no loss */
    int training;             /* has a backward */
    int check, no_reuse, no_fusion;
    /* GRAPH_MODEL_ACCUMULATE: every backward adds into the parameters' gradients (no
     * contribution writes them), so successive steps sum there until zero_grads; with
     * zero_pending the next training run first fills the gradient buffer with zeros, in
     * its own submission (`zero`, recorded once). check_prior: check mode's host copy of
     * the gradients before the run, which the reference adds to (check.c). */
    int accumulate, zero_pending;
    vkt_stream *zero;
    vkt_stream *ahead;        /* graph_model_run_ahead: the next run's first stream */
    float *check_prior;
    vkt_dtype precision;      /* autocast: the matrix products' type (fp32: none) */
    vkt_model *param_owner;   /* the model whose parameter buffer this one uses */
    vkt_model *grad_owner;    /* GRAPH_MODEL_SHARE_GRADS: the model whose gradient buffer
                                 (and zero_pending) this one uses; NULL: its own */
    /* Per node, or NULL: inputs whose gradient the backward computes into the arena and
     * keeps readable (a pipeline stage sends it back to the stage that produced the
     * input: graph_model_create, graph_model_read_input_grad). */
    uint8_t *grad_input;

    /* Per node: the op the model runs there. The graph's node, or a fused node the fusion
     * rewrite made (autodiff.c: a linear or conv2d and the activation that is its only
     * use become one node of op linear_act or conv_relu, in the activation's place, with
     * the producer's inputs; the producer is absorbed: no value, no step). Every pass
     * after the rewrite reads nodes through it. */
    const vkt_tensor **t;
    vkt_tensor *fused;        /* the rewrite's nodes (n of them at most) */
    vkt_tensor *cast;         /* the autocast rewrite's nodes, by id (autocast.c) */
    vkt_shape *shape;         /* per node, at this batch */
    uint64_t *count;
    uint8_t *batch_major;     /* per node: graph_batch_major */
    mnode *node;
    mval *val;
    uint32_t n_val, cap_val;
    uint32_t *order;          /* forward order of the active nodes */
    uint32_t n_order;
    mstep *steps;             /* forward steps, then backward steps */
    uint32_t n_steps, n_fwd_steps;

    uint64_t param_elems, input_elems, arena_elems, no_reuse_elems;
    uint64_t train_elems;     /* the trainable parameters: the first of param_elems */
    uint32_t arena_values;
    vkt_buffer *params, *grads, *arena, *inputs, *staging, *ctrl;
    /* Check mode: a copy of every arena value, taken right after each step that writes
     * it (before the plan may give its memory to another value), at snap_off[root]
     * elements; the check reads these, so it runs with memory reuse on. */
    vkt_buffer *snap;
    uint64_t *snap_off;
    int inputs_staged;        /* inputs go through `staging` and a recorded copy */
    /* Where the arena is not host-mapped (a discrete GPU): the kept values and the input
     * gradients (what a pipeline stage sends on) are copied into the host-visible
     * `readback` at the end of every recorded run, in the same submission, so reading
     * them is a memcpy, not a copy submitted and waited for. Per node, its value's and
     * its input gradient's offset there (UINT64_MAX: not copied); NULL: no readback. */
    vkt_buffer *readback;
    uint64_t *rb_val, *rb_grad;
    int loss_staged;          /* the loss is copied into the control block */

    vkt_stream *train, *eval;
    vkt_stream *train_fwd;    /* the training forward alone (graph_model_forward_train) */
    int train_fwd_recorded;
    vkt_stream *hooks_stream; /* check mode: the epilogue hooks, run after the check */
    int train_recorded, eval_recorded;
    vkt_stream *half[2];      /* the training step's forward and backward halves */
    int half_recorded[2];
    int half_pending;         /* step_forward ran and nothing since: step_backward may */
    graph_run_with with;      /* the next run's companions (graph_model_run_with) */
    vkt_stream *inflight;     /* a run submitted with no_wait, not yet waited for */
    uint8_t *dev_fed;         /* [n] or NULL: inputs written on the device (graph_model_
                                 device_io): the staged copy leaves them alone */
    int has_with;
    vkt_stream_stats train_stats, eval_stats;
    uint64_t step;
    model_hook hooks[MODEL_MAX_HOOKS];
    uint32_t n_hooks;
    graph_grad_fn grad_ready;  /* called as each parameter's gradient becomes final */
    void *grad_ready_user;
    int32_t corrupt_node;     /* test hook: the node whose output is corrupted (-1) */
    int32_t debug_drop_access; /* test hook: graph_model_debug_drop_access's node (-1) */
    char errmsg[VKT_ERRMSG_SIZE];
};

/* ---- for other engine code (the layers above see graph/runtime.h only) ---- */

/* The training step's stream (recorded on first use): for stats and timings. */
vkt_status graph_model_train_stream(vkt_model *m, vkt_stream **out);

/* Test hook (check mode): after `t`'s forward, overwrite its first element with a wrong
 * value. Only before the first step. */
vkt_status graph_model_debug_corrupt(vkt_model *m, const vkt_tensor *t);

/* ---- compilation internals ---- */

vkt_status model_fail(vkt_model *m, vkt_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Copies the context's message after a failed kernel call. */
vkt_status model_ctx_fail(vkt_model *m, vkt_status st);
/* A new value of `count` elements in `space`; returns its index or -1 (out of memory). */
int32_t model_new_value(vkt_model *m, mspace space, uint64_t count);
/* The same holding `elems` elements of type dtype (count: the 4-byte units they take). */
int32_t model_new_typed(vkt_model *m, mspace space, vkt_dtype dtype, uint64_t elems);
/* The value whose storage v uses (follows aliases). */
int32_t model_root(const vkt_model *m, int32_t v);
vkt_view model_view(const vkt_model *m, int32_t v);
/* Records the copy of the staged inputs (inputs_staged) into s: the whole buffer, or each
 * input the host writes (not dev_fed). */
vkt_status model_record_staged_inputs(vkt_model *m, vkt_stream *s);

/* autodiff.c: activity, gradients, fusion, schedule, values, accumulate flags. */
vkt_status model_analyze(vkt_model *m);
/* The j-th input slot whose gradient the backward of `src` (the node, or the linear
 * fused into it) writes: products go in reverse (bias, dW, dX), the others in order.
 * The write/add flags are given in this order and record_bwd.c follows it. */
uint32_t model_slot(const vkt_tensor *src, uint32_t j);
/* autocast.c: the rewrite (after fusion: every OPF_AUTOCAST node computes in m->precision,
 * through m->cast), and the casts' values of node i: forward (lp_x, lp_w) and backward
 * (lp_dz). */
vkt_status model_autocast(vkt_model *m);
vkt_status model_autocast_values(vkt_model *m, uint32_t i, int backward);
/* Whether node i (an OPF_SAVES_X16 norm) keeps its input for the backward as a 16-bit copy:
 * a training model in fp16/bf16 whose backward runs at i. */
int model_saves_x16(const vkt_model *m, uint32_t i);
/* Whether node i (OPF_SAVES_Y16: attention) keeps its output for the backward as a 16-bit
 * copy: an autocast node of a training model whose backward runs at i and reads y. */
int model_saves_y16(const vkt_model *m, uint32_t i);
/* The fused linear+activation whose 16-bit pre-activation rebuilds autocast product i's
 * 16-bit x (OPF_REBUILD_X16; autocast.c), or -1. */
int32_t model_x16_source(const vkt_model *m, uint32_t i);
/* plan.c: liveness and offsets of the arena values. Positions count dispatches within
 * steps, PLAN_PHASES per step (a linear's backward has three dispatches). */
#define PLAN_PHASES 3
vkt_status model_plan(vkt_model *m);
/* An access list being built for the plan: value, write flag, and the phase of the step
 * (the dispatch within it) that makes the access. More accesses than cap is an error
 * the plan reports (overflow), never a silent drop. */
typedef struct acc_list {
    int32_t *vals;
    int *writes, *phases;
    uint32_t n, cap;
    int overflow;
} acc_list;
void plan_add(acc_list *l, int32_t v, int write, int phase);
/* Input k's gradient value if the backward writes it, else -1. */
int32_t plan_in_grad(const vkt_model *m, const vkt_tensor *t, uint32_t k);
/* The generic backward step of node i: reads its gradient and what the op's entry says
 * (backward_reads), writes its inputs' gradients and its workspace, all in phase 0. */
void plan_generic_backward(const vkt_model *m, uint32_t i, acc_list *l);
/* The values a step reads and writes and the phase (dispatch within the step) of each
 * access, for liveness; returns how many. Must cover what record_*.c touch. */
uint32_t model_step_access(const vkt_model *m, const mstep *s, int32_t *vals, int *writes,
                           int *phases, uint32_t cap, int *overflow);

/* plan_check.c: the plan checked against what a step's recording touches. Between begin
 * and end the stream reports every access of the step's commands; end returns
 * VKT_ERROR_INTERNAL (the model's message naming the op) if one fell outside the plan. */
enum { PLAN_WATCH_CAP = GRAPH_MAX_INPUTS * 2 + 16 };
typedef struct plan_watch {
    vkt_model *m;
    uint32_t step;
    int32_t vals[PLAN_WATCH_CAP];
    int writes[PLAN_WATCH_CAP], phases[PLAN_WATCH_CAP];
    uint32_t n;
    vkt_status st;
} plan_watch;
void plan_watch_begin(plan_watch *w, vkt_model *m, vkt_stream *s, uint32_t step);
vkt_status plan_watch_end(plan_watch *w, vkt_stream *s);
/* Test hook: the plan check forgets the last access of node t's steps, so recording
 * must fail. Only before the first step. */
vkt_status graph_model_debug_drop_access(vkt_model *m, const vkt_tensor *t);

/* record.c */
/* `training` of model_record_forward: 0 evaluation, 1 training, or a training forward
 * whose states stay as they are (op_rec.keep_state). */
#define MODEL_FWD_TRAIN_KEEP_STATE 2
vkt_status model_record_forward(vkt_model *m, vkt_stream *s, uint32_t node, int training);
vkt_status model_record_backward(vkt_model *m, vkt_stream *s, uint32_t node);

/* run.c: writes the step and the row base (row_offset) into the control block before a
 * run. */
void model_write_ctrl(vkt_model *m);

/* check.c: compares every op of the last run with its CPU reference. */
/* Check mode after a run: its forward values (dropout drawn when training;
 * MODEL_CHECK_FWD) and, after a backward, its gradients (MODEL_CHECK_BWD) against the
 * references. */
enum { MODEL_CHECK_FWD = 1, MODEL_CHECK_BWD = 2 }; /* model_check's parts */
vkt_status model_check(vkt_model *m, int training, int parts);

/* A shape seen as [outer, dims[axis], inner]. */
void model_axis3(const vkt_shape *s, uint32_t axis, uint32_t *outer, uint32_t *len,
                 uint32_t *inner);
/* Rows and columns of a node's shape seen as [rows, last dim]. */
void model_rows_cols(const vkt_shape *s, uint32_t *rows, uint32_t *cols);
/* A node's `units` (its elements, or attention's sequences) per batch row, 0 when it is
 * not batch-major (graph_row_shift at row 1): what dropout multiplies the control
 * block's row base by (CTRL_ROW0, written from row_offset before every run), so one
 * recorded step serves any row base (a pipeline stage's micro-batches). */
uint64_t model_row_units(const vkt_model *m, uint32_t node, uint64_t units);

#endif
