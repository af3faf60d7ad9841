"""Token sequence datasets (`bertprep tokenize`: Megatron-Core's .bin/.idx pairs): what their loader assumes.

Megatron's IndexedDataset memory-maps both files and trusts them: a length
or offset that disagrees with the .bin reads another sequence's ids or past
the end, a document index out of order gives samples across documents, an id
at or past the vocab size indexes past the embedding table. Each pair is read
whole by its format's module (`read`, which refuses a pair whose structure
disagrees, one line naming the file) and its ids checked against the vocab
(--vocab, else the manifest's). The manifest's sha256s and counts are checked
where one lies beside the splits.
"""

import os

import numpy as np

from bertprep import storage
from bertprep.errors import DataError
from bertprep.formats import codecs
from bertprep.stages.validate.records import Finding
from bertprep.workdir import MANIFEST, load_manifest

SEQUENCE_CHECKS = {
    "sequences": "lengths, offsets and document indices agree with the .bin; every id below the vocab size",
    "sequence_manifest": "files, bytes, sha256 and counts as the tokenize manifest lists them",
}


def find_sequence_sets(path):
    """[(format, [prefix, ...])] of the sequence datasets at `path` (a directory walked, or one file)."""
    found = []
    for fmt in codecs.sequence_names():
        module = codecs.get(fmt).implementation
        if storage.isfile(path) and not codecs.get(fmt).names_file(os.path.basename(path)):
            continue
        prefixes = module.prefixes(path)
        if prefixes:
            found.append((fmt, prefixes))
    return found


def _manifest_above(prefix):
    """(directory, manifest) of the tokenize manifest two levels up (<out>/<corpus>/<split>/<prefix>), or None."""
    directory = os.path.dirname(os.path.dirname(prefix))
    try:
        manifest = load_manifest(directory)
    except DataError:
        return directory, {"_error": True}
    return (directory, manifest) if manifest and manifest.get("stage") == "tokenize" else (directory, None)


def validate_sequence_set(fmt, prefixes, vocab_size=None):
    """(findings, warnings, section) for the prefixes of one format; `vocab_size` None: the manifest's."""
    module = codecs.get(fmt).implementation
    findings, warnings = [], []
    section = {"format": fmt, "files": [], "sequences": 0, "documents": 0, "tokens": 0, "bytes": 0,
               "length_histogram": [], "document_histogram": [], "manifest": False, "vocab_checked": True}
    for prefix in prefixes:
        where = storage.display(prefix + module.IDX)
        root, manifest = _manifest_above(prefix)
        if manifest and "_error" in manifest:
            findings.append(Finding("sequence_manifest", storage.display(root), message="damaged manifest.json"))
            manifest = None
        entries = {}
        section["manifest"] |= bool(manifest)
        if manifest:
            relative = os.path.relpath(prefix, root)
            entries = {suffix: (manifest.get("files") or {}).get(relative + suffix) for suffix in module.BIN_IDX}
            missing = [suffix for suffix, entry in entries.items() if not isinstance(entry, dict)]
            if missing:
                findings.append(Finding("sequence_manifest", where, message="not listed in the manifest"))
                entries = {}
        bound = vocab_size or ((manifest or {}).get("vocab") or {}).get("size")
        try:
            data = codecs.get(fmt).read_sequences(prefix, {suffix: entry.get("sha256")
                                                           for suffix, entry in entries.items()})
        except DataError as exc:
            named, message = str(exc).split(": ", 1)
            findings.append(Finding("sequence_manifest" if "manifest" in message else "sequences", named,
                                    message=message))
            continue
        counts = {"sequences": len(data.lengths), "documents": len(data.document_indices) - 1,
                  "tokens": len(data.tokens)}
        for name, value in counts.items():
            listed = entries[module.IDX].get(name) if entries else value
            if listed != value:
                findings.append(Finding("sequence_manifest", where, message=f"holds {value:,} {name}, the manifest "
                                                                            f"says {listed}"))
        listed_size = ((manifest or {}).get("vocab") or {}).get("size")
        if vocab_size is not None and listed_size is not None and listed_size != vocab_size:
            findings.append(Finding("sequences", where, message=f"tokenized with a vocab of {listed_size:,} ids; "
                                                                f"--vocab has {vocab_size:,}"))
        if bound is not None and len(data.tokens) and int(data.tokens.max()) >= bound:
            first = int(np.flatnonzero(data.tokens >= bound)[0])
            sequence = int(np.searchsorted(data.starts, first, side="right") - 1)
            findings.append(Finding("sequences", where, sequence, "ids",
                                    f"id {int(data.tokens[first])} is not below the vocab size {bound:,} "
                                    f"({int((data.tokens >= bound).sum()):,} such ids)"))
        if len(data.tokens) and int(data.tokens.min()) < 0:  # a signed dtype's: no vocab has them (was SOUND)
            first = int(np.flatnonzero(data.tokens < 0)[0])
            sequence = int(np.searchsorted(data.starts, first, side="right") - 1)
            findings.append(Finding("sequences", where, sequence, "ids",
                                    f"id {int(data.tokens[first])} is negative ({int((data.tokens < 0).sum()):,} "
                                    f"such ids; {data.tokens.dtype.name} ids: is the header's dtype wrong?)"))
        section["vocab_checked"] &= bound is not None
        if bound is None:
            warnings.append(("sequences", f"{where}: no --vocab and no manifest: ids not checked against a vocab"))
        size = sum(storage.getsize(prefix + suffix) for suffix in module.BIN_IDX)
        section["files"].append({"prefix": storage.display(prefix), **counts, "bytes": size})
        for name in counts:
            section[name] += counts[name]
        section["bytes"] += size
        _add_histogram(section, "length_histogram", data.lengths)
        _add_histogram(section, "document_histogram", np.diff(data.document_indices))
    return findings, warnings, section


