#include "harness.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "graph/model.h"
#include "platform/platform.h"

vkt_instance *th_instance;

static const char *g_name = "test";
static unsigned g_passed, g_failed;
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

#define TH_SENTINEL 0x7FBADBADu /* a NaN no kernel produces */
/* Every context th_context / th_context_filter made and th_context_release has not:
 * th_finish destroys them all (a context left out leaks its device under ASan). */
static vkt_context **g_contexts;
static unsigned g_context_count, g_context_cap;

void th_init_host(const char *test_name)
{
    g_name = test_name;
    th_seed(0x5EED0000ull ^ (uint64_t)strlen(test_name));
}

void th_init(const char *test_name)
{
    th_init_host(test_name);
    vkt_status st = vkt_instance_create(NULL, &th_instance);
    if (st != VKT_OK) {
        fprintf(stderr, "%s: cannot create the Vulkan instance: %s (%s)\n", g_name,
                vkt_status_name(st), vkt_last_error());
        printf("0 passed, 1 failed\n");
        exit(1);
    }
}

static const char *g_part;  /* --part NAME, or NULL: every part */
static int g_part_offered; /* th_part was asked about g_part */

void th_parts(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--part") == 0) {
        g_part = argv[2];
        printf("%s: part %s only\n", g_name, g_part);
    } else if (argc != 1) {
        fprintf(stderr, "usage: %s [--part NAME]\n", g_name);
        exit(2);
    }
}

int th_part(const char *name)
{
    if (!g_part)
        return 1;
    if (strcmp(name, g_part) != 0)
        return 0;
    g_part_offered = 1;
    return 1;
}

const char *th_temp_dir(const char *prefix, char *buf, size_t size)
{
    char name[128];
    snprintf(name, sizeof name, "vkt_%s_", prefix);
    if (plat_make_temp_dir(name, buf, size) != 0) {
        fprintf(stderr, "%s: cannot create a temporary folder %s...\n", g_name, name);
        printf("%u passed, %u failed\n", g_passed, g_failed + 1);
        exit(1);
    }
    return buf;
}

void th_remove_tree(const char *path)
{
    char **names;
    size_t n;
    if (plat_list_dir(path, &names, &n) != 0) { /* a file, or nothing */
        plat_remove_file(path);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        char sub[4096];
        if (snprintf(sub, sizeof sub, "%s/%s", path, names[i]) < (int)sizeof sub)
            th_remove_tree(sub);
    }
    plat_free_names(names, n);
    plat_remove_dir(path);
}

static vkt_context *context_of(const vkt_context_options *o)
{
    vkt_context *ctx = NULL;
    vkt_status st = vkt_context_create(th_instance, o, &ctx);
    if (st != VKT_OK) {
        fprintf(stderr, "%s: cannot create a context: %s (%s)\n", g_name, vkt_status_name(st),
                vkt_last_error());
        printf("%u passed, %u failed\n", g_passed, g_failed + 1);
        exit(1);
    }
    if (g_context_count == g_context_cap) {
        unsigned cap = g_context_cap ? 2 * g_context_cap : 8;
        vkt_context **grown = realloc(g_contexts, cap * sizeof *grown);
        if (!grown) {
            fprintf(stderr, "%s: out of host memory for the contexts' list\n", g_name);
            printf("%u passed, %u failed\n", g_passed, g_failed + 1);
            exit(1);
        }
        g_contexts = grown, g_context_cap = cap;
    }
    g_contexts[g_context_count++] = ctx;
    return ctx;
}

void th_context_release(vkt_context *ctx)
{
    for (unsigned i = 0; i < g_context_count; i++)
        if (g_contexts[i] == ctx) {
            g_contexts[i] = g_contexts[--g_context_count];
            break;
        }
    vkt_context_destroy(ctx);
}

vkt_context *th_context(vkt_kernel_variant variant)
{
    vkt_context_options o;
    memset(&o, 0, sizeof o);
    o.kernels = variant;
    return context_of(&o);
}

vkt_context *th_context_filter(const char *filter)
{
    vkt_context_options o;
    memset(&o, 0, sizeof o);
    o.kernel_variants = filter;
    return context_of(&o);
}

