/*
 * ops.h - the op table: every op of the graph defined once.
 *
 * GRAPH_OPS lists the ops; the enum and the table are both generated from it, so they
 * cannot drift: a listed op without a definition `graph_op_<name>` fails to link, and the
 * table has exactly GOP_COUNT entries (a static assertion in ops.c). An entry holds
 * everything the compiler needs about its op: names, inputs, the shape rule, which
 * elements follow batch rows, the arrays it saves and scratches, the recording of its
 * forward and backward, what a backward reads and writes (for the memory plan), the CPU
 * reference of both directions, and the finite-difference tolerance of its gradient
 * check. The rest of the graph layer reaches ops only through graph_op_def_of(); no code
 * outside the entries switches over ops.
 *
 * Adding an op: a line in GRAPH_OPS, its typed parameters in graph_params (if any), its
 * entry (a family file op_*.c), its kernel, shader and double reference, and a case in
 * tests/test_graph_ops.c or test_layers.c (test_op_table fails while an op has none).
 */
#ifndef VKT_GRAPH_OPS_H
#define VKT_GRAPH_OPS_H

#include "kernels/kernel_util.h"

/* X(ENUM_SUFFIX, short_name): the op enum GOP_<SUFFIX>, entry graph_op_<short_name>. */
#define GRAPH_OPS(X)                                                                     \
    X(INPUT, input)           /* fp32 placeholder */                                      \
    X(LABELS, labels)         /* int32 placeholder [B] */                                 \
    X(PARAM, param)           /* trained parameter, or a state (vkt_state) */             \
    X(MATMUL, matmul)         /* a [M,K], b [K,N] */                                      \
    X(LINEAR, linear)         /* x [...,in], w [in,out], b [out] (optional) */            \
    X(ADD, add)               /* broadcasting */                                          \
    X(SUB, sub)                                                                           \
    X(MUL, mul)                                                                           \
    X(SCALE, scale)                                                                       \
    X(UNARY, unary)           /* an activation (vkt_unary_op) */                          \
    X(SOFTMAX, softmax)       /* or log-softmax, over the last axis */                    \
    X(SCE, sce)               /* softmax cross-entropy: logits, labels -> scalar */       \
    X(MSE, mse)               /* pred, target -> scalar */                                \
    X(SUM, sum)                                                                           \
    X(MEAN, mean)                                                                         \
    X(RESHAPE, reshape)       /* a view */                                                \
    X(TRANSPOSE, transpose)   /* 2-D */                                                   \
    X(CONCAT, concat)                                                                     \
    X(SLICE, slice)           /* one part of vkt_split */                                 \
    X(DROPOUT, dropout)                                                                   \
    X(CONV2D, conv2d)         /* x [N,C,H,W], w [OC,C/groups,KH,KW], b [OC] (optional) */ \
    X(POOL2D, pool2d)         /* max or average */                                        \
    X(LAYERNORM, layernorm)   /* x, gamma, beta */                                        \
    X(RMSNORM, rmsnorm)       /* x, gamma */                                              \
    X(BATCHNORM, batchnorm)   /* x, gamma, beta, running mean, running var (states) */    \
    X(EMBEDDING, embedding)   /* ids (fp32 token ids), table [vocab, dim] */              \
    X(ATTENTION, attention)   /* qkv [B,T,3C] -> [B,T,C], causal */                       \
    /* fused ops: made by the model's fusion rewrite (autodiff.c), never by a graph */    \
    X(LINEAR_ACT, linear_act) /* linear then an activation (p.unary): x, w, b */          \
    X(CONV_RELU, conv_relu)   /* conv2d (p.conv) then relu: x, w, b */                \
    X(SCE_GRAD, sce_grad)     /* softmax-CE as the loss, writing its logits' gradient */

typedef enum graph_op {
#define GRAPH_OP_ENUM(id, name) GOP_##id,
    GRAPH_OPS(GRAPH_OP_ENUM)
#undef GRAPH_OP_ENUM
    GOP_COUNT
} graph_op;

