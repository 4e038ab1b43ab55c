/* trainer_text.c - character-level language models on a trainer: the validation loss in
 * nats per character over consecutive windows of a text, and sampling with a
 * temperature from a batch-1 forward-only model that shares the trained parameters. */
#include "parallel/exec.h"
#include "core/rand.h"
#include "data/data.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static vkt_status check_lm(vkt_trainer *t, const char *fn, const vkt_text *text,
                           const vkt_tensor *ids, const vkt_tensor *logits, uint32_t context)
{
    if (!t)
        return err_fail(NULL, VKT_ERROR_INVALID_ARGUMENT, "%s: trainer is NULL", fn);
    if (!text || !ids || !logits || context == 0)
        return trainer_fail(t, VKT_ERROR_INVALID_ARGUMENT, "%s: NULL argument or context 0",
                            fn);
    vkt_shape is = vkt_tensor_shape(ids), ls = vkt_tensor_shape(logits);
    if (is.ndim != 2 || is.dims[1] != context || ls.ndim != 3 || ls.dims[1] != context ||
        ls.dims[2] != vkt_text_vocab(text))
        return trainer_fail(t, VKT_ERROR_SHAPE,
                            "%s: ids [B,%u] and logits [B,%u,%u] (the text's vocabulary) "
                            "expected", fn, context, context, vkt_text_vocab(text));
    return VKT_OK;
}

/* The logits of n windows of ids x ([rows, T], rows >= n): on the evaluation model m, or,
 * when the executor predicts through its holders (m NULL: a pipeline's stages), through
 * vkt_trainer_predict, so no context holds the whole model. */
static vkt_status forward_logits(vkt_trainer *t, vkt_model *m, const vkt_tensor *ids,
                                 const float *x, uint32_t n, uint32_t rows,
                                 const vkt_tensor *logits, float *z)
{
    if (!m) {
        vkt_feed f = {ids, x};
        return vkt_trainer_predict(t, &f, 1, n, logits, z);
    }
    vkt_shape ls = vkt_tensor_shape(logits);
    uint64_t per_row = 1; /* the logits of one window: every dimension after the batch */
    for (uint32_t d = 1; d < ls.ndim; d++)
        per_row *= ls.dims[d];
    vkt_status st;
    if ((st = vkt_model_set_input(m, ids, x, (uint64_t)rows * vkt_tensor_shape(ids).dims[1])) !=
            VKT_OK ||
        (st = vkt_model_forward(m)) != VKT_OK ||
        (st = vkt_model_read(m, logits, z, (uint64_t)rows * per_row)) != VKT_OK)
        return trainer_from_model(t, m, st);
    return VKT_OK;
}

vkt_status vkt_trainer_evaluate_text(vkt_trainer *t, const vkt_text *text, int split,
                                     const vkt_tensor *ids, const vkt_tensor *logits,
                                     uint32_t context, uint32_t max_windows, float *out_loss)
{
    static const char fn[] = "vkt_trainer_evaluate_text";
    vkt_status st = check_lm(t, fn, text, ids, logits, context);
    if (st != VKT_OK)
        return st;
    if (!out_loss)
        return trainer_fail(t, VKT_ERROR_INVALID_ARGUMENT, "%s: out_loss is NULL", fn);
    uint64_t all = (vkt_text_length(text, split) - 1) / context;
    if (all == 0)
        return trainer_fail(t, VKT_ERROR_SHAPE, "%s: the text part is shorter than context %u",
                            fn, context);
    uint32_t use = (uint32_t)(max_windows && all > max_windows ? max_windows : all);
    /* Chunks of the training batch's rows: the model's arrays (attention's weights grow
     * with rows x T^2) stay the size training already allocated. */
    uint32_t chunk = t->opt.batch, vocab = vkt_text_vocab(text);
    uint64_t rows = (uint64_t)chunk * context;
    float *x = calloc(rows, sizeof *x), *z = malloc(rows * vocab * sizeof *z);
    int32_t *y = malloc(rows * sizeof *y);
    vkt_model *m = NULL;
    if (!x || !z || !y)
        st = trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    if (st == VKT_OK && !t->exec->predict) /* else vkt_trainer_predict runs the stages */
        st = trainer_eval_model(t, logits, chunk, &m);
    double total = 0;
    for (uint32_t w0 = 0; st == VKT_OK && w0 < use; w0 += chunk) {
        uint32_t n = use - w0 < chunk ? use - w0 : chunk; /* rows past n keep old windows */
        for (uint32_t w = 0; w < n; w++) /* evenly spread windows */
            text_window(text, split, all * (w0 + w) / use * context, context,
                            x + (uint64_t)w * context, y + (uint64_t)w * context);
        if ((st = forward_logits(t, m, ids, x, n, chunk, logits, z)) != VKT_OK)
            break;
        for (uint64_t r = 0; r < (uint64_t)n * context; r++)
            total += trainer_nll(z + r * vocab, vocab, (uint32_t)y[r], NULL);
    }
    if (st == VKT_OK)
        *out_loss = (float)(total / ((double)use * context));
    free(x);
    free(z);
    free(y);
    return st;
}

