/* bertprep._native's Python face: argument parsing, buffers in and out, the
 * method table and PyInit. The work is in the files by concern (native.h
 * lists them); nothing here computes anything.
 *
 *   crc32c(data, crc=0) -> int
 *   encode_instances(fmt, seq, pred, tokens, instance_starts, a_lengths,
 *                    masked_positions, masked_labels, mask_starts,
 *                    is_random_next, first, count) -> bytes
 *   decode_batch(payloads, fmt, features, outputs, first_index=0) -> None
 *   decode_bert_batch(payloads, fmt, seq, pred, input_ids, input_mask,
 *                     segment_ids, masked_lm_positions, masked_lm_ids,
 *                     masked_lm_weights, next_sentence_labels,
 *                     *, first_index=0) -> None
 *   split_records(data, fmt, *, verify=True, first_index=0, first_offset=0,
 *                 final=False) -> (payloads, consumed, needed, error)
 *   create_instances(state, tokens, sentence_starts, document_starts, ...)
 *       -> (state, tokens, instance_starts, ...)   (see bertprep/instances.py)
 *   mask_batch(input_ids, lengths, keys, pred, masked_lm_prob, whole_word,
 *              cls_id, sep_id, mask_id, word_ids, is_subword,
 *              out_ids, out_positions, out_labels, out_weights) -> None
 *   ngram_xxh32(words, n) -> bytes                  (see bertprep/stages/dedup.py)
 *   minhash(shingles, counts, a, b, out) -> None   (see bertprep/stages/dedup.py)
 *
 * Its argument checks are tested by tests/test_native.py::
 * test_crc32c_rejects_bad_arguments, test_decode_batch_checks_its_arguments
 * (against the twin's), test_decode_bert_batch_checks_its_outputs,
 * test_encode_instances_rejects_inconsistent_layouts_like_its_twin,
 * test_create_instances_rejects_bad_arguments and
 * tests/test_dynamic_masking.py::test_native_mask_batch_rejects_bad_arguments.
 */
#include "native.h"

/* Integer arrays through the buffer protocol */

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

/* A typed C-contiguous array argument of the expected format; `writable` for an output. */
static int typed_buffer(PyObject *obj, Py_buffer *view, const char *name, int want_kind, Py_ssize_t *n,
                        int writable)
{
    int kind;
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    if (kind_of_format(view->format, view->itemsize, &kind) < 0 || kind != want_kind) {
        PyErr_Format(PyExc_TypeError, "%s: wrong array type (format %.20s)", name, view->format ? view->format : "B");
        PyBuffer_Release(view);
        return -1;
    }
    *n = view->len / view->itemsize;
    return 0;
}

/* A typed read-only C-contiguous array argument of the expected format. */
static int typed_array(PyObject *obj, Py_buffer *view, const char *name, int want_kind, Py_ssize_t *n)
{
    return typed_buffer(obj, view, name, want_kind, n, 0);
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

/* The format of a BERT batch of seq tokens and pred predictions; -1 with an exception set. */
static int parse_bert_format(const char *fmt_name, Py_ssize_t seq, Py_ssize_t pred)
{
    int fmt = parse_format(fmt_name);
    if (fmt >= 0 && (seq < 0 || pred < 0)) {
        PyErr_SetString(PyExc_ValueError, "seq and pred must be >= 0");
        return -1;
    }
    return fmt;
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

static PyObject *py_encode_instances(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"fmt", "seq", "pred", "tokens", "instance_starts", "a_lengths",
                             "masked_positions", "masked_labels", "mask_starts", "is_random_next",
                             "first", "count", NULL};
    const char *fmt_name;
    Py_ssize_t seq, pred, first, count;
    PyObject *objs[N_INSTANCE_ARRAYS];
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "snnOOOOOOOnn:encode_instances", kwlist, &fmt_name, &seq,
                                     &pred, &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5],
                                     &objs[6], &first, &count))
        return NULL;
    int fmt = parse_bert_format(fmt_name, seq, pred);
    if (fmt < 0)
        return NULL;

    static const char *const names[N_INSTANCE_ARRAYS] = {"tokens", "instance_starts", "a_lengths",
                                                         "masked_positions", "masked_labels", "mask_starts",
                                                         "is_random_next"};
    IntArray arrays[N_INSTANCE_ARRAYS];
    for (int k = 0; k < N_INSTANCE_ARRAYS; k++)
        arrays[k].held = 0;
    PyObject *result = NULL;
    for (int k = 0; k < N_INSTANCE_ARRAYS; k++)
        if (int_array_get(&arrays[k], objs[k], names[k]) < 0)
            goto done;
    result = encode_instances(fmt, seq, pred, arrays, first, count);
