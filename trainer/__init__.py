"""Compact Keras 3 BERT pretraining on `bertprep create` records (TFRecord or OFRecord).

    python -m trainer --format ofrecord --data RECORDS_DIR --model base --optimizer lamb
"""
