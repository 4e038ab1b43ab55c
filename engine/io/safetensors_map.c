/* safetensors_map.c - a name map's text (safetensors.h, docs/import.md) and the
 * assignment of a parsed file's tensors to parameters through it: every parameter gets a
 * tensor of its exact shape (or the transpose the map asks for), every tensor goes to a
 * parameter or is left unused by the map, and every value is finite; otherwise the
 * problems are listed by name, as many as the message holds. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/safetensors.h"

/* ---- the map's text ---------------------------------------------------------------- */

static vkt_status map_bad(char *why, size_t ws, uint32_t line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static vkt_status map_bad(char *why, size_t ws, uint32_t line, const char *fmt, ...)
{
    int n = snprintf(why, ws, "line %u: ", line);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < ws)
        vsnprintf(why + n, ws - (size_t)n, fmt, ap);
    va_end(ap);
    return VKT_ERROR_FORMAT;
}

/* Cuts one line (NUL-terminated, in place) into at most 4 words; a word starting with
 * '#' starts a comment. Returns the word count (4: too many). */
static uint32_t words(char *s, char *w[4])
{
    uint32_t n = 0;
    while (n < 4) {
        while (*s == ' ' || *s == '\t' || *s == '\r')
            *s++ = '\0';
        if (!*s || *s == '#')
            break;
        w[n++] = s;
        while (*s && *s != ' ' && *s != '\t' && *s != '\r')
            s++;
    }
    return n;
}

static vkt_status parse_line(st_map *m, char *text, uint32_t line, char *why, size_t ws)
{
    char *w[4];
    uint32_t n = words(text, w);
    if (n == 0)
        return VKT_OK;
    if (n == 1 || n == 4)
        return map_bad(why, ws, line, "%s words; a line is 'PARAM TENSOR [transpose]', "
                       "'PARAM -' or '- TENSOR'", n == 1 ? "one word" : "more than 3");
    int dash0 = !strcmp(w[0], "-"), dash1 = !strcmp(w[1], "-");
    if (dash0 && dash1)
        return map_bad(why, ws, line, "'- -' names neither a parameter nor a tensor");
    if (n == 3 && strcmp(w[2], "transpose"))
        return map_bad(why, ws, line, "the third word is '%.64s'; only 'transpose' may follow "
                       "the two names", w[2]);
    if (n == 3 && (dash0 || dash1))
        return map_bad(why, ws, line, "'transpose' needs a parameter and a tensor");
    if (!strcmp(w[0], "*"))
        return map_bad(why, ws, line, "'*' stands only for tensors, in '- *'");
    for (uint32_t i = 0; !dash0 && i < m->n; i++)
        if (m->lines[i].param && !strcmp(m->lines[i].param, w[0]))
            return map_bad(why, ws, line, "parameter '%.128s' is mapped again (first on line %u)",
                           w[0], m->lines[i].line);
    st_map_line *l = &m->lines[m->n++];
    l->param = dash0 ? NULL : w[0];
    l->tensor = dash1 ? NULL : w[1];
    l->transpose = n == 3;
    l->line = line;
    return VKT_OK;
}

vkt_status st_map_parse(const char *text, st_map *out, char *why, size_t ws)
{
    memset(out, 0, sizeof *out);
    if (!text || !*text)
        return VKT_OK;
    size_t len = strlen(text), lines = 1;
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    out->text = malloc(len + 1);
    out->lines = calloc(lines, sizeof *out->lines);
    if (!out->text || !out->lines) {
        st_map_free(out);
        snprintf(why, ws, "out of host memory");
        return VKT_ERROR_OUT_OF_MEMORY;
    }
    memcpy(out->text, text, len + 1);
    char *s = out->text;
    for (uint32_t line = 1; s; line++) {
        char *nl = strchr(s, '\n');
        if (nl)
            *nl = '\0';
        vkt_status st = parse_line(out, s, line, why, ws);
        if (st != VKT_OK) {
            st_map_free(out);
            return st;
        }
        s = nl ? nl + 1 : NULL;
    }
    return VKT_OK;
}

void st_map_free(st_map *m)
{
    if (!m)
        return;
    free(m->text);
    free(m->lines);
    memset(m, 0, sizeof *m);
}

/* ---- problems, collected into one message ------------------------------------------ */

typedef struct problems {
    char text[VKT_ERRMSG_SIZE - 192]; /* room for the head and the count */
    size_t n;
    uint32_t count, dropped;
    vkt_status first;
} problems;

