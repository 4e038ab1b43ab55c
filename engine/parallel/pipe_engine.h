/*
 * pipe_engine.h - the pipeline engine's internals, shared by its files (pipe.h is its
 * interface): a graph cut into P stages (graph/runtime.h's graph_split), D data-parallel
 * copies of the P-stage pipeline, one context, model, optimizer and thread per stage of
 * each copy (context d * P + s is copy d's stage s), micro-batches flowing through them.
 *   pipe_engine.c  creation, parameters, statistics;
 *   pipe_sched.c   one step: the 1F1B schedule of every stage's thread, the update;
 *   pipe_edge.c    the values and gradients that cross stages (host slots; the device
 *                  row in pipe_edge_device.c, the import row in pipe_edge_import.c);
 *   pipeline.c     the public vkt_pipeline_* (the engine with one copy).
 */
#ifndef VKT_PARALLEL_PIPE_ENGINE_H
#define VKT_PARALLEL_PIPE_ENGINE_H

#include "core/error.h"
#include "gpu/gpu.h"
#include "parallel/pipe.h"
#include "parallel/world.h"
#include "platform/platform.h"

/* An edge: one value crossing stages, within one copy: in host slots (the host and world
 * rows of pipe_edges), in device buffers (the device row), or in host memory every side's
 * device imported (the import row). */
typedef struct pedge {
    uint32_t node;        /* the full graph's id of the value */
    uint32_t from;        /* the stage that computes it */
    uint32_t n_to;        /* consumer stages */
    uint32_t to[GRAPH_MAX_STAGES];
    uint64_t elems;       /* per micro-batch */
    float *act;           /* [m][elems] (host and world rows; NULL on the device row) */
    float *grad;          /* [n_to][m][elems] */
    uint8_t *ready;       /* [m]: act[k] written */
    uint32_t *pending;    /* [m]: consumers that have not sent grad[.][k] yet */
    uint32_t copy;        /* the copy it belongs to */
    /* device row (pipe_edge_device.c): on the sender's context, which its consumers share */
    vkt_buffer *dact;     /* [m][elems] */
    vkt_buffer *dgrad;    /* [n_to][m][elems] */
    uint64_t *act_sig;    /* [m]: the sender's timeline value once dact[k] is written */
    uint64_t *grad_sig;   /* [n_to][m]: consumer c's once dgrad[c][k] is */
    /* import row (pipe_edge_import.c): one pinned host allocation, act [m][elems] then grad
     * [n_to][m][elems] (each rounded up to the devices' import alignment), imported into
     * the sender's device (side 0) and consumer c's (side 1 + c) */
    void *host;
    vkt_buffer *iact[GRAPH_MAX_STAGES + 1], *igrad[GRAPH_MAX_STAGES + 1];
} pedge;

/* Where side `side` (0: the sender; 1 + c: consumer c) reaches e's values (grad 0: [m]
 * [elems]) or gradients (grad 1: [n_to][m][elems]) on its device: the device row's
 * buffers (every side on one VkDevice), else the import row's imports. */
static inline vkt_buffer *pipe_edge_buffer(const pedge *e, int grad, uint32_t side)
{
    if (e->dact)
        return grad ? e->dgrad : e->dact;
    return grad ? e->igrad[side] : e->iact[side];
}

/* A stage's device edges (pipe_edge_device.c; the import row's too, without timeline and
 * feed): copies recorded once per micro-batch, its timeline, and what its next run carries
 * (graph_model_run_with), assembled by the row's recv and arm functions. */
typedef struct pdev {
    gpu_timeline *tl;      /* raised by each of its runs that sends */
    uint64_t tl_next;      /* its last value */
    vkt_stream **vsend;    /* [m] its sent values of k -> dact[k] */
    vkt_stream **vin;      /* [m] micro-batch k's control words and fed rows (feed) and
                              received values (dact[k]) -> its slot's inputs (import:
                              the received values alone) */
    vkt_buffer *feed;      /* host-visible, filled at each step's start (begin): [m] control
                              images (GRAPH_CTRL_WORDS words), then [m][feed_words] rows */
    uint64_t feed_words;   /* a micro-batch's fed elements, every fed input's in turn */
    vkt_stream **gsend;    /* [m] its received values' gradients -> dgrad[slot][k] */
    vkt_stream **grecv;    /* [m] dgrad[.][k] summed (consumer order) into its sent
                              values' gradient inputs */
    vkt_stream *barrier[GRAPH_MAX_STAGES]; /* per slot, a barrier alone: heads a run with
                              no copy before it (per slot: a stream carried by a run not
                              yet waited for would make the next submission wait for it) */
    vkt_stream *before[GPU_MAX_CARRIED], *after[GPU_MAX_CARRIED];
    uint32_t n_before, n_after;
    gpu_sync wait[GPU_MAX_SYNC], signal;
    uint32_t n_wait;
    gpu_submit_sync sync;
    int values, grads;     /* the run sends values / gradients of micro-batch k: */
    uint32_t k;            /* announced once it is submitted */
} pdev;

