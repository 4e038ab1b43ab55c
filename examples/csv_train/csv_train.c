/*
 * csv_train - trains a small network on a CSV file of your own and saves it for later.
 *
 *   csv_train [options] DATA.csv LABEL_COLUMN      train, save into --out (default: model)
 *   csv_train --load DIR DATA.csv                  load a saved model, evaluate it on a CSV
 *
 * The CSV has a header line of column names; LABEL_COLUMN is the one to predict, every
 * other column is a numeric feature. Classification (--task classify, the default): the
 * label is an integer class 0, 1, 2, ... (read by vkt_dataset_load_csv). Regression
 * (--task regress): the label is any number (read here: the library's reader takes
 * integer labels only).
 *
 * Shows: standardizing features on the host (mean 0, variance 1, statistics from the
 * training rows), a multilayer perceptron with one hidden relu layer (--hidden 0: a
 * linear model), softmax cross-entropy or mean squared error, Adam, shuffled batches from
 * a vkt_loader, a validation split (every 5th row), and saving: a checkpoint folder
 * (vkt_checkpoint_save_dir), the weights as DIR/model.safetensors
 * (vkt_checkpoint_export_safetensors), and DIR/csv_train.txt with what is needed to use
 * the model again (task, sizes, the standardization). --load rebuilds the same model from
 * that file, restores the checkpoint and evaluates.
 *
 * Options: --task classify|regress, --hidden N (32), --epochs N (100), --batch N (32),
 * --lr X (0.01), --out DIR (model), --seed N (1).
 *
 * It prints one line every tenth of the run, "epoch E train_loss=L val_accuracy=A" (or
 * val_rmse, in the label's units), and ends with
 *
 *   result: val_accuracy=0.xxxx val_loss=0.xxxx saved=DIR    (classify)
 *   result: val_rmse=x.xxxx saved=DIR                        (regress)
 *
 * --load prints "result: accuracy=... loss=..." or "result: rmse=..." over the whole
 * file. Exits 0 on success, 1 with the status name and message on any failure, 2 on a
 * usage error.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vkt.h>

#define NAME "csv_train"

#define TRY(call, msg)                                                                  \
    do {                                                                                \
        vkt_status st_ = (call);                                                        \
        if (st_ != VKT_OK) {                                                            \
            fprintf(stderr, NAME ": %s: %s: %s\n", #call, vkt_status_name(st_), (msg));  \
            goto done;                                                                  \
        }                                                                               \
    } while (0)

/* What a saved model needs to be used again: DIR/csv_train.txt. */
typedef struct spec {
    char label[1024];                   /* the label column's name */
    int regress;
    uint32_t features, classes, hidden; /* classes: 1 output for regression */
    float *mean, *std;                  /* [features]: allocated once features is known */
    float y_mean, y_std;                /* regression: targets standardized too */
} spec;

/* Room for the statistics of s->features columns (any number: no fixed limit). */
static int spec_alloc(spec *s)
{
    free(s->mean);
    free(s->std);
    s->mean = calloc(s->features ? s->features : 1, sizeof *s->mean);
    s->std = calloc(s->features ? s->features : 1, sizeof *s->std);
    if (!s->mean || !s->std) {
        fprintf(stderr, NAME ": out of host memory for %u feature statistics\n", s->features);
        return -1;
    }
    return 0;
}

/* One line of f, whatever its length, into *buf (grown as needed, *cap bytes); the line
 * break is kept. Returns 0 at the end of the file (or out of memory, with a message). */
static int read_line(FILE *f, char **buf, size_t *cap)
{
    size_t n = 0;
    for (;;) {
        if (*cap - n < 2) {
            size_t bigger = *cap ? 2 * *cap : 4096;
            char *nb = realloc(*buf, bigger);
            if (!nb) {
                fprintf(stderr, NAME ": out of host memory for a line of %zu bytes\n", *cap);
                return 0;
            }
            *buf = nb;
            *cap = bigger;
        }
        if (!fgets(*buf + n, (int)(*cap - n > 1u << 30 ? 1u << 30 : *cap - n), f))
            return n > 0;
        n += strlen(*buf + n);
        if (n > 0 && (*buf)[n - 1] == '\n')
            return 1;
    }
}