/* Each op's parameters, typed; the member is named after the op (or its family). */
typedef union graph_params {
    struct { float s; } scale;
    struct { vkt_unary_op op; float alpha; } unary; /* also linear_act's activation */
    struct { int log; } softmax;                    /* 1: log-softmax */
    struct { int32_t axis; } reduce;                /* sum, mean: -1 every axis */
    struct { vkt_shape target; } reshape;           /* 0 in a dimension: inferred */
    struct { uint32_t axis; } concat;
    struct { uint32_t axis, start, len; } slice;    /* [start, start + len) along axis */
    struct { float p; uint64_t seed; } dropout;
    struct {
        uint32_t stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups;
    } conv;                                         /* conv2d, conv_relu */
    struct { int max; uint32_t kernel, stride, pad; } pool;
    struct { float eps; } norm;                     /* layer and RMS normalization */
    struct { float eps, momentum; } batchnorm;
    struct { uint32_t heads; float dropout; uint64_t seed; } attention;
} graph_params;

/* Op flags. */
enum {
    OPF_LEAF = 1u << 0,        /* no inputs: input, labels, parameter */
    OPF_VIEW = 1u << 1,        /* the output is a view of input 0 (reshape) */
    OPF_LOSS = 1u << 2,        /* a scalar made of every batch row */
    OPF_LABELS_IN1 = 1u << 3,  /* input 1 holds integer labels */
    OPF_SLOTS_REVERSED = 1u << 4, /* the backward writes input gradients last slot first */
    OPF_AUX_SAVED = 1u << 5,   /* the backward reads the aux array the forward wrote */
    OPF_NO_BATCH_ROWS = 1u << 6, /* the output does not follow batch rows (transpose) */
    OPF_FUSED = 1u << 7,        /* made by the fusion rewrite */
    OPF_GRAD_IN_FORWARD = 1u << 8, /* its forward writes input 0's gradient (no backward) */
    OPF_IDS_IN0 = 1u << 9,      /* input 0 holds token ids, rows of the table in input 1 */
    OPF_AUTOCAST = 1u << 10,    /* a matrix product of inputs 0 and 1 that the autocast
                                   rewrite runs in 16 bits (autocast.c) */
    OPF_AUTOCAST_DB = 1u << 11, /* an autocast op whose bias gradient also reads the 16-bit
                                   output gradient (conv2d: db is a column of dw's pass) */
    OPF_AUTOCAST_X = 1u << 12,  /* an autocast op of one 16-bit operand, input 0 (attention's
                                   qkv): no lp_w */
    OPF_AUX_AUTOCAST = 1u << 13, /* its aux array takes the autocast type (a fused linear's
                                   saved pre-activation: 2 bytes an element in bf16/fp16) */
    OPF_SAVES_X16 = 1u << 14,   /* a norm whose backward reads input 0 only to take x-hat
                                   from its saved fp32 statistics: under autocast the forward
                                   keeps a 16-bit copy of x (lp_x), which the backward widens
                                   exactly into its workspace (autocast.c, op_norm.c) */
    OPF_RECAST_W = 1u << 15,    /* an autocast product whose backward rounds a parameter w
                                   again for dX (lp_wb) instead of keeping the forward's */
    OPF_SAVES_Y16 = 1u << 16,   /* attention: where its autocast backward reads the output
                                   (D = rowsum(dy * y)), the forward keeps a 16-bit copy of y
                                   (lp_y), which the backward widens exactly into its
                                   workspace (autocast.c, op_sequence.c) */
    OPF_REBUILD_X16 = 1u << 17  /* an autocast product whose x is a fused linear+activation's
                                   output with a 16-bit pre-activation z16 (its aux): the
                                   backward rebuilds the 16-bit x, r(f(widen(z16))), bit for
                                   bit the forward's (lp_xb, kt_act_rebuild16), so the
                                   forward's lp_x dies in the forward (autocast.c) */
};

struct vkt_model;
struct graph_ref_args;
struct acc_list;

