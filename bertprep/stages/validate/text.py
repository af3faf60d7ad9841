"""Checks of the stages before `create`: text shards (`bertprep shard`) and SQuAD/GLUE downloads.

Text shards: one sentence per line, a blank line between documents,
`<corpus>_{training,test}_<i>.txt` under training/ and test/. Downloads:
`download/squad/v<version>/<split>-v<version>.json` and
`download/glue/<Task>/<split>.tsv`, checked against the published md5s and
example counts (docs/reference-facts.md, "Sources: SQuAD files").
"""

import csv
import hashlib
import json
import os

import numpy as np

from bertprep import storage
from bertprep.corpus import ends_lines_in_cr_alone
from bertprep.folder import Folder, natural_key
from bertprep.formats import codecs
from bertprep.stages.download.glue import task_outputs
from bertprep.stages.download.squad import FILES as SQUAD_FILES
from bertprep.stages.validate.records import Finding
from bertprep.text_inputs import split_of, unread_files_warning
from bertprep.workdir import MANIFEST, SPLITS, read_manifest

TEXT_CHECKS = {
    "utf8": "text shards are UTF-8",
    "documents": "no empty documents or shards",
    "shard_manifest": "files, bytes and sha256 as the shard manifest lists them",
    "download_checksum": "downloads carry the published md5 (or the manifest's sha256)",
    "download_examples": "example counts and columns as published",
}

# Examples per GLUE file, as published (the hub's nyu-mll/glue has the same counts).
GLUE_EXAMPLES = {
    "CoLA": {"train.tsv": 8551, "dev.tsv": 1043, "test.tsv": 1063},
    "SST-2": {"train.tsv": 67349, "dev.tsv": 872, "test.tsv": 1821},
    "MRPC": {"train.tsv": 3668, "dev.tsv": 408, "test.tsv": 1725},
    "STS-B": {"train.tsv": 5749, "dev.tsv": 1500, "test.tsv": 1379},
    "QQP": {"train.tsv": 363846, "dev.tsv": 40430, "test.tsv": 390965},
    "MNLI": {"train.tsv": 392702, "dev_matched.tsv": 9815, "dev_mismatched.tsv": 9832,
             "test_matched.tsv": 9796, "test_mismatched.tsv": 9847},
    "QNLI": {"train.tsv": 104743, "dev.tsv": 5463, "test.tsv": 5463},
    "RTE": {"train.tsv": 2490, "dev.tsv": 277, "test.tsv": 3000},
    "WNLI": {"train.tsv": 635, "dev.tsv": 71, "test.tsv": 146},
    "diagnostic": {"diagnostic.tsv": 1104},
}


def find_text_shards(path, hidden=False):
    """[(path, split)] of the text shards under `path` in natural order; with `hidden`, the dot-files named as
    shards there instead (`.draft.txt`), which create and tokenize never read from a directory (a file given
    itself is read). A .txt beside a training/ or test/ folder is no shard: create and tokenize read only the
    folders' (a root `c_training_9.txt` was validated and counted, and read by neither); nor is one below a
    split folder or in a folder of the directory given that is no split folder (misplaced_shards). Each shard's
    split is the one create and tokenize read it in (text_inputs.split_of: its folder's, else training), never its
    name's: a `c_test_0.txt` beside `a.txt` was counted in the test split, and checked against training for overlap,
    where create writes it as training."""
    tree = Folder(path)
    if tree.isfile():
        return [(path, split_of(path))] if path.endswith(".txt") and not hidden else []
    found = [(shard, split) for shard, split, read in _shard_named_files(tree, hidden) if read or hidden]
    return sorted(found, key=lambda item: (SPLITS.index(item[1]), natural_key(item[0])))


