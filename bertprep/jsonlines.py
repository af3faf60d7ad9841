"""JSON lines as the project reads them: as bytes (a line that is not UTF-8 is "not JSON" on its own
line, not a decode error of the whole file), blank lines passed over, each value with its line number
for the messages. The callers say what a value must be, and what a line that is not JSON is called."""

import json

from bertprep import storage


def json_lines(path, not_json, sha256=None):
    """(line number, value) of each non-blank line of `path`; a line that is not JSON raises what
    `not_json(line number, the ValueError)` returns. `sha256`: its manifest's, checked at the end."""
    with storage.open(path, "rb", sha256=sha256) as f:  # a URL too (streamed)
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except ValueError as exc:
                raise not_json(number, exc) from None
            yield number, value
