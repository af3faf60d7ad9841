"""The formatted stage: extracted documents, ready for `bertprep shard`.

    WORKDIR/formatted/<corpus>/<part>.jsonl     one document per line:
        {"id": str, "title": str, "text": str}  paragraphs of `text` separated by "\\n"
    WORKDIR/formatted/<corpus>/manifest.json    per part: documents, bytes, sha256, source file

JSON lines because a document's text may hold any character (blank lines,
tabs) and a reader can stream it one document at a time. One part per
source file, so formatting and sharding run in parallel over parts and an
interrupted run redoes only the parts without a manifest entry. A run holds
the corpus directory (`bertprep.atomic.hold`): parts are written in its
`.partial/` and renamed into place, and a second run into it is refused.
"""

import hashlib
import json
import re

from bertprep import __version__, storage
from bertprep.atomic import atomic_open, hold
from bertprep.engines import pool_results
from bertprep.errors import DataError
from bertprep.folder import Folder
from bertprep.workdir import file_matches, load_manifest, removed_warning, save_manifest, stage_dir

FORMAT = 'jsonl: one {"id", "title", "text"} object per line; paragraphs of text separated by "\\n"'
# Half of a UTF-16 pair, which JSON's \ud800 escapes can spell: no character, so UTF-8 cannot encode it (a
# traceback from dedup's hash, shard's scratch file and vocab's trainer).
SURROGATE = re.compile("[\ud800-\udfff]")


def corpus_dir(workdir, corpus):
    return stage_dir(workdir, "formatted", corpus)


def write_part(path, documents, staging):
    """Write documents ({"id","title","text"}) as JSON lines atomically (the temporary in `staging`);
    drops empty texts. Returns {"documents", "dropped_empty", "bytes", "sha256"}.
    """
    count = dropped = size = 0
    digest = hashlib.sha256()
    with atomic_open(path, "wb", staging) as out:
        for doc in documents:
            text = (doc.get("text") or "").strip()
            if not text:
                dropped += 1
                continue
            line = json.dumps({"id": str(doc.get("id", "")), "title": doc.get("title") or "", "text": text},
                              ensure_ascii=False)
            data = line.encode("utf-8") + b"\n"
            out.write(data)
            digest.update(data)
            size += len(data)
            count += 1
    return {"documents": count, "dropped_empty": dropped, "bytes": size, "sha256": digest.hexdigest()}


def format_parts(workdir, corpus, source, parts, workers=1, progress=None):
    """Produce WORKDIR/formatted/<corpus>/<name>.jsonl for each part.

    `parts` is a list of (name, source_key, make_documents): `source_key` says
    which input the part comes from (a checksum; the part is redone when it
    changes); `make_documents()` yields the documents. Runs `workers` parts
    at a time. Returns the manifest.
    """
    directory = corpus_dir(workdir, corpus)
    with hold(directory, "bertprep download") as staging:
        return _format_parts(Folder(directory), corpus, source, parts, workers, progress, staging)


def _format_parts(out, corpus, source, parts, workers, progress, staging):
    old = load_manifest(out) or {}
    files = {}
    todo = []
    for name, source_key, make_documents in parts:
        filename = name + ".jsonl"
        entry = old.get("files", {}).get(filename)
        if entry and entry.get("source") == source_key and file_matches(out.path(filename), entry):
            files[filename] = entry
        else:
            todo.append((filename, source_key, make_documents))
    # parts the source no longer has would otherwise be sharded with the rest
    clear_earlier_parts(out, old, set(files) | {t[0] for t in todo}, progress)
    manifest = {
        "tool": "bertprep",
        "version": __version__,
        "stage": "format",
        "corpus": corpus,
        "source": source,
        "format": FORMAT,
        "files": files,
    }
    save_manifest(out, manifest)

    def one(item):
        filename, source_key, make_documents = item
        stats = write_part(out.path(filename), make_documents(), staging)
        return filename, dict(stats, source=source_key)

    if progress is not None and todo:
        progress.note(f"formatting {len(todo)} part(s) into {out}")
    for filename, entry in _map(one, todo, workers):
        files[filename] = entry
        save_manifest(out, manifest)
        if progress is not None:
            progress.advance(0, documents=entry["documents"])
    return manifest


def clear_earlier_parts(out, old, keep, progress):
    """Remove the .jsonl parts of the corpus Folder `out` that this run does not write (`keep`) and the earlier
    run's manifest `old` lists, naming them; refuse a .jsonl it does not list: no download wrote it, and
    `bertprep shard` would read it into training with the corpus (issue 57: never removed or read without a
    word). Returns the removed names."""
    listed = set(old.get("files") or ())
    present = {name for name in out.names_in() if name.endswith(".jsonl") and not name.startswith(".")}
    foreign = sorted(present - listed - keep)
    if foreign:
        raise DataError(f"{out.display(foreign[0])}: a .jsonl that no download into this corpus folder wrote (its "
                        "manifest does not list it); `bertprep shard` would read it into training: move it out")
    stale = sorted((present & listed) - keep)
    for name in stale:
        out.remove(name)
    if stale and progress is not None:
        progress.note(removed_warning(stale))
    return stale


def save_parts_manifest(directory, corpus, source, files):
    """For a corpus written as one unit from one source (a dump), while holding `directory`.

    With `files` ({name: stats}) None: the manifest if it records `source`
    and every part is present, else None (after removing what is there, so
    a new extraction starts clean). With `files`: record them as complete.
    """
    out = Folder(directory)
    old = load_manifest(out) or {}
    if files is None:
        if old.get("source") == source and old.get("files") and all(
            file_matches(out.path(name), entry) for name, entry in old["files"].items()
        ):
            return old
        for name in out.names_in():
            if name.endswith(".jsonl") or name == "manifest.json":
                out.remove(name)
        return None
    manifest = {"tool": "bertprep", "version": __version__, "stage": "format", "corpus": corpus,
                "source": source, "format": FORMAT, "files": files}
    save_manifest(out, manifest)
    return manifest


def _map(function, items, workers):
    if workers <= 1 or len(items) <= 1:
        yield from map(function, items)
        return
    import multiprocess

    with multiprocess.Pool(min(workers, len(items))) as pool:
        yield from pool_results(pool, pool.imap(function, items))  # ends at a worker killed mid-task


def iter_documents(path, sha256=None):
    """Yield (line number, document dict) from a formatted .jsonl part (`sha256`: its manifest's, checked)."""
    from bertprep.errors import DataError
    from bertprep.jsonlines import json_lines

    for number, doc in json_lines(path, lambda number, exc: DataError(
            f"{storage.display(path)}:{number}: not a JSON document line ({exc})"), sha256):
        if not isinstance(doc, dict) or not isinstance(doc.get("text"), str):
            raise DataError(f'{storage.display(path)}:{number}: expected an object with a "text" string')
        if (surrogate := SURROGATE.search(doc["text"])) is not None:
            raise DataError(f'{storage.display(path)}:{number}: "text" holds a lone UTF-16 surrogate '
                            f'(\\u{ord(surrogate[0]):04x} at character {surrogate.start()}), no character: expected '
                            "text that UTF-8 can encode")
        yield number, doc
