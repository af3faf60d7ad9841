"""Compact Keras 3 BERT pretraining on `bertprep create` records (TFRecord or OFRecord), and
fine-tuning on `bertprep create-squad` / `create-glue` records.

    python -m trainer --format ofrecord --data RECORDS_DIR --model base --optimizer lamb
    python -m trainer finetune --task squad --data SQUAD_DIR --format ofrecord --init-checkpoint CKPT_DIR

In Python (docs/trainer.md, "Python API"):

    import trainer
    summary = trainer.train(trainer.TrainConfig(format="ofrecord", steps=20))
    scores = trainer.finetune(trainer.FinetuneConfig(task="squad", data=SQUAD_DIR, format="ofrecord"))

The names load when first used: `import trainer` imports no framework, so `python -m trainer` can leave
the libraries' start-up lines out before Keras loads (library_logs.py).
"""

import importlib

__all__ = ["train", "TrainConfig", "TrainSummary", "finetune", "FinetuneConfig", "FinetuneSummary"]

# public name -> the module that defines it (trainer/__init__.pyi, for type checkers, says the same)
_EXPORTS = {"train": "trainer.pretraining", "finetune": "trainer.finetuning",
            **dict.fromkeys(("TrainConfig", "TrainSummary", "FinetuneConfig", "FinetuneSummary"), "trainer.config")}


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'trainer' has no attribute {name!r}")
    if name == "finetune":
        from trainer.library_logs import load_keras

        load_keras()  # before trainer.finetuning, whose imports import Keras
    return getattr(importlib.import_module(_EXPORTS[name]), name)
