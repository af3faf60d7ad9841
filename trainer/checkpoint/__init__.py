"""Pretrained BERT checkpoints of every kind a BERT user has, read by sniffing the path and written
back out: ours (`ckpt-<step>/`), Google's TF1 `bert_model.ckpt` (NVIDIA's TF checkpoints too), a
Hugging Face directory or hub id, NVIDIA's PyTorch `.pt`.

Every reader returns a `Checkpoint`: the config from the checkpoint and its weights in Google's
naming and layout (names.py, the one table), checked against the config here, once, whatever the
kind: every variable present with the config's shape, nothing of another architecture, a vocab
padded beyond the config's `vocab_size` trimmed only where it is padding (and said so).
"""

import contextlib
import os
import re
import tempfile
import warnings

from bertprep import storage
from bertprep.atomic import atomic_dir, staging_dir
from bertprep.errors import ON_COMMAND_LINE, BertprepWarning, DataError, UsageError
from bertprep.folder import Folder
from bertprep.options import Name, check_argument, refuse_overlap
from trainer.checkpoint.base import Checkpoint, checked, vocab_beside  # noqa: F401  (the package's API)


def sniff(path):
    """The module that reads the kind of checkpoint at `path`, or a DataError naming what was looked for
    (a UsageError naming both where a directory holds two kinds: which one is meant is not guessed)."""
    from trainer.checkpoint import google, hf, nvidia, ours

    path = _path_argument("sniff", path)
    found = [module for module in (ours, google, hf, nvidia) if module.sniff(path)]
    if len(found) > 1:
        by_prefix = f", or name the Google one by its prefix {google.checkpoint_prefix(path)}" if google in found \
            else ""
        raise UsageError(f"{path}: holds both {found[0].HELD} and {found[1].HELD}: which one is meant? Move one of "
                         f"them out{by_prefix}")
    if found:
        return found[0]
    if hf.looks_like_hub_id(path):
        return hf
    _refuse_a_file_of_a_checkpoint(path)
    _refuse_a_checkpoint_that_lost_a_file(path)
    raise DataError(f"{path}: not a checkpoint this trainer reads (expected a ckpt-<step>/ or checkpoint "
                     "directory of the trainer, a Google bert_model.ckpt prefix or its directory, a Hugging Face "
                     "directory with config.json and model.safetensors or pytorch_model.bin, a hub id, or "
                     "an NVIDIA .pt)")


def _refuse_a_file_of_a_checkpoint(path):
    """A DataError naming what to give where `path` is one file of a checkpoint (model.safetensors, state.npz,
    bert_model.ckpt.index, bert_config.json): it was 'not a checkpoint this trainer reads', the checkpoint beside
    it not said."""
    from trainer.checkpoint import google, hf, ours

    if not os.path.isfile(path):
        return
    prefix = re.sub(r"\.(index|data-\d+-of-\d+)$", "", path)
    if prefix != path and google.sniff(prefix):
        raise DataError(f"{path}: one file of the Google checkpoint {prefix}: name its prefix {prefix} (or its "
                        "directory)")
    directory = os.path.dirname(path) or "."
    held = [module for module in (ours, google, hf) if module.sniff(directory)]
    if held:
        raise DataError(f"{path}: one file of {held[0].HELD} in {directory}: name the directory {directory}")


def _refuse_a_checkpoint_that_lost_a_file(path):
    """A DataError naming the missing file where `path` holds a checkpoint's other files without one its kind is
    known by (a copy or download cut short): a Hugging Face config.json without model.safetensors (or the weights
    without config.json), a Google bert_model.ckpt.data-* without its .index, our state.json without state.npz was
    "not a checkpoint this trainer reads (expected ...)", as if it were some other folder, the lost file unnamed."""
    from trainer.checkpoint import google, hf, ours

    for module in (ours, google, hf):
        lost = module.lost_file(path)
        if lost:
            raise DataError(f"{path}: {lost}")


def read(path):
    """The checked Checkpoint at `path` (a URL's read from a local copy, see _read_copy)."""
    path = _path_argument("read", path)
    if not storage.reads_in_place(path):
        return _read_copy(storage.absolute(path))
    from trainer.checkpoint.tokenizer import casing_beside

    checkpoint = sniff(path).read(path)
    directory = checkpoint.path if os.path.isdir(checkpoint.path) else os.path.dirname(checkpoint.path)
    checkpoint.lower_case, checkpoint.casing_source = casing_beside(directory)
    return checkpoint


def _path_argument(function, path):
    """`path` (a str or a path object) as its string, else one UsageError line naming `function`'s argument: a
    pathlib.Path was a TypeError traceback from deep inside ('PosixPath' + 'str'), as convert's once was."""
    return os.fspath(check_argument(f"{function}'s path", path, str))


