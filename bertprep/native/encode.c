/* Record encoding: the compact instance layout of bertprep.instances.Instances
 * straight to framed TFRecord / OFRecord bytes, sized first and then written
 * in one pass without the GIL.
 *
 * Mirrors bertprep/formats/__init__.py encode_instances_python (encode_record
 * + frame over protowire.encode_feature_map); equal byte for byte by
 * tests/test_native.py::test_encode_instances_reproduces_golden_files and
 * test_encode_instances_matches_twin_on_random_instances, and in its errors by
 * test_encode_instances_rejects_inconsistent_layouts_like_its_twin.
 */
#include "native.h"

/* In bertprep.formats.FEATURE_NAMES order (the reference's insertion order). */
const char *const FEATURE_NAME[N_FEATURES] = {
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

PyObject *encode_instances(int fmt, Py_ssize_t seq, Py_ssize_t pred, const IntArray arrays[N_INSTANCE_ARRAYS],
                           Py_ssize_t first, Py_ssize_t count)
{
    const IntArray *tokens = &arrays[A_TOKENS], *instance_starts = &arrays[A_INSTANCE_STARTS],
                   *a_lengths = &arrays[A_A_LENGTHS], *masked_positions = &arrays[A_MASKED_POSITIONS],
                   *masked_labels = &arrays[A_MASKED_LABELS], *mask_starts = &arrays[A_MASK_STARTS],
                   *is_random_next = &arrays[A_IS_RANDOM_NEXT];
    PyObject *result = NULL;
    RecordSizes *sizes = NULL;

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
    return result;
}
