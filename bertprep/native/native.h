/* What the C files of bertprep._native share: the types that cross files and
 * the functions each file offers the others.
 *
 *   crc32c.c     CRC-32C                       bertprep/formats/crc32c.py
 *   encode.c     instances -> framed records   bertprep/formats encode_instances_python
 *   decode.c     framed records -> arrays      bertprep/formats decode_batch_python, iter_payloads
 *   mt19937.c    CPython's random.Random       random.random / _randbelow / randint / shuffle (mt19937.h)
 *   instances.c  the reference's instances     bertprep/instances.py
 *   masking.c    dynamic masks of a batch      bertprep/masking.py mask_instance (the spec), _mask_batch_numpy
 *   minhash.c    shingle hashes, MinHashes     bertprep/stages/dedup.py ngram_hashes_python, minhashes_numpy
 *   module.c     the Python entry points: argument parsing, buffers, the method table
 *
 * Every entry point has a pure-Python twin that gives the same result; the
 * extension is optional and only buys speed. CPython C API and the buffer
 * protocol only. wordpiece.c, beside these, is the separate extension
 * bertprep._wordpiece and shares nothing with them.
 */
#ifndef BERTPREP_NATIVE_H
#define BERTPREP_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#if PY_BIG_ENDIAN
#error "bertprep._native assumes a little-endian machine (the record formats are little-endian)"
#endif

/* ------------------------------------------------------------------ */
/* crc32c.c                                                            */
/* ------------------------------------------------------------------ */

/* Builds the tables and picks the implementation; returns its name ("sse4.2" or "slicing-by-8"). */
const char *crc32c_init(void);
/* crc32c of data[0:n] continuing from a previous (finalized) value, like the Python twin. */
uint32_t crc32c_update(uint32_t crc, const void *data, size_t n);
/* TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
uint32_t masked_crc32c(const void *data, size_t n);

/* ------------------------------------------------------------------ */
/* Integer arrays of any width and signedness (module.c fills them)    */
/* ------------------------------------------------------------------ */

enum { K_I8, K_U8, K_I16, K_U16, K_I32, K_U32, K_I64, K_U64 };

typedef struct {
    Py_buffer view;
    int held;
    const char *data;
    Py_ssize_t n;
    int kind;
} IntArray;

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
/* Record formats and the BERT features                                */
/* ------------------------------------------------------------------ */

enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_LEN = 2, WIRE_FIXED32 = 5 };

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

/* In bertprep.formats.FEATURE_NAMES order (the reference's insertion order); defined in encode.c. */
extern const char *const FEATURE_NAME[N_FEATURES];

static inline Py_ssize_t feature_length(int feature, Py_ssize_t seq, Py_ssize_t pred)
{
    switch (feature) {
    case F_INPUT_IDS: case F_INPUT_MASK: case F_SEGMENT_IDS: return seq;
    case F_NEXT_SENTENCE_LABELS: return 1;
    default: return pred;
    }
}

/* ------------------------------------------------------------------ */
/* encode.c                                                            */
/* ------------------------------------------------------------------ */

/* The arrays of bertprep.instances.Instances, in encode_instances' argument order. */
enum { A_TOKENS, A_INSTANCE_STARTS, A_A_LENGTHS, A_MASKED_POSITIONS, A_MASKED_LABELS, A_MASK_STARTS,
       A_IS_RANDOM_NEXT, N_INSTANCE_ARRAYS };

/* The framed records of instances [first, first+count) as bytes; NULL with an exception set. */
PyObject *encode_instances(int fmt, Py_ssize_t seq, Py_ssize_t pred, const IntArray arrays[N_INSTANCE_ARRAYS],
                           Py_ssize_t first, Py_ssize_t count);

/* ------------------------------------------------------------------ */
/* decode.c                                                            */
/* ------------------------------------------------------------------ */

/* One feature of a batch's schema and the array its values go to: record r's
 * `length` values at row_base + r * length * itemsize. */
typedef struct {
    const char *name; /* UTF-8, name_size bytes */
    size_t name_size;
    int is_float;      /* float_list into float32; else int64_list or int32_list into int32 or int64 */
    Py_ssize_t length; /* values per record */
    char *row_base;
    int itemsize;
    Py_buffer view; /* the array's buffer, while held */
    int held;
} Output;