def _read_copy(url):
    """The Checkpoint at `url`, read from a temporary copy of the objects directly in its directory (for
    ours, its newest complete ckpt-<step>/) and named by URL, its errors and notes too. Every reader
    holds the weights in memory, so the copy goes once they are read."""
    from trainer import run_state

    place, name = Folder(url), None  # a checkpoint directory, or an object or prefix in one
    if place.isdir():
        newest = [] if place.isfile("state.npz") else run_state.list_checkpoints(url)
        source = Folder(newest[-1][1]) if newest else place  # the Folder whose objects are copied
    elif place.isfile() or Folder(url + ".index").isfile():  # NVIDIA's .pt, Google's prefix: with their directory
        directory, name = url.rsplit("/", 1)
        source = Folder(directory)
    else:
        raise place.not_found(DataError(f"{place}: no such checkpoint (no object or directory there)"))
    with tempfile.TemporaryDirectory(prefix="bertprep-checkpoint-") as temp:
        local = os.path.join(temp, source.root.rsplit("/", 1)[-1])
        source.download_files(local)
        shown = str(source)
        try:
            checkpoint = read(os.path.join(local, name) if name else local)
        except (DataError, UsageError) as exc:
            raise type(exc)(str(exc).replace(local, shown)) from None
    checkpoint.path = checkpoint.path.replace(local, shown)
    checkpoint.vocab = checkpoint.vocab and checkpoint.vocab.replace(local, shown)
    checkpoint.casing_source = checkpoint.casing_source and checkpoint.casing_source.replace(local, shown)
    checkpoint.notes = [note.replace(local, shown) for note in checkpoint.notes]
    return checkpoint


def check_size_flag(checkpoint, model=None, bert_config=None):
    """A --model / --bert-config that disagrees with the checkpoint's own config is an error naming both."""
    from trainer.config import SIZES, BertConfig, size_of

    config = checkpoint.config
    # what the CLI's --model choices and TrainConfig check; a Python caller's 'huge' was a bare KeyError: 'huge'
    check_argument("check_size_flag's model", model, Name | None, choices=tuple(SIZES))
    if model:
        held = size_of(config)
        if held != SIZES[model]:
            raise UsageError(f"--model {model} is L{SIZES[model][0]}/H{SIZES[model][1]}/A{SIZES[model][2]}, the "
                             f"checkpoint {checkpoint.path} holds L{held[0]}/H{held[1]}/A{held[2]} "
                             "(leave --model out to use the checkpoint's)")
    if bert_config:
        given = BertConfig.from_json_file(bert_config)
        for key, value in config.to_dict().items():
            if key.endswith("dropout_prob"):
                continue
            if getattr(given, key) != value:
                raise UsageError(f"--bert-config {bert_config} has {key}={getattr(given, key)!r}, the checkpoint "
                                 f"{checkpoint.path} has {value!r}")


# The kinds `convert` writes: config.json + model.safetensors; bert_model.ckpt + bert_config.json; ours.
WRITERS = ("hf", "google", "bertprep")


