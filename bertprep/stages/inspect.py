"""`bertprep inspect`: decode records of any format and any kind, and show every field.

The header names the record kind (bertprep.formats.schemas). With --vocab,
input_ids are shown as tokens, masked positions marked as `[token|label]`
(token: what the model sees, label: what it must predict), and a SQuAD
training feature's answer span as the tokens it covers.
"""

import argparse
import json
import os

import numpy as np

from bertprep import formats
from bertprep.errors import DataError, UsageError
from bertprep.formats.schemas import UNMASKED
from bertprep.manifests import load_records_manifest
from bertprep.masking import DynamicMasking, first_instances
from bertprep.tokenization import load_vocab, resolve_vocab_path

# Epochs the loaders can mask: they carry epochs as int64 (masking.instance_keys), so larger ones are no epoch
# any loader reaches, and a wrapped one would show another epoch's masks.
MAX_EPOCH = (1 << 63) - 1


def add_arguments(parser):
    parser.add_argument("file", help="a TFRecord, OFRecord, HDF5 or Parquet file (format detected)")
    parser.add_argument("--vocab", help="vocab.txt or hub model id, to show tokens")
    parser.add_argument("-n", "--num", type=int, default=3, help="records to show (default 3)")
    parser.add_argument("--skip", type=int, default=0, help="records to skip first")
    parser.add_argument("--json", action="store_true", help="one JSON object per record")
    parser.add_argument("--epoch", type=epoch_number, default=None,
                        help="unmasked records (create --masking dynamic): show each as the loaders mask it in epoch N")


def epoch_number(text):
    """An --epoch value: an integer in 0..MAX_EPOCH (argparse makes anything else a usage error, exit 2)."""
    try:
        epoch = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= epoch <= MAX_EPOCH:
        raise argparse.ArgumentTypeError(f"{epoch} is not an epoch (0..{MAX_EPOCH})")
    return epoch


def token_line(record, words):
    """input_ids as tokens up to the last real token, masked positions as [seen|label]."""
    ids = record["input_ids"]
    length = int((record["input_mask"] != 0).sum()) if "input_mask" in record else len(ids)  # packed: 1..k
    labels = {}
    if "masked_lm_positions" in record and "masked_lm_weights" in record:
        for pos, label, weight in zip(record["masked_lm_positions"], record["masked_lm_ids"], record["masked_lm_weights"]):
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


def answer_line(record, words):
    """The tokens of a SQuAD feature's answer span (start..end inclusive); the reference's 0/0 means none here."""
    start, end = int(record["start_positions"][0]), int(record["end_positions"][0])
    if start == 0 and end == 0:
        return "(none in this window)"
    ids = record["input_ids"]
    return " ".join(words[int(i)] if 0 <= int(i) < len(words) else f"<{int(i)}>" for i in ids[start:end + 1])


def run(args):
    if not os.path.isfile(args.file):
        raise DataError(f"{args.file}: not a file")
    words = load_vocab(resolve_vocab_path(args.vocab)).tokens if args.vocab else None  # tokens[id]: the line of that id
    fmt = formats.sniff_format(args.file)
    try:
        kind = formats.record_kind(args.file, fmt).name
    except DataError:
        kind = "unknown kind"  # still shown field by field; a damaged record is reported when it is reached
    mask_for_epoch = None
    if args.epoch is not None:
        mask_for_epoch = epoch_masker(args.file, kind, args.epoch, resolve_vocab_path(args.vocab) if args.vocab else None)
        kind = f"{kind}, masked as in epoch {args.epoch}"
    shown = 0
    for index, record in enumerate(formats.read_records(args.file, fmt)):
        if index < args.skip:
            continue
        if shown >= args.num:
            break
        shown += 1
        if mask_for_epoch is not None:
            record = mask_for_epoch(record, index)
        if args.json:
            print(json.dumps({"record": index, **{k: np.asarray(v).tolist() for k, v in record.items()}}))
            continue
        print(f"== {args.file} ({fmt}, {kind}) record {index}")
        if words is not None and "input_ids" in record:
            print(f"  tokens: {token_line(record, words)}")
            if "start_positions" in record and "end_positions" in record:
                print(f"  answer: {answer_line(record, words)}")
        for name, values in record.items():
            values = np.asarray(values)
            print(f"  {name} ({values.dtype}, {len(values)}): {' '.join(_fmt(v) for v in values.tolist())}")
    if shown == 0 and not args.json:
        print(f"{args.file} ({fmt}): no records at index {args.skip} or later")
    return 0


def epoch_masker(path, kind, epoch, vocab_path):
    """record, index in file -> the record masked as the loaders mask it in `epoch` (keyed by its global index)."""
    if kind != UNMASKED.name:
        raise UsageError(f"--epoch: {path} holds {kind} records; only unmasked ones (create --masking dynamic) "
                         "are masked at load time")
    manifest, corpus_dir = _manifest_of(path)
    masking = DynamicMasking.from_manifest(manifest, os.path.join(corpus_dir, "manifest.json"), vocab_path)
    first = first_instances(manifest, corpus_dir).get(os.path.normpath(os.path.abspath(path)))
    if first is None:
        raise DataError(f"{path}: its manifest gives no first_instance (rerun `bertprep create --masking dynamic`)")

    def mask(record, index):
        batch = {name: np.asarray(values)[None] for name, values in record.items()}
        masked = masking.apply(batch, epoch, np.array([first + index]))
        return {name: values[0] for name, values in masked.items()}

    return mask


def _manifest_of(path):
    """(manifest, its directory) of the records directory holding `path` (its split's directory's parents)."""
    directory = os.path.dirname(os.path.abspath(path))
    for _ in range(3):
        directory = os.path.dirname(directory)
        manifest = load_records_manifest(directory, (formats.sniff_format(path),))
        if manifest is not None:
            return manifest, directory
    raise DataError(f"{path}: no manifest.json in the directories above it: --epoch needs the records directory's "
                    "manifest (its masking settings)")


def _fmt(value):
    return f"{value:g}" if isinstance(value, float) else str(value)