/* Why a record does not decode, and the byte of its payload that shows it; formatted without the GIL. */
typedef struct {
    size_t offset;
    char message[512];
} DecodeError;

/* Decodes payloads[i] into row i of each output, without the GIL. Returns -1 when every record
 * fits, the index of the first that does not (err says why), or -2 with an exception set. */
Py_ssize_t decode_records(const Py_buffer *payloads, Py_ssize_t n, int fmt, const Output *outputs, int n_outputs,
                          DecodeError *err);

/* split_records' result tuple (payloads, consumed, needed, error) for buf[0:len]; NULL on exception. */
PyObject *split_records(const uint8_t *buf, size_t len, int fmt, int verify, long long first_index,
                        long long first_offset, int final);

/* ------------------------------------------------------------------ */
/* mt19937.c: the Twister and its draws, in mt19937.h                  */
/* ------------------------------------------------------------------ */

#include "mt19937.h"

/* ------------------------------------------------------------------ */
/* instances.c                                                         */
/* ------------------------------------------------------------------ */

/* What create_instances reads (bertprep.instances: Corpus after the document
 * shuffle, InstanceParams, MaskingVocab); module.c fills it from the arguments. */
typedef struct {
    const int32_t *tokens;
    Py_ssize_t n_tokens;
    const int64_t *sentence_starts; /* n_sentences + 1 offsets into tokens */
    Py_ssize_t n_sentences;
    const int64_t *document_starts; /* n_documents + 1 offsets into sentence_starts */
    Py_ssize_t n_documents;
    Py_ssize_t max_seq_length, max_predictions_per_seq, dupe_factor;
    double short_seq_prob, masked_lm_prob;
    int whole_word_mask;
    int32_t cls_id, sep_id, mask_id;
    const int32_t *word_ids;
    Py_ssize_t n_word_ids;
    const uint8_t *is_subword;
    Py_ssize_t n_is_subword;
} InstanceInputs;

/* The instances of `inputs` drawn from a copy of `twister`, as create_instances' result tuple, whose
 * first item is the generator's state after the last draw (version and gauss of `state`); NULL on exception. */
PyObject *create_instances(const InstanceInputs *inputs, const Twister *twister, PyObject *state,
                           Py_ssize_t token_itemsize);

/* ------------------------------------------------------------------ */
/* masking.c                                                           */
/* ------------------------------------------------------------------ */

/* A batch of unmasked instances and what masking needs (bertprep.masking, MaskingVocab). */
typedef struct {
    const int64_t *tokens;  /* count * seq */
    const int64_t *lengths; /* count: real tokens of each row */
    const uint64_t *keys;   /* count: masking.instance_keys */
    Py_ssize_t count, seq, pred;
    double masked_lm_prob;
    int whole_word;
    int64_t cls_id, sep_id, mask_id;
    const int32_t *word_ids;
    Py_ssize_t n_word_ids; /* > 0 */
    const uint8_t *is_subword;
    Py_ssize_t n_is_subword; /* > 0 */
} MaskInputs;

typedef struct {
    int64_t *input_ids;           /* count * seq */
    int64_t *positions, *labels;  /* count * pred */
    float *weights;               /* count * pred */
} MaskOutputs;

/* masking.mask_batch's values into `out`, without the GIL; -1 when out of memory. */
int mask_batch(const MaskInputs *in, const MaskOutputs *out);

/* ------------------------------------------------------------------ */
/* minhash.c                                                           */
/* ------------------------------------------------------------------ */

/* XXH32 (seed 0) of data[0:len]. */
uint32_t xxh32(const unsigned char *data, size_t len);
/* out[i]: xxh32 of words[i : i + n] (UTF-8, lengths[i] bytes each) joined by single spaces, for each of the
 * count - n + 1 windows; fewer than n words (but one): one shingle of them all; none: nothing. -1 when out
 * of memory. */
int ngram_xxh32(const char *const *words, const Py_ssize_t *lengths, Py_ssize_t count, Py_ssize_t n, uint32_t *out);
/* out[d * num_perm + p]: the least a[p] * fmix32(h) + b[p] over document d's shingles h (counts[d] of them,
 * in order in `shingles`), 0xFFFFFFFF for a document with none. */
void minhash_documents(const uint32_t *shingles, const int64_t *counts, Py_ssize_t documents, const uint32_t *a,
                       const uint32_t *b, Py_ssize_t num_perm, uint32_t *out);

#endif
