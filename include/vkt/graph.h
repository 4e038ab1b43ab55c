/*
 * vkt/graph.h - models as graphs: tensors, parameters and inputs, ops and layers
 * (convolution, pooling, normalization, embedding, attention), stage placement, and
 * models (a graph compiled for a context: forward, backward, memory plan, profile).
 * Part of vkt.h, readable alone.
 * The conventions of every part (statuses, messages, NULL options, ...): vkt/base.h.
 */
#ifndef VKT_GRAPH_H
#define VKT_GRAPH_H

#include "base.h"
#include "compute.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------ */
/* Graphs: a static dataflow graph of tensors, built once through the functions   */
/* below, then compiled into a model for a context (forward, backward, memory      */
/* plan, one recorded step).                                                       */
/* ------------------------------------------------------------------------------ */
/*
 * Building: every function that makes a tensor takes the graph first and returns a
 * `vkt_tensor *` owned by the graph (valid until vkt_graph_destroy). Shapes are inferred
 * and checked as the graph is built. Errors are sticky, so calls can be chained and
 * checked once: a call given a NULL tensor returns NULL; a call whose shapes do not
 * agree returns NULL and records a message naming the op and both shapes; the graph
 * keeps the first error (vkt_graph_status, vkt_graph_errmsg) and no model can be made
 * from it.
 *
 * Batch: the first dimension of every input is the batch. A model may be compiled for
 * another batch size (vkt_model_options.batch): every input takes it as its first
 * dimension and every shape is inferred again; a reshape whose target has a 0
 * dimension infers that one (use 0 for the batch).
 *
 * Shapes below: B is the batch; scalars have ndim 0.
 */

typedef struct vkt_graph vkt_graph;
typedef struct vkt_tensor vkt_tensor;

typedef struct vkt_graph_options {
    uint64_t seed; /* seeds parameter initializers and dropout; 0 = a fixed default */
} vkt_graph_options;

VKT_API vkt_status vkt_graph_create(const vkt_graph_options *options,
                                    vkt_graph **out_graph /* OUT */);
/* Models made from the graph must be destroyed first. */
VKT_API void vkt_graph_destroy(vkt_graph *graph);
/* VKT_OK, or the first error met while building (VKT_ERROR_SHAPE for shapes that do
 * not agree, VKT_ERROR_INVALID_ARGUMENT for NULL or bad arguments). */
VKT_API vkt_status vkt_graph_status(const vkt_graph *graph);
/* Message of that first error ("" if none), e.g. "vkt_matmul: inner dimensions differ:
 * a [128,784] and b [512,256]". */
VKT_API const char *vkt_graph_errmsg(const vkt_graph *graph);

/* The tensor's shape as built ({0} for NULL) and its name (never NULL; ops get names
 * such as "relu#7"). */
VKT_API vkt_shape vkt_tensor_shape(const vkt_tensor *tensor);
VKT_API const char *vkt_tensor_name(const vkt_tensor *tensor);
/* Names a tensor (copied, at most 63 characters kept); returns it. */
VKT_API vkt_tensor *vkt_set_name(vkt_graph *graph, vkt_tensor *tensor, const char *name);
/* The first tensor with that name, or NULL. */
VKT_API vkt_tensor *vkt_graph_find(const vkt_graph *graph, const char *name);
/* Marks a tensor to be kept after a step so vkt_model_read can read it (the memory
 * plan does not reuse its memory); returns it. The loss, inputs and parameters are
 * always readable. */
VKT_API vkt_tensor *vkt_keep(vkt_graph *graph, vkt_tensor *tensor);

/* Model parallelism: placement. Every tensor records a pipeline stage, an index into a
 * pipeline's device list (vkt_pipeline_create), taken from the graph's current stage
 * when it is built: 0 until vkt_graph_set_stage changes it, so a graph built without
 * these calls is wholly on stage 0, as before. Ops run on their stage; leaves live where
 * they are read (an input is fed to every stage that reads it; a parameter belongs to
 * the one stage whose ops read it). Values must flow to higher stages and the loss sits
 * on the last one: vkt_pipeline_create checks it all and names what is wrong.
 * VKT_ERROR_INVALID_ARGUMENT for a stage >= VKT_MAX_STAGES or a NULL handle. */
