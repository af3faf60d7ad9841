"""`bertprep tokenize`: text shards → token ids per sentence with document boundaries, for loaders that pair
and mask at load time (Megatron-Core's BERTMaskedWordPieceDataset).

The tokenization is `create`'s, line for line: the same reading rules
(bertprep/corpus.py: lines stripped, a blank line ends a document, a line
that tokenizes to nothing is dropped without ending its document, empty
documents dropped) and the same FullTokenizer (bertprep/tokenization.py,
`--no-lower-case` for cased vocabs). A shard's sentences are its Corpus's
sentences and its documents the Corpus's documents, so a sequence of the
output is exactly the ids `create` pairs into instances.

One output per input shard, in the format's own files (the codec of
`--format`, `Codec.holds` "sequences"; Megatron's .bin/.idx pair, named as
Megatron-LM's preprocess_data names sentence-level output):

    <out>/<corpus>/manifest.json
    <out>/<corpus>/data-path.txt                    "<tokens> <prefix>" per training shard: --data-path
    <out>/<corpus>/test-data-path.txt               the same for the test shards: --valid-data-path
    <out>/<corpus>/<split>/<stem>_text_sentence.bin
    <out>/<corpus>/<split>/<stem>_text_sentence.idx

The ids are stored in the dtype Megatron picks for the vocab size (uint16
below 65,500, else int32). Files are staged in `.partial/` and renamed
into place, the .idx last; the manifest lists each finished file with its
source's sha256 and the settings (saved at the first finished shard, then
at most once a second, and at the end or before an error is raised:
workdir.PacedSaves), so a rerun skips finished shards. The
bytes of a shard depend on nothing but its text, the vocab and the case
flag: any worker count writes the same files. A run that fails removes
the outputs of its shards the manifest does not list (Folder.remove_unlisted),
then the folders it made for its output while they are still empty
(atomic.hold); a folder that was there before stays.
"""

import dataclasses
import hashlib
import json
import os
import time
from typing import Any, ClassVar

import numpy as np

from bertprep import __version__, storage
from bertprep.atomic import atomic_write_bytes, check_distinct_outputs, hold, refuse_if_held, staging_dir
from bertprep.corpus import read_text, tokenize_corpus
from bertprep.engines import EngineOptions, open_engine
from bertprep.errors import DataError, UsageError
from bertprep.folder import Folder
from bertprep.formats import codecs
from bertprep.options import build_options, errors_name_fields, refuse_overlap, set_field
from bertprep.progress import Progress, Summary, human_bytes
from bertprep.stages.create import (
    check_shard_stage_fields,
    default_inputs,
    follow_moved_inputs,
    remove_stale_outputs,
)
from bertprep.text_inputs import (
    casing_warning,
    check_input,
    corpus_name,
    discover_inputs,
    read_vocab,
    tokenizer_and_vocab,
    unread_inputs_warning,
)
from bertprep.tokenization import resolve_vocab_path
from bertprep.workdir import (
    SPLITS,
    check_corpus_name,
    forget_outputs,
    load_manifest,
    outputs_complete,
    paced_saves,
    refuse_another_stages,
    resolve_workdir,
    resuming_note,
    save_manifest,
)

# `--data-path $(cat data-path.txt)`: "<tokens> <prefix>" for each training shard. Weighted by size, a blend
# draws from each shard as a concatenation would; and megatron-core 0.16.1 cannot build BERT samples from an
# unweighted list (each dataset is then sized as one epoch, num_samples None, which its C++ build_mapping
# refuses), where a weighted one works.
DATA_PATH = "data-path.txt"
TEST_DATA_PATH = "test-data-path.txt"  # the test shards alike, where there are some: --valid-data-path


@errors_name_fields
@dataclasses.dataclass(frozen=True)
class TokenizeOptions:
    """`bertprep tokenize`'s flags. `input`: text shards (files, globs or directories with training/ and test/;
    None: the shards under WORKDIR/sharded, else the embedded sample corpus and its vocab); `vocab`: vocab.txt
    or a hub model id; `out`: the root (None: WORKDIR/tokenized), the files going to `<out>/<corpus>/<split>/`;
    `format`: a sequence format (`codecs.sequence_names()`); `lower_case` False for cased vocabs."""

    input: tuple[str, ...] | None = None
    vocab: str | None = None
    out: str | None = None
    corpus: str | None = None
    format: str = codecs.sequence_names()[0]
    lower_case: bool = True
    engine: EngineOptions = EngineOptions()
    workdir: str | None = None
    choices: ClassVar[dict[str, tuple[str, ...]]] = {"format": tuple(codecs.sequence_names())}  # check_types

    def __post_init__(self):
        check_shard_stage_fields(self)
        if self.format not in codecs.sequence_names():
            raise UsageError(f"--format must be one of {', '.join(codecs.sequence_names())}, not {self.format!r}")
        if self.corpus is not None:
            set_field(self, "corpus", check_corpus_name(self.corpus))


