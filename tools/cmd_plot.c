/* vkt plot LOGDIR [-o FILE.png]: draws the curves of the CSV that `vkt train --logdir`
 * writes (the newest scalars.*.csv in LOGDIR, or a CSV file named directly) for people
 * without TensorBoard: an upper panel with train/loss (blue) and test/loss (orange), a
 * lower one with test/accuracy (green), each with a grid and its y range, the steps
 * along x. The y range is robust: one huge value (a loss spike) would flatten the rest
 * of the curve into a line, so values far outside the bulk of the panel's values are
 * drawn on its edge as triangles and counted in what it prints. Prints what it drew. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "platform/platform.h"
#include "png.h"

#define W 900
#define H 640

typedef struct series {
    const char *tag;
    uint8_t rgb[3];
    double *x, *y;
    size_t n, cap;
} series;

typedef struct canvas {
    uint8_t px[H][W][3];
} canvas;

static void put(canvas *c, int x, int y, const uint8_t *rgb)
{
    if (x >= 0 && x < W && y >= 0 && y < H)
        memcpy(c->px[y][x], rgb, 3);
}

static void line(canvas *c, int x0, int y0, int x1, int y1, const uint8_t *rgb, int thick)
{
    int dx = abs(x1 - x0), dy = -abs(y1 - y0), sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
    int err = dx + dy;
    for (;;) {
        for (int a = 0; a < thick; a++)
            for (int b = 0; b < thick; b++)
                put(c, x0 + a - thick / 2, y0 + b - thick / 2, rgb);
        if (x0 == x1 && y0 == y1)
            break;
        int e2 = 2 * err;
        if (e2 >= dy) {
            err += dy;
            x0 += sx;
        }
        if (e2 <= dx) {
            err += dx;
            y0 += sy;
        }
    }
}

/* A 3x5 font for numbers: rows top to bottom, 3 bits each (4 = left column). */
static const uint8_t g_glyph[12][5] = {
    {7, 5, 5, 5, 7}, {2, 6, 2, 2, 7}, {7, 1, 7, 4, 7}, {7, 1, 7, 1, 7}, {5, 5, 7, 1, 1},
    {7, 4, 7, 1, 7}, {7, 4, 7, 5, 7}, {7, 1, 1, 1, 1}, {7, 5, 7, 5, 7}, {7, 5, 7, 1, 7},
    {0, 0, 0, 0, 2}, {0, 0, 7, 0, 0}}; /* '.', '-' */

/* Draws a number's text at (x, y), top left, 3 pixels per font pixel. */
static void text(canvas *c, int x, int y, const char *s, const uint8_t *rgb)
{
    for (; *s; s++, x += 12) {
        int g = *s >= '0' && *s <= '9' ? *s - '0' : *s == '.' ? 10 : *s == '-' ? 11 : -1;
        for (int r = 0; g >= 0 && r < 5; r++)
            for (int k = 0; k < 3; k++)
                if (g_glyph[g][r] & (4 >> k))
                    for (int a = 0; a < 9; a++)
                        put(c, x + 3 * k + a % 3, y + 3 * r + a / 3, rgb);
    }
}

/* A filled triangle of the series' colour with its apex on the panel's edge at (x, y),
 * pointing out of the panel (dir -1: up, +1: down): a value clipped to the edge. */
static void clip_mark(canvas *c, int x, int y, int dir, const uint8_t *rgb)
{
    for (int r = 0; r < 9; r++)
        line(c, x - r, y - dir * r, x + r, y - dir * r, rgb, 1);
}

static int add_point(series *s, double x, double y)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        double *nx = realloc(s->x, cap * sizeof *nx);
        if (nx)
            s->x = nx;
        double *ny = nx ? realloc(s->y, cap * sizeof *ny) : NULL;
        if (!ny)
            return 0;
        s->y = ny;
        s->cap = cap;
    }
    s->x[s->n] = x;
    s->y[s->n++] = y;
    return 1;
}

/* The stamp and the writer's number of a summary CSV's name: "scalars.<stamp>.<host>.csv"
 * (number 1) or "scalars.<stamp>-<k>.<host>.csv" (a later writer of the same second);
 * 0 if the name is not one. */
