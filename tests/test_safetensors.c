/* safetensors import (docs/import.md; engine/io/safetensors*.c, engine/parallel/
 * trainer_import.c):
 *  (a) a valid file parses: every dtype's size, F32/F16/BF16/F64 converted exactly (F16
 *      subnormals, -0, the largest half; BF16; F64 rounded), scalars and empty tensors,
 *      __metadata__, escaped and UTF-8 names, whitespace padding;
 *  (b) every malformed file is refused with VKT_ERROR_FORMAT and its reason (truncated,
 *      header length past the file, not an object, text after it, unknown dtype or key,
 *      a key or name twice, overlapping, holed, out-of-range or wrongly sized offsets,
 *      numbers that are negative, fractional, too large or JSON-invalid, bad UTF-8,
 *      escapes and surrogates, NULs, control characters, metadata that is not strings);
 *      random mutations of a valid file parse or are refused with a reason, never crash;
 *  (c) name maps: the four line forms, and each malformed line refused with its number;
 *  (d) the assignment: by name, through the map, transposed; every missing, unused,
 *      mismatched (with the transpose hint), unloadable or non-finite tensor named, and
 *      map lines naming nothing; many problems counted;
 *  (e) trainers: vkt_trainer_import_safetensors sets exactly the file's values (one
 *      replica, two sync replicas, a 2-stage pipeline), leaves the trainer unchanged on
 *      failure, and a checkpoint exported with vkt export imports back bitwise. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "io/safetensors.h"
#include "platform/platform.h"

/* ---- building files ---------------------------------------------------------------- */

