/* BERT tokenization of pure-ASCII lines, exactly as google-research/bert's
 * FullTokenizer (BasicTokenizer + WordpieceTokenizer) does it.
 *
 * For ASCII text every step of the reference is byte-local: clean text (drop
 * control characters other than \t \n \r, which become spaces), optional
 * lower-casing (accent stripping is a no-op), whitespace split, a split
 * around every ASCII punctuation character, then greedy longest-match
 * WordPiece with "##" continuation pieces and [UNK] for words over 200
 * characters or with an unmatchable piece. Lines holding any non-ASCII
 * character go to HF tokenizers instead (bertprep/tokenization.py LineTokenizer).
 *
 * The extension bertprep._wordpiece, built from this file alone. Mirrors
 * bertprep/tokenization.py build_tokenizer (HF tokenizers' BertNormalizer,
 * BertPreTokenizer and WordPiece with max_input_chars_per_word=200), itself
 * checked against the reference; equal token for token by
 * tests/test_tokenization.py::test_native_ascii_path_matches_hf_tokenizers
 * (golden corpus, wt2.txt and edge lines, cased and uncased).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_WORD 200 /* the reference's max_input_chars_per_word */

typedef struct {
    char *key; /* owned */
    Py_ssize_t len;
    int32_t id;
} Slot;

typedef struct {
    Slot *slots;
    size_t mask; /* capacity - 1, capacity a power of two */
    int32_t unk_id;
    int lower_case;
} Table;

static uint64_t hash_bytes(const char *s, Py_ssize_t n) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (Py_ssize_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static int32_t table_get(const Table *t, const char *s, Py_ssize_t n) {
    size_t i = hash_bytes(s, n) & t->mask;
    for (;;) {
        const Slot *slot = &t->slots[i];
        if (!slot->key) return -1;
        if (slot->len == n && memcmp(slot->key, s, n) == 0) return slot->id;
        i = (i + 1) & t->mask;
    }
}

static int table_put(Table *t, const char *s, Py_ssize_t n, int32_t id) {
    size_t i = hash_bytes(s, n) & t->mask;
    for (;;) {
        Slot *slot = &t->slots[i];
        if (!slot->key) {
            slot->key = malloc(n ? n : 1);
            if (!slot->key) return -1;
            memcpy(slot->key, s, n);
            slot->len = n;
            slot->id = id;
            return 0;
        }
        if (slot->len == n && memcmp(slot->key, s, n) == 0) {
            slot->id = id; /* a repeated token: the last line wins, as in the reference's dict */
            return 0;
        }
        i = (i + 1) & t->mask;
    }
}

static void table_free(PyObject *capsule) {
    Table *t = PyCapsule_GetPointer(capsule, "bertprep._wordpiece.Table");
    if (!t) return;
    for (size_t i = 0; i <= t->mask; i++) free(t->slots[i].key);
    free(t->slots);
    free(t);
}

/* build(tokens: list[str], ids: list[int], unk_id: int, lower_case: bool) -> capsule */
static PyObject *build(PyObject *self, PyObject *args) {
    PyObject *tokens, *ids;
    int unk_id, lower_case;
    if (!PyArg_ParseTuple(args, "O!O!ip", &PyList_Type, &tokens, &PyList_Type, &ids, &unk_id, &lower_case))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(tokens);
    if (PyList_GET_SIZE(ids) != n) {
        PyErr_SetString(PyExc_ValueError, "tokens and ids differ in length");
        return NULL;
    }
    Table *t = calloc(1, sizeof(Table));
    if (!t) return PyErr_NoMemory();
    size_t capacity = 16;
    while (capacity < (size_t)n * 2 + 16) capacity <<= 1;
    t->slots = calloc(capacity, sizeof(Slot));
    if (!t->slots) { free(t); return PyErr_NoMemory(); }
    t->mask = capacity - 1;
    t->unk_id = unk_id;
    t->lower_case = lower_case;
    PyObject *capsule = PyCapsule_New(t, "bertprep._wordpiece.Table", table_free);
    if (!capsule) { free(t->slots); free(t); return NULL; }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len;
        const char *s = PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(tokens, i), &len);
        if (!s) { Py_DECREF(capsule); return NULL; }
        long id = PyLong_AsLong(PyList_GET_ITEM(ids, i));
        if (id == -1 && PyErr_Occurred()) { Py_DECREF(capsule); return NULL; }
        if (table_put(t, s, len, (int32_t)id) < 0) { Py_DECREF(capsule); return PyErr_NoMemory(); }
    }
    return capsule;
}

typedef struct {
    int32_t *data;
    Py_ssize_t len, cap;
} Buffer;