/* The rows of a CSV: x[rows, features] and a float target per row. */
typedef struct table {
    uint32_t rows, features, classes;
    float *x, *y;
} table;

static void table_free(table *t)
{
    free(t->x);
    free(t->y);
    memset(t, 0, sizeof *t);
}

/* Classification: the library's reader (integer labels, errors naming line and column). */
static vkt_status read_classes(const char *path, const char *label, table *t)
{
    vkt_dataset *d = NULL;
    vkt_status st = vkt_dataset_load_csv(path, label, &d);
    if (st != VKT_OK)
        return st;
    t->rows = vkt_dataset_count(d);
    t->features = vkt_dataset_features(d);
    t->classes = vkt_dataset_classes(d);
    t->x = malloc((size_t)t->rows * t->features * sizeof *t->x);
    t->y = malloc((size_t)t->rows * sizeof *t->y);
    if (t->x && t->y) {
        memcpy(t->x, vkt_dataset_x(d), (size_t)t->rows * t->features * sizeof *t->x);
        for (uint32_t i = 0; i < t->rows; i++)
            t->y[i] = (float)vkt_dataset_y(d)[i];
    }
    vkt_dataset_destroy(d);
    return t->x && t->y ? VKT_OK : VKT_ERROR_OUT_OF_MEMORY;
}

/* Regression: a plain reader of numeric cells, comma-separated, the header first, lines
 * and columns of any number. Errors print the file, line and column. */
static int read_numbers(const char *path, const char *label, table *t)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, NAME ": cannot open '%s'\n", path);
        return -1;
    }
    char *line = NULL;
    size_t line_cap = 0;
    int label_col = -1, cols = 0, ok = 0;
    uint32_t cap = 0, lineno = 1;
    if (!read_line(f, &line, &line_cap)) {
        fprintf(stderr, NAME ": '%s' is empty\n", path);
        goto out;
    }
    for (char *tok = strtok(line, ",\r\n"); tok; tok = strtok(NULL, ",\r\n"), cols++)
        if (strcmp(tok, label) == 0)
            label_col = cols;
    if (label_col < 0 || cols < 2) {
        if (label_col < 0)
            fprintf(stderr, NAME ": '%s' line 1: no label column '%s' in the header\n", path,
                    label);
        else
            fprintf(stderr, NAME ": '%s' line 1: expected a feature column beside the label\n",
                    path);
        goto out;
    }
    t->features = (uint32_t)cols - 1;
    while (read_line(f, &line, &line_cap)) {
        lineno++;
        if (strspn(line, " \t\r\n") == strlen(line))
            continue;
        if (t->rows == cap) {
            cap = cap ? 2 * cap : 256;
            float *nx = realloc(t->x, (size_t)cap * t->features * sizeof *nx);
            if (nx)
                t->x = nx;
            float *ny = realloc(t->y, (size_t)cap * sizeof *ny);
            if (ny)
                t->y = ny;
            if (!nx || !ny) {
                fprintf(stderr, NAME ": out of host memory\n");
                goto out;
            }
        }
        char *p = line;
        float *row = t->x + (size_t)t->rows * t->features;
        for (int c = 0; c < cols; c++) {
            char *end;
            float v = strtof(p, &end);
            if (end == p || !isfinite(v) || (*end != ',' && c < cols - 1) ||
                (c == cols - 1 && strspn(end, " \t\r\n") != strlen(end))) {
                fprintf(stderr, NAME ": '%s' line %u, column %d: not a number, or not %d "
                        "fields\n", path, lineno, c + 1, cols);
                goto out;
            }
            if (c == label_col)
                t->y[t->rows] = v;
            else
                *row++ = v;
            p = end + 1;
        }
        t->rows++;
    }
    ok = t->rows > 0;
    if (!ok)
        fprintf(stderr, NAME ": '%s': no data rows after the header\n", path);
out:
    free(line);
    fclose(f);
    return ok ? 0 : -1;
}

/* The model: x[B, F] -> relu(x W1 + b1) W2 + b2 -> [B, outputs] (no hidden layer when
 * hidden is 0). Parameter names are those of the saved files. */
