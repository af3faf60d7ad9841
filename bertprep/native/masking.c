/* Dynamic masking of a batch of unmasked instances: bertprep.masking's
 * mask_instance (the specification) one row at a time, with the same keyed
 * random numbers, so the masks are identical to its twins'.
 *
 * Why C: with the NumPy form (masking._mask_batch_numpy: hashes of four
 * streams at every position, sorts of whole rows) the PyTorch loader read
 * 0.41x our static reader's samples/s per core, short of issue 22's 0.5x;
 * with this file 0.61x in the same run, masking alone 0.33 ms per batch of
 * 256 at 128/20 instead of 0.87 ms (`python scripts/bench_torch_loader.py
 * --repeat 3`, docs/benchmarks.md). Here a row hashes only its candidates'
 * order keys and its masked positions, and finds the budget smallest keys by
 * counting them in buckets.
 */
#include "native.h"

#define GOLDEN 0x9E3779B97F4A7C15ull
enum { STREAM_ORDER, STREAM_MASK_OR_NOT, STREAM_KEEP_OR_RANDOM, STREAM_RANDOM_WORD };

static inline uint64_t mix(uint64_t x)
{
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* The top 53 bits of masking.uniform(key, position, stream): uniform = bits53 * 2**-53. */
static inline uint64_t bits53(uint64_t key, Py_ssize_t position, int stream)
{
    return mix(key + ((uint64_t)position * 4 + (uint64_t)stream + 1) * GOLDEN) >> 11;
}

static inline double uniform(uint64_t key, Py_ssize_t position, int stream)
{
    return (double)(int64_t)bits53(key, position, stream) * 0x1p-53; /* signed: one instruction, same value */
}

/* A word (its first token's column) and its order key; words are taken by (key, column) ascending. */
typedef struct {
    uint64_t key;
    Py_ssize_t column;
} Word;

static inline int before(const Word *a, const Word *b)
{
    return a->key < b->key || (a->key == b->key && a->column < b->column);
}

/* The words that can be among the k first in (key, column) order, copied to pool; returns how many.
 * The keys are uniform over [0, 2**53), so the k first almost always lie below a bound that about
 * k + 3 sqrt(k) + 4 of the n keys pass (fewer pass about once in 200 rows at k = 20), and those are the
 * first words of the order, in some order; when fewer than k pass, all n words are. Either way the
 * rest of the order cannot matter to the k first. */
static Py_ssize_t first_words(const Word *words, Py_ssize_t n, Py_ssize_t k, Word *pool)
{
    double share = ((double)k + 3.0 * sqrt((double)k) + 4.0) / (double)n;
    if (share < 1.0) {
        uint64_t bound = (uint64_t)(share * 0x1p53);
        Py_ssize_t passed = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            pool[passed] = words[i];
            passed += words[i].key < bound;
        }
        if (passed >= k)
            return passed;
    }
    memcpy(pool, words, (size_t)n * sizeof *pool);
    return n;
}

/* Sorts w[0:n] in (key, column) order (insertion: n is a few times the budget). */
static void sort_words(Word *w, Py_ssize_t n)
{
    for (Py_ssize_t i = 1; i < n; i++) {
        Word x = w[i];
        Py_ssize_t j = i;
        for (; j > 0 && before(&x, &w[j - 1]); j--)
            w[j] = w[j - 1];
        w[j] = x;
    }
}

#define BUCKET_SHIFT 45 /* the top 8 of a key's 53 bits */
#define N_BUCKETS 256

/* The k first of words[0:n] in (key, column) order into pool[0:k], in no particular order (0 < k <= n;
 * pool holds n + 1). The keys are uniform, so counting them in 256 buckets by their top bits finds the
 * bucket of the k-th; the words below it are taken, and only that bucket's few are sorted. Branch-free
 * passes: a quickselect's unpredictable compares cost more than the rest of the row did. */
static void first_k(const Word *words, Py_ssize_t n, Py_ssize_t k, Word *pool, Py_ssize_t *counts)
{
    memset(counts, 0, N_BUCKETS * sizeof *counts);
    for (Py_ssize_t i = 0; i < n; i++)
        counts[words[i].key >> BUCKET_SHIFT]++;
    uint64_t bucket = 0;
    Py_ssize_t below = 0;
    while (below + counts[bucket] < k)
        below += counts[bucket++];
    Py_ssize_t taken = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        pool[taken] = words[i];
        taken += (words[i].key >> BUCKET_SHIFT) < bucket;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        pool[taken] = words[i];
        taken += (words[i].key >> BUCKET_SHIFT) == bucket;
    }
    sort_words(pool + below, taken - below);
}

/* Scratch space for one row, sized by seq. */
typedef struct {
    Word *words, *pool;
    Py_ssize_t *counts;    /* N_BUCKETS */
    Py_ssize_t *word_of;   /* column -> its word's first column, -1 for a non-candidate */
    Py_ssize_t *word_size; /* first column -> tokens in the word */
    uint8_t *taken;        /* first column -> the word is masked */
} Scratch;

