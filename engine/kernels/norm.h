/*
 * norm.h - layer normalization, RMS normalization, batch normalization and embedding
 * kernels (forward and backward) with their double-precision CPU references.
 *
 * Conventions of the kernel library: views count floats; each call records into a
 * stream (nothing runs until vkt_stream_run); every call checks its arguments and
 * returns a vkt_status with the message in the context (vkt_context_errmsg). Backward
 * outputs are optional (NULL: not wanted, at least one must be given); beta 0 overwrites
 * an output without reading it (old contents may be NaN), 1 adds to it. No float atomics
 * anywhere: the same inputs give bitwise the same outputs on every run.
 *
 * Outputs must not overlap any input or each other, with two exceptions that are safe
 * because each element is read and then written by the same thread: y may be x itself
 * (every forward), and dx may be dy itself (batchnorm backward only; the layernorm and
 * rmsnorm backwards read dy in other workgroups while they write dx).
 *
 * Dispatches (lavapipe pays about 50 us each): one per call. kn_layernorm_backward
 * computes dx (by rows) and dgamma/dbeta (by columns) as two roles of one dispatch, and
 * kn_rmsnorm_backward likewise (dx, dgamma);
 * kn_batchnorm has one workgroup per channel compute the statistics, then normalize;
 * kn_embedding_backward splits batches of more than about 15,000 ids on lavapipe (its
 * loop budget) into consecutive dispatches. No workspace is needed.
 *
 * Measured on lavapipe, LP_NUM_THREADS=1, 16-byte aligned tensors, forward + backward:
 * layernorm [2048, 64] about 1.9 ms; embedding 2048 ids of [90, 64] about 1.3 ms;
 * batchnorm [64, 16, 196] about 2.9 ms, [64, 32, 784] about 30 ms (2 + 2 passes over x
 * and dy; a relu over the same 1.6M elements takes 3 ms). Tensors not 16-byte aligned, or
 * rows and channels not a multiple of 4 long, take the scalar paths, 2 to 3 times slower.
 * The batchnorm grid, one workgroup per channel, suits CPU devices; a large GPU would
 * want channels split over several workgroups.
 * RMSNorm against LayerNorm on the same shape (bench_norm, bench/README.md; fastest of
 * 100 runs on a loaded machine): [2048, 64] forward 0.38 against 0.46 ms, backward 0.94
 * against 1.01 ms; the backwards are bound by the same passes over x and dy.
 *
 * Shaders: shaders/layernorm*.comp, rmsnorm*.comp, batchnorm*.comp, embedding*.comp;
 * push constants in shaders/push_norm.h; references in ref_norm.c.
 */
#ifndef VKT_KERNELS_NORM_H
#define VKT_KERNELS_NORM_H

#include <stdint.h>

#include "gpu/gpu.h"

/* ---- layer normalization ------------------------------------------------------ */

/* Layer normalization over the last axis: x, y [rows, cols]; gamma, beta [cols];
 * y = (x - mean) * rstd * gamma + beta, rstd = 1 / sqrt(var + eps), var biased (divide by
 * cols). stats [rows, 2] receives (mean, rstd) of each row for the backward. eps >= 0.
 * Rows longer than the device's loop budget allows, and tensors wider than one storage
 * binding may span, fail with VKT_ERROR_LIMIT (also in the backward), as kn_rmsnorm's. */
vkt_status kn_layernorm(vkt_stream *s, vkt_view x, vkt_view gamma, vkt_view beta, vkt_view y,
                        vkt_view stats, uint32_t rows, uint32_t cols, float eps);
/* Workspace elements kn_layernorm_backward needs: 0 (the column sums are combined in
 * shared memory), so its workspace argument is ignored and may be any view. */
uint64_t kn_layernorm_workspace_elems(uint32_t rows, uint32_t cols);
/* With xhat = (x - mean) * rstd from stats and g = dy * gamma:
 * dx = rstd * (g - mean over the row of g - xhat * mean of g * xhat),
 * dgamma = column sums of dy * xhat, dbeta = column sums of dy.
 * dx, dgamma, dbeta each optional (NULL: not wanted); beta 0 writes (old contents
 * ignored, may be NaN), 1 adds. dx must not overlap dy. */