/* Across ranks (pipe_world.c), per local stage: the receives posted at the step's start
 * (values: [n_recv][m]; gradients of sent values: [n_send][GRAPH_MAX_STAGES][m]) and the
 * sends in flight, each message sent once per step (placeholders after a failure). */
typedef struct pworld {
    world_req **rv, **rg;
    world_req **sends;
    uint32_t n_sends, cap_sends;
    uint8_t *sent_v;      /* [n_send][m] */
    uint8_t *sent_g;      /* [n_recv][m] */
} pworld;

struct pstage;
/* How a stage that sends values runs a micro-batch's forward F(k) and backward B(k)
 * (pipe_sched.c's `keeps`, one row per stage picked at creation by pipe_keep_pick):
 *  keep: K = min(P - s, m) slot models (graph_model_create's GRAPH_MODEL_SHARE_GRADS: one
 *    parameter and gradient buffer, an arena each), micro-batch k on slot k mod K; F is
 *    the step's forward half, B feeds the received gradient and runs its backward half:
 *    one forward per micro-batch;
 *  recompute: one model; F is the training forward alone (graph_model_forward_train), B
 *    the whole step, which recomputes the forward: two per micro-batch.
 * The last stage's F is its whole step either way. */
typedef struct pipe_keep {
    const char *name;
    vkt_status (*forward)(struct pstage *s, uint32_t k);
    vkt_status (*backward)(struct pstage *s, uint32_t k);
} pipe_keep;

typedef struct pstage {
    struct vkt_pipeline *p;
    uint32_t index, copy, device;
    uint32_t row0;         /* the copy's first row of the global batch */
    graph_stage *gs;
    vkt_context *ctx;
    vkt_model *model;      /* slot[0]: the parameters, gradients and optimizer's */
    vkt_model *slot[GRAPH_MAX_STAGES]; /* [n_slots] the models micro-batches run on */
    uint32_t n_slots;      /* keeping: K; recomputing: 1 */
    vkt_model *cur;        /* the slot of the micro-batch in hand (pipe_model_fail) */
    const pipe_keep *keep; /* pipe_keep_pick's row */
    uint64_t forwards;     /* forward runs this step */
    vkt_optimizer *opt;
    vkt_stream *apply;     /* the update: (staged routes: hsum copied into the gradient
                              buffer, then) the optimizer on the gradient buffer, then a
                              barrier (pipe_apply_record, again when the route changes) */
    vkt_buffer *hsum;      /* staged routes: host-visible [n_train], the host's sum of the
                              step (scaled, clipped, judged), written before it is due */
    int apply_staged;      /* the route's `staged` that `apply` was recorded for */
    int apply_due;         /* an agreed update not run yet (pipe_route.ahead): it goes
                              ahead of the stage's next run, or pipe_flush runs it */
    uint64_t n_params, n_train;
    double *gacc;          /* [n_train] the weighted sum over micro-batches */
    float *gtmp;           /* [n_params] */
    uint64_t grad_reads;   /* gradient readbacks this step (host route: 1, after the last
                              backward; direct: 0) */
    uint64_t grad_writes;  /* gradient write-backs this step (host route: 1, into hsum,
                              copied in by the update; direct: 0) */
    float *gsum;           /* scratch: a sent value's gradient summed over consumers */
    uint32_t *recv_edge, *recv_slot; /* per received value: its edge and consumer slot */
    uint32_t *send_edge;   /* per sent value: its edge */
    uint64_t *feed_row;    /* per fed input: elements per row */
    const void **feed_data; /* per fed input: the step's data */
    double loss;           /* last stage: the weighted loss of the step */
    float *losses;         /* [m] last stage: each micro-batch's loss, summed in order */
    uint32_t loss_due[GRAPH_MAX_STAGES]; /* per slot: 1 + the micro-batch whose loss its
                              run in flight holds (0: none), read once it is settled */
    double busy;
    uint64_t sent;
    uint64_t host_sent;    /* of sent, copied by the host (host and world rows) */
    uint64_t overlapped;   /* runs submitted while another of its runs was in flight */
    pdev dev;              /* device edges */
    vkt_status status;
    char errmsg[VKT_ERRMSG_SIZE];
    plat_thread *thread;
    int local;             /* this process runs it (always, without a world) */
    int nonfinite;         /* guarded: its gacc of the step has a non-finite value */
    double squares;        /* clipping: its stage's squares of the step (copy 0's; else 0) */
    pworld w;              /* across ranks */
} pstage;

