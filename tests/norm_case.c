/* norm_case.c - what the normalization and embedding kernel tests share (norm_case.h). */
#include "norm_case.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

vkt_context *g_ctx;
vkt_stream *g_s;
int g_aligned;
int g_quick;
float g_offset;

th_buf make_buf(uint64_t n)
{
    return g_aligned ? th_buf_create_at(g_ctx, n, 64) : th_buf_create(g_ctx, n);
}

tb tb_new(uint64_t n, float lo, float hi)
{
    tb t = {make_buf(n), th_alloc_floats(n)};
    th_fill_uniform(t.h, n, lo, hi);
    th_buf_write(&t.b, t.h);
    return t;
}

tb tb_const(uint64_t n, float value)
{
    tb t = {make_buf(n), th_alloc_floats(n)};
    for (uint64_t i = 0; i < n; i++)
        t.h[i] = value;
    th_buf_write(&t.b, t.h);
    return t;
}

void tb_free(tb *t)
{
    th_buf_destroy(&t->b);
    free(t->h);
}

vkt_view tv(const tb *t) { return th_view(&t->b); }

double *to_d(const float *f, uint64_t n)
{
    double *d = malloc((n ? n : 1) * sizeof *d);
    for (uint64_t i = 0; d && i < n; i++)
        d[i] = f[i];
    return d;
}

double *zeros(uint64_t n) { return calloc(n ? n : 1, sizeof(double)); }

void run(void)
{
    TH_OK(g_ctx, vkt_stream_run(g_s));
    TH_OK(g_ctx, vkt_stream_reset(g_s));
}

void expect(tb *t, const double *want, float rtol, float atol, const char *fmt, ...)
{
    char what[192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    float *w = th_alloc_floats(t->b.n);
    for (uint64_t i = 0; i < t->b.n; i++)
        w[i] = (float)want[i];
    th_buf_read(&t->b, t->h);
    th_compare(what, t->h, w, t->b.n, rtol, atol);
    th_buf_guards_ok(&t->b, what);
    free(w);
}

void expect_tol(tb *t, const double *want, const double *tol, const char *fmt, ...)
{
    char what[192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    th_buf_read(&t->b, t->h);
    uint64_t bad = 0, first = 0;
    for (uint64_t i = 0; i < t->b.n; i++) {
        double err = fabs(t->h[i] - want[i]);
        int ok = isnan(want[i]) ? isnan(t->h[i]) : err <= tol[i] + 1e-5 * fabs(want[i]);
        if (!ok && bad++ == 0)
            first = i;
    }
    if (bad)
        TH_CHECK(0, "%s: %llu of %llu elements differ; first at %llu: got %.9g want %.9g "
                 "(tolerance %.3g)", what, (unsigned long long)bad, (unsigned long long)t->b.n,
                 (unsigned long long)first, t->h[first], want[first], tol[first]);
    else
        TH_CHECK(1, "%s", what);
    th_buf_guards_ok(&t->b, what);
}

tols backward_tols(const float *x, const float *dy, const double *st, uint64_t n,
                   uint32_t sets, uint64_t inner, int per_column, uint32_t params)
{
    tols t = {zeros(n), zeros(params), zeros(params)};
    for (uint32_t k = 0; k < params; k++)
        t.dg[k] = t.db[k] = 1e-6;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t set = (i / inner) % sets;
        uint32_t k = per_column ? (uint32_t)(i % inner) : (uint32_t)set;
        double r = st[2 * set + 1], xhat = (x[i] - st[2 * set]) * r;
        t.dx[i] = 5e-5 + 1e-6 * r * r;
        t.dg[k] += 1e-4 * fabs(dy[i] * xhat);
        t.db[k] += 1e-4 * fabs((double)dy[i]);
    }
    return t;
}

void tols_free(tols *t)
{
    free(t->dx);
    free(t->dg);
    free(t->db);
}

void check_backward_subsets(const backward_case *c, const int *masks, unsigned n_masks)
{
    static const char *const names[3] = {"dx", "dgamma", "dbeta"};
    const uint64_t size[3] = {c->n, c->params, c->params};
    const double *tol[3] = {c->tol->dx, c->tol->dg, c->tol->db};
    for (unsigned mi = 0; mi < n_masks; mi++) {
        int m = masks[mi];
        for (int beta = 0; beta < 2; beta++) {
            tb out[3];
            double *want[3], *want_of[3];
            vkt_view view[3];
            const vkt_view *pass[3];
            for (uint32_t k = 0; k < c->outputs; k++) {
                int wanted = m >> k & 1;
                out[k] = beta ? tb_new(size[k], -1, 1) : tb_const(size[k], NAN);
                /* the expected values: an unwanted output keeps its contents */
                want[k] = beta || !wanted ? to_d(out[k].h, size[k]) : zeros(size[k]);
                view[k] = tv(&out[k]);
                pass[k] = wanted ? &view[k] : NULL;
                want_of[k] = wanted ? want[k] : NULL;
            }
            for (uint32_t k = c->outputs; k < 3; k++)
                pass[k] = NULL, want_of[k] = NULL;
            c->call(c->data, pass, (float)beta, want_of);
            for (uint32_t k = 0; k < c->outputs; k++) {
                expect_tol(&out[k], want[k], tol[k], "%s mask %d beta %d: %s", c->label, m,
                           beta, names[k]);
                tb_free(&out[k]);
                free(want[k]);
            }
        }
    }
}

void expect_error(vkt_status got, vkt_status want, const char *fn, const char *word,
                  const char *file, int line)
{
    const char *msg = vkt_context_errmsg(g_ctx);
    th_check(got == want && strstr(msg, fn) && strstr(msg, word), file, line,
             "%s: got %s (\"%s\"), expected %s mentioning \"%s\"", fn, vkt_status_name(got),
             msg, vkt_status_name(want), word);
}

int norm_main(const char *name, void (*host)(void), void (*device)(void), void (*errors)(void))
{
    th_init(name);
    g_ctx = th_context(VKT_KERNELS_AUTO);
    g_s = th_stream(g_ctx, 0);
    if (host)
        host();
    for (g_aligned = 0; g_aligned < 2; g_aligned++)
        device();
    g_aligned = 0;
    errors();
    /* The other kernel variant's grids, on the same device. */
    th_use_other_variant(&g_ctx, &g_s);
    g_quick = 1;
    for (g_aligned = 0; g_aligned < 2; g_aligned++)
        device();
    vkt_stream_destroy(g_s);
    return th_finish();
}
