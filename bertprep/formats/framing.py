"""Record files: which format a file holds (by name, else framing), its framed payloads, its records one by one."""

import hashlib
import itertools
import os
import struct

from bertprep import storage
from bertprep.errors import DataError, UsageError
from bertprep.formats import codecs, columnar
from bertprep.formats.crc32c import masked_crc32c
from bertprep.formats.protowire import WireError
from bertprep.formats.schemas import KINDS, kind_of_record

FORMATS = codecs.framed_names()  # one record after another
ALL_FORMATS = codecs.record_names()  # and the columnar ones (HDF5, Parquet): bertprep.formats.columnar
# Each framed format's module (frame, encode, decode, iter_payloads), as the registry names it.
CODECS = {name: codecs.get(name).implementation for name in FORMATS}


def parse_formats(value):
    """`--format tfrecord,ofrecord` (or those names as a tuple, as the stage options hold them) as a tuple in
    canonical order, whatever order it listed them in."""
    value = value if isinstance(value, str) else ",".join(value)
    fmts = tuple(f.strip() for f in value.split(",") if f.strip())
    unknown = [f for f in fmts if f not in ALL_FORMATS]
    if unknown or not fmts:
        raise UsageError(f"unknown --format {','.join(unknown) or value!r} (choose from {', '.join(ALL_FORMATS)})")
    return tuple(f for f in ALL_FORMATS if f in fmts)


def frame(payload, fmt):
    return CODECS[fmt].frame(payload)


def decode_payload(payload, fmt):
    """Parse one unframed record into {name: (kind, array)} in stored order (any keys)."""
    return CODECS[fmt].decode(payload)


def format_of_name(name):
    """The format a file's name says it holds (`*.tfrecord`, `*.tf_record`; `part-<i>`, `*.of_record-<i>`;
    `*.hdf5`, `*.parquet`: each codec's `names_file`), or None."""
    codec = codecs.of_file_name(name)
    return codec.name if codec else None


def sniff_format(path):
    """TFRecord or OFRecord, from the file's name where it follows either ecosystem's naming, else its framing.

    A TFRecord header carries a masked CRC of its length; an OFRecord has none,
    and the chance that its first payload bytes match that CRC is 2**-32. A
    damaged first TFRecord header still tells itself apart: its payload starts
    at byte 12 with the Example's field tag (0x0A), an OFRecord's at byte 8.
    """
    named = format_of_name(os.path.basename(path)) or format_of_bytes(path)
    if named is not None:
        return named
    with storage.open(path, "rb") as f:
        head = f.read(13)
    if len(head) == 13 and head[12] == 0x0A and head[8] != 0x0A:
        return "tfrecord"
    return "ofrecord"


def empty_and_named_for_no_format(path):
    """Whether `path` is an empty file whose name is no record file's (format_of_name's, or `*.ofrecord`, the
    other name OneFlow's files go by): no bytes and no name to tell a format by, where sniff_format's fallback
    to OFRecord (which has no magic) is a guess."""
    name = os.path.basename(path)
    return format_of_name(name) is None and not name.lower().endswith(".ofrecord") and storage.getsize(path) == 0


def format_of_bytes(path):
    """The format a file's first bytes prove, whatever its name: HDF5's or Parquet's magic, a TFRecord header (the
    masked CRC of its length); else None (an OFRecord part has no magic to be known by)."""
    if columnar.sniff(path):
        return columnar.sniff(path)
    with storage.open(path, "rb") as f:
        head = f.read(12)
    if len(head) == 12 and struct.unpack_from("<I", head, 8)[0] == masked_crc32c(head[:8]):
        return "tfrecord"
    return None


def open_sized(path, sha256=None):
    """(binary file, its size in bytes) of a record file; a URL's object streams with read-ahead. With `sha256`
    (its manifest's), the file hashes what is read and checks it at the end (`DigestCheckedFile`)."""
    f = storage.open(path, "rb")
    size = os.fstat(f.fileno()).st_size if storage.reads_in_place(path) else f.size()
    return (f if sha256 is None else DigestCheckedFile(f, path, size, sha256)), size


class DigestCheckedFile:
    """A record file read front to back that hashes the bytes its reader asks for, not in a second pass, and
    once every byte has been read compares the sha256 with the manifest's (issue 39: the trainer trained on a
    part with one byte flipped, its size kept). A reader that stops before the end checks nothing: the check is
    at the end of each whole pass."""

    def __init__(self, f, path, size, sha256):
        self._f, self.path, self._size, self._expected = f, path, size, sha256
        self._digest, self._read = hashlib.sha256(), 0

    def read(self, n=-1):
        data = self._f.read(n)
        if self._digest is None:  # checked already: what follows is the reader's look past the end
            return data
        self._digest.update(data)
        self._read += len(data)
        if self._read == self._size:
            digest, self._digest = self._digest.hexdigest(), None  # checked once
            if digest != self._expected:
                raise DataError(f"{storage.display(self.path)}: sha256 {digest} is not the manifest's "
                                f"{self._expected}: the file changed after it was written (rerun the stage that "
                                "wrote it)")
        return data

    def readinto(self, target):
        data = self.read(len(target))
        target[:len(data)] = data
        return len(data)

    def fileno(self):
        return self._f.fileno()

    def close(self):
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def iter_framed(path, fmt=None, verify=True, sha256=None):
    """Yield (index, byte offset, payload) for each record of a file.

    Allocation is bounded by the file's size: a length field larger than the
    bytes left (a damaged header, a text file) is reported, not read. Errors
    are DataErrors naming the file, record and byte offset.
    """
    fmt = fmt or sniff_format(path)
    try:
        f, size = open_sized(path, sha256)
        with f:
            for index, (offset, payload) in enumerate(CODECS[fmt].iter_payloads(f, verify=verify, size=size)):
                yield index, offset, payload
    except WireError as exc:
        raise framing_error(path, fmt, str(exc)) from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read: {exc.strerror or exc}") from None


