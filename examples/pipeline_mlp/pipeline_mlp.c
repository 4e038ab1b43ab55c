/*
 * pipeline_mlp - model parallelism placed by hand: the 784-256-128-10 MLP of mnist_mlp cut
 * into 2 pipeline stages with vkt_graph_set_stage, trained by vkt_trainer with
 * options.stages = 2 and micro_batches = 4 (docs/model_parallel.md).
 *
 * Shows: placing layers on stages (every tensor takes the graph's current stage when it
 * is built), the trainer options that run the stages as a pipeline (one context per
 * stage; the batch of 128 cut into 4 micro-batches of 32 flowing through the stages),
 * the bytes each stage holds on its device (parameters, gradients, optimizer state, one
 * micro-batch of activations), and that training, evaluation and the result are those of
 * the unpipelined model: `--stages 1` trains the same graph as one model, and the losses
 * agree to float rounding.
 *
 * Placement (hand-made, for P stages; P = 2 is the point of the example):
 *
 *   P = 1:  fc1 fc2 fc3 loss on stage 0
 *   P = 2:  fc1 (784x256, 85% of the parameters and of the multiply-adds) on stage 0,
 *           fc2, fc3 and the loss on stage 1: h1 [B,256] crosses 0 -> 1
 *   P = 3:  one layer per stage
 *
 * Devices: the VKT_DEVICES list if set (copy d's stage s on entry d * P + s, so a list of
 * 2 x P entries also gives 2 data-parallel copies), else device 0 listed P times: P
 * contexts on one device, as on a machine with a single (CPU) device.
 *
 * The bytes per stage come from vkt_trainer_stage_stats_get (copy 0's stages; the copies
 * are alike), after creation; each stage's busy time of the last step after training.
 *
 * Usage: pipeline_mlp [--stages P] [--micro-batches M] [--epochs N] [--steps S] [DATA_DIR]
 *   P: 1, 2 (default) or 3; M: default 4 with P > 1, 1 with P = 1 (the plain trainer);
 *   N: default 5 epochs of 62 steps; S: stop after S steps if fewer;
 *   DATA_DIR: default $VKT_DATA_DIR, else data/mnist.
 *
 * It prints the placement and per-stage bytes, one line per epoch, and ends with
 *
 *   result: stages=2 micro_batches=4 test_accuracy=0.9xxx test_loss=0.xxxx last_loss=...
 *
 * where last_loss is the training loss of the final step (9 digits, for comparing runs)
 * and the accuracy is at least 0.94 on the shipped digits after 5 epochs (0.9490). Exits
 * 0 on success, 1 with the status name and message on any failure, 2 on a bad option.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <vkt.h>

#define BATCH 128
#define SEED 1
#define LAYERS 3
#define MAX_P 3

/* Runs a vktrain call; on failure prints the status and the message (`msg` is evaluated
 * after the call, so it sees the failure) and jumps to the cleanup. */
#define TRY(call, msg)                                                                  \
    do {                                                                                \
        vkt_status st_ = (call);                                                        \
        if (st_ != VKT_OK) {                                                            \
            fprintf(stderr, "pipeline_mlp: %s: %s: %s\n", #call, vkt_status_name(st_),   \
                    (msg));                                                             \
            goto done;                                                                  \
        }                                                                               \
    } while (0)

/* The stage of each layer for P = 1, 2, 3 stages (row P - 1). */
static const uint32_t placement[MAX_P][LAYERS] = {{0, 0, 0}, {0, 1, 1}, {0, 1, 2}};
static const uint32_t widths[LAYERS + 1] = {784, 256, 128, 10};

static double seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* One fully connected layer x[B,in] -> [B,out]: weights [in,out], bias [out] (zeros). */
static vkt_tensor *dense(vkt_graph *g, vkt_tensor *x, uint32_t in, uint32_t out,
                         vkt_init_kind init, const char *name)
{
    char wname[32], bname[32];
    snprintf(wname, sizeof wname, "%s.w", name);
    snprintf(bname, sizeof bname, "%s.b", name);
    vkt_tensor *w = vkt_param(g, wname, &(vkt_shape){2, {in, out}}, &(vkt_init){.kind = init});
    vkt_tensor *b = vkt_param(g, bname, &(vkt_shape){1, {out}}, NULL);
    return vkt_linear(g, x, w, b);
}

/* Prints what each stage of copy 0 holds on its device (vkt_trainer_stage_stats_get) and
 * returns the sums over the stages of the parameter and activation bytes. */
