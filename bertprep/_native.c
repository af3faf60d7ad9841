/* bertprep._native: the hot loops of record writing and reading, in C.
 *
 * Every function here has a pure-Python twin in bertprep.formats (or
 * bertprep.formats.crc32c) that gives the same result; the extension is
 * optional and only buys speed. CPython C API and the buffer protocol only.
 *
 *   crc32c(data, crc=0) -> int
 *   encode_instances(fmt, seq, pred, tokens, instance_starts, a_lengths,
 *                    masked_positions, masked_labels, mask_starts,
 *                    is_random_next, first, count) -> bytes
 *   decode_bert_batch(payloads, fmt, seq, pred, input_ids, input_mask,
 *                     segment_ids, masked_lm_positions, masked_lm_ids,
 *                     masked_lm_weights, next_sentence_labels,
 *                     *, first_index=0) -> None
 *   split_records(data, fmt, *, verify=True, first_index=0, first_offset=0,
 *                 final=False) -> (payloads, consumed, needed, error)
 *   create_instances(state, tokens, sentence_starts, document_starts, ...)
 *       -> (state, tokens, instance_starts, ...)   (see bertprep/instances.py)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_SSE42_CRC 1
#include <nmmintrin.h>
#endif

#if PY_BIG_ENDIAN
#error "bertprep._native assumes a little-endian machine (the record formats are little-endian)"
#endif

/* ------------------------------------------------------------------ */
/* CRC-32C (Castagnoli)                                                */
/* ------------------------------------------------------------------ */

static uint32_t crc_table[8][256];
static int crc_use_hardware = 0;

static void crc_init_tables(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int t = 1; t < 8; t++)
            crc_table[t][n] = (crc_table[t - 1][n] >> 8) ^ crc_table[0][crc_table[t - 1][n] & 0xFF];
#ifdef HAVE_SSE42_CRC
    __builtin_cpu_init();
    crc_use_hardware = __builtin_cpu_supports("sse4.2");
#endif
}

/* Slicing-by-8 over the raw (not pre/post-inverted) register. */
static uint32_t crc_software(uint32_t crc, const uint8_t *p, size_t n)
{
    while (n && ((uintptr_t)p & 7)) {
        crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
        n--;
    }
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
        lo ^= crc;
        crc = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^ crc_table[5][(lo >> 16) & 0xFF] ^
              crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF] ^
              crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return crc;
}

#ifdef HAVE_SSE42_CRC
__attribute__((target("sse4.2"))) static uint32_t crc_hardware(uint32_t crc, const uint8_t *p, size_t n)
{
    uint64_t c = crc;
    while (n && ((uintptr_t)p & 7)) {
        c = _mm_crc32_u8((uint32_t)c, *p++);
        n--;
    }
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
        p += 8;
        n -= 8;
    }
    while (n--)
        c = _mm_crc32_u8((uint32_t)c, *p++);
    return (uint32_t)c;
}
#endif

/* crc32c of p[0:n] continuing from a previous (finalized) value, like the Python twin. */
static uint32_t crc32c_update(uint32_t crc, const void *data, size_t n)
{
    const uint8_t *p = (const uint8_t *)data;
    crc ^= 0xFFFFFFFFu;
#ifdef HAVE_SSE42_CRC
    if (crc_use_hardware)
        return crc_hardware(crc, p, n) ^ 0xFFFFFFFFu;
#endif
    return crc_software(crc, p, n) ^ 0xFFFFFFFFu;
}

static uint32_t masked_crc32c(const void *data, size_t n)
{
    uint32_t crc = crc32c_update(0, data, n);
    return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

/* Above this size the GIL is released while summing, so threads can overlap. */
#define CRC_RELEASE_GIL_BYTES 65536

static PyObject *py_crc32c(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"data", "crc", NULL};
    Py_buffer view;
    PyObject *crc_obj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*|O:crc32c", kwlist, &view, &crc_obj))
        return NULL;
    uint32_t crc = 0;
    if (crc_obj != NULL) {
        unsigned long long value = PyLong_AsUnsignedLongLong(crc_obj);
        if (value == (unsigned long long)-1 && PyErr_Occurred()) {
            PyBuffer_Release(&view);
            return NULL;
        }
        if (value > 0xFFFFFFFFull) {
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_OverflowError, "crc must be in [0, 2**32)");
            return NULL;
        }
        crc = (uint32_t)value;
    }
    if (view.len >= CRC_RELEASE_GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS crc = crc32c_update(crc, view.buf, (size_t)view.len);
        Py_END_ALLOW_THREADS
    } else {
        crc = crc32c_update(crc, view.buf, (size_t)view.len);
    }
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

/* ------------------------------------------------------------------ */
/* Integer arrays through the buffer protocol                          */
/* ------------------------------------------------------------------ */

enum { K_I8, K_U8, K_I16, K_U16, K_I32, K_U32, K_I64, K_U64 };

typedef struct {
    Py_buffer view;
    int held;
    const char *data;
    Py_ssize_t n;
    int kind;
} IntArray;

static int kind_of_format(const char *format, Py_ssize_t itemsize, int *kind)
{
    char c = 'B';
    if (format != NULL) {
        if (format[0] == '@' || format[0] == '=' || format[0] == '<')
            format++;
        if (format[0] == '\0' || format[1] != '\0')
            return -1;
        c = format[0];
    }
    int is_signed;
    switch (c) {
    case 'b': case 'h': case 'i': case 'l': case 'q': case 'n':
        is_signed = 1;
        break;
    case 'B': case 'H': case 'I': case 'L': case 'Q': case 'N': case '?':
        is_signed = 0;
        break;
    default:
        return -1;
    }
    switch (itemsize) {
    case 1: *kind = is_signed ? K_I8 : K_U8; return 0;
    case 2: *kind = is_signed ? K_I16 : K_U16; return 0;
    case 4: *kind = is_signed ? K_I32 : K_U32; return 0;
    case 8: *kind = is_signed ? K_I64 : K_U64; return 0;
    default: return -1;
    }
}