static void mask_row(const MaskInputs *in, Py_ssize_t row, const Scratch *s, const MaskOutputs *out)
{
    Py_ssize_t seq = in->seq, pred = in->pred;
    const int64_t *tokens = in->tokens + row * seq;
    int64_t *ids = out->input_ids + row * seq;
    int64_t *positions = out->positions + row * pred, *labels = out->labels + row * pred;
    float *weights = out->weights + row * pred;
    uint64_t key = in->keys[row];
    Py_ssize_t length = in->lengths[row] < 0 ? 0 : (in->lengths[row] > seq ? seq : in->lengths[row]);
    memcpy(ids, tokens, (size_t)seq * sizeof *ids);

    /* The candidates, grouped into words (mask_instance's candidates list). */
    Py_ssize_t n_words = 0, current = -1;
    for (Py_ssize_t c = 0; c < length; c++) {
        int64_t token = tokens[c];
        s->word_of[c] = -1;
        if (token == in->cls_id || token == in->sep_id)
            continue;
        if (in->whole_word && current >= 0) {
            int64_t flag_at = token < 0 ? 0 : (token >= in->n_is_subword ? in->n_is_subword - 1 : token);
            if (in->is_subword[flag_at]) {
                s->word_of[c] = current;
                s->word_size[current]++;
                continue;
            }
        }
        current = c;
        s->word_of[c] = c;
        s->word_size[c] = 1;
        s->taken[c] = 0;
        s->words[n_words].key = bits53(key, c, STREAM_ORDER);
        s->words[n_words].column = c;
        n_words++;
    }

    /* Words in random order until the budget is met, one that would overflow it skipped. Only the
     * first k words in that order can matter while they fill the budget; k doubles when they do not. */
    double scaled = rint((double)length * in->masked_lm_prob); /* half to even, as Python's round() */
    Py_ssize_t budget = scaled < 1.0 ? 1 : (scaled > (double)pred ? pred : (Py_ssize_t)scaled);
    if (budget > pred) /* pred 0 */
        budget = pred;
    if (!in->whole_word) { /* every word one token: the first min(budget, words) of the order */
        Py_ssize_t k = budget < n_words ? budget : n_words;
        if (k > 0) {
            first_k(s->words, n_words, k, s->pool, s->counts);
            for (Py_ssize_t i = 0; i < k; i++)
                s->taken[s->pool[i].column] = 1;
        }
    } else if (budget > 0) { /* greedy over the first words of the order; all of them if those fall short */
        Py_ssize_t m = first_words(s->words, n_words, budget, s->pool);
        for (;;) {
            sort_words(s->pool, m);
            Py_ssize_t used = 0;
            for (Py_ssize_t i = 0; i < m && used < budget; i++) {
                Py_ssize_t size = s->word_size[s->pool[i].column];
                if (used + size > budget)
                    continue;
                s->taken[s->pool[i].column] = 1;
                used += size;
            }
            if (used >= budget || m == n_words)
                break;
            for (Py_ssize_t i = 0; i < m; i++)
                s->taken[s->pool[i].column] = 0;
            m = first_words(s->words, n_words, n_words, s->pool);
        }
    }

    /* The masked tokens in column order: 80% [MASK], 10% kept, 10% a random vocab word. */
    Py_ssize_t slot = 0;
    for (Py_ssize_t c = 0; c < length; c++) {
        if (s->word_of[c] < 0 || !s->taken[s->word_of[c]])
            continue;
        int64_t label = tokens[c];
        if (uniform(key, c, STREAM_MASK_OR_NOT) < 0.8)
            ids[c] = in->mask_id;
        else if (uniform(key, c, STREAM_KEEP_OR_RANDOM) >= 0.5)
            ids[c] = in->word_ids[(Py_ssize_t)(uniform(key, c, STREAM_RANDOM_WORD) * (double)in->n_word_ids)];
        positions[slot] = c;
        labels[slot] = label;
        weights[slot] = 1.0f;
        slot++;
    }
    for (; slot < pred; slot++) {
        positions[slot] = 0;
        labels[slot] = 0;
        weights[slot] = 0.0f;
    }
}

int mask_batch(const MaskInputs *in, const MaskOutputs *out)
{
    Py_ssize_t seq = in->seq > 0 ? in->seq : 1;
    Scratch s;
    s.words = malloc((size_t)seq * sizeof *s.words);
    s.pool = malloc((size_t)(seq + 1) * sizeof *s.pool);
    s.counts = malloc(N_BUCKETS * sizeof *s.counts);
    s.word_of = malloc((size_t)seq * sizeof *s.word_of);
    s.word_size = malloc((size_t)seq * sizeof *s.word_size);
    s.taken = malloc((size_t)seq);
    int ok = s.words && s.pool && s.counts && s.word_of && s.word_size && s.taken;
    if (ok)
        for (Py_ssize_t row = 0; row < in->count; row++)
            mask_row(in, row, &s, out);
    free(s.words);
    free(s.pool);
    free(s.counts);
    free(s.word_of);
    free(s.word_size);
    free(s.taken);
    return ok ? 0 : -1;
}
