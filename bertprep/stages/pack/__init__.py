"""`bertprep.pack(...)`: pretraining records → packed rows of up to k sequences (the MLPerf BERT layout).

The package, by what each part does:
- `strategy`: which sequences share a row (best fill and first-fit decreasing over the length histogram);
- `layout`: rows from instances and instances from rows, in NumPy;
- `task`: the shard task (one create file in, its packed file per format out);
- `stage`: `pack(PackOptions)`: planning, resume and the summary (`bertprep/cli/pack.py` is its command line).
"""

__all__ = ["PackOptions", "pack"]


def __getattr__(name):
    # On first use: validate imports `layout` from here, and `stage` imports validate.
    if name in __all__:
        from bertprep.stages.pack import stage

        return getattr(stage, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