/* A read-only C-contiguous integer buffer of any width and signedness. */
static int int_array_get(IntArray *a, PyObject *obj, const char *name)
{
    a->held = 0;
    if (PyObject_GetBuffer(obj, &a->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: expected a C-contiguous integer buffer, got %.80s", name,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    a->held = 1;
    if (kind_of_format(a->view.format, a->view.itemsize, &a->kind) < 0) {
        PyErr_Format(PyExc_TypeError, "%s: expected an integer buffer, got format %.20s", name,
                     a->view.format ? a->view.format : "B");
        return -1;
    }
    a->data = (const char *)a->view.buf;
    a->n = a->view.len / a->view.itemsize;
    return 0;
}

static void int_array_release(IntArray *a)
{
    if (a->held)
        PyBuffer_Release(&a->view);
    a->held = 0;
}

static inline int64_t int_array_at(const IntArray *a, Py_ssize_t i)
{
    switch (a->kind) {
    case K_I8: return ((const int8_t *)a->data)[i];
    case K_U8: return ((const uint8_t *)a->data)[i];
    case K_I16: return ((const int16_t *)a->data)[i];
    case K_U16: return ((const uint16_t *)a->data)[i];
    case K_I32: return ((const int32_t *)a->data)[i];
    case K_U32: return ((const uint32_t *)a->data)[i];
    case K_I64: return ((const int64_t *)a->data)[i];
    default: return (int64_t)((const uint64_t *)a->data)[i];
    }
}

/* ------------------------------------------------------------------ */
/* Protobuf wire helpers                                               */
/* ------------------------------------------------------------------ */

enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_LEN = 2, WIRE_FIXED32 = 5 };

static inline size_t varint_size(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline uint8_t *put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* Size of a length-delimited field with a one-byte tag around `n` bytes. */
static inline size_t len_field_size(size_t n) { return 1 + varint_size(n) + n; }

/* ------------------------------------------------------------------ */
/* Formats and BERT features                                           */
/* ------------------------------------------------------------------ */

enum { FMT_TFRECORD, FMT_OFRECORD };

enum {
    F_INPUT_IDS,
    F_INPUT_MASK,
    F_SEGMENT_IDS,
    F_MASKED_LM_POSITIONS,
    F_MASKED_LM_IDS,
    F_MASKED_LM_WEIGHTS,
    F_NEXT_SENTENCE_LABELS,
    N_FEATURES
};

/* In bertprep.formats.FEATURE_NAMES order (the reference's insertion order). */
static const char *const FEATURE_NAME[N_FEATURES] = {
    "input_ids", "input_mask", "segment_ids", "masked_lm_positions",
    "masked_lm_ids", "masked_lm_weights", "next_sentence_labels",
};
/* bertprep.formats.KEY_ORDER per format. */
static const int KEY_ORDER[2][N_FEATURES] = {
    {F_INPUT_IDS, F_INPUT_MASK, F_SEGMENT_IDS, F_MASKED_LM_POSITIONS, F_MASKED_LM_IDS, F_MASKED_LM_WEIGHTS,
     F_NEXT_SENTENCE_LABELS},
    {F_MASKED_LM_WEIGHTS, F_MASKED_LM_POSITIONS, F_INPUT_MASK, F_MASKED_LM_IDS, F_INPUT_IDS, F_SEGMENT_IDS,
     F_NEXT_SENTENCE_LABELS},
};

/* Feature oneof field numbers. */
enum { LIST_NONE = 0, LIST_BYTES, LIST_FLOAT, LIST_DOUBLE, LIST_INT32, LIST_INT64 };
static const char *const LIST_KIND_NAME[] = {"?", "bytes", "float", "double", "int32", "int64"};
/* field number -> list kind, per format (0: unknown field) */
static int list_kind_of_field(int fmt, uint64_t field)
{
    if (fmt == FMT_TFRECORD) {
        switch (field) {
        case 1: return LIST_BYTES;
        case 2: return LIST_FLOAT;
        case 3: return LIST_INT64;
        }
    } else {
        switch (field) {
        case 1: return LIST_BYTES;
        case 2: return LIST_FLOAT;
        case 3: return LIST_DOUBLE;
        case 4: return LIST_INT32;
        case 5: return LIST_INT64;
        }
    }
    return LIST_NONE;
}

static int parse_format(const char *fmt)
{
    if (strcmp(fmt, "tfrecord") == 0)
        return FMT_TFRECORD;
    if (strcmp(fmt, "ofrecord") == 0)
        return FMT_OFRECORD;
    PyErr_Format(PyExc_ValueError, "unknown record format %.40s (expected 'tfrecord' or 'ofrecord')", fmt);
    return -1;
}

static int feature_length(int feature, Py_ssize_t seq, Py_ssize_t pred, Py_ssize_t *length)
{
    switch (feature) {
    case F_INPUT_IDS: case F_INPUT_MASK: case F_SEGMENT_IDS: *length = seq; break;
    case F_NEXT_SENTENCE_LABELS: *length = 1; break;
    default: *length = pred;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* encode_instances                                                    */
/* ------------------------------------------------------------------ */

typedef struct {
    const IntArray *tokens, *masked_positions, *masked_labels;
    Py_ssize_t token_start, n_tokens; /* the instance's slice of `tokens` */
    Py_ssize_t a_length;
    Py_ssize_t mask_start, n_masks;
    int64_t label;
    /* bytes of the varints of the real tokens, positions and labels (instance_varint_sizes) */
    size_t token_bytes, position_bytes, label_bytes;
} Instance;

static void instance_varint_sizes(Instance *in)
{
    size_t n = 0;
    for (Py_ssize_t i = 0; i < in->n_tokens; i++)
        n += varint_size((uint64_t)int_array_at(in->tokens, in->token_start + i));
    in->token_bytes = n;
    n = 0;
    for (Py_ssize_t i = 0; i < in->n_masks; i++)
        n += varint_size((uint64_t)int_array_at(in->masked_positions, in->mask_start + i));
    in->position_bytes = n;
    n = 0;
    for (Py_ssize_t i = 0; i < in->n_masks; i++)
        n += varint_size((uint64_t)int_array_at(in->masked_labels, in->mask_start + i));
    in->label_bytes = n;
}

/* Bytes of the packed values of one feature of one instance. */
static size_t packed_size(const Instance *in, int feature, Py_ssize_t seq, Py_ssize_t pred)
{
    switch (feature) {
    case F_INPUT_IDS:
        return in->token_bytes + (size_t)(seq - in->n_tokens);
    case F_INPUT_MASK:
    case F_SEGMENT_IDS:
        return (size_t)seq;
    case F_MASKED_LM_POSITIONS:
        return in->position_bytes + (size_t)(pred - in->n_masks);
    case F_MASKED_LM_IDS:
        return in->label_bytes + (size_t)(pred - in->n_masks);
    case F_MASKED_LM_WEIGHTS:
        return 4 * (size_t)pred;
    default:
        return varint_size((uint64_t)in->label);
    }
}

static uint8_t *put_packed(uint8_t *p, const Instance *in, int feature, Py_ssize_t seq, Py_ssize_t pred)
{
    Py_ssize_t i;
    static const uint8_t one_f32[4] = {0x00, 0x00, 0x80, 0x3F};
    switch (feature) {
    case F_INPUT_IDS:
        for (i = 0; i < in->n_tokens; i++)
            p = put_varint(p, (uint64_t)int_array_at(in->tokens, in->token_start + i));
        memset(p, 0, (size_t)(seq - in->n_tokens));
        return p + (seq - in->n_tokens);
    case F_INPUT_MASK:
        memset(p, 1, (size_t)in->n_tokens);
        memset(p + in->n_tokens, 0, (size_t)(seq - in->n_tokens));
        return p + seq;
    case F_SEGMENT_IDS: {
        Py_ssize_t first_segment = in->a_length + 2; /* [CLS] A... [SEP] */
        memset(p, 0, (size_t)first_segment);
        memset(p + first_segment, 1, (size_t)(in->n_tokens - first_segment));
        memset(p + in->n_tokens, 0, (size_t)(seq - in->n_tokens));
        return p + seq;
    }
    case F_MASKED_LM_POSITIONS:
        for (i = 0; i < in->n_masks; i++)
            p = put_varint(p, (uint64_t)int_array_at(in->masked_positions, in->mask_start + i));
        memset(p, 0, (size_t)(pred - in->n_masks));
        return p + (pred - in->n_masks);
    case F_MASKED_LM_IDS:
        for (i = 0; i < in->n_masks; i++)
            p = put_varint(p, (uint64_t)int_array_at(in->masked_labels, in->mask_start + i));
        memset(p, 0, (size_t)(pred - in->n_masks));
        return p + (pred - in->n_masks);
    case F_MASKED_LM_WEIGHTS:
        for (i = 0; i < in->n_masks; i++, p += 4)
            memcpy(p, one_f32, 4);
        memset(p, 0, 4 * (size_t)(pred - in->n_masks));
        return p + 4 * (pred - in->n_masks);
    default:
        return put_varint(p, (uint64_t)in->label);
    }
}

/* Sizes of the nested messages of one feature's map entry. */
typedef struct {
    size_t packed, list, feature, entry;
} FeatureSizes;

static size_t feature_sizes(const Instance *in, int feature, Py_ssize_t seq, Py_ssize_t pred, FeatureSizes *s)
{
    s->packed = packed_size(in, feature, seq, pred);
    s->list = s->packed ? len_field_size(s->packed) : 0; /* an empty list is an empty message */
    s->feature = len_field_size(s->list);
    s->entry = len_field_size(strlen(FEATURE_NAME[feature])) + len_field_size(s->feature);
    return len_field_size(s->entry);
}

static size_t payload_size(const Instance *in, int fmt, Py_ssize_t seq, Py_ssize_t pred)
{
    FeatureSizes s;
    size_t map = 0;
    for (int k = 0; k < N_FEATURES; k++)
        map += feature_sizes(in, k, seq, pred, &s);
    return fmt == FMT_TFRECORD ? len_field_size(map) : map; /* Example{1: Features{map}} */
}

static uint8_t *put_payload(uint8_t *p, const Instance *in, int fmt, Py_ssize_t seq, Py_ssize_t pred)
{
    /* int64_list is field 3 of tf.train.Feature; int32_list field 4 of oneflow.Feature; float_list 2 in both */
    const int int_field = fmt == FMT_TFRECORD ? 3 : 4;
    FeatureSizes sizes[N_FEATURES];
    size_t map = 0;
    for (int k = 0; k < N_FEATURES; k++)
        map += feature_sizes(in, k, seq, pred, &sizes[k]);
    if (fmt == FMT_TFRECORD) {
        *p++ = (1 << 3) | WIRE_LEN;
        p = put_varint(p, map);
    }
    for (int j = 0; j < N_FEATURES; j++) {
        int k = KEY_ORDER[fmt][j];
        const FeatureSizes *s = &sizes[k];
        size_t key_length = strlen(FEATURE_NAME[k]);
        int list_field = k == F_MASKED_LM_WEIGHTS ? 2 : int_field;
        *p++ = (1 << 3) | WIRE_LEN; /* map entry */
        p = put_varint(p, s->entry);
        *p++ = (1 << 3) | WIRE_LEN; /* key */
        p = put_varint(p, key_length);
        memcpy(p, FEATURE_NAME[k], key_length);
        p += key_length;
        *p++ = (2 << 3) | WIRE_LEN; /* value: Feature */
        p = put_varint(p, s->feature);
        *p++ = (uint8_t)((list_field << 3) | WIRE_LEN);
        p = put_varint(p, s->list);
        if (s->packed) {
            *p++ = (1 << 3) | WIRE_LEN; /* the list's one packed `value` field */
            p = put_varint(p, s->packed);
            p = put_packed(p, in, k, seq, pred);
        }
    }
    return p;
}

static inline uint8_t *put_u32le(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, 4);
    return p + 4;
}

static inline uint8_t *put_u64le(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, 8);
    return p + 8;
}

typedef struct {
    size_t payload, token_bytes, position_bytes, label_bytes;
} RecordSizes;

static PyObject *py_encode_instances(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"fmt", "seq", "pred", "tokens", "instance_starts", "a_lengths",
                             "masked_positions", "masked_labels", "mask_starts", "is_random_next",
                             "first", "count", NULL};
    const char *fmt_name;
    Py_ssize_t seq, pred, first, count;
    PyObject *objs[7];
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "snnOOOOOOOnn:encode_instances", kwlist, &fmt_name, &seq,
                                     &pred, &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5],
                                     &objs[6], &first, &count))
        return NULL;
    int fmt = parse_format(fmt_name);
    if (fmt < 0)
        return NULL;
    if (seq < 0 || pred < 0) {
        PyErr_SetString(PyExc_ValueError, "seq and pred must be >= 0");
        return NULL;
    }

    static const char *const names[7] = {"tokens", "instance_starts", "a_lengths", "masked_positions",
                                         "masked_labels", "mask_starts", "is_random_next"};
    IntArray arrays[7];
    for (int k = 0; k < 7; k++)
        arrays[k].held = 0;
    IntArray *tokens = &arrays[0], *instance_starts = &arrays[1], *a_lengths = &arrays[2],
             *masked_positions = &arrays[3], *masked_labels = &arrays[4], *mask_starts = &arrays[5],
             *is_random_next = &arrays[6];
    PyObject *result = NULL;
    RecordSizes *sizes = NULL;

    for (int k = 0; k < 7; k++)
        if (int_array_get(&arrays[k], objs[k], names[k]) < 0)
            goto done;
    Py_ssize_t n = a_lengths->n;
    if (instance_starts->n != n + 1 || mask_starts->n != n + 1 || is_random_next->n != n) {
        PyErr_Format(PyExc_ValueError,
                     "inconsistent instances: %zd a_lengths, %zd instance_starts, %zd mask_starts, "
                     "%zd is_random_next (expected n, n+1, n+1, n)",
                     n, instance_starts->n, mask_starts->n, is_random_next->n);
        goto done;
    }
    if (first < 0 || count < 0 || first > n || count > n - first) {
        PyErr_Format(PyExc_ValueError, "instances [%zd, %zd+%zd) out of range for %zd instances", first, first,
                     count, n);
        goto done;
    }
    Py_ssize_t n_masks_total = masked_positions->n < masked_labels->n ? masked_positions->n : masked_labels->n;

    /* Pass 1 (with the GIL, errors possible): validate and size every record. */
    sizes = PyMem_Malloc(sizeof(RecordSizes) * (size_t)(count ? count : 1));
    if (sizes == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    size_t total = 0;
    size_t frame_overhead = fmt == FMT_TFRECORD ? 16 : 8;
    for (Py_ssize_t j = 0; j < count; j++) {
        Py_ssize_t i = first + j;
        Instance in = {tokens, masked_positions, masked_labels};
        int64_t s0 = int_array_at(instance_starts, i), s1 = int_array_at(instance_starts, i + 1);
        int64_t m0 = int_array_at(mask_starts, i), m1 = int_array_at(mask_starts, i + 1);
        int64_t a = int_array_at(a_lengths, i);
        if (s0 < 0 || s1 < s0 || s1 > tokens->n) {
            PyErr_Format(PyExc_ValueError, "instance %zd: tokens [%lld, %lld) out of range for %zd tokens", i,
                         (long long)s0, (long long)s1, tokens->n);
            goto done;
        }
        if (s1 - s0 > seq) {
            PyErr_Format(PyExc_ValueError, "instance %zd: %lld tokens exceed seq=%zd", i, (long long)(s1 - s0),
                         seq);
            goto done;
        }
        if (a < 0 || a + 2 > s1 - s0) {
            PyErr_Format(PyExc_ValueError, "instance %zd: a_length %lld does not fit %lld tokens", i,
                         (long long)a, (long long)(s1 - s0));
            goto done;
        }
        if (m0 < 0 || m1 < m0 || m1 > n_masks_total) {
            PyErr_Format(PyExc_ValueError, "instance %zd: masks [%lld, %lld) out of range for %zd masks", i,
                         (long long)m0, (long long)m1, n_masks_total);
            goto done;
        }
        if (m1 - m0 > pred) {
            PyErr_Format(PyExc_ValueError, "instance %zd: %lld masks exceed pred=%zd", i, (long long)(m1 - m0),
                         pred);
            goto done;
        }
        in.token_start = (Py_ssize_t)s0;
        in.n_tokens = (Py_ssize_t)(s1 - s0);
        in.a_length = (Py_ssize_t)a;
        in.mask_start = (Py_ssize_t)m0;
        in.n_masks = (Py_ssize_t)(m1 - m0);
        in.label = int_array_at(is_random_next, i);
        instance_varint_sizes(&in);
        sizes[j].token_bytes = in.token_bytes;
        sizes[j].position_bytes = in.position_bytes;
        sizes[j].label_bytes = in.label_bytes;
        sizes[j].payload = payload_size(&in, fmt, seq, pred);
        total += frame_overhead + sizes[j].payload;
    }
    if (total > (size_t)PY_SSIZE_T_MAX) {
        PyErr_NoMemory();
        goto done;
    }
    result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (result == NULL)
        goto done;

    /* Pass 2 (without the GIL): write the framed records. */
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(result);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t j = 0; j < count; j++) {
        Py_ssize_t i = first + j;
        Instance in = {tokens, masked_positions, masked_labels};
        int64_t s0 = int_array_at(instance_starts, i), m0 = int_array_at(mask_starts, i);
        in.token_start = (Py_ssize_t)s0;
        in.n_tokens = (Py_ssize_t)(int_array_at(instance_starts, i + 1) - s0);
        in.a_length = (Py_ssize_t)int_array_at(a_lengths, i);
        in.mask_start = (Py_ssize_t)m0;
        in.n_masks = (Py_ssize_t)(int_array_at(mask_starts, i + 1) - m0);
        in.label = int_array_at(is_random_next, i);
        in.token_bytes = sizes[j].token_bytes;
        in.position_bytes = sizes[j].position_bytes;
        in.label_bytes = sizes[j].label_bytes;
        uint8_t *header = out;
        if (fmt == FMT_TFRECORD) {
            out = put_u64le(out, sizes[j].payload);
            out = put_u32le(out, masked_crc32c(header, 8));
            uint8_t *payload = out;
            out = put_payload(out, &in, fmt, seq, pred);
            out = put_u32le(out, masked_crc32c(payload, sizes[j].payload));
        } else {
            out = put_u64le(out, sizes[j].payload);
            out = put_payload(out, &in, fmt, seq, pred);
        }
    }
    Py_END_ALLOW_THREADS