#define VKT_MAX_STAGES 16
VKT_API vkt_status vkt_graph_set_stage(vkt_graph *graph, uint32_t stage);
VKT_API uint32_t vkt_graph_stage(const vkt_graph *graph);
/* Moves one tensor (an op) to a stage after building: automatic splits. */
VKT_API vkt_status vkt_tensor_set_stage(vkt_tensor *tensor, uint32_t stage);
VKT_API uint32_t vkt_tensor_stage(const vkt_tensor *tensor);

/* ---- leaves ---- */

/* A placeholder of fp32 data set before each step; shape->dims[0] is the batch. */
VKT_API vkt_tensor *vkt_input(vkt_graph *graph, const char *name, const vkt_shape *shape);
/* Integer class labels [B] (int32 data), for vkt_softmax_cross_entropy. */
VKT_API vkt_tensor *vkt_input_labels(vkt_graph *graph, const char *name, uint32_t batch);
/* Integer labels of any shape whose first dimension is the batch, e.g. [B,T] targets of
 * a sequence model: one label per row of the logits [B,T,C]. */
VKT_API vkt_tensor *vkt_input_labels_shape(vkt_graph *graph, const char *name,
                                           const vkt_shape *shape);

typedef enum vkt_init_kind {
    VKT_INIT_ZEROS = 0,
    VKT_INIT_CONSTANT, /* a */
    VKT_INIT_UNIFORM,  /* uniform in [a, b) */
    VKT_INIT_NORMAL,   /* mean a, standard deviation b */
    VKT_INIT_GLOROT,   /* uniform in +-sqrt(6 / (fan_in + fan_out)) (Glorot/Xavier) */
    VKT_INIT_HE,       /* normal, mean 0, standard deviation sqrt(2 / fan_in) (He/Kaiming) */
    VKT_INIT_COUNT
} vkt_init_kind;

/* fan_out is the last dimension, fan_in the product of the others (a [in,out] weight);
 * for 1-D shapes both are the length; for 4-D (a conv weight [out, in/groups, kh, kw])
 * fan_in = in/groups * kh * kw and fan_out = out * kh * kw. */
typedef struct vkt_init {
    vkt_init_kind kind;
    float a, b;
    uint64_t seed; /* 0: derived from the graph's seed and the parameter's position */
} vkt_init;

/* A trainable parameter; NULL init means zeros. Parameters have no batch dimension. */
VKT_API vkt_tensor *vkt_param(vkt_graph *graph, const char *name, const vkt_shape *shape,
                              const vkt_init *init);
/* A state: a parameter the optimizer does not train, updated by the op that owns it (batch
 * normalization's running averages). Saved in checkpoints and exported like parameters;
 * it stays per replica (replica 0's is saved) and async training with several replicas
 * refuses graphs that have one. */
VKT_API vkt_tensor *vkt_state(vkt_graph *graph, const char *name, const vkt_shape *shape,
                              const vkt_init *init);

/* ---- ops ---- */

/* [M,K] x [K,N] -> [M,N] */
VKT_API vkt_tensor *vkt_matmul(vkt_graph *graph, vkt_tensor *a, vkt_tensor *b);
/* x[B,in] w[in,out] + b[out] -> [B,out]; b may be NULL. An activation applied to the
 * result (its only use) is fused into it when the model is compiled. */