@dataclasses.dataclass(frozen=True)
class TokenizeTask:
    """One shard's work; plain data so any engine can ship it to a worker."""

    source: str
    source_sha256: str
    split: str
    prefix: str  # relative to the output directory: <split>/<stem>_text_sentence
    out_dir: str
    format: str
    vocab_path: str
    vocab_sha256: str  # the bytes the plan read: a worker's tokenizer is of them (tokenizer_and_vocab)
    vocab_size: int
    lower_case: bool
    settings_key: str

    def files(self):
        """The output files, relative to the output directory."""
        return [self.prefix + suffix for suffix in codecs.get(self.format).implementation.BIN_IDX]


# -- one shard -------------------------------------------------------------------------------


def shard_sequences(task):
    """(tokens, sentence lengths, document indices) of one shard: create's Corpus, as the format stores it."""
    tokenizer, _ = tokenizer_and_vocab(task.vocab_path, task.vocab_sha256, task.lower_case)
    corpus = tokenize_corpus(read_text(task.source), tokenizer)
    if corpus.num_documents == 0:
        raise DataError(f"{storage.display(task.source)}: no documents (every line is blank or tokenizes to nothing)")
    if len(corpus.tokens) and int(corpus.tokens.max()) >= task.vocab_size:  # a vocab file changed under the run
        raise DataError(f"{storage.display(task.source)}: id {int(corpus.tokens.max())} is past the vocab's "
                        f"{task.vocab_size} ids")
    return corpus.tokens, np.diff(corpus.sentence_starts), corpus.document_starts


def tokenize_shard(task):
    """Tokenize one shard and write its files; their manifest entries."""
    tokens, lengths, documents = shard_sequences(task)
    written = codecs.get(task.format).write_sequences(storage.join(task.out_dir, task.prefix), tokens, lengths,
                                                      documents, task.vocab_size, staging_dir(task.out_dir))
    counts = {"sequences": len(lengths), "documents": len(documents) - 1, "tokens": len(tokens)}
    entries = {task.prefix + suffix: {"format": task.format, "split": task.split,
                                      "source": storage.display(task.source), "source_sha256": task.source_sha256,
                                      "settings": task.settings_key, **counts, "bytes": size, "sha256": digest}
               for suffix, (size, digest) in written.items()}
    return {"source": task.source, "split": task.split, **counts, "files": entries}


# -- planning ---------------------------------------------------------------------------------


def plan(options):
    """(output directory, settings, tasks, notes, warnings) for `options`."""
    workdir = resolve_workdir(options.workdir)
    input_values, vocab_value, notes = default_inputs(workdir, options.input, options.vocab, options.corpus)
    if not vocab_value:
        raise UsageError("--vocab is required: a vocab.txt path or a hub model id such as bert-base-uncased")
    vocab = read_vocab(resolve_vocab_path(vocab_value) if storage.reads_in_place(vocab_value) else vocab_value)
    tokenizer_and_vocab(vocab.path, vocab.sha256, options.lower_case, vocab)  # built once: forked workers inherit it
    inputs = discover_inputs(input_values)
    if not inputs:
        raise DataError(f"{' '.join(map(storage.display, input_values))}: no input shards found")
    corpus = options.corpus or corpus_name(inputs)
    root = storage.absolute(options.out) if options.out else storage.join(workdir, "tokenized")
    out_dir = storage.join(root, corpus)
    refuse_if_held(out_dir)  # before every input is read whole and hashed (minutes for a large corpus)
    module = codecs.get(options.format).implementation
    settings = {"format": options.format, "lower_case": options.lower_case, "version": __version__,
                "dtype": module.optimal_dtype(vocab.size).name,
                "vocab": {"path": vocab.path, "sha256": vocab.sha256, "size": vocab.size}}
    settings_key = hashlib.sha256(json.dumps({**settings, "vocab": vocab.sha256}, sort_keys=True).encode()
                                  ).hexdigest()[:16]
    tasks = [TokenizeTask(source=path, source_sha256=check_input(path), split=split,
                          prefix=f"{split}/{module.prefix_name(os.path.splitext(os.path.basename(path))[0])}",
                          out_dir=out_dir, format=options.format, vocab_path=vocab.path, vocab_sha256=vocab.sha256,
                          vocab_size=vocab.size, lower_case=options.lower_case, settings_key=settings_key)
             for path, split in inputs]
    check_distinct_outputs((task.source, storage.join(out_dir, rel)) for task in tasks for rel in task.files())
    refuse_unlistable_prefixes(root, out_dir, tasks)
    warnings = [warning for warning in (vocab.duplicates_warning(), casing_warning(vocab, options.lower_case))
                if warning]
    if not any(task.split == "training" for task in tasks):
        warnings.append("no training split: data-path.txt is empty; give training/ shards (`bertprep shard`)")
    unread = unread_inputs_warning(input_values, inputs)
    warnings += [unread] if unread else []
    return out_dir, settings, tasks, notes, warnings


