"""`bertprep.validate(...)`: prove a dataset is sound before training starts, or say exactly where it is not.

The package, by what each part checks:
- `report`: `validate(ValidateOptions)`, the whole report and its one-screen table (`bertprep/cli/validate.py`
  is the command line);
- `records`: every invariant of one record file, vectorized over batches, and its statistics;
- `dataset`: a records directory: its files, part numbering, manifest and cross-file consistency;
- `decode`: reading record files in NumPy batches: framing, CRCs, lock-step decoding;
- `text`: text shards from `bertprep shard` and SQuAD/GLUE downloads;
- `compare`: whether two datasets hold the same instances in the same order;
- `plot`: the report as a PNG.
"""

from bertprep.stages.validate.report import Report, ValidateOptions, validate, validate_paths

__all__ = ["Report", "ValidateOptions", "validate", "validate_paths"]