VKT_API vkt_tensor *vkt_linear(vkt_graph *graph, vkt_tensor *x, vkt_tensor *w, vkt_tensor *b);
/* Elementwise with broadcasting (NumPy rules); the result has the broadcast shape. */
VKT_API vkt_tensor *vkt_add(vkt_graph *graph, vkt_tensor *a, vkt_tensor *b);
VKT_API vkt_tensor *vkt_sub(vkt_graph *graph, vkt_tensor *a, vkt_tensor *b);
VKT_API vkt_tensor *vkt_mul(vkt_graph *graph, vkt_tensor *a, vkt_tensor *b);
/* s * x */
VKT_API vkt_tensor *vkt_scale(vkt_graph *graph, vkt_tensor *x, float s);
/* Activations, same shape as x. leaky_relu: x > 0 ? x : alpha * x. gelu: tanh form. */
VKT_API vkt_tensor *vkt_relu(vkt_graph *graph, vkt_tensor *x);
VKT_API vkt_tensor *vkt_leaky_relu(vkt_graph *graph, vkt_tensor *x, float alpha);
VKT_API vkt_tensor *vkt_gelu(vkt_graph *graph, vkt_tensor *x);
VKT_API vkt_tensor *vkt_tanh(vkt_graph *graph, vkt_tensor *x);
VKT_API vkt_tensor *vkt_sigmoid(vkt_graph *graph, vkt_tensor *x);
/* x * sigmoid(x), the SiLU (swish) of LLaMA-style feed-forward layers. */
VKT_API vkt_tensor *vkt_silu(vkt_graph *graph, vkt_tensor *x);
/* Along the last axis, same shape as x (vkt_softmax_rows is the kernel it records). */
VKT_API vkt_tensor *vkt_softmax(vkt_graph *graph, vkt_tensor *x);
VKT_API vkt_tensor *vkt_log_softmax(vkt_graph *graph, vkt_tensor *x);
/* logits[B,C], labels[B] (vkt_input_labels) -> scalar: mean over the batch of
 * -log softmax(logits)[label]. Labels must lie in [0, C). */
VKT_API vkt_tensor *vkt_softmax_cross_entropy(vkt_graph *graph, vkt_tensor *logits,
                                              vkt_tensor *labels);
/* pred, target of one shape -> scalar: mean of (pred - target)^2 over all elements. */
VKT_API vkt_tensor *vkt_mse(vkt_graph *graph, vkt_tensor *pred, vkt_tensor *target);
/* axis < 0: over all elements -> scalar; else the shape with dims[axis] removed. */
VKT_API vkt_tensor *vkt_sum(vkt_graph *graph, vkt_tensor *x, int axis);
VKT_API vkt_tensor *vkt_mean(vkt_graph *graph, vkt_tensor *x, int axis);
/* Same elements, new shape (one dimension may be 0: inferred). No copy is made. */
VKT_API vkt_tensor *vkt_reshape(vkt_graph *graph, vkt_tensor *x, const vkt_shape *shape);
/* [M,N] -> [N,M] */
VKT_API vkt_tensor *vkt_transpose(vkt_graph *graph, vkt_tensor *x);
/* Joins n tensors (n <= 32) along axis; the other dimensions must agree. */
VKT_API vkt_tensor *vkt_concat(vkt_graph *graph, vkt_tensor *const *tensors, uint32_t n,
                               uint32_t axis);
/* Splits x along axis into n parts of sizes[i] (which sum to dims[axis]); writes the n
 * parts to outs (all NULL on error). Returns outs[0]. */
VKT_API vkt_tensor *vkt_split(vkt_graph *graph, vkt_tensor *x, uint32_t axis, const uint32_t *sizes,
                              uint32_t n, vkt_tensor **outs /* OUT */);
/* Training: zeroes each element with probability p and scales the others by 1/(1-p);
 * the pattern comes from a counter-based hash of (seed, step, element), so a run is
 * reproducible. Evaluation (vkt_model_forward): the identity. 0 <= p < 1.
 * The element is its index in the global batch: in a model created with
 * options.row_offset = r, element i of a tensor laid out by batch row (n elements at the
 * model's batch B) is keyed as element r * n / B + i (modulo 2^32), and attention
 * dropout's sequence b as sequence r + b. So replicas that split a batch by rows (on any
 * number of ranks) draw exactly the masks one model on the whole batch draws, and so do
 * a pipeline's micro-batches on every stage. Tensors
 * not laid out by row (parameters, losses, reductions over the batch) are keyed by their
 * own indices, the same in every replica. */
