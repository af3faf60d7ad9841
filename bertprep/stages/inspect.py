"""`bertprep.inspect(...)`: decode records of any format and any kind, and show every field
(`bertprep/cli/inspect.py` is the command line).

The header names the record kind (bertprep.formats.schemas). With --vocab,
input_ids are shown as tokens, masked positions marked as `[token|label]`
(token: what the model sees, label: what it must predict), and a SQuAD
training feature's answer span as the tokens it covers.
"""

import dataclasses
import io
import json
import os
from typing import Any, TextIO

import numpy as np

from bertprep import formats, storage
from bertprep.errors import DataError, UsageError
from bertprep.folder import Folder
from bertprep.formats import codecs, megatron
from bertprep.formats.framing import empty_and_named_for_no_format
from bertprep.formats.schemas import UNMASKED
from bertprep.masking import DynamicMasking, first_instances
from bertprep.options import build_options, check_types, errors_name_fields, normalise_paths, short_repr
from bertprep.progress import Summary
from bertprep.records_manifest import load_records_manifest
from bertprep.stages.validate.sequences import tokenize_list
from bertprep.text_inputs import refuse_stream
from bertprep.tokenization import load_vocab, resolve_vocab_path
from bertprep.workdir import MANIFEST, load_manifest

# Epochs the loaders can mask: they carry epochs as int64 (masking.instance_keys), so larger ones are no epoch
# any loader reaches, and a wrapped one would show another epoch's masks.
MAX_EPOCH = (1 << 63) - 1


@errors_name_fields
@dataclasses.dataclass(frozen=True)
class InspectOptions:
    """Which records of `file` (any format, detected) `inspect` shows: `num` of them after the first `skip`,
    input_ids as tokens of `vocab` (a vocab.txt or hub model id; None: ids only), as JSON lines with `json`,
    unmasked records (create --masking dynamic) masked as the loaders mask them in `epoch`."""

    file: str
    vocab: str | None = None
    num: int = 3
    skip: int = 0
    json: bool = False
    epoch: int | None = None

    def __post_init__(self):
        check_types(self)
        normalise_paths(self, "file", flags=False)
        if self.num < 0 or self.skip < 0:  # a negative count was an empty listing and exit 0 (issue 57)
            raise UsageError(f"--num and --skip must be at least 0, not {self.num if self.num < 0 else self.skip}")
        if self.epoch is not None and not 0 <= self.epoch <= MAX_EPOCH:
            raise UsageError(f"argument --epoch: {self.epoch} is not an epoch (0..{MAX_EPOCH})")


def token_line(record, words):
    """input_ids as tokens up to the last real token, masked positions as [seen|label]."""
    ids = record["input_ids"]
    length = int((record["input_mask"] != 0).sum()) if "input_mask" in record else len(ids)  # packed: 1..k
    labels = {}
    if "masked_lm_positions" in record and "masked_lm_weights" in record:
        for pos, label, weight in zip(record["masked_lm_positions"], record["masked_lm_ids"],
                                      record["masked_lm_weights"]):
            if weight > 0:
                labels[int(pos)] = int(label)

    def word(i):
        return words[i] if 0 <= i < len(words) else f"<{i}>"

    shown = []
    for position in range(length):
        token = word(int(ids[position]))
        if position in labels:
            token = f"[{token}|{word(labels[position])}]"
        shown.append(token)
    return " ".join(shown)


def _refuse_directory(path):
    """A directory is one usage line naming a file of it to give: it was "…: not a file", exit 1, of a records
    folder whose files inspect shows one at a time."""
    tree = Folder(path)
    if not tree.isdir():
        return
    from bertprep.stages.validate.dataset import find_record_files

    records = find_record_files(path)  # tfrecord first, training first, in natural order
    example = records[0].path if records else next((
        storage.join(root, name) for root, _dirs, files in tree.walk() for name in files
        if codecs.of_sequence_file_name(name) is not None), None)
    named = f"name one of its files, e.g. {example}" if example else "it holds no record or token-sequence file"
    raise UsageError(f"{path}: a directory; inspect shows one file of records or token sequences: {named} "
                     "(bertprep validate checks a whole directory)")


def answer_line(record, words):
    """The tokens of a SQuAD feature's answer span (start..end inclusive); the reference's 0/0 means none here."""
    start, end = int(record["start_positions"][0]), int(record["end_positions"][0])
    if start == 0 and end == 0:
        return "(none in this window)"
    ids = record["input_ids"]
    return " ".join(words[int(i)] if 0 <= int(i) < len(words) else f"<{int(i)}>" for i in ids[start:end + 1])


