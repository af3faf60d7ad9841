"""TensorBoard scalars without TensorFlow: an event file is a TFRecord file of `Event` protos.

Event{1: wall_time double, 2: step int64, 3: file_version string, 5: summary};
Summary{1: repeated Value}; Value{1: tag string, 2: simple_value float}. A
`simple_value` is the scalar form TensorBoard's scalars dashboard reads, so
the JAX backend, which has no TensorFlow on a GPU host, logs the same
scalars as the TensorFlow backend.
"""

import os
import socket
import struct
import time

from bertprep.formats.protowire import (
    WIRE_FIXED32,
    WIRE_FIXED64,
    WIRE_VARINT,
    encode_key,
    encode_len_field,
    encode_varint,
)
from bertprep.formats.tfrecord import frame

FILE_VERSION = b"brain.Event:2"


def encode_event(wall_time, step, file_version=None, scalars=None):
    """One Event: the file-version header when `file_version` is given, else `{tag: value}` scalars."""
    event = (encode_key(1, WIRE_FIXED64) + struct.pack("<d", wall_time)
             + encode_key(2, WIRE_VARINT) + encode_varint(step))
    if file_version is not None:
        return event + encode_len_field(3, file_version)
    values = b"".join(
        encode_len_field(1, encode_len_field(1, tag.encode("utf-8")) + encode_key(2, WIRE_FIXED32)
                         + struct.pack("<f", value))
        for tag, value in scalars.items())
    return event + encode_len_field(5, values)


class EventWriter:
    """Appends scalar events to `events.out.tfevents.*` in `directory`, flushed after every write."""

    def __init__(self, directory):
        os.makedirs(directory, exist_ok=True)
        now = time.time()
        self.path = os.path.join(directory, f"events.out.tfevents.{int(now)}.{socket.gethostname()}.{os.getpid()}")
        self._file = open(self.path, "ab")
        self._file.write(frame(encode_event(now, 0, file_version=FILE_VERSION)))
        self._file.flush()

    def scalars(self, step, values):
        self._file.write(frame(encode_event(time.time(), step, scalars=values)))
        self._file.flush()

    def close(self):
        self._file.close()
