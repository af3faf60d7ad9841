"""A folder, local or on an object store, that a step reads and writes by relative name.

    from bertprep.folder import Folder
    records = Folder("s3://bucket/records")            # or "records", or "file:///data/records"
    records.require("directory", DataError(f"{records}: no such directory"))
    for path in records.glob("ofrecord/training/part-*"):
        ...
    with records.atomic_open("manifest.json", "w") as f:  # whole or not at all, local or object
        f.write(text)

datatrove's `DataFolder` is the model: a step holds a Folder and never asks
what kind of path it has. The Folder asks `storage` (which knows a local path
from a URL, and is the only module that does) and `atomic` (temporary name,
then rename; one upload for an object). Its errors are storage's: a missing
bucket or refused credentials is the store's one line, raised by
`require`/`not_found` before the caller's own "not found" line, which would
otherwise say only that the path is missing.

A Folder is a value: frozen, equal to another of the same root, printed as
its root without credentials (`storage.display`).
"""

import contextlib
import dataclasses
import os
import posixpath
import re
from collections.abc import Iterator

from bertprep import atomic, storage


@dataclasses.dataclass(frozen=True)
class Folder:
    root: str

    def __post_init__(self):
        object.__setattr__(self, "root", os.fspath(self.root))  # as given: messages name it as the user wrote it

    def __str__(self):
        return storage.display(self.root)

    def display(self, *parts: str) -> str:
        """What a message names `parts` under the root by: its full path without credentials."""
        return storage.display(self.path(*parts))

    @classmethod
    def of(cls, place: "str | Folder") -> "Folder":
        """`place` when it is a Folder, else the Folder rooted at the path `place`: for the functions that
        stages holding a Folder and callers holding a path both call."""
        return place if isinstance(place, Folder) else cls(place)

    def path(self, *parts: str) -> str:
        """The full path (or URL) of `parts` under the root; the root itself without parts."""
        return storage.join(self.root, *parts) if parts else self.root

    def folder(self, *parts: str) -> "Folder":
        """The folder `parts` under this one."""
        return Folder(self.path(*parts))

    # What kind of place it is, asked of storage: each answer and its reason live there.
    @property
    def renames(self) -> bool:
        return storage.renames(self.root)

    @property
    def reads_in_place(self) -> bool:
        return storage.reads_in_place(self.root)

    def exists(self, *parts: str) -> bool:
        return storage.exists(self.path(*parts))

    def isdir(self, *parts: str) -> bool:
        return storage.isdir(self.path(*parts))

    def isfile(self, *parts: str) -> bool:
        return storage.isfile(self.path(*parts))

    def require(self, kind: str, missing: Exception, *parts: str) -> None:
        """Nothing when `parts` (the root without) exists as `kind` ("file", "directory", "any"); else the
        store's error for a missing bucket or refused credentials, or `missing`."""
        storage.require(self.path(*parts), kind, missing)

    def check_reachable(self) -> None:
        """Nothing where local; the store's error (one line) for a missing bucket or refused credentials, for a
        writer to fail on before its work rather than on its first write."""
        storage.check_reachable(self.root)

    def not_found(self, missing: Exception, *parts: str) -> Exception:
        """`missing`, for the caller to raise once it knows `parts` is not there; but the store's error, raised
        here, for a missing bucket or refused credentials (which exists/isdir/isfile answer only False)."""
        return storage.not_found(self.path(*parts), missing)

    def glob(self, pattern: str) -> list[str]:
        """The full paths under the root matching `pattern` (relative), sorted."""
        return sorted(storage.glob(self.path(pattern)))

    def walk(self, *parts: str) -> Iterator[tuple[str, list[str], list[str]]]:
        """os.walk of `parts` (the root without), without hidden directories (`.partial/`): (full path of a
        directory, its directories sorted, its files: in the disk's order where local)."""
        return storage.walk(self.path(*parts))

    def files(self, *parts: str) -> list[str]:
        """The full paths of the files anywhere under `parts` (the root without), sorted; none in hidden
        directories (walk)."""
        return sorted(storage.join(top, name) for top, _dirs, names in self.walk(*parts) for name in names)

    def relpath(self, path: str) -> str:
        """The name under the root of the full `path` (a local path or a URL under it)."""
        return storage.relpath(path, self.root)

    def names_in(self, *parts: str) -> list[str]:
        """The names directly under `parts` as os.listdir gives them; none for a store's prefix that holds no
        object yet, where a missing local directory is FileNotFoundError (storage.names_in)."""
        return storage.names_in(self.path(*parts))

    def listdir(self, *parts: str) -> list[str]:
        """The names directly under `parts`, sorted (os.listdir's order is the disk's)."""
        return sorted(storage.listdir(self.path(*parts)))

    def subfolders(self, *parts: str) -> list[str]:
        """The names of the directories directly under `parts`, sorted; none when `parts` is no directory."""
        return [name for name in self.listdir(*parts) if self.isdir(*parts, name)] if self.isdir(*parts) else []

    def open(self, name: str, mode: str = "rb", **kwargs):
        """`storage.open` of `name` under the root (`sha256=` checks what is read against a manifest's)."""
        return storage.open(self.path(name), mode, **kwargs)

    def local_copy(self, name: str) -> contextlib.AbstractContextManager[str]:
        """A local file with `name`'s bytes for readers that need a real file (NumPy's npz, h5py): the file
        itself when local, a temporary download of the object otherwise."""
        return storage.local_copy(self.path(name))

    def download_files(self, target: str) -> None:
        """The files directly under the root (not its subdirectories') copied into the new local directory
        `target`."""
        storage.download_files(self.root, target)

    def read_bytes(self, name: str, sha256: str | None = None) -> bytes:
        return storage.read_bytes(self.path(name), sha256=sha256)

    def read_range(self, name: str, start: int, length: int) -> bytes:
        """`length` bytes of `name` from `start` (fewer at its end): a seek, or one ranged read of an object."""
        return storage.read_range(self.path(name), start, length)

    def getsize(self, *parts: str) -> int:
        """The size in bytes of the file `parts` (the root itself without: a Folder may name one file)."""
        return storage.getsize(self.path(*parts))

    def sha256(self, name: str) -> str:
        """The sha256 (hex) of the file `name`, read through."""
        return storage.sha256(self.path(name))

    def makedirs(self, *parts: str) -> None:
        storage.makedirs(self.path(*parts))

    def remove(self, name: str) -> None:
        storage.remove(self.path(name))

    def remove_unlisted(self, names: list[str], listed) -> None:
        """Remove each of `names` (relative) that `listed` (a manifest's files) does not hold, then the folders
        above them that are left empty, deepest first (the root stays): what a sharded stage's failed run cleans
        up, so that no output it did not record is left where a reader that globs a folder takes it."""
        unlisted = [name for name in names if name not in listed]
        for name in unlisted:
            self.remove(name)
        parents = {parent for name in unlisted for parent in _parents(name)}
        for parent in sorted(parents, key=lambda parent: parent.count("/"), reverse=True):
            storage.remove_if_empty(self.path(parent))

    def remove_tree(self, *parts: str) -> None:
        """Remove the directory `parts` (the root without) and all under it, or every object under the prefix;
        gone already is fine."""
        storage.rmtree(self.path(*parts))

    def atomic_open(self, name: str, mode: str = "wb", staging: str | None = None):
        """Write `name` whole or not at all (`atomic.atomic_open`): a temporary, then a rename or one upload."""
        return atomic.atomic_open(self.path(name), mode, staging=staging)

    def atomic_write_bytes(self, name: str, data: bytes, staging: str | None = None) -> None:
        atomic.atomic_write_bytes(self.path(name), data, staging=staging)


def natural_key(path: str) -> list:
    """A sort key that orders the numbers in names by value: `part-2` before `part-10`, as shards, parts and
    splits are numbered (sorted as text, the tenth shard came second)."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path)]


def _parents(name):
    """The folders above the relative `name`, nearest first: "a/b/c" -> "a/b", "a"."""
    parent = posixpath.dirname(name)
    while parent:
        yield parent
        parent = posixpath.dirname(parent)
