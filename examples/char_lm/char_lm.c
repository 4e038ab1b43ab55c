/*
 * char_lm - the job `vkt train --model charlm` runs, written out with the public API: a
 * character-level decoder-only transformer (2 blocks, 4 heads, width 64, context 64) on
 * the shipped Pride and Prejudice (data/austen; the last 10% is held out for validation).
 *
 *   ids [B,T] -> token embedding + position embedding -> 2 x (x + attn(ln(x)),
 *   x + mlp(ln(x))) -> ln -> linear to the vocabulary -> cross-entropy with the next
 *   character at every position
 *
 * Each step trains on 32 random windows (vkt_text_batch, vkt_trainer_step) with AdamW;
 * the validation loss in nats per character is printed every 500 steps
 * (vkt_trainer_evaluate_text), and at the end 200 characters are sampled at temperature
 * 0.8 (vkt_trainer_sample_text).
 *
 * Usage: char_lm [TEXT_FILE [STEPS]]  (default: data/austen/pride_and_prejudice.txt, 3000)
 *
 * Ends with "result: val_loss=<x>"; on the shipped text it is below 2.0. Exits 0 on
 * success, 1 with the status and message on failure.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <vkt.h>

#define BATCH 32
#define CONTEXT 64
#define WIDTH 64
#define LAYERS 2
#define HEADS 4
#define SEED 1

static vkt_tensor *param(vkt_graph *g, const char *name, uint32_t rows, uint32_t cols,
                         vkt_init init)
{
    vkt_shape s = cols ? (vkt_shape){2, {rows, cols}} : (vkt_shape){1, {rows}};
    return vkt_param(g, name, &s, &init);
}

/* x [B,T,in] -> [B,T,out]: a linear layer, weights normal(0, std), zero bias. */
static vkt_tensor *dense(vkt_graph *g, vkt_tensor *x, uint32_t in, uint32_t out, float std,
                         const char *name, int block)
{
    char wn[32], bn[32];
    snprintf(wn, sizeof wn, "block%d.%s.w", block, name);
    snprintf(bn, sizeof bn, "block%d.%s.b", block, name);
    return vkt_linear(g, x, param(g, wn, in, out, (vkt_init){VKT_INIT_NORMAL, 0, std, 0}),
                      param(g, bn, out, 0, (vkt_init){VKT_INIT_ZEROS, 0, 0, 0}));
}