VKT_API vkt_tensor *vkt_dropout(vkt_graph *graph, vkt_tensor *x, float p);

/* ---- layers: convolution, pooling, normalization, embedding, attention ----
 * Images are NCHW. Every op has a backward; a shape that breaks a device limit
 * (maxStorageBufferRange, lavapipe's loop limit for attention's sequence length) is tiled
 * where the op can (conv2d's workspace) or refused with VKT_ERROR_LIMIT and a message:
 * conv2d's when the model is created, the others when its step is first recorded (the
 * first vkt_model_forward or step; vkt_trainer_create records it). */

typedef struct vkt_conv2d_options {
    uint32_t stride_h, stride_w;     /* 0: 1 */
    uint32_t pad_h, pad_w;           /* zero padding on both sides */
    uint32_t dilation_h, dilation_w; /* 0: 1 */
    uint32_t groups;                 /* 0: 1; must divide both channel counts */
} vkt_conv2d_options;

/* x [N,C,H,W], w [OC, C/groups, KH, KW], b [OC] or NULL -> [N, OC, OH, OW] with
 * OH = (H + 2 pad_h - dilation_h (KH - 1) - 1) / stride_h + 1. NULL options: stride 1,
 * no padding. Runs as im2col + the tuned GEMM. */
VKT_API vkt_tensor *vkt_conv2d(vkt_graph *graph, vkt_tensor *x, vkt_tensor *w, vkt_tensor *b,
                               const vkt_conv2d_options *options);
/* x [N,C,H,W] -> [N,C,OH,OW], OH = (H + 2 padding - kernel) / stride + 1 (square windows;
 * padding <= kernel / 2). Max: padding never wins. Average: divides by kernel^2. */
VKT_API vkt_tensor *vkt_max_pool2d(vkt_graph *graph, vkt_tensor *x, uint32_t kernel,
                                   uint32_t stride, uint32_t padding);
VKT_API vkt_tensor *vkt_avg_pool2d(vkt_graph *graph, vkt_tensor *x, uint32_t kernel,
                                   uint32_t stride, uint32_t padding);
/* x [N,C,H,W] -> [N,C]: the mean of each channel (a reshape and vkt_mean). */
VKT_API vkt_tensor *vkt_global_avg_pool(vkt_graph *graph, vkt_tensor *x);

/* Layer normalization over the last axis of x [..., C]: (x - mean) / sqrt(var + eps) *
 * gamma + beta, gamma and beta [C] (eps 0: 1e-5). */
VKT_API vkt_tensor *vkt_layer_norm(vkt_graph *graph, vkt_tensor *x, vkt_tensor *gamma,
                                   vkt_tensor *beta, float eps);
/* RMS normalization over the last axis of x [..., C]: x / sqrt(mean(x^2) + eps) * gamma,
 * gamma [C] (no mean subtracted, no beta; eps 0: 1e-5), as LLaMA-style transformers use. */
VKT_API vkt_tensor *vkt_rms_norm(vkt_graph *graph, vkt_tensor *x, vkt_tensor *gamma, float eps);
/* Batch normalization of x [N,C] or [N,C,H,W] per channel. Training steps normalize with
 * the batch's mean and (biased) variance and update the running averages:
 * running = (1 - momentum) running + momentum * batch value (unbiased variance), as
 * PyTorch does; evaluation (vkt_model_forward, vkt_trainer_evaluate) uses the running
 * averages. gamma, beta: vkt_param [C]; running_mean, running_var: vkt_state [C], which
 * the caller should initialize to 0 and 1 (VKT_INIT_CONSTANT 1; NULL gives zeros). With
 * several sync replicas each keeps the statistics of its own rows (no cross-replica
 * batch norm); a checkpoint saves replica 0's. In a pipeline (micro-batches) each
 * micro-batch is normalized by its own statistics and moves the running averages once,
 * in micro-batch order, whatever the stage count. eps 0: 1e-5; momentum 0: 0.1. */