done:
    for (int k = 0; k < N_INSTANCE_ARRAYS; k++)
        int_array_release(&arrays[k]);
    return result;
}

/* Takes the buffer of the array `obj` for an output whose name, is_float and length are set. */
static int output_get(Output *o, PyObject *obj, Py_ssize_t n_records)
{
    const char *name = o->name;
    o->held = 0;
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

/* The decoders' common part: payloads (a sequence of bytes-like objects) into the arrays
 * output_objects[k], one per schema feature outputs[k] (name, is_float and length set). */
static PyObject *decode_payloads(PyObject *payloads_obj, int fmt, Output *outputs, int n_outputs,
                                 PyObject *const *output_objects, Py_ssize_t first_index)
{
    for (int k = 0; k < n_outputs; k++)
        outputs[k].held = 0;
    PyObject *payloads = PySequence_Fast(payloads_obj, "payloads must be a sequence of bytes-like objects");
    if (payloads == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(payloads);
    Py_buffer *views = PyMem_Calloc((size_t)(n ? n : 1), sizeof(Py_buffer));
    Py_ssize_t n_views = 0;
    PyObject *result = NULL;
    if (views == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (int k = 0; k < n_outputs; k++)
        if (output_get(&outputs[k], output_objects[k], n) < 0)
            goto done;
    for (; n_views < n; n_views++) {
        PyObject *item = PySequence_Fast_GET_ITEM(payloads, n_views);
        if (PyObject_GetBuffer(item, &views[n_views], PyBUF_SIMPLE) < 0)
            goto done;
    }

    DecodeError err;
    Py_ssize_t failed = decode_records(views, n, fmt, outputs, n_outputs, &err);
    if (failed == -2)
        goto done;
    if (failed >= 0) {
        PyErr_Format(PyExc_ValueError, "record %zd at byte %zu: %s", first_index + failed, err.offset, err.message);
        goto done;
    }
    result = Py_None;
    Py_INCREF(result);

done:
    for (Py_ssize_t i = 0; i < n_views; i++)
        PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    for (int k = 0; k < n_outputs; k++)
        if (outputs[k].held)
            PyBuffer_Release(&outputs[k].view);
    Py_DECREF(payloads);
    return result;
}

#define FEATURES_EXPECTED "expected (name: str, is_float: bool, length: int >= 0)"

static PyObject *py_decode_batch(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"payloads", "fmt", "features", "outputs", "first_index", NULL};
    PyObject *payloads, *features_obj, *outputs_obj;
    const char *fmt_name;
    Py_ssize_t first_index = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OsOO|n:decode_batch", kwlist, &payloads, &fmt_name,
                                     &features_obj, &outputs_obj, &first_index))
        return NULL;
    int fmt = parse_format(fmt_name);
    if (fmt < 0)
        return NULL;
    PyObject *features = PySequence_Fast(features_obj, "features must be a sequence of (name, is_float, length)");
    if (features == NULL)
        return NULL;
    PyObject *arrays = PySequence_Fast(outputs_obj, "outputs must be a sequence of arrays");
    Output *outputs = NULL;
    char *names = NULL; /* the names' UTF-8, copied: the GIL is released while they are compared */
    PyObject *result = NULL;
    if (arrays == NULL)
        goto done;
    Py_ssize_t n_features = PySequence_Fast_GET_SIZE(features);
    if (n_features > INT_MAX / 2) {
        PyErr_SetString(PyExc_ValueError, "features: too many");
        goto done;
    }
    if (PySequence_Fast_GET_SIZE(arrays) != n_features) {
        PyErr_Format(PyExc_ValueError, "outputs: expected one array per feature (%zd), got %zd", n_features,
                     PySequence_Fast_GET_SIZE(arrays));
        goto done;
    }
    outputs = PyMem_Calloc((size_t)(n_features ? n_features : 1), sizeof(Output));
    size_t names_size = 0;
    if (outputs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < n_features; k++) {
        PyObject *item = PySequence_Fast_GET_ITEM(features, k);
        Py_ssize_t size, length;
        int is_float;
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3 || !PyUnicode_Check(PyTuple_GET_ITEM(item, 0))) {
            PyErr_Format(PyExc_TypeError, "features[%zd]: " FEATURES_EXPECTED, k);
            goto done;
        }
        if ((outputs[k].name = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(item, 0), &size)) == NULL ||
            (is_float = PyObject_IsTrue(PyTuple_GET_ITEM(item, 1))) < 0)
            goto done;
        PyObject *index = PyNumber_Index(PyTuple_GET_ITEM(item, 2));
        if (index == NULL)
            goto done;
        length = PyLong_AsSsize_t(index);
        Py_DECREF(index);
        if (length == -1 && PyErr_Occurred())
            goto done;
        if (length < 0) {
            PyErr_Format(PyExc_ValueError, "features[%zd]: length %zd, " FEATURES_EXPECTED, k, length);
            goto done;
        }
        for (Py_ssize_t j = 0; j < k; j++)
            if (outputs[j].name_size == (size_t)size && memcmp(outputs[j].name, outputs[k].name, (size_t)size) == 0) {
                PyErr_Format(PyExc_ValueError, "features[%zd]: name %R repeats features[%zd]", k,
                             PyTuple_GET_ITEM(item, 0), j);
                goto done;
            }
        outputs[k].name_size = (size_t)size;
        outputs[k].is_float = is_float;
        outputs[k].length = length;
        names_size += (size_t)size + 1;
    }
    names = PyMem_Malloc(names_size ? names_size : 1);
    if (names == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0, at = 0; k < n_features; k++) {
        memcpy(names + at, outputs[k].name, outputs[k].name_size + 1);
        outputs[k].name = names + at;
        at += (Py_ssize_t)outputs[k].name_size + 1;
    }
    result = decode_payloads(payloads, fmt, outputs, (int)n_features, PySequence_Fast_ITEMS(arrays), first_index);
