/* test_dtype.c - the host conversions between fp32, fp16 and bf16 (vkt_convert, whose
 * rounding code shaders/dtype.h shares with the kernels' 16-bit outputs), against
 * references of their own:
 *  - every one of the 65536 fp16 and 65536 bf16 patterns converts to the fp32 its fields
 *    define (sign, exponent, mantissa read here with ldexp), and back to itself (a NaN to
 *    a quiet NaN);
 *  - fp32 -> fp16 / bf16 on 4 million values (every fp32 exponent with random mantissas,
 *    and the ties, halfway points and overflow edges) equals the nearest 16-bit value found
 *    by bisection over the ordered patterns, ties to the even pattern, and infinity from
 *    65520 (fp16) / 0x1.ffp127 (bf16) on; where the compiler has _Float16 its conversion
 *    (correctly rounded) agrees too;
 *  - the API: same-type copies, in place between fp16 and bf16, names and sizes, bad types
 *    and NULL pointers refused with VKT_ERROR_INVALID_ARGUMENT. No device needed. */
#include "harness.h"
#include "kernels/ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The value of a 16-bit pattern from its fields (no shared code with dtype.h). */
static double f16_value(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

static double bf16_value(uint16_t h)
{
    int s = h >> 15, e = (h >> 7) & 255, m = h & 127;
    double v = e == 0 ? ldexp(m, -133) : e == 255 ? (m ? NAN : INFINITY) : ldexp(128 + m, e - 134);
    return s ? -v : v;
}

static int is_nan16(vkt_dtype t, uint16_t h)
{
    return t == VKT_DTYPE_FP16 ? (h & 0x7c00) == 0x7c00 && (h & 0x3ff)
                               : (h & 0x7f80) == 0x7f80 && (h & 0x7f);
}

/* Every pattern: to fp32 as its fields say, back to itself. */
static void check_all_patterns(vkt_dtype t)
{
    uint16_t *h = malloc(65536 * 2), *back = malloc(65536 * 2);
    float *f = th_alloc_floats(65536);
    for (uint32_t i = 0; i < 65536; i++)
        h[i] = (uint16_t)i;
    TH_OK(NULL, vkt_convert(t, h, VKT_DTYPE_FP32, f, 65536));
    TH_OK(NULL, vkt_convert(VKT_DTYPE_FP32, f, t, back, 65536));
    uint32_t bad_value = 0, bad_back = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        double want = t == VKT_DTYPE_FP16 ? f16_value(h[i]) : bf16_value(h[i]);
        int nan = is_nan16(t, h[i]);
        int sign_ok = !!signbit(f[i]) == (h[i] >> 15);
        if (!sign_ok || (nan ? !isnan(f[i]) : (double)f[i] != want))
            bad_value++;
        uint16_t quiet = (uint16_t)(h[i] | (t == VKT_DTYPE_FP16 ? 0x200 : 0x40));
        if (back[i] != (nan ? quiet : h[i]))
            bad_back++;
    }
    TH_CHECK(bad_value == 0, "%s -> fp32: all 65536 patterns exact (%u wrong)",
             vkt_dtype_name(t), bad_value);
    TH_CHECK(bad_back == 0, "%s -> fp32 -> %s: all 65536 patterns back (NaNs quiet; %u wrong)",
             vkt_dtype_name(t), vkt_dtype_name(t), bad_back);
    free(h), free(back), free(f);
}

/* The nearest 16-bit pattern to finite x by bisection over the non-negative patterns
 * (ordered like their values), ties to the even pattern; infinity past the overflow
 * threshold (the largest finite value plus half its ulp, which ties to the odd largest
 * value and so rounds up). */
static uint16_t nearest16(vkt_dtype t, float x)
{
    double (*val)(uint16_t) = t == VKT_DTYPE_FP16 ? f16_value : bf16_value;
    uint16_t inf = t == VKT_DTYPE_FP16 ? 0x7c00 : 0x7f80, sign = signbit(x) ? 0x8000 : 0;
    double a = fabs((double)x);
    double top = val((uint16_t)(inf - 1)), ulp = top - val((uint16_t)(inf - 2));
    if (a >= top + ulp / 2)
        return sign | inf;
    uint16_t lo = 0, hi = (uint16_t)(inf - 1); /* val(lo) <= a <= val(hi) */
    if (a >= top)
        lo = hi;
    while (hi - lo > 1) {
        uint16_t mid = (uint16_t)((lo + hi) / 2);
        if (val(mid) <= a)
            lo = mid;
        else
            hi = mid;
    }
    double dl = a - val(lo), dh = val(hi) - a;
    uint16_t r = dl < dh ? lo : dh < dl ? hi : (lo & 1) ? hi : lo;
    return sign | r;
}

