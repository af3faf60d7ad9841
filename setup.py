# The optional C cores; everything else about the package is in pyproject.toml.
# optional=True: without a compiler the package still installs and the pure-Python paths run.
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("bertprep._native", ["bertprep/_native.c"], optional=True, extra_compile_args=["-O3"]),
        Extension("bertprep._wordpiece", ["bertprep/_wordpiece.c"], optional=True, extra_compile_args=["-O3"]),
    ]
)