done:
    PyMem_Free(names);
    PyMem_Free(outputs);
    Py_XDECREF(arrays);
    Py_DECREF(features);
    return result;
}

/* decode_batch with BERT's schema (bertprep.formats.BERT_FEATURES at seq/pred). */
static PyObject *py_decode_bert_batch(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"payloads", "fmt", "seq", "pred", "input_ids", "input_mask", "segment_ids",
                             "masked_lm_positions", "masked_lm_ids", "masked_lm_weights",
                             "next_sentence_labels", "first_index", NULL};
    PyObject *payloads;
    const char *fmt_name;
    Py_ssize_t seq, pred, first_index = 0;
    PyObject *objs[N_FEATURES];
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OsnnOOOOOOO|$n:decode_bert_batch", kwlist, &payloads,
                                     &fmt_name, &seq, &pred, &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                                     &objs[5], &objs[6], &first_index))
        return NULL;
    int fmt = parse_bert_format(fmt_name, seq, pred);
    if (fmt < 0)
        return NULL;
    Output outputs[N_FEATURES];
    for (int k = 0; k < N_FEATURES; k++) {
        outputs[k].name = FEATURE_NAME[k];
        outputs[k].name_size = strlen(FEATURE_NAME[k]);
        outputs[k].is_float = k == F_MASKED_LM_WEIGHTS;
        outputs[k].length = feature_length(k, seq, pred);
    }
    return decode_payloads(payloads, fmt, outputs, N_FEATURES, objs, first_index);
}

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
    PyObject *result = NULL;
    if (fmt >= 0)
        result = split_records((const uint8_t *)view.buf, (size_t)view.len, fmt, verify, first_index, first_offset,
                               final);
    PyBuffer_Release(&view);
    return result;
}