vkt_status kn_layernorm_backward(vkt_stream *s, vkt_view x, vkt_view gamma, vkt_view stats,
                                 vkt_view dy, const vkt_view *dx, float beta_x,
                                 const vkt_view *dgamma, float beta_g, const vkt_view *dbeta,
                                 float beta_b, vkt_view workspace, uint32_t rows,
                                 uint32_t cols);

/* ---- RMS normalization (LLaMA-style) -------------------------------------------- */

/* RMS normalization over the last axis: x, y [rows, cols]; gamma [cols]; no beta, no
 * mean subtracted. y = x * rstd * gamma, rstd = 1 / sqrt(mean over the row of x^2 + eps).
 * rstd [rows] receives each row's rstd for the backward. eps >= 0 (eps 0 and a row of
 * zeros give NaN, as the definition does). y may be x. Rows longer than the device's
 * loop budget allows, and tensors wider than one storage binding may span
 * (maxStorageBufferRange: 32M floats on lavapipe), fail with VKT_ERROR_LIMIT naming the
 * argument (also in the backward). */
vkt_status kn_rmsnorm(vkt_stream *s, vkt_view x, vkt_view gamma, vkt_view y, vkt_view rstd,
                      uint32_t rows, uint32_t cols, float eps);
/* Workspace elements kn_rmsnorm_backward needs: 0 (the column sums are combined in
 * shared memory), so its workspace argument is ignored and may be any view. */
uint64_t kn_rmsnorm_workspace_elems(uint32_t rows, uint32_t cols);
/* With xhat = x * rstd (rstd [rows] from the forward) and g = dy * gamma:
 * dx = rstd * (g - xhat * mean over the row of g * xhat),
 * dgamma [cols] = column sums of dy * xhat.
 * dx, dgamma each optional (NULL: not wanted, at least one given); beta 0 writes (old
 * contents ignored, may be NaN), 1 adds. dx must not overlap dy. */
vkt_status kn_rmsnorm_backward(vkt_stream *s, vkt_view x, vkt_view gamma, vkt_view rstd,
                               vkt_view dy, const vkt_view *dx, float beta_x,
                               const vkt_view *dgamma, float beta_g, vkt_view workspace,
                               uint32_t rows, uint32_t cols);

/* ---- batch normalization ------------------------------------------------------ */

/* Batch normalization over x [n, c, hw] (NCHW with h*w = hw; hw = 1 for [n, c]); gamma,
 * beta [c]. training 1: per-channel mean and biased variance over n*hw, y normalized with
 * them, stats [c, 2] receives (mean, rstd), and the running averages (running_mean,
 * running_var [c], read-write) become (1 - momentum) * running + momentum * batch value,
 * with the UNBIASED variance (n*hw/(n*hw-1)) for running_var (PyTorch's convention;
 * n*hw = 1: the biased one). training 0 (KN_BN_EVAL): y uses running_mean/var, stats and
 * running values are not touched (stats is then not checked and may be any view).
 * KN_BN_TRAIN_KEEP: as training, but the running averages are left as they are (a
 * pipeline stage's forward, which its backward recomputes). eps >= 0.
 * One workgroup per channel walks all n*hw of its elements: channels longer than the
 * loop budget allows (about 10 million elements on lavapipe) fail with VKT_ERROR_LIMIT. */
/* kn_batchnorm's and kn_ref_batchnorm's `training`. */
enum { KN_BN_EVAL = 0, KN_BN_TRAIN = 1, KN_BN_TRAIN_KEEP = 2 };
vkt_status kn_batchnorm(vkt_stream *s, vkt_view x, vkt_view gamma, vkt_view beta, vkt_view y,
                        vkt_view stats, vkt_view running_mean, vkt_view running_var,
                        uint32_t n, uint32_t c, uint32_t hw, float eps, float momentum,
                        int training);
/* 0: the backward needs no workspace (its argument is ignored, may be any view). */
uint64_t kn_batchnorm_workspace_elems(uint32_t n, uint32_t c, uint32_t hw);
/* Backward of the training-mode forward (batch statistics from stats). With xhat =
 * (x - mean) * rstd and m = n * hw: dbeta = sum dy, dgamma = sum dy * xhat per channel,
 * dx = gamma * rstd * (dy - dbeta / m - xhat * dgamma / m). Optional outputs and betas as
 * above; dx may be dy itself. */