def misplaced_shards(path):
    """The files under the directory `path` named as text shards (or lying in a training/ or test/ folder) where
    create and tokenize of `path` do not read them: a `training/sub/c_training_5.txt`, a `sub/c_training_5.txt`
    beside a tree's training/ or below the directory given. By its name alone such a file was validated and
    counted, and a shard manifest's tree failed on it as unlisted, where create and tokenize pass over it."""
    if not Folder(path).isdir():
        return []
    return [shard for shard, _split, read in _shard_named_files(Folder(path), hidden=False) if not read]


def _shard_named_files(tree, hidden):
    """(path, split, read) of each .txt under the directory `tree` that create and tokenize of it read, or that is
    named as a shard where they do not (_named_as_shard), hidden or not as asked, beside a tree's training/ and
    test/ folders none; `read`: whether create and tokenize of `tree` read it (discover_inputs): a split folder's
    own .txt files, and the directory given's own (read whole where it has no training/ or test/: a corpus.txt
    there was named as "not read" by them); `split`: the one they read it in (text_inputs.split_of)."""
    for root, dirs, files in tree.walk():  # sorted, without .partial/ and other hidden directories
        if set(SPLITS) & set(dirs):  # a tree's root: its own files are named by other_files_warning
            continue
        folders = [part for part in tree.relpath(root).split("/") if part not in ("", os.curdir)]
        read = not folders or (folders[-1] in SPLITS and not set(SPLITS) & set(folders[:-1]))
        for name in files:
            path = storage.join(root, name)
            if name.endswith(".txt") and name.startswith(".") == hidden and (read or _named_as_shard(path)):
                yield path, split_of(path), read


def _named_as_shard(path):
    """Whether `path` lies in a training/ or test/ folder or is named `<corpus>_<split>_<i>.txt`: where create and
    tokenize do not read it, such a file is named (misplaced_shards, hidden_shards_warning), not passed over."""
    directory, name = os.path.split(path)
    return any(os.path.basename(directory) == split or f"_{split}_" in name for split in SPLITS)