def _spaced(path):
    return any(character.isspace() for character in path)


def _undecodable(path):
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:  # a file name's bytes that are no UTF-8, kept by Python as lone surrogates
        return True
    return False


# What keeps a prefix out of data-path.txt: the test of a path, and why.
UNLISTABLE = ((_spaced, "holds whitespace, and data-path.txt is read as words (--data-path $(cat data-path.txt)); "
                        "choose an --out and input names without whitespace"),
              (_undecodable, "holds bytes that are no UTF-8 (a file name's), and data-path.txt is UTF-8 text; "
                             "choose an --out and input names in UTF-8"))


def refuse_unlistable_prefixes(root, out_dir, tasks):
    """A UsageError, before anything is written, when a prefix data-path.txt would list holds whitespace: it is
    read as words (`--data-path $(cat data-path.txt)`, argparse's nargs="*"), so no quoting of ours can carry a
    space through, and Megatron was handed pieces of paths as prefixes and weights (issue 57). Refused rather
    than written some other way: every reader of the list splits it alike. So is one that UTF-8 cannot encode
    (a file name of Latin-1 bytes): the list was a UnicodeEncodeError traceback after every shard was written."""
    for task in tasks:
        prefix = storage.display(storage.join(out_dir, task.prefix))
        for fault, why in UNLISTABLE:
            if fault(prefix):
                where = (f"--out {storage.display(root)}" if fault(storage.display(root))
                         else f"the input {storage.display(task.source)}")
                # escaped as the prefix's repr is: a stream that writes UTF-8 strictly cannot print a lone surrogate
                where = where.encode("utf-8", "backslashreplace").decode("utf-8")
                raise UsageError(f"{where}: the Megatron prefix {prefix!r} {why}")


def is_complete(task, files):
    """Done when each output has a manifest entry for the same source and settings, with the counts the summary
    reads, and a file that matches it."""
    return outputs_complete(task.out_dir, files, task.files(), task.source_sha256, task.settings_key,
                            ("sequences", "documents", "tokens"))


def data_path_pairs(out_dir, tasks, files, split):
    """[(tokens, prefix)] of the shards of `split`, in input order: Megatron's --data-path as weights and
    absolute prefixes."""
    return [(files[task.files()[0]]["tokens"], storage.display(storage.join(out_dir, task.prefix)))
            for task in tasks if task.split == split]


def write_data_paths(out_dir, tasks, files):
    """data-path.txt (training) and test-data-path.txt (where there is a test split); {split: pairs}."""
    written = {}
    for split, name in (("training", DATA_PATH), ("test", TEST_DATA_PATH)):
        pairs, path = data_path_pairs(out_dir, tasks, files, split), storage.join(out_dir, name)
        if pairs or split == "training":  # data-path.txt always: a command line may read it
            atomic_write_bytes(path, (" ".join(f"{t} {p}" for t, p in pairs) + "\n").encode())
            written[split] = pairs
        elif storage.exists(path):  # an earlier run's test split, no longer given
            storage.remove(path)
    return written


# -- the command ------------------------------------------------------------------------------


