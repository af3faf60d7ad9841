"""Model configuration: Google's BERT sizes and `bert_config.json` (no Keras import, so argument
and data errors are reported before any framework loads)."""

import dataclasses
import json

from bertprep.errors import UsageError

# Google's published BERT sizes: (layers, hidden, heads); intermediate = 4 * hidden.
SIZES = {
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "small": (4, 512, 8),
    "medium": (8, 512, 8),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}

# --optimizer's choices (trainer/optimizers.py; docs/trainer.md compares them).
OPTIMIZERS = {"adam": "AdamW", "lamb": "NVLAMB", "google-adam": "Google's AdamWeightDecay"}
# The optimizers that clip the summed gradients by global norm (--clip-norm), by default to 1.0.
CLIPPING = ("lamb", "google-adam")
DEFAULT_CLIP_NORM = 1.0


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
    def sized(cls, name, **overrides):
        layers, hidden, heads = SIZES[name]
        return cls(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                   intermediate_size=4 * hidden, **overrides)

    @classmethod
    def from_json_file(cls, path):
        try:
            with open(path, encoding="utf-8") as f:
                values = json.load(f)
        except (OSError, ValueError) as exc:
            raise UsageError(f"{path}: cannot read a BERT config: {exc}") from None
        if not isinstance(values, dict):
            raise UsageError(f"{path}: expected a JSON object of bert_config.json keys")
        known = {field.name: field.type for field in dataclasses.fields(cls)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise UsageError(f"{path}: unknown bert_config key {unknown[0]!r} (known: {', '.join(known)})")
        config = cls(**values)
        if config.hidden_act not in ("gelu", "gelu_tanh"):
            raise UsageError(f"{path}: hidden_act {config.hidden_act!r} is not supported (expected 'gelu' or "
                             "'gelu_tanh')")
        if config.hidden_size % config.num_attention_heads:
            raise UsageError(f"{path}: hidden_size {config.hidden_size} is not a multiple of "
                             f"num_attention_heads {config.num_attention_heads}")
        return config

    def to_dict(self):
        return dataclasses.asdict(self)