def inspect(options: InspectOptions | None = None, /, *, stream: TextIO | None = None, **fields: Any) -> Summary:
    """The records `options` (or InspectOptions(**fields)) selects, each written to `stream` (a text file;
    None: nowhere) as the command shows it while it is read, so a damaged record later in the file still
    leaves the ones before it shown. The Summary's `records` holds them as {"record": index, feature: values}."""
    check_stream(stream)
    options = build_options(InspectOptions, options, fields)  # not both (a keyword beside one was ignored)
    path = megatron.dataset_file(options.file)
    _refuse_directory(path)
    refuse_stream(path, "record file")  # a pipe (`inspect <(cat part-0)`) was "no such file", exit 1: it is there
    storage.require(path, "file", DataError(f"{path}: no such file"))
    _refuse_data_path_list(path)
    megatron.check_index_beside(path)
    megatron.check_index_named(path)
    vocab_path = resolve_vocab_path(options.vocab) if options.vocab else None
    vocab = load_vocab(vocab_path) if vocab_path else None
    words = vocab.tokens if vocab else None  # tokens[id]: the line of that id
    warnings = _other_vocab_warnings(path, options.vocab, vocab)
    sequence_codec = codecs.of_sequence_file_name(os.path.basename(path))
    if sequence_codec is not None and sequence_codec.implementation.prefixes(path):  # token sequences, not records
        if options.epoch is not None:  # was ignored: the sequences shown unmasked, as if masked in that epoch
            raise UsageError(f"--epoch: {path} holds token sequences, which Megatron masks as it trains; only "
                             "unmasked records (create --masking dynamic) are masked at load time")
        return _with_warnings(inspect_sequences(path, sequence_codec, options, words, stream), warnings)
    if empty_and_named_for_no_format(path):
        # sniffing's fallback called it "(ofrecord, unknown kind): no records", exit 0, of an empty corpus.txt
        raise DataError(f"{path}: an empty file (0 bytes) whose name is no record file's (*.tfrecord, "
                        "*.tf_record, part-N, *.ofrecord, *.hdf5, *.parquet): no records and no format to show")
    fmt = formats.sniff_format(path)
    try:
        kind = formats.record_kind(path, fmt).name
    except DataError:
        kind = "unknown kind"  # still shown field by field; a damaged record is reported when it is reached
    shown_as = kind
    mask_for_epoch = None
    if options.epoch is not None:
        mask_for_epoch = epoch_masker(path, kind, options.epoch, vocab_path)
        shown_as = f"{kind}, masked as in epoch {options.epoch}"
    records: list = []
    for index, record in enumerate(formats.read_records(path, fmt, skip=options.skip), start=options.skip):
        if len(records) >= options.num:
            break
        if mask_for_epoch is not None:
            record = mask_for_epoch(record, index)
        records.append({"record": index, **{k: np.asarray(v).tolist() for k, v in record.items()}})
        lines = [json.dumps(records[-1])] if options.json else record_lines(f"{path} ({fmt}, {shown_as})", index,
                                                                           record, words)
        _write(stream, lines)
    if not records and not options.json:
        _write(stream, [nothing_shown(f"{path} ({fmt}, {shown_as})", "records", options)])
    return _with_warnings(Summary("bertprep inspect", {"file": path, "format": fmt, "kind": kind,
                                                       "epoch": options.epoch, "records": records}), warnings)


def _refuse_data_path_list(path):
    """A DataError naming a prefix that `path`, a tokenize output's data-path.txt (or test-data-path.txt), lists:
    inspect read the list as a record file and said "not a record file … it starts with text ('16199 /…')",
    which neither said what the file is nor what to inspect instead."""
    if not tokenize_list(path):
        return
    prefixes = storage.read_bytes(path).decode("utf-8", "replace").split()[1::2]
    instead = f": inspect a prefix it names ({prefixes[0]})" if prefixes else ""
    raise DataError(f"{storage.display(path)}: the --data-path list of a `bertprep tokenize` output (\"<tokens> "
                    f"<prefix>\" pairs), not a record file{instead}")


def _with_warnings(summary, warnings):
    """`summary` with its "warnings" (a Python caller's BertprepWarning; the command line's stderr lines)."""
    if warnings:
        summary.fields["warnings"] = warnings
    return summary


def _other_vocab_warnings(path, given, vocab):
    """A warning where `vocab` (from --vocab `given`) is not the one the manifest of `path`'s directory (a
    tokenize output's, or a records directory's two levels up) says its ids were made with: the tokens shown were
    another vocab's words, said nowhere (an id's line in the wrong vocab.txt)."""
    if vocab is None:
        return []
    directory = os.path.dirname(storage.absolute(path))
    for _ in range(4):  # the file's own directory (tokenize), then split/, format/, records directory
        try:
            manifest = load_manifest(directory)
        except DataError:
            manifest = None
        made_with = ((manifest or {}).get("vocab") or {}) if isinstance(manifest, dict) else {}
        if isinstance(made_with, dict) and isinstance(made_with.get("sha256"), str):
            if made_with["sha256"] == vocab.sha256:
                return []
            return [f"--vocab {given}: not the vocab {storage.display(storage.join(directory, MANIFEST))} says these "
                    f"ids were made with ({made_with.get('path')}, sha256 {made_with['sha256'][:12]}…; this one "
                    f"{vocab.sha256[:12]}…): the tokens shown are another vocab's words"]
        directory = os.path.dirname(directory)
    return []


