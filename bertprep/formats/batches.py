"""Batches of records: files read in chunks (framing checked in C when built), decoded into arrays by a kind."""

import os
import re

import numpy as np

from bertprep import storage
from bertprep.errors import DataError
from bertprep.formats import codecs, columnar
from bertprep.formats.framing import (
    decode_payload,
    framing_error,
    iter_framed,
    iter_payloads,
    open_sized,
    record_kind,
    sniff_format,
)
from bertprep.formats.protowire import WireError
from bertprep.formats.python_decoder import decode_batch_python, decoder_features
from bertprep.formats.schemas import FLOAT, KINDS, kind_of_record

try:
    from bertprep import _native
except ImportError:  # extension not built: the pure-Python twins give the same results, slower
    _native = None


def read_batches(paths, batch_size, fmt=None, drop_remainder=False, kind=None, dims=None, digests=None):
    """Yield dicts of arrays (batch, length) over the features of `kind` in `paths`, in order.

    Integer features are int64 when the batch holds TFRecord records, int32
    when it holds only OFRecord records; float features are float32.
    `kind` defaults to the kind of the first record, `dims` ({"seq": ...,
    "pred": ...}) to its sizes; a record that lacks a feature or has another
    length or kind raises DataError naming the file, record, byte offset and
    feature. The C core reads and decodes when it was built; the
    pure-Python path gives the same batches and the same errors. `digests` ({path: sha256}, from a
    manifest) has each framed file's bytes hashed as they are read and checked at its end (DigestCheckedFile).
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if any((fmt or sniff_format(path)) in columnar.CODECS for path in paths):
        yield from columnar.read_batches(paths, batch_size, drop_remainder, kind, dims, digests)
        return
    native = _native  # for the formats the C core knows (their codec's `native`)
    pending = []  # [(path, fmt, index of its first record in the file, payloads)], < batch_size records
    pending_count = 0
    for path in paths:
        file_fmt = fmt or sniff_format(path)
        sha256 = (digests or {}).get(storage.normpath(os.fspath(path)))
        chunks = (_native_payload_chunks(path, file_fmt, sha256) if native and codecs.get(file_fmt).native
                  else _python_payload_chunks(path, file_fmt, sha256))
        index = 0
        while True:
            try:
                chunk = next(chunks)
            except StopIteration:
                break
            except DataError:  # framing: a bad record read before it is reported first
                if pending:
                    _decode_pending(pending, kind, dims)
                raise
            if kind is None or dims is None:
                kind, dims = _kind_and_dims_of_first_record(path, file_fmt, chunk[0], kind, dims)
            taken = 0
            while taken < len(chunk):
                take = min(batch_size - pending_count, len(chunk) - taken)
                pending.append((path, file_fmt, index + taken, chunk[taken:taken + take]))
                pending_count += take
                taken += take
                if pending_count == batch_size:
                    yield _decode_pending(pending, kind, dims)
                    pending, pending_count = [], 0
            index += len(chunk)
    if pending:
        batch = _decode_pending(pending, kind, dims)  # decoded even when dropped: bad records never pass
        if not drop_remainder:
            yield batch


def _kind_and_dims_of_first_record(path, fmt, payload, kind, dims):
    """What read_batches was not given: the kind and dimensions of a file's first record."""
    try:
        decoded = decode_payload(payload, fmt)
    except WireError as exc:
        raise framing_error(path, fmt, f"record 0 at byte 0: {exc}") from None  # a TFRecord named part-0
    if kind is None:
        kind = kind_of_record({name: stored for name, (stored, _) in decoded.items()})
        if kind is None:
            raise DataError(f"{path}: record 0 has features {', '.join(decoded)}, which match no record kind "
                            f"(known: {', '.join(KINDS)})")
    if dims is None:
        dims = kind.dims_of({name: len(values) for name, (_, values) in decoded.items()})
        if dims is None:
            raise DataError(f"{path}: record 0: list lengths do not fit a {kind.name} record "
                            f"({', '.join(f'{f.name}[{f.length}]' for f in kind.features)})")
    return kind, dims


