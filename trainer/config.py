"""Model configuration: Google's BERT sizes on top of bertprep.bert_config (the keys of
`bert_config.json` and the rules a config file keeps, shared with `bertprep download pretrained`); no
Keras import, so argument and data errors are reported before any framework loads."""

from bertprep import bert_config

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


class BertConfig(bert_config.BertConfig):
    """bertprep.bert_config.BertConfig (its fields, from_json_file, checked), and a config by size name."""

    @classmethod
    def sized(cls, name, **overrides):
        layers, hidden, heads = SIZES[name]
        return cls(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                   intermediate_size=4 * hidden, **overrides)