static vkt_tensor *network(vkt_graph *g, vkt_tensor *x, const spec *s)
{
    uint32_t in = s->features, out = s->regress ? 1 : s->classes;
    vkt_tensor *h = x;
    if (s->hidden) {
        vkt_tensor *w = vkt_param(g, "hidden.w", &(vkt_shape){2, {in, s->hidden}},
                                  &(vkt_init){.kind = VKT_INIT_HE});
        vkt_tensor *b = vkt_param(g, "hidden.b", &(vkt_shape){1, {s->hidden}}, NULL);
        h = vkt_relu(g, vkt_linear(g, x, w, b));
        in = s->hidden;
    }
    vkt_tensor *w = vkt_param(g, "out.w", &(vkt_shape){2, {in, out}},
                              &(vkt_init){.kind = VKT_INIT_GLOROT});
    vkt_tensor *b = vkt_param(g, "out.b", &(vkt_shape){1, {out}}, NULL);
    return vkt_linear(g, h, w, b);
}

/* DIR/csv_train.txt, written by the library's output rule (vkt_file_write): replaced
 * whole, and never the data file it was trained on (`data`, compared by file identity). */
static vkt_status save_spec(const char *dir, const spec *s, const char *data)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/csv_train.txt", dir);
    size_t cap = strlen(s->label) + 256 + (size_t)s->features * 48, n = 0;
    char *text = malloc(cap);
    if (!text)
        return VKT_ERROR_OUT_OF_MEMORY;
    n += (size_t)snprintf(text + n, cap - n, "label %s\n", s->label);
    n += (size_t)snprintf(text + n, cap - n,
                          "task %s\nfeatures %u\nclasses %u\nhidden %u\ntarget %.9g %.9g\n",
                          s->regress ? "regress" : "classify", s->features, s->classes,
                          s->hidden, (double)s->y_mean, (double)s->y_std);
    for (uint32_t i = 0; i < s->features && n < cap; i++) /* at most 2 x 16 + 10 bytes */
        n += (size_t)snprintf(text + n, cap - n, "feature %.9g %.9g\n", (double)s->mean[i],
                              (double)s->std[i]);
    const char *inputs[] = {data};
    vkt_status st = vkt_file_write(path, text, n < cap ? n : cap - 1, inputs, 1);
    free(text);
    return st;
}

static int load_spec(const char *dir, spec *s)
{
    char path[4096], task[16] = "";
    snprintf(path, sizeof path, "%s/csv_train.txt", dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, NAME ": cannot open '%s' (not a folder saved by csv_train?)\n", path);
        return -1;
    }
    char line[sizeof s->label + 6];
    int ok = fgets(line, sizeof line, f) && strncmp(line, "label ", 6) == 0;
    if (ok) {
        line[strcspn(line, "\r\n")] = '\0';
        memcpy(s->label, line + 6, strlen(line + 6) < sizeof s->label ? strlen(line + 6) + 1 : 1);
    }
    ok = ok && fscanf(f, "task %15s features %u classes %u hidden %u target %g %g", task,
                    &s->features, &s->classes, &s->hidden, &s->y_mean, &s->y_std) == 6 &&
             s->features >= 1 && spec_alloc(s) == 0;
    for (uint32_t i = 0; ok && i < s->features; i++)
        ok = fscanf(f, " feature %g %g", &s->mean[i], &s->std[i]) == 2;
    fclose(f);
    s->regress = strcmp(task, "regress") == 0;
    if (!ok)
        fprintf(stderr, NAME ": '%s' is malformed\n", path);
    return ok ? 0 : -1;
}

/* Standardizes x in place with the spec's statistics (and y for regression). */
static void standardize(const spec *s, table *t)
{
    for (uint32_t r = 0; r < t->rows; r++) {
        for (uint32_t c = 0; c < s->features; c++) {
            float *v = &t->x[(size_t)r * s->features + c];
            *v = (*v - s->mean[c]) / s->std[c];
        }
        if (s->regress)
            t->y[r] = (t->y[r] - s->y_mean) / s->y_std;
    }
}

