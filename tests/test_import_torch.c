/* Weights trained by PyTorch, imported: vkt train's MLP (--hidden 64,32), CNN and char LM
 * (--width 32 --context 32 --layers 2 --heads 4), built by tools/models.c as vkt train
 * builds them, get the safetensors files tests/import/make_fixtures.py wrote with Debian's
 * python3-torch through vkt train's built-in map (--init-map torch, tools/torch_map.c),
 * and the first training step's loss (before its update) must equal the loss PyTorch
 * computed on the same batch (tests/import/expected.txt):
 *   |engine - PyTorch float32| <= 1e-5 * max(1, |PyTorch float32|)
 * Why 1e-5: both compute in float32 from the same float32 values but sum in different
 * orders (GEMM blocking, the softmax and norm reductions, the mean over the batch); each
 * sum of n terms may differ by a few n ulp relative to its magnitude, and the layers
 * compound that. The float64 loss PyTorch also wrote is reported beside it: the engine's
 * distance from it is the float32 rounding of both. A loss from another initialization
 * differs by far more (checked: the loss before the import), so a tensor that is missed,
 * transposed wrongly or put in the wrong place fails.
 * Usage: test_import_torch [FIXTURE_DIR]  (default: tests/import beside this file; the
 * ctest import_torch_regenerate passes a folder of freshly made fixtures). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "models.h"
#include "torch_map.h"

#define TOL 1e-5

static char fixtures[1024], root[1024]; /* the fixtures; the source tree */

/* The value of `key` in expected.txt (NAN if missing). */
static double expected(const char *key)
{
    char path[1200], line[256];
    snprintf(path, sizeof path, "%s/expected.txt", fixtures);
    FILE *f = fopen(path, "r");
    if (!f) {
        TH_CHECK(0, "cannot read %s", path);
        return NAN;
    }
    double v = NAN;
    size_t n = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == '=')
            v = strtod(line + n + 1, NULL);
    fclose(f);
    TH_CHECK(!isnan(v), "expected.txt has %s", key);
    return v;
}

/* The first step's loss of model m on the feeds, after importing `file` through the
 * built-in map of tm; *before: the same loss from the model's own initialization. */
static int first_loss(const char *what, const cli_model *m, const cli_torch_model *tm,
                      uint32_t batch, const vkt_feed *feeds, float *before, float *after)
{
    char path[1200], map[8192];
    snprintf(path, sizeof path, "%s/%s.safetensors", fixtures, tm->model);
    if (!TH_CHECK(cli_torch_map(tm, map, sizeof map), "%s: the map fits", what))
        return 0;
    vkt_trainer_options o = {.batch = batch, .optimizer = {.kind = VKT_OPTIMIZER_SGD, .lr = 0.01f}};
    vkt_trainer *t = NULL, *fresh = NULL;
    int ok = TH_OK(NULL, vkt_trainer_create(th_instance, m->graph, m->loss, &o, &fresh)) &&
             TH_OK(NULL, vkt_trainer_step(fresh, feeds, 2, before));
    vkt_trainer_destroy(fresh);
    ok = ok && TH_OK(NULL, vkt_trainer_create(th_instance, m->graph, m->loss, &o, &t));
    vkt_import_options io = {.map = map};
    vkt_import_report rep;
    if (ok && !TH_OK(NULL, vkt_trainer_import_safetensors(t, path, &io, &rep))) {
        printf("  %s\n", vkt_trainer_errmsg(t));
        ok = 0;
    }
    ok = ok && TH_OK(NULL, vkt_trainer_step(t, feeds, 2, after));
    if (ok)
        printf("%s: %u tensors loaded (%u transposed) from %s\n", what, rep.loaded,
               rep.transposed, path);
    vkt_trainer_destroy(t);
    return ok;
}

static void compare(const char *what, const char *key, float before, float got)
{
    char k32[64], k64[64];
    snprintf(k32, sizeof k32, "%s_loss_f32", key);
    snprintf(k64, sizeof k64, "%s_loss_f64", key);
    double want = expected(k32), want64 = expected(k64);
    double tol = TOL * fmax(1.0, fabs(want));
    printf("%s: first loss engine %.9g, PyTorch float32 %.9g (float64 %.9g): difference "
           "%.3g (%.3g relative), tolerance %.3g; from the engine's own initialization %.6g\n",
           what, got, want, want64, got - want, (got - want) / want, tol, before);
    TH_CHECK(fabs(got - want) <= tol, "%s: the engine's first loss %.9g is PyTorch's %.9g "
             "within %.3g", what, got, want, tol);
    TH_CHECK(fabs(before - want) > 100 * tol, "%s: a fresh model's loss %.6g is far from it "
             "(the test can tell a wrong import)", what, before);
}