VKT_API vkt_tensor *vkt_batch_norm(vkt_graph *graph, vkt_tensor *x, vkt_tensor *gamma,
                                   vkt_tensor *beta, vkt_tensor *running_mean,
                                   vkt_tensor *running_var, float eps, float momentum);

/* Embedding lookup: ids [...] (a vkt_input of token ids held as floats: exact integers in
 * [0, vocab), checked by vkt_model_set_input), table [vocab, dim] -> [..., dim]. The table's
 * gradient sums the rows of repeated ids in a fixed order (deterministic). */
VKT_API vkt_tensor *vkt_embedding(vkt_graph *graph, vkt_tensor *ids, vkt_tensor *table);
/* Causal multi-head self-attention on qkv [B,T,3C] (queries, keys, values side by side,
 * head h in columns h*C/heads.. of each) -> [B,T,C]: for each head softmax(q k^T /
 * sqrt(C/heads)) with position i seeing positions <= i, dropout p on the attention weights
 * in training (0 <= p < 1), times v. Fused kernels, head size C/heads up to 128. The
 * backward reads the weights the forward saved (CPU devices: [B,heads,T,T]) or recomputes
 * them from each row's saved logsumexp (GPUs, and long sequences on CPU devices: no
 * [T,T] array, only [B,heads,T]). */
VKT_API vkt_tensor *vkt_causal_attention(vkt_graph *graph, vkt_tensor *qkv, uint32_t heads,
                                         float dropout);

/* ------------------------------------------------------------------------------ */
/* Models: a graph compiled for a context                                          */
/* ------------------------------------------------------------------------------ */
/*
 * A model owns, per category, one flat device allocation: parameters (tensors are
 * views into it; gaps between them for alignment are zero and stay zero), gradients
 * (the same layout), and an activation arena planned by liveness so values whose
 * lifetimes do not overlap share memory. A training step (copy inputs in, forward,
 * loss, backward into the gradient buffer) is recorded once into a stream on first use
 * and replayed by every later step; the gradient of a tensor used several times is the
 * sum of its uses' contributions (the first use writes, the others add, so no
 * zero-fill is needed).
 *
 * VKT_CHECK=1 in the environment (or options.check) recomputes every op on the CPU
 * reference after each step or forward, from the device's own values of that op's inputs
 * (so an error does not spread to later ops), then every gradient in the order the
 * backward completes them, and fails the run with VKT_ERROR_INTERNAL naming the first op
 * whose output (or gradient) differs. It keeps the memory plan, reuse included: each
 * value of the arena is copied, right after the dispatch that writes it, into a snapshot
 * buffer with a place for every value (the size of options.no_memory_reuse's arena),
 * which the check reads; only a fused linear's gradient stops working in place. Updates
 * that follow a step (a trainer's optimizer) run after the check, from a stream of their
 * own, so the check sees the parameters the step used.
 */

typedef struct vkt_model vkt_model;

typedef struct vkt_model_options {
    uint32_t batch;          /* 0: every input as built; else the first dimension of
                                every input becomes `batch` */
    int forward_only;        /* 1: no backward and no gradients (evaluation, inference) */
    vkt_model *share_params; /* use that model's parameter buffer (same graph and context;
                                it must outlive this model); else parameters are
                                initialized from their vkt_init */
    int no_memory_reuse;     /* 1: every value its own memory (debugging) */
    int no_fusion;           /* 1: record every op alone (debugging, benchmarks) */
    int check;               /* 1: VKT_CHECK mode (see above) */
    uint32_t row_offset;     /* the global row of this model's first batch row: dropout
                                masks (vkt_dropout, attention dropout) are keyed by the
                                global row, so replicas that split a batch draw the masks
                                one model on the whole batch would (0: rows from 0) */
    /* Mixed precision (README, "Mixed precision"): VKT_DTYPE_FP16 or VKT_DTYPE_BF16 runs
     * every matrix product (vkt_matmul, vkt_linear) with its operands rounded to that type
     * and fp32 accumulation (the autocast rewrite; vkt_gemm's 16-bit variants); every
     * value, gradient, norm, softmax, loss and reduction stays fp32, and so do the
     * parameters. VKT_DTYPE_FP32 (0): none. A device without a 16-bit GEMM fails
     * vkt_model_create with VKT_ERROR_NO_DEVICE naming what it lacks. Check mode (above)
     * compares with the fp32 reference and so runs fp32. */
    vkt_dtype precision;
} vkt_model_options;

