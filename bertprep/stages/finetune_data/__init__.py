"""Fine-tuning records: `bertprep create-squad` (squad.py) and `bertprep create-glue` (glue.py).

Both write what google-research/bert's run_squad.py / run_classifier.py
write for the same input, vocab and flags, in TFRecord and OFRecord, into one
flat directory with a manifest (common.py).
"""