def tokenize(options: TokenizeOptions | None = None, /, *, quiet: bool = True, **fields: Any) -> Summary:
    """Tokenize text shards into a sequence format (`TokenizeOptions`, or its fields as keywords); the summary
    `--json` prints. `quiet=False` shows progress on stderr. Shards already complete are kept."""
    options = build_options(TokenizeOptions, options, fields)
    started = time.monotonic()
    out_dir, settings, tasks, notes, warnings = plan(options)
    refuse_overlap(out_dir, [*(options.input or ()), *(task.source for task in tasks)])
    refuse_another_stages(out_dir, "tokenize", "--out or --corpus")
    progress = Progress("tokenize", total=len(tasks), unit="shards", quiet=quiet)
    for note in notes:
        progress.note(note)
    for warning in warnings:
        progress.warn(f"warning: {warning}")
    with hold(out_dir, "bertprep tokenize"):  # clears what killed runs left in .partial/
        for name in (DATA_PATH, TEST_DATA_PATH):  # written last: an earlier run's would name what this run changes
            storage.remove(storage.join(out_dir, name))
        previous = (load_manifest(out_dir) or {}).get("files", {})
        wanted = {relative for task in tasks for relative in task.files()}
        # an input no longer given: readers glob the splits; said as create says it (issue 57: it went silently)
        removed = remove_stale_outputs(Folder(out_dir), previous, wanted, progress)
        warnings += [removed] if removed else []
        files = {relative: entry for relative, entry in previous.items() if relative in wanted}
        pending = [task for task in tasks if not is_complete(task, files)]
        # a shard moved with its text unchanged is complete: its entries name where it is now, as create's do
        follow_moved_inputs(tasks, pending, files, TokenizeTask.files)
        if len(pending) < len(tasks):
            progress.note(resuming_note(len(tasks) - len(pending), len(tasks)))
            progress.advance(len(tasks) - len(pending))
        manifest = {"tool": "bertprep", "stage": "tokenize", **settings, "files": files}
        if forget_outputs(files, [relative for task in pending for relative in task.files()]):
            save_manifest(out_dir, manifest)
        try:
            with (open_engine(options.engine, max_tasks=len(pending)) as engine,
                  paced_saves(lambda: save_manifest(out_dir, manifest)) as saves):  # saved before an error is raised
                for result in engine.run(tokenize_shard, pending, describe=lambda task: task.source):
                    files.update(result["files"])
                    saves.changed()
                    progress.advance(1, sequences=result["sequences"])
        except BaseException:  # the workers are stopped by now
            # another worker's shard finished while the failing one raised was left under its final names with no
            # entry (a first run: no manifest at all), and validate called such a folder SOUND
            Folder(out_dir).remove_unlisted([name for task in pending for name in task.files()], files)
            raise
        manifest["counts"] = split_counts(tasks, files)
        manifest["data_path"] = write_data_paths(out_dir, tasks, files)
        save_manifest(out_dir, manifest)
    progress.close()
    summary = {"out": storage.display(out_dir), "format": options.format, "dtype": settings["dtype"],
               "vocab": settings["vocab"], "lower_case": options.lower_case, "counts": manifest["counts"],
               "files": len(wanted), "bytes": sum(files[rel]["bytes"] for rel in wanted), "shards": len(tasks),
               "shards_tokenized": len(pending), "data_path": storage.display(storage.join(out_dir, DATA_PATH)),
               "seconds": round(time.monotonic() - started, 3), "warnings": warnings}
    return Summary("bertprep tokenize: done", summary, rows=_rows(summary), complete_before=not pending)


def split_counts(tasks, files):
    """{split: {documents, sequences, tokens}} over every shard (one entry per shard: its first file's)."""
    counts = {}
    for task in tasks:
        entry = files[task.files()[0]]
        split = counts.setdefault(task.split, {"documents": 0, "sequences": 0, "tokens": 0})
        for name in split:
            split[name] += entry[name]
    return dict(sorted(counts.items(), key=lambda item: SPLITS.index(item[0]) if item[0] in SPLITS else 2))


def _rows(fields):
    rows = [("output", fields["out"])]
    rows += [(f"sequences ({split})", f"{c['sequences']:,} in {c['documents']:,} documents, {c['tokens']:,} tokens")
             for split, c in fields["counts"].items()]
    rows += [("files", f"{fields['files']} ({fields['format']}, {fields['dtype']} ids of a "
                       f"{fields['vocab']['size']:,}-token vocab, {'uncased' if fields['lower_case'] else 'cased'})"),
             ("bytes", human_bytes(fields["bytes"])),
             ("shards", f"{fields['shards']} ({fields['shards_tokenized']} tokenized, "
                        f"{fields['shards'] - fields['shards_tokenized']} already complete)"),
             ("data path", fields["data_path"]), ("seconds", f"{fields['seconds']:.2f}")]
    return rows + [("warning", warning) for warning in fields["warnings"]]
