/*
 * graph.h - the graph layer's internals: tensors (nodes), the op table, shape rules and
 * the CPU reference of every op. The model side (autodiff, memory plan, recording,
 * check mode) is in model.h.
 */
#ifndef VKT_GRAPH_GRAPH_H
#define VKT_GRAPH_GRAPH_H

#include "gpu/gpu.h"
#include "graph/ops.h"
#include "graph/runtime.h"
#include "kernels/kernel_util.h"

#define GRAPH_NAME_SIZE VKT_NAME_SIZE /* a node's name, as vkt_tensor_info reports it */
#define GRAPH_MAX_INPUTS 32 /* inputs of one node (vkt_concat) */



struct vkt_tensor {
    vkt_graph *graph;
    uint32_t id;          /* position in the graph: inputs always have smaller ids */
    graph_op op;
    vkt_shape shape;      /* at the batch the graph was built with */
    int is_int;           /* int32 elements (labels) */
    /* The element type its op computes in: fp32, except a matrix product the model's
     * autocast rewrite (autocast.c) gives the model's 16-bit precision. Its values stay
     * fp32; the product's operands are cast (model.h: mnode.lp_x, lp_w, lp_dz). */
    vkt_dtype dtype;
    int keep;             /* vkt_keep */
    int state;            /* a parameter the optimizer does not train (vkt_state) */
    uint32_t n_in;
    vkt_tensor **in;      /* n_in inputs (in_inline or heap) */
    vkt_tensor *in_inline[3];
    char name[GRAPH_NAME_SIZE];
    graph_params p;       /* the op's parameters (ops.h) */
    vkt_init init;        /* parameters: the initializer */
    uint32_t stage;       /* pipeline stage (vkt_graph_set_stage when built; 0 default) */
};

struct vkt_graph {
    vkt_tensor **nodes;
    uint32_t count, cap;
    uint64_t seed;
    uint32_t stage;       /* the stage new nodes are placed on (vkt_graph_set_stage) */
    vkt_status status;
    char errmsg[VKT_ERRMSG_SIZE];
};

/* ---- building (graph.c) ---- */

