"""NVIDIA DeepLearningExamples' PyTorch BERT checkpoints: a `.pt` holding {"model": state dict} in
pytorch-pretrained-bert naming (names.canonical_hf_name reads it), with `bert_config.json` beside it
(the vocab padded to a multiple of 8 in the weights, 30,522 -> 30,528, is trimmed and said so)."""

import os

from bertprep.errors import DataError
from trainer.checkpoint.base import checked, vocab_beside
from trainer.checkpoint.hf import google_names, load_torch
from trainer.config import BertConfig

KIND = "nvidia-pt"
HELD = "an NVIDIA PyTorch checkpoint (.pt)"


def sniff(path):
    return os.path.isfile(path) and path.endswith((".pt", ".pth"))


def read(path):
    directory = os.path.dirname(path) or "."
    config_path = os.path.join(directory, "bert_config.json")
    if not os.path.isfile(config_path):
        raise DataError(f"{path}: no bert_config.json beside the checkpoint (it gives the model's size)")
    config = BertConfig.from_json_file(config_path, DataError)
    found, skipped = google_names(path, load_torch(path, key="model"))
    return checked(KIND, path, config, found, vocab_beside(directory), skipped)