static int csv_name(const char *name, unsigned long long *stamp, unsigned long long *k)
{
    size_t n = strlen(name);
    if (strncmp(name, "scalars.", 8) != 0 || n < 13 || strcmp(name + n - 4, ".csv") != 0)
        return 0;
    const char *p = name + 8;
    char *end;
    if (*p < '0' || *p > '9')
        return 0;
    *stamp = strtoull(p, &end, 10);
    *k = 1;
    if (*end == '-' && end[1] >= '0' && end[1] <= '9')
        *k = strtoull(end + 1, &end, 10);
    return *end == '.';
}

/* The newest summary CSV of dir into out (by stamp, then writer number), or dir itself if
 * it is a file; and every summary file of dir (its CSVs and event files: what the command
 * reads, which -o must never replace) into inputs, as malloc'd paths (*n_inputs). */
static int find_csv(const char *dir, char *out, size_t size, char ***inputs, size_t *n_inputs)
{
    char **names;
    size_t count;
    *inputs = NULL;
    *n_inputs = 0;
    if (plat_list_dir(dir, &names, &count) != 0) { /* not a folder: a file, or nothing */
        if (plat_file_stat(dir, NULL, NULL) != 0)
            return 0;
        snprintf(out, size, "%s", dir);
        return 1;
    }
    char best[512] = "";
    unsigned long long best_stamp = 0, best_k = 0, stamp, k;
    *inputs = calloc(count ? count : 1, sizeof **inputs);
    for (size_t i = 0; i < count; i++) {
        const char *name = names[i];
        int csv = csv_name(name, &stamp, &k);
        if (*inputs && (csv || strncmp(name, "events.out.tfevents.", 20) == 0)) {
            size_t len = strlen(dir) + strlen(name) + 2;
            char *path = malloc(len);
            if (path) {
                snprintf(path, len, "%s/%s", dir, name);
                (*inputs)[(*n_inputs)++] = path;
            }
        }
        if (csv && strlen(name) < sizeof best &&
            (!best[0] || stamp > best_stamp || (stamp == best_stamp && k > best_k) ||
             (stamp == best_stamp && k == best_k && strcmp(name, best) > 0))) {
            snprintf(best, sizeof best, "%s", name);
            best_stamp = stamp;
            best_k = k;
        }
    }
    plat_free_names(names, count);
    if (!best[0])
        return 0;
    snprintf(out, size, "%s/%s", dir, best);
    return 1;
}

static int read_csv(const char *path, series *s, int ns)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char buf[1024];
    int ok = fgets(buf, sizeof buf, f) && strncmp(buf, "step,wall_time,tag,value", 24) == 0;
    while (ok && fgets(buf, sizeof buf, f)) {
        char tag[512];
        unsigned long long step;
        double wall, value;
        if (sscanf(buf, "%llu,%lf,%511[^,],%lf", &step, &wall, tag, &value) != 4)
            continue; /* a partly written last line */
        for (int i = 0; i < ns; i++)
            if (strcmp(tag, s[i].tag) == 0 && isfinite(value))
                ok = add_point(&s[i], (double)step, value);
    }
    fclose(f);
    return ok;
}