/* Records the graph's first error (later ones are dropped); returns NULL. */
vkt_tensor *graph_fail(vkt_graph *g, vkt_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Checks that the graph is usable and the n inputs are non-NULL tensors of it; records
 * an error naming `fn` otherwise. Returns 1 if the op may be built. */
int graph_check_inputs(vkt_graph *g, const char *fn, vkt_tensor *const *in, uint32_t n);
/* Appends a node (shape and parameters filled by the caller's template); its shape is
 * inferred with the op's shape rule. Returns NULL (error recorded) on failure. */
vkt_tensor *graph_add(vkt_graph *g, const char *fn, const vkt_tensor *tmpl,
                      vkt_tensor *const *in, uint32_t n_in);

/* ---- shapes (shapes.c) ---- */

/* Element count and "[3,1,5]" ("[]" for a scalar): the kernel layer's, one definition. */
#define graph_count ku_shape_count
#define GRAPH_SHAPE_STR KU_SHAPE_STR
#define graph_shape_str ku_shape_str
int graph_shape_eq(const vkt_shape *a, const vkt_shape *b);
/* The output shape of node n given its inputs' shapes. On failure writes a message
 * (naming `fn`, the op, and the shapes) into msg and returns VKT_ERROR_SHAPE or
 * VKT_ERROR_INVALID_ARGUMENT. */
vkt_status graph_infer_shape(const vkt_tensor *n, const vkt_shape *const *in,
                             vkt_shape *out, char *msg, size_t msg_size);
/* Whether node n's elements are laid out by batch row (row 0's elements first, each row
 * count / batch of them), given that flag (0/1) of every earlier node by id: inputs and
 * labels are, parameters are not, and ops keep it except losses, transposes, and sums,
 * means, concatenations and splits along axis 0 (or all axes). Dropout in a model that
 * holds rows [row_offset, row_offset + batch) of a global batch keys the elements of
 * such a node by their index in the global batch; other nodes keep their own indices,
 * as they hold the same values in every part of a split batch. */
int graph_batch_major(const vkt_tensor *n, const uint8_t *batch_major);
/* graph_mark_needed: runtime.h. */
/* The global index of the first of `units` (elements, or sequences for attention) of a
 * node at `batch` rows: row_offset * units / batch when the node is batch-major and
 * units a multiple of batch, else 0. */
uint64_t graph_row_shift(int batch_major, uint32_t row_offset, uint32_t batch, uint64_t units);
/* The API function that builds op n ("vkt_matmul"), for messages. */
const char *graph_op_fn(const vkt_tensor *n);
/* Short op name ("matmul", "relu", "log_softmax"). */
const char *graph_op_name(const vkt_tensor *n);

/* ---- parameter initialization (init.c) ---- */

/* Fills a parameter of `shape` from its initializer, deterministic for the seed. */
void graph_init_param(const vkt_tensor *param, uint64_t graph_seed, float *out);
/* The seed of a parameter's initializer: its own (vkt_init.seed), else one made from the
 * graph's seed and the parameter's id (so a copy of the parameter in another graph, a
 * pipeline stage's, starts from the same values when given this seed). */
uint64_t graph_init_seed(const vkt_tensor *param, uint64_t graph_seed);

/* ---- CPU reference of one op, in double (ops_ref.c, ops_ref_bwd.c) ---- */

typedef struct graph_ref_args {
    const vkt_tensor *node;
    uint32_t n_in;
    const vkt_shape *in_shape[GRAPH_MAX_INPUTS];
    vkt_shape out_shape;
    const double *in[GRAPH_MAX_INPUTS]; /* labels as exact integers */
    double *out;
    /* backward: dout is the gradient of the output; din[k] (NULL where not wanted) are
     * accumulated into (+=). */
    const double *dout;
    double *din[GRAPH_MAX_INPUTS];
    uint64_t step;  /* dropout */
    int training;   /* dropout on */
    /* dropout keys (graph_row_shift): the global row of batch row 0, the batch, and
     * whether the node is batch-major (graph_batch_major) */
    uint32_t row_offset, batch;
    int batch_major;
} graph_ref_args;

/* Through the op table (ops.c). Batch normalization in training mode also updates its
 * running averages (inputs 3 and 4) in place, as the device does. */
void graph_ref_forward(const graph_ref_args *a);
void graph_ref_backward(const graph_ref_args *a);
/* Scalar activation and its derivative, in double (the formulas of common.glsl). */
double graph_ref_act(vkt_unary_op op, double alpha, double x);
double graph_ref_act_grad(vkt_unary_op op, double alpha, double x);

/* ---- CPU reference of a whole graph (ref_graph.c): used by tests ---- */

typedef struct graph_ref {
    const vkt_graph *g;
    uint32_t n;          /* nodes */
    vkt_shape *shape;    /* per node, at the batch */
    uint64_t *count;
    double **val;        /* per node */
    double **grad;       /* per node, after graph_ref_run_backward */
    uint64_t step;
    int training;
    uint32_t batch;        /* the batch of the shapes */
    uint32_t row_offset;   /* the global row of batch row 0 (dropout keys); 0 after init */
    uint8_t *batch_major;  /* per node: graph_batch_major */
} graph_ref;

/* Shapes at `batch` (0 = as built); parameters from their initializers. */
vkt_status graph_ref_init(graph_ref *r, const vkt_graph *g, uint32_t batch, char *msg,
                          size_t msg_size);
void graph_ref_free(graph_ref *r);
void graph_ref_set(graph_ref *r, const vkt_tensor *t, const float *data);
void graph_ref_run_forward(graph_ref *r);
/* Gradients of the scalar `loss` with respect to every node (zero where unrelated). */
void graph_ref_run_backward(graph_ref *r, const vkt_tensor *loss);

#endif
