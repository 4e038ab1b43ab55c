/* norm_case.h - what the normalization and embedding kernel tests share (test_norm.c,
 * test_embedding.c; engine/kernels/norm.h): the context and stream, device tensors with
 * host copies, comparisons against the double references labelled printf-style, the
 * backward tolerances, one backward checked over subsets of its outputs and both betas,
 * and the error-path check. */
#ifndef VKT_TESTS_NORM_CASE_H
#define VKT_TESTS_NORM_CASE_H

#include "harness.h"
#include "kernels/norm.h"

extern vkt_context *g_ctx;
extern vkt_stream *g_s;
extern int g_aligned;  /* 1: tensors start 16-byte aligned; 0: at odd offsets */
extern int g_quick;    /* 1: the shorter pass of the other kernel variant */
extern float g_offset; /* added to the random x: a mean far from 0 tests the statistics'
                        * resistance to cancellation */

/* ---- device tensors with host copies ----------------------------------------------- */

typedef struct tb {
    th_buf b;
    float *h;
} tb;

/* Like th_buf_create, but element 0 at a 64-element boundary when g_aligned. */
th_buf make_buf(uint64_t n);
/* Uniform in [lo, hi), written to the device. */
tb tb_new(uint64_t n, float lo, float hi);
/* A tensor filled with one value (NaN for outputs that beta 0 must not read). */
tb tb_const(uint64_t n, float value);
void tb_free(tb *t);
vkt_view tv(const tb *t);
double *to_d(const float *f, uint64_t n);
double *zeros(uint64_t n);
/* Runs the stream's work and resets it. */
void run(void);

/* Reads t from the device into t->h, compares with `want`, checks the guards; the check's
 * label is printf(fmt, ...). */
void expect(tb *t, const double *want, float rtol, float atol, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Like expect, with a tolerance per element: |got - want| <= tol[i] + 1e-5 |want|. */
void expect_tol(tb *t, const double *want, const double *tol, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- backward outputs ------------------------------------------------------------- */

/* Tolerances of the backward outputs, from double statistics st (mean, rstd per row or
 * channel) of `sets` sets; element i of x belongs to set (i / inner) % sets.
 * dx: fp32 statistics perturb xhat by about 1e-7 |x| rstd and dx by rstd times that, so
 * a set with a tiny variance (large rstd, as happens among thousands of random 3-element
 * rows) is ill-conditioned: 5e-5 + 1e-6 rstd^2.
 * dgamma, dbeta: fp32 sums of many terms of both signs: 1e-6 + 1e-4 times the sum of the
 * terms' magnitudes (|dy xhat| and |dy|), per parameter p = param_of(i). */
typedef struct tols {
    double *dx, *dg, *db;
} tols;

tols backward_tols(const float *x, const float *dy, const double *st, uint64_t n,
                   uint32_t sets, uint64_t inner, int per_column, uint32_t params);
void tols_free(tols *t);

/* A normalization backward with outputs dx [n], dgamma and (outputs 3) dbeta [params]:
 * call records the device call (out[k] NULL: output k not wanted; betas all `beta`) and
 * computes the reference into want[k] (NULL likewise), from `data`. */
typedef struct backward_case {
    const char *label; /* "layernorm_backward 3x5 aligned 1" */
    uint64_t n;
    uint32_t params, outputs;
    const tols *tol;
    void (*call)(const void *data, const vkt_view *const out[3], float beta,
                 double *const want[3]);
    const void *data;
} backward_case;

/* For each subset masks[0 .. n_masks) of the outputs (bit k: output k wanted), beta 0 over
 * NaN-filled outputs, then beta 1 over random values: every output against the reference
 * (an unwanted output keeps its contents), labelled "LABEL mask M beta B: dx". */
void check_backward_subsets(const backward_case *c, const int *masks, unsigned n_masks);

/* ---- error paths ------------------------------------------------------------------ */

/* The status is `want` and the context's message names the call and mentions `word`. */
void expect_error(vkt_status got, vkt_status want, const char *fn, const char *word,
                  const char *file, int line);
#define EXPECT_ERROR(expr, want, fn, word)                                               \
    expect_error((expr), (want), (fn), (word), __FILE__, __LINE__)

/* ---- the program ------------------------------------------------------------------ */

/* A kernel test's main: th_init(name), then host() (may be NULL), device() at odd offsets
 * and again 16-byte aligned (g_aligned 0, 1), errors(), and device() once more in the
 * shorter pass (g_quick) with the other kernel variant's grids. Returns th_finish(). */
int norm_main(const char *name, void (*host)(void), void (*device)(void), void (*errors)(void));

#endif /* VKT_TESTS_NORM_CASE_H */