static void fmt(char *buf, size_t n, double v)
{
    snprintf(buf, n, fabs(v) >= 100 ? "%.0f" : "%.3g", v);
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The y range [*lo, *hi] of a panel's values. The 1st to 99th percentile (at least the
 * extreme value on each side left out once there are 4 values) is the bulk; a value
 * beyond it by up to OUTLIER_WIDTHS times the bulk's width belongs to the curve and
 * extends the range (a loss curve's first steps fall steeply), one farther is an outlier
 * (a spike): the range stops a little (5% of the width) past the farthest value kept,
 * and the outlier is drawn clipped. The bulk then fills at least a fifth of the panel. */
#define OUTLIER_WIDTHS 4.0
static void robust_range(const series *s, int ns, double *lo, double *hi)
{
    size_t n = 0;
    for (int i = 0; i < ns; i++)
        n += s[i].n;
    double *v = n ? malloc(n * sizeof *v) : NULL;
    *lo = INFINITY;
    *hi = -INFINITY;
    if (!v) { /* no values, or no memory for the percentiles: the plain extremes */
        for (int i = 0; i < ns; i++)
            for (size_t k = 0; k < s[i].n; k++) {
                *lo = fmin(*lo, s[i].y[k]);
                *hi = fmax(*hi, s[i].y[k]);
            }
        return;
    }
    n = 0;
    for (int i = 0; i < ns; i++)
        for (size_t k = 0; k < s[i].n; k++)
            v[n++] = s[i].y[k];
    qsort(v, n, sizeof *v, by_value);
    size_t cut = n < 4 ? 0 : n / 100 > 1 ? n / 100 : 1;
    double blo = v[cut], bhi = v[n - 1 - cut];
    double width = fmax(bhi - blo, 1e-9 * fmax(fabs(bhi), 1.0));
    *lo = blo;
    *hi = bhi;
    int clipped_lo = 0, clipped_hi = 0;
    for (size_t k = 0; k < n; k++) {
        if (v[k] < blo && v[k] >= blo - OUTLIER_WIDTHS * width)
            *lo = fmin(*lo, v[k]);
        else if (v[k] < blo)
            clipped_lo = 1;
        if (v[k] > bhi && v[k] <= bhi + OUTLIER_WIDTHS * width)
            *hi = fmax(*hi, v[k]);
        else if (v[k] > bhi)
            clipped_hi = 1;
    }
    if (clipped_lo)
        *lo -= 0.05 * width;
    if (clipped_hi)
        *hi += 0.05 * width;
    free(v);
}

/* One panel: frame, grid, y range labels, the series; values outside the robust range
 * are drawn on its edge as triangles. Returns how many were. */
static size_t panel(canvas *c, int top, int bottom, series *s, int ns, double xmax)
{
    const int left = 90, right = W - 20;
    static const uint8_t grid[3] = {225, 225, 225}, axis[3] = {60, 60, 60};
    double lo, hi;
    robust_range(s, ns, &lo, &hi);
    if (!(lo <= hi))
        lo = 0, hi = 1;
    if (lo > 0 && lo < 0.5 * hi)
        lo = 0;
    if (hi - lo < 1e-9) { /* one value (e.g. one evaluation): centre it */
        double pad = fabs(lo) > 1e-9 ? 0.05 * fabs(lo) : 1.0;
        lo -= pad;
        hi += pad;
    }
    for (int g = 0; g <= 4; g++) {
        int y = bottom - (bottom - top) * g / 4, x = left + (right - left) * g / 4;
        line(c, left, y, right, y, grid, 1);
        line(c, x, top, x, bottom, grid, 1);
    }
    line(c, left, bottom, right, bottom, axis, 2);
    line(c, left, top, left, bottom, axis, 2);
    char label[32];
    fmt(label, sizeof label, hi);
    text(c, 8, top, label, axis);
    fmt(label, sizeof label, lo);
    text(c, 8, bottom - 15, label, axis);
    size_t clipped = 0;
    for (int i = 0; i < ns; i++)
        for (size_t k = 0; k < s[i].n; k++) {
            int x = left + (int)lround((right - left) * s[i].x[k] / xmax);
            int y = bottom - (int)lround((bottom - top) * (fmin(fmax(s[i].y[k], lo), hi) - lo) /
                                         (hi - lo));
            if (k > 0) {
                int px = left + (int)lround((right - left) * s[i].x[k - 1] / xmax);
                int py = bottom - (int)lround((bottom - top) *
                                              (fmin(fmax(s[i].y[k - 1], lo), hi) - lo) /
                                              (hi - lo));
                line(c, px, py, x, y, s[i].rgb, 3);
            }
            if (s[i].y[k] > hi || s[i].y[k] < lo) {
                clip_mark(c, x, y, s[i].y[k] > hi ? -1 : 1, s[i].rgb);
                clipped++;
            } else {
                line(c, x - 3, y, x + 3, y, s[i].rgb, 3); /* a mark at every point */
            }
        }
    return clipped;
}

int cmd_plot(int argc, char **argv)
{
    const char *dir = NULL, *out = "curves.png";
    for (int i = 1; i < argc; i++) {
        if ((strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--output") == 0) && i + 1 < argc)
            out = argv[++i];
        else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: vkt plot LOGDIR [-o FILE.png]   (default curves.png)\n");
            return 0;
        } else if (!dir && argv[i][0] != '-')
            dir = argv[i];
        else {
            fprintf(stderr, "vkt plot: unexpected argument '%s'\n"
                            "usage: vkt plot LOGDIR [-o FILE.png]\n", argv[i]);
            return 2;
        }
    }
    if (!dir) {
        fprintf(stderr, "usage: vkt plot LOGDIR [-o FILE.png]\n");
        return 2;
    }
    char csv[1024], **inputs = NULL;
    size_t n_inputs = 0;
    if (!find_csv(dir, csv, sizeof csv, &inputs, &n_inputs)) {
        plat_free_names(inputs, n_inputs);
        fprintf(stderr, "vkt plot: no scalars.*.csv in '%s' (written by vkt train --logdir)\n",
                dir);
        return 1;
    }
    series s[3] = {{.tag = "train/loss", .rgb = {31, 119, 180}},
                   {.tag = "test/loss", .rgb = {255, 127, 14}},
                   {.tag = "test/accuracy", .rgb = {44, 160, 44}}};
    canvas *c = malloc(sizeof *c);
    int rc = 1;
    if (!c || !read_csv(csv, s, 3)) {
        fprintf(stderr, "vkt plot: cannot read '%s' (missing, or not a vkt summary CSV)\n", csv);
        goto done;
    }
    if (s[0].n == 0 && s[2].n == 0) {
        fprintf(stderr, "vkt plot: '%s' has no train/loss or test/accuracy rows\n", csv);
        goto done;
    }
    double xmax = 1;
    for (int i = 0; i < 3; i++)
        for (size_t k = 0; k < s[i].n; k++)
            xmax = fmax(xmax, s[i].x[k]);
    memset(c, 255, sizeof *c);
    size_t clipped_up = panel(c, 20, H / 2 - 20, s, 2, xmax);
    size_t clipped_down = panel(c, H / 2 + 20, H - 40, s + 2, 1, xmax);
    static const uint8_t axis[3] = {60, 60, 60};
    char label[32];
    fmt(label, sizeof label, xmax);
    text(c, W - 20 - 12 * (int)strlen(label), H - 30, label, axis);
    text(c, 84, H - 30, "0", axis);
    char why[512];
    uint8_t *png = NULL;
    size_t png_n = 0;
    if (png_encode_rgb(&c->px[0][0][0], W, H, &png, &png_n, why, sizeof why) != 0) {
        fprintf(stderr, "vkt plot: %s\n", why);
        goto done;
    }
    /* the output rule (vkt_file_write): never the CSV read nor another file of the log
     * folder; a device or a pipe written in place */
    const char *reads[] = {csv};
    vkt_status st = n_inputs ? vkt_file_write(out, png, png_n, (const char *const *)inputs,
                                               n_inputs)
                             : vkt_file_write(out, png, png_n, reads, 1);
    free(png);
    if (st != VKT_OK) {
        fprintf(stderr, "vkt plot: %s\n", vkt_last_error());
        goto done;
    }
    printf("wrote %s (%dx%d) from %s: upper panel train/loss (blue, %zu points) and "
           "test/loss (orange, %zu), lower panel test/accuracy (green, %zu); steps 0..%.0f\n",
           out, W, H, csv, s[0].n, s[1].n, s[2].n, xmax);
    if (clipped_up + clipped_down)
        printf("outliers: %zu in the upper panel and %zu in the lower lie far outside the "
               "others; drawn on the edge as triangles\n", clipped_up, clipped_down);
    rc = 0;
done:
    plat_free_names(inputs, n_inputs);
    for (int i = 0; i < 3; i++) {
        free(s[i].x);
        free(s[i].y);
    }
    free(c);
    return rc;
}