def batch_arrays(kind, dims, count, int_dtype):
    """Empty output arrays {name: (count, length)} for `count` records of `kind`."""
    return {feature.name: np.empty((count, feature.size(dims)), np.float32 if feature.dtype == FLOAT else int_dtype)
            for feature in kind.features}


def _decode_pending(pending, kind, dims):
    count = sum(len(payloads) for _, _, _, payloads in pending)
    int_dtype = np.int64 if any(fmt == "tfrecord" for _, fmt, _, _ in pending) else np.int32
    batch = batch_arrays(kind, dims, count, int_dtype)
    features = decoder_features(kind, dims)
    row = 0
    for path, fmt, first_index, payloads in pending:
        rows = [batch[name][row:row + len(payloads)] for name, _, _ in features]
        try:
            decode_batch(payloads, fmt, features, rows, first_index=first_index)
        except ValueError as exc:
            raise DataError(f"{path}: {_with_file_offset(path, fmt, str(exc))}") from None
        row += len(payloads)
    return batch


def _with_file_offset(path, fmt, message):
    """A decoder's "record i at byte b: ..." (b within the record's payload) with b made the byte's offset in
    the file, so a user can look at it with any hex viewer (error path only: it walks the framing again)."""
    match = re.match(r"record (\d+)(?: at byte (\d+))?: ", message)
    if not match:
        return message
    wanted, within = int(match.group(1)), int(match.group(2) or 0)
    header = codecs.get(fmt).header
    for index, offset, _payload in iter_framed(path, fmt, verify=False):
        if index == wanted:
            return f"record {wanted} at byte {offset + header + within}: {message[match.end():]}"
    return message


# Records per list handed on by the payload readers; the native one reads this many bytes at a time.
_CHUNK_RECORDS = 1024
_CHUNK_BYTES = 1 << 22


def _python_payload_chunks(path, fmt, sha256=None):
    """Lists of payloads of a file; a framing error comes after the payloads before it."""
    chunk = []
    try:
        for payload in iter_payloads(path, fmt, sha256=sha256):
            chunk.append(payload)
            if len(chunk) == _CHUNK_RECORDS:
                yield chunk
                chunk = []
    except DataError:
        if chunk:
            yield chunk
        raise
    if chunk:
        yield chunk


def _native_payload_chunks(path, fmt, sha256=None):
    """As _python_payload_chunks, framing and TFRecord CRCs checked in C a few MiB at a time.

    A read never asks for more than the bytes left in the file, so a garbage
    length field ends as "truncated data" instead of one huge allocation.
    """
    index = offset = needed = 0
    buffer = b""
    try:
        f, left = open_sized(path, sha256)
        with f:
            while True:
                data = f.read(min(max(_CHUNK_BYTES, needed - len(buffer)), left))
                left -= len(data)
                buffer = buffer + data if buffer else data
                payloads, consumed, needed, error = _native.split_records(
                    buffer, fmt, first_index=index, first_offset=offset, final=not data
                )
                if payloads:
                    yield payloads
                if error is not None:
                    raise framing_error(path, fmt, error)
                if not data:
                    return
                index += len(payloads)
                offset += consumed
                buffer = buffer[consumed:]
    except OSError as exc:
        raise DataError(f"{path}: cannot read: {exc.strerror or exc}") from None


def decode_batch(payloads, fmt, features, outputs, *, first_index=0):
    """Decode unframed records into `outputs` (see decode_batch_python): the C decoder when it was built,
    else its Python twin, with the same results and errors."""
    if _native is None or not codecs.get(fmt).native:
        decode_batch_python(payloads, fmt, features, outputs, first_index)
    else:
        _native.decode_batch(payloads, fmt, features, outputs, first_index=first_index)


def read_framed_columns(path, fmt, sha256=None):
    """(kind, {feature: (N, length) array}) of a whole framed file, integers as stored; the framed formats'
    `read_columns`."""
    kind = record_kind(path, fmt)
    parts = {}
    for batch in read_batches([path], 4096, kind=kind, digests={storage.normpath(path): sha256}):
        for name, values in batch.items():
            parts.setdefault(name, []).append(values)
    return kind, {name: np.concatenate(values) for name, values in parts.items()}
