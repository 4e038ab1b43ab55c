/* safetensors.c - the safetensors reader (safetensors.h, docs/import.md): a strict JSON
 * parser for exactly the header's schema, then the byte ranges checked against the data.
 * Garbage gives VKT_ERROR_FORMAT and a reason naming the header byte or the tensor, never
 * a crash: every read is bounded by the header's end, every size product is checked for
 * overflow before it is used. tests/fuzz/fuzz_safetensors.c fuzzes it. */
#include "io/safetensors.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/bytes.h"
#include "platform/platform.h"

/* ---- dtypes ------------------------------------------------------------------------ */

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void f32_to_f32(const unsigned char *src, float *dst, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        dst[i] = bits_f32(io_rd32(src + 4 * i));
}

/* IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits; every value is exact in
 * float. */
static float half_to_float(uint32_t h)
{
    uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0) /* zero or subnormal: mant * 2^-24 (exact) */
        return sign ? -ldexpf((float)mant, -24) : ldexpf((float)mant, -24);
    if (exp == 31) /* infinity, or NaN (its payload kept in the top mantissa bits) */
        return bits_f32(sign | 0x7f800000u | mant << 13);
    return bits_f32(sign | (exp + 127 - 15) << 23 | mant << 13);
}

static void f16_to_f32(const unsigned char *src, float *dst, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        dst[i] = half_to_float(io_rd16(src + 2 * i));
}

/* bfloat16: the top 16 bits of a float. */
static void bf16_to_f32(const unsigned char *src, float *dst, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        dst[i] = bits_f32(io_rd16(src + 2 * i) << 16);
}

/* binary64, rounded to the nearest float (too large: an infinity, refused by the caller). */
static void f64_to_f32(const unsigned char *src, float *dst, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        uint64_t u = (uint64_t)io_rd32(src + 8 * i) | (uint64_t)io_rd32(src + 8 * i + 4) << 32;
        double d;
        memcpy(&d, &u, 8);
        dst[i] = (float)d;
    }
}

/* The format's dtypes: the loadable ones first. A new one is a row. */
static const st_dtype dtypes[] = {
    {"F32", 4, f32_to_f32},  {"F16", 2, f16_to_f32}, {"BF16", 2, bf16_to_f32},
    {"F64", 8, f64_to_f32},  {"BOOL", 1, NULL},      {"U8", 1, NULL},
    {"I8", 1, NULL},         {"F8_E5M2", 1, NULL},   {"F8_E4M3", 1, NULL},
    {"F8_E8M0", 1, NULL},    {"I16", 2, NULL},       {"U16", 2, NULL},
    {"I32", 4, NULL},        {"U32", 4, NULL},       {"I64", 8, NULL},
    {"U64", 8, NULL},        {"C64", 8, NULL},
};
#define N_DTYPES (sizeof dtypes / sizeof dtypes[0])

const st_dtype *st_dtype_named(const char *name)
{
    for (size_t i = 0; i < N_DTYPES; i++)
        if (strcmp(dtypes[i].name, name) == 0)
            return &dtypes[i];
    return NULL;
}

const char *st_loadable_dtypes(void) { return "F32, F16, BF16, F64"; }

void st_shape_text(const uint64_t *dims, uint32_t ndim, char *buf, size_t size)
{
    size_t n = (size_t)snprintf(buf, size, "[");
    for (uint32_t d = 0; d < ndim && n < size; d++)
        n += (size_t)snprintf(buf + n, size - n, "%s%llu", d ? "," : "",
                              (unsigned long long)dims[d]);
    if (n < size)
        snprintf(buf + n, size - n, "]");
}

/* ---- the JSON header --------------------------------------------------------------- */

/* A reader over the header [start, end) that decodes strings into an arena of offsets
 * (the arena may move while it grows). */
typedef struct jreader {
    const unsigned char *start, *p, *end;
    char *why;
    size_t ws;
    char *arena;
    size_t an, acap;
} jreader;

