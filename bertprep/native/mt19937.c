/* CPython's random.Random: MT19937 (genrand_uint32) and the derived draws
 * the reference uses: random(), _randbelow() (so randint() and shuffle()),
 * and the conversion from and to getstate(), so a Python generator can hand
 * over to C and take back its state where Python would have left it. The
 * draws taken once per token (mt_next, mt_random, mt_below) are static inline
 * in mt19937.h, so the instance loop inlines them; the rest is here.
 *
 * Mirrors CPython's Modules/_randommodule.c (genrand_uint32, random_random)
 * and Lib/random.py (_randbelow_with_getrandbits, randint, shuffle) as
 * bertprep/instances.py calls them; equal, draw for draw, by
 * tests/test_native.py::test_create_instances_matches_python_on_golden_corpus,
 * which also checks the final generator state against Python's.
 */
#include "mt19937.h"

#include <stdio.h>

#define MT_M 397

/* The next 624 words of the generator (genrand_uint32's refill). */
void mt_refill(Twister *t)
{
    static const uint32_t mag01[2] = {0x0u, 0x9908b0dfu};
    uint32_t y;
    int kk;
    for (kk = 0; kk < MT_N - MT_M; kk++) {
        y = (t->mt[kk] & 0x80000000u) | (t->mt[kk + 1] & 0x7fffffffu);
        t->mt[kk] = t->mt[kk + MT_M] ^ (y >> 1) ^ mag01[y & 1u];
    }
    for (; kk < MT_N - 1; kk++) {
        y = (t->mt[kk] & 0x80000000u) | (t->mt[kk + 1] & 0x7fffffffu);
        t->mt[kk] = t->mt[kk + (MT_M - MT_N)] ^ (y >> 1) ^ mag01[y & 1u];
    }
    y = (t->mt[MT_N - 1] & 0x80000000u) | (t->mt[0] & 0x7fffffffu);
    t->mt[MT_N - 1] = t->mt[MT_M - 1] ^ (y >> 1) ^ mag01[y & 1u];
    t->index = 0;
}

/* randint(a, b) = a + _randbelow(b - a + 1), with randrange's error for an empty range */
int mt_randint(Twister *t, int64_t a, int64_t b, int64_t *out, char *error, size_t size)
{
    if (b < a) {
        snprintf(error, size, "empty range for randrange() (%lld, %lld, %lld)", (long long)a, (long long)(b + 1),
                 (long long)(b + 1 - a));
        return -1;
    }
    if ((uint64_t)(b - a) >= 0xFFFFFFFFull) {
        snprintf(error, size, "%s", "randint range too wide for the native core");
        return -1;
    }
    *out = a + mt_below(t, (uint64_t)(b - a + 1));
    return 0;
}

int twister_from_state(PyObject *state, Twister *t)
{
    PyObject *internal;
    if (!PyTuple_Check(state) || PyTuple_GET_SIZE(state) != 3 ||
        !PyTuple_Check(internal = PyTuple_GET_ITEM(state, 1)) || PyTuple_GET_SIZE(internal) != MT_N + 1) {
        PyErr_SetString(PyExc_ValueError, "state: expected random.Random.getstate() of a version-3 generator");
        return -1;
    }
    for (int k = 0; k <= MT_N; k++) {
        unsigned long value = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(internal, k));
        if (value == (unsigned long)-1 && PyErr_Occurred())
            return -1;
        if (value > 0xFFFFFFFFul || (k == MT_N && value > MT_N)) {
            PyErr_SetString(PyExc_ValueError, "state: value out of range");
            return -1;
        }
        if (k < MT_N)
            t->mt[k] = (uint32_t)value;
        else
            t->index = (int)value;
    }
    return 0;
}

PyObject *twister_state(const Twister *t, PyObject *old_state)
{
    PyObject *internal = PyTuple_New(MT_N + 1);
    if (internal == NULL)
        return NULL;
    for (int k = 0; k <= MT_N; k++) {
        PyObject *value = PyLong_FromUnsignedLong(k < MT_N ? t->mt[k] : (unsigned long)t->index);
        if (value == NULL) {
            Py_DECREF(internal);
            return NULL;
        }
        PyTuple_SET_ITEM(internal, k, value);
    }
    return Py_BuildValue("(ONO)", PyTuple_GET_ITEM(old_state, 0), internal, PyTuple_GET_ITEM(old_state, 2));
}