/* Mean and standard deviation (1 where a column is constant) over the training rows. */
static void fit_standardization(spec *s, const table *t, const uint8_t *is_val)
{
    double sum[2] = {0}, n = 0;
    for (uint32_t c = 0; c <= s->features; c++) { /* c == features: the target */
        sum[0] = sum[1] = n = 0;
        for (uint32_t r = 0; r < t->rows; r++) {
            if (is_val[r])
                continue;
            double v = c < s->features ? t->x[(size_t)r * s->features + c] : t->y[r];
            sum[0] += v, sum[1] += v * v, n++;
        }
        double mean = sum[0] / n, var = sum[1] / n - mean * mean;
        float sd = var > 1e-12 ? (float)sqrt(var) : 1.0f;
        if (c < s->features)
            s->mean[c] = (float)mean, s->std[c] = sd;
        else if (s->regress)
            s->y_mean = (float)mean, s->y_std = sd;
        else
            s->y_mean = 0, s->y_std = 1;
    }
}

/* Classification: accuracy and mean cross-entropy; regression: RMSE in label units.
 * Rows where `pick` is NULL or pick[r] == want. */
static vkt_status evaluate(vkt_trainer *tr, const spec *s, vkt_tensor *x_in,
                           vkt_tensor *out, const table *t, const uint8_t *pick, int want,
                           double *metric, double *loss)
{
    uint32_t outs = s->regress ? 1 : s->classes, n = 0;
    float *x = malloc((size_t)t->rows * s->features * sizeof *x);
    float *p = malloc((size_t)t->rows * outs * sizeof *p);
    float *y = malloc((size_t)t->rows * sizeof *y);
    vkt_status st = VKT_ERROR_OUT_OF_MEMORY;
    if (x && p && y) {
        for (uint32_t r = 0; r < t->rows; r++)
            if (!pick || pick[r] == want) {
                memcpy(x + (size_t)n * s->features, t->x + (size_t)r * s->features,
                       s->features * sizeof *x);
                y[n++] = t->y[r];
            }
        vkt_feed feed = {x_in, x};
        st = n ? vkt_trainer_predict(tr, &feed, 1, n, out, p) : VKT_OK;
    }
    double right = 0, sum = 0;
    for (uint32_t i = 0; st == VKT_OK && i < n; i++) {
        if (s->regress) {
            double e = (double)(p[i] - y[i]) * s->y_std;
            sum += e * e;
            continue;
        }
        const float *z = p + (size_t)i * outs;
        uint32_t best = 0;
        double mx = z[0], lse = 0;
        for (uint32_t c = 1; c < outs; c++)
            if (z[c] > mx)
                mx = z[c], best = c;
        for (uint32_t c = 0; c < outs; c++)
            lse += exp(z[c] - mx);
        right += best == (uint32_t)y[i];
        sum += mx + log(lse) - z[(uint32_t)y[i]];
    }
    *metric = n == 0 ? 0 : s->regress ? sqrt(sum / n) : right / n;
    *loss = n == 0 ? 0 : sum / n;
    free(x), free(p), free(y);
    return st;
}

static int usage(void)
{
    fprintf(stderr, "usage: " NAME " [--task classify|regress] [--hidden N] [--epochs N] "
            "[--batch N] [--lr X] [--out DIR] [--seed N] DATA.csv LABEL_COLUMN\n"
            "       " NAME " --load DIR DATA.csv\n");
    return 2;
}

