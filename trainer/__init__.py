"""Compact Keras 3 BERT pretraining on `bertprep create` records (TFRecord or OFRecord), and
fine-tuning on `bertprep create-squad` / `create-glue` records.

    python -m trainer --format ofrecord --data RECORDS_DIR --model base --optimizer lamb
    python -m trainer finetune --task squad --data SQUAD_DIR --format ofrecord --init-checkpoint CKPT_DIR
"""
