/* A minimal PNG encoder (png.h): signature, IHDR, one IDAT, IEND. Each chunk is a
 * big-endian length, the 4-byte type, the data and a CRC-32 (zlib's crc32, the
 * polynomial PNG specifies) of type and data. Scanlines use filter 0 (none). */
#include "png.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static void be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static int chunk(FILE *f, const char *type, const uint8_t *data, uint32_t n)
{
    uint8_t head[8], tail[4];
    be32(head, n);
    memcpy(head + 4, type, 4);
    uLong crc = crc32(0L, head + 4, 4);
    if (n)
        crc = crc32(crc, data, n);
    be32(tail, (uint32_t)crc);
    return fwrite(head, 1, 8, f) == 8 && (n == 0 || fwrite(data, 1, n, f) == n) &&
           fwrite(tail, 1, 4, f) == 4;
}

int png_write_rgb(const char *path, const uint8_t *rgb, uint32_t width, uint32_t height,
                  char *why, size_t why_size)
{
    size_t row = (size_t)width * 3 + 1, raw_n = row * height;
    uLongf packed_n = compressBound((uLong)raw_n);
    uint8_t *raw = malloc(raw_n), *packed = malloc(packed_n);
    int ok = raw && packed;
    if (!ok)
        snprintf(why, why_size, "out of memory for a %ux%u image", width, height);
    for (uint32_t y = 0; ok && y < height; y++) {
        raw[y * row] = 0; /* filter: none */
        memcpy(raw + y * row + 1, rgb + (size_t)y * width * 3, (size_t)width * 3);
    }
    if (ok && compress2(packed, &packed_n, raw, (uLong)raw_n, 9) != Z_OK) {
        snprintf(why, why_size, "zlib could not compress the image");
        ok = 0;
    }
    FILE *f = ok ? fopen(path, "wb") : NULL;
    if (ok && !f) {
        snprintf(why, why_size, "cannot create '%s': %s", path, strerror(errno));
        ok = 0;
    }
    if (ok) {
        static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
        uint8_t ihdr[13];
        be32(ihdr, width);
        be32(ihdr + 4, height);
        ihdr[8] = 8;   /* bit depth */
        ihdr[9] = 2;   /* colour type: RGB */
        ihdr[10] = 0;  /* compression: deflate */
        ihdr[11] = 0;  /* filter method 0 */
        ihdr[12] = 0;  /* no interlace */
        ok = fwrite(sig, 1, 8, f) == 8 && chunk(f, "IHDR", ihdr, 13) &&
             chunk(f, "IDAT", packed, (uint32_t)packed_n) && chunk(f, "IEND", NULL, 0);
        ok = fclose(f) == 0 && ok;
        if (!ok)
            snprintf(why, why_size, "cannot write '%s': %s", path, strerror(errno));
    }
    free(raw);
    free(packed);
    return ok ? 0 : -1;
}