/* The end of an entry point that took `held` buffers: they are released and `result` (NULL on an error) returned. */
static PyObject *release_buffers(Py_buffer *views, int held, PyObject *result)
{
    for (int k = 0; k < held; k++)
        PyBuffer_Release(&views[k]);
    return result;
}

static PyObject *py_create_instances(PyObject *self, PyObject *args)
{
    PyObject *state, *objs[5];
    InstanceInputs in;
    memset(&in, 0, sizeof in);
    Twister twister;
    Py_ssize_t token_itemsize;
    int whole_word_mask;
    if (!PyArg_ParseTuple(args, "OOOOnnnddpiiiOOn:create_instances", &state, &objs[0], &objs[1], &objs[2],
                          &in.max_seq_length, &in.max_predictions_per_seq, &in.dupe_factor, &in.short_seq_prob,
                          &in.masked_lm_prob, &whole_word_mask, &in.cls_id, &in.sep_id, &in.mask_id, &objs[3],
                          &objs[4], &token_itemsize))
        return NULL;
    in.whole_word_mask = whole_word_mask;
    if (token_itemsize != 2 && token_itemsize != 4) {
        PyErr_SetString(PyExc_ValueError, "token_itemsize must be 2 (uint16) or 4 (int32)");
        return NULL;
    }
    if (in.max_seq_length < 3 || in.max_seq_length > 65535 || in.max_predictions_per_seq < 0 ||
        in.dupe_factor < 0) {
        PyErr_SetString(PyExc_ValueError, "need 3 <= max_seq_length <= 65535, max_predictions_per_seq >= 0, dupe_factor >= 0");
        return NULL;
    }
    if (twister_from_state(state, &twister) < 0)
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
    in.tokens = views[0].buf;
    in.n_tokens = sizes[0];
    in.sentence_starts = views[1].buf;
    in.n_sentences = sizes[1] - 1;
    in.document_starts = views[2].buf;
    in.n_documents = sizes[2] - 1;
    in.word_ids = views[3].buf;
    in.n_word_ids = sizes[3];
    in.is_subword = views[4].buf;
    in.n_is_subword = sizes[4];
    result = create_instances(&in, &twister, state, token_itemsize);
done:
    return release_buffers(views, held, result);
}

/* A C-contiguous float32 array (masked_lm_weights), writable. */
static int float32_output(PyObject *obj, Py_buffer *view, const char *name, Py_ssize_t *n)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    if (view->itemsize != 4 || view->format == NULL || strcmp(view->format, "f") != 0) {
        PyErr_Format(PyExc_TypeError, "%s: expected a float32 array (format %.20s)", name,
                     view->format ? view->format : "B");
        PyBuffer_Release(view);
        return -1;
    }
    *n = view->len / 4;
    return 0;
}

