/* Record reading: framed records split into payloads (split_records), and
 * payloads decoded by a schema into the rows of NumPy arrays (decode_records),
 * the protobuf walked by hand with every length checked against its message.
 *
 * Mirrors bertprep/formats/__init__.py: decode_batch_python (which
 * decode_bert_batch_python calls with the BERT schema), messages and byte
 * offsets included, and the codecs' iter_payloads (tfrecord.py, ofrecord.py).
 * Equal by tests/test_native.py::test_decode_batch_reads_golden_files (also
 * decode_bert_batch), test_decode_batch_made_up_schema,
 * test_decode_batch_errors_name_record_byte_and_feature (every message),
 * test_decode_batch_fuzzed_records_agree_with_the_twin (flipped bits, cuts,
 * inserted, overwritten and deleted bytes in G1 records),
 * test_decode_batch_every_prefix_of_a_record,
 * test_decode_bert_batch_any_key_order_and_list_encoding,
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
static const char *const LIST_FIELDS[2] = {
    "field 1 (bytes_list), 2 (float_list) or 3 (int64_list)",
    "field 1 (bytes_list), 2 (float_list), 3 (double_list), 4 (int32_list) or 5 (int64_list)",
};

/* The message of a record that does not decode, and the byte it is about; -1 to return. */
static int fail(DecodeError *err, size_t offset, const char *format, ...)
{
    va_list ap;
    va_start(ap, format);
    vsnprintf(err->message, sizeof err->message, format, ap);
    va_end(ap);
    err->offset = offset;
    return -1;
}

/* "feature 'name'" for a plain name, else its size: the same words as the Python twin's. */
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

/* Prefix the error with the feature it is about; -1 to return. */
static int name_feature(DecodeError *err, const uint8_t *key, size_t n)
{
    char inner[sizeof err->message], name[128];
    memcpy(inner, err->message, sizeof inner);
    describe_key(key, n, name, sizeof name);
    snprintf(err->message, sizeof err->message, "%s: %s", name, inner);
    return -1;
}

/* The protobuf field walker: the checks of the Python twin's _fields, in its order. */
typedef struct {
    const uint8_t *buf;
    size_t pos, end;
} Cursor;

typedef struct {
    uint64_t field;
    int wire;
    size_t at;          /* the tag's first byte */
    uint64_t value;     /* varint */
    size_t start, stop; /* the value: varint, length-delimited payload, fixed32, fixed64 */
} Field;

static int read_varint(const uint8_t *buf, size_t *pos, size_t end, uint64_t *out, DecodeError *err)
{
    uint64_t result = 0;
    int shift = 0;
    size_t p = *pos;
    for (;;) {
        if (p >= end)
            return fail(err, *pos, "truncated varint (its message ends at byte %zu), expected a final byte below 0x80",
                        end);
        uint8_t b = buf[p++];
        if (shift < 64)
            result |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80)
            break;
        shift += 7;
        if (shift > 63)
            return fail(err, *pos, "varint longer than 10 bytes, expected at most 10");
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
    f->at = c->pos;
    if (read_varint(c->buf, &c->pos, c->end, &tag, err) < 0)
        return -1;
    f->field = tag >> 3;
    f->wire = (int)(tag & 7);
    if (f->field == 0)
        return fail(err, f->at, "field number 0, expected 1 or more");
    f->start = c->pos;
    switch (f->wire) {
    case WIRE_VARINT:
        return read_varint(c->buf, &c->pos, c->end, &f->value, err) < 0 ? -1 : 1;
    case WIRE_LEN: {
        uint64_t length = 0;
        if (read_varint(c->buf, &c->pos, c->end, &length, err) < 0)
            return -1;
        if (length > c->end - c->pos)
            return fail(err, f->at, "field %llu of %llu bytes runs past the end of its message, expected at most %zu",
                        (unsigned long long)f->field, (unsigned long long)length, c->end - c->pos);
        f->start = c->pos;
        f->stop = c->pos + (size_t)length;
        c->pos = f->stop;
        return 1;
    }
    case WIRE_FIXED32:
    case WIRE_FIXED64: {
        size_t size = f->wire == WIRE_FIXED32 ? 4 : 8;
        if (c->end - c->pos < size)
            return fail(err, f->at, "fixed%zu field %llu cut off after %zu bytes, expected %zu", 8 * size,
                        (unsigned long long)f->field, c->end - c->pos, size);
        f->stop = c->pos += size;
        return 1;
    }
    default:
        return fail(err, f->at, "wire type %d for field %llu, expected 0, 1, 2 or 5", f->wire,
                    (unsigned long long)f->field);
    }
}