# A framed format as a message names what was expected: its name in its own ecosystem.
_TITLES = {"tfrecord": "a TFRecord", "ofrecord": "an OFRecord"}
_TEXT_HEAD = 64  # bytes of a file looked at to tell text from a damaged record


def framing_error(path, fmt, problem):
    """The DataError of a framing `problem` ("record i at byte b: ...") of `path`, read as `fmt`. A file whose
    first record fails because the file is text (a corpus .txt, a .jsonl, text under a .tfrecord name) is named
    as such: its first bytes read as a length made "truncated data (59 of 7163385811044755572 bytes)". No
    record file starts with text: a framed record starts with its length, whose high bytes are zero."""
    text = text_not_records(path, fmt) if problem.startswith("record 0 at byte 0: ") else None
    return DataError(f"{path}: {text or problem}")


def text_not_records(path, fmt):
    """What to say of `path`, read as `fmt`, whose first record failed, where the file is text or, by its first
    bytes, records of another format: "not a TFRecord file, as its name says: it starts with text ('...')", "...:
    its bytes are a Parquet file's" (a Parquet file renamed x.tfrecord said "length CRC mismatch"); None where
    its first bytes say neither."""
    named = format_of_name(os.path.basename(path)) == fmt
    expected = (f"{_TITLES.get(fmt, fmt)} file, as its name says" if named else
                "a record file (TFRecord, OFRecord, HDF5 or Parquet)")
    actual = _format_of_bytes_if_readable(path)
    if actual not in (None, fmt):
        return f"not {expected}: its bytes are {_TITLES.get(actual) or _COLUMNAR_TITLES[actual]} file's"
    if fmt == "tfrecord" and actual is None and _framed_as_ofrecord(path):
        return f"not {expected}: its bytes look like an OFRecord file's"
    head = _head_if_text(path)
    return None if head is None else f"not {expected}: it starts with text ({head!r})"


_COLUMNAR_TITLES = {"hdf5": "an HDF5", "parquet": "a Parquet"}


def _framed_as_ofrecord(path):
    """Whether `path` starts as an OFRecord part does (no magic to prove it): a length that fits the file, then an
    OFRecord message's first field tag (0x0A), where a TFRecord has its length's CRC."""
    try:
        with storage.open(path, "rb") as f:
            head = f.read(9)
            f.seek(0, os.SEEK_END)
            size = f.tell()
    except (OSError, DataError):
        return False
    return len(head) == 9 and head[8] == 0x0A and 0 < struct.unpack_from("<q", head)[0] <= size - 8


def _format_of_bytes_if_readable(path):
    try:
        return format_of_bytes(path)
    except (OSError, DataError):  # gone or unreadable since: the framing problem is what is said
        return None


def _head_if_text(path):
    """The first line of `path` (up to _TEXT_HEAD bytes) where its first bytes are text, else None."""
    try:
        with storage.open(path, "rb") as f:
            head = f.read(_TEXT_HEAD)
    except (OSError, DataError):  # gone or unreadable since: the framing problem is what is said
        return None
    if not head or any(byte < 0x20 and byte not in b"\t\n\r\f" for byte in head) or b"\x7f" in head:
        return None
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 3:  # not a character cut at the end of the bytes read: binary
            return None
        text = head[:exc.start].decode("utf-8")
    return next((line.strip() for line in text.splitlines() if line.strip()), None)


def iter_payloads(path, fmt=None, verify=True, sha256=None):
    """Yield the raw payloads of a record file (see iter_framed)."""
    for _index, _offset, payload in iter_framed(path, fmt, verify, sha256):
        yield payload


def read_records(path, fmt=None, verify=True, skip=0):
    """Yield each record of a file as {name: NumPy array}, any feature names, from record `skip` on.

    A record that does not parse raises DataError naming the file, record,
    byte offset and, where it lies inside one, the feature. The records
    before `skip` of a framed file are framed (verified) but not decoded:
    decoding is some 70 times the framing's cost, and `inspect --skip 1000000`
    of a large TFRecord file decoded each record it passed over, for minutes.
    """
    fmt = fmt or sniff_format(path)
    if fmt in columnar.CODECS:
        yield from itertools.islice(columnar.read_records(path, fmt), skip, None)
        return
    for index, offset, payload in iter_framed(path, fmt, verify):
        if index < skip:
            continue
        try:
            decoded = CODECS[fmt].decode(payload)
        except WireError as exc:  # a TFRecord file named part-0 frames as an OFRecord, then fails to decode
            raise framing_error(path, fmt, f"record {index} at byte {offset}: {exc}") from None
        yield {name: values for name, (_kind, values) in decoded.items()}


def record_kind(path, fmt=None):
    """The kind of the records in a file, from its first record (DataError if empty or of no known kind)."""
    if (fmt or sniff_format(path)) in columnar.CODECS:
        return columnar.record_kind(path, fmt or sniff_format(path))
    for index, offset, payload in iter_framed(path, fmt):
        try:
            decoded = decode_payload(payload, fmt or sniff_format(path))
        except WireError as exc:
            raise framing_error(path, fmt or sniff_format(path), f"record {index} at byte {offset}: {exc}") from None
        kind = kind_of_record({name: stored for name, (stored, _) in decoded.items()})
        if kind is None:
            raise DataError(f"{path}: record 0 has features {', '.join(decoded)}, which match no record kind "
                            f"(known: {', '.join(KINDS)})")
        return kind
    raise DataError(f"{path}: no records")
