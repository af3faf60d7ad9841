/* CPython's random.Random in C: the generator's state (Twister) and its draws,
 * implemented in mt19937.c. The draws taken per token (mt_next, mt_random,
 * mt_below) are static inline here, so that instances.c's loop inlines them
 * without link-time optimization. This header needs nothing of native.h;
 * native.h includes it for instances.c and module.c.
 */
#ifndef BERTPREP_MT19937_H
#define BERTPREP_MT19937_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#define MT_N 624

typedef struct {
    uint32_t mt[MT_N];
    int index;
} Twister;

void mt_refill(Twister *t);

/* genrand_uint32 */
static inline uint32_t mt_next(Twister *t)
{
    if (t->index >= MT_N)
        mt_refill(t);
    uint32_t y = t->mt[t->index++];
    y ^= (y >> 11);
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= (y >> 18);
    return y;
}

/* random.random(): genrand_res53 */
static inline double mt_random(Twister *t)
{
    uint32_t a = mt_next(t) >> 5, b = mt_next(t) >> 6;
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

/* random._randbelow_with_getrandbits for 0 < n < 2**32: k = n.bit_length(), getrandbits(k) until < n */
static inline uint32_t mt_below(Twister *t, uint64_t n)
{
#if defined(__GNUC__) || defined(__clang__)
    int k = 64 - __builtin_clzll(n); /* n.bit_length(), n > 0 */
#else
    int k = 0;
    while ((n >> k) != 0)
        k++;
#endif
    uint32_t r;
    do {
        r = mt_next(t) >> (32 - k);
    } while (r >= n);
    return r;
}

/* random.randint(a, b); -1 with the message in error[0:size] where Python raises. */
int mt_randint(Twister *t, int64_t a, int64_t b, int64_t *out, char *error, size_t size);
/* From and to random.Random.getstate() (version 3); -1 / NULL with an exception set. */
int twister_from_state(PyObject *state, Twister *t);
PyObject *twister_state(const Twister *t, PyObject *old_state);

#endif /* BERTPREP_MT19937_H */