/* Where the values of one list go: an output row, or nowhere (validation only). */
typedef struct {
    void *row;          /* NULL: only validate */
    int itemsize;       /* 4 or 8 (ints), 4 (float32) */
    Py_ssize_t length;  /* expected number of values */
    Py_ssize_t count;   /* values seen */
    int out_of_range;   /* a value did not fit an int32 row */
    int64_t bad_value;  /* the first such value */
    size_t bad_at;      /* and its first byte */
} Sink;

/* The stored value as the list's kind reads it (the Python twin's _signed). */
static inline int64_t to_signed(uint64_t v, int kind)
{
    if (kind == LIST_INT32 && v >= (1ull << 31) && v < (1ull << 63))
        return (int64_t)(v - (1ull << 32));
    return (int64_t)v;
}

static inline void sink_int(Sink *s, int64_t v, size_t at)
{
    if (s->row != NULL && s->count < s->length) {
        if (s->itemsize == 8) {
            ((int64_t *)s->row)[s->count] = v;
        } else {
            if ((v < INT32_MIN || v > INT32_MAX) && !s->out_of_range) {
                s->out_of_range = 1;
                s->bad_value = v;
                s->bad_at = at;
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

/* One list message buf[start:stop] of `kind` (the twin's _list_values), values into `sink`. */
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
                    return fail(err, f.at, "packed %s_list of %zu bytes, expected a multiple of %zu",
                                LIST_KIND_NAME[kind], f.stop - f.start, item_size);
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
                        size_t at = p;
                        uint64_t v = 0;
                        if (buf[p] < 0x80) {
                            v = buf[p++];
                        } else if (read_varint(buf, &p, f.stop, &v, err) < 0) {
                            return -1;
                        }
                        sink_int(sink, to_signed(v, kind), at);
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
            sink_int(sink, to_signed(f.value, kind), f.start);
        } else {
            return fail(err, f.at, "wire type %d in the %s_list, expected %s", f.wire, LIST_KIND_NAME[kind],
                        floats ? "2, 5 or 1" : "2 or 0");
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

/* Per record: what was found for each feature of the schema (the last entry of its name wins). */
typedef struct {
    int present;
    int kind;
    size_t list_at; /* the tag of its (last) list */
    Py_ssize_t count;
    int out_of_range;
    int64_t bad_value;
    size_t bad_at;
} Found;

static int output_of_key(const Output *outputs, int n_outputs, const uint8_t *key, size_t n)
{
    for (int k = 0; k < n_outputs; k++)
        if (outputs[k].name_size == n && memcmp(outputs[k].name, key, n) == 0)
            return k;
    return -1;
}

static inline int kind_accepted(int is_float, int kind)
{
    return is_float ? kind == LIST_FLOAT : kind == LIST_INT64 || kind == LIST_INT32;
}

/* One map<string, Feature> (the twin's _feature_map) into the outputs' row `record`. */
static int decode_map(const uint8_t *buf, size_t start, size_t end, int fmt, const Output *outputs, int n_outputs,
                      Py_ssize_t record, Found *found, DecodeError *err)
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
                    return fail(err, f.at, "feature name is not UTF-8, expected UTF-8 text");
                have_key = 1;
                key_start = f.start;
                key_stop = f.stop;
            } else if (f.field == 2 && f.wire == WIRE_LEN) {
                have_feature = 1;
                feature_start = f.start;
                feature_stop = f.stop;
            }
        }
        const uint8_t *key = buf + key_start;
        size_t key_size = key_stop - key_start;
        if (re < 0)
            return have_key ? name_feature(err, key, key_size) : -1;
        if (!have_key)
            return fail(err, entry.at, "map entry without a key, expected field 1 (the feature name)");
        int k = output_of_key(outputs, n_outputs, key, key_size);
        int kind = LIST_NONE;
        size_t list_at = 0;
        Sink sink = {0};
        if (have_feature) {
            Cursor fc = {buf, feature_start, feature_stop};
            Field list = {0};
            int rl;
            while ((rl = next_field(&fc, &list, err)) == 1) {
                int list_kind = list_kind_of_field(fmt, list.field);
                if (list_kind == LIST_NONE) {
                    fail(err, list.at, "unknown list field %llu, expected %s", (unsigned long long)list.field,
                         LIST_FIELDS[fmt]);
                    return name_feature(err, key, key_size);
                }
                if (list.wire != WIRE_LEN) {
                    fail(err, list.at, "list field %llu of wire type %d, expected wire type 2",
                         (unsigned long long)list.field, list.wire);
                    return name_feature(err, key, key_size);
                }
                kind = list_kind;
                list_at = list.at;
                memset(&sink, 0, sizeof sink);
                if (k >= 0 && kind_accepted(outputs[k].is_float, kind)) {
                    const Output *o = &outputs[k];
                    sink.row = o->row_base + (size_t)record * (size_t)o->length * (size_t)o->itemsize;
                    sink.itemsize = o->itemsize;
                    sink.length = o->length;
                }
                if (decode_list(buf, list.start, list.stop, kind, &sink, err) < 0)
                    return name_feature(err, key, key_size);
            }
            if (rl < 0)
                return name_feature(err, key, key_size);
        }
        if (kind == LIST_NONE) {
            fail(err, entry.at, "holds no list, expected %s", LIST_FIELDS[fmt]);
            return name_feature(err, key, key_size);
        }
        if (k >= 0) {
            Found *s = &found[k];
            s->present = 1;
            s->kind = kind;
            s->list_at = list_at;
            s->count = sink.count;
            s->out_of_range = sink.out_of_range;
            s->bad_value = sink.bad_value;
            s->bad_at = sink.bad_at;
        }
    }
    return r;
}

