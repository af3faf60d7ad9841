/* Record reading: framed records split into payloads (split_records), and
 * payloads decoded into the rows of NumPy arrays (decode_bert_records), the
 * protobuf walked by hand with every length checked against its message.
 *
 * Mirrors bertprep/formats/__init__.py: decode_bert_batch_python (over
 * protowire.iter_fields / decode_list / decode_feature_map) and the codecs'
 * iter_payloads (tfrecord.py, ofrecord.py), messages included; equal by
 * tests/test_native.py::test_decode_bert_batch_reads_golden_files,
 * test_decode_bert_batch_any_key_order_and_list_encoding,
 * test_decode_bert_batch_errors_name_record_and_feature,
 * test_split_records_matches_the_python_reader and
 * test_read_batches_errors_are_identical_on_both_paths.
 */
#include "native.h"

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

/* The message of a record that does not decode; -1 to return. */
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

Py_ssize_t decode_bert_records(const Py_buffer *payloads, Py_ssize_t n, int fmt, Output *outputs,
                               DecodeError *err)
{
    Py_ssize_t failed = -1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        if (decode_record((const uint8_t *)payloads[i].buf, (size_t)payloads[i].len, fmt, outputs, i, err) < 0) {
            failed = i;
            break;
        }
    }
    Py_END_ALLOW_THREADS
    return failed;
}

/* Whole framed records off the front of buf[0:len], TFRecord CRCs checked when `verify`: the
 * payloads, the bytes they took, the framed size of an incomplete next record (needed), and the
 * first framing error's message, worded as the Python readers word it (tfrecord.py, ofrecord.py). */
PyObject *split_records(const uint8_t *buf, size_t len, int fmt, int verify, long long first_index,
                        long long first_offset, int final)
{
    PyObject *payloads = NULL, *error = NULL, *result = NULL;
    payloads = PyList_New(0);
    if (payloads == NULL)
        goto done;
    size_t pos = 0, needed = 0;
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
    return result;
}