def convert(src, out, to, vocab=None, cased=None, labels=None):
    """Read the checkpoint `src` (any kind `read` takes), write it as `to` ('hf', 'google' or 'bertprep')
    into the new directory `out`, whole or not at all (with the checkpoint's vocab.txt where it has one, or
    `vocab`); return the summary `trainer checkpoint convert --json` prints (its "warnings" name variables that
    hold NaN or inf, converted as they are; a BertprepWarning too for a Python caller). `to='hf'` writes the
    tokenizer too (trainer/checkpoint/tokenizer.py) and a model card, and is refused where no vocab is known;
    `cased` (True/False) gives the casing where the checkpoint records none (tokenizer.for_export); `labels`
    (a sequence of strings) names a fine-tuned classifier's outputs in id order, where it names none (a Google
    classifier) or anew; not for 'google', whose files hold none."""
    from trainer.checkpoint import google, hf, model_card, ours, task_heads, tokenizer

    # path objects as their strings (a pathlib.Path was a TypeError traceback, 'PosixPath' + 'str'); else one line
    src, out, vocab = (value if value is None else os.fspath(value) for value in (
        check_argument("convert's src", src, str), check_argument("convert's out", out, str),
        check_argument("convert's vocab", vocab, str | None)))
    labels = _checked_labels(labels, to)
    if to not in WRITERS:
        raise UsageError(f"convert writes one of {', '.join(WRITERS)}, not {to!r}")
    refuse_overlap(out, [src, vocab], what="the output")  # a new directory inside the checkpoint it reads
    storage.refuse_read_only("the output", out)  # before the checkpoint is read
    target = Folder(storage.local_path(out))  # the new directory: local (file://... too) or a store's prefix
    target.check_reachable()  # a missing bucket or refused credentials: one line before the weights are read
    if target.exists():  # a URL: any object under the prefix, a cut-short convert's too
        raise UsageError(f"{target}: exists; convert writes a new directory")
    if storage.checks_locally(out):  # a file on its way: it was '<file>/.partial: Not a directory', once read
        from trainer.config import check_output_place

        check_output_place("the output", target.root, directory=True)
        _refuse_dots_after_a_missing_directory(target.root)
    checkpoint = read(src)
    if labels is not None:
        task_heads.name_labels(checkpoint, labels)
    task_heads.check_writable(checkpoint, to)
    carried = (tokenizer.for_export(checkpoint, vocab, cased) if to == "hf" or vocab is not None or cased is not None
               else tokenizer.carried_by(checkpoint))  # checked against the model's rows as an export's is
    if to == "hf":  # its special tokens: said once the weights had been converted
        tokenizer.check_for_hf(carried)
    state = model_card.run_state_of(checkpoint)
    warning = checkpoint.non_finite_warning()  # before the writer takes the weights; the CLI prints it on stderr
    summary = {"from": checkpoint.kind, "source": checkpoint.path, "to": to, "out": str(target),
               "variables": len(checkpoint.weights), "parameters": checkpoint.parameters(),
               "vocab": carried.source if carried else False,
               **({"lower_case": carried.lower_case} if carried else {}),
               **({"task_head": checkpoint.task_head.describe()} if checkpoint.task_head else {}),
               **({"warnings": [warning]} if warning else {})}
    writer = {"hf": hf, "google": google, "bertprep": ours}[to]
    with _staging_beside(target) as staging, atomic_dir(target.root, staging) as temp:
        writer.write(checkpoint, temp)
        if to == "hf":
            tokenizer.write_hf_files(carried, temp, checkpoint.config.max_position_embeddings)
            title = target.root.rstrip("/").rsplit("/", 1)[-1]  # the new directory's name
            model_card.write(temp, title, checkpoint, carried, _architecture(temp), state)
        elif carried:  # vocab.txt, and its casing (tokenizer_config.json), which every reader takes from beside it
            # (casing_beside): a Google directory without it was read back with the casing its vocab suggests
            for name, data in carried.checkpoint_files().items():
                with open(os.path.join(temp, name), "wb") as f:
                    f.write(data)
    if warning and not ON_COMMAND_LINE.get():  # a Python caller's, as bertprep's stages raise theirs
        warnings.warn(f"trainer.checkpoint.convert: {warning}", BertprepWarning, stacklevel=2)
    return dict(summary, notes="; ".join(checkpoint.notes))


def _checked_labels(labels, to):
    """convert's `labels` as a tuple (or None), refused before anything is read where they are not strings in a
    list or where `to` writes none."""
    # a str was taken for one label ('a,b'); a path object for a label's name: refused before anything is read
    labels = check_argument("convert's labels", labels, tuple[Name, ...] | None,
                            expected="a list or tuple of str (a classifier's labels in id order)")
    if labels is not None and to == "google":  # taken, said in the summary's task_head, and written nowhere
        raise UsageError(f"--labels {','.join(labels)}: --to google writes no labels (run_classifier.py's variables "
                         "and bert_config.json name none): give them with --to hf or --to bertprep")
    return labels


def _refuse_dots_after_a_missing_directory(out):
    """A UsageError where a `.` or `..` of the local `out` follows a directory that is not there (`new/.`,
    `new/../x`): the staging directory is made beside the normalised path, but the rename to `out` as given
    found no `new`, and the whole conversion ended in `new/.: No such file or directory`, exit 1."""
    parts = out.split(os.sep)
    for i, part in enumerate(parts[1:], 1):
        above = os.sep.join(parts[:i]) or os.sep
        if part in (".", "..") and not os.path.isdir(above):
            raise UsageError(f"the output {out}: {above} does not exist, so {out} names no directory that can be "
                             f"made; name it {os.path.normpath(out)}")


def _architecture(directory):
    """The model class an HF export's config.json names (None for the other kinds)."""
    path = os.path.join(directory, "config.json")
    if not os.path.isfile(path):
        return None
    import json

    with open(path, encoding="utf-8") as f:
        return (json.load(f).get("architectures") or [None])[0]


@contextlib.contextmanager
def _staging_beside(target):
    """The `.partial/` beside the local Folder `target`, removed again when empty; None for a URL's, whose
    directory atomic_dir fills in a local temporary and uploads whole, its `.complete` object last."""
    if not target.renames:
        yield None
        return
    staging = staging_dir(os.path.dirname(os.path.abspath(target.root)))
    os.makedirs(staging, exist_ok=True)
    try:
        yield staging
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(staging)