vkt_stream *th_stream(vkt_context *ctx, int timestamps)
{
    vkt_stream_options o = {.timestamps = timestamps};
    vkt_stream *s = NULL;
    vkt_status st = vkt_stream_create(ctx, &o, &s);
    if (st != VKT_OK) {
        fprintf(stderr, "%s: cannot create a stream: %s\n", g_name, vkt_context_errmsg(ctx));
        printf("%u passed, %u failed\n", g_passed, g_failed + 1);
        exit(1);
    }
    return s;
}

void th_use_other_variant(vkt_context **ctx, vkt_stream **s)
{
    vkt_kernel_variant v = vkt_context_kernel_variant(*ctx) == VKT_KERNELS_GPU ? VKT_KERNELS_CPU
                                                                              : VKT_KERNELS_GPU;
    vkt_stream_destroy(*s);
    *ctx = th_context(v);
    *s = th_stream(*ctx, 0);
}

int th_finish(void)
{
    uint64_t vcount = vkt_instance_validation_count(th_instance);
    for (unsigned i = 0; i < g_context_count; i++)
        vkt_context_destroy(g_contexts[i]);
    free(g_contexts);
    g_contexts = NULL, g_context_count = g_context_cap = 0;
    /* Messages can also arrive while contexts are destroyed. */
    vcount = vkt_instance_validation_count(th_instance);
    if (vcount) {
        fprintf(stderr, "%s: FAIL: %llu validation-layer messages\n", g_name,
                (unsigned long long)vcount);
        g_failed++;
    }
    if (g_part && !g_part_offered) {
        fprintf(stderr, "%s: FAIL: no part is named '%s'\n", g_name, g_part);
        g_failed++;
    }
    vkt_instance_destroy(th_instance);
    th_instance = NULL;
    printf("%s: %u passed, %u failed\n", g_name, g_passed, g_failed);
    return g_failed ? 1 : 0;
}