def check_stream(stream):
    """A UsageError unless `stream` is None or a text stream: 5 or a file name was an AttributeError (no
    `write`) after the file was read, a binary stream a TypeError at the first record."""
    binary = isinstance(stream, (io.RawIOBase, io.BufferedIOBase))  # BytesIO, open(path, "wb")
    if stream is not None and (binary or not callable(getattr(stream, "write", None))):
        raise UsageError('stream must be a text stream (sys.stdout, io.StringIO, open(path, "w")), got '
                         f"{type(stream).__name__} {short_repr(stream)}")


def inspect_sequences(path, codec, options, words, stream):
    """The sequences `options` selects of an indexed dataset (`path`: its .bin or .idx), each as its document
    number, its ids and, with a vocab, its tokens."""
    data = codec.read_sequences(codec.implementation.prefixes(path)[0])
    shown = []
    for index in range(options.skip, min(options.skip + options.num, len(data.lengths))):
        ids = data.sequence(index).tolist()
        document = int(np.searchsorted(data.document_indices, index, side="right") - 1)
        shown.append({"sequence": index, "document": document, "ids": ids})
        if options.json:
            lines = [json.dumps(shown[-1])]
        else:
            lines = [f"== {path} ({codec.name}, sequences) sequence {index} (document {document})"]
            if words is not None:
                lines.append(f"  tokens: {' '.join(words[i] if 0 <= i < len(words) else f'<{i}>' for i in ids)}")
            lines.append(f"  ids ({data.tokens.dtype}, {len(ids)}): {' '.join(map(str, ids))}")
        _write(stream, lines)
    if not shown and not options.json:
        _write(stream, [nothing_shown(f"{path} ({codec.name}, sequences)", "sequences", options)])
    return Summary("bertprep inspect", {"file": path, "format": codec.name, "kind": "sequences",
                                        "epoch": options.epoch, "records": shown})


def nothing_shown(header, what, options):
    """The line of a listing that shows nothing: none asked for (--num 0, which said "no records at index 0"
    of a file that has them), or none left after --skip."""
    if options.num == 0:
        return f"{header}: --num 0: no {what} shown"
    return f"{header}: no {what} at index {options.skip} or later"


def record_lines(header, index, record, words):
    """How the command shows one record: its header, its tokens (with `words`), every feature's values."""
    lines = [f"== {header} record {index}"]
    if words is not None and "input_ids" in record:
        lines.append(f"  tokens: {token_line(record, words)}")
        if "start_positions" in record and "end_positions" in record:
            lines.append(f"  answer: {answer_line(record, words)}")
    for name, values in record.items():
        values = np.asarray(values)
        lines.append(f"  {name} ({values.dtype}, {len(values)}): {' '.join(_fmt(v) for v in values.tolist())}")
    return lines


def _write(stream, lines):
    if stream is not None:
        for line in lines:
            print(line, file=stream)


def epoch_masker(path, kind, epoch, vocab_path):
    """record, index in file -> the record masked as the loaders mask it in `epoch` (keyed by its global index)."""
    if kind != UNMASKED.name:
        raise UsageError(f"--epoch: {path} holds {kind} records; only unmasked ones (create --masking dynamic) "
                         "are masked at load time")
    manifest, corpus = _manifest_of(path)
    masking = DynamicMasking.from_manifest(manifest, corpus.path("manifest.json"), vocab_path)
    first = first_instances(manifest, corpus.root).get(storage.absolute_normpath(path))
    if first is None:
        raise DataError(f"{path}: its manifest gives no first_instance (rerun `bertprep create --masking dynamic`)")

    def mask(record, index):
        batch = {name: np.asarray(values)[None] for name, values in record.items()}
        masked = masking.apply(batch, epoch, np.array([first + index]))
        return {name: values[0] for name, values in masked.items()}

    return mask


def _manifest_of(path):
    """(manifest, its Folder) of the records directory holding `path`: the nearest records manifest at or above
    its folder, found as `bertprep validate` and bertprep.hf find it (find_manifest), then checked."""
    from bertprep.stages.validate.dataset import find_manifest  # validate's readers load for --epoch alone

    found = find_manifest(storage.absolute(path))
    if found is None:
        raise DataError(f"{path}: no manifest.json in the directories above it: --epoch needs the records "
                        "directory's manifest (its masking settings)")
    corpus = Folder(os.path.dirname(found["_path"]))
    return load_records_manifest(corpus, (formats.sniff_format(path),)), corpus  # a damaged one: its error


def _fmt(value):
    return f"{value:g}" if isinstance(value, float) else str(value)
