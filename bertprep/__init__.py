"""bertprep: BERT pretraining data, exact, fast, resumable, verifiable."""

__version__ = "0.1.0"