/* How a stage's gradient, summed over its micro-batches on its device, reaches its
 * optimizer (pipe_sched.c's pipe_routes, one row picked by pipe_route_pick):
 *  host: read back once after the last backward (`collect`), summed over the copies in
 *    double (`gather`, which returns the squares for clipping), judged (guard), divided by
 *    the loss scale, clipped, and written into the stage's host-visible hsum (`hand`),
 *    which the update copies into the gradient buffer in its own submission (`staged`);
 *    the optimizers' grad_scale is the caller's (the 1 / (m D) weight is on the host);
 *  direct: nothing leaves the device; the optimizer applies the device sum with grad_scale
 *    times 1/m (`weight`: the sum holds m micro-batches' mean gradients). Picked where
 *    nothing needs the host's sum: one copy, no world, no guard, scale 1, no clipping;
 *  async, async host (pipe_async.c, docs/async.md): each copy applies its own gradient
 *    (its share of the batch, 1 / D) and pushes the change into its stage's master; the
 *    contexts of a copy meet without the other copies; async host reads the copy's sum
 *    back (guard, loss scale, clipping by the copy's own norm), async leaves it there;
 *  async ranks (pipe_async_world.c): async host's sum across ranks, each stage's master
 *    sharded over the stage's ranks, which apply the copies' pushes as they arrive. */
typedef struct pipe_route {
    const char *name;
    vkt_status (*collect)(pstage *s);            /* after the step's last backward */
    double (*gather)(pstage *s);                 /* before the update: squares (clipping) */
    vkt_status (*hand)(pstage *s, double factor); /* the gradient into the model */
    int weight;                                  /* 1: grad_scale gets 1/m */
    int share;                                   /* 1: grad_scale gets 1/D too */
    int per_copy;                                /* 1: each copy's contexts meet alone */
    vkt_status (*begin)(vkt_pipeline *p);        /* the step's start, before its threads */
    vkt_status (*push)(pstage *s);               /* after s's optimizer ran */
    vkt_status (*end)(vkt_pipeline *p);          /* after the step's threads */
    /* 1: once the meeting agreed (and the host decided what it decides: verdict, scale,
     * clipping, the sum in hsum), nothing on the host needs the update's result before
     * the stage's next run: the update becomes due (pstage.apply_due) and goes ahead of
     * that run, in its submission (graph_model_run_ahead), or pipe_flush runs it */
    int ahead;
    /* 1: `hand` writes the host's sum into hsum and `apply` begins with its copy into the
     * gradient buffer: no upload of its own (pipe_apply_record) */
    int staged;
} pipe_route;

/* A meeting of the step's threads (arrive, squares_of_all): every context, or one copy's
 * (pipe_route.per_copy); under p->mon. */
typedef struct pmeet {
    uint32_t expected;     /* contexts whose threads run */
    uint32_t arrived;      /* at the step's end */
    uint32_t clip_arrived; /* that left their squares (pstage.squares) */
    int votes;             /* some context voted to stop (it failed) */
    int overflow;          /* some context's gradient was not finite */
} pmeet;

/* Async (pipe_async.c): stage s's master, shared by its D copies. */
typedef struct pipe_master pipe_master;
/* Async across ranks (pipe_async_world.c): this rank's slice of its stage's master. */
typedef struct pipe_aworld pipe_aworld;