/* A node being recorded: the model, the stream, the node. */
typedef struct op_rec {
    struct vkt_model *m;
    vkt_stream *s;
    const vkt_tensor *t;
    int training;
    int keep_state; /* a training forward that leaves the states (batch norm's running
                       averages) as they are: a pipeline stage's forward, whose backward
                       recomputes it and moves them (model.h, PASS_TRAIN_FWD) */
} op_rec;

typedef struct graph_op_def {
    const char *name;      /* short name, as printed ("matmul"); name_of may refine it */
    const char *fn;        /* the API function that builds it, for messages */
    /* Variant names of one op ("relu", "log_softmax", "max_pool2d"); NULL: the above. */
    const char *(*name_of)(const vkt_tensor *t);
    const char *(*fn_of)(const vkt_tensor *t);
    uint32_t flags;
    uint32_t min_in, max_in;      /* input count; max 0: any number (concat) */
    const char *const *in_names;  /* input names for messages; NULL: "input k" */

    /* The output shape from the input shapes (graph_infer_shape adds the op's name to
     * msg and checks the labels flag). NULL for leaves. */
    vkt_status (*shape)(const vkt_tensor *t, const vkt_shape *const *in, vkt_shape *out,
                        char *msg, size_t msg_size);
    /* Whether the output follows batch rows, given that flag of every node (NULL: if
     * any input does). */
    int (*batch_major)(const vkt_tensor *t, const uint8_t *batch_major);

    /* Model compilation. Elements of the aux array (written by the forward) and of the
     * backward's workspace at the model's shapes; NULL: none. */
    vkt_status (*arrays)(struct vkt_model *m, const vkt_tensor *t, uint64_t *aux,
                         uint64_t *tmp);
    /* Whether a later gradient contribution to input k must go through a scratch array
     * and an add (the kernel cannot add into its output). NULL: never. */
    int (*adds_via_tmp)(const struct vkt_model *m, const vkt_tensor *t, uint32_t k);
    vkt_status (*forward)(const op_rec *r);
    vkt_status (*backward)(const op_rec *r);  /* NULL: no gradient flows through it */
    /* The values the backward reads besides its output's gradient (which it always
     * reads) and its inputs' gradients and workspace (which it writes); NULL: none. */
    void (*backward_reads)(const struct vkt_model *m, const vkt_tensor *t,
                           struct acc_list *l);
    /* Instead of the above, every access of the backward step that node `step` runs (the
     * op's own node, or the activation it is fused into), with the dispatch (phase) of
     * each: for ops whose backward is several dispatches. NULL: the generic list. */
    void (*backward_access)(const struct vkt_model *m, uint32_t step, struct acc_list *l);

    /* Fusion: the fused op this node (the producer) and `use`, the only use of its
     * output, become (the model's rewrite, autodiff.c), with the fused node's parameters
     * in *p; GOP_COUNT when they do not fuse. NULL: the op fuses with nothing. */
    graph_op (*fuse_with)(const vkt_tensor *t, const vkt_tensor *use, graph_params *p);
    /* A loss whose input 0 has no other use becomes this op, which writes that input's
     * gradient in its forward (an OPF_GRAD_IN_FORWARD op); 0: it does not. */
    graph_op loss_fused;

    /* The random seed among the parameters p (NULL: the op draws nothing): what may
     * differ between ranks building the same model. */
    uint64_t *(*seed)(graph_params *p);

    /* CPU reference in double: the forward, and the backward accumulating into din. */
    void (*ref_forward)(const struct graph_ref_args *a);
    void (*ref_backward)(const struct graph_ref_args *a);
    /* Relative tolerance of the finite-difference check of ref_backward (tests). */
    double grad_rtol;
} graph_op_def;

#define GRAPH_OP_DECLARE(id, name) extern const graph_op_def graph_op_##name;
GRAPH_OPS(GRAPH_OP_DECLARE)
#undef GRAPH_OP_DECLARE

/* The definition of op `op` (NULL outside the table). */
const graph_op_def *graph_op_def_of(graph_op op);
/* The definition of node t's op. */
#define GRAPH_DEF(t) graph_op_def_of((t)->op)

#endif