done:
    PyMem_Free(sizes);
    for (int k = 0; k < 7; k++)
        int_array_release(&arrays[k]);
    return result;
}

/* ------------------------------------------------------------------ */
/* decode_bert_batch                                                   */
/* ------------------------------------------------------------------ */

/* Error text of the record being decoded; formatted without the GIL. */
typedef struct {
    char message[320];
} DecodeError;

static int fail(DecodeError *err, const char *format, ...)
{
    va_list ap;
    va_start(ap, format);
    vsnprintf(err->message, sizeof err->message, format, ap);
    va_end(ap);
    return -1;
}

/* The protobuf field walker: the same checks, and messages, as protowire.iter_fields. */
typedef struct {
    const uint8_t *buf;
    size_t pos, end;
} Cursor;

typedef struct {
    uint64_t field;
    int wire;
    uint64_t value;     /* varint */
    size_t start, stop; /* length-delimited, fixed32, fixed64 */
} Field;

static int read_varint(const uint8_t *buf, size_t *pos, size_t end, uint64_t *out, DecodeError *err)
{
    uint64_t result = 0;
    int shift = 0;
    size_t p = *pos;
    for (;;) {
        if (p >= end)
            return fail(err, "truncated varint");
        uint8_t b = buf[p++];
        if (shift < 64)
            result |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80)
            break;
        shift += 7;
        if (shift > 63)
            return fail(err, "varint longer than 10 bytes");
    }
    *pos = p;
    *out = result;
    return 0;
}