struct vkt_pipeline {
    vkt_instance *inst;
    vkt_graph *graph;
    pipe_options opt;
    vkt_optimizer_options optim;
    uint32_t P, D, m, mb;  /* stages, copies, micro-batches per copy, rows per micro-batch */
    uint32_t n_ctx;        /* P x D; context d * P + s is copy d's stage s */
    graph_split split;
    pstage *st;            /* [n_ctx] */
    pedge *edge;           /* every copy's edges, copy after copy */
    uint32_t n_edge;
    const struct pipe_edges *edges; /* how they cross (pipe_edges_pick's row) */
    plat_monitor *mon;
    int failed;            /* under mon */
    int go;                /* under mon: the step's threads may start working */
    pmeet *meets;          /* [D]: the step's meetings; meets[0] alone unless per_copy */
    int guard;             /* the step is skipped if any gradient is not finite */
    float scale;           /* the loss scale the last stages seed their backward with */
    int overflow;          /* under mon: some context's gradient was not finite: skipped */
    /* Clipping by the global norm (optim.clip_norm > 0): the stages' optimizers do not clip
     * (each sees its own part); every context adds its stage's squares (copy 0's: the
     * copies' sums are equal) and all scale by min(1, clip / (norm + 1e-6)) (pipe_sched.c). */
    uint32_t first_failed; /* under mon: the context that failed first (n_ctx: none) */
    pipe_master *master;   /* [P] async copies (opt.async): each stage's master (across
                              ranks: its staleness counts only) */
    pipe_aworld *aw;       /* async copies across ranks: the stage's sharded master */
    const pipe_route *route; /* pipe_route_pick's row: at creation, and whenever
                              pipe_set_optimizer or pipe_set_scaler changes its inputs */
    vkt_status route_status; /* a failed change of route (its message in errmsg): steps fail */
    uint64_t steps, step;  /* public steps taken; the optimizers' step of this one */
    double step_seconds;
    char errmsg[VKT_ERRMSG_SIZE];
    /* across ranks (pipe_world.c): NULL alone */
    vkt_world *world;
    uint32_t here;         /* the context this rank holds */
    int stop_vote;         /* the chief's vote, into the tail */
    int stopped;           /* the last step's tail said stop: nothing updated */
    double world_loss;     /* the tail's sum of the last stages' losses */
    uint32_t remote_failed;/* a rank whose tail slot said it failed (UINT32_MAX: none) */
    int world_broken;      /* a wait on the world failed: no more calls on it */
    int world_go;          /* the last step's tail said every stage updates */
    uint64_t *stage_train; /* [P] every stage's trained count (the tail's segments with
                              copies; learnt in the first step: creation has no collective,
                              the trainer's layout vote follows it) */
};

static inline pstage *ctx_of(vkt_pipeline *p, uint32_t copy, uint32_t stage)
{
    return &p->st[copy * p->P + stage];
}

/* The model micro-batch k runs on. */
static inline vkt_model *pipe_slot(const pstage *s, uint32_t k)
{
    return s->slot[k % s->n_slots];
}

/* ---- keeping activations (pipe_sched.c's rows, pipe_engine.c's choice) ---- */

/* The row for keep (1) or recompute (0). */
const pipe_keep *pipe_keep_row(int keep);

