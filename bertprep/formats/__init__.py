"""BERT records in TFRecord and OFRecord: the public reader/writer API.

    from bertprep import formats
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
Parquet: whole files of columns, with `hdf5` and `parquet` as its codecs).
"""

from bertprep.formats.batches import batch_arrays, decode_batch, read_batches
from bertprep.formats.encode import (
    encode_columns,
    encode_instances,
    encode_instances_python,
    encode_record,
    write_records,
)
from bertprep.formats.framing import (
    ALL_FORMATS,
    CODECS,
    FORMATS,
    decode_payload,
    format_of_name,
    frame,
    iter_framed,
    iter_payloads,
    parse_formats,
    read_records,
    record_kind,
    sniff_format,
)
from bertprep.formats.python_decoder import decode_batch_python, decode_bert_batch_python, decoder_features

__all__ = [
    "ALL_FORMATS", "CODECS", "FORMATS",
    "batch_arrays", "decode_batch", "decode_batch_python", "decode_bert_batch_python",
    "decode_payload", "decoder_features", "encode_columns", "encode_instances", "encode_instances_python",
    "encode_record", "format_of_name", "frame", "iter_framed", "iter_payloads", "parse_formats", "read_batches",
    "read_records", "record_kind", "sniff_format", "write_records",
]