/* 1: a field read into *f; 0: end of message; -1: malformed. */
static int next_field(Cursor *c, Field *f, DecodeError *err)
{
    if (c->pos >= c->end)
        return 0;
    uint64_t tag = 0;
    if (read_varint(c->buf, &c->pos, c->end, &tag, err) < 0)
        return -1;
    f->field = tag >> 3;
    f->wire = (int)(tag & 7);
    if (f->field == 0)
        return fail(err, "field number 0");
    switch (f->wire) {
    case WIRE_VARINT:
        return read_varint(c->buf, &c->pos, c->end, &f->value, err) < 0 ? -1 : 1;
    case WIRE_LEN: {
        uint64_t length = 0;
        if (read_varint(c->buf, &c->pos, c->end, &length, err) < 0)
            return -1;
        if (length > c->end - c->pos)
            return fail(err, "length-delimited field %llu runs past the end of its message",
                        (unsigned long long)f->field);
        f->start = c->pos;
        f->stop = c->pos + (size_t)length;
        c->pos = f->stop;
        return 1;
    }
    case WIRE_FIXED32:
        if (c->end - c->pos < 4)
            return fail(err, "truncated fixed32");
        f->start = c->pos;
        f->stop = c->pos += 4;
        return 1;
    case WIRE_FIXED64:
        if (c->end - c->pos < 8)
            return fail(err, "truncated fixed64");
        f->start = c->pos;
        f->stop = c->pos += 8;
        return 1;
    default:
        return fail(err, "unsupported wire type %d for field %llu", f->wire, (unsigned long long)f->field);
    }
}

/* Where the values of one list go: an output row, or nowhere (validation only). */
typedef struct {
    void *row;          /* NULL: only validate */
    int itemsize;       /* 4 or 8 (ints), 4 (float32) */
    Py_ssize_t length;  /* expected number of values */
    Py_ssize_t count;   /* values seen */
    int out_of_range;   /* a value did not fit an int32 row */
    int64_t bad_value;
} Sink;

/* protowire._to_signed for the stored kind. */
static inline int64_t to_signed(uint64_t v, int kind)
{
    if (kind == LIST_INT32 && v >= (1ull << 31) && v < (1ull << 63))
        return (int64_t)(v - (1ull << 32));
    return (int64_t)v;
}

static inline void sink_int(Sink *s, int64_t v)
{
    if (s->row != NULL && s->count < s->length) {
        if (s->itemsize == 8) {
            ((int64_t *)s->row)[s->count] = v;
        } else {
            if (v < INT32_MIN || v > INT32_MAX) {
                if (!s->out_of_range)
                    s->bad_value = v;
                s->out_of_range = 1;
            }
            ((int32_t *)s->row)[s->count] = (int32_t)v;
        }
    }
    s->count++;
}

static inline void sink_float(Sink *s, float v)
{
    if (s->row != NULL && s->count < s->length)
        ((float *)s->row)[s->count] = v;
    s->count++;
}

/* protowire.decode_list over buf[start:stop] of `kind`, values into `sink`. */
static int decode_list(const uint8_t *buf, size_t start, size_t stop, int kind, Sink *sink, DecodeError *err)
{
    Cursor c = {buf, start, stop};
    Field f = {0};
    int r;
    int floats = kind == LIST_FLOAT || kind == LIST_DOUBLE;
    while ((r = next_field(&c, &f, err)) == 1) {
        if (f.field != 1 || kind == LIST_BYTES)
            continue;
        if (f.wire == WIRE_LEN) {
            if (floats) {
                size_t item_size = kind == LIST_FLOAT ? 4 : 8;
                if ((f.stop - f.start) % item_size)
                    return fail(err, "packed %s list of %zu bytes is not a multiple of %zu", LIST_KIND_NAME[kind],
                                f.stop - f.start, item_size);
                for (size_t p = f.start; p < f.stop; p += item_size) {
                    if (item_size == 4) {
                        float v;
                        memcpy(&v, buf + p, 4);
                        sink_float(sink, v);
                    } else {
                        double v;
                        memcpy(&v, buf + p, 8);
                        sink_float(sink, (float)v);
                    }
                }
            } else {
                size_t p = f.start;
                if (sink->row != NULL && sink->itemsize == 8 && kind == LIST_INT64) {
                    /* the common case, kept tight: int64 values into an int64 row */
                    int64_t *row = (int64_t *)sink->row;
                    while (p < f.stop) {
                        uint64_t v = 0;
                        if (buf[p] < 0x80) {
                            v = buf[p++];
                        } else if (read_varint(buf, &p, f.stop, &v, err) < 0) {
                            return -1;
                        }
                        if (sink->count < sink->length)
                            row[sink->count] = (int64_t)v;
                        sink->count++;
                    }
                } else {
                    while (p < f.stop) {
                        uint64_t v = 0;
                        if (buf[p] < 0x80) {
                            v = buf[p++];
                        } else if (read_varint(buf, &p, f.stop, &v, err) < 0) {
                            return -1;
                        }
                        sink_int(sink, to_signed(v, kind));
                    }
                }
            }
        } else if (floats && f.wire == WIRE_FIXED32) {
            float v;
            memcpy(&v, buf + f.start, 4);
            sink_float(sink, v);
        } else if (floats && f.wire == WIRE_FIXED64) {
            double v;
            memcpy(&v, buf + f.start, 8);
            sink_float(sink, (float)v);
        } else if (!floats && f.wire == WIRE_VARINT) {
            sink_int(sink, to_signed(f.value, kind));
        } else {
            return fail(err, "unexpected wire type %d inside a %s list", f.wire, LIST_KIND_NAME[kind]);
        }
    }
    return r;
}

/* Strict UTF-8, as bytes.decode() checks a feature name. */
static int is_utf8(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t b = s[i];
        if (b < 0x80) {
            i++;
            continue;
        }
        size_t len;
        uint32_t cp;
        if (b >= 0xC2 && b <= 0xDF) {
            len = 2;
            cp = b & 0x1F;
        } else if (b >= 0xE0 && b <= 0xEF) {
            len = 3;
            cp = b & 0x0F;
        } else if (b >= 0xF0 && b <= 0xF4) {
            len = 4;
            cp = b & 0x07;
        } else {
            return 0;
        }
        if (n - i < len)
            return 0;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        i += len;
    }
    return 1;
}

typedef struct {
    Py_buffer view;
    int held;
    char *row_base; /* element 0 of the output */
    int itemsize;
    int is_float;
    Py_ssize_t length; /* values per record */
} Output;

/* Per record: what was found for each BERT feature. */
typedef struct {
    int present;
    int kind;
    Py_ssize_t count;
    int out_of_range;
    int64_t bad_value;
} Found;

static int feature_of_key(const uint8_t *key, size_t n)
{
    for (int k = 0; k < N_FEATURES; k++)
        if (strlen(FEATURE_NAME[k]) == n && memcmp(FEATURE_NAME[k], key, n) == 0)
            return k;
    return -1;
}

static int kind_accepted(int feature, int kind)
{
    if (feature == F_MASKED_LM_WEIGHTS)
        return kind == LIST_FLOAT;
    return kind == LIST_INT64 || kind == LIST_INT32;
}

/* Name a feature key in an error message, as Python's repr() would for plain names. */
static void describe_key(const uint8_t *key, size_t n, char *out, size_t size)
{
    int plain = n < 80;
    for (size_t i = 0; plain && i < n; i++)
        plain = key[i] >= 0x20 && key[i] < 0x7F && key[i] != '\'' && key[i] != '\\';
    if (plain)
        snprintf(out, size, "feature '%.*s'", (int)n, (const char *)key);
    else
        snprintf(out, size, "a feature with a %zu-byte name", n);
}

/* One map<string, Feature> (protowire.decode_feature_map) into the outputs' row `record`. */
static int decode_map(const uint8_t *buf, size_t start, size_t end, int fmt, Output *outputs, Py_ssize_t record,
                      Found *found, DecodeError *err)
{
    Cursor c = {buf, start, end};
    Field entry = {0};
    int r;
    while ((r = next_field(&c, &entry, err)) == 1) {
        if (entry.field != 1 || entry.wire != WIRE_LEN)
            continue;
        Cursor e = {buf, entry.start, entry.stop};
        Field f = {0};
        int have_key = 0, have_feature = 0;
        size_t key_start = 0, key_stop = 0, feature_start = 0, feature_stop = 0;
        int re;
        while ((re = next_field(&e, &f, err)) == 1) {
            if (f.field == 1 && f.wire == WIRE_LEN) {
                if (!is_utf8(buf + f.start, f.stop - f.start))
                    return fail(err, "feature name is not UTF-8");
                have_key = 1;
                key_start = f.start;
                key_stop = f.stop;
            } else if (f.field == 2 && f.wire == WIRE_LEN) {
                have_feature = 1;
                feature_start = f.start;
                feature_stop = f.stop;
            }
        }
        if (re < 0)
            return -1;
        if (!have_key)
            return fail(err, "map entry without a key");
        int k = feature_of_key(buf + key_start, key_stop - key_start);
        char name[128]; /* filled only on the error paths */
#define NAME_KEY() describe_key(buf + key_start, key_stop - key_start, name, sizeof name)
        int kind = LIST_NONE;
        Sink sink = {0};
        if (have_feature) {
            Cursor fc = {buf, feature_start, feature_stop};
            Field list = {0};
            int rl;
            while ((rl = next_field(&fc, &list, err)) == 1) {
                int list_kind = list.wire == WIRE_LEN ? list_kind_of_field(fmt, list.field) : LIST_NONE;
                if (list_kind == LIST_NONE) {
                    NAME_KEY();
                    return fail(err, "%s has unknown list field %llu", name, (unsigned long long)list.field);
                }
                kind = list_kind;
                memset(&sink, 0, sizeof sink);
                if (k >= 0 && kind_accepted(k, kind)) {
                    Output *o = &outputs[k];
                    sink.row = o->row_base + (size_t)record * (size_t)o->length * (size_t)o->itemsize;
                    sink.itemsize = o->itemsize;
                    sink.length = o->length;
                }
                if (decode_list(buf, list.start, list.stop, kind, &sink, err) < 0) {
                    char inner[sizeof err->message];
                    memcpy(inner, err->message, sizeof inner);
                    NAME_KEY();
                    return fail(err, "%s: %s", name, inner);
                }
            }
            if (rl < 0)
                return -1;
        }
        if (kind == LIST_NONE) {
            NAME_KEY();
            return fail(err, "%s holds no list", name);
        }
#undef NAME_KEY
        if (k >= 0) {
            found[k].present = 1;
            found[k].kind = kind;
            found[k].count = sink.count;
            found[k].out_of_range = sink.out_of_range;
            found[k].bad_value = sink.bad_value;
        }
    }
    return r;
}

