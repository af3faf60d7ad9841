"""Write files under a temporary name and rename them into place when complete.

A reader never sees a half-written file under its final name: a crash leaves
at most a `.tmp-*` file, which the next run removes (`remove_stale_temps`).
"""

import contextlib
import hashlib
import os

TEMP_MARK = ".tmp-"


def temp_name(path):
    directory, name = os.path.split(os.fspath(path))
    return os.path.join(directory, f"{TEMP_MARK}{os.getpid()}-{name}")


@contextlib.contextmanager
def atomic_open(path, mode="wb"):
    """Open a temporary sibling of `path`; rename it to `path` if the block succeeds."""
    path = os.fspath(path)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = temp_name(path)
    f = open(tmp, mode)
    try:
        yield f
        f.flush()
        os.fsync(f.fileno())
        f.close()
        os.replace(tmp, path)
    except BaseException:
        f.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path, data):
    with atomic_open(path, "wb") as f:
        f.write(data)


def remove_stale_temps(directory):
    """Delete temporary files left by an interrupted run anywhere under `directory`."""
    removed = 0
    for root, _dirs, files in os.walk(directory):
        for name in files:
            if name.startswith(TEMP_MARK):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(root, name))
                    removed += 1
    return removed


def sha256_file(path, chunk_size=1 << 20):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()