/* Compiles `graph` for `context`; the graph must outlive the model, and the model must
 * be destroyed before its context. `loss` is the scalar to differentiate; NULL (or
 * forward_only) makes a forward-only model. Only the loss, the kept tensors and what
 * they depend on are computed (everything when both are absent). Fails with the graph's
 * status if building it failed, VKT_ERROR_SHAPE if the shapes do not agree at
 * options.batch, VKT_ERROR_INVALID_ARGUMENT if loss is not a scalar of this graph. */
VKT_API vkt_status vkt_model_create(vkt_context *context, vkt_graph *graph, vkt_tensor *loss,
                                    const vkt_model_options *options,
                                    vkt_model **out_model /* OUT */);
VKT_API void vkt_model_destroy(vkt_model *model);
VKT_API const char *vkt_model_errmsg(const vkt_model *model);
VKT_API uint32_t vkt_model_batch(const vkt_model *model);
/* A tensor's shape in this model (at its batch). */
VKT_API vkt_status vkt_model_shape(const vkt_model *model, const vkt_tensor *tensor,
                                   vkt_shape *out_shape /* OUT */);

/* Copies one batch of an input into the model: `count` must be the input's element
 * count at the model's batch. fp32 for vkt_input, int32 for vkt_input_labels (checked
 * against the classes of the cross-entropy that reads them). */
VKT_API vkt_status vkt_model_set_input(vkt_model *model, const vkt_tensor *input, const void *data,
                                       uint64_t count);

/* One training step: forward (dropout on), loss, backward into the gradient buffer.
 * Waits for the device. Advances the step counter that seeds dropout. */
VKT_API vkt_status vkt_model_forward_backward(vkt_model *model);
/* Forward only, in evaluation mode (dropout is the identity). Waits for the device. */
VKT_API vkt_status vkt_model_forward(vkt_model *model);

/* The loss of the last step or forward. */
VKT_API vkt_status vkt_model_loss(vkt_model *model, float *out_loss /* OUT */);
/* Reads a tensor after a step: the loss, inputs, parameters, kept tensors (vkt_keep);
 * any tensor with options.no_memory_reuse. `count` must be its element count. */
VKT_API vkt_status vkt_model_read(vkt_model *model, const vkt_tensor *tensor, float *out /* OUT */,
                                  uint64_t count);
/* Writes one parameter's values. */
VKT_API vkt_status vkt_model_write(vkt_model *model, const vkt_tensor *param, const float *data,
                                   uint64_t count);
/* The gradient of a parameter after vkt_model_forward_backward. */
VKT_API vkt_status vkt_model_read_grad(vkt_model *model, const vkt_tensor *param,
                                       float *out /* OUT */, uint64_t count);

/* The flat parameter and gradient buffers (same layout): for optimizers, checkpoints
 * and averaging across replicas. count must equal vkt_model_param_count. The trained
 * parameters come first; states (vkt_state) follow them, so an optimizer working on the
 * flat buffer must stop before the first state (vkt_model_param_offset of it). */
VKT_API uint64_t vkt_model_param_count(const vkt_model *model);
VKT_API vkt_status vkt_model_param_offset(const vkt_model *model, const vkt_tensor *param,
                                          uint64_t *out_offset /* OUT: elements */);
VKT_API vkt_status vkt_model_read_params(vkt_model *model, float *out /* OUT */, uint64_t count);
VKT_API vkt_status vkt_model_write_params(vkt_model *model, const float *data, uint64_t count);
VKT_API vkt_status vkt_model_read_grads(vkt_model *model, float *out /* OUT */, uint64_t count);
VKT_API vkt_status vkt_model_write_grads(vkt_model *model, const float *data, uint64_t count);