def skipped_sequence_checks(sections):
    """{check: why it was skipped} of the sequence checks that had nothing to check against: the table said `ok`,
    "as the tokenize manifest lists them", of pairs no manifest lists (as the record checks did, issue 57)."""
    if sections and not any(section.get("manifest") for section in sections):
        return {"sequence_manifest": "no tokenize manifest.json above the pairs (<out>/<corpus>/): nothing to match"}
    return {}


def sequence_check_notes(sections):
    """{check: its description} where a sequence check ran but not all of it: "every id below the vocab size" was
    said of ids no vocab size bounded (no manifest, no --vocab)."""
    if all(section.get("vocab_checked", True) for section in sections or ()):
        return {}
    return {"sequences": "lengths, offsets and document indices agree with the .bin; ids not checked against a vocab "
                         "(no manifest, no --vocab: see warnings)"}


# --plot's histograms of token sequences: how many have each length (tokens), and how many documents hold each
# count of sequences; a sentence or a document can be any length, so the last bin counts every longer one too.
HISTOGRAM_BINS = 1024


def _add_histogram(section, name, values):
    counts = np.bincount(np.minimum(np.asarray(values, np.int64), HISTOGRAM_BINS - 1), minlength=len(section[name]))
    counts[:len(section[name])] += np.asarray(section[name], np.int64)
    section[name] = counts.tolist()


def _within(path, scope):
    """Whether `path` is `scope` or lies under it (both as the run spells them, made absolute)."""
    path, scope = storage.absolute_normpath(path), storage.absolute_normpath(scope)
    return path == scope or path.startswith(scope.rstrip("/") + "/")


def check_tokenize_runs(path, prefixes):
    """Findings for what reading the pairs at `path` cannot see, where `path` is a directory: a tokenize manifest
    (of `path`, the corpus directory above a split given, or a pair found) written by a run that did not finish,
    and the files it lists under `path` that are gone. Such a directory, a shard's pair lost or a killed run's
    first shards, was SOUND: only the pairs present were read, and data-path.txt (absent, or naming the lost pair)
    was no --data-path Megatron could train on."""
    if not storage.isdir(path):
        return []
    roots = {os.path.dirname(os.path.dirname(prefix)) for prefix in prefixes} | {path}
    roots |= {storage.parent(path)} - {None}
    findings = []
    for root in sorted(roots):
        try:
            manifest = load_manifest(root)
        except DataError:
            continue  # said by validate_sequence_set of each pair beneath it
        if not manifest or manifest.get("stage") != "tokenize" or not isinstance(manifest.get("files"), dict):
            continue
        listed = [storage.join(root, relative) for relative in manifest["files"]]
        in_scope = [file for file in listed if _within(file, path)]
        if not in_scope and not _within(root, path):
            continue  # another corpus's directory, or a split given that the manifest lists nothing under
        if "data_path" not in manifest:  # tokenize records it last, with data-path.txt
            findings.append(Finding("sequence_manifest", storage.display(storage.join(root, MANIFEST)),
                                    message="written by a `bertprep tokenize` run that did not finish (killed or "
                                            "failed before it wrote data-path.txt): rerun it with the same --input "
                                            "and --out to finish; the shards it wrote are kept"))
        elif _within(root, path):
            findings += _check_data_paths(root, manifest)
        found = {storage.absolute_normpath(prefix) for prefix in prefixes}  # a pair read says its own
        findings += [Finding("sequence_manifest", storage.display(file), message="listed in manifest.json but missing")
                     for file in in_scope if storage.absolute_normpath(os.path.splitext(file)[0]) not in found
                     and not storage.isfile(file)]
    return findings