static int fail(jreader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Records "header byte N: <what>" once (the first problem); returns 0. */
static int fail(jreader *r, const char *fmt, ...)
{
    if (r->why[0])
        return 0;
    int n = snprintf(r->why, r->ws, "header byte %zu: ", (size_t)(r->p - r->start));
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < r->ws)
        vsnprintf(r->why + n, r->ws - (size_t)n, fmt, ap);
    va_end(ap);
    return 0;
}

static void skip_ws(jreader *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
        r->p++;
}

/* What is at the reader, for messages. */
static const char *here(jreader *r)
{
    return r->p >= r->end ? "the end of the header" : "another character";
}

static int expect(jreader *r, char c, const char *what)
{
    skip_ws(r);
    if (r->p < r->end && *r->p == (unsigned char)c) {
        r->p++;
        return 1;
    }
    if (r->p < r->end && *r->p >= 0x20 && *r->p < 0x7f)
        return fail(r, "expected %s, found '%c'", what, *r->p);
    return fail(r, "expected %s, found %s", what, here(r));
}

/* Skips whitespace and consumes c if it is next. */
static int next_is(jreader *r, char c)
{
    skip_ws(r);
    if (r->p < r->end && *r->p == (unsigned char)c) {
        r->p++;
        return 1;
    }
    return 0;
}

static int put(jreader *r, const void *bytes, size_t n)
{
    if (r->an + n > r->acap) {
        size_t cap = r->acap ? r->acap : 256;
        while (cap < r->an + n)
            cap *= 2;
        char *a = realloc(r->arena, cap);
        if (!a)
            return fail(r, "out of host memory");
        r->arena = a;
        r->acap = cap;
    }
    memcpy(r->arena + r->an, bytes, n);
    r->an += n;
    return 1;
}