def read_shard(path):
    """Figures and problems of one text shard: (documents, sentences, bytes, document hashes, sentence hashes,
    findings)."""
    findings = []
    documents = sentences = 0
    doc_hashes, sentence_hashes = [], []
    current = hashlib.blake2b(digest_size=8)
    in_document = False
    blank_run = 0
    data = storage.read_bytes(path)
    if not data.strip():
        findings.append(Finding("documents", path, None, None, "empty shard (no documents)"))
    if ends_lines_in_cr_alone(data):  # read as one line: create, tokenize and shard refuse it
        findings.append(Finding("documents", path, None, None, "its lines end in a carriage return alone (CR, "
                                "classic Mac OS line endings), which ends no line: one sentence of one document"))
    for number, raw in enumerate(data.split(b"\n"), 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            findings.append(Finding("utf8", f"{path}:{number}", None, None,
                                    f"not UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})"))
            line = raw.decode("utf-8", "replace")
        if line.strip():
            if blank_run > 1 or (blank_run and not documents and not in_document):
                findings.append(Finding("documents", f"{path}:{number - 1}", None, None,
                                        "empty document (more than one blank line between documents)"))
            blank_run = 0
            sentences += 1
            sentence_hashes.append(int.from_bytes(hashlib.blake2b(line.strip().encode(), digest_size=8).digest(),
                                                  "little"))
            current.update(line.strip().encode() + b"\n")
            in_document = True
        else:
            blank_run += 1
            if in_document:
                documents += 1
                doc_hashes.append(int.from_bytes(current.digest(), "little"))
                current = hashlib.blake2b(digest_size=8)
                in_document = False
    if in_document:
        documents += 1
        doc_hashes.append(int.from_bytes(current.digest(), "little"))
    return documents, sentences, len(data), doc_hashes, sentence_hashes, findings


def validate_text_shards(path):
    """(findings, warnings, figures) of a text shard directory."""
    findings, warnings = [], []
    shards = find_text_shards(path)
    per_split = {}
    hashes = {}
    for shard, split in shards:
        documents, sentences, size, doc_hashes, sentence_hashes, problems = read_shard(shard)
        findings.extend(problems)
        entry = per_split.setdefault(split, {"shards": 0, "documents": 0, "sentences": 0, "bytes": [], "files": []})
        entry["shards"] += 1
        entry["documents"] += documents
        entry["sentences"] += sentences
        entry["bytes"].append(size)
        entry["files"].append(shard)
        docs, sents = hashes.setdefault(split, ([], []))
        docs.extend(doc_hashes)
        sents.extend(sentence_hashes)
    figures = {}
    for split, entry in per_split.items():
        sizes = np.array(entry["bytes"], dtype=np.float64)
        spread = float((sizes.max() - sizes.min()) / sizes.mean()) if sizes.mean() else 0.0
        figures[split] = {"shards": entry["shards"], "documents": entry["documents"], "sentences": entry["sentences"],
                          "bytes": int(sizes.sum()), "min_bytes": int(sizes.min()), "max_bytes": int(sizes.max()),
                          "size_spread": round(spread, 4)}
        if entry["shards"] > 1 and spread > 0.5:
            warnings.append(("shard_spread", f"{split}: shard sizes {int(sizes.min()):,}–{int(sizes.max()):,} bytes "
                                             f"(spread {spread:.0%} of the mean; balanced shards expected)"))
    if "training" in hashes and "test" in hashes:
        train_docs, train_sents = (np.array(h, dtype=np.uint64) for h in hashes["training"])
        test_docs, test_sents = (np.array(h, dtype=np.uint64) for h in hashes["test"])
        shared_docs = int(np.isin(test_docs, train_docs).sum())
        shared_sents = int(np.isin(test_sents, train_sents).sum())
        figures["overlap"] = {"test_documents_in_training": shared_docs,
                              "test_sentences_in_training": shared_sents,
                              "sentence_overlap_share": round(shared_sents / max(len(test_sents), 1), 4)}
        if shared_docs:
            warnings.append(("overlap", f"{shared_docs:,} test documents also occur in training"))
    findings.extend(_check_listed_files(path, "shard_manifest", [s for s, _ in shards]))
    hidden = hidden_shards_warning(path)
    if hidden:  # validated, they were counted as shards that create and tokenize then left out without a word
        warnings.append(("hidden_shards", hidden))
    unread = other_files_warning(path, shards)
    if unread:  # a training/notes.md was passed over without a word, the tree SOUND
        warnings.append(("other_files", unread))
    return findings, warnings, figures


def hidden_shards_warning(path):
    """A warning naming the dot-files under the directory `path` named as text shards (find_text_shards), which
    validate does not read, as create and tokenize do not; None where there are none."""
    hidden = [storage.display(shard) for shard, _split in find_text_shards(path, hidden=True)]
    return f"not read: {', '.join(hidden)} (hidden files: create and tokenize do not read them either)" \
        if hidden else None


def other_files_warning(path, shards):
    """A warning naming the files beside and below the text shards `shards` (find_text_shards of the directory
    `path`) that are no shards, which validate does not read, nor do create and tokenize: a training/notes.md, a
    subdirectory's .txt, a notes.md or .txt at the root beside training/ and test/; None where there are none.
    Hidden shards have their own line (hidden_shards_warning), and files named as records or token sequences are
    validated as such. A shard given alone is all that was asked: the files beside it are not named. The root's
    other subdirectories are not walked: they may hold another stage's output (`shard --out data` then `create
    --out data/records`), which validate reads or names itself."""
    if not Folder(path).isdir():
        return None
    places = sorted({os.path.dirname(shard) for shard, _split in shards})
    tops = [place for place in places if not any(place.startswith(other.rstrip("/") + "/") for other in places)]
    accounted = [*shards, *find_text_shards(path, hidden=True)]
    return unread_files_warning(tops, accounted, rule="not text shards: create and tokenize do not read them either",
                                read_otherwise=_data_file_name, roots=_tree_roots(path, tops),
                                files=misplaced_shards(path))


def _tree_roots(path, places):
    """The roots of the shard trees whose training/ or test/ are among `places`, where the root is the directory
    `path` given or lies below it: the files beside a tree's split folders were named by no one (a shard tree's
    `notes.md`, a `.txt` that create and tokenize pass over), where the given split folder is all that was asked."""
    roots = {storage.parent(place) for place in places if os.path.basename(place.rstrip("/")) in SPLITS}
    given = storage.absolute_normpath(path)
    return sorted(root for root in roots - {None}
                  if storage.absolute_normpath(root) == given or storage.lies_below(root, path))


def _data_file_name(name):
    """Whether validate reads a file named `name` as records or token sequences, not as a text shard."""
    return codecs.of_file_name(name) is not None or codecs.of_sequence_file_name(name) is not None


def _check_listed_files(path, check, found):
    """Compare files with the stage manifest at `path` (bytes and sha256), if there is one."""
    tree = Folder(path)
    manifest_path = tree.path(MANIFEST)
    if not tree.isfile(MANIFEST):
        return []
    manifest, problem = read_manifest(manifest_path)
    if problem:
        return [Finding(check, manifest_path, None, None, f"unreadable: {problem}")]
    entries = manifest.get("files") or {}
    findings = []
    for relative, entry in entries.items():
        full = tree.path(relative)
        if not tree.isfile(relative):
            findings.append(Finding(check, full, None, None, "listed in manifest.json but missing"))
            continue
        if not isinstance(entry, dict):
            continue
        size = tree.getsize(relative) if entry.get("bytes") is not None else None  # an object's: one request
        if size is not None and size != entry["bytes"]:
            findings.append(Finding(check, full, None, None, f"{size:,} bytes, manifest.json says {entry['bytes']:,}"))
        elif entry.get("sha256") and _digest(full, "sha256") != entry["sha256"]:
            findings.append(Finding(check, full, None, None, "sha256 differs from manifest.json"))
    for shard in found if entries else ():  # tokenize and create refuse it (workdir.refuse_unlisted): not sound
        if tree.relpath(shard) not in entries:
            findings.append(Finding(check, shard, None, None, "not listed in manifest.json (a file of another run "
                                                              "or corpus?): tokenize and create refuse it"))
    return findings


def _digest(path, algorithm):
    digest = hashlib.new(algorithm)
    with storage.open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


# ---------------------------------------------------------------- downloads


def find_downloads(path):
    """(squad files [(path, version, split, md5, examples)], glue files [(path, task, expected count, header)])."""
    squad, glue = [], []
    known_squad = {name: (version, split, md5, examples)
                   for version, files in SQUAD_FILES.items() for split, name, md5, examples in files}
    for root, dirs, files in Folder(path).walk():  # sorted, without .partial/ and other hidden directories
        for name in sorted(files):
            full = storage.join(root, name)
            if name in known_squad:
                squad.append((full, *known_squad[name]))
            task = os.path.basename(root)
            if name.endswith(".tsv") and task in GLUE_EXAMPLES and name in GLUE_EXAMPLES[task]:
                header = {filename: layout[0] for filename, _split, layout in task_outputs(task)}.get(name)
                glue.append((full, task, GLUE_EXAMPLES[task][name], header))
    return squad, glue


def validate_downloads(path):
    """(findings, warnings, figures) of a downloads directory (SQuAD JSON, GLUE TSV)."""
    findings, warnings, figures = [], [], {}
    downloads = Folder(path)
    squad, glue = find_downloads(path)
    for full, version, split, md5, expected in squad:
        examples, problem = _squad_examples(full, version)
        figures[downloads.relpath(full)] = {"examples": examples, "expected": expected}
        if problem:
            findings.append(Finding("download_examples", full, None, None, problem))
        elif examples != expected:
            findings.append(Finding("download_examples", full, None, None,
                                    f"{examples:,} questions, SQuAD v{version} {split} has {expected:,}"))
        if _digest(full, "md5") != md5:
            listed = _listed_sha256(full)
            if listed is None:
                findings.append(Finding("download_checksum", full, None, None,
                                        f"md5 differs from the published {md5} and no manifest vouches for it"))
            elif listed != _digest(full, "sha256"):
                findings.append(Finding("download_checksum", full, None, None,
                                        "sha256 differs from the download manifest"))
            else:
                warnings.append(("download_checksum", f"{full}: not the original file (rebuilt from the hub?); "
                                                      "its manifest sha256 matches"))
    for full, task, expected, header in glue:
        rows, columns, problem = _tsv_rows(full)
        has_header = header is not None
        examples = rows - has_header
        figures[downloads.relpath(full)] = {"examples": examples, "expected": expected}
        if problem:
            findings.append(Finding("download_examples", full, None, None, problem))
        if examples != expected:
            findings.append(Finding("download_examples", full, None, None,
                                    f"{examples:,} examples, GLUE {task} {os.path.basename(full)} has {expected:,}"))
        if has_header and columns and columns[0] != header:
            findings.append(Finding("download_examples", f"{full}:1", None, None,
                                    f"header {columns[0]}, expected {header}"))
        listed = _listed_sha256(full)
        if listed is not None and listed != _digest(full, "sha256"):
            findings.append(Finding("download_checksum", full, None, None, "sha256 differs from the download manifest"))
    return findings, warnings, figures


def _squad_examples(path, version):
    """(questions, problem) of a SQuAD JSON file; problem names what is missing."""
    try:
        with storage.open(path, "r", encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        return 0, f"not readable JSON: {exc}"
    count = 0
    try:
        for a, article in enumerate(data["data"]):
            for p, paragraph in enumerate(article["paragraphs"]):
                if not isinstance(paragraph.get("context"), str):
                    return count, f"data[{a}].paragraphs[{p}] has no context"
                for q, qa in enumerate(paragraph["qas"]):
                    needed = ("id", "question", "answers") + (("is_impossible",) if version == "2.0" else ())
                    missing = [key for key in needed if key not in qa]
                    if missing:
                        return count, f"data[{a}].paragraphs[{p}].qas[{q}] lacks {missing[0]!r}"
                    count += 1
    except (KeyError, TypeError) as exc:
        return count, f"not SQuAD JSON (missing {exc})"
    return count, None


def _tsv_rows(path):
    """(rows, [header columns], problem) read as run_classifier.py does (tab-separated, no quoting)."""
    rows = 0
    first = None
    width = None
    try:
        with storage.open(path, "r", encoding="utf-8", newline="") as f:
            for number, row in enumerate(csv.reader(f, delimiter="\t", quotechar=None), 1):
                if first is None:
                    first = row
                    width = len(row)
                elif len(row) != width:
                    return rows, [first], f"line {number}: {len(row)} columns, expected {width} as on line 1"
                rows += 1
    except UnicodeDecodeError as exc:
        return rows, [first] if first else [], f"not UTF-8 ({exc.reason} at byte {exc.start})"
    return rows, [first] if first else [], None


def _listed_sha256(path):
    """The sha256 a download manifest (in the file's directory or above) lists for `path`, or None."""
    directory = os.path.dirname(storage.absolute(path))
    for _ in range(4):
        folder = Folder(directory)
        if folder.isfile(MANIFEST):
            manifest, _problem = read_manifest(folder.path(MANIFEST))
            if manifest is None:
                return None
            entry = manifest.get("files", {}).get(folder.relpath(storage.absolute(path)))
            if isinstance(entry, dict) and entry.get("sha256"):
                return entry["sha256"]
        directory = os.path.dirname(directory)
    return None
