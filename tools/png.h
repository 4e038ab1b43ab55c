/* png.h - a minimal PNG writer for `vkt plot` (tools/png.c): 8-bit RGB, no interlace,
 * one IDAT chunk deflated by zlib (already a dependency of the library). */
#ifndef VKT_PNG_H
#define VKT_PNG_H

#include <stddef.h>
#include <stdint.h>

/* Writes rgb[height][width][3] to path. Returns 0 on success, else -1 with the reason
 * in why (why_size bytes). */
int png_write_rgb(const char *path, const uint8_t *rgb, uint32_t width, uint32_t height,
                  char *why, size_t why_size);

#endif
