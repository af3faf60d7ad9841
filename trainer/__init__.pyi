"""trainer's public names for type checkers and IDEs. Written by scripts/write_api_stubs.py: do not edit."""

from trainer.config import FinetuneConfig as FinetuneConfig
from trainer.config import FinetuneSummary as FinetuneSummary
from trainer.config import TrainConfig as TrainConfig
from trainer.config import TrainSummary as TrainSummary
from trainer.finetuning import finetune as finetune
from trainer.pretraining import train as train
