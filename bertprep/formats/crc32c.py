"""CRC-32C (Castagnoli) and TFRecord's masked form.

The native extension (`bertprep._native`) computes it at memory speed; the
table-driven Python version is the fallback when the extension was not built.
"""

try:
    from bertprep._native import crc32c as _native_crc32c
except ImportError:  # extension not built: correct, slower
    _native_crc32c = None


def _make_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _make_table()


def _python_crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    table = _TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


crc32c = _native_crc32c or _python_crc32c


def masked_crc32c(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