static void test_classifiers(void)
{
    const char *dir = getenv("VKT_DATA_DIR");
    char def[1200];
    snprintf(def, sizeof def, "%s/data/mnist", root);
    vkt_dataset *train = NULL, *test = NULL;
    if (!TH_OK(NULL, vkt_dataset_load_mnist(dir ? dir : def, &train, &test)))
        return;
    enum { B = 128 };
    int32_t labels[B];
    memcpy(labels, vkt_dataset_y(train), sizeof labels);
    for (int k = 0; k < 2; k++) {
        const uint32_t widths[2] = {64, 32};
        cli_model m = {0};
        cli_torch_model tm = {.model = k ? "cnn" : "mlp", .n_widths = 2};
        vkt_status st = k ? cli_build_cnn(&m, B, 784, 10, 1)
                          : cli_build_mlp(&m, B, 784, 10, widths, 2, 0, 1);
        if (TH_OK(NULL, st)) {
            vkt_feed feeds[2] = {{m.input, vkt_dataset_x(train)}, {m.labels, labels}};
            float before = 0, after = 0;
            if (first_loss(tm.model, &m, &tm, B, feeds, &before, &after))
                compare(k ? "cnn" : "mlp (784-64-32-10)", tm.model, before, after);
        }
        vkt_graph_destroy(m.graph);
    }
    vkt_dataset_destroy(train);
    vkt_dataset_destroy(test);
}

static void test_charlm(void)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/data/austen/pride_and_prejudice.txt", root);
    vkt_text *text = NULL;
    if (!TH_OK(NULL, vkt_text_load(path, 0.1f, &text)))
        return;
    enum { B = 8, T = 32, STRIDE = 1000 };
    FILE *f = fopen(path, "rb");
    unsigned char bytes[B * STRIDE + T + 1];
    size_t got = f ? fread(bytes, 1, sizeof bytes, f) : 0;
    if (f)
        fclose(f);
    TH_CHECK(got == sizeof bytes, "read the text's start");
    float ids[B * T];
    int32_t targets[B * T];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            ids[b * T + t] = (float)vkt_text_encode(text, bytes[b * STRIDE + t]);
            targets[b * T + t] = vkt_text_encode(text, bytes[b * STRIDE + t + 1]);
        }
    TH_CHECK(vkt_text_vocab(text) == (uint32_t)expected("charlm_vocab"),
             "the vocabulary PyTorch used: %u characters", vkt_text_vocab(text));
    cli_lm_shape s = {.vocab = vkt_text_vocab(text), .context = T, .width = 32, .layers = 2,
                      .heads = 4};
    cli_model m = {0};
    if (TH_OK(NULL, cli_build_charlm(&m, B, &s, 1))) {
        cli_torch_model tm = {.model = "charlm", .layers = 2};
        vkt_feed feeds[2] = {{m.input, ids}, {m.labels, targets}};
        float before = 0, after = 0;
        if (first_loss("charlm", &m, &tm, B, feeds, &before, &after))
            compare("charlm (width 32, context 32, 2 layers, 4 heads)", "charlm", before, after);
    }
    vkt_graph_destroy(m.graph);
    vkt_text_destroy(text);
}

int main(int argc, char **argv)
{
    th_init("test_import_torch");
    /* the source tree: <root>/data/mnist is VKT_DATA_DIR (as ctest and scripts/windows.sh
     * set it), else this file is <root>/tests/test_import_torch.c */
    const char *data = getenv("VKT_DATA_DIR");
    size_t n = data ? strlen(data) : 0;
    if (n > 11 && !strcmp(data + n - 11, "/data/mnist"))
        snprintf(root, sizeof root, "%.*s", (int)(n - 11), data);
    else
        snprintf(root, sizeof root, "%s", __FILE__);
    for (int up = 0; root[0] && !(n > 11 && !strcmp(data + n - 11, "/data/mnist")) && up < 2;
         up++) {
        char *slash = strrchr(root, '/');
        if (slash)
            *slash = '\0';
        else
            snprintf(root, sizeof root, "..");
    }
    snprintf(fixtures, sizeof fixtures, "%s", argc > 1 ? argv[1] : root);
    if (argc == 1)
        snprintf(fixtures + strlen(fixtures), sizeof fixtures - strlen(fixtures), "/tests/import");
    test_classifiers();
    test_charlm();
    return th_finish();
}
