"""The record formats as objects: each format's name, whether it frames records one after another or holds
columns, its frame sizes and how its files are named, written once; every stage asks its codec.

    from bertprep.formats import codecs
    codecs.get("ofrecord").file_name("wiki_training_0", 3)     # 'part-3'
    codecs.get("tfrecord").header                              # 12 bytes before each payload
    codecs.names()                                             # ('tfrecord', 'ofrecord', 'hdf5', 'parquet')

Adding a format is its module here (its encoder and reader) and one line in `_REGISTERED`.
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class Codec:
    """One record format. Framed files hold records one after another, each a `header` of bytes (its length,
    and for TFRecord the length's CRC), the payload, a `trailer` (TFRecord's payload CRC); columnar files
    (HDF5, Parquet) hold each feature as one column of every record (formats/columnar.py)."""

    name: str
    framed: bool
    suffix: str | None  # its files' suffix; None: OneFlow's part-<index>, named by position in the split
    header: int = 0
    trailer: int = 0

    def file_name(self, stem, index):
        """The file this format's shard `index` of input `stem` is written to (create, pack, convert)."""
        return f"part-{index}" if self.suffix is None else f"{stem}{self.suffix}"

    def output_path(self, split, stem, index):
        """`file_name` under the format's own directory of a records tree: `<format>/<split>/<file>`."""
        return f"{self.name}/{split}/{self.file_name(stem, index)}"

    @property
    def glob(self):
        """The pattern of this format's files in a directory."""
        return "part-*" if self.suffix is None else f"*{self.suffix}"


TFRECORD = Codec("tfrecord", framed=True, suffix=".tfrecord", header=12, trailer=4)
OFRECORD = Codec("ofrecord", framed=True, suffix=None, header=8)
HDF5 = Codec("hdf5", framed=False, suffix=".hdf5")
PARQUET = Codec("parquet", framed=False, suffix=".parquet")

_REGISTERED = {codec.name: codec for codec in (TFRECORD, OFRECORD, HDF5, PARQUET)}


def get(name):
    """The codec of a format name (one of `names()`); KeyError naming the known ones otherwise."""
    try:
        return _REGISTERED[name]
    except KeyError:
        raise KeyError(f"unknown record format {name!r}; known: {', '.join(_REGISTERED)}") from None


def names():
    """Every format's name, framed ones first, in the order help texts and defaults list them."""
    return tuple(_REGISTERED)