/* A file image: 8-byte length, the header text as given, `data` (n bytes; NULL: zeros). */
static unsigned char *image(const char *header, const void *data, size_t n, size_t *size)
{
    size_t h = strlen(header);
    unsigned char *f = malloc(8 + h + n + 1);
    for (int i = 0; i < 8; i++)
        f[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(f + 8, header, h);
    if (data)
        memcpy(f + 8 + h, data, n);
    else
        memset(f + 8 + h, 0, n);
    *size = 8 + h + n;
    return f;
}

static vkt_status parse(const char *header, const void *data, size_t n, st_file *f, char *why,
                        size_t ws)
{
    size_t size;
    unsigned char *img = image(header, data, n, &size);
    return st_parse(img, size, f, why, ws);
}

/* Writes header + data as a file. */
static void write_file(const char *path, const char *header, const void *data, size_t n)
{
    size_t size;
    unsigned char *img = image(header, data, n, &size);
    TH_CHECK(plat_write_file_atomic(path, img, size) == 0, "write %s", path);
    free(img);
}

static void put16(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static void put_f32(unsigned char *p, float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(u >> (8 * i));
}

static int bits_equal(float a, float b) { return memcmp(&a, &b, 4) == 0; }

/* ---- (a) a valid file -------------------------------------------------------------- */

static void test_valid(void)
{
    unsigned char d[96] = {0};
    for (int i = 0; i < 6; i++) /* "a": F32 [2,3] = 0.5 i - 1 */
        put_f32(d + 4 * i, 0.5f * (float)i - 1.0f);
    const uint32_t halves[5] = {0x3c00, 0x0001, 0x7bff, 0x8000, 0x03ff}; /* "h": F16 [5] */
    for (int i = 0; i < 5; i++)
        put16(d + 24 + 2 * i, halves[i]);
    put16(d + 34, 0x3f80); /* "b": BF16 [2] = 1, -3 */
    put16(d + 36, 0xc040);
    double third = 1.0 / 3.0; /* "d": F64 [] */
    memcpy(d + 38, &third, 8);
    put_f32(d + 46, 7.0f);   /* "s": F32 [] */
    /* "i": I64 [1] at 50..58, "e": F32 [0] empty at 58 */
    const char *hdr =
        "{\"__metadata__\" : {\"format\":\"pt\", \"note\":\"tab\\tq\\\"\"},\n"
        " \"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
        "\"h\":{\"shape\":[5],\"dtype\":\"F16\",\"data_offsets\":[24,34]},"
        "\"b\":{\"data_offsets\":[34,38],\"dtype\":\"BF16\",\"shape\":[2]},"
        "\"d\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[38,46]},"
        "\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[46,50]},"
        "\"i\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[50,58]},"
        "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[58,58]},"
        "\"x\\u00e9\\ud83d\\ude00\xc3\xa9/\\/\":{\"dtype\":\"U8\",\"shape\":[2],"
        "\"data_offsets\":[58,60]}}      ";
    st_file f;
    char why[512] = "";
    if (!TH_CHECK(parse(hdr, d, 60, &f, why, sizeof why) == VKT_OK, "valid file: %s", why))
        return;
    TH_CHECK(f.n_tensors == 8, "8 tensors, got %u", f.n_tensors);
    TH_CHECK(f.n_meta == 2 && !strcmp(f.meta_keys[0], "format") &&
                 !strcmp(f.meta_values[1], "tab\tq\""), "metadata read and unescaped");
    const st_tensor *a = st_find(&f, "a"), *h = st_find(&f, "h"), *b = st_find(&f, "b"),
                    *dd = st_find(&f, "d"), *s = st_find(&f, "s"), *e = st_find(&f, "e");
    TH_CHECK(a && a->ndim == 2 && a->dims[1] == 3 && a->count == 6, "a is F32 [2,3]");
    TH_CHECK(st_find(&f, "x\xc3\xa9\xf0\x9f\x98\x80\xc3\xa9//") != NULL,
             "escaped name decoded to UTF-8 (\\u00e9, a surrogate pair, \\/)");
    TH_CHECK(s && s->ndim == 0 && s->count == 1 && e && e->count == 0,
             "a scalar has 1 element, [0] none");
    float v[6];
    a->dtype->to_f32(a->data, v, 6);
    int ok = 1;
    for (int i = 0; i < 6; i++)
        ok &= bits_equal(v[i], 0.5f * (float)i - 1.0f);
    TH_CHECK(ok, "F32 values read");
    h->dtype->to_f32(h->data, v, 5);
    TH_CHECK(bits_equal(v[0], 1.0f) && bits_equal(v[1], ldexpf(1.0f, -24)) &&
                 bits_equal(v[2], 65504.0f) && bits_equal(v[3], -0.0f) &&
                 bits_equal(v[4], 1023.0f * ldexpf(1.0f, -24)),
             "F16: 1, smallest subnormal, largest, -0, largest subnormal: %g %g %g %g %g",
             v[0], v[1], v[2], v[3], v[4]);
    b->dtype->to_f32(b->data, v, 2);
    TH_CHECK(bits_equal(v[0], 1.0f) && bits_equal(v[1], -3.0f), "BF16: 1, -3");
    dd->dtype->to_f32(dd->data, v, 1);
    TH_CHECK(bits_equal(v[0], (float)(1.0 / 3.0)), "F64 rounded to the nearest float");
    TH_CHECK(st_find(&f, "i")->dtype->to_f32 == NULL, "I64 is known but not loadable");
    st_free(&f);

    /* F16 infinities and NaN convert to float's */
    unsigned char sp[6];
    put16(sp, 0x7c00), put16(sp + 2, 0xfc00), put16(sp + 4, 0x7e00);
    st_dtype_named("F16")->to_f32(sp, v, 3);
    TH_CHECK(isinf(v[0]) && v[0] > 0 && isinf(v[1]) && v[1] < 0 && isnan(v[2]),
             "F16 +inf, -inf, NaN");
    /* an empty object and nothing else is a valid (empty) file */
    TH_CHECK(parse("{}", NULL, 0, &f, why, sizeof why) == VKT_OK && f.n_tensors == 0,
             "{} is an empty file: %s", why);
    st_free(&f);
}

/* ---- (b) malformed files ----------------------------------------------------------- */

typedef struct bad_case {
    const char *header;
    size_t data;        /* bytes of zeros after it */
    const char *why;    /* a part of the reason */
} bad_case;

#define T1(dt, sh, off) "{\"a\":{\"dtype\":\"" dt "\",\"shape\":" sh ",\"data_offsets\":" off "}}"

static const bad_case bad_cases[] = {
    {"[1]", 0, "not a JSON object"},
    {" {}", 0, "must start with '{'"},
    {"", 0, "not a JSON object"},
    {"{} x", 0, "text after the header's object"},
    {"{}}", 0, "text after"},
    {"{", 0, "found the end of the header"},
    {T1("F17", "[1]", "[0,4]"), 4, "unknown dtype 'F17'"},
    {T1("f32", "[1]", "[0,4]"), 4, "unknown dtype 'f32'"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "lacks its data_offsets"},
    {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "lacks its shape"},
    {"{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "lacks its dtype"},
    {"{\"a\":{}}", 0, "has no dtype, shape or data_offsets"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4,
     "unknown key 'x'"},
    {"{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
     "'dtype' appears twice"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
     "tensor 'a' appears twice"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "overlap"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", 20,
     "bytes [8, 12) of the data belong to no tensor"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}", 8, "overlap"},
    {"{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
     "bytes [0, 4) of the data belong to no tensor"},
    {T1("F32", "[2]", "[0,8]"), 12, "4 bytes after the last tensor's end"},
    {T1("F32", "[2]", "[0,8]"), 4, "pass the end of the data (4 bytes)"},
    {T1("F32", "[0]", "[8,0]"), 8, "end before they begin"},
    {T1("F32", "[3]", "[0,8]"), 8, "F32 [3] takes 12 bytes, but data_offsets [0, 8] hold 8"},
    {T1("BF16", "[2,2]", "[0,4]"), 4, "takes 8 bytes"},
    {T1("F32", "[1]", "[-1,3]"), 4, "a negative number"},
    {T1("F32", "[2.5]", "[0,4]"), 4, "not a whole number"},
    {T1("F32", "[1e2]", "[0,4]"), 4, "not a whole number"},
    {T1("F32", "[01]", "[0,4]"), 4, "leading zero"},
    {T1("F32", "[1]", "[0,18446744073709551616]"), 4, "larger than 2^64 - 1"},
    {T1("F32", "[4294967296,4294967296,2]", "[0,4]"), 4, "more elements than 2^64"},
    {T1("F64", "[2305843009213693952,2]", "[0,4]"), 4, "more than 2^64 bytes"},
    {T1("F32", "[1]", "[0,4,8]"), 8, "data_offsets holds 3 values, not 2"},
    {T1("F32", "[1]", "[0,4,8,12]"), 8, "data_offsets has more than 3 entries"},
    {T1("F32", "[1]", "[4]"), 4, "data_offsets holds 1 value, not 2"},
    {T1("F32", "[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]", "[0,4]"), 4, "more than 16 entries"},
    {T1("F32", "\"[1]\"", "[0,4]"), 4, "expected '[' (a list)"},
    {T1("F32", "[1,]", "[0,4]"), 4, "expected a whole number"},
    {T1("F32", "[1 2]", "[0,4]"), 4, "expected ',' or ']', found '2'"},
    {"{\"a\":{\"dtype\":5,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "the dtype's name"},
    {"{\"a\":\"F32\"}", 0, "'{' (a tensor's description)"},
    {"{\"a\" {}}", 0, "expected ':' after a key"},
    {"{a:1}", 0, "a key"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},}", 4, "a key"},
    {"{\"__metadata__\":{\"a\":1}}", 0, "the value is not a string"},
    {"{\"__metadata__\":{\"a\":\"1\",\"a\":\"2\"}}", 0, "key 'a' appears twice"},
    {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, "'__metadata__' appears twice"},
    {"{\"__metadata__\":[]}", 0, "__metadata__ is an object of strings"},
    {"{\"\xff\":{}}", 0, "invalid UTF-8 (byte 0xff)"},
    {"{\"\xc0\xaf\":{}}", 0, "overlong or out-of-range"},
    {"{\"\xed\xa0\x80\":{}}", 0, "overlong or out-of-range"},
    {"{\"\xf4\x90\x80\x80\":{}}", 0, "overlong or out-of-range"},
    {"{\"\xe2\x82\":{}}", 0, "invalid UTF-8"},
    {"{\"\\udc00\":{}}", 0, "a lone low surrogate"},
    {"{\"\\ud800x\":{}}", 0, "without its low half"},
    {"{\"\\ud800\\u0041\":{}}", 0, "without its low half"},
    {"{\"\\u00\":{}}", 0, "needs 4 hex digits"},
    {"{\"a\\u0000b\":{}}", 0, "NUL character"},
    {"{\"a\x01\":{}}", 0, "a control character (0x01)"},
    {"{\"a\\q\":{}}", 0, "an invalid escape '\\q'"},
    {"{\"abc", 0, "not closed before the end of the header"},
};

static void test_malformed(void)
{
    char why[512];
    st_file f;
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const bad_case *c = &bad_cases[i];
        why[0] = '\0';
        vkt_status st = parse(c->header, NULL, c->data, &f, why, sizeof why);
        TH_CHECK(st == VKT_ERROR_FORMAT && strstr(why, c->why),
                 "case %zu %s: want '%s', got %s '%s'", i, c->header, c->why,
                 vkt_status_name(st), why);
        if (st == VKT_OK)
            st_free(&f);
    }
    /* the first 8 bytes and the header length */
    unsigned char raw[16] = {0};
    for (size_t n = 0; n < 8; n++) {
        unsigned char *img = malloc(8);
        memcpy(img, raw, 8);
        TH_CHECK(st_parse(img, n, &f, why, sizeof why) == VKT_ERROR_FORMAT &&
                     strstr(why, "fewer than the 8 of the header length"),
                 "%zu bytes: %s", n, why);
    }
    const uint64_t lens[] = {9, 1000, (uint64_t)1 << 63, UINT64_MAX};
    for (size_t k = 0; k < 4; k++) {
        unsigned char *img = malloc(16);
        memcpy(img + 8, "{}      ", 8);
        for (int i = 0; i < 8; i++)
            img[i] = (unsigned char)(lens[k] >> (8 * i));
        TH_CHECK(st_parse(img, 16, &f, why, sizeof why) == VKT_ERROR_FORMAT &&
                     strstr(why, "passes the end of the file"),
                 "header length %llu in 16 bytes: %s", (unsigned long long)lens[k], why);
    }
    /* a message names the header byte */
    parse("{\"a\" {}}", NULL, 0, &f, why, sizeof why);
    TH_CHECK(strstr(why, "header byte 5:") != NULL, "position named: %s", why);
}

/* Random damage to a valid file (bytes changed, cut short, grown): parsed or refused with
 * a reason, and a parsed one's tensors read whole (under ASan: inside the file). */
static void test_mutations(void)
{
    const char *hdr = "{\"__metadata__\":{\"k\":\"v\"},"
                      "\"w\":{\"dtype\":\"F16\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
                      "\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[12,18]},"
                      "\"c\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[18,26]}}";
    size_t size;
    unsigned char *good = image(hdr, NULL, 26, &size);
    int refused = 0, parsed = 0, silent = 0;
    for (int it = 0; it < 3000; it++) {
        size_t n = size;
        unsigned char *m = malloc(size + 16);
        memcpy(m, good, size);
        int kind = (int)(th_rand_u64() % 3);
        if (kind == 0) {
            for (int k = 1 + (int)(th_rand_u64() % 3); k > 0; k--)
                m[th_rand_u64() % size] = (unsigned char)th_rand_u64();
        } else if (kind == 1) {
            n = (size_t)(th_rand_u64() % size);
        } else {
            size_t extra = 1 + th_rand_u64() % 16;
            memset(m + size, ' ', extra);
            n = size + extra;
        }
        st_file f;
        char why[512] = "";
        vkt_status st = st_parse(m, n, &f, why, sizeof why);
        if (st == VKT_OK) {
            parsed++;
            for (uint32_t i = 0; i < f.n_tensors; i++) {
                const st_tensor *t = &f.tensors[i];
                volatile unsigned char sum = 0;
                for (uint64_t b = 0; b < t->end - t->begin; b++)
                    sum += t->data[b];
                (void)sum;
            }
            st_free(&f);
        } else {
            refused++;
            silent += st != VKT_ERROR_FORMAT || !why[0];
        }
    }
    free(good);
    TH_CHECK(silent == 0 && refused > 1000, "3000 mutations: %d parsed, %d refused, %d without "
             "a reason", parsed, refused, silent);
}

/* ---- (c) name maps ----------------------------------------------------------------- */

static void test_map_text(void)
{
    st_map m;
    char why[256] = "";
    const char *text = "# a comment\n"
                       "w1  0.weight transpose   # trailing comment\r\n"
                       "\n"
                       "b1\t0.bias\n"
                       "head -\n"
                       "- extra.buffer\n"
                       "- *";
    if (TH_CHECK(st_map_parse(text, &m, why, sizeof why) == VKT_OK, "map parses: %s", why)) {
        TH_CHECK(m.n == 5, "5 lines, got %u", m.n);
        TH_CHECK(!strcmp(m.lines[0].param, "w1") && !strcmp(m.lines[0].tensor, "0.weight") &&
                     m.lines[0].transpose && m.lines[0].line == 2, "line 2: w1 <- 0.weight T");
        TH_CHECK(!m.lines[1].transpose && m.lines[1].line == 4, "line 4: b1 (tab)");
        TH_CHECK(m.lines[2].tensor == NULL && !strcmp(m.lines[3].tensor, "extra.buffer") &&
                     m.lines[3].param == NULL && !strcmp(m.lines[4].tensor, "*"),
                 "keep, leave unused, leave all unused");
        st_map_free(&m);
    }
    TH_CHECK(st_map_parse(NULL, &m, why, sizeof why) == VKT_OK && m.n == 0, "NULL: empty map");
    const struct {
        const char *text, *why;
    } bad[] = {
        {"w1", "line 1: one word"},
        {"\n\nw1 a b c", "line 3: more than 3"},
        {"w1 a T", "the third word is 'T'"},
        {"- -", "'- -' names neither"},
        {"w1 - transpose", "'transpose' needs a parameter and a tensor"},
        {"w1 a\nb x\nw1 b", "line 3: parameter 'w1' is mapped again (first on line 1)"},
        {"* a", "'*' stands only for tensors"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why[0] = '\0';
        vkt_status st = st_map_parse(bad[i].text, &m, why, sizeof why);
        TH_CHECK(st == VKT_ERROR_FORMAT && strstr(why, bad[i].why), "map '%s': want '%s', got "
                 "'%s'", bad[i].text, bad[i].why, why);
    }
}

/* ---- (d) the assignment ------------------------------------------------------------ */

/* A file with "lin.weight" F32 [3,2] (values 1..6), "lin.bias" F16 [3], "nan" F32 [2]
 * (1, NaN), "big" F64 [1] (1e300), "ids" I64 [2], "inf" F16 [1] (+inf). */
static void assign_file(st_file *f)
{
    unsigned char d[64] = {0};
    for (int i = 0; i < 6; i++)
        put_f32(d + 4 * i, (float)(i + 1));
    put16(d + 24, 0x3c00), put16(d + 26, 0x4000), put16(d + 28, 0x4200); /* 1, 2, 3 */
    put_f32(d + 30, 1.0f);
    put_f32(d + 34, NAN);
    double big = 1e300;
    memcpy(d + 38, &big, 8);
    put16(d + 62, 0x7c00);
    const char *hdr =
        "{\"lin.weight\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[0,24]},"
        "\"lin.bias\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[24,30]},"
        "\"nan\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[30,38]},"
        "\"big\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[38,46]},"
        "\"ids\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[46,62]},"
        "\"inf\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[62,64]}}";
    char why[256];
    if (parse(hdr, d, 64, f, why, sizeof why) != VKT_OK)
        TH_CHECK(0, "assign file: %s", why);
}

/* Runs st_assign with a map text; returns the status, message in msg. */
static vkt_status assign(const st_file *f, const char *map_text, const st_param *p, uint32_t n,
                         float *flat, st_result *r, char *msg)
{
    st_map map;
    char why[256];
    msg[0] = '\0';
    if (st_map_parse(map_text, &map, why, sizeof why) != VKT_OK) {
        snprintf(msg, 1024, "map: %s", why);
        return VKT_ERROR_FORMAT;
    }
    vkt_status st = st_assign(f, "f.safetensors", &map, p, n, flat, r, msg);
    st_map_free(&map);
    return st;
}

static void test_assign(void)
{
    st_file f;
    assign_file(&f);
    char msg[1024];
    float flat[32];
    st_result r;
    /* w [2,3] <- lin.weight [3,2] transposed; b [3] <- lin.bias (F16); the rest unused */
    st_param p[2] = {{"w", {2, {2, 3}}, 6, 0}, {"b", {1, {3}}, 3, 16}};
    for (int i = 0; i < 32; i++)
        flat[i] = -7.0f;
    const char *map = "w lin.weight transpose\nb lin.bias\n- nan\n- big\n- ids\n- inf";
    vkt_status st = assign(&f, map, p, 2, flat, &r, msg);
    if (TH_CHECK(st == VKT_OK, "assign: %s", msg)) {
        /* lin.weight [[1,2],[3,4],[5,6]] transposed: [[1,3,5],[2,4,6]] */
        const float want[6] = {1, 3, 5, 2, 4, 6};
        int ok = 1;
        for (int i = 0; i < 6; i++)
            ok &= flat[i] == want[i];
        TH_CHECK(ok && flat[16] == 1 && flat[17] == 2 && flat[18] == 3 && flat[6] == -7.0f &&
                     flat[19] == -7.0f, "values transposed, F16 converted, nothing else written");
        TH_CHECK(r.loaded == 2 && r.transposed == 1 && r.ignored == 4 && r.kept == 0,
                 "counts %u %u %u %u", r.loaded, r.transposed, r.ignored, r.kept);
    }
    /* "- *" leaves every other tensor unused; "PARAM -" keeps */
    st = assign(&f, "w lin.weight transpose\nb -\n- *", p, 2, flat, &r, msg);
    TH_CHECK(st == VKT_OK && r.kept == 1 && r.ignored == 5, "keep and '- *': %s", msg);

    const struct {
        const char *map, *want;
        vkt_status st;
        st_param p;
    } cases[] = {
        /* no map: the file has no "w" */
        {"- *", "parameter 'w' [2,3]: the file has no tensor 'w' (map it: a line 'w TENSOR', "
         "or 'w -' to keep its values)", VKT_ERROR_SHAPE, {"w", {2, {2, 3}}, 6, 0}},
        {"w gone\n- *", "the file has no tensor 'gone' (map line 1)", VKT_ERROR_SHAPE,
         {"w", {2, {2, 3}}, 6, 0}},
        {"w lin.weight\n- *", "parameter 'w' is [2,3], tensor 'lin.weight' is [3,2] (its "
         "transpose: a PyTorch nn.Linear weight is [out, in]; add 'transpose' to its map line)",
         VKT_ERROR_SHAPE, {"w", {2, {2, 3}}, 6, 0}},
        {"w lin.weight transpose\n- *", "(it fits without 'transpose')", VKT_ERROR_SHAPE,
         {"w", {2, {3, 2}}, 6, 0}},
        {"w lin.bias transpose\n- *", "parameter 'w' is [1,3], tensor 'lin.bias' is [3] "
         "('transpose' takes 2-D tensors)", VKT_ERROR_SHAPE, {"w", {2, {1, 3}}, 3, 0}},
        {"w lin.weight\n- *", "parameter 'w' is [6], tensor 'lin.weight' is [3,2]",
         VKT_ERROR_SHAPE, {"w", {1, {6}}, 6, 0}},
        {"w ids\n- *", "tensor 'ids' has dtype I64, which cannot be loaded into parameter 'w' "
         "(loadable: F32, F16, BF16, F64)", VKT_ERROR_FORMAT, {"w", {1, {2}}, 2, 0}},
        {"w nan\n- *", "tensor 'nan' (F32) holds a NaN at element 1", VKT_ERROR_FORMAT,
         {"w", {1, {2}}, 2, 0}},
        {"w big\n- *", "tensor 'big' (F64) holds an infinity at element 0 (past float's "
         "range)", VKT_ERROR_FORMAT, {"w", {1, {1}}, 1, 0}},
        {"w inf\n- *", "tensor 'inf' (F16) holds an infinity at element 0", VKT_ERROR_FORMAT,
         {"w", {1, {1}}, 1, 0}},
        {"w lin.bias\nv lin.bias\n- *", "map line 2 names 'v', which is not a parameter of the "
         "model", VKT_ERROR_INVALID_ARGUMENT, {"w", {1, {3}}, 3, 0}},
        {"w lin.bias\n- nothing\n- *", "map line 2 leaves tensor 'nothing' unused, but the file "
         "has no such tensor", VKT_ERROR_INVALID_ARGUMENT, {"w", {1, {3}}, 3, 0}},
        {"w lin.bias", "tensor 'lin.weight' of the file goes to no parameter (a map line "
         "'PARAM lin.weight' assigns it, '- lin.weight' leaves it unused)", VKT_ERROR_SHAPE,
         {"w", {1, {3}}, 3, 0}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        st = assign(&f, cases[i].map, &cases[i].p, 1, flat, &r, msg);
        TH_CHECK(st == cases[i].st && strstr(msg, cases[i].want) &&
                     strstr(msg, "cannot initialize the model from 'f.safetensors'") &&
                     r.loaded == 0,
                 "assign case %zu: want %s '%s', got %s '%s'", i, vkt_status_name(cases[i].st),
                 cases[i].want, vkt_status_name(st), msg);
    }
    /* no map and no name in common: said first; every problem counted, those that fit
     * listed */
    st_param many[40];
    char names[40][16];
    for (int i = 0; i < 40; i++) {
        snprintf(names[i], sizeof names[i], "param%02d", i);
        many[i] = (st_param){names[i], {1, {1}}, 1, 0};
    }
    st = assign(&f, NULL, many, 40, flat, &r, msg);
    TH_CHECK(st == VKT_ERROR_SHAPE && strstr(msg, "47 problems") && strstr(msg, "param00") &&
                 strstr(msg, "more") && strlen(msg) < 1024, "47 problems counted: %s", msg);
    TH_CHECK(strstr(msg, "47 problems: none of the model's 40 parameter names is a tensor of "
                    "the file (whose tensors are named like 'lin.weight'): a name map is "
                    "needed") != NULL, "no name in common: the map is named first: %s", msg);
    st_free(&f);
}

/* ---- (e) trainers ------------------------------------------------------------------ */

enum { FEAT = 6, HID = 5, CLS = 3, BATCH = 8 };

typedef struct net {
    vkt_graph *g;
    vkt_tensor *x, *y, *loss, *w1, *b1, *w2, *b2;
} net;

static net make_net(uint64_t seed, int staged)
{
    net n = {0};
    vkt_graph_options go = {.seed = seed};
    vkt_graph_create(&go, &n.g);
    vkt_shape xs = {2, {BATCH, FEAT}}, w1 = {2, {FEAT, HID}}, b1 = {1, {HID}},
              w2 = {2, {HID, CLS}}, b2 = {1, {CLS}};
    vkt_init he = {.kind = VKT_INIT_HE}, u = {.kind = VKT_INIT_UNIFORM, .a = -1, .b = 1};
    n.x = vkt_input(n.g, "x", &xs);
    n.y = vkt_input_labels(n.g, "y", BATCH);
    n.w1 = vkt_param(n.g, "w1", &w1, &he);
    n.b1 = vkt_param(n.g, "b1", &b1, &u);
    vkt_tensor *h = vkt_relu(n.g, vkt_linear(n.g, n.x, n.w1, n.b1));
    if (staged)
        vkt_graph_set_stage(n.g, 1);
    n.w2 = vkt_param(n.g, "w2", &w2, &he);
    n.b2 = vkt_param(n.g, "b2", &b2, &u);
    n.loss = vkt_softmax_cross_entropy(n.g, vkt_linear(n.g, h, n.w2, n.b2), n.y);
    TH_CHECK(vkt_graph_status(n.g) == VKT_OK, "graph: %s", vkt_graph_errmsg(n.g));
    return n;
}

/* A PyTorch-style file for the net: 0.weight [HID,FEAT] F32, 0.bias [HID] BF16, 2.weight
 * [CLS,HID] F16, 2.bias [CLS] F32; values k/8 - 2 (exact in every dtype). want_* get the
 * values in the net's layout ([in,out] weights). */
static void torch_file(const char *path, float *want_w1, float *want_b1, float *want_w2,
                       float *want_b2)
{
    unsigned char d[4 * HID * FEAT + 2 * HID + 2 * CLS * HID + 4 * CLS];
    size_t at = 0;
    int k = 0;
    for (int o = 0; o < HID; o++)
        for (int i = 0; i < FEAT; i++, at += 4) {
            float v = (float)(k++) / 8.0f - 2.0f;
            put_f32(d + at, v);
            want_w1[i * HID + o] = v;
        }
    for (int o = 0; o < HID; o++, at += 2) {
        float v = (float)(k++) / 8.0f - 2.0f;
        uint32_t u;
        memcpy(&u, &v, 4);
        put16(d + at, u >> 16); /* exact in BF16 */
        want_b1[o] = v;
    }
    for (int o = 0; o < CLS; o++)
        for (int i = 0; i < HID; i++, at += 2) {
            float v = (float)(k++) / 8.0f - 2.0f; /* |v| < 8, multiples of 1/8: exact in F16 */
            int neg = v < 0;
            float a = neg ? -v : v;
            uint32_t h = 0;
            if (a != 0) {
                int e;
                float m = frexpf(a, &e); /* a = m 2^e, m in [0.5, 1) */
                h = (uint32_t)(e - 1 + 15) << 10 | (uint32_t)((m * 2 - 1) * 1024);
            }
            put16(d + at, h | (neg ? 0x8000u : 0));
            want_w2[i * CLS + o] = v;
        }
    for (int o = 0; o < CLS; o++, at += 4) {
        float v = (float)(k++) / 8.0f - 2.0f;
        put_f32(d + at, v);
        want_b2[o] = v;
    }
    char hdr[1024];
    size_t a0 = 4 * HID * FEAT, a1 = a0 + 2 * HID, a2 = a1 + 2 * CLS * HID, a3 = a2 + 4 * CLS;
    snprintf(hdr, sizeof hdr,
             "{\"__metadata__\":{\"format\":\"pt\"},"
             "\"0.weight\":{\"dtype\":\"F32\",\"shape\":[%d,%d],\"data_offsets\":[0,%zu]},"
             "\"0.bias\":{\"dtype\":\"BF16\",\"shape\":[%d],\"data_offsets\":[%zu,%zu]},"
             "\"2.weight\":{\"dtype\":\"F16\",\"shape\":[%d,%d],\"data_offsets\":[%zu,%zu]},"
             "\"2.bias\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[%zu,%zu]}}",
             HID, FEAT, a0, HID, a0, a1, CLS, HID, a1, a2, CLS, a2, a3);
    write_file(path, hdr, d, at);
}

static const char *torch_map = "w1 0.weight transpose\nb1 0.bias\nw2 2.weight transpose\n"
                               "b2 2.bias\n";

/* Every parameter of the trainer equals the want arrays; `replica`: also that replica's
 * flat parameters. */
static int params_are(vkt_trainer *tr, const net *n, const float *w1, const float *b1,
                      const float *w2, const float *b2)
{
    float got[FEAT * HID];
    int ok = 1;
    const struct {
        vkt_tensor *t;
        const float *want;
        uint64_t count;
    } p[4] = {{n->w1, w1, FEAT * HID}, {n->b1, b1, HID}, {n->w2, w2, HID * CLS}, {n->b2, b2, CLS}};
    for (int i = 0; i < 4; i++) {
        ok &= vkt_trainer_read(tr, p[i].t, got, p[i].count) == VKT_OK;
        ok &= memcmp(got, p[i].want, p[i].count * sizeof *got) == 0;
    }
    return ok;
}

static void test_trainer(const char *dir)
{
    char path[640], bad[640];
    snprintf(path, sizeof path, "%s/torch.safetensors", dir);
    snprintf(bad, sizeof bad, "%s/missing.safetensors", dir);
    float w1[FEAT * HID], b1[HID], w2[HID * CLS], b2[CLS];
    torch_file(path, w1, b1, w2, b2);
    /* one replica, two sync replicas, a 2-stage pipeline */
    const struct {
        const char *what;
        uint32_t replicas, stages;
    } kinds[] = {{"1 replica", 1, 0}, {"2 sync replicas", 2, 0}, {"2 stages", 1, 2}};
    for (int k = 0; k < 3; k++) {
        net n = make_net(3, kinds[k].stages > 1);
        uint32_t dev[2] = {0, 0};
        vkt_trainer_options o = {.batch = BATCH, .devices = dev,
                                 .device_count = kinds[k].stages ? 2 : kinds[k].replicas,
                                 .stages = kinds[k].stages,
                                 .micro_batches = kinds[k].stages ? 2 : 0};
        vkt_trainer *tr = NULL;
        if (!TH_OK(NULL, vkt_trainer_create(th_instance, n.g, n.loss, &o, &tr))) {
            vkt_graph_destroy(n.g);
            continue;
        }
        uint64_t count = vkt_trainer_param_count(tr);
        float *before = th_alloc_floats(count), *after = th_alloc_floats(count);
        vkt_trainer_read_params(tr, before, count);
        /* failures first: the trainer unchanged */
        vkt_import_options io = {.map = "w1 0.weight transpose\nb1 0.bias\nw2 2.weight\n"
                                        "b2 2.bias\n"};
        vkt_import_report rep = {.loaded = 99};
        vkt_status st = vkt_trainer_import_safetensors(tr, path, &io, &rep);
        TH_CHECK(st == VKT_ERROR_SHAPE && strstr(vkt_trainer_errmsg(tr), "tensor '2.weight' is "
                 "[3,5]") && strstr(vkt_last_error(), "add 'transpose'") && rep.loaded == 0,
                 "%s: a weight without transpose: %s", kinds[k].what, vkt_trainer_errmsg(tr));
        st = vkt_trainer_import_safetensors(tr, bad, NULL, NULL);
        TH_CHECK(st == VKT_ERROR_IO && strstr(vkt_trainer_errmsg(tr), "no such file"),
                 "%s: a missing file: %s", kinds[k].what, vkt_trainer_errmsg(tr));
        io.map = "w1 0.weight transpose\nw1 0.bias";
        st = vkt_trainer_import_safetensors(tr, path, &io, NULL);
        TH_CHECK(st == VKT_ERROR_INVALID_ARGUMENT && strstr(vkt_trainer_errmsg(tr),
                 "the name map, line 2: parameter 'w1' is mapped again"),
                 "%s: a bad map: %s", kinds[k].what, vkt_trainer_errmsg(tr));
        vkt_trainer_read_params(tr, after, count);
        TH_CHECK(memcmp(before, after, count * sizeof *after) == 0,
                 "%s: unchanged after the failures", kinds[k].what);
        /* the import */
        io.map = torch_map;
        if (TH_OK(NULL, vkt_trainer_import_safetensors(tr, path, &io, &rep))) {
            TH_CHECK(rep.loaded == 4 && rep.transposed == 2 && rep.kept == 0 && rep.ignored == 0,
                     "%s: report %u %u %u %u", kinds[k].what, rep.loaded, rep.transposed,
                     rep.kept, rep.ignored);
            TH_CHECK(params_are(tr, &n, w1, b1, w2, b2), "%s: the file's values, transposed",
                     kinds[k].what);
            if (kinds[k].replicas == 2) {
                vkt_trainer_read_replica_params(tr, 0, before, count);
                vkt_trainer_read_replica_params(tr, 1, after, count);
                TH_CHECK(memcmp(before, after, count * sizeof *after) == 0,
                         "%s: both replicas hold them", kinds[k].what);
            }
            /* a step runs from them and changes them */
            float x[BATCH * FEAT], loss = 0;
            int32_t y[BATCH];
            for (int i = 0; i < BATCH * FEAT; i++)
                x[i] = (float)((i * 7) % 11) / 11.0f;
            for (int i = 0; i < BATCH; i++)
                y[i] = i % CLS;
            vkt_feed feeds[2] = {{n.x, x}, {n.y, y}};
            TH_OK(NULL, vkt_trainer_step(tr, feeds, 2, &loss));
            TH_CHECK(isfinite(loss) && !params_are(tr, &n, w1, b1, w2, b2),
                     "%s: trains from them (loss %g)", kinds[k].what, loss);
        }
        free(before);
        free(after);
        vkt_trainer_destroy(tr);
        vkt_graph_destroy(n.g);
    }
    TH_CHECK(vkt_trainer_import_safetensors(NULL, path, NULL, NULL) ==
                 VKT_ERROR_INVALID_ARGUMENT, "NULL trainer refused");
}

/* A checkpoint exported as safetensors (vkt export) imports back bitwise, without a map. */
static void test_export_round_trip(const char *dir)
{
    net a = make_net(11, 0), b = make_net(12, 0);
    vkt_trainer_options o = {.batch = BATCH, .optimizer = {.kind = VKT_OPTIMIZER_ADAM}};
    vkt_trainer *ta = NULL, *tb = NULL;
    if (!TH_OK(NULL, vkt_trainer_create(th_instance, a.g, a.loss, &o, &ta)) ||
        !TH_OK(NULL, vkt_trainer_create(th_instance, b.g, b.loss, &o, &tb)))
        goto done;
    float x[BATCH * FEAT], la = 0, lb = 0;
    int32_t y[BATCH];
    for (int i = 0; i < BATCH * FEAT; i++)
        x[i] = th_rand_uniform(-1, 1);
    for (int i = 0; i < BATCH; i++)
        y[i] = i % CLS;
    vkt_feed fa[2] = {{a.x, x}, {a.y, y}}, fb[2] = {{b.x, x}, {b.y, y}};
    for (int s = 0; s < 3; s++)
        TH_OK(NULL, vkt_trainer_step(ta, fa, 2, &la));
    char ck[640], out[640];
    snprintf(ck, sizeof ck, "%s/ck", dir);
    snprintf(out, sizeof out, "%s/export.safetensors", dir);
    TH_OK(NULL, vkt_checkpoint_save_dir(ta, ck, 1));
    TH_OK(NULL, vkt_checkpoint_export_safetensors(ck, out, NULL));
    uint64_t n = vkt_trainer_param_count(ta);
    float *pa = th_alloc_floats(n), *pb = th_alloc_floats(n);
    vkt_trainer_read_params(ta, pa, n);
    vkt_trainer_read_params(tb, pb, n);
    TH_CHECK(memcmp(pa, pb, n * sizeof *pa) != 0, "the two trainers start apart");
    if (TH_OK(NULL, vkt_trainer_import_safetensors(tb, out, NULL, NULL))) {
        vkt_trainer_read_params(tb, pb, n);
        TH_CHECK(memcmp(pa, pb, n * sizeof *pa) == 0, "exported then imported: bitwise equal");
        /* the same forward: the loss of a step on the same batch (Adam's moments differ
         * afterwards, not before the update) */
        TH_OK(NULL, vkt_trainer_step(ta, fa, 2, &la));
        TH_OK(NULL, vkt_trainer_step(tb, fb, 2, &lb));
        TH_CHECK(la == lb, "the same loss from the imported parameters: %.9g %.9g", la, lb);
    }
    free(pa);
    free(pb);
done:
    vkt_trainer_destroy(ta);
    vkt_trainer_destroy(tb);
    vkt_graph_destroy(a.g);
    vkt_graph_destroy(b.g);
}

int main(void)
{
    th_init("test_safetensors");
    test_valid();
    test_malformed();
    test_mutations();
    test_map_text();
    test_assign();
    char dir[512];
    th_temp_dir("safetensors", dir, sizeof dir);
    test_trainer(dir);
    test_export_round_trip(dir);
    th_remove_tree(dir);
    return th_finish();
}
