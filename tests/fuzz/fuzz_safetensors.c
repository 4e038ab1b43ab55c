/* Fuzz target: st_parse, the safetensors reader, and st_map_parse, the name maps'
 * (engine/io/safetensors*.c). Each input is read three ways:
 *  - as a whole file (8-byte length, header, data);
 *  - as a header and data without the length: the length put in front is where the
 *    input's last '}' ends, so a seed can be readable JSON followed by its data bytes and
 *    mutations reach the JSON parser and the range checks;
 *  - as the text of a name map.
 * A parsed file's loadable tensors are converted whole (ASan checks they lie inside the
 * file) and assigned to two parameters through a map of its own names, every tensor
 * named, as vkt_trainer_import_safetensors would. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void use(void *file, size_t size)
{
    st_file f;
    char why[512];
    if (st_parse(file, size, &f, why, sizeof why) != VKT_OK)
        return; /* st_parse freed the file */
    for (uint32_t i = 0; i < f.n_tensors; i++) {
        const st_tensor *t = &f.tensors[i];
        if (!t->dtype->to_f32 || t->count > (1u << 20))
            continue;
        float *v = malloc(t->count ? t->count * sizeof *v : 1);
        if (!v)
            abort();
        t->dtype->to_f32(t->data, v, t->count);
        free(v);
    }
    /* two parameters: "p0" [2,2] and "p1" [4], the first tensors' names mapped to them */
    char text[1024] = "- *\n";
    for (uint32_t i = 0; i < f.n_tensors && i < 2; i++)
        if (strlen(f.tensors[i].name) < 400 && !strpbrk(f.tensors[i].name, " \t\r\n#"))
            snprintf(text + strlen(text), sizeof text - strlen(text), "p%u %s%s\n", i,
                     f.tensors[i].name, i == 0 ? " transpose" : "");
    st_map map;
    if (st_map_parse(text, &map, why, sizeof why) == VKT_OK) {
        st_param p[2] = {{"p0", {2, {2, 2}}, 4, 0}, {"p1", {1, {4}}, 4, 4}};
        float flat[8];
        char msg[1024];
        st_result r;
        st_assign(&f, "fuzz", &map, p, 2, flat, &r, msg);
        st_map_free(&map);
    }
    st_free(&f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    void *file = malloc(size ? size : 1);
    if (!file)
        abort();
    memcpy(file, data, size);
    use(file, size);

    size_t header = 0;
    for (size_t i = size; i > 0 && !header; i--)
        if (data[i - 1] == '}')
            header = i;
    unsigned char *f = malloc(8 + size);
    if (!f)
        abort();
    for (int i = 0; i < 8; i++)
        f[i] = (unsigned char)((uint64_t)header >> (8 * i));
    memcpy(f + 8, data, size);
    use(f, 8 + size);

    char *text = malloc(size + 1);
    if (!text)
        abort();
    memcpy(text, data, size);
    text[size] = '\0';
    st_map map;
    char why[256];
    if (st_map_parse(text, &map, why, sizeof why) == VKT_OK)
        st_map_free(&map);
    free(text);
    return 0;
}
