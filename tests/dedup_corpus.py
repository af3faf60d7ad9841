"""A wt2-like corpus with planted duplicates, shared by tests/test_dedup.py and scripts/bench_dedup.py."""

import json
import random
import re

from bertprep.stages.dedup import ngrams, normalized_words

LINES_PER_DOCUMENT = 24


def wt2_documents(path, count=None, lines_per_document=None):
    """Distinct documents of LINES_PER_DOCUMENT lines cut from wt2's articles (neighbours share a topic)."""
    articles = re.split(r"\n\s*\n", open(path, encoding="utf-8").read())
    per = lines_per_document or LINES_PER_DOCUMENT
    documents = []
    for article in articles:
        lines = [line for line in article.splitlines() if line.strip()]
        for start in range(0, len(lines) - per + 1, per):
            documents.append("\n".join(lines[start:start + per]))
    return documents[:count]


def shingles(text, n=5):
    return set(ngrams(normalized_words(text), n))


def jaccard(a, b):
    a, b = shingles(a), shingles(b)
    return len(a & b) / len(a | b)


# The variants (exact, sentences shuffled, 5% of words changed, truncated to 70%) sit mostly below a
# true Jaccard of 0.8 for word 5-grams; milder ones (halves swapped, 1% changed, truncated to 90%) give the
# pairs above it that the recall is measured on.
KINDS = ("exact", "shuffled", "changed 5%", "truncated 70%", "halves swapped", "changed 1%", "truncated 90%")


def change_words(text, share, rng):
    words = text.split(" ")
    for i in rng.sample(range(len(words)), max(1, int(len(words) * share))):
        words[i] = rng.choice(["alpha", "beta", "gamma", "delta", "omega"])
    return " ".join(words)


def plant(originals, rng):
    """(kind, original index, text) of the planted copies, cycling through KINDS."""
    return [(KINDS[index % len(KINDS)], index, planted_copy(text, KINDS[index % len(KINDS)], rng))
            for index, text in enumerate(originals)]


def planted_copy(text, kind, rng):
    """A copy of `text` of one of the KINDS."""
    lines = text.split("\n")
    if kind == "exact":
        return "  ".join(text.upper().split(" "))  # the same normalized text
    if kind == "shuffled":
        return "\n".join(rng.sample(lines, len(lines)))
    if kind == "halves swapped":
        return "\n".join(lines[len(lines) // 2:] + lines[:len(lines) // 2])
    if kind.startswith("changed"):
        return change_words(text, int(kind.split()[1][:-1]) / 100, rng)
    return text[:int(len(text) * int(kind.split()[1][:-1]) / 100)]


def write_corpus(directory, texts, name="part-0000"):
    """A formatted corpus directory (one part and a manifest) as `bertprep download` writes it."""
    directory.mkdir(parents=True)
    with open(directory / f"{name}.jsonl", "w", encoding="utf-8") as f:
        for i, text in enumerate(texts):
            f.write(json.dumps({"id": str(i), "title": "", "text": text}, ensure_ascii=False) + "\n")
    (directory / "manifest.json").write_text(json.dumps({"tool": "bertprep", "stage": "format", "files": {}}))
    return directory


def planted_corpus(root, wt2, distinct=300, planted=140, seed=0):
    """Two corpora: `a` the distinct documents, `b` the planted copies of a's first `planted` mixed with
    more distinct documents. Returns (a, b, planted list, b's texts)."""
    rng = random.Random(seed)
    documents = wt2_documents(wt2)
    originals = documents[:distinct]
    copies = plant(originals[:planted], rng)
    b_texts = [text for _kind, _index, text in copies] + documents[distinct:distinct + planted]
    return (write_corpus(root / "a", originals), write_corpus(root / "b", b_texts), copies, b_texts)


def chain_corpus(directory, wt2, chains=6, links=12, seed=1):
    """One corpus of `chains` chains of documents: windows of 100 words stepped by 10 over a wt2 passage, so
    neighbours are near duplicates (true Jaccard about 0.8) and documents two steps apart are not: clusters
    joined through a document that is not kept (`linked_by`), shuffled."""
    words = open(wt2, encoding="utf-8").read().split()
    rng = random.Random(seed)
    texts = []
    for _chain in range(chains):
        start = rng.randrange(len(words) - 1000)
        base = words[start:start + 600]
        texts += [" ".join(base[10 * i:10 * i + 100]) for i in range(links)]
    rng.shuffle(texts)
    return write_corpus(directory, texts)


def short_corpus(directory, documents, parts=4, seed=0):
    """A formatted corpus of `documents` short documents (12 words of a 5,000-word vocabulary) in `parts` parts,
    about 1% of them exact copies (upper-cased) and 1% near copies (a word added) of one of the 1,000 before."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(5000)]
    texts = []
    for _ in range(documents):
        kind = rng.random()
        if texts and kind < 0.01:
            texts.append(rng.choice(texts[-1000:]).upper())
        elif texts and kind < 0.02:
            texts.append(rng.choice(texts[-1000:]) + " extra")
        else:
            texts.append(" ".join(rng.choices(vocab, k=12)))
    directory.mkdir(parents=True)
    per = -(-documents // parts)
    for part in range(parts):
        with open(directory / f"part-{part:04d}.jsonl", "w", encoding="utf-8") as f:
            f.writelines(json.dumps({"id": str(i), "text": text}) + "\n"
                         for i, text in enumerate(texts[part * per:(part + 1) * per]))
    (directory / "manifest.json").write_text(json.dumps({"tool": "bertprep", "stage": "format", "files": {}}))
    return directory


def peak_rss(argv, others=(), interval_s=0.02):
    """(peak RSS in bytes of the process tree of `argv` plus the processes `others` (pids) at any one time,
    sampled every `interval_s`; the completed process, its output captured)."""
    import subprocess
    import threading
    import time

    import psutil

    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    root, peak, done = psutil.Process(process.pid), [0], threading.Event()
    extra = [psutil.Process(pid) for pid in others]

    def sample():
        while not done.is_set():
            total = 0
            try:
                tree = [root, *root.children(recursive=True), *extra]
            except psutil.Error:
                tree = extra
            for member in tree:
                try:
                    total += member.memory_info().rss
                except psutil.Error:
                    pass  # ended between listing and asking
            peak[0] = max(peak[0], total)
            time.sleep(interval_s)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout, stderr = process.communicate()
    done.set()
    sampler.join()
    return peak[0], subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)
