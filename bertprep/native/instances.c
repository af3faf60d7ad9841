/* The reference's instances in C: create_instances_from_document and
 * create_masked_lm_predictions of google-research/bert over a corpus of token
 * ids, dupe_factor passes over the (already shuffled) documents, then the
 * shuffle of all instances, every draw taken from the Mersenne Twister of
 * mt19937.c in the order Python takes it.
 *
 * Mirrors bertprep/instances.py (_create_python: _instances_from_document,
 * _masked_lm_predictions, _truncate_seq_pair, _InstanceCollector.build); equal,
 * instance for instance and in the final generator state, by
 * tests/test_native.py::test_create_instances_matches_python_on_golden_corpus,
 * test_create_instances_matches_python_on_odd_corpora and
 * test_create_instances_matches_python_on_wt2, and against the reference's own
 * records by test_create_instances_golden_g1_end_to_end.
 */
#include "native.h"

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
    InstanceInputs in;
    /* scratch, max_seq_length each */
    int32_t *sequence, *output, *candidate_index, *candidate_start, *candidate_order;
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

/* rng.randint(a, b), its error message in c->error */
static int creator_randint(Creator *c, int64_t a, int64_t b, int64_t *out)
{
    return mt_randint(&c->twister, a, b, out, c->error, sizeof c->error);
}

/* create_masked_lm_predictions over c->sequence[0:n]; appends the instance. */
static int mask_and_emit(Creator *c, Py_ssize_t n, Py_ssize_t a_length, int is_random_next)
{
    const int32_t *tokens = c->sequence;
    Py_ssize_t n_candidates = 0, n_indices = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t token = tokens[i];
        if (token == c->in.cls_id || token == c->in.sep_id)
            continue;
        if (c->in.whole_word_mask && n_candidates > 0 && token >= 0 && token < c->in.n_is_subword &&
            c->in.is_subword[token]) {
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
    memset(c->masked, 0, (size_t)c->in.max_seq_length);
    /* Python's round(): half to even, which rint() does in the default rounding mode */
    Py_ssize_t num_to_predict = (Py_ssize_t)rint((double)n * c->in.masked_lm_prob);
    if (num_to_predict < 1)
        num_to_predict = 1;
    if (num_to_predict > c->in.max_predictions_per_seq)
        num_to_predict = c->in.max_predictions_per_seq;
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
                replacement = c->in.mask_id;
            } else if (mt_random(&c->twister) < 0.5) {
                replacement = tokens[index];
            } else {
                int64_t w;
                if (creator_randint(c, 0, c->in.n_word_ids - 1, &w) < 0)
                    return -1;
                replacement = c->in.word_ids[w];
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
    return (Py_ssize_t)(c->in.document_starts[d + 1] - c->in.document_starts[d]);
}

/* create_instances_from_document for document d. */
static int instances_from_document(Creator *c, Py_ssize_t d)
{
    const Py_ssize_t first_sentence = (Py_ssize_t)c->in.document_starts[d];
    const Py_ssize_t n_sentences = sentences_in(c, d);
    const int64_t *ss = c->in.sentence_starts;
    const int64_t max_num_tokens = c->in.max_seq_length - 3;
    int64_t target_seq_length = max_num_tokens;
    if (mt_random(&c->twister) < c->in.short_seq_prob && creator_randint(c, 2, max_num_tokens, &target_seq_length) < 0)
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
            if (chunk_length >= 2 && creator_randint(c, 1, chunk_length - 1, &a_end) < 0)
                return -1;
            /* tokens of consecutive sentences are consecutive: A and B are ranges of c->in.tokens */
            int64_t a_lo = ss[first_sentence + chunk_start], a_hi = ss[first_sentence + chunk_start + a_end];
            int64_t b_lo, b_hi;
            int is_random_next;
            if (chunk_length == 1 || mt_random(&c->twister) < 0.5) {
                is_random_next = 1;
                int64_t target_b_length = target_seq_length - (a_hi - a_lo);
                int64_t random_document = 0;
                for (int tries = 0; tries < 10; tries++) {
                    if (creator_randint(c, 0, c->in.n_documents - 1, &random_document) < 0)
                        return -1;
                    if (random_document != d)
                        break;
                }
                Py_ssize_t r_first = (Py_ssize_t)c->in.document_starts[random_document];
                Py_ssize_t r_sentences = sentences_in(c, (Py_ssize_t)random_document);
                int64_t random_start;
                if (creator_randint(c, 0, r_sentences - 1, &random_start) < 0)
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
            seq[0] = c->in.cls_id;
            memcpy(seq + 1, c->in.tokens + a_lo, sizeof(int32_t) * (size_t)la);
            seq[1 + la] = c->in.sep_id;
            memcpy(seq + 2 + la, c->in.tokens + b_lo, sizeof(int32_t) * (size_t)lb);
            seq[2 + la + lb] = c->in.sep_id;
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
    for (Py_ssize_t pass = 0; pass < c->in.dupe_factor; pass++)
        for (Py_ssize_t d = 0; d < c->in.n_documents; d++)
            if (instances_from_document(c, d) < 0)
                return -1;
    return 0;
}

PyObject *create_instances(const InstanceInputs *inputs, const Twister *twister, PyObject *state,
                           Py_ssize_t token_itemsize)
{
    Creator c;
    memset(&c, 0, sizeof c);
    c.in = *inputs;
    c.twister = *twister;
    PyObject *result = NULL;
    {
        const InstanceInputs *in = &c.in;
        Py_ssize_t n_sentences = in->n_sentences;
        int ok = in->n_documents >= 0 && n_sentences >= 0 && in->document_starts[0] == 0 &&
                 in->document_starts[in->n_documents] == n_sentences && in->sentence_starts[0] == 0 &&
                 in->sentence_starts[n_sentences] == in->n_tokens;
        for (Py_ssize_t d = 0; ok && d < in->n_documents; d++)
            ok = in->document_starts[d] <= in->document_starts[d + 1];
        for (Py_ssize_t s = 0; ok && s < n_sentences; s++)
            ok = in->sentence_starts[s] <= in->sentence_starts[s + 1];
        if (!ok) {
            PyErr_SetString(PyExc_ValueError, "inconsistent corpus: sentence_starts and document_starts must be "
                                              "ascending offsets from 0 to the number of tokens / sentences");
            goto done;
        }
    }

    size_t seq = (size_t)c.in.max_seq_length;
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