static PyObject *py_mask_batch(PyObject *self, PyObject *args)
{
    enum { IN_IDS, IN_LENGTHS, IN_KEYS, IN_WORD_IDS, IN_IS_SUBWORD, OUT_IDS, OUT_POSITIONS, OUT_LABELS, N_INT_ARRAYS };
    static const char *const names[N_INT_ARRAYS] = {"input_ids", "lengths", "keys", "word_ids", "is_subword",
                                                    "out_ids", "out_positions", "out_labels"};
    static const int kinds[N_INT_ARRAYS] = {K_I64, K_I64, K_U64, K_I32, K_U8, K_I64, K_I64, K_I64};
    PyObject *objs[N_INT_ARRAYS], *weights_obj;
    MaskInputs in;
    memset(&in, 0, sizeof in);
    int whole_word;
    long long cls_id, sep_id, mask_id;
    if (!PyArg_ParseTuple(args, "OOOndpLLLOOOOOO:mask_batch", &objs[IN_IDS], &objs[IN_LENGTHS], &objs[IN_KEYS],
                          &in.pred, &in.masked_lm_prob, &whole_word, &cls_id, &sep_id, &mask_id,
                          &objs[IN_WORD_IDS], &objs[IN_IS_SUBWORD], &objs[OUT_IDS], &objs[OUT_POSITIONS],
                          &objs[OUT_LABELS], &weights_obj))
        return NULL;
    in.whole_word = whole_word;
    in.cls_id = cls_id;
    in.sep_id = sep_id;
    in.mask_id = mask_id;
    Py_buffer views[N_INT_ARRAYS + 1];
    Py_ssize_t sizes[N_INT_ARRAYS + 1];
    int held = 0;
    PyObject *result = NULL;
    for (; held < N_INT_ARRAYS; held++)
        if (typed_buffer(objs[held], &views[held], names[held], kinds[held], &sizes[held], held >= OUT_IDS) < 0)
            goto done;
    if (float32_output(weights_obj, &views[held], "out_weights", &sizes[held]) < 0)
        goto done;
    held++;
    in.count = sizes[IN_LENGTHS];
    if (in.pred < 0 || sizes[IN_KEYS] != in.count || sizes[IN_WORD_IDS] == 0 || sizes[IN_IS_SUBWORD] == 0 ||
        (in.count == 0 ? sizes[IN_IDS] != 0 : sizes[IN_IDS] % in.count != 0)) {
        PyErr_SetString(PyExc_ValueError, "mask_batch: need pred >= 0, as many keys as lengths, input_ids of "
                        "len(lengths) rows, and non-empty word_ids and is_subword");
        goto done;
    }
    in.seq = in.count ? sizes[IN_IDS] / in.count : 0;
    if (sizes[OUT_IDS] != sizes[IN_IDS] || sizes[OUT_POSITIONS] != in.count * in.pred ||
        sizes[OUT_LABELS] != in.count * in.pred || sizes[N_INT_ARRAYS] != in.count * in.pred) {
        PyErr_SetString(PyExc_ValueError, "mask_batch: out_ids must be the size of input_ids, out_positions, "
                        "out_labels and out_weights len(lengths) * pred");
        goto done;
    }
    in.tokens = views[IN_IDS].buf;
    in.lengths = views[IN_LENGTHS].buf;
    in.keys = views[IN_KEYS].buf;
    in.word_ids = views[IN_WORD_IDS].buf;
    in.n_word_ids = sizes[IN_WORD_IDS];
    in.is_subword = views[IN_IS_SUBWORD].buf;
    in.n_is_subword = sizes[IN_IS_SUBWORD];
    MaskOutputs out = {views[OUT_IDS].buf, views[OUT_POSITIONS].buf, views[OUT_LABELS].buf, views[N_INT_ARRAYS].buf};
    int status;
    Py_BEGIN_ALLOW_THREADS status = mask_batch(&in, &out);
    Py_END_ALLOW_THREADS
    if (status < 0) {
        PyErr_NoMemory();
        goto done;
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    return release_buffers(views, held, result);
}

static PyObject *py_ngram_xxh32(PyObject *self, PyObject *args)
{
    PyObject *words_obj;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "On:ngram_xxh32", &words_obj, &n))
        return NULL;
    if (n < 1) {
        PyErr_SetString(PyExc_ValueError, "ngram_xxh32: n must be >= 1");
        return NULL;
    }
    PyObject *words = PySequence_Fast(words_obj, "ngram_xxh32: words must be a sequence of str");
    if (words == NULL)
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(words);
    Py_ssize_t windows = count == 0 ? 0 : (count < n ? 1 : count - n + 1);
    const char **texts = PyMem_Malloc((count ? count : 1) * sizeof *texts);
    Py_ssize_t *lengths = PyMem_Malloc((count ? count : 1) * sizeof *lengths);
    PyObject *result = NULL;
    if (texts == NULL || lengths == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *word = PySequence_Fast_GET_ITEM(words, i);
        if (!PyUnicode_Check(word)) {
            PyErr_Format(PyExc_TypeError, "ngram_xxh32: words[%zd] is %.80s, not str", i, Py_TYPE(word)->tp_name);
            goto done;
        }
        texts[i] = PyUnicode_AsUTF8AndSize(word, &lengths[i]); /* kept by the str while `words` holds it */
        if (texts[i] == NULL)
            goto done;
    }
    result = PyBytes_FromStringAndSize(NULL, windows * 4);
    if (result == NULL)
        goto done;
    /* With the GIL held: the UTF-8 buffers belong to the str objects of `words`, which another thread could
     * take out of a list while the GIL was released. */
    if (ngram_xxh32(texts, lengths, count, n, (uint32_t *)PyBytes_AS_STRING(result)) < 0) {
        Py_CLEAR(result);
        PyErr_NoMemory();
    }