int main(int argc, char **argv)
{
    spec s = {0};
    const char *out_dir = "model", *load_dir = NULL, *pos[2] = {NULL, NULL};
    uint32_t epochs = 100, batch = 32, n_pos = 0;
    float lr = 0.01f;
    unsigned long long seed = 1;
    s.hidden = 32;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (a[0] == '-' && a[1] == '-' && !v)
            return usage();
        if (strcmp(a, "--task") == 0 && (strcmp(v, "classify") == 0 || strcmp(v, "regress") == 0))
            s.regress = strcmp(v, "regress") == 0, i++;
        else if (strcmp(a, "--hidden") == 0)
            s.hidden = (uint32_t)strtoul(v, NULL, 10), i++;
        else if (strcmp(a, "--epochs") == 0)
            epochs = (uint32_t)strtoul(v, NULL, 10), i++;
        else if (strcmp(a, "--batch") == 0)
            batch = (uint32_t)strtoul(v, NULL, 10), i++;
        else if (strcmp(a, "--lr") == 0)
            lr = strtof(v, NULL), i++;
        else if (strcmp(a, "--out") == 0)
            out_dir = v, i++;
        else if (strcmp(a, "--load") == 0)
            load_dir = v, i++;
        else if (strcmp(a, "--seed") == 0)
            seed = strtoull(v, NULL, 10), i++;
        else if (a[0] == '-' || n_pos == 2)
            return usage();
        else
            pos[n_pos++] = a;
    }
    if (n_pos != (load_dir ? 1u : 2u) || epochs == 0 || batch == 0 || !(lr > 0))
        return usage();

    int rc = 1;
    table t = {0};
    uint8_t *is_val = NULL;
    vkt_graph *graph = NULL;
    vkt_instance *instance = NULL;
    vkt_trainer *trainer = NULL;
    vkt_dataset *rows = NULL;
    vkt_loader *loader = NULL;
    float *rowbuf = NULL, *xb = NULL, *yb = NULL;
    int32_t *lb = NULL;
    if (load_dir && load_spec(load_dir, &s) != 0) {
        free(s.mean), free(s.std);
        return 1;
    }

    /* the data: classification labels through the library's reader; a saved model
     * reads the label column it was trained on */
    if (!load_dir)
        snprintf(s.label, sizeof s.label, "%s", pos[1]);
    if (s.regress) {
        if (read_numbers(pos[0], s.label, &t) != 0)
            goto done;
    } else {
        TRY(read_classes(pos[0], s.label, &t), vkt_last_error());
    }
    if (load_dir && (t.features != s.features || (!s.regress && t.classes > s.classes))) {
        fprintf(stderr, NAME ": '%s' has %u features and %u classes; the model in '%s' "
                "takes %u features and %u classes\n", pos[0], t.features, t.classes,
                load_dir, s.features, s.classes);
        goto done;
    }
    if (!load_dir) {
        s.features = t.features;
        s.classes = s.regress ? 1 : t.classes;
        if (!s.regress && s.classes < 2) {
            fprintf(stderr, NAME ": '%s': the labels name one class only\n", pos[0]);
            goto done;
        }
        if (spec_alloc(&s) != 0)
            goto done;
    }
    is_val = calloc(t.rows, 1);
    if (!is_val)
        goto done;
    for (uint32_t r = 4; r < t.rows && !load_dir; r += 5)
        is_val[r] = 1; /* every 5th row held out */
    uint32_t n_val = load_dir ? 0 : t.rows / 5, n_train = t.rows - n_val;
    if (!load_dir)
        fit_standardization(&s, &t, is_val);
    standardize(&s, &t);
    if (batch > n_train)
        batch = n_train;
    if (load_dir)
        printf("data: %u rows, %u features, %s\n", t.rows, s.features,
               s.regress ? "regression" : "classification");
    else
        printf("data: %u rows (%u training, %u validation), %u features, %s\n", t.rows,
               n_train, n_val, s.features, s.regress ? "regression" : "classification");

    /* the graph: features in, the network, the loss against labels or targets */
    vkt_graph_options go = {.seed = seed};
    TRY(vkt_graph_create(&go, &graph), vkt_last_error());
    vkt_tensor *x_in = vkt_input(graph, "x", &(vkt_shape){2, {batch, s.features}});
    vkt_tensor *y_in = s.regress ? vkt_input(graph, "y", &(vkt_shape){2, {batch, 1}})
                                 : vkt_input_labels(graph, "y", batch);
    vkt_tensor *pred = network(graph, x_in, &s);
    vkt_tensor *loss = s.regress ? vkt_mse(graph, pred, y_in)
                                 : vkt_softmax_cross_entropy(graph, pred, y_in);
    TRY(vkt_graph_status(graph), vkt_graph_errmsg(graph));
    TRY(vkt_instance_create(NULL, &instance), vkt_last_error());
    vkt_trainer_options to = {.batch = batch,
                              .optimizer = {.kind = VKT_OPTIMIZER_ADAM, .lr = lr}};
    TRY(vkt_trainer_create(instance, graph, loss, &to, &trainer), vkt_last_error());

    double metric = 0, vloss = 0;
    if (load_dir) {
        int found = 0;
        uint64_t step = 0;
        TRY(vkt_checkpoint_restore_latest(trainer, load_dir, &found, &step, NULL, 0),
            vkt_last_error());
        if (!found) {
            fprintf(stderr, NAME ": no checkpoint in '%s'\n", load_dir);
            goto done;
        }
        TRY(evaluate(trainer, &s, x_in, pred, &t, NULL, 0, &metric, &vloss), "prediction");
        printf("loaded: '%s', step %llu\n", load_dir, (unsigned long long)step);
        if (s.regress)
            printf("result: rmse=%.4f\n", metric);
        else
            printf("result: accuracy=%.4f loss=%.4f\n", metric, vloss);
        rc = 0;
        goto done;
    }

    /* Training rows as a data set of [features, target] rows (labels unused), so the
     * loader shuffles features and targets together. */
    uint32_t w = s.features + 1, k = 0;
    float *packed = malloc((size_t)n_train * w * sizeof *packed);
    rowbuf = malloc((size_t)batch * w * sizeof *rowbuf); /* [batch, features + 1] */
    xb = malloc((size_t)batch * s.features * sizeof *xb); /* [batch, features] */
    yb = malloc((size_t)batch * sizeof *yb);              /* regression: [batch, 1] */
    lb = malloc((size_t)batch * sizeof *lb);              /* labels, and the loader's */
    if (!packed || !rowbuf || !xb || !yb || !lb) {
        free(packed);
        fprintf(stderr, NAME ": out of host memory\n");
        goto done;
    }
    for (uint32_t r = 0; r < t.rows; r++)
        if (!is_val[r]) {
            memcpy(packed + (size_t)k * w, t.x + (size_t)r * s.features,
                   s.features * sizeof *packed);
            packed[(size_t)k++ * w + s.features] = t.y[r];
        }
    vkt_status cst = vkt_dataset_create(n_train, w, 0, packed, NULL, &rows);
    free(packed);
    TRY(cst, vkt_last_error());
    vkt_loader_options lo = {.batch = batch, .seed = seed};
    TRY(vkt_loader_create(rows, &lo, &loader), vkt_last_error());
    uint32_t steps = vkt_loader_batches_per_epoch(loader);

    for (uint32_t epoch = 1; epoch <= epochs; epoch++) {
        double sum = 0;
        for (uint32_t i = 0; i < steps; i++) {
            uint32_t got = 0; /* the data set's labels (all 0) land in lb, then replaced */
            TRY(vkt_loader_next(loader, rowbuf, lb, &got), vkt_last_error());
            for (uint32_t b = 0; b < batch; b++) { /* split [features, target] rows */
                memcpy(xb + (size_t)b * s.features, rowbuf + (size_t)b * w,
                       s.features * sizeof *xb);
                yb[b] = rowbuf[(size_t)b * w + s.features];
                lb[b] = (int32_t)yb[b];
            }
            vkt_feed feeds[] = {{x_in, xb}, {y_in, s.regress ? (const void *)yb : lb}};
            float l;
            TRY(vkt_trainer_step(trainer, feeds, 2, &l), vkt_trainer_errmsg(trainer));
            sum += l;
        }
        if (epoch % (epochs >= 10 ? epochs / 10 : 1) == 0 || epoch == epochs) {
            TRY(evaluate(trainer, &s, x_in, pred, &t, is_val, 1, &metric, &vloss),
                vkt_trainer_errmsg(trainer));
            printf("epoch %u train_loss=%.4f %s=%.4f\n", epoch, sum / steps,
                   s.regress ? "val_rmse" : "val_accuracy", metric);
            fflush(stdout);
        }
    }

    /* save: the checkpoint, its weights as safetensors, and the spec beside them */
    char st_path[4096];
    snprintf(st_path, sizeof st_path, "%s/model.safetensors", out_dir);
    TRY(vkt_checkpoint_save_dir(trainer, out_dir, 1), vkt_last_error());
    TRY(vkt_checkpoint_export_safetensors(out_dir, st_path, NULL), vkt_last_error());
    TRY(save_spec(out_dir, &s, pos[0]), vkt_last_error());
    if (s.regress)
        printf("result: val_rmse=%.4f saved=%s\n", metric, out_dir);
    else
        printf("result: val_accuracy=%.4f val_loss=%.4f saved=%s\n", metric, vloss, out_dir);
    rc = 0;
done:
    free(rowbuf), free(xb), free(yb), free(lb), free(is_val);
    vkt_loader_destroy(loader);
    vkt_dataset_destroy(rows);
    vkt_trainer_destroy(trainer);
    vkt_instance_destroy(instance);
    vkt_graph_destroy(graph);
    table_free(&t);
    free(s.mean), free(s.std);
    return rc;
}