/* The step counter that seeds dropout (advanced by every vkt_model_forward_backward);
 * set it when resuming from a checkpoint. */
VKT_API uint64_t vkt_model_step_index(const vkt_model *model);
VKT_API void vkt_model_set_step_index(vkt_model *model, uint64_t step);

typedef struct vkt_model_stats {
    uint64_t param_count;               /* elements of the flat parameter buffer */
    uint64_t param_bytes, grad_bytes;   /* grad_bytes 0 for forward-only models */
    uint64_t activation_bytes;          /* the arena: the planned peak, with reuse */
    uint64_t activation_no_reuse_bytes; /* the same values without reuse */
    uint32_t values;                    /* values planned into the arena */
    uint32_t step_dispatches, step_copies, step_barriers; /* one training step */
    uint32_t forward_dispatches, forward_barriers;        /* one vkt_model_forward */
} vkt_model_stats;

/* Records the streams if that has not happened yet. */
VKT_API vkt_status vkt_model_stats_get(vkt_model *model, vkt_model_stats *out /* OUT */);

/* Device time of each op in one step (a profile): the forward steps, then (training
 * models) the backward steps, each with the op's name ("conv2d"), the tensor's name, and
 * the dispatches it records. Timed from a separate stream with a timestamp around every
 * dispatch, run `runs` times (the first as a warm-up; the rest averaged); parameters are
 * not updated, and states the forwards update (running averages) are put back. */
#define VKT_OP_NAME_SIZE 48   /* bytes of vkt_op_timing's op name, NUL included */
#define VKT_NAME_SIZE 64      /* bytes of a tensor's name as reported, NUL included */
typedef struct vkt_op_timing {
    char op[VKT_OP_NAME_SIZE]; /* "conv2d"; a fused pair as "conv2d+relu", "linear+gelu" */
    char name[VKT_NAME_SIZE];
    int backward;
    uint32_t dispatches;
    double microseconds;
} vkt_op_timing;
VKT_API vkt_status vkt_model_profile(vkt_model *model, uint32_t runs, vkt_op_timing *out /* OUT */,
                                     uint32_t capacity, uint32_t *out_count /* OUT */);

/* What the activation arena holds at its peak: the position in the training step (or the
 * forward) where the live values sum to most, and those values grouped by the op of the
 * node that owns them, their role there and their element type, largest first. Roles:
 * "output", "gradient" (of a non-parameter), "saved" (for the backward: softmax
 * probabilities, a pre-activation), "scratch", and an autocast product's 16-bit copies
 * "16-bit x", "16-bit w", "16-bit dy", "16-bit w again" (a parameter w rounded again
 * by the backward), "16-bit x again" (a product's x rebuilt by the backward from the 16-bit
 * pre-activation of the fused linear+activation that makes it) and "16-bit y" (attention's
 * output kept for its backward). The
 * lifetimes are the plan's with or without memory reuse. */
typedef struct vkt_plan_group {
    char op[VKT_OP_NAME_SIZE]; /* "linear+gelu", "layer_norm" */
    char role[16];
    vkt_dtype dtype;
    uint32_t values;
    uint64_t bytes;            /* as planned: each value rounded up to 64 bytes */
} vkt_plan_group;
typedef struct vkt_plan_peak {
    uint64_t live_bytes;       /* the values live there (the arena may be larger: gaps) */
    char name[VKT_NAME_SIZE];  /* the tensor whose step is there */
    int backward;              /* that step is its backward */
    uint32_t groups;           /* groups in all; out receives the first `capacity` */
} vkt_plan_peak;
VKT_API vkt_status vkt_model_plan_peak(vkt_model *model, vkt_plan_peak *peak /* OUT */,
                                       vkt_plan_group *out /* OUT */, uint32_t capacity);

#ifdef __cplusplus
}
#endif

#endif /* VKT_GRAPH_H */