static void check_rounding(vkt_dtype t, const float *x, uint32_t n, const char *what)
{
    uint16_t *got = malloc(n * 2);
    TH_OK(NULL, vkt_convert(VKT_DTYPE_FP32, x, t, got, n));
    uint32_t bad = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint16_t want = nearest16(t, x[i]);
        if (got[i] != want && bad++ < 5)
            printf("  %s %s: %a -> 0x%04x, nearest 0x%04x\n", vkt_dtype_name(t), what,
                   (double)x[i], got[i], want);
    }
    TH_CHECK(bad == 0, "fp32 -> %s, %s: %u values, round to nearest even (%u wrong)",
             vkt_dtype_name(t), what, n, bad);
#ifdef __FLT16_MAX__
    if (t == VKT_DTYPE_FP16) {
        uint32_t differ = 0;
        for (uint32_t i = 0; i < n; i++) {
            _Float16 h = (_Float16)x[i];
            uint16_t hb;
            memcpy(&hb, &h, 2);
            differ += hb != got[i];
        }
        TH_CHECK(differ == 0, "fp32 -> fp16, %s: the compiler's _Float16 agrees (%u differ)",
                 what, differ);
    }
#endif
    free(got);
}

/* Finite values: every exponent with random mantissas; and the edges of each type. */
static void check_fp32_to_16(void)
{
    uint32_t n = 1u << 22;
    float *x = th_alloc_floats(n);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t e = i % 255; /* 0..254: zero/subnormal and every normal exponent */
        uint32_t u = ((uint32_t)th_rand_u64() & 0x807fffffu) | e << 23;
        /* every 4th value sits on a tie or next to one of fp16 (13 low bits) or bf16 (16) */
        if (i % 4 == 1)
            u = (u & ~0x1fffu) | 0x1000u;
        else if (i % 4 == 2)
            u = (u & ~0xffffu) + 0x7fffu + (uint32_t)(th_rand_u64() % 3); /* 0x7fff..0x8001 */
        x[i] = from_bits(u);
    }
    check_rounding(VKT_DTYPE_FP16, x, n, "random, every exponent");
    check_rounding(VKT_DTYPE_BF16, x, n, "random, every exponent");
    float edges[] = {0.0f, -0.0f, 65504.0f, 65519.996f, 65520.0f, -65520.0f, 65535.0f,
                     0x1p-24f, 0x1p-25f, 0x1.000002p-25f, 0x1.8p-24f, 0x1.8p-23f, 0x1p-14f,
                     0x1.ff8p-15f, 0x1.ffcp-15f, 1.0f, 1.0009765625f, 1.00048828125f,
                     1.00146484375f, 0x1.fep127f, 0x1.ff0p127f, 0x1.ff8p127f,
                     0x1.fffffep127f, -0x1.fffffep127f, 0x1p-126f, 0x1p-149f, 0x1.008p-126f,
                     0x1.018p0f, 0x1.008p0f, 3.0e38f, 1e-40f};
    uint32_t ne = sizeof edges / sizeof edges[0];
    check_rounding(VKT_DTYPE_FP16, edges, ne, "edges");
    check_rounding(VKT_DTYPE_BF16, edges, ne, "edges");
    /* non-finite in: infinities stay, NaNs become quiet NaNs of the same sign */
    float special[4] = {INFINITY, -INFINITY, from_bits(0x7f800001u), from_bits(0xffc00000u)};
    uint16_t h[4], b[4];
    TH_OK(NULL, vkt_convert(VKT_DTYPE_FP32, special, VKT_DTYPE_FP16, h, 4));
    TH_OK(NULL, vkt_convert(VKT_DTYPE_FP32, special, VKT_DTYPE_BF16, b, 4));
    TH_CHECK(h[0] == 0x7c00 && h[1] == 0xfc00 && (h[2] & 0xfe00) == 0x7e00 &&
                 (h[3] & 0xfe00) == 0xfe00,
             "fp16: inf, -inf, a signalling NaN quiet, -NaN (0x%04x 0x%04x 0x%04x 0x%04x)",
             h[0], h[1], h[2], h[3]);
    TH_CHECK(b[0] == 0x7f80 && b[1] == 0xff80 && (b[2] & 0xffc0) == 0x7fc0 &&
                 (b[3] & 0xffc0) == 0xffc0,
             "bf16: inf, -inf, a signalling NaN quiet, -NaN (0x%04x 0x%04x 0x%04x 0x%04x)",
             b[0], b[1], b[2], b[3]);
    TH_CHECK(kdt_round(VKT_DTYPE_FP16, 1.0f / 3) == (float)f16_value(0x3555) &&
                 kdt_round(VKT_DTYPE_BF16, 1.0f / 3) == (float)bf16_value(0x3eab) &&
                 kdt_round(VKT_DTYPE_FP32, 1.0f / 3) == 1.0f / 3,
             "kdt_round: 1/3 to fp16 0x3555, bf16 0x3eab, fp32 itself");
    free(x);
}