/* A token drawn from softmax(z / temperature) (temperature 0: the most likely). */
static uint32_t draw(const float *z, uint32_t vocab, float temperature, uint64_t *rng)
{
    uint32_t best = 0;
    for (uint32_t c = 1; c < vocab; c++)
        best = z[c] > z[best] ? c : best;
    if (temperature <= 0.0f)
        return best;
    double sum = 0, u = (double)(core_splitmix64(rng) >> 11) * 0x1.0p-53;
    for (uint32_t c = 0; c < vocab; c++)
        sum += exp(((double)z[c] - z[best]) / temperature);
    double acc = 0;
    for (uint32_t c = 0; c < vocab; c++) {
        acc += exp(((double)z[c] - z[best]) / temperature) / sum;
        if (u < acc)
            return c;
    }
    return best;
}

vkt_status vkt_trainer_sample_text(vkt_trainer *t, const vkt_text *text, const vkt_tensor *ids,
                                   const vkt_tensor *logits, uint32_t context,
                                   const char *prompt, uint32_t n, float temperature,
                                   uint64_t seed, char *out)
{
    static const char fn[] = "vkt_trainer_sample_text";
    vkt_status st = check_lm(t, fn, text, ids, logits, context);
    if (st != VKT_OK)
        return st;
    if (!out || !(temperature >= 0.0f))
        return trainer_fail(t, VKT_ERROR_INVALID_ARGUMENT,
                            "%s: out is NULL or temperature %g is negative", fn, temperature);
    size_t plen = prompt ? strlen(prompt) : 0;
    uint32_t vocab = vkt_text_vocab(text), len = 0;
    uint8_t *seq = malloc(plen + n + 1);
    float *x = calloc(context, sizeof *x), *z = malloc((uint64_t)context * vocab * sizeof *z);
    if (!seq || !x || !z)
        st = trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    for (size_t i = 0; st == VKT_OK && i < plen; i++) {
        int32_t id = vkt_text_encode(text, (unsigned char)prompt[i]);
        if (id < 0)
            st = trainer_fail(t, VKT_ERROR_INVALID_ARGUMENT,
                              "%s: the prompt's character %zu (byte %u) is not in the text's "
                              "vocabulary", fn, i, (unsigned)(unsigned char)prompt[i]);
        else
            seq[len++] = (uint8_t)id;
    }
    if (st == VKT_OK && len == 0) { /* no prompt: start after a line break if there is one */
        int32_t nl = vkt_text_encode(text, '\n');
        seq[len++] = (uint8_t)(nl >= 0 ? nl : 0);
    }
    vkt_model *m = NULL;
    if (st == VKT_OK && !t->exec->predict)
        st = trainer_eval_model(t, logits, 1, &m);
    uint64_t rng = seed;
    for (uint32_t k = 0; st == VKT_OK && k < n; k++) {
        /* The last `context` tokens at positions 0..w-1; later positions are padding that
         * the causal mask keeps out of position w-1's prediction. */
        uint32_t w = len < context ? len : context;
        for (uint32_t i = 0; i < w; i++)
            x[i] = (float)seq[len - w + i];
        if ((st = forward_logits(t, m, ids, x, 1, 1, logits, z)) != VKT_OK)
            break;
        uint32_t id = draw(z + (uint64_t)(w - 1) * vocab, vocab, temperature, &rng);
        seq[len++] = (uint8_t)id;
        out[k] = (char)vkt_text_decode(text, id);
    }
    if (out)
        out[st == VKT_OK ? n : 0] = '\0';
    free(seq);
    free(x);
    free(z);
    return st;
}
