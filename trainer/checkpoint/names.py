"""The one name table: every BERT-for-pretraining variable as Google, Hugging Face and this trainer
call it, its shape (in Google's layout, from the config) and how each other layout derives from it.

The pivot of every conversion is Google's naming and layout (TF1 `bert_model.ckpt`: kernels
[in, out]). Hugging Face's `nn.Linear` weights are Google's kernels transposed; this trainer's Keras
MultiHeadAttention splits the hidden axis into [heads, head size].
"""

import re

import numpy as np

# (Google name, Hugging Face name, our path, Google shape as config letters, HF layout, our layout).
# `{i}` is the layer. Letters: V vocab, P positions, T type vocab, H hidden, I intermediate, 2 two.
# Layouts: same; T transposed; heads_in [H, H] -> [H, A, H/A]; heads_bias [H] -> [A, H/A];
# heads_out [H, H] -> [A, H/A, H].
_EMBEDDINGS = [
    ("bert/embeddings/word_embeddings", "bert.embeddings.word_embeddings.weight",
     "bert/word_embeddings/embeddings", "VH", "same", "same"),
    ("bert/embeddings/position_embeddings", "bert.embeddings.position_embeddings.weight",
     "bert/position_embeddings/embeddings", "PH", "same", "same"),
    ("bert/embeddings/token_type_embeddings", "bert.embeddings.token_type_embeddings.weight",
     "bert/segment_embeddings/embeddings", "TH", "same", "same"),
    ("bert/embeddings/LayerNorm/gamma", "bert.embeddings.LayerNorm.weight",
     "bert/embeddings_layer_norm/gamma", "H", "same", "same"),
    ("bert/embeddings/LayerNorm/beta", "bert.embeddings.LayerNorm.bias",
     "bert/embeddings_layer_norm/beta", "H", "same", "same"),
]


def _dense(google, hf, ours, shape, kernel_layout="same", bias_layout="same"):
    return [(f"{google}/kernel", f"{hf}.weight", f"{ours}/kernel", shape, "T", kernel_layout),
            (f"{google}/bias", f"{hf}.bias", f"{ours}/bias", shape[1], "same", bias_layout)]


def _layer_norm(google, hf, ours):
    return [(f"{google}/gamma", f"{hf}.weight", f"{ours}/gamma", "H", "same", "same"),
            (f"{google}/beta", f"{hf}.bias", f"{ours}/beta", "H", "same", "same")]


_G, _F, _O = "bert/encoder/layer_{i}", "bert.encoder.layer.{i}", "bert/layer_{i}"
_LAYER = [
    *(row for part in ("query", "key", "value")
      for row in _dense(f"{_G}/attention/self/{part}", f"{_F}.attention.self.{part}", f"{_O}/attention/{part}",
                        "HH", "heads_in", "heads_bias")),
    *_dense(f"{_G}/attention/output/dense", f"{_F}.attention.output.dense", f"{_O}/attention/attention_output",
            "HH", "heads_out"),
    *_layer_norm(f"{_G}/attention/output/LayerNorm", f"{_F}.attention.output.LayerNorm", f"{_O}/attention_layer_norm"),
    *_dense(f"{_G}/intermediate/dense", f"{_F}.intermediate.dense", f"{_O}/intermediate", "HI"),
    *_dense(f"{_G}/output/dense", f"{_F}.output.dense", f"{_O}/output", "IH"),
    *_layer_norm(f"{_G}/output/LayerNorm", f"{_F}.output.LayerNorm", f"{_O}/output_layer_norm"),
]
_POOLER = _dense("bert/pooler/dense", "bert.pooler.dense", "bert/pooler", "HH")
HEADS = [
    *_dense("cls/predictions/transform/dense", "cls.predictions.transform.dense", "bert/masked_lm/transform", "HH"),
    *_layer_norm("cls/predictions/transform/LayerNorm", "cls.predictions.transform.LayerNorm",
                 "bert/masked_lm/layer_norm"),
    ("cls/predictions/output_bias", "cls.predictions.bias", "bert/masked_lm/bias", "V", "same", "same"),
    ("cls/seq_relationship/output_weights", "cls.seq_relationship.weight", "bert/next_sentence/kernel",
     "2H", "same", "T"),
    ("cls/seq_relationship/output_bias", "cls.seq_relationship.bias", "bert/next_sentence/bias", "2", "same", "same"),
]
# Vocab-sized rows: a checkpoint may pad them beyond the config's vocab_size (NVIDIA: 30,522 -> 30,528).
VOCAB_ROWS = ("bert/embeddings/word_embeddings", "cls/predictions/output_bias")