# The lists tokenize writes beside its manifest (bertprep/stages/tokenize.py): a split's prefixes as Megatron's
# --data-path takes them, "<tokens> <prefix>" each.
DATA_PATHS = (("training", "data-path.txt", "--data-path"), ("test", "test-data-path.txt", "--valid-data-path"))


def tokenize_list(path):
    """(directory, manifest) where `path` is a --data-path list beside a tokenize manifest (data-path.txt,
    test-data-path.txt), else None: validate read it as a text shard of one document ("SOUND", whatever it named)."""
    if os.path.basename(path) not in [name for _split, name, _flag in DATA_PATHS] or not storage.isfile(path):
        return None
    root = os.path.dirname(path) or "."
    try:
        manifest = load_manifest(root)
    except DataError:
        return None
    if not manifest or manifest.get("stage") != "tokenize" or not isinstance(manifest.get("files"), dict):
        return None
    return root, manifest


def validate_tokenize_list(path, vocab_size=None):
    """(findings, warnings, section) for the list `path` (`tokenize_list`): the list checked against its
    directory's manifest, and each pair it names that is there read as validate_sequence_set reads one."""
    root, manifest = tokenize_list(path)
    name = os.path.basename(path)
    findings = (_check_data_paths(root, manifest, only=name) if "data_path" in manifest else
                check_tokenize_runs(root, []))
    fmt = manifest.get("format") or codecs.sequence_names()[0]
    module = codecs.get(fmt).implementation
    words = storage.read_bytes(path).decode("utf-8", "replace").split()
    prefixes = [prefix for prefix in words[1::2] if module.is_dataset(prefix)]
    more, warnings, section = validate_sequence_set(fmt, prefixes, vocab_size)
    section["manifest"] = True  # the list was checked against it, whatever pairs it names (none: test/ only)
    return findings + more, warnings, section


def _check_data_paths(root, manifest, only=None):
    """Findings for the --data-path lists of the finished tokenize run at `root`: each must be there and name this
    directory's pairs of its split, every one. A directory moved or copied since kept the lists of its old place,
    absolute prefixes that Megatron then could not find, or read from the other copy; validate called it SOUND."""
    findings = []
    index = codecs.get(manifest.get("format") or codecs.sequence_names()[0]).implementation.IDX
    for split, name, flag in DATA_PATHS:
        if only not in (None, name):
            continue
        expected = {storage.comparable(storage.display(storage.join(root, relative[:-len(index)]))) for relative, entry
                    in manifest["files"].items() if relative.endswith(index) and isinstance(entry, dict)
                    and entry.get("split") == split}
        path = storage.join(root, name)
        shown = storage.display(path)
        if not expected and split != "training":
            continue
        if not storage.isfile(path):
            findings.append(Finding("sequence_manifest", shown, message=f"missing (tokenize writes it last, the "
                                    f"{split} prefixes for Megatron's {flag}): rerun `bertprep tokenize` "
                                    "with the same --input and --out to write it"))
            continue
        words = storage.read_bytes(path).decode("utf-8", "replace").split()
        listed = words[1::2]
        if len(words) % 2 or not all(weight.isdigit() for weight in words[::2]):
            findings.append(Finding("sequence_manifest", shown, message="not \"<tokens> <prefix>\" pairs, as tokenize "
                                    f"writes them for {flag}"))
            continue
        stray = [prefix for prefix in listed if storage.comparable(prefix) not in expected]
        here = storage.display(storage.parent(storage.absolute(root)) or root)  # a rerun's --out
        if stray:
            findings.append(Finding("sequence_manifest", shown, message=f"names {stray[0]}, no {split} dataset of "
                                    f"{storage.display(root)} (moved or copied here since tokenize wrote the list?): "
                                    f"{_rewrite_advice(root, here)}"))
        elif len(set(map(storage.comparable, listed))) != len(expected):
            findings.append(Finding("sequence_manifest", shown, message=f"lists {len(set(listed))} of the "
                                    f"{len(expected)} {split} datasets the manifest lists"))
    return findings


def _rewrite_advice(root, here):
    """How to rewrite a moved output's data-path.txt: a rerun with --out `here`, unless the folder's path holds
    whitespace, which tokenize refuses as --out (no list read as words can name such a prefix): the rerun that
    was advised failed so."""
    if any(character.isspace() for character in storage.display(storage.absolute(root))):  # a parent's too
        return (f"{storage.display(root)} holds whitespace, which no data-path.txt can list (it is read as words): "
                "move the folder to a path without whitespace, then rerun `bertprep tokenize` with --out there to "
                "rewrite it; its finished shards are kept")
    return f"rerun `bertprep tokenize` with --out {here} to rewrite it; its finished shards are kept"
