"""BERT records in TFRecord and OFRecord: the public reader/writer API.

    from bertprep import formats
    formats.names()                                         # ('tfrecord', 'ofrecord', 'hdf5', 'parquet', 'megatron')
    codec = formats.get("parquet")                          # the format as an object (formats/codecs.py)
    for record in formats.read_records("part-0"):          # format sniffed
        record["input_ids"]                                 # NumPy array
    for batch in formats.read_batches(paths, batch_size=256):
        batch["input_ids"].shape                            # (256, seq)

Integer features come back as int64 from TFRecord and int32 from OFRecord
(as stored); float features as float32. What a record holds is its kind
(`formats.schemas`: pretraining, packed, SQuAD, GLUE, ...), described once
as data; the codecs and readers here work from that description.

The code lives in rooms named for what they do: `framing` (file names,
sniffing, framed payloads, records one by one), `encode` (records made
bytes), `batches` (batches of arrays, the C core when built),
`python_decoder` (the C decoder's pure-Python twin) and `columnar` (HDF5 and
Parquet: whole files of columns, with `hdf5` and `parquet` as its codecs), and `codecs`, the
formats as objects (names, framing, file naming) every stage asks. The names below load on first use, as
`bertprep`'s do: `from bertprep.formats import codecs` costs no NumPy import (trainer.config reads the
format names from it before any framework loads).
"""

import importlib

_EXPORTS = {
    **dict.fromkeys(("batch_arrays", "decode_batch", "read_batches"), "bertprep.formats.batches"),
    **dict.fromkeys(("encode_columns", "encode_instances", "encode_instances_python", "encode_record",
                     "write_records"), "bertprep.formats.encode"),
    **dict.fromkeys(("ALL_FORMATS", "CODECS", "FORMATS", "decode_payload", "format_of_bytes", "format_of_name", "frame",
                     "iter_framed", "iter_payloads", "parse_formats", "read_records", "record_kind",
                     "sniff_format"), "bertprep.formats.framing"),
    **dict.fromkeys(("get", "names", "of_file_name"), "bertprep.formats.codecs"),
    **dict.fromkeys(("decode_batch_python", "decode_bert_batch_python", "decoder_features"),
                    "bertprep.formats.python_decoder"),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    else:  # a submodule not imported yet (formats.columnar, formats.batches._native)
        try:
            value = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":  # the submodule exists; a library it needs does not
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value  # once loaded, a plain attribute
    return value
