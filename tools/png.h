/* png.h - a minimal PNG writer for `vkt plot` (tools/png.c): 8-bit RGB, no interlace,
 * one IDAT chunk deflated by zlib (already a dependency of the library). */
#ifndef VKT_PNG_H
#define VKT_PNG_H

#include <stddef.h>
#include <stdint.h>

/* Encodes rgb[height][width][3] as a PNG file image into *out (malloc'd, *out_size bytes;
 * the caller writes it, by vkt_file_write's rule, and frees it). Returns 0 on success,
 * else -1 with the reason in why (why_size bytes). */
int png_encode_rgb(const uint8_t *rgb, uint32_t width, uint32_t height, uint8_t **out,
                   size_t *out_size, char *why, size_t why_size);

#endif
