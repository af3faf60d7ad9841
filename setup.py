# The optional C cores; everything else about the package is in pyproject.toml.
# optional=True: without a compiler the package still installs and the pure-Python paths run.
# bertprep/native/native.h says which of its files does what.
from setuptools import Extension, setup

NATIVE = [f"bertprep/native/{name}.c" for name in ("crc32c", "encode", "decode", "mt19937", "instances", "masking", "minhash", "module")]

setup(
    ext_modules=[
        Extension("bertprep._native", NATIVE, depends=["bertprep/native/native.h", "bertprep/native/mt19937.h"], optional=True,
                  extra_compile_args=["-O3"]),
        Extension("bertprep._wordpiece", ["bertprep/native/wordpiece.c"], optional=True, extra_compile_args=["-O3"]),
    ]
)