/* One payload into row `record` of every output; the checks of the Python twin, in its order. */
static int decode_record(const uint8_t *buf, size_t n, int fmt, Output *outputs, Py_ssize_t record,
                         DecodeError *err)
{
    Found found[N_FEATURES];
    memset(found, 0, sizeof found);
    if (fmt == FMT_TFRECORD) {
        Cursor c = {buf, 0, n};
        Field f = {0};
        int r;
        while ((r = next_field(&c, &f, err)) == 1)
            if (f.field == 1 && f.wire == WIRE_LEN && decode_map(buf, f.start, f.stop, fmt, outputs, record, found, err) < 0)
                return -1;
        if (r < 0)
            return -1;
    } else if (decode_map(buf, 0, n, fmt, outputs, record, found, err) < 0) {
        return -1;
    }
    for (int k = 0; k < N_FEATURES; k++) {
        const char *name = FEATURE_NAME[k];
        if (!found[k].present)
            return fail(err, "feature '%s': missing", name);
        if (!kind_accepted(k, found[k].kind))
            return fail(err, "feature '%s': expected %s, got %s_list", name,
                        k == F_MASKED_LM_WEIGHTS ? "float_list" : "int64_list or int32_list",
                        LIST_KIND_NAME[found[k].kind]);
        if (found[k].count != outputs[k].length)
            return fail(err, "feature '%s': expected %zd values, got %zd", name, outputs[k].length,
                        found[k].count);
        if (found[k].out_of_range)
            return fail(err, "feature '%s': value %lld does not fit int32", name, (long long)found[k].bad_value);
    }
    return 0;
}

static int output_get(Output *o, PyObject *obj, int feature, Py_ssize_t n_records, Py_ssize_t seq,
                      Py_ssize_t pred)
{
    const char *name = FEATURE_NAME[feature];
    o->held = 0;
    o->is_float = feature == F_MASKED_LM_WEIGHTS;
    feature_length(feature, seq, pred, &o->length);
    if (PyObject_GetBuffer(obj, &o->view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "output %s: expected a writable C-contiguous buffer, got %.80s", name,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    o->held = 1;
    const char *format = o->view.format ? o->view.format : "B";
    if (format[0] == '@' || format[0] == '=' || format[0] == '<')
        format++;
    int ok;
    if (o->is_float) {
        ok = strcmp(format, "f") == 0 && o->view.itemsize == 4;
    } else {
        int kind;
        ok = kind_of_format(format, o->view.itemsize, &kind) == 0 && (kind == K_I32 || kind == K_I64);
    }
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "output %s: expected %s, got format %.20s", name,
                     o->is_float ? "float32" : "int32 or int64", o->view.format ? o->view.format : "B");
        return -1;
    }
    o->itemsize = (int)o->view.itemsize;
    Py_ssize_t items = o->view.len / o->view.itemsize;
    if (items != n_records * o->length) {
        PyErr_Format(PyExc_ValueError, "output %s: expected %zd x %zd values, got %zd", name, n_records, o->length,
                     items);
        return -1;
    }
    o->row_base = (char *)o->view.buf;
    return 0;
}

static PyObject *py_decode_bert_batch(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"payloads", "fmt", "seq", "pred", "input_ids", "input_mask", "segment_ids",
                             "masked_lm_positions", "masked_lm_ids", "masked_lm_weights",
                             "next_sentence_labels", "first_index", NULL};
    PyObject *payloads_obj;
    const char *fmt_name;
    Py_ssize_t seq, pred, first_index = 0;
    PyObject *objs[N_FEATURES];
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OsnnOOOOOOO|$n:decode_bert_batch", kwlist, &payloads_obj,
                                     &fmt_name, &seq, &pred, &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                                     &objs[5], &objs[6], &first_index))
        return NULL;
    int fmt = parse_format(fmt_name);
    if (fmt < 0)
        return NULL;
    if (seq < 0 || pred < 0) {
        PyErr_SetString(PyExc_ValueError, "seq and pred must be >= 0");
        return NULL;
    }
    PyObject *payloads = PySequence_Fast(payloads_obj, "payloads must be a sequence of bytes-like objects");
    if (payloads == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(payloads);
    Output outputs[N_FEATURES];
    for (int k = 0; k < N_FEATURES; k++)
        outputs[k].held = 0;
    Py_buffer *views = PyMem_Calloc((size_t)(n ? n : 1), sizeof(Py_buffer));
    Py_ssize_t n_views = 0;
    PyObject *result = NULL;
    if (views == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (int k = 0; k < N_FEATURES; k++)
        if (output_get(&outputs[k], objs[k], k, n, seq, pred) < 0)
            goto done;
    for (; n_views < n; n_views++) {
        PyObject *item = PySequence_Fast_GET_ITEM(payloads, n_views);
        if (PyObject_GetBuffer(item, &views[n_views], PyBUF_SIMPLE) < 0)
            goto done;
    }

    DecodeError err;
    Py_ssize_t failed = -1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        if (decode_record((const uint8_t *)views[i].buf, (size_t)views[i].len, fmt, outputs, i, &err) < 0) {
            failed = i;
            break;
        }
    }
    Py_END_ALLOW_THREADS
    if (failed >= 0) {
        PyErr_Format(PyExc_ValueError, "record %zd: %s", first_index + failed, err.message);
        goto done;
    }
    result = Py_None;
    Py_INCREF(result);

done:
    for (Py_ssize_t i = 0; i < n_views; i++)
        PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    for (int k = 0; k < N_FEATURES; k++)
        if (outputs[k].held)
            PyBuffer_Release(&outputs[k].view);
    Py_DECREF(payloads);
    return result;
}

/* ------------------------------------------------------------------ */
/* split_records: framing                                              */
/* ------------------------------------------------------------------ */

static PyObject *py_split_records(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"data", "fmt", "verify", "first_index", "first_offset", "final", NULL};
    Py_buffer view;
    const char *fmt_name;
    int verify = 1, final = 0;
    long long first_index = 0, first_offset = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*s|$pLLp:split_records", kwlist, &view, &fmt_name, &verify,
                                     &first_index, &first_offset, &final))
        return NULL;
    int fmt = parse_format(fmt_name);
    PyObject *payloads = NULL, *error = NULL, *result = NULL;
    if (fmt < 0)
        goto done;
    payloads = PyList_New(0);
    if (payloads == NULL)
        goto done;
    const uint8_t *buf = (const uint8_t *)view.buf;
    size_t len = (size_t)view.len, pos = 0, needed = 0;
    long long index = first_index;
    const size_t header = fmt == FMT_TFRECORD ? 12 : 8;
    while (pos < len) {
        size_t remaining = len - pos;
        long long offset = first_offset + (long long)pos;
        if (remaining < header) {
            if (final)
                error = PyUnicode_FromFormat(fmt == FMT_TFRECORD
                                                 ? "record %lld at byte %lld: truncated header (%zu of 12 bytes)"
                                                 : "record %lld at byte %lld: truncated length (%zu of 8 bytes)",
                                             index, offset, remaining);
            needed = header;
            break;
        }
        uint64_t length;
        memcpy(&length, buf + pos, 8);
        size_t trailer = 0;
        if (fmt == FMT_TFRECORD) {
            uint32_t length_crc;
            memcpy(&length_crc, buf + pos + 8, 4);
            if (verify && masked_crc32c(buf + pos, 8) != length_crc) {
                error = PyUnicode_FromFormat("record %lld at byte %lld: length CRC mismatch", index, offset);
                break;
            }
            trailer = 4;
        } else if ((int64_t)length <= 0) {
            error = PyUnicode_FromFormat("record %lld at byte %lld: record size %lld (OneFlow needs > 0)", index,
                                         offset, (long long)(int64_t)length);
            break;
        }
        if (length > (uint64_t)(PY_SSIZE_T_MAX - 64) || remaining - header < length + trailer) {
            if (final) {
                /* the Python reader's message, wording included ("length + 4" for TFRecord) */
                error = PyUnicode_FromFormat("record %lld at byte %lld: truncated data (%zu of %llu bytes)", index,
                                             offset, remaining - header, (unsigned long long)(length + trailer));
            }
            needed = header + (size_t)(length > (uint64_t)(PY_SSIZE_T_MAX - 64) ? PY_SSIZE_T_MAX - 64 : length) +
                     trailer;
            break;
        }
        const uint8_t *data = buf + pos + header;
        if (fmt == FMT_TFRECORD && verify) {
            uint32_t data_crc;
            memcpy(&data_crc, data + length, 4);
            if (masked_crc32c(data, (size_t)length) != data_crc) {
                error = PyUnicode_FromFormat("record %lld at byte %lld: data CRC mismatch", index, offset);
                break;
            }
        }
        PyObject *payload = PyBytes_FromStringAndSize((const char *)data, (Py_ssize_t)length);
        if (payload == NULL || PyList_Append(payloads, payload) < 0) {
            Py_XDECREF(payload);
            goto done;
        }
        Py_DECREF(payload);
        pos += header + (size_t)length + trailer;
        index++;
    }
    if (error == NULL && PyErr_Occurred())
        goto done;
    result = Py_BuildValue("(OnnO)", payloads, (Py_ssize_t)pos, (Py_ssize_t)needed, error ? error : Py_None);

