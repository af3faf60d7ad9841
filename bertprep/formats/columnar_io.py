"""What the columnar codecs share and need before `columnar` is loaded: their optional libraries, and the error
for bytes that cannot be read."""

import importlib

import numpy as np

from bertprep.errors import DataError, UsageError


class Unreadable(DataError):
    """A columnar file whose bytes cannot be read (truncated, a checksum that fails): its framing, not its schema."""


class Unholdable(DataError):
    """Records a format's layout cannot hold, named by row: a writer is handed columns, not their file, so the
    caller that knows the source (convert) names it."""


def require(fmt, module):
    """`module` imported, or a UsageError naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise UsageError(f"{fmt} records need {module.split('.')[0]}: pip install 'bertprep[columnar]'") from None


def as_rows(values):
    """A stored column as (N, length): a scalar column (N,) becomes (N, 1); a file of no rows keeps its width."""
    values = np.asarray(values)
    return values.reshape(len(values), int(np.prod(values.shape[1:], dtype=np.int64)))