vkt_status kn_batchnorm_backward(vkt_stream *s, vkt_view x, vkt_view gamma, vkt_view stats,
                                 vkt_view dy, const vkt_view *dx, float beta_x,
                                 const vkt_view *dgamma, float beta_g, const vkt_view *dbeta,
                                 float beta_b, vkt_view workspace, uint32_t n, uint32_t c,
                                 uint32_t hw);

/* ---- embedding (embedding.c) ---------------------------------------------------- */

/* Embedding lookup: ids [n] hold token ids as floats (exact integers; the graph layer
 * checks 0 <= id < vocab on the host before a step), table [vocab, dim],
 * y [n, dim] = table[ids[i]]. vocab <= 2^24 (ids are floats). An id out of range reads
 * the nearest valid row (no out-of-bounds access; never relied upon). */
vkt_status kn_embedding(vkt_stream *s, vkt_view ids, vkt_view table, vkt_view y, uint32_t n,
                        uint32_t vocab, uint32_t dim);
/* dtable (beta 0 writes, 1 adds) [vocab, dim] += sum over i with ids[i] == v of dy[i].
 * Deterministic: thread (v, column block) scans the ids in order and adds the matching
 * rows of dy in registers, so repeated ids sum in one fixed order; rows no id touches get
 * 0 with beta 0; ids out of range add nothing. Cost: every id is compared by each of
 * vocab * ceil(dim / 64) threads on CPU devices (vocab * ceil(dim / 4) on GPUs), so it
 * grows as vocab x n x dim / 64 comparisons (plus n x dim additions): fine for the small
 * vocabularies it was made for (n = 2048, vocab 90, dim 64: about 0.8 ms on lavapipe),
 * ten times slower at vocab 900, too slow for vocabularies of tens of thousands (a
 * device-side sort of the ids, which needs a workspace, would be the next step). */
vkt_status kn_embedding_backward(vkt_stream *s, vkt_view ids, vkt_view dy, vkt_view dtable,
                                 float beta, uint32_t n, uint32_t vocab, uint32_t dim);

/* ---- double references (ref_norm.c), direct definitions ------------------------ */

/* Backward outputs accumulate (+=); any may be NULL. The backward references recompute
 * the statistics from x and go through mean and variance by the chain rule (not the
 * kernels' closed forms). kn_ref_batchnorm updates running_mean/var in training mode like
 * the kernel. */
void kn_ref_layernorm(const double *x, const double *gamma, const double *beta, double *y,
                      uint32_t rows, uint32_t cols, double eps);
void kn_ref_layernorm_backward(const double *x, const double *gamma, const double *dy,
                               double *dx, double *dgamma, double *dbeta, uint32_t rows,
                               uint32_t cols, double eps);
/* rstd [rows] may be NULL; when given it receives 1 / sqrt(mean of x^2 + eps) per row.
 * The backward recomputes the mean square from x and goes through it by the chain rule. */
void kn_ref_rmsnorm(const double *x, const double *gamma, double *y, double *rstd,
                    uint32_t rows, uint32_t cols, double eps);
void kn_ref_rmsnorm_backward(const double *x, const double *gamma, const double *dy,
                             double *dx, double *dgamma, uint32_t rows, uint32_t cols,
                             double eps);
void kn_ref_batchnorm(const double *x, const double *gamma, const double *beta, double *y,
                      double *running_mean, double *running_var, uint32_t n, uint32_t c,
                      uint32_t hw, double eps, double momentum, int training);
void kn_ref_batchnorm_backward(const double *x, const double *gamma, const double *dy,
                               double *dx, double *dgamma, double *dbeta, uint32_t n,
                               uint32_t c, uint32_t hw, double eps);
void kn_ref_embedding(const double *ids, const double *table, double *y, uint32_t n,
                      uint32_t vocab, uint32_t dim);
void kn_ref_embedding_backward(const double *ids, const double *dy, double *dtable, uint32_t n,
                               uint32_t vocab, uint32_t dim);

#endif /* VKT_KERNELS_NORM_H */