done:
    Py_XDECREF(payloads);
    Py_XDECREF(error);
    PyBuffer_Release(&view);
    return result;
}

/* ------------------------------------------------------------------ */
/* create_instances: the reference's draws, in C                       */
/* ------------------------------------------------------------------ */

/* CPython's random.Random: MT19937 plus the derived draws the reference uses. */
#define MT_N 624
#define MT_M 397

typedef struct {
    uint32_t mt[MT_N];
    int index;
} Twister;

static void mt_refill(Twister *t)
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

/* Growable arrays for the instances as they are made, in creation order. */
typedef struct {
    char *data;
    size_t size, capacity; /* bytes */
} Growable;

static int grow_append(Growable *g, const void *items, size_t bytes)
{
    if (g->size + bytes > g->capacity) {
        size_t capacity = g->capacity ? g->capacity : 4096;
        while (capacity < g->size + bytes)
            capacity *= 2;
        char *data = PyMem_RawRealloc(g->data, capacity);
        if (data == NULL)
            return -1;
        g->data = data;
        g->capacity = capacity;
    }
    memcpy(g->data + g->size, items, bytes);
    g->size += bytes;
    return 0;
}

typedef struct {
    /* corpus (documents already in the shuffled order) */
    const int32_t *tokens;
    const int64_t *sentence_starts;
    const int64_t *document_starts;
    Py_ssize_t n_documents;
    /* flags */
    Py_ssize_t max_seq_length, max_predictions_per_seq, dupe_factor;
    double short_seq_prob, masked_lm_prob;
    int whole_word_mask;
    int32_t cls_id, sep_id, mask_id;
    const int32_t *word_ids;
    Py_ssize_t n_word_ids;
    const uint8_t *is_subword;
    Py_ssize_t n_is_subword;
    /* scratch, max_seq_length each */
    int32_t *sequence, *output, *candidate_index, *candidate_start, *candidate_order, *label_at;
    uint8_t *masked;
    /* results in creation order */
    Growable out_tokens, lengths, a_lengths, positions, labels, mask_counts, is_random_next;
    Twister twister;
    char error[200];
} Creator;

static int creator_fail(Creator *c, const char *message)
{
    snprintf(c->error, sizeof c->error, "%s", message);
    return -1;
}

/* randint(a, b) = a + _randbelow(b - a + 1), with randrange's error for an empty range */
static int mt_randint(Creator *c, int64_t a, int64_t b, int64_t *out)
{
    if (b < a) {
        snprintf(c->error, sizeof c->error, "empty range for randrange() (%lld, %lld, %lld)", (long long)a,
                 (long long)(b + 1), (long long)(b + 1 - a));
        return -1;
    }
    if ((uint64_t)(b - a) >= 0xFFFFFFFFull)
        return creator_fail(c, "randint range too wide for the native core");
    *out = a + mt_below(&c->twister, (uint64_t)(b - a + 1));
    return 0;
}

/* create_masked_lm_predictions over c->sequence[0:n]; appends the instance. */
static int mask_and_emit(Creator *c, Py_ssize_t n, Py_ssize_t a_length, int is_random_next)
{
    const int32_t *tokens = c->sequence;
    Py_ssize_t n_candidates = 0, n_indices = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t token = tokens[i];
        if (token == c->cls_id || token == c->sep_id)
            continue;
        if (c->whole_word_mask && n_candidates > 0 && token >= 0 && token < c->n_is_subword &&
            c->is_subword[token]) {
            c->candidate_index[n_indices++] = (int32_t)i; /* joins the last candidate */
        } else {
            c->candidate_start[n_candidates++] = (int32_t)n_indices;
            c->candidate_index[n_indices++] = (int32_t)i;
        }
    }
    c->candidate_start[n_candidates] = (int32_t)n_indices;
    for (Py_ssize_t k = 0; k < n_candidates; k++)
        c->candidate_order[k] = (int32_t)k;
    for (Py_ssize_t i = n_candidates - 1; i >= 1; i--) { /* rng.shuffle(cand_indexes) */
        uint32_t j = mt_below(&c->twister, (uint64_t)i + 1);
        int32_t swap = c->candidate_order[i];
        c->candidate_order[i] = c->candidate_order[j];
        c->candidate_order[j] = swap;
    }
    memcpy(c->output, tokens, sizeof(int32_t) * (size_t)n);
    memset(c->masked, 0, (size_t)c->max_seq_length);
    /* Python's round(): half to even, which rint() does in the default rounding mode */
    Py_ssize_t num_to_predict = (Py_ssize_t)rint((double)n * c->masked_lm_prob);
    if (num_to_predict < 1)
        num_to_predict = 1;
    if (num_to_predict > c->max_predictions_per_seq)
        num_to_predict = c->max_predictions_per_seq;
    Py_ssize_t n_masked = 0;
    for (Py_ssize_t k = 0; k < n_candidates; k++) {
        if (n_masked >= num_to_predict)
            break;
        int32_t candidate = c->candidate_order[k];
        int32_t first = c->candidate_start[candidate], stop = c->candidate_start[candidate + 1];
        if (n_masked + (stop - first) > num_to_predict)
            continue; /* a whole word that would overflow the budget is skipped */
        for (int32_t m = first; m < stop; m++) {
            int32_t index = c->candidate_index[m];
            int32_t replacement;
            if (mt_random(&c->twister) < 0.8) {
                replacement = c->mask_id;
            } else if (mt_random(&c->twister) < 0.5) {
                replacement = tokens[index];
            } else {
                int64_t w;
                if (mt_randint(c, 0, c->n_word_ids - 1, &w) < 0)
                    return -1;
                replacement = c->word_ids[w];
            }
            c->output[index] = replacement;
            c->masked[index] = 1;
            n_masked++;
        }
    }
    int32_t length32 = (int32_t)n, a32 = (int32_t)a_length, masks32 = (int32_t)n_masked;
    uint8_t label = (uint8_t)is_random_next;
    if (grow_append(&c->out_tokens, c->output, sizeof(int32_t) * (size_t)n) < 0 ||
        grow_append(&c->lengths, &length32, 4) < 0 || grow_append(&c->a_lengths, &a32, 4) < 0 ||
        grow_append(&c->mask_counts, &masks32, 4) < 0 || grow_append(&c->is_random_next, &label, 1) < 0)
        return creator_fail(c, "out of memory");
    for (Py_ssize_t i = 0; i < n; i++) { /* masked_lms sorted by index */
        if (c->masked[i]) {
            uint16_t position = (uint16_t)i;
            int32_t original = tokens[i];
            if (grow_append(&c->positions, &position, 2) < 0 || grow_append(&c->labels, &original, 4) < 0)
                return creator_fail(c, "out of memory");
        }
    }
    return 0;
}

static inline Py_ssize_t sentences_in(const Creator *c, Py_ssize_t d)
{
    return (Py_ssize_t)(c->document_starts[d + 1] - c->document_starts[d]);
}

