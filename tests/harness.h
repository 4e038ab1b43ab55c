/*
 * harness.h - the small test harness every tests/test_*.c uses.
 *
 * A test is a main() that calls th_init(), runs checks, and returns th_finish().
 * Checks record failures with file and line and go on. th_finish() fails the test if
 * the Khronos validation layer (VKT_VALIDATION=1) reported any warning or error, and
 * prints the closing line "N passed, N failed".
 *
 * Guarded buffers put every tensor at an unaligned offset inside a device buffer with
 * sentinel elements before and after it, so out-of-bounds writes are caught.
 */
#ifndef VKT_TEST_HARNESS_H
#define VKT_TEST_HARNESS_H

#include <stdint.h>
#include <stdio.h>

#include "vkt.h"

extern vkt_instance *th_instance;

/* Creates the shared instance (validation from the environment). Exits the test with
 * a failure if no Vulkan device is usable: tests need lavapipe at least. */
void th_init(const char *test_name);
int th_finish(void);
/* For tests that need no Vulkan device: names the test and seeds the random numbers;
 * th_finish then only prints the closing line. */
void th_init_host(const char *test_name);

/* Parts: a long test whose parts are independent (each kernel variant of test_attention,
 * test_conv) runs one of them when given `--part NAME`, so that ctest can register each
 * part as its own entry with its own time limit (tests/CMakeLists.txt, VKT_TEST_PARTS).
 * th_parts(argc, argv) reads the option (call it after th_init; without it every part
 * runs); th_part(NAME) says whether part NAME runs, and th_finish fails the test when the
 * part asked for was never offered (a misspelt name must not pass by running nothing). */
void th_parts(int argc, char **argv);
int th_part(const char *name);

/* A context on device 0 with the given kernel style (AUTO honours VKT_KERNELS). */
vkt_context *th_context(vkt_kernel_variant variant);
/* A context on device 0 with a kernel filter (vkt_context_options.kernel_variants: "cpu",
 * "gemm_shared", "gpu,rows_spread"). */
vkt_context *th_context_filter(const char *filter);
/* Destroys a context of th_context / th_context_filter before th_finish would (for tests
 * that make many, one after the other). */
void th_context_release(vkt_context *ctx);
vkt_stream *th_stream(vkt_context *ctx, int timestamps);
/* Moves a test to the other kernel variant (CPU <-> GPU): destroys *s, makes *ctx a new
 * context of the other variant and *s a stream on it. */
void th_use_other_variant(vkt_context **ctx, vkt_stream **s);

/* Temporary files, through the platform layer (POSIX and Win32 alike): a new empty folder
 * under the system's temporary folder, named "vkt_<prefix>_" plus random characters,
 * copied into buf; exits the test with a failure if none can be made. */
const char *th_temp_dir(const char *prefix, char *buf, size_t size);
/* Removes a folder and everything under it (or a file); quiet if it is missing. */
void th_remove_tree(const char *path);

/* Records a check; returns cond. */
int th_check(int cond, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define TH_CHECK(cond, ...) th_check(!!(cond), __FILE__, __LINE__, __VA_ARGS__)
/* Expects VKT_OK; on failure reports the status name and the context's message. */
#define TH_OK(ctx, expr)                                                                  \
    th_check_status((ctx), (expr), VKT_OK, #expr, __FILE__, __LINE__)
/* Expects a specific status (for error-path tests). */
#define TH_STATUS(ctx, expr, want)                                                        \
    th_check_status((ctx), (expr), (want), #expr, __FILE__, __LINE__)
int th_check_status(vkt_context *ctx, vkt_status got, vkt_status want, const char *expr,
                    const char *file, int line);

/* Deterministic random numbers (xorshift64*), seeded per test by th_init. */
void th_seed(uint64_t seed);
uint64_t th_rand_u64(void);
float th_rand_uniform(float lo, float hi);
void th_fill_uniform(float *x, uint64_t n, float lo, float hi);

/* A device tensor of n floats at an unaligned element offset, guard elements around. */
typedef struct th_buf {
    vkt_context *ctx;
    vkt_buffer *buffer;
    uint64_t n, offset;  /* offset of element 0, in elements */
    uint64_t guard;      /* sentinel elements before and after */
} th_buf;

th_buf th_buf_create(vkt_context *ctx, uint64_t n);
/* The same with element 0 at `offset` elements (64: a 256-byte boundary, for the kernels'
 * aligned vec4 paths). */
th_buf th_buf_create_at(vkt_context *ctx, uint64_t n, uint64_t offset);
void th_buf_destroy(th_buf *b);
vkt_view th_view(const th_buf *b);
void th_buf_write(th_buf *b, const float *data);
void th_buf_read(th_buf *b, float *data);
/* Checks the guards still hold the sentinel; reports `what` on failure. */
int th_buf_guards_ok(th_buf *b, const char *what);

/* Compares got against want with |got-want| <= atol + rtol*|want|. NaN in want must
 * be NaN in got. Reports the first mismatch and the max error. Returns 1 if all match. */
int th_compare(const char *what, const float *got, const float *want, uint64_t n, float rtol,
               float atol);

/* The copies a model's recorded run makes because the host cannot map its memory (a
 * discrete GPU, or a forced VKT_MEMORY_PROFILE): the inputs up from staging, the loss into
 * the control block, each kept value (and after a training run each input gradient) into
 * the readback buffer (graph/model.h). 0 where the arena and inputs are host-mapped. */
uint32_t th_model_staged_copies(const vkt_model *m, int training);

/* A 16-bit tensor (fp16 or bf16) in a guarded buffer, starting `skip` elements in (an odd
 * skip: a view not on a 4-byte boundary): n values drawn uniformly in [lo, hi), their 16-bit
 * bits as written to the buffer, the unrounded fp32 draws and the 16-bit values widened
 * (what a kernel reads), for checking a kernel both ways. th_half_view: the 16-bit view
 * (offset in 16-bit elements). */
typedef struct th_half {
    th_buf b;
    uint64_t n, skip;
    uint16_t *bits;  /* the buffer's contents, skip + n (+ pad) elements */
    double *exact;   /* the unrounded fp32 inputs */
    double *stored;  /* the 16-bit values, widened */
} th_half;
th_half th_half_new(vkt_context *ctx, vkt_dtype t, uint64_t n, uint64_t skip, float lo,
                    float hi);
vkt_view th_half_view(const th_half *x);
void th_half_free(th_half *x);

/* Allocation helpers that fail the test cleanly instead of returning NULL. */
float *th_alloc_floats(uint64_t n);

#endif