static void check_api(void)
{
    TH_CHECK(strcmp(vkt_dtype_name(VKT_DTYPE_FP32), "fp32") == 0 &&
                 strcmp(vkt_dtype_name(VKT_DTYPE_FP16), "fp16") == 0 &&
                 strcmp(vkt_dtype_name(VKT_DTYPE_BF16), "bf16") == 0 &&
                 strcmp(vkt_dtype_name((vkt_dtype)7), "?") == 0,
             "names fp32 fp16 bf16, ? for 7");
    TH_CHECK(vkt_dtype_size(VKT_DTYPE_FP32) == 4 && vkt_dtype_size(VKT_DTYPE_FP16) == 2 &&
                 vkt_dtype_size(VKT_DTYPE_BF16) == 2 && vkt_dtype_size(VKT_DTYPE_COUNT) == 0,
             "sizes 4 2 2, 0 past the enum");
    float f[3] = {1.5f, -2.25f, 1e-3f}, g[3] = {0};
    TH_OK(NULL, vkt_convert(VKT_DTYPE_FP32, f, VKT_DTYPE_FP32, g, 3));
    TH_CHECK(memcmp(f, g, sizeof f) == 0, "fp32 -> fp32 copies");
    /* in place, fp16 -> bf16 -> fp16: 1.5 and -2.25 are exact in both; 1e-3 loses bits */
    uint16_t h[3], h0[3];
    TH_OK(NULL, vkt_convert(VKT_DTYPE_FP32, f, VKT_DTYPE_FP16, h, 3));
    memcpy(h0, h, sizeof h);
    TH_OK(NULL, vkt_convert(VKT_DTYPE_FP16, h, VKT_DTYPE_BF16, h, 3));
    TH_CHECK(h[0] == 0x3fc0 && h[1] == 0xc010 &&
                 h[2] == nearest16(VKT_DTYPE_BF16, (float)f16_value(h0[2])),
             "fp16 -> bf16 in place: 1.5 0x3fc0, -2.25 0xc010, fp16(1e-3) re-rounded "
             "(0x%04x 0x%04x 0x%04x)", h[0], h[1], h[2]);
    TH_STATUS(NULL, vkt_convert((vkt_dtype)3, f, VKT_DTYPE_FP16, h, 3),
              VKT_ERROR_INVALID_ARGUMENT);
    TH_CHECK(strstr(vkt_last_error(), "source type 3 is not a vkt_dtype") != NULL,
             "bad source type named: %s", vkt_last_error());
    TH_STATUS(NULL, vkt_convert(VKT_DTYPE_FP32, f, (vkt_dtype)-1, h, 3),
              VKT_ERROR_INVALID_ARGUMENT);
    TH_CHECK(strstr(vkt_last_error(), "destination type -1") != NULL,
             "bad destination type named: %s", vkt_last_error());
    TH_STATUS(NULL, vkt_convert(VKT_DTYPE_FP32, NULL, VKT_DTYPE_FP16, h, 1),
              VKT_ERROR_INVALID_ARGUMENT);
    TH_CHECK(strstr(vkt_last_error(), "src is NULL") != NULL, "NULL src named: %s",
             vkt_last_error());
    TH_OK(NULL, vkt_convert(VKT_DTYPE_FP32, NULL, VKT_DTYPE_FP16, NULL, 0));
}

int main(void)
{
    th_init_host("test_dtype");
    check_all_patterns(VKT_DTYPE_FP16);
    check_all_patterns(VKT_DTYPE_BF16);
    check_fp32_to_16();
    check_api();
    return th_finish();
}