class Row:
    __slots__ = ("google", "hf", "ours", "letters", "hf_layout", "ours_layout", "is_head")

    def __init__(self, google, hf, ours, letters, hf_layout, ours_layout, is_head):
        self.google, self.hf, self.ours, self.letters = google, hf, ours, letters
        self.hf_layout, self.ours_layout, self.is_head = hf_layout, ours_layout, is_head


# The pooler's Google names: a BertModel made with add_pooling_layer=False (sentence encoders) has none.
POOLER = tuple(r[0] for r in _POOLER)


def rows(config, heads=True, pooler=True):
    """Every variable of a BERT of `config` (encoder first, then the pretraining heads)."""
    out = [Row(*r, False) for r in _EMBEDDINGS]
    for i in range(config.num_hidden_layers):
        out += [Row(*(s.format(i=i) for s in r[:3]), *r[3:], False) for r in _LAYER]
    if pooler:
        out += [Row(*r, False) for r in _POOLER]
    if heads:
        out += [Row(*r, True) for r in HEADS]
    return out


def google_shape(row, config):
    sizes = {"V": config.vocab_size, "P": config.max_position_embeddings, "T": config.type_vocab_size,
             "H": config.hidden_size, "I": config.intermediate_size, "2": 2}
    return tuple(sizes[letter] for letter in row.letters)


def to_layout(value, layout, heads):
    """Google's layout -> `layout`."""
    if layout == "same":
        return value
    if layout == "T":
        return np.ascontiguousarray(value.T)
    hidden = value.shape[0]
    if layout == "heads_in":
        return value.reshape(hidden, heads, hidden // heads)
    if layout == "heads_bias":
        return value.reshape(heads, hidden // heads)
    if layout == "heads_out":
        return value.reshape(heads, value.shape[0] // heads, value.shape[1])
    raise ValueError(layout)


def from_layout(value, layout):
    """`layout` -> Google's layout."""
    if layout == "same":
        return value
    if layout == "T":
        return np.ascontiguousarray(value.T)
    if layout in ("heads_in",):
        return value.reshape(value.shape[0], -1)
    if layout in ("heads_bias",):
        return value.reshape(-1)
    if layout == "heads_out":
        return value.reshape(-1, value.shape[-1])
    raise ValueError(layout)


# Hugging Face / pytorch-pretrained-bert / NVIDIA spellings that mean the same variable.
_HF_ALIASES = [(re.compile(r"^module\."), ""),                      # NVIDIA's DistributedDataParallel
               (re.compile(r"\.LayerNorm\.gamma$"), ".LayerNorm.weight"),  # pytorch-pretrained-bert
               (re.compile(r"\.LayerNorm\.beta$"), ".LayerNorm.bias")]
# Hugging Face entries that are not weights of their own: buffers and the decoder tied to the embeddings.
HF_DERIVED = ("bert.embeddings.position_ids", "cls.predictions.decoder.weight", "cls.predictions.decoder.bias")


# The task heads of BertForSequenceClassification and BertForQuestionAnswering (task_heads.py): beside
# `bert.`, not inside it.
HF_TASK_HEADS = ("classifier.", "qa_outputs.")


def canonical_hf_name(name):
    """A Hugging Face name with the `bert.` prefix and today's LayerNorm spelling."""
    for pattern, replacement in _HF_ALIASES:
        name = pattern.sub(replacement, name)
    if not name.startswith(("bert.", "cls.", *HF_TASK_HEADS)):
        name = "bert." + name  # BertModel's names lack the prefix
    return name


# Google/NVIDIA TF variables that are training state, not the model.
_TF_TRAINING_STATE = re.compile(r"(^|/)(adam_[mv]|lamb_[mv]|Momentum)(_\d+)?$|^global_step$|loss_scale|good_steps")


def is_tf_training_state(name):
    return bool(_TF_TRAINING_STATE.search(name))