/* Layer norm over the width with gamma 1 and beta 0 to start. */
static vkt_tensor *ln(vkt_graph *g, vkt_tensor *x, const char *name, int block)
{
    char gn[32], bn[32];
    snprintf(gn, sizeof gn, "block%d.%s.gamma", block, name);
    snprintf(bn, sizeof bn, "block%d.%s.beta", block, name);
    return vkt_layer_norm(g, x, param(g, gn, WIDTH, 0, (vkt_init){VKT_INIT_CONSTANT, 1, 0, 0}),
                          param(g, bn, WIDTH, 0, (vkt_init){VKT_INIT_ZEROS, 0, 0, 0}), 0);
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "data/austen/pride_and_prejudice.txt";
    uint64_t steps = argc > 2 ? strtoull(argv[2], NULL, 10) : 3000;
    vkt_text *text = NULL;
    vkt_graph *g = NULL;
    vkt_instance *instance = NULL;
    vkt_trainer *trainer = NULL;
    float ids[BATCH * CONTEXT], val = 0;
    int32_t targets[BATCH * CONTEXT];
    char sample[201];
    const char *what = "loading the text";
    vkt_status st = vkt_text_load(path, 0.1f, &text);
    vkt_tensor *in = NULL, *logits = NULL, *loss = NULL, *next = NULL;
    if (st == VKT_OK) {
        what = "building the model";
        vkt_graph_options go = {.seed = SEED};
        st = vkt_graph_create(&go, &g);
    }
    if (st == VKT_OK) {
        uint32_t vocab = vkt_text_vocab(text);
        vkt_shape is = {2, {BATCH, CONTEXT}};
        in = vkt_input(g, "ids", &is);
        next = vkt_input_labels_shape(g, "targets", &is);
        vkt_init emb = {VKT_INIT_NORMAL, 0, 0.02f, 0};
        float proj = 0.02f / sqrtf(2.0f * LAYERS); /* residual branches start small */
        vkt_tensor *x = vkt_add(g, vkt_embedding(g, in, param(g, "tok", vocab, WIDTH, emb)),
                                param(g, "pos", CONTEXT, WIDTH, emb)); /* [B,T,W] + [T,W] */
        for (int b = 0; b < LAYERS; b++) {
            vkt_tensor *qkv = dense(g, ln(g, x, "ln1", b), WIDTH, 3 * WIDTH, 0.02f, "qkv", b);
            vkt_tensor *a = vkt_causal_attention(g, qkv, HEADS, 0.0f);
            x = vkt_add(g, x, dense(g, a, WIDTH, WIDTH, proj, "proj", b));
            vkt_tensor *h = vkt_gelu(g, dense(g, ln(g, x, "ln2", b), WIDTH, 4 * WIDTH, 0.02f,
                                              "fc", b));
            x = vkt_add(g, x, dense(g, h, 4 * WIDTH, WIDTH, proj, "fc2", b));
        }
        logits = dense(g, ln(g, x, "ln_f", LAYERS), WIDTH, vocab, 0.02f, "head", LAYERS);
        loss = vkt_softmax_cross_entropy(g, logits, next); /* mean over B*T positions */
        st = vkt_graph_status(g);
    }
    if (st == VKT_OK) {
        what = "creating the trainer";
        vkt_trainer_options o = {
            .batch = BATCH,
            .optimizer = {.kind = VKT_OPTIMIZER_ADAMW, .lr = 0.003f,
                          .schedule = VKT_SCHEDULE_WARMUP_COSINE, .warmup_steps = steps / 20,
                          .total_steps = steps}};
        st = vkt_instance_create(NULL, &instance);
        if (st == VKT_OK)
            st = vkt_trainer_create(instance, g, loss, &o, &trainer);
    }
    uint64_t rng = SEED;
    int reported = 0;
    for (uint64_t step = 1; st == VKT_OK && step <= steps; step++) {
        what = "training";
        float batch_loss = 0;
        st = vkt_text_batch(text, 0, BATCH, CONTEXT, &rng, ids, targets);
        if (st != VKT_OK) { /* a data error: the message is the thread's last error */
            fprintf(stderr, "char_lm: batch: %s: %s\n", vkt_status_name(st), vkt_last_error());
            reported = 1;
            break;
        }
        vkt_feed feeds[2] = {{in, ids}, {next, targets}};
        if (st == VKT_OK)
            st = vkt_trainer_step(trainer, feeds, 2, &batch_loss);
        if (st == VKT_OK && (step % 500 == 0 || step == steps)) {
            st = vkt_trainer_evaluate_text(trainer, text, 1, in, logits, CONTEXT,
                                           step == steps ? 0 : 128, &val);
            printf("step %llu  train_loss=%.4f  val_loss=%.4f\n", (unsigned long long)step,
                   batch_loss, val);
            fflush(stdout);
        }
    }
    if (st == VKT_OK) {
        what = "sampling";
        st = vkt_trainer_sample_text(trainer, text, in, logits, CONTEXT, NULL, 200, 0.8f, SEED,
                                     sample);
    }
    if (st == VKT_OK)
        printf("sample:\n%s\nresult: val_loss=%.4f\n", sample, val);
    else if (!reported)
        fprintf(stderr, "char_lm: %s: %s: %s\n", what, vkt_status_name(st),
                trainer ? vkt_trainer_errmsg(trainer)
                : g && vkt_graph_status(g) ? vkt_graph_errmsg(g) : vkt_last_error());
    vkt_trainer_destroy(trainer);
    vkt_instance_destroy(instance);
    vkt_graph_destroy(g);
    vkt_text_destroy(text);
    return st == VKT_OK ? 0 : 1;
}