/* The pipeline's message (returns st). */
vkt_status pipe_fail(vkt_pipeline *p, vkt_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A stage's failure, kept on the stage ("copy 1, stage 0 (device 2): what: msg"); the
 * others are woken to stop. mfail: with its model's message. */
vkt_status pipe_stage_fail(pstage *s, vkt_status st, const char *what, const char *msg);
vkt_status pipe_model_fail(pstage *s, vkt_status st, const char *what); /* s->cur's */

/* ---- the gradient's route (pipe_sched.c picks the row, pipe_engine.c sets it) ---- */

/* The row p's options call for (pipe_route's comment: direct where nothing needs the
 * host's sum, else host). */
const pipe_route *pipe_route_pick(const vkt_pipeline *p);
/* p->route := pipe_route_pick(p); when the row changes (or force), every local stage's
 * optimizer gets its options for it (pipe_stage_optim), after pipe_flush (a due update
 * runs as it was recorded); its update stream follows at the next pipe_step. */
vkt_status pipe_route_set(vkt_pipeline *p, int force);
/* Records s's update (`apply`) for p->route: staged, hsum (made here the first time) into
 * the gradient buffer first; then the optimizer and a barrier (pstage.apply_staged: the
 * row's `staged`; pipe_step records it again where the route's differs). */
vkt_status pipe_apply_record(vkt_pipeline *p, pstage *s);
/* The stage optimizers' options for p->route: the caller's, clip_norm 0 (the pipeline
 * clips by the norm over every stage), grad_scale times 1/m on the direct route. */
vkt_optimizer_options pipe_stage_optim(const vkt_pipeline *p);

/* ---- async copies (pipe_async.c, the async routes' begin, push and end) ---- */

vkt_status pipe_async_make(vkt_pipeline *p);   /* the masters (opt.async) */
void pipe_async_free(vkt_pipeline *p);
vkt_status pipe_async_begin(vkt_pipeline *p);  /* each master := copy 0's parameters */
double pipe_async_gather(pstage *s);           /* async host: the copy's own sum, squares */
vkt_status pipe_async_push(pstage *s);         /* master += s's parameters - the seed */
vkt_status pipe_async_end(vkt_pipeline *p);    /* every copy's parameters := its master */
/* One push of stage s counted with its staleness (pipe_staleness_gather: pipe.h). */
void pipe_async_count(vkt_pipeline *p, uint32_t s, uint64_t stale);
/* Across ranks (pipe_async_world.c, the "async ranks" route): the local stage's slice of
 * its master (its creation after the stages'), the route's begin, push and end. */
vkt_status pipe_async_world_make(vkt_pipeline *p);
void pipe_async_world_free(vkt_pipeline *p);
vkt_status pipe_async_world_begin(vkt_pipeline *p);
vkt_status pipe_async_world_push(pstage *s);
vkt_status pipe_async_world_end(vkt_pipeline *p);

/* ---- edges (pipe_edge.c, pipe_edge_device.c): how values and gradients cross ---- */

/* One row per way (picked at creation by pipe_edges_pick):
 *  host: host slots (pedge.act, .grad): after its run a sender reads its values back and
 *    marks them ready; the receiver waits for the mark and writes them into its inputs;
 *    the same for gradients back;
 *  world: the same slots filled by messages between ranks (pipe_world.c);
 *  device (pipe_edge_device.c): every stage of each copy on one VkDevice (pipe_engine.c
 *    shares it as replicas do: VKT_SHARE_DEVICE). The sender's run copies its values into
 *    device buffers (dact) and raises its timeline; they are marked ready once it is
 *    submitted, and the receiver's run waits for that value on the device and copies them
 *    into its inputs. No host copy, and no thread waits for another stage's fence: the
 *    device runs a receiver's work as soon as the sender's is done.
 * Per stage and micro-batch k: wait_* until k's values (or the gradients of what it sent)
 * are there; recv_* puts them into the next run's inputs; arm(values, grads), called
 * just before the run that computes k's values / gradients of received values, and
 * send_* after it. */
typedef struct pipe_edges {
    const char *name;
    int (*wait_values)(pstage *s, uint32_t k);  /* 0: another stage failed */
    int (*wait_grads)(pstage *s, uint32_t k);
    vkt_status (*recv_values)(pstage *s, uint32_t k);
    vkt_status (*recv_grads)(pstage *s, uint32_t k);
    vkt_status (*arm)(pstage *s, uint32_t k, int values, int grads);
    vkt_status (*send_values)(pstage *s, uint32_t k);
    vkt_status (*send_grads)(pstage *s, uint32_t k);
    /* device: a step's fed rows and control words reach the stages by the copies in
     * recv_values (begin writes them, checked, before the step's runs): the host writes
     * nothing into a model during the step, so its runs need not wait for each other */
    vkt_status (*begin)(vkt_pipeline *p);
    int feeds_on_device;
} pipe_edges;
extern const pipe_edges pipe_edges_device;
/* import (pipe_edge_import.c): the stages of a copy on different VkDevices that import
 * host memory (VK_EXT_external_memory_host), asked for with VKT_PIPE_EDGES=import. Per
 * edge one pinned host allocation every side's device imported: the sender's run copies
 * its values into it (in the run's own submission, after its commands), the receiver's
 * run copies them out into its inputs (before its commands); gradients back the same
 * way, summed into the sender's input on its device in stage order (kt_axpby: the host
 * row's bits). The host row's ordering stays (the sender's fence, then the flag: no
 * semaphore crosses VkDevices); its readbacks, memcpys and staged uploads go. */
extern const pipe_edges pipe_edges_import;

/* Every copy's edges and its stages' send and receive lists (their host slots come with
 * the row: pipe_edges_start). */
vkt_status pipe_edges_make(vkt_pipeline *p);
/* After the stages' first models: p->edges picked, and the device row's buffers made
 * where it is picked (where they do not fit: the host row), else the host slots; after
 * the slots, the device
 * row's copies and timelines (pipe_edges_record). */
vkt_status pipe_edges_start(vkt_pipeline *p);
vkt_status pipe_edges_record(vkt_pipeline *p);
/* Before the contexts go. */
void pipe_edges_free(vkt_pipeline *p);
/* A new step: no value sent, every consumer's gradient pending. */
void pipe_edges_reset(vkt_pipeline *p);
const pipe_edges *pipe_edges_pick(const vkt_pipeline *p);
const pipe_edges *pipe_edges_pick_host(const vkt_pipeline *p);
/* The device row's conditions: no world, no check mode, each copy's stages on one
 * VkDevice with timelines. */
int pipe_edges_device_fits(const vkt_pipeline *p);
/* Shared by the device and import rows: s's slots' edge inputs and outputs on the device
 * (graph_model_device_io; feeds: its fed rows too) and its copies (vsend, vin, gsend,
 * grecv; feeds: vin carries the control words and fed rows too). */
vkt_status pipe_edges_copies(pstage *s, int feeds);
/* The import row's conditions (why: the first that fails, for VKT_PIPE_EDGES=import's
 * message): no world, no check mode, every device imports host memory, and the sides of
 * each edge on different VkDevices. */
int pipe_edges_import_fits(const vkt_pipeline *p, char *why, size_t n);
vkt_status pipe_edges_import_make(vkt_pipeline *p);   /* host memory, imports */
vkt_status pipe_edges_import_record(vkt_pipeline *p); /* copies */
void pipe_edges_import_free(vkt_pipeline *p);
vkt_status pipe_edges_device_make(vkt_pipeline *p);   /* buffers */
vkt_status pipe_edges_device_record(vkt_pipeline *p); /* copies, timelines */
vkt_status pipe_edges_device_begin(vkt_pipeline *p);  /* a step's fed rows, control words */
void pipe_edges_device_free(vkt_pipeline *p);
/* Shared by the rows (pipe_edge.c): the host flags' waits, and the marks under the
 * monitor: value k of e ready; one more consumer's gradient of it sent. */
int pipe_host_wait_values(pstage *s, uint32_t k);
int pipe_host_wait_grads(pstage *s, uint32_t k);
void pipe_edge_announce_value(vkt_pipeline *p, pedge *e, uint32_t k);
void pipe_edge_announce_grad(vkt_pipeline *p, pedge *e, uint32_t k);

/* ---- across ranks (pipe_world.c): one stage per rank, edges as messages ---- */

/* The placement (R = P x D ranks), the local context; refusals with messages. */
vkt_status pipe_world_place(vkt_pipeline *p);
void pipe_world_free(pstage *s);
/* The step's receives posted (before its first forward). */
vkt_status pipe_world_begin(pstage *s);
/* Until the values of micro-batch k / the gradients of what s sent for k arrived. */
int pipe_world_wait_values(pstage *s, uint32_t k);
int pipe_world_wait_grads(pstage *s, uint32_t k);
/* Edge j's value of micro-batch k to its consumers' ranks / the gradient of received
 * value j to its sender's rank. */
vkt_status pipe_world_send_value(pstage *s, uint32_t j, uint32_t k);
vkt_status pipe_world_send_grad(pstage *s, uint32_t j, uint32_t k);
/* The step's end: after a failure, every message still owed sent (zeros) so no peer
 * waits for it; every receive and send completed. Then the tail: 1 when every rank
 * succeeded and nobody voted to stop (then s updates). */
void pipe_world_end(pstage *s);

int pipe_world_tail(pstage *s);
/* Clipping across ranks, after a tail that said update: *squares (this rank's stage's,
 * 0 from copies past the first) summed over every rank, in one more allreduce. */
vkt_status pipe_world_squares(pstage *s, double *squares);

#endif
