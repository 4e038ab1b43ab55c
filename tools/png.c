/* A minimal PNG encoder (png.h): signature, IHDR, one IDAT, IEND. Each chunk is a
 * big-endian length, the 4-byte type, the data and a CRC-32 (zlib's crc32, the
 * polynomial PNG specifies) of type and data. Scanlines use filter 0 (none). */
#include "png.h"

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

/* Appends one chunk (length, type, data, CRC) at out + *at. */
static void chunk(uint8_t *out, size_t *at, const char *type, const uint8_t *data, uint32_t n)
{
    uint8_t *p = out + *at;
    be32(p, n);
    memcpy(p + 4, type, 4);
    if (n)
        memcpy(p + 8, data, n);
    be32(p + 8 + n, (uint32_t)crc32(0L, p + 4, 4 + n));
    *at += 12 + (size_t)n;
}

int png_encode_rgb(const uint8_t *rgb, uint32_t width, uint32_t height, uint8_t **out,
                   size_t *out_size, char *why, size_t why_size)
{
    *out = NULL;
    *out_size = 0;
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
    /* signature, IHDR (13 bytes), IDAT, IEND: 8 + 25 + 12 + packed + 12 bytes */
    uint8_t *png = ok ? malloc(8 + 25 + 12 + (size_t)packed_n + 12) : NULL;
    if (ok && !png) {
        snprintf(why, why_size, "out of memory for a %ux%u image", width, height);
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
        size_t at = 8;
        memcpy(png, sig, 8);
        chunk(png, &at, "IHDR", ihdr, 13);
        chunk(png, &at, "IDAT", packed, (uint32_t)packed_n);
        chunk(png, &at, "IEND", NULL, 0);
        *out = png;
        *out_size = at;
    }
    free(raw);
    free(packed);
    return ok ? 0 : -1;
}