/* One payload into row `record` of every output; the checks of the Python twin, in its order. */
static int decode_record(const uint8_t *buf, size_t n, int fmt, const Output *outputs, int n_outputs,
                         Py_ssize_t record, Found *found, DecodeError *err)
{
    memset(found, 0, sizeof(Found) * (size_t)n_outputs);
    if (fmt == FMT_TFRECORD) {
        Cursor c = {buf, 0, n};
        Field f = {0};
        int r;
        while ((r = next_field(&c, &f, err)) == 1)
            if (f.field == 1 && f.wire == WIRE_LEN &&
                decode_map(buf, f.start, f.stop, fmt, outputs, n_outputs, record, found, err) < 0)
                return -1;
        if (r < 0)
            return -1;
    } else if (decode_map(buf, 0, n, fmt, outputs, n_outputs, record, found, err) < 0) {
        return -1;
    }
    for (int k = 0; k < n_outputs; k++) {
        const Output *o = &outputs[k];
        const Found *s = &found[k];
        const char *expected = o->is_float ? "float_list" : "int64_list or int32_list";
        if (!s->present)
            fail(err, n, "missing, expected %s %s of %zd values", o->is_float ? "a" : "an", expected, o->length);
        else if (!kind_accepted(o->is_float, s->kind))
            fail(err, s->list_at, "%s_list, expected %s", LIST_KIND_NAME[s->kind], expected);
        else if (s->count != o->length)
            fail(err, s->list_at, "%zd values, expected %zd", s->count, o->length);
        else if (s->out_of_range)
            fail(err, s->bad_at, "value %lld does not fit int32, expected -2147483648 to 2147483647",
                 (long long)s->bad_value);
        else
            continue;
        return name_feature(err, (const uint8_t *)o->name, o->name_size);
    }
    return 0;
}

Py_ssize_t decode_records(const Py_buffer *payloads, Py_ssize_t n, int fmt, const Output *outputs, int n_outputs,
                          DecodeError *err)
{
    Found *found = PyMem_Malloc(sizeof(Found) * (size_t)(n_outputs ? n_outputs : 1));
    if (found == NULL) {
        PyErr_NoMemory();
        return -2;
    }
    Py_ssize_t failed = -1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        if (decode_record((const uint8_t *)payloads[i].buf, (size_t)payloads[i].len, fmt, outputs, n_outputs, i,
                          found, err) < 0) {
            failed = i;
            break;
        }
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(found);
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
