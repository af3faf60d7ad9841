"""The pipeline's stages, one module or package each (download, shard, create, pack, validate, prepare,
inspect, convert, and fine-tuning data in `finetune`). They live apart from the package's top level so
that `bertprep.create(...)` and the other stage functions can be the public API (bertprep/__init__.py)
without a submodule of the same name replacing them on import."""
