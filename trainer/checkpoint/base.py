"""The `Checkpoint` every reader returns (trainer/checkpoint/__init__.py says what it holds) and `checked`, the
one check of it against its config that every kind's reader ends with. Below the package and its kind modules
(google, hf, nvidia, ours), which import it, so that none of them imports the package that imports them."""

import dataclasses
import glob
import os

import numpy as np

from bertprep import storage
from bertprep.errors import DataError
from trainer.checkpoint import names

NON_FINITE_NAMED = 3  # the variables a non-finite warning names; the rest are counted
# What a directory that lost one of a checkpoint's files is told (each kind's lost_file).
LOST = "copied or downloaded in part? Restore it, or name a whole checkpoint"


@dataclasses.dataclass
class Checkpoint:
    kind: str
    path: str  # the file or prefix the weights came from
    config: object  # trainer.config.BertConfig
    weights: dict  # Google name -> array in Google's layout
    vocab: str | None = None  # a vocab.txt that travels with the checkpoint
    has_heads: bool = True
    has_pooler: bool = True  # False: a BertModel saved without one (add_pooling_layer=False)
    notes: list = dataclasses.field(default_factory=list)
    lower_case: bool | None = None  # its tokenizer's casing where known (tokenizer.casing_beside)
    casing_source: str | None = None  # what says so, for a message that names it
    task_head: object = None  # a fine-tune's task_heads.TaskHead; its weights are in `weights`, Google's names

    def ours(self):
        """{our variable path: array in our layout}."""
        heads = self.config.num_attention_heads
        return {row.ours: names.to_layout(self.weights[row.google], row.ours_layout, heads)
                for row in self.rows()}

    def our_paths(self):
        """Our variable paths of the weights it holds (what ours() would give, without converting them)."""
        return {row.ours for row in self.rows()}

    def rows(self):
        """The names.Row of every variable the checkpoint holds."""
        return names.rows(self.config, self.has_heads, self.has_pooler)

    def take(self, name):
        """The weight `name`, dropped from the checkpoint: a writer that makes its own copy of each weight
        (a tensor, a transposed array) takes them one by one, so memory stays near one copy."""
        return self.weights.pop(name)

    def parameters(self):
        return sum(int(np.prod(v.shape)) for v in self.weights.values())

    def non_finite_warning(self):
        """One line naming the variables that hold a NaN or an inf (NON_FINITE_NAMED of them, then a count), or
        None: a diverged run's checkpoint was inspected, converted and run without a word, its outputs NaN. A
        warning, not a refusal: such a checkpoint is still what its user may want to look into or carry."""
        bad = [name for name, value in self.weights.items() if not np.isfinite(value).all()]
        if not bad:
            return None
        more = f" and {len(bad) - NON_FINITE_NAMED} more" if len(bad) > NON_FINITE_NAMED else ""
        return (f"{self.path}: {len(bad)} of {len(self.weights)} variables hold NaN or inf values (a diverged "
                f"run?): {', '.join(bad[:NON_FINITE_NAMED])}{more}")


def checked(kind, path, config, found, vocab=None, skipped=()):
    """A Checkpoint of `found` ({Google name: array}) checked against `config`.

    Missing encoder variables and misshapen ones are errors naming `path` and the variable; the
    pretraining heads are all there or all absent (a BertModel has none), and so is the pooler where
    there are no heads (a BertModel saved with add_pooling_layer=False; next-sentence prediction needs it).
    Vocab-sized rows beyond the config's vocab_size are trimmed when they are the padding to a multiple of 8."""
    notes = [f"skipped {len(skipped)} variables that are not BERT-for-pretraining weights "
             f"({', '.join(sorted(skipped)[:3])}{', ...' if len(skipped) > 3 else ''})"] if skipped else []
    head_names = {row.google for row in names.rows(config) if row.is_head}
    has_heads = any(name in found for name in head_names)
    has_pooler = has_heads or any(name in found for name in names.POOLER)
    if not has_pooler:
        notes.append("no pooler (bert/pooler/dense): a BertModel saved without one")
    expected = names.rows(config, has_heads, has_pooler)
    known = {row.google for row in names.rows(config)}
    unknown = sorted(set(found) - known)
    if unknown:
        raise DataError(f"{path}: variable {unknown[0]} is not part of a BERT of this config "
                        f"(L{config.num_hidden_layers}/H{config.hidden_size}): another architecture?")
    weights = {}
    for row in expected:
        if row.google not in found:
            raise DataError(f"{path}: checkpoint lacks variable {row.google}")
        value = np.asarray(found[row.google])
        shape = names.google_shape(row, config)
        if row.google in names.VOCAB_ROWS and value.shape[:1] != shape[:1] and value.shape[1:] == shape[1:]:
            value = _trim_vocab_padding(path, row.google, value, config.vocab_size, notes)
        if tuple(value.shape) != shape:
            raise DataError(f"{path}: variable {row.google} has shape {tuple(value.shape)}, its config gives {shape}")
        if value.dtype != np.float32:
            if not np.issubdtype(value.dtype, np.floating):
                raise DataError(f"{path}: variable {row.google} is {value.dtype}, expected floating point")
            value = value.astype(np.float32)
        weights[row.google] = value
    return Checkpoint(kind, path, config, weights, vocab, has_heads, has_pooler, notes)


def _trim_vocab_padding(path, name, value, vocab_size, notes):
    rows = value.shape[0]
    padded = -(-vocab_size // 8) * 8
    if rows < vocab_size or rows > padded:
        raise DataError(f"{path}: variable {name} has {rows} vocab rows, the config's vocab_size is {vocab_size} "
                        f"(only padding up to a multiple of 8, {padded}, is dropped)")
    notes.append(f"{name}: dropped {rows - vocab_size} padding rows beyond vocab_size {vocab_size}")
    return value[:vocab_size]


def vocab_beside(directory):
    path = os.path.join(directory, "vocab.txt")
    return path if os.path.isfile(path) else None


# What a reader opens beside a weights file or a Google prefix: Google's and NVIDIA's config, the vocab
# (vocab_beside) and the tokenizer's casing (tokenizer.casing_beside).
FILES_BESIDE = ("bert_config.json", "vocab.txt", "tokenizer_config.json")


def files_read(path):
    """`path` and, where it names a local weights file or Google prefix, the files beside it that reading it
    opens (a directory holds them): an output compared with `path` alone could be one of them, and
    `checkpoint run dir/bert_model.ckpt --out dir/bert_config.json` wrote its .npz over the config it had read."""
    if path is None or not storage.reads_in_place(path) or os.path.isdir(path):
        return [path]
    index = path + ".index"
    if not (os.path.isfile(path) or os.path.isfile(index)):
        return [path]
    tf_files = [index, *glob.glob(glob.escape(path) + ".data-*")] if os.path.isfile(index) else []
    return [path, *tf_files, *(os.path.join(os.path.dirname(path), name) for name in FILES_BESIDE)]