/* create_instances_from_document for document d. */
static int instances_from_document(Creator *c, Py_ssize_t d)
{
    const Py_ssize_t first_sentence = (Py_ssize_t)c->document_starts[d];
    const Py_ssize_t n_sentences = sentences_in(c, d);
    const int64_t *ss = c->sentence_starts;
    const int64_t max_num_tokens = c->max_seq_length - 3;
    int64_t target_seq_length = max_num_tokens;
    if (mt_random(&c->twister) < c->short_seq_prob && mt_randint(c, 2, max_num_tokens, &target_seq_length) < 0)
        return -1;

    Py_ssize_t chunk_start = 0, chunk_length = 0; /* current_chunk: sentences [chunk_start, +chunk_length) */
    int64_t current_length = 0;
    Py_ssize_t i = 0;
    while (i < n_sentences) {
        if (chunk_length == 0)
            chunk_start = i;
        chunk_length++;
        current_length += ss[first_sentence + i + 1] - ss[first_sentence + i];
        if (i == n_sentences - 1 || current_length >= target_seq_length) {
            int64_t a_end = 1;
            if (chunk_length >= 2 && mt_randint(c, 1, chunk_length - 1, &a_end) < 0)
                return -1;
            /* tokens of consecutive sentences are consecutive: A and B are ranges of c->tokens */
            int64_t a_lo = ss[first_sentence + chunk_start], a_hi = ss[first_sentence + chunk_start + a_end];
            int64_t b_lo, b_hi;
            int is_random_next;
            if (chunk_length == 1 || mt_random(&c->twister) < 0.5) {
                is_random_next = 1;
                int64_t target_b_length = target_seq_length - (a_hi - a_lo);
                int64_t random_document = 0;
                for (int tries = 0; tries < 10; tries++) {
                    if (mt_randint(c, 0, c->n_documents - 1, &random_document) < 0)
                        return -1;
                    if (random_document != d)
                        break;
                }
                Py_ssize_t r_first = (Py_ssize_t)c->document_starts[random_document];
                Py_ssize_t r_sentences = sentences_in(c, (Py_ssize_t)random_document);
                int64_t random_start;
                if (mt_randint(c, 0, r_sentences - 1, &random_start) < 0)
                    return -1;
                b_lo = b_hi = ss[r_first + random_start];
                for (Py_ssize_t j = (Py_ssize_t)random_start; j < r_sentences; j++) {
                    b_hi = ss[r_first + j + 1];
                    if (b_hi - b_lo >= target_b_length)
                        break;
                }
                i -= chunk_length - (Py_ssize_t)a_end; /* put the unused segments back */
            } else {
                is_random_next = 0;
                b_lo = a_hi;
                b_hi = ss[first_sentence + chunk_start + chunk_length];
            }
            /* truncate_seq_pair: trim the longer side (B on a tie), front or back by coin flip */
            while ((a_hi - a_lo) + (b_hi - b_lo) > max_num_tokens) {
                int64_t *lo, *hi;
                if (a_hi - a_lo > b_hi - b_lo) {
                    lo = &a_lo;
                    hi = &a_hi;
                } else {
                    lo = &b_lo;
                    hi = &b_hi;
                }
                if (*hi - *lo < 1)
                    return creator_fail(c, "truncate_seq_pair emptied a segment");
                if (mt_random(&c->twister) < 0.5)
                    (*lo)++;
                else
                    (*hi)--;
            }
            Py_ssize_t la = (Py_ssize_t)(a_hi - a_lo), lb = (Py_ssize_t)(b_hi - b_lo);
            int32_t *seq = c->sequence;
            seq[0] = c->cls_id;
            memcpy(seq + 1, c->tokens + a_lo, sizeof(int32_t) * (size_t)la);
            seq[1 + la] = c->sep_id;
            memcpy(seq + 2 + la, c->tokens + b_lo, sizeof(int32_t) * (size_t)lb);
            seq[2 + la + lb] = c->sep_id;
            if (mask_and_emit(c, la + lb + 3, la, is_random_next) < 0)
                return -1;
            chunk_length = 0;
            current_length = 0;
        }
        i++;
    }
    return 0;
}

static int run_creator(Creator *c)
{
    for (Py_ssize_t pass = 0; pass < c->dupe_factor; pass++)
        for (Py_ssize_t d = 0; d < c->n_documents; d++)
            if (instances_from_document(c, d) < 0)
                return -1;
    return 0;
}

static int twister_from_state(PyObject *state, Twister *t)
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

static PyObject *twister_state(const Twister *t, PyObject *old_state)
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

/* A typed read-only C-contiguous array argument of the expected format. */
static int typed_array(PyObject *obj, Py_buffer *view, const char *name, int want_kind, Py_ssize_t *n)
{
    int kind;
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    if (kind_of_format(view->format, view->itemsize, &kind) < 0 || kind != want_kind) {
        PyErr_Format(PyExc_TypeError, "%s: wrong array type (format %.20s)", name, view->format ? view->format : "B");
        PyBuffer_Release(view);
        return -1;
    }
    *n = view->len / view->itemsize;
    return 0;
}