static void add(problems *p, vkt_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void add(problems *p, vkt_status st, const char *fmt, ...)
{
    char one[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(one, sizeof one, fmt, ap);
    va_end(ap);
    if (!p->count++)
        p->first = st;
    size_t len = strlen(one) + (p->n ? 2 : 0);
    if (p->n + len + 1 > sizeof p->text) {
        p->dropped++;
        return;
    }
    p->n += (size_t)snprintf(p->text + p->n, sizeof p->text - p->n, "%s%s", p->n ? "; " : "",
                             one);
}

/* ---- the assignment ---------------------------------------------------------------- */

static const st_map_line *line_of(const st_map *m, const char *param)
{
    for (uint32_t i = 0; m && i < m->n; i++)
        if (m->lines[i].param && !strcmp(m->lines[i].param, param))
            return &m->lines[i];
    return NULL;
}

static void param_shape(const st_param *p, uint64_t *dims)
{
    for (uint32_t d = 0; d < p->shape.ndim; d++)
        dims[d] = p->shape.dims[d];
}

static int same_dims(const uint64_t *a, const uint64_t *b, uint32_t n)
{
    for (uint32_t d = 0; d < n; d++)
        if (a[d] != b[d])
            return 0;
    return 1;
}

/* Whether tensor t fits parameter p as it is (transpose 0) or transposed (1). */
static int fits(const st_tensor *t, const st_param *p, int transpose)
{
    uint64_t want[VKT_MAX_DIMS];
    param_shape(p, want);
    if (!transpose)
        return t->ndim == p->shape.ndim && same_dims(t->dims, want, t->ndim);
    return t->ndim == 2 && p->shape.ndim == 2 && t->dims[0] == want[1] && t->dims[1] == want[0];
}

static void shape_mismatch(problems *pr, const st_tensor *t, const st_param *p,
                           const st_map_line *l)
{
    char ts[ST_MAX_DIMS * 21 + 3], ps[VKT_MAX_DIMS * 21 + 3];
    uint64_t want[VKT_MAX_DIMS];
    param_shape(p, want);
    st_shape_text(t->dims, t->ndim, ts, sizeof ts);
    st_shape_text(want, p->shape.ndim, ps, sizeof ps);
    int tr = l && l->transpose;
    const char *hint = "";
    if (!tr && fits(t, p, 1))
        hint = " (its transpose: a PyTorch nn.Linear weight is [out, in]; add 'transpose' to "
               "its map line)";
    else if (tr && fits(t, p, 0))
        hint = " (it fits without 'transpose')";
    else if (tr && t->ndim != 2)
        hint = " ('transpose' takes 2-D tensors)";
    if (tr && t->ndim == 2) {
        uint64_t swapped[2] = {t->dims[1], t->dims[0]};
        char ss[2 * 21 + 3];
        st_shape_text(swapped, 2, ss, sizeof ss);
        add(pr, VKT_ERROR_SHAPE, "parameter '%s' is %s, tensor '%s' transposed is %s%s",
            p->name, ps, t->name, ss, hint);
    } else {
        add(pr, VKT_ERROR_SHAPE, "parameter '%s' is %s, tensor '%s' is %s%s", p->name, ps,
            t->name, ts, hint);
    }
}

/* t's values into dst (p->count floats; transposed [a,b] -> [b,a] when asked), then each
 * checked finite. Returns 0 with a problem added when they cannot be. */
static int convert(problems *pr, const st_tensor *t, const st_param *p, int transpose,
                   float *dst)
{
    float *tmp = transpose ? malloc((t->count ? t->count : 1) * sizeof *tmp) : dst;
    if (!tmp) {
        add(pr, VKT_ERROR_OUT_OF_MEMORY, "out of host memory for tensor '%s'", t->name);
        return 0;
    }
    t->dtype->to_f32(t->data, tmp, t->count);
    if (transpose) {
        uint64_t a = t->dims[0], b = t->dims[1];
        for (uint64_t i = 0; i < a; i++)
            for (uint64_t j = 0; j < b; j++)
                dst[j * a + i] = tmp[i * b + j];
        free(tmp);
    }
    for (uint64_t i = 0; i < p->count; i++)
        if (!isfinite(dst[i])) {
            add(pr, VKT_ERROR_FORMAT, "tensor '%s' (%s) holds %s at element %llu%s", t->name,
                t->dtype->name, isnan(dst[i]) ? "a NaN" : "an infinity",
                (unsigned long long)(transpose ? (i % t->dims[0]) * t->dims[1] +
                                                     i / t->dims[0] : i),
                !strcmp(t->dtype->name, "F64") && !isnan(dst[i]) ? " (past float's range)"
                                                                  : "");
            return 0;
        }
    return 1;
}

/* Parameter p from the file, as the map says. */
static void assign_one(problems *pr, const st_file *f, const st_map *map, const st_param *p,
                       uint8_t *used, float *flat, st_result *r)
{
    const st_map_line *l = line_of(map, p->name);
    if (l && !l->tensor) { /* "PARAM -": keeps its values */
        r->kept++;
        return;
    }
    const char *name = l ? l->tensor : p->name;
    const st_tensor *t = st_find(f, name);
    if (!t) {
        char where[160];
        uint64_t dims[VKT_MAX_DIMS];
        char ps[VKT_MAX_DIMS * 21 + 3];
        param_shape(p, dims);
        st_shape_text(dims, p->shape.ndim, ps, sizeof ps);
        if (l)
            snprintf(where, sizeof where, " (map line %u)", l->line);
        else
            snprintf(where, sizeof where, " (map it: a line '%.40s TENSOR', or '%.40s -' to "
                     "keep its values)", p->name, p->name);
        add(pr, VKT_ERROR_SHAPE, "parameter '%s' %s: the file has no tensor '%s'%s", p->name,
            ps, name, where);
        return;
    }
    used[t - f->tensors] = 1;
    if (!t->dtype->to_f32) {
        add(pr, VKT_ERROR_FORMAT, "tensor '%s' has dtype %s, which cannot be loaded into "
            "parameter '%s' (loadable: %s)", t->name, t->dtype->name, p->name,
            st_loadable_dtypes());
        return;
    }
    int tr = l && l->transpose;
    if (!fits(t, p, tr)) {
        shape_mismatch(pr, t, p, l);
        return;
    }
    if (convert(pr, t, p, tr, flat + p->offset)) {
        r->loaded++;
        r->transposed += tr;
    }
}

/* Map lines naming parameters the model does not have, and ignored tensors the file does
 * not have (typos, or a map of another model). */
static void check_map(problems *pr, const st_file *f, const st_map *map, const st_param *params,
                      uint32_t n)
{
    for (uint32_t i = 0; map && i < map->n; i++) {
        const st_map_line *l = &map->lines[i];
        uint32_t k = 0;
        while (l->param && k < n && strcmp(params[k].name, l->param))
            k++;
        if (l->param && k == n)
            add(pr, VKT_ERROR_INVALID_ARGUMENT, "map line %u names '%s', which is not a "
                "parameter of the model", l->line, l->param);
        if (!l->param && strcmp(l->tensor, "*") && !st_find(f, l->tensor))
            add(pr, VKT_ERROR_INVALID_ARGUMENT, "map line %u leaves tensor '%s' unused, but "
                "the file has no such tensor", l->line, l->tensor);
    }
}

/* Tensors no parameter took: refused unless the map leaves them unused. */
static void check_unused(problems *pr, const st_file *f, const st_map *map, const uint8_t *used,
                         st_result *r)
{
    int all = 0;
    for (uint32_t i = 0; map && i < map->n; i++)
        all |= !map->lines[i].param && !strcmp(map->lines[i].tensor, "*");
    for (uint32_t i = 0; i < f->n_tensors; i++) {
        if (used[i])
            continue;
        int listed = 0;
        for (uint32_t k = 0; map && k < map->n && !listed; k++)
            listed = !map->lines[k].param && !strcmp(map->lines[k].tensor, f->tensors[i].name);
        if (all || listed)
            r->ignored++;
        else
            add(pr, VKT_ERROR_SHAPE, "tensor '%s' of the file goes to no parameter (a map line "
                "'PARAM %s' assigns it, '- %s' leaves it unused)", f->tensors[i].name,
                f->tensors[i].name, f->tensors[i].name);
    }
}

vkt_status st_assign(const st_file *f, const char *path, const st_map *map,
                     const st_param *params, uint32_t n, float *flat, st_result *result,
                     char *errmsg)
{
    st_result r = {0};
    problems pr = {0};
    uint8_t *used = calloc(f->n_tensors ? f->n_tensors : 1, 1);
    if (!used)
        return err_fail(errmsg, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    check_map(&pr, f, map, params, n);
    if ((!map || map->n == 0) && n > 0 && f->n_tensors > 0) { /* names of another convention? */
        uint32_t found = 0;
        for (uint32_t i = 0; i < n && !found; i++)
            found = st_find(f, params[i].name) != NULL;
        if (!found)
            add(&pr, VKT_ERROR_SHAPE, "none of the model's %u parameter names is a tensor of "
                "the file (whose tensors are named like '%s'): a name map is needed", n,
                f->tensors[0].name);
    }
    for (uint32_t i = 0; i < n; i++)
        assign_one(&pr, f, map, &params[i], used, flat, &r);
    check_unused(&pr, f, map, used, &r);
    free(used);
    if (result)
        *result = pr.count ? (st_result){0} : r;
    if (!pr.count)
        return VKT_OK;
    char more[64] = "";
    if (pr.dropped)
        snprintf(more, sizeof more, "; and %u more", pr.dropped);
    return err_fail(errmsg, pr.first, "cannot initialize the model from '%s': %u problem%s: "
                    "%s%s", path, pr.count, pr.count == 1 ? "" : "s", pr.text, more);
}