/* Appends code point cp (valid: checked by the caller) as UTF-8. */
static int put_utf8(jreader *r, uint32_t cp)
{
    unsigned char b[4];
    size_t n;
    if (cp < 0x80) {
        b[0] = (unsigned char)cp;
        n = 1;
    } else if (cp < 0x800) {
        b[0] = (unsigned char)(0xc0 | cp >> 6);
        b[1] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        b[0] = (unsigned char)(0xe0 | cp >> 12);
        b[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
        b[2] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        b[0] = (unsigned char)(0xf0 | cp >> 18);
        b[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3f));
        b[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
        b[3] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    return put(r, b, n);
}

/* One UTF-8 sequence at r->p (first byte >= 0x80): its code point, or 0 after fail() for
 * a malformed, overlong or surrogate sequence or one past U+10FFFF. */
static int take_utf8(jreader *r, uint32_t *cp)
{
    unsigned char c = *r->p;
    uint32_t n = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : c >= 0xc0 ? 1 : 0;
    static const uint32_t least[4] = {0, 0x80, 0x800, 0x10000};
    if (n == 0 || c >= 0xf8 || (size_t)(r->end - r->p) <= n)
        return fail(r, "invalid UTF-8 (byte 0x%02x)", c);
    uint32_t v = c & (0x3fu >> n);
    for (uint32_t i = 1; i <= n; i++) {
        if ((r->p[i] & 0xc0) != 0x80)
            return fail(r, "invalid UTF-8 (byte 0x%02x)", c);
        v = v << 6 | (r->p[i] & 0x3fu);
    }
    if (v < least[n] || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
        return fail(r, "invalid UTF-8 (an overlong or out-of-range sequence)");
    r->p += n + 1;
    *cp = v;
    return 1;
}

static int hex4(jreader *r, uint32_t *v)
{
    *v = 0;
    if (r->end - r->p < 4)
        return fail(r, "a \\u escape needs 4 hex digits");
    for (int i = 0; i < 4; i++) {
        unsigned char c = r->p[i];
        uint32_t d = c >= '0' && c <= '9' ? (uint32_t)(c - '0')
                     : c >= 'a' && c <= 'f' ? (uint32_t)(c - 'a' + 10)
                     : c >= 'A' && c <= 'F' ? (uint32_t)(c - 'A' + 10) : 16u;
        if (d == 16)
            return fail(r, "a \\u escape needs 4 hex digits");
        *v = *v << 4 | d;
    }
    r->p += 4;
    return 1;
}

/* A \u escape after the 'u': one code point, a surrogate pair joined. */
static int take_escape_u(jreader *r, uint32_t *cp)
{
    uint32_t hi, lo;
    if (!hex4(r, &hi))
        return 0;
    if (hi >= 0xdc00 && hi <= 0xdfff)
        return fail(r, "a lone low surrogate \\u%04x", hi);
    if (hi < 0xd800 || hi > 0xdbff) {
        *cp = hi;
        return 1;
    }
    if (r->end - r->p < 2 || r->p[0] != '\\' || r->p[1] != 'u')
        return fail(r, "a high surrogate \\u%04x without its low half", hi);
    r->p += 2;
    if (!hex4(r, &lo))
        return 0;
    if (lo < 0xdc00 || lo > 0xdfff)
        return fail(r, "a high surrogate \\u%04x without its low half", hi);
    *cp = 0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00);
    return 1;
}

/* A string: its decoded bytes and a NUL into the arena at *off. Strings with a NUL
 * character are refused (names are C strings). */
static int parse_string(jreader *r, size_t *off, const char *what)
{
    if (!expect(r, '"', what))
        return 0;
    *off = r->an;
    while (r->p < r->end && *r->p != '"') {
        unsigned char c = *r->p;
        uint32_t cp = 0;
        if (c < 0x20)
            return fail(r, "a control character (0x%02x) inside a string", c);
        if (c >= 0x80) {
            if (!take_utf8(r, &cp) || !put_utf8(r, cp))
                return 0;
            continue;
        }
        r->p++;
        if (c != '\\') {
            if (!put(r, &c, 1))
                return 0;
            continue;
        }
        if (r->p >= r->end)
            break;
        c = *r->p++;
        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
        const char *e = c ? strchr(from, c) : NULL;
        if (e) {
            if (!put(r, &to[e - from], 1))
                return 0;
        } else if (c == 'u') {
            if (!take_escape_u(r, &cp))
                return 0;
            if (cp == 0)
                return fail(r, "a string holds a NUL character (\\u0000)");
            if (!put_utf8(r, cp))
                return 0;
        } else {
            r->p--;
            return fail(r, "an invalid escape '\\%c'", c >= 0x20 && c < 0x7f ? c : '?');
        }
    }
    if (r->p >= r->end)
        return fail(r, "a string is not closed before the end of the header");
    r->p++;
    return put(r, "", 1);
}

/* A JSON number that must be a whole number from 0 to 2^64 - 1. */
static int parse_uint(jreader *r, uint64_t *v, const char *what)
{
    skip_ws(r);
    const unsigned char *s = r->p;
    if (r->p < r->end && *r->p == '-')
        return fail(r, "%s: a negative number", what);
    if (r->p >= r->end || *r->p < '0' || *r->p > '9')
        return fail(r, "%s: expected a whole number, found %s", what,
                    r->p < r->end && *r->p == '"' ? "a string" : here(r));
    uint64_t x = 0;
    int big = 0;
    while (r->p < r->end && *r->p >= '0' && *r->p <= '9') {
        uint32_t d = *r->p - '0';
        if (x > (UINT64_MAX - d) / 10)
            big = 1;
        x = x * 10 + d;
        r->p++;
    }
    if (r->p - s > 1 && *s == '0') {
        r->p = s;
        return fail(r, "%s: a number with a leading zero is not JSON", what);
    }
    if (r->p < r->end && (*r->p == '.' || *r->p == 'e' || *r->p == 'E'))
        return fail(r, "%s: not a whole number", what);
    if (big) {
        r->p = s;
        return fail(r, "%s: a number larger than 2^64 - 1", what);
    }
    *v = x;
    return 1;
}

/* "[n, n, ...]" of up to max whole numbers into v; *count gets how many. */
static int parse_uints(jreader *r, uint64_t *v, uint32_t max, uint32_t *count,
                       const char *what)
{
    char item[64];
    *count = 0;
    if (!expect(r, '[', "'[' (a list)"))
        return 0;
    if (next_is(r, ']'))
        return 1;
    do {
        if (*count == max)
            return fail(r, "%s has more than %u entries", what, max);
        snprintf(item, sizeof item, "%s[%u]", what, *count);
        if (!parse_uint(r, &v[(*count)++], item))
            return 0;
    } while (next_is(r, ','));
    return expect(r, ']', "',' or ']'");
}

/* The key of an object's member and its ':'. */
static int parse_key(jreader *r, size_t *off)
{
    return parse_string(r, off, "'\"' (a key)") && expect(r, ':', "':' after a key");
}

enum { HAS_DTYPE = 1, HAS_SHAPE = 2, HAS_OFFSETS = 4 };

/* {"dtype": "F32", "shape": [...], "data_offsets": [b, e]} in any order, each once. */
static int parse_entry(jreader *r, st_tensor *t, const char *name)
{
    int has = 0;
    if (!expect(r, '{', "'{' (a tensor's description)"))
        return 0;
    if (next_is(r, '}'))
        return fail(r, "tensor '%s' has no dtype, shape or data_offsets", name);
    do {
        size_t k;
        if (!parse_key(r, &k))
            return 0;
        const char *key = r->arena + k;
        int bit = !strcmp(key, "dtype") ? HAS_DTYPE : !strcmp(key, "shape") ? HAS_SHAPE
                  : !strcmp(key, "data_offsets") ? HAS_OFFSETS : 0;
        if (!bit)
            return fail(r, "tensor '%s': unknown key '%s' (a tensor has dtype, shape and "
                        "data_offsets)", name, key);
        if (has & bit)
            return fail(r, "tensor '%s': '%s' appears twice", name, key);
        has |= bit;
        r->an = k; /* the key's bytes are not kept */
        if (bit == HAS_DTYPE) {
            size_t d;
            if (!parse_string(r, &d, "'\"' (the dtype's name)"))
                return 0;
            t->dtype = st_dtype_named(r->arena + d);
            if (!t->dtype)
                return fail(r, "tensor '%s': unknown dtype '%.32s' (the format's: F32, F16, "
                            "BF16, F64, F8_E5M2, F8_E4M3, F8_E8M0, I64, I32, I16, I8, U64, U32, "
                            "U16, U8, BOOL, C64)", name, r->arena + d);
            r->an = d;
        } else if (bit == HAS_SHAPE) {
            if (!parse_uints(r, t->dims, ST_MAX_DIMS, &t->ndim, "shape"))
                return 0;
        } else {
            uint64_t be[3];
            uint32_t n;
            if (!parse_uints(r, be, 3, &n, "data_offsets"))
                return 0;
            if (n != 2)
                return fail(r, "tensor '%s': data_offsets holds %u value%s, not 2 (begin, end)",
                            name, n, n == 1 ? "" : "s");
            t->begin = be[0];
            t->end = be[1];
        }
    } while (next_is(r, ','));
    if (!expect(r, '}', "',' or '}'"))
        return 0;
    if (has != (HAS_DTYPE | HAS_SHAPE | HAS_OFFSETS))
        return fail(r, "tensor '%s' lacks %s", name, !(has & HAS_DTYPE) ? "its dtype"
                    : !(has & HAS_SHAPE) ? "its shape" : "its data_offsets");
    return 1;
}

/* What the parse collects before the arena stops moving: offsets, not pointers. */
typedef struct parsed {
    st_tensor *t;
    size_t *name_off;
    uint32_t n, cap;
    size_t *meta_off;           /* key, value pairs */
    uint32_t n_meta, meta_cap;
    int has_meta;
} parsed;

static int grow_tensors(jreader *r, parsed *ps)
{
    if (ps->n < ps->cap)
        return 1;
    uint32_t cap = ps->cap ? 2 * ps->cap : 16;
    st_tensor *t = realloc(ps->t, cap * sizeof *t);
    if (t)
        ps->t = t;
    size_t *o = realloc(ps->name_off, cap * sizeof *o);
    if (o)
        ps->name_off = o;
    if (!t || !o)
        return fail(r, "out of host memory");
    ps->cap = cap;
    return 1;
}

/* "__metadata__": {"key": "value", ...}: strings only, no key twice. */
static int parse_metadata(jreader *r, parsed *ps)
{
    if (ps->has_meta++)
        return fail(r, "'__metadata__' appears twice");
    if (!expect(r, '{', "'{' (__metadata__ is an object of strings)"))
        return 0;
    if (next_is(r, '}'))
        return 1;
    do {
        if (ps->n_meta == ps->meta_cap) {
            uint32_t cap = ps->meta_cap ? 2 * ps->meta_cap : 8;
            size_t *m = realloc(ps->meta_off, 2 * cap * sizeof *m);
            if (!m)
                return fail(r, "out of host memory");
            ps->meta_off = m;
            ps->meta_cap = cap;
        }
        size_t *kv = ps->meta_off + 2 * ps->n_meta;
        if (!parse_key(r, &kv[0]))
            return 0;
        for (uint32_t i = 0; i < ps->n_meta; i++)
            if (!strcmp(r->arena + ps->meta_off[2 * i], r->arena + kv[0]))
                return fail(r, "__metadata__ key '%s' appears twice", r->arena + kv[0]);
        skip_ws(r);
        if (r->p < r->end && *r->p != '"')
            return fail(r, "__metadata__ '%s': the value is not a string (the format allows "
                        "strings only)", r->arena + kv[0]);
        if (!parse_string(r, &kv[1], "'\"' (a string)"))
            return 0;
        ps->n_meta++;
    } while (next_is(r, ','));
    return expect(r, '}', "',' or '}'");
}

/* The whole header: an object of tensors (and __metadata__), then only whitespace. */
static int parse_header(jreader *r, parsed *ps)
{
    if (r->p >= r->end || *r->p != '{')
        return fail(r, "the header is not a JSON object (it must start with '{')");
    r->p++;
    if (next_is(r, '}'))
        goto end;
    do {
        size_t k;
        if (!parse_key(r, &k))
            return 0;
        if (!strcmp(r->arena + k, "__metadata__")) {
            r->an = k;
            if (!parse_metadata(r, ps))
                return 0;
            continue;
        }
        if (!grow_tensors(r, ps))
            return 0;
        st_tensor *t = &ps->t[ps->n];
        memset(t, 0, sizeof *t);
        ps->name_off[ps->n] = k;
        /* (the name may move with the arena: copy it for messages) */
        char name[128];
        snprintf(name, sizeof name, "%s", r->arena + k);
        if (!parse_entry(r, t, name))
            return 0;
        ps->n++;
    } while (next_is(r, ','));
    if (!expect(r, '}', "',' or '}'"))
        return 0;
end:
    skip_ws(r);
    if (r->p != r->end)
        return fail(r, "text after the header's object (only whitespace may pad it)");
    return 1;
}

/* ---- the data ---------------------------------------------------------------------- */

/* Each tensor's element count and byte range against its dtype and the data's size. */
static vkt_status check_sizes(st_file *f, uint64_t data_bytes, char *why, size_t ws)
{
    for (uint32_t i = 0; i < f->n_tensors; i++) {
        st_tensor *t = &f->tensors[i];
        char shape[ST_MAX_DIMS * 21 + 3];
        st_shape_text(t->dims, t->ndim, shape, sizeof shape);
        uint64_t n = 1;
        for (uint32_t d = 0; d < t->ndim; d++) {
            if (t->dims[d] && n > UINT64_MAX / t->dims[d])
                return io_bad(why, ws, "tensor '%s': shape %s has more elements than 2^64",
                           t->name, shape);
            n *= t->dims[d];
        }
        if (n > UINT64_MAX / t->dtype->bytes)
            return io_bad(why, ws, "tensor '%s': %s %s takes more than 2^64 bytes", t->name,
                       t->dtype->name, shape);
        t->count = n;
        uint64_t bytes = n * t->dtype->bytes;
        if (t->end < t->begin)
            return io_bad(why, ws, "tensor '%s': data_offsets [%llu, %llu] end before they begin",
                       t->name, (unsigned long long)t->begin, (unsigned long long)t->end);
        if (t->end > data_bytes)
            return io_bad(why, ws, "tensor '%s': data_offsets [%llu, %llu] pass the end of the "
                       "data (%llu bytes): the file is truncated or the offsets are wrong",
                       t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                       (unsigned long long)data_bytes);
        if (t->end - t->begin != bytes)
            return io_bad(why, ws, "tensor '%s': %s %s takes %llu bytes, but data_offsets [%llu, "
                       "%llu] hold %llu", t->name, t->dtype->name, shape,
                       (unsigned long long)bytes, (unsigned long long)t->begin,
                       (unsigned long long)t->end, (unsigned long long)(t->end - t->begin));
    }
    return VKT_OK;
}

static int by_range(const void *a, const void *b)
{
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int by_name(const void *a, const void *b)
{
    return strcmp((*(const st_tensor *const *)a)->name, (*(const st_tensor *const *)b)->name);
}

/* The ranges tile the data: sorted, each begins where the previous ended (no overlap, no
 * hole) and the last ends at the data's end. Names are unique. */
static vkt_status check_tiling(st_file *f, uint64_t data_bytes, char *why, size_t ws)
{
    st_tensor **s = malloc((f->n_tensors ? f->n_tensors : 1) * sizeof *s);
    if (!s)
        return io_bad(why, ws, "out of host memory");
    for (uint32_t i = 0; i < f->n_tensors; i++)
        s[i] = &f->tensors[i];
    vkt_status st = VKT_OK;
    qsort(s, f->n_tensors, sizeof *s, by_name);
    for (uint32_t i = 1; i < f->n_tensors && st == VKT_OK; i++)
        if (!strcmp(s[i - 1]->name, s[i]->name))
            st = io_bad(why, ws, "tensor '%s' appears twice in the header", s[i]->name);
    qsort(s, f->n_tensors, sizeof *s, by_range);
    uint64_t at = 0;
    for (uint32_t i = 0; i < f->n_tensors && st == VKT_OK; i++) {
        if (s[i]->begin < at)
            st = io_bad(why, ws, "tensors '%s' [%llu, %llu] and '%s' [%llu, %llu] overlap",
                     s[i - 1]->name, (unsigned long long)s[i - 1]->begin,
                     (unsigned long long)s[i - 1]->end, s[i]->name,
                     (unsigned long long)s[i]->begin, (unsigned long long)s[i]->end);
        else if (s[i]->begin > at)
            st = io_bad(why, ws, "bytes [%llu, %llu) of the data belong to no tensor (a hole "
                     "before '%s')", (unsigned long long)at, (unsigned long long)s[i]->begin,
                     s[i]->name);
        at = s[i]->end;
    }
    if (st == VKT_OK && at != data_bytes)
        st = io_bad(why, ws, "the data has %llu bytes after the last tensor's end (%llu of %llu "
                 "bytes used)", (unsigned long long)(data_bytes - at), (unsigned long long)at,
                 (unsigned long long)data_bytes);
    free(s);
    return st;
}

/* Pointers from the arena's offsets, now that it no longer moves. */
static vkt_status finish(st_file *out, jreader *r, parsed *ps, const unsigned char *data,
                         char *why, size_t ws)
{
    out->strings = r->arena;
    out->tensors = ps->t;
    out->n_tensors = ps->n;
    r->arena = NULL;
    ps->t = NULL;
    for (uint32_t i = 0; i < ps->n; i++) {
        out->tensors[i].name = out->strings + ps->name_off[i];
        out->tensors[i].data = data + out->tensors[i].begin;
    }
    if (ps->n_meta) {
        out->meta_keys = malloc(ps->n_meta * sizeof *out->meta_keys);
        out->meta_values = malloc(ps->n_meta * sizeof *out->meta_values);
        if (!out->meta_keys || !out->meta_values)
            return io_bad(why, ws, "out of host memory");
        for (uint32_t i = 0; i < ps->n_meta; i++) {
            out->meta_keys[i] = out->strings + ps->meta_off[2 * i];
            out->meta_values[i] = out->strings + ps->meta_off[2 * i + 1];
        }
        out->n_meta = ps->n_meta;
    }
    return VKT_OK;
}

vkt_status st_parse(void *file, size_t size, st_file *out, char *why, size_t ws)
{
    memset(out, 0, sizeof *out);
    out->file = file;
    out->size = size;
    why[0] = '\0';
    const unsigned char *b = file;
    if (size < 8) {
        st_free(out);
        return io_bad(why, ws, "the file has %zu bytes, fewer than the 8 of the header length",
                   size);
    }
    uint64_t n = io_rd32(b) | (uint64_t)io_rd32(b + 4) << 32;
    if (n > size - 8) {
        st_free(out);
        return io_bad(why, ws, "the header length %llu passes the end of the file (%zu bytes "
                   "after the length): truncated, or not a safetensors file",
                   (unsigned long long)n, size - 8);
    }
    jreader r = {.start = b + 8, .p = b + 8, .end = b + 8 + n, .why = why, .ws = ws};
    parsed ps = {0};
    vkt_status st = parse_header(&r, &ps) ? VKT_OK : VKT_ERROR_FORMAT;
    if (st == VKT_OK)
        st = finish(out, &r, &ps, b + 8 + n, why, ws);
    if (st == VKT_OK)
        st = check_sizes(out, size - 8 - n, why, ws);
    if (st == VKT_OK)
        st = check_tiling(out, size - 8 - n, why, ws);
    free(r.arena);
    free(ps.t);
    free(ps.name_off);
    free(ps.meta_off);
    if (st != VKT_OK)
        st_free(out);
    return st;
}

vkt_status st_load(const char *path, st_file *out, char *errmsg)
{
    memset(out, 0, sizeof *out);
    void *data = NULL;
    size_t size = 0;
    if (plat_read_file(path, &data, &size) != 0) {
        plat_file_kind k = plat_file_kind_of(path);
        return err_fail(errmsg, VKT_ERROR_IO, "cannot read safetensors file '%s' (%s)", path,
                        k == PLAT_KIND_NONE ? "no such file"
                        : k == PLAT_KIND_FILE ? "unreadable" : plat_file_kind_name(k));
    }
    char why[768];
    vkt_status st = st_parse(data, size, out, why, sizeof why);
    if (st != VKT_OK)
        return err_fail(errmsg, st, "safetensors file '%s' is invalid: %s", path, why);
    return VKT_OK;
}

void st_free(st_file *f)
{
    if (!f)
        return;
    free(f->file);
    free(f->strings);
    free(f->tensors);
    free(f->meta_keys);
    free(f->meta_values);
    memset(f, 0, sizeof *f);
}

const st_tensor *st_find(const st_file *f, const char *name)
{
    for (uint32_t i = 0; i < f->n_tensors; i++)
        if (!strcmp(f->tensors[i].name, name))
            return &f->tensors[i];
    return NULL;
}