static PyObject *py_create_instances(PyObject *self, PyObject *args)
{
    PyObject *state, *objs[5];
    Creator c;
    memset(&c, 0, sizeof c);
    Py_ssize_t token_itemsize;
    int whole_word_mask;
    if (!PyArg_ParseTuple(args, "OOOOnnnddpiiiOOn:create_instances", &state, &objs[0], &objs[1], &objs[2],
                          &c.max_seq_length, &c.max_predictions_per_seq, &c.dupe_factor, &c.short_seq_prob,
                          &c.masked_lm_prob, &whole_word_mask, &c.cls_id, &c.sep_id, &c.mask_id, &objs[3], &objs[4],
                          &token_itemsize))
        return NULL;
    c.whole_word_mask = whole_word_mask;
    if (token_itemsize != 2 && token_itemsize != 4) {
        PyErr_SetString(PyExc_ValueError, "token_itemsize must be 2 (uint16) or 4 (int32)");
        return NULL;
    }
    if (c.max_seq_length < 3 || c.max_seq_length > 65535 || c.max_predictions_per_seq < 0 || c.dupe_factor < 0) {
        PyErr_SetString(PyExc_ValueError, "need 3 <= max_seq_length <= 65535, max_predictions_per_seq >= 0, dupe_factor >= 0");
        return NULL;
    }
    if (twister_from_state(state, &c.twister) < 0)
        return NULL;

    static const char *const names[5] = {"tokens", "sentence_starts", "document_starts", "word_ids", "is_subword"};
    static const int kinds[5] = {K_I32, K_I64, K_I64, K_I32, K_U8};
    Py_buffer views[5];
    Py_ssize_t sizes[5];
    int held = 0;
    PyObject *result = NULL;
    for (; held < 5; held++)
        if (typed_array(objs[held], &views[held], names[held], kinds[held], &sizes[held]) < 0)
            goto done;
    c.tokens = views[0].buf;
    c.sentence_starts = views[1].buf;
    c.document_starts = views[2].buf;
    c.word_ids = views[3].buf;
    c.n_word_ids = sizes[3];
    c.is_subword = views[4].buf;
    c.n_is_subword = sizes[4];
    c.n_documents = sizes[2] - 1;
    {
        Py_ssize_t n_sentences = sizes[1] - 1;
        int ok = c.n_documents >= 0 && n_sentences >= 0 && c.document_starts[0] == 0 &&
                 c.document_starts[c.n_documents] == n_sentences && c.sentence_starts[0] == 0 &&
                 c.sentence_starts[n_sentences] == sizes[0];
        for (Py_ssize_t d = 0; ok && d < c.n_documents; d++)
            ok = c.document_starts[d] <= c.document_starts[d + 1];
        for (Py_ssize_t s = 0; ok && s < n_sentences; s++)
            ok = c.sentence_starts[s] <= c.sentence_starts[s + 1];
        if (!ok) {
            PyErr_SetString(PyExc_ValueError, "inconsistent corpus: sentence_starts and document_starts must be "
                                              "ascending offsets from 0 to the number of tokens / sentences");
            goto done;
        }
    }

    size_t seq = (size_t)c.max_seq_length;
    c.sequence = PyMem_RawMalloc(sizeof(int32_t) * seq);
    c.output = PyMem_RawMalloc(sizeof(int32_t) * seq);
    c.candidate_index = PyMem_RawMalloc(sizeof(int32_t) * seq);
    c.candidate_start = PyMem_RawMalloc(sizeof(int32_t) * (seq + 1));
    c.candidate_order = PyMem_RawMalloc(sizeof(int32_t) * seq);
    c.masked = PyMem_RawMalloc(seq);
    if (!c.sequence || !c.output || !c.candidate_index || !c.candidate_start || !c.candidate_order || !c.masked) {
        PyErr_NoMemory();
        goto done;
    }

    int failed;
    int64_t *order = NULL, *token_offsets = NULL, *mask_offsets = NULL;
    Py_ssize_t n_instances = 0;
    Py_BEGIN_ALLOW_THREADS
    failed = run_creator(&c);
    if (!failed) {
        /* rng.shuffle(instances): a permutation of creation order, then gather */
        n_instances = (Py_ssize_t)(c.lengths.size / 4);
        order = PyMem_RawMalloc(sizeof(int64_t) * (size_t)(n_instances + 1));
        token_offsets = PyMem_RawMalloc(sizeof(int64_t) * (size_t)(n_instances + 1));
        mask_offsets = PyMem_RawMalloc(sizeof(int64_t) * (size_t)(n_instances + 1));
        if (!order || !token_offsets || !mask_offsets) {
            failed = creator_fail(&c, "out of memory");
        } else {
            for (Py_ssize_t k = 0; k < n_instances; k++)
                order[k] = k;
            for (Py_ssize_t k = n_instances - 1; k >= 1; k--) {
                if ((uint64_t)k >= 0xFFFFFFFFull) {
                    failed = creator_fail(&c, "too many instances for the native core");
                    break;
                }
                uint32_t j = mt_below(&c.twister, (uint64_t)k + 1);
                int64_t swap = order[k];
                order[k] = order[j];
                order[j] = swap;
            }
            const int32_t *lengths = (const int32_t *)c.lengths.data, *counts = (const int32_t *)c.mask_counts.data;
            token_offsets[0] = mask_offsets[0] = 0;
            for (Py_ssize_t k = 0; k < n_instances; k++) {
                token_offsets[k + 1] = token_offsets[k] + lengths[k];
                mask_offsets[k + 1] = mask_offsets[k] + counts[k];
            }
        }
    }
    Py_END_ALLOW_THREADS
    if (failed) {
        if (!PyErr_Occurred())
            PyErr_SetString(strcmp(c.error, "out of memory") == 0 ? PyExc_MemoryError : PyExc_ValueError, c.error);
        goto free_order;
    }
    {
        Py_ssize_t n_tokens = (Py_ssize_t)(c.out_tokens.size / 4), n_masks = (Py_ssize_t)(c.positions.size / 2);
        PyObject *tokens = PyBytes_FromStringAndSize(NULL, n_tokens * token_itemsize);
        PyObject *starts = PyBytes_FromStringAndSize(NULL, (n_instances + 1) * 8);
        PyObject *a_lengths = PyBytes_FromStringAndSize(NULL, n_instances * 4);
        PyObject *positions = PyBytes_FromStringAndSize(NULL, n_masks * 2);
        PyObject *labels = PyBytes_FromStringAndSize(NULL, n_masks * token_itemsize);
        PyObject *mask_starts = PyBytes_FromStringAndSize(NULL, (n_instances + 1) * 8);
        PyObject *is_random_next = PyBytes_FromStringAndSize(NULL, n_instances);
        PyObject *new_state = twister_state(&c.twister, state);
        if (tokens && starts && a_lengths && positions && labels && mask_starts && is_random_next && new_state) {
            const int32_t *all_tokens = (const int32_t *)c.out_tokens.data, *all_labels = (const int32_t *)c.labels.data;
            const uint16_t *all_positions = (const uint16_t *)c.positions.data;
            const int32_t *all_a = (const int32_t *)c.a_lengths.data;
            const uint8_t *all_nsp = (const uint8_t *)c.is_random_next.data;
            char *t_out = PyBytes_AS_STRING(tokens), *l_out = PyBytes_AS_STRING(labels);
            int64_t *s_out = (int64_t *)PyBytes_AS_STRING(starts), *m_out = (int64_t *)PyBytes_AS_STRING(mask_starts);
            int32_t *a_out = (int32_t *)PyBytes_AS_STRING(a_lengths);
            uint16_t *p_out = (uint16_t *)PyBytes_AS_STRING(positions);
            uint8_t *r_out = (uint8_t *)PyBytes_AS_STRING(is_random_next);
            int64_t t_at = 0, m_at = 0;
            s_out[0] = m_out[0] = 0;
            for (Py_ssize_t k = 0; k < n_instances; k++) {
                int64_t src = order[k];
                for (int64_t x = token_offsets[src]; x < token_offsets[src + 1]; x++, t_at++) {
                    if (token_itemsize == 2)
                        ((uint16_t *)t_out)[t_at] = (uint16_t)all_tokens[x];
                    else
                        ((int32_t *)t_out)[t_at] = all_tokens[x];
                }
                for (int64_t x = mask_offsets[src]; x < mask_offsets[src + 1]; x++, m_at++) {
                    p_out[m_at] = all_positions[x];
                    if (token_itemsize == 2)
                        ((uint16_t *)l_out)[m_at] = (uint16_t)all_labels[x];
                    else
                        ((int32_t *)l_out)[m_at] = all_labels[x];
                }
                s_out[k + 1] = t_at;
                m_out[k + 1] = m_at;
                a_out[k] = all_a[src];
                r_out[k] = all_nsp[src];
            }
            result = PyTuple_Pack(8, new_state, tokens, starts, a_lengths, positions, labels, mask_starts,
                                  is_random_next);
        }
        Py_XDECREF(tokens);
        Py_XDECREF(starts);
        Py_XDECREF(a_lengths);
        Py_XDECREF(positions);
        Py_XDECREF(labels);
        Py_XDECREF(mask_starts);
        Py_XDECREF(is_random_next);
        Py_XDECREF(new_state);
    }
free_order:
    PyMem_RawFree(order);
    PyMem_RawFree(token_offsets);
    PyMem_RawFree(mask_offsets);
done:
    for (int k = 0; k < held; k++)
        PyBuffer_Release(&views[k]);
    PyMem_RawFree(c.sequence);
    PyMem_RawFree(c.output);
    PyMem_RawFree(c.candidate_index);
    PyMem_RawFree(c.candidate_start);
    PyMem_RawFree(c.candidate_order);
    PyMem_RawFree(c.masked);
    Growable *growables[] = {&c.out_tokens, &c.lengths, &c.a_lengths, &c.positions, &c.labels, &c.mask_counts,
                             &c.is_random_next};
    for (size_t k = 0; k < sizeof growables / sizeof growables[0]; k++)
        PyMem_RawFree(growables[k]->data);
    return result;
}

/* ------------------------------------------------------------------ */
/* Module                                                              */
/* ------------------------------------------------------------------ */

static PyMethodDef native_methods[] = {
    {"crc32c", (PyCFunction)(void (*)(void))py_crc32c, METH_VARARGS | METH_KEYWORDS,
     "crc32c(data, crc=0) -> int\n\nCRC-32C (Castagnoli) of a bytes-like object, continuing from `crc`."},
    {"encode_instances", (PyCFunction)(void (*)(void))py_encode_instances, METH_VARARGS | METH_KEYWORDS,
     "encode_instances(fmt, seq, pred, tokens, instance_starts, a_lengths, masked_positions, masked_labels,\n"
     "                 mask_starts, is_random_next, first, count) -> bytes\n\n"
     "The framed records of instances [first, first+count) of the compact instance layout, byte for byte\n"
     "what formats.frame(formats.encode_record(fields, fmt), fmt) gives."},
    {"decode_bert_batch", (PyCFunction)(void (*)(void))py_decode_bert_batch, METH_VARARGS | METH_KEYWORDS,
     "decode_bert_batch(payloads, fmt, seq, pred, input_ids, input_mask, segment_ids, masked_lm_positions,\n"
     "                  masked_lm_ids, masked_lm_weights, next_sentence_labels, *, first_index=0) -> None\n\n"
     "Decode unframed BERT records into row i of each writable output buffer; ValueError\n"
     "'record {i}: ...' on the first record that does not fit."},
    {"split_records", (PyCFunction)(void (*)(void))py_split_records, METH_VARARGS | METH_KEYWORDS,
     "split_records(data, fmt, *, verify=True, first_index=0, first_offset=0, final=False)\n"
     "    -> (payloads, consumed, needed, error)\n\n"
     "Split framed records off the front of `data` (TFRecord CRCs verified); stops at an incomplete\n"
     "record (needed: its framed size) or at the first framing error (error: its message)."},
    {"create_instances", (PyCFunction)py_create_instances, METH_VARARGS,
     "create_instances(state, tokens, sentence_starts, document_starts, max_seq_length,\n"
     "                 max_predictions_per_seq, dupe_factor, short_seq_prob, masked_lm_prob, whole_word_mask,\n"
     "                 cls_id, sep_id, mask_id, word_ids, is_subword, token_itemsize)\n"
     "    -> (state, tokens, instance_starts, a_lengths, masked_positions, masked_labels, mask_starts,\n"
     "        is_random_next)\n\n"
     "bertprep.instances' reference algorithm after the document shuffle: dupe_factor passes over the\n"
     "documents, then the shuffle of all instances, drawing from the Mersenne Twister `state`\n"
     "(random.Random.getstate()) exactly as CPython's random() / randint() / shuffle() do. Arrays come\n"
     "back as bytes in the layout of bertprep.instances.Instances; `state` is the generator's new state."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "bertprep._native", "C hot loops of bertprep (optional; every function has a Python twin).",
    -1, native_methods,
};

PyMODINIT_FUNC PyInit__native(void)
{
    crc_init_tables();
    PyObject *module = PyModule_Create(&native_module);
    if (module == NULL)
        return NULL;
    if (PyModule_AddStringConstant(module, "crc32c_implementation", crc_use_hardware ? "sse4.2" : "slicing-by-8") <
        0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