static int push(Buffer *b, int32_t v) {
    if (b->len == b->cap) {
        Py_ssize_t cap = b->cap ? b->cap * 2 : 1 << 16;
        int32_t *data = realloc(b->data, cap * sizeof(int32_t));
        if (!data) return -1;
        b->data = data;
        b->cap = cap;
    }
    b->data[b->len++] = v;
    return 0;
}

static int is_ascii_punct(unsigned char c) {
    return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
}

/* WordPiece of one word (already cleaned, lower-cased, no spaces, no punctuation split needed). */
static int wordpiece(const Table *t, const char *word, Py_ssize_t n, Buffer *out) {
    if (n > MAX_WORD) return push(out, t->unk_id);
    char piece[MAX_WORD + 2];
    Py_ssize_t mark = out->len;
    Py_ssize_t start = 0;
    while (start < n) {
        Py_ssize_t end = n;
        int32_t found = -1;
        while (start < end) {
            Py_ssize_t len = end - start;
            if (start > 0) {
                piece[0] = '#';
                piece[1] = '#';
                memcpy(piece + 2, word + start, len);
                found = table_get(t, piece, len + 2);
            } else {
                found = table_get(t, word + start, len);
            }
            if (found >= 0) break;
            end--;
        }
        if (found < 0) { /* an unmatchable piece makes the whole word [UNK] */
            out->len = mark;
            return push(out, t->unk_id);
        }
        if (push(out, found) < 0) return -1;
        start = end;
    }
    return 0;
}

/* tokenize(table, lines: list[str]) -> (tokens: bytes of int32, counts: bytes of int32)
 * Every line must be ASCII (the caller routes the others to HF tokenizers). */
static PyObject *tokenize(PyObject *self, PyObject *args) {
    PyObject *capsule, *lines;
    if (!PyArg_ParseTuple(args, "OO!", &capsule, &PyList_Type, &lines)) return NULL;
    Table *t = PyCapsule_GetPointer(capsule, "bertprep._wordpiece.Table");
    if (!t) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(lines);
    Buffer out = {0};
    int32_t *counts = malloc((n ? n : 1) * sizeof(int32_t));
    char *word = NULL;
    Py_ssize_t word_cap = 0;
    if (!counts) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *line = PyList_GET_ITEM(lines, i);
        if (!PyUnicode_Check(line) || !PyUnicode_IS_ASCII(line)) {
            PyErr_Format(PyExc_ValueError, "line %zd is not an ASCII str", i);
            goto fail;
        }
        Py_ssize_t len = PyUnicode_GET_LENGTH(line);
        const unsigned char *s = PyUnicode_1BYTE_DATA(line);
        if (len + 1 > word_cap) {
            word_cap = len + 1;
            char *w = realloc(word, word_cap);
            if (!w) { PyErr_NoMemory(); goto fail; }
            word = w;
        }
        Py_ssize_t before = out.len;
        Py_ssize_t wlen = 0;
        for (Py_ssize_t j = 0; j <= len; j++) {
            unsigned char c = j < len ? s[j] : ' ';
            int space = c == ' ' || c == '\t' || c == '\n' || c == '\r';
            int control = !space && (c < 32 || c == 127);
            if (control) continue; /* _clean_text drops it: neighbours join */
            if (space || is_ascii_punct(c)) {
                if (wlen && wordpiece(t, word, wlen, &out) < 0) { PyErr_NoMemory(); goto fail; }
                wlen = 0;
                if (!space) { /* punctuation is a word of its own */
                    char p = (char)c;
                    if (wordpiece(t, &p, 1, &out) < 0) { PyErr_NoMemory(); goto fail; }
                }
                continue;
            }
            word[wlen++] = (t->lower_case && c >= 'A' && c <= 'Z') ? (char)(c + 32) : (char)c;
        }
        counts[i] = (int32_t)(out.len - before);
    }
    free(word);
    PyObject *tokens = PyBytes_FromStringAndSize((const char *)out.data, out.len * (Py_ssize_t)sizeof(int32_t));
    PyObject *count_bytes = PyBytes_FromStringAndSize((const char *)counts, n * (Py_ssize_t)sizeof(int32_t));
    free(out.data);
    free(counts);
    if (!tokens || !count_bytes) { Py_XDECREF(tokens); Py_XDECREF(count_bytes); return NULL; }
    return Py_BuildValue("(NN)", tokens, count_bytes);
fail:
    free(word);
    free(out.data);
    free(counts);
    return NULL;
}

static PyMethodDef methods[] = {
    {"build", build, METH_VARARGS, "build(tokens, ids, unk_id, lower_case) -> vocab table"},
    {"tokenize", tokenize, METH_VARARGS, "tokenize(table, ascii_lines) -> (int32 token bytes, int32 count bytes)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_wordpiece", "Exact BERT tokenization of ASCII lines", -1, methods};

PyMODINIT_FUNC PyInit__wordpiece(void) { return PyModule_Create(&module); }