int th_check(int cond, const char *file, int line, const char *fmt, ...)
{
    if (cond) {
        g_passed++;
        return 1;
    }
    g_failed++;
    fprintf(stderr, "%s:%d: FAIL: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 0;
}

int th_check_status(vkt_context *ctx, vkt_status got, vkt_status want, const char *expr,
                    const char *file, int line)
{
    return th_check(got == want, file, line, "%s returned %s, expected %s (%s)", expr,
                    vkt_status_name(got), vkt_status_name(want),
                    ctx ? vkt_context_errmsg(ctx) : vkt_last_error());
}

void th_seed(uint64_t seed) { g_rng = seed ? seed : 1; }

uint64_t th_rand_u64(void)
{
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return g_rng * 0x2545F4914F6CDD1Dull;
}

float th_rand_uniform(float lo, float hi)
{
    double u = (double)(th_rand_u64() >> 11) * (1.0 / 9007199254740992.0);
    return (float)(lo + (hi - lo) * u);
}

void th_fill_uniform(float *x, uint64_t n, float lo, float hi)
{
    for (uint64_t i = 0; i < n; i++)
        x[i] = th_rand_uniform(lo, hi);
}

float *th_alloc_floats(uint64_t n)
{
    float *p = malloc((n ? n : 1) * sizeof(float));
    if (!p) {
        fprintf(stderr, "%s: out of host memory for %llu floats\n", g_name,
                (unsigned long long)n);
        printf("%u passed, %u failed\n", g_passed, g_failed + 1);
        exit(1);
    }
    return p;
}

th_buf th_buf_create_at(vkt_context *ctx, uint64_t n, uint64_t offset)
{
    th_buf b = {.ctx = ctx, .n = n, .offset = offset, .guard = 67};
    uint64_t total = b.offset + n + b.guard;
    vkt_status st = vkt_buffer_create(ctx, total * 4, VKT_MEMORY_DEVICE, &b.buffer);
    if (st != VKT_OK) {
        fprintf(stderr, "%s: cannot create a buffer of %llu floats: %s\n", g_name,
                (unsigned long long)total, vkt_context_errmsg(ctx));
        printf("%u passed, %u failed\n", g_passed, g_failed + 1);
        exit(1);
    }
    uint32_t *fill = malloc(total * 4);
    if (!fill)
        exit(1);
    for (uint64_t i = 0; i < total; i++)
        fill[i] = TH_SENTINEL;
    TH_OK(ctx, vkt_buffer_write(b.buffer, 0, fill, total * 4));
    free(fill);
    return b;
}

th_buf th_buf_create(vkt_context *ctx, uint64_t n)
{
    /* An odd element offset, so kernels see a binding that is not 16-byte aligned. */
    return th_buf_create_at(ctx, n, 67 + th_rand_u64() % 5);
}

void th_buf_destroy(th_buf *b)
{
    vkt_buffer_destroy(b->buffer);
    b->buffer = NULL;
}

vkt_view th_view(const th_buf *b) { return (vkt_view){b->buffer, b->offset}; }

void th_buf_write(th_buf *b, const float *data)
{
    TH_OK(b->ctx, vkt_buffer_write(b->buffer, b->offset * 4, data, b->n * 4));
}

void th_buf_read(th_buf *b, float *data)
{
    TH_OK(b->ctx, vkt_buffer_read(b->buffer, b->offset * 4, data, b->n * 4));
}

int th_buf_guards_ok(th_buf *b, const char *what)
{
    uint32_t before[80], after[80];
    int ok = 1;
    TH_OK(b->ctx, vkt_buffer_read(b->buffer, 0, before, b->offset * 4));
    TH_OK(b->ctx, vkt_buffer_read(b->buffer, (b->offset + b->n) * 4, after, b->guard * 4));
    for (uint64_t i = 0; i < b->offset && ok; i++)
        ok = before[i] == TH_SENTINEL;
    for (uint64_t i = 0; i < b->guard && ok; i++)
        ok = after[i] == TH_SENTINEL;
    return TH_CHECK(ok, "%s: a guard element next to the output was overwritten", what);
}

int th_compare(const char *what, const float *got, const float *want, uint64_t n, float rtol,
               float atol)
{
    uint64_t bad = 0, first = 0;
    double max_err = 0;
    for (uint64_t i = 0; i < n; i++) {
        int ok;
        if (isnan(want[i]))
            ok = isnan(got[i]);
        else if (isinf(want[i]))
            ok = got[i] == want[i];
        else {
            double err = fabs((double)got[i] - (double)want[i]);
            if (err > max_err || isnan(err))
                max_err = isnan(err) ? INFINITY : err;
            ok = err <= atol + rtol * fabs((double)want[i]);
        }
        if (!ok && bad++ == 0)
            first = i;
    }
    if (bad)
        return TH_CHECK(0, "%s: %llu of %llu elements differ; first at %llu: got %.9g want %.9g"
                        " (max abs err %.3g)", what, (unsigned long long)bad,
                        (unsigned long long)n, (unsigned long long)first, got[first],
                        want[first], max_err);
    return TH_CHECK(1, "%s", what);
}

uint32_t th_model_staged_copies(const vkt_model *m, int training)
{
    uint32_t n = (uint32_t)(m->inputs_staged + m->loss_staged);
    for (uint32_t i = 0; m->readback && i < m->n; i++)
        n += (m->rb_val[i] != UINT64_MAX) + (training && m->rb_grad[i] != UINT64_MAX);
    return n;
}

th_half th_half_new(vkt_context *ctx, vkt_dtype t, uint64_t n, uint64_t skip, float lo,
                    float hi)
{
    uint64_t floats = (skip + n + 1) / 2;
    th_half x = {th_buf_create(ctx, floats), n, skip, calloc(floats * 2, 2), calloc(n, 8),
                 calloc(n, 8)};
    float *f = th_alloc_floats(n), *back = th_alloc_floats(n);
    th_fill_uniform(f, n, lo, hi);
    vkt_convert(VKT_DTYPE_FP32, f, t, x.bits + skip, n);
    vkt_convert(t, x.bits + skip, VKT_DTYPE_FP32, back, n);
    for (uint64_t i = 0; i < n; i++)
        x.exact[i] = f[i], x.stored[i] = back[i];
    th_buf_write(&x.b, (const float *)x.bits);
    free(f);
    free(back);
    return x;
}

vkt_view th_half_view(const th_half *x)
{
    vkt_view v = th_view(&x->b);
    return (vkt_view){v.buffer, v.offset * 2 + x->skip};
}

void th_half_free(th_half *x)
{
    th_buf_destroy(&x->b);
    free(x->bits), free(x->exact), free(x->stored);
}
