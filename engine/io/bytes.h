/* bytes.h - the file formats' little-endian integers (checkpoint files, safetensors,
 * TensorBoard records) and their parsers' "why" messages, defined once for engine/io. */
#ifndef VKT_IO_BYTES_H
#define VKT_IO_BYTES_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "vkt.h"

static inline uint32_t io_rd16(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

static inline uint32_t io_rd32(const unsigned char *p)
{
    return io_rd16(p) | io_rd16(p + 2) << 16;
}

static inline uint64_t io_rd64(const unsigned char *p)
{
    return (uint64_t)io_rd32(p) | (uint64_t)io_rd32(p + 4) << 32;
}

/* The low `bytes` bytes of v, least significant first. */
static inline void io_wr(unsigned char *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* A parser's refusal: the reason into why[size], VKT_ERROR_FORMAT returned. */
static inline vkt_status io_bad(char *why, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static inline vkt_status io_bad(char *why, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, size, fmt, ap);
    va_end(ap);
    return VKT_ERROR_FORMAT;
}

#endif
