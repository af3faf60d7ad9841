"""A BERT's configuration as Google's `bert_config.json` holds it, and the rules a config file keeps:
a JSON object of known keys; counts positive integers, dropouts probabilities, the heads dividing the
hidden size. Pure Python and here, in bertprep, so that `bertprep download pretrained` checks a
release's config by the rules the trainer reads it with: trainer.config builds on this (adding Google's
published model sizes), and bertprep never imports the trainer."""

import dataclasses
import json
import math
import re

from bertprep import storage
from bertprep.errors import UsageError


def _is_number(value):
    return type(value) in (int, float)  # not a bool, not a string


# (keys, what their values must be, said as): counts of something, dropout probabilities, a scale.
_VALUE_CHECKS = [
    (("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
      "max_position_embeddings", "type_vocab_size"), lambda v: type(v) is int and v >= 1, "a positive integer"),
    (("hidden_dropout_prob", "attention_probs_dropout_prob"), lambda v: _is_number(v) and 0 <= v < 1,
     "a probability in [0, 1)"),
    # inf (JSON's Infinity, which Python reads): Keras's TruncatedNormal made a fresh head or model of ±inf
    (("initializer_range",), lambda v: _is_number(v) and 0 < v < math.inf, "a positive number"),
]
_GOOGLE_DESCRIPTIVE_KEY = re.compile(
    r"^(directionality|pooler_(fc_size|num_attention_heads|num_fc_layers|size_per_head|type))$")


def read_json_object(path, error, of, cannot_read):
    """The JSON object (a dict) in the file `path`; else `error` naming the file: `cannot_read` and why,
    or what it holds instead of an object `of` keys."""
    try:
        with storage.open(path, "r", encoding="utf-8") as f:
            values = json.load(f)
    except (OSError, ValueError) as exc:
        raise error(f"{path}: {cannot_read}: {exc}") from None
    if not isinstance(values, dict):
        raise error(f"{path}: expected a JSON object of {of}, got {type(values).__name__}")
    return values


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """The keys of Google's `bert_config.json`."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02

    @classmethod
    def from_json_file(cls, path, error=UsageError):
        """The config of a bert_config.json; a bad one raises `error`: UsageError for a --bert-config the
        user names, DataError for the config that came with a checkpoint."""
        values = read_json_object(path, error, "bert_config.json keys", "cannot read a BERT config")
        known = {field.name: field.type for field in dataclasses.fields(cls)}
        # Google's multilingual and Chinese releases describe their pooler (the one BERT has) and script
        # direction too; google-research/bert's modeling.py reads past them, and so does this.
        values = {key: value for key, value in values.items() if not _GOOGLE_DESCRIPTIVE_KEY.match(key)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise error(f"{path}: unknown bert_config key {unknown[0]!r} (known: {', '.join(known)})")
        return cls.checked(path, values, error)

    @classmethod
    def checked(cls, path, values, error):
        """The config of `values` ({key: value} of known keys, from the file `path`), every value one a
        BERT can have; else `error` naming the file, the key and the value."""
        for keys, fits, expected in _VALUE_CHECKS:
            for key in keys:
                if key in values and not fits(values[key]):
                    raise error(f"{path}: {key} is {values[key]!r}, expected {expected}")
        config = cls(**values)
        if config.hidden_act not in ("gelu", "gelu_tanh"):
            raise error(f"{path}: hidden_act {config.hidden_act!r} is not supported (expected 'gelu' or "
                        "'gelu_tanh')")
        if config.hidden_size % config.num_attention_heads:
            raise error(f"{path}: hidden_size {config.hidden_size} is not a multiple of "
                        f"num_attention_heads {config.num_attention_heads}")
        return config

    def to_dict(self):
        return dataclasses.asdict(self)