static vkt_status print_stage_bytes(vkt_trainer *trainer, uint32_t P, uint64_t *params,
                                    uint64_t *activations)
{
    *params = *activations = 0;
    printf("stage  device  ops  param_bytes  grad_bytes  optimizer_bytes  activation_bytes  "
           "device_bytes\n");
    for (uint32_t s = 0; s < P; s++) {
        vkt_pipeline_stage_stats ss;
        vkt_status st = vkt_trainer_stage_stats_get(trainer, s, &ss);
        if (st != VKT_OK)
            return st;
        printf("%5u  %6u  %3u  %11llu  %10llu  %15llu  %16llu  %12llu\n", s, ss.device, ss.ops,
               (unsigned long long)ss.param_bytes, (unsigned long long)ss.grad_bytes,
               (unsigned long long)ss.optimizer_bytes, (unsigned long long)ss.activation_bytes,
               (unsigned long long)ss.device_bytes);
        *params += ss.param_bytes;
        *activations += ss.activation_bytes;
    }
    return VKT_OK;
}

int main(int argc, char **argv)
{
    uint32_t P = 2, m = 0, epochs = 5, max_steps = 0;
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        int has_value = i + 1 < argc;
        if (!strcmp(argv[i], "--stages") && has_value)
            P = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--micro-batches") && has_value)
            m = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--epochs") && has_value)
            epochs = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--steps") && has_value)
            max_steps = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (argv[i][0] != '-' && !dir)
            dir = argv[i];
        else {
            fprintf(stderr, "usage: pipeline_mlp [--stages 1|2|3] [--micro-batches M] "
                            "[--epochs N] [--steps S] [DATA_DIR]\n");
            return 2;
        }
    }
    if (P < 1 || P > MAX_P || epochs < 1) {
        fprintf(stderr, "pipeline_mlp: --stages must be 1, 2 or 3 and --epochs at least 1\n");
        return 2;
    }
    if (m == 0)
        m = P > 1 ? 4 : 1;
    if (!dir)
        dir = getenv("VKT_DATA_DIR");
    if (!dir)
        dir = "data/mnist";

    int rc = 1;
    vkt_dataset *train = NULL, *test = NULL;
    vkt_loader *loader = NULL;
    vkt_graph *graph = NULL;
    vkt_instance *instance = NULL;
    vkt_trainer *trainer = NULL;
    float *x_batch = NULL;
    int32_t *y_batch = NULL;

    TRY(vkt_dataset_load_mnist(dir, &train, &test), vkt_last_error());
    uint32_t features = vkt_dataset_features(train); /* 784 */
    printf("data: %u training and %u test samples from %s\n", vkt_dataset_count(train),
           vkt_dataset_count(test), dir);

    /* The model, layer by layer, each on the stage the placement table gives it. The
     * inputs are leaves: fed to every stage that reads them (images to stage 0, labels
     * to the last). A value read on a later stage than the one that computes it (h1 with
     * P = 2) is sent through host memory, one micro-batch at a time. */
    vkt_graph_options graph_options = {.seed = SEED};
    TRY(vkt_graph_create(&graph_options, &graph), vkt_last_error());
    vkt_tensor *images = vkt_input(graph, "images", &(vkt_shape){2, {BATCH, features}});
    vkt_tensor *labels = vkt_input_labels(graph, "labels", BATCH);
    static const char *names[LAYERS] = {"fc1", "fc2", "fc3"};
    vkt_tensor *h = images;
    for (uint32_t l = 0; l < LAYERS; l++) {
        TRY(vkt_graph_set_stage(graph, placement[P - 1][l]), vkt_last_error());
        int last = l == LAYERS - 1;
        h = dense(graph, h, widths[l], widths[l + 1], last ? VKT_INIT_GLOROT : VKT_INIT_HE,
                  names[l]);
        if (!last)
            h = vkt_relu(graph, h);
    }
    vkt_tensor *logits = h;
    vkt_tensor *loss = vkt_softmax_cross_entropy(graph, logits, labels); /* the last stage */
    TRY(vkt_graph_status(graph), vkt_graph_errmsg(graph));
    printf("placement:");
    for (uint32_t l = 0; l < LAYERS; l++)
        printf(" %s(%u-%u) on stage %u", names[l], widths[l], widths[l + 1],
               placement[P - 1][l]);
    printf(", loss on stage %u\n", vkt_tensor_stage(loss));

    vkt_loader_options loader_options = {.batch = BATCH, .seed = SEED};
    TRY(vkt_loader_create(train, &loader_options, &loader), vkt_last_error());
    uint32_t steps_per_epoch = vkt_loader_batches_per_epoch(loader);
    /* --steps N cuts the run short (the schedule then spans N steps): for comparing the
     * losses of 1 and 2 stages before float rounding differences grow. */
    uint64_t total_steps = (uint64_t)epochs * steps_per_epoch;
    if (max_steps && max_steps < total_steps) {
        total_steps = max_steps;
        epochs = (max_steps + steps_per_epoch - 1) / steps_per_epoch;
    }

    /* Devices: VKT_DEVICES as given, else device 0 once per stage (P contexts on it). */
    TRY(vkt_instance_create(NULL, &instance), vkt_last_error());
    uint32_t devices[VKT_MAX_REPLICAS] = {0}, device_count = P;
    const char *env_devices = getenv("VKT_DEVICES");
    if (env_devices && *env_devices)
        TRY(vkt_instance_select_devices(instance, devices, VKT_MAX_REPLICAS, &device_count),
            vkt_last_error());

    /* mnist_mlp's optimizer: SGD with momentum, lr 0.2 decaying along a cosine to 0 over
     * the run. stages and micro_batches are all it takes to pipeline the graph. */
    vkt_trainer_options options = {
        .batch = BATCH,
        .optimizer = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.2f, .momentum = 0.9f,
                      .schedule = VKT_SCHEDULE_WARMUP_COSINE,
                      .total_steps = total_steps},
        .devices = devices,
        .device_count = device_count,
        .stages = P,
        .micro_batches = m,
    };
    TRY(vkt_trainer_create(instance, graph, loss, &options, &trainer), vkt_last_error());
    printf("trainer: %u stages x %u data-parallel copies, %u micro-batches of %u rows, "
           "%u device entries\n", P, vkt_trainer_replicas(trainer), m, BATCH / m /
           vkt_trainer_replicas(trainer), device_count);

    if (P > 1) {
        /* Each parameter lives on one stage: the stages' parameter bytes add up to the
         * whole model's (vkt_trainer_param_count, the unpipelined layout). The trainer's
         * activation bytes are the sum over copy 0's stages. */
        uint64_t stage_params = 0, stage_activations = 0;
        TRY(print_stage_bytes(trainer, P, &stage_params, &stage_activations),
            vkt_trainer_errmsg(trainer));
        vkt_trainer_stats stats;
        TRY(vkt_trainer_stats_get(trainer, &stats), vkt_trainer_errmsg(trainer));
        printf("param bytes: stages' sum %llu, whole model %llu\n",
               (unsigned long long)stage_params,
               (unsigned long long)(4 * vkt_trainer_param_count(trainer)));
        printf("activation bytes: stages' sum %llu, trainer's stats %llu\n",
               (unsigned long long)stage_activations,
               (unsigned long long)stats.activation_bytes);
    }

    x_batch = malloc((size_t)BATCH * features * sizeof *x_batch);
    y_batch = malloc((size_t)BATCH * sizeof *y_batch);
    if (!x_batch || !y_batch) {
        fprintf(stderr, "pipeline_mlp: out of host memory\n");
        goto done;
    }

    vkt_eval_result eval = {0};
    float batch_loss = 0.0f;
    double start = seconds();
    uint64_t step = 0;
    for (uint32_t epoch = 1; epoch <= epochs; epoch++) {
        double loss_sum = 0.0;
        uint32_t i = 0;
        for (; i < steps_per_epoch && step < total_steps; i++, step++) {
            uint32_t rows;
            TRY(vkt_loader_next(loader, x_batch, y_batch, &rows), vkt_last_error());
            vkt_feed feeds[] = {{images, x_batch}, {labels, y_batch}};
            TRY(vkt_trainer_step(trainer, feeds, 2, &batch_loss), vkt_trainer_errmsg(trainer));
            loss_sum += batch_loss;
        }
        /* Evaluation runs the whole graph as one forward model on stage 0's context,
         * loaded with every stage's parameters first. */
        TRY(vkt_trainer_evaluate(trainer, test, images, logits, &eval),
            vkt_trainer_errmsg(trainer));
        printf("epoch %2u  train_loss=%.4f  test_accuracy=%.4f  test_loss=%.4f  "
               "seconds=%.1f\n", epoch, loss_sum / i, eval.accuracy, eval.loss,
               seconds() - start);
    }
    if (P > 1) {
        /* Each stage's device time in the last step (its forwards, backwards and update)
         * against the step: the stages overlap when their sum exceeds the step. */
        printf("last step: busy ms per stage");
        for (uint32_t s = 0; s < P; s++) {
            vkt_pipeline_stage_stats ss;
            TRY(vkt_trainer_stage_stats_get(trainer, s, &ss), vkt_trainer_errmsg(trainer));
            printf(" %.1f", ss.busy_seconds * 1e3);
        }
        printf("\n");
    }
    printf("result: stages=%u micro_batches=%u test_accuracy=%.4f test_loss=%.4f "
           "last_loss=%.9g\n", P, m, eval.accuracy, eval.loss, batch_loss);
    rc = 0;

done:
    free(x_batch);
    free(y_batch);
    vkt_trainer_destroy(trainer);
    vkt_instance_destroy(instance);
    vkt_graph_destroy(graph);
    vkt_loader_destroy(loader);
    vkt_dataset_destroy(train);
    vkt_dataset_destroy(test);
    return rc;
}