done:
    PyMem_Free(texts);
    PyMem_Free(lengths);
    Py_DECREF(words);
    return result;
}

static PyObject *py_minhash(PyObject *self, PyObject *args)
{
    enum { SHINGLES, COUNTS, A, B, OUT, N_ARRAYS };
    static const char *const names[N_ARRAYS] = {"shingles", "counts", "a", "b", "out"};
    static const int kinds[N_ARRAYS] = {K_U32, K_I64, K_U32, K_U32, K_U32};
    PyObject *objs[N_ARRAYS];
    if (!PyArg_ParseTuple(args, "OOOOO:minhash", &objs[SHINGLES], &objs[COUNTS], &objs[A], &objs[B], &objs[OUT]))
        return NULL;
    Py_buffer views[N_ARRAYS];
    Py_ssize_t sizes[N_ARRAYS];
    int held = 0;
    PyObject *result = NULL;
    for (; held < N_ARRAYS; held++)
        if (typed_buffer(objs[held], &views[held], names[held], kinds[held], &sizes[held], held == OUT) < 0)
            goto done;
    const int64_t *counts = views[COUNTS].buf;
    int64_t total = 0;
    for (Py_ssize_t d = 0; d < sizes[COUNTS]; d++) {
        if (counts[d] < 0 || counts[d] > sizes[SHINGLES] - total) {
            total = -1;
            break;
        }
        total += counts[d];
    }
    Py_ssize_t num_perm = sizes[A];
    if (num_perm == 0 || sizes[B] != num_perm || total != sizes[SHINGLES] ||
        sizes[OUT] != sizes[COUNTS] * num_perm) {
        PyErr_SetString(PyExc_ValueError, "minhash: need counts >= 0 that sum to len(shingles), a and b of one "
                        "length > 0, and out of len(counts) * len(a) values");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    minhash_documents(views[SHINGLES].buf, counts, sizes[COUNTS], views[A].buf, views[B].buf, num_perm,
                      views[OUT].buf);
    Py_END_ALLOW_THREADS
    Py_INCREF(Py_None);
    result = Py_None;
done:
    return release_buffers(views, held, result);
}

static PyMethodDef native_methods[] = {
    {"crc32c", (PyCFunction)(void (*)(void))py_crc32c, METH_VARARGS | METH_KEYWORDS,
     "crc32c(data, crc=0) -> int\n\nCRC-32C (Castagnoli) of a bytes-like object, continuing from `crc`."},
    {"encode_instances", (PyCFunction)(void (*)(void))py_encode_instances, METH_VARARGS | METH_KEYWORDS,
     "encode_instances(fmt, seq, pred, tokens, instance_starts, a_lengths, masked_positions, masked_labels,\n"
     "                 mask_starts, is_random_next, first, count) -> bytes\n\n"
     "The framed records of instances [first, first+count) of the compact instance layout, byte for byte\n"
     "what formats.frame(formats.encode_record(fields, fmt), fmt) gives."},
    {"decode_batch", (PyCFunction)(void (*)(void))py_decode_batch, METH_VARARGS | METH_KEYWORDS,
     "decode_batch(payloads, fmt, features, outputs, first_index=0) -> None\n\n"
     "Decode unframed records into row i of each writable output array, by a schema: `features` is a\n"
     "sequence of (name, is_float, length), `outputs` one C-contiguous array per feature of len(payloads) *\n"
     "length values (float32 for a float feature, int32 or int64 otherwise). Any key order, packed or\n"
     "unpacked lists, int64_list or int32_list for an integer feature; other keys are checked, not kept.\n"
     "ValueError 'record {first_index + i} at byte {b}: feature 'name': ...' for the first record that does\n"
     "not fit; the outputs' contents are then unspecified."},
    {"decode_bert_batch", (PyCFunction)(void (*)(void))py_decode_bert_batch, METH_VARARGS | METH_KEYWORDS,
     "decode_bert_batch(payloads, fmt, seq, pred, input_ids, input_mask, segment_ids, masked_lm_positions,\n"
     "                  masked_lm_ids, masked_lm_weights, next_sentence_labels, *, first_index=0) -> None\n\n"
     "decode_batch with BERT's seven features at seq/pred."},
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
    {"mask_batch", (PyCFunction)py_mask_batch, METH_VARARGS,
     "mask_batch(input_ids, lengths, keys, pred, masked_lm_prob, whole_word, cls_id, sep_id, mask_id, word_ids,\n"
     "           is_subword, out_ids, out_positions, out_labels, out_weights) -> None\n\n"
     "bertprep.masking.mask_instance of each row of input_ids (int64, len(lengths) rows), keyed by keys[row]\n"
     "(uint64), into the outputs: out_ids int64 like input_ids, out_positions / out_labels int64 and\n"
     "out_weights float32 of len(lengths) * pred; word_ids int32, is_subword uint8 (MaskingVocab)."},
    {"ngram_xxh32", (PyCFunction)py_ngram_xxh32, METH_VARARGS,
     "ngram_xxh32(words, n) -> bytes\n\n"
     "The xxh32 (seed 0) of each word n-gram of `words` (a sequence of str), joined by single spaces, as UTF-8:\n"
     "len(words) - n + 1 little-endian uint32 values; fewer than n words (but one): one shingle of them all."},
    {"minhash", (PyCFunction)py_minhash, METH_VARARGS,
     "minhash(shingles, counts, a, b, out) -> None\n\n"
     "datasketch 2's MinHash values (\"affine32\") of len(counts) documents into out (uint32, len(counts) *\n"
     "len(a)): document d's value for permutation p is the least a[p] * fmix32(h) + b[p] (uint32) over its\n"
     "counts[d] shingle hashes h (uint32, in order in `shingles`), 0xFFFFFFFF with none; counts int64."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "bertprep._native", "C hot loops of bertprep (optional; every function has a Python twin).",
    -1, native_methods,
};

PyMODINIT_FUNC PyInit__native(void)
{
    const char *crc32c_implementation = crc32c_init();
    PyObject *module = PyModule_Create(&native_module);
    if (module == NULL)
        return NULL;
    if (PyModule_AddStringConstant(module, "crc32c_implementation", crc32c_implementation) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
