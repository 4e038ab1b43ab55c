/* hash.h - FNV-1a, 64 bits, over bytes, and a word-at-a-time variant fast enough for a
 * whole data set: fingerprints that processes compare (a graph's signature, parameters,
 * training data). Equal bytes give an equal hash on every platform. */
#ifndef VKT_CORE_HASH_H
#define VKT_CORE_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define CORE_FNV0 0xcbf29ce484222325ull /* the start of a hash */

/* FNV-1a over n bytes, continuing from h. */
static inline uint64_t core_fnv(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* FNV-style over 8-byte words (the tail bytewise), continuing from h. */
static inline uint64_t core_fnv_words(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    return core_fnv(h, p + i, n - i);
}

#endif
