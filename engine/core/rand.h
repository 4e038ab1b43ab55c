/* rand.h - splitmix64 (Steele, Lea and Flood's SplitMix with Stafford's "Mix13"
 * finalizer): a whole generator in one uint64 of state, for initializers, permutations
 * and text windows. Deterministic on every platform. */
#ifndef VKT_CORE_RAND_H
#define VKT_CORE_RAND_H

#include <stdint.h>

static inline uint64_t core_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#endif
