/* The word n-gram shingles' xxh32 and the MinHash values of many documents at once.
 *
 * ngram_xxh32: XXH32 (seed 0, the xxhash package's xxh32_intdigest) of each word n-gram joined by single
 * spaces, as UTF-8. Twin: bertprep.stages.dedup.ngram_hashes_python (a str join and an xxhash call per
 * shingle, most of pass 1's CPU once the MinHash below was in C).
 *
 * minhash_documents: MinHash values as datasketch 2 computes them ("affine32"): each shingle's
 * xxh32 h goes through MurmurHash3's 32-bit finalizer, permutation p maps it to a[p] * fmix32(h) + b[p]
 * (uint32, wrapping), and a document's value for p is the least over its shingles (0xFFFFFFFF with none).
 * Twin: bertprep.stages.dedup.minhashes_numpy, a NumPy pass over slices of (shingles, num_perm) values and a
 * minimum.reduceat by document; this loop holds no such array and its inner loop over the permutations
 * vectorizes (docs/benchmarks.md has the measured difference). */
#include "native.h"

#define PRIME32_1 0x9E3779B1u
#define PRIME32_2 0x85EBCA77u
#define PRIME32_3 0xC2B2AE3Du
#define PRIME32_4 0x27D4EB2Fu
#define PRIME32_5 0x165667B1u

static inline uint32_t rotl32(uint32_t x, int r)
{
    return (x << r) | (x >> (32 - r));
}

static inline uint32_t read32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4); /* little-endian machine (native.h) */
    return v;
}

static inline uint32_t xxh32_round(uint32_t acc, uint32_t input)
{
    return rotl32(acc + input * PRIME32_2, 13) * PRIME32_1;
}

uint32_t xxh32(const unsigned char *p, size_t len)
{
    const unsigned char *end = p + len;
    uint32_t h;
    if (len >= 16) {
        const unsigned char *limit = end - 16;
        uint32_t v1 = PRIME32_1 + PRIME32_2, v2 = PRIME32_2, v3 = 0, v4 = 0u - PRIME32_1;
        do {
            v1 = xxh32_round(v1, read32(p));
            v2 = xxh32_round(v2, read32(p + 4));
            v3 = xxh32_round(v3, read32(p + 8));
            v4 = xxh32_round(v4, read32(p + 12));
            p += 16;
        } while (p <= limit);
        h = rotl32(v1, 1) + rotl32(v2, 7) + rotl32(v3, 12) + rotl32(v4, 18);
    } else {
        h = PRIME32_5;
    }
    h += (uint32_t)len;
    for (; p + 4 <= end; p += 4)
        h = rotl32(h + read32(p) * PRIME32_3, 17) * PRIME32_4;
    for (; p < end; p++)
        h = rotl32(h + (*p) * PRIME32_5, 11) * PRIME32_1;
    h ^= h >> 15;
    h *= PRIME32_2;
    h ^= h >> 13;
    h *= PRIME32_3;
    h ^= h >> 16;
    return h;
}

int ngram_xxh32(const char *const *words, const Py_ssize_t *lengths, Py_ssize_t count, Py_ssize_t n, uint32_t *out)
{
    if (count == 0)
        return 0;
    Py_ssize_t windows = count < n ? 1 : count - n + 1, width = count < n ? count : n, capacity = 256;
    char *joined = PyMem_RawMalloc(capacity);
    if (joined == NULL)
        return -1;
    for (Py_ssize_t start = 0; start < windows; start++) {
        Py_ssize_t size = width - 1;
        for (Py_ssize_t i = start; i < start + width; i++)
            size += lengths[i];
        if (size > capacity) {
            char *grown = PyMem_RawRealloc(joined, size);
            if (grown == NULL) {
                PyMem_RawFree(joined);
                return -1;
            }
            joined = grown;
            capacity = size;
        }
        char *at = joined;
        for (Py_ssize_t i = start; i < start + width; i++) {
            if (i > start)
                *at++ = ' ';
            memcpy(at, words[i], lengths[i]);
            at += lengths[i];
        }
        out[start] = xxh32((const unsigned char *)joined, (size_t)size);
    }
    PyMem_RawFree(joined);
    return 0;
}

static inline uint32_t fmix32(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    return h;
}

void minhash_documents(const uint32_t *shingles, const int64_t *counts, Py_ssize_t documents, const uint32_t *a,
                       const uint32_t *b, Py_ssize_t num_perm, uint32_t *out)
{
    for (Py_ssize_t d = 0; d < documents; d++) {
        uint32_t *restrict row = out + d * num_perm;
        for (Py_ssize_t p = 0; p < num_perm; p++)
            row[p] = 0xFFFFFFFFu;
        for (int64_t s = 0; s < counts[d]; s++) {
            const uint32_t f = fmix32(*shingles++);
            for (Py_ssize_t p = 0; p < num_perm; p++) {
                const uint32_t v = a[p] * f + b[p];
                row[p] = v < row[p] ? v : row[p];
            }
        }
    }
}
