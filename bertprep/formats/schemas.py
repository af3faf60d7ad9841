"""Every record kind described once, as data: feature names, kinds, lengths and key orders.

A record kind is what one file of records holds: BERT pretraining instances,
packed pretraining rows, SQuAD or GLUE features. Its description says, for
each feature, whether it holds integers or floats and how many, as an
expression over the kind's dimensions (`seq`, `pred`, `k`, or a constant),
in the order the reference writes TFRecord features; and the key order of
its OFRecord files. The codecs, `read_records`/`read_batches`, `inspect`,
`convert` and the schema checks of `validate` all work from it, so a new
kind is one `register(RecordKind(...))`.

A file's kind is named in its dataset's manifest (`"kind"`), or recognised
from the features of its first record: no two kinds have the same set of
names and dtypes.
"""

import dataclasses

import numpy as np

from bertprep.errors import DataError

INT, FLOAT = "int", "float"
# What an INT feature holds: int32, as OFRecord stores it and the trainer and the columnar files read it.
INT32_RANGE = (-(1 << 31), (1 << 31) - 1)
# Features whose values are token ids of the vocab the records were made with.
TOKEN_ID_FEATURES = ("input_ids", "masked_lm_ids")
# The most positions a record holds: bertprep/native/module.c keeps positions in 16 bits (create, create-squad,
# create-glue refuse a longer --seq).
MAX_SEQ = 65535


@dataclasses.dataclass(frozen=True)
class Feature:
    name: str
    dtype: str  # INT or FLOAT: int64_list in TFRecord, int32_list in OFRecord; float_list in both
    length: str  # "seq", "pred + k", "1": a sum of dimension names and integers

    def size(self, dims):
        """The number of values for the kind's dimensions `dims` ({name: int})."""
        return sum(dims[term] if term in dims else int(term) for term in _terms(self.length))


def _terms(expression):
    return [term.strip() for term in expression.split("+")]


@dataclasses.dataclass(frozen=True)
class RecordKind:
    name: str
    description: str
    features: tuple  # Feature, in TFRecord order (the reference writer's insertion order)
    ofrecord_order: tuple | None = None  # names in OFRecord key order; None: the TFRecord order

    def __post_init__(self):
        names = [f.name for f in self.features]
        if len(set(names)) != len(names):
            raise ValueError(f"record kind {self.name!r}: a feature is listed twice")
        if self.ofrecord_order is not None and sorted(self.ofrecord_order) != sorted(names):
            raise ValueError(f"record kind {self.name!r}: ofrecord_order must list exactly its features")
        for feature in self.features:
            if feature.dtype not in (INT, FLOAT):
                raise ValueError(f"record kind {self.name!r}: feature {feature.name!r} dtype must be int or float")

    @property
    def names(self):
        return tuple(f.name for f in self.features)

    @property
    def signature(self):
        """What tells this kind's records from every other's: its feature names with their dtypes."""
        return frozenset((f.name, f.dtype) for f in self.features)

    @property
    def dims(self):
        """The dimension names its lengths use, in order of first use."""
        seen = []
        for feature in self.features:
            for term in _terms(feature.length):
                if not term.isdigit() and term not in seen:
                    seen.append(term)
        return tuple(seen)

    def feature(self, name):
        return next(f for f in self.features if f.name == name)

    def key_order(self, fmt):
        """Feature names in the order `fmt` files store them."""
        return self.names if fmt == "tfrecord" or self.ofrecord_order is None else self.ofrecord_order

    def lengths(self, dims):
        """{feature name: number of values} for the dimensions `dims`."""
        return {f.name: f.size(dims) for f in self.features}

    def dims_of(self, sizes):
        """The dimensions implied by one record's list sizes ({name: count}), or None where they do not fit.

        A feature whose length is one dimension gives it; a sum with one
        unknown dimension gives that one (`pred + k` with k known); every
        feature must then agree.
        """
        dims = {}
        pending = [f for f in self.features if f.name in sizes]
        progress = True
        while pending and progress:
            progress = False
            for feature in list(pending):
                unknown = [t for t in _terms(feature.length) if not t.isdigit() and t not in dims]
                if len(unknown) == 1:
                    known = sum(dims[t] if t in dims else int(t) for t in _terms(feature.length) if t != unknown[0])
                    value = sizes[feature.name] - known
                    if value < 0:
                        return None
                    dims[unknown[0]] = value
                    progress = True
                if len(unknown) <= 1:
                    pending.remove(feature)
        if set(dims) != set(self.dims):
            return None
        if any(f.size(dims) != sizes[f.name] for f in self.features if f.name in sizes):
            return None
        return dims


def int_values_problem(kind, columns, vocab_size=None):
    """The first INT feature value a reader would otherwise change or pass on, as (row, "feature[i]", value,
    what is wrong), or None: a non-integer, a value beyond int32, or (where `vocab_size` is known) a token id
    outside the vocab. `columns`: {name: (N, length) or (N,)}. One min and max per column on sound data."""
    for feature in kind.features:
        values = columns.get(feature.name)
        if feature.dtype == FLOAT or values is None or not np.size(values):
            continue
        values = np.asarray(values)
        if values.dtype.kind not in "iuf":
            return 0, feature.name, values.dtype.name, "is not a type of integers"
        if values.dtype.kind == "f" and not np.array_equal(values, np.trunc(values)):
            return _placed(values, _first(values != np.trunc(values)), feature.name, "is not an integer")
        low, high = INT32_RANGE
        what = "does not fit int32, the type of integer features"
        if vocab_size is not None and feature.name in TOKEN_ID_FEATURES:
            low, high = 0, vocab_size - 1
            what = f"is not a token id of the vocab of {vocab_size} (0..{vocab_size - 1})"
        outside = first_outside(values, low, high)
        if outside is not None:
            return _placed(values, outside, feature.name, what)
    return None


def is_integer(value):
    """Whether a JSON (Python) value is an integer: a bool is not (True would be read as 1), nor a float
    (101.5 would be truncated) or a string."""
    return isinstance(value, int) and not isinstance(value, bool)


def first_outside(values, low, high):
    """The index (a tuple) of the first value of the number array `values` outside low..high, or None:
    one min and one max on sound data. Every reader's range rule (int32, the vocab) goes through it."""
    values = np.asarray(values)
    if not values.size or (values.min() >= low and values.max() <= high):
        return None
    return _first((values < low) | (values > high))


def _first(bad):
    return tuple(np.argwhere(bad)[0].tolist())


def _placed(values, index, name, what):
    row, *column = index
    place = f"[{column[0]}]" if column and values.shape[1] > 1 else ""
    return row, name + place, values[index].item(), what


def check_int_values(kind, columns, where, first_row=0, vocab_size=None):
    """int_values_problem as a DataError naming `where` (the file), the row (`first_row` + row), feature and
    value."""
    problem = int_values_problem(kind, columns, vocab_size)
    if problem is not None:
        row, name, value, what = problem
        raise DataError(f"{where}: row {first_row + row}: {name}: {value} {what}")


# ---------------------------------------------------------------- the registry

KINDS: dict = {}


def register(kind):
    """Make `kind` known to every reader, writer and checker; returns it."""
    existing = next((k for k in KINDS.values() if k.signature == kind.signature and k.name != kind.name), None)
    if existing is not None:
        raise ValueError(f"record kind {kind.name!r} has the same features as {existing.name!r}: "
                         "files could not tell them apart")
    KINDS[kind.name] = kind
    return kind


def kind_of_record(stored_kinds):
    """The kind whose features are exactly those of a decoded record ({name: list kind as stored}), or None."""
    signature = frozenset((name, FLOAT if kind == "float" else INT if kind in ("int32", "int64") else kind)
                          for name, kind in stored_kinds.items())
    return next((kind for kind in KINDS.values() if kind.signature == signature), None)


def kind_of_manifest(manifest, where):
    """The kind a manifest names; pretraining for manifests written before kinds were recorded."""
    kind = (manifest or {}).get("kind", PRETRAINING.name)
    name = kind.get("name") if isinstance(kind, dict) else kind
    if name not in KINDS:
        raise DataError(f"{where}: unknown record kind {name!r} (known: {', '.join(KINDS)})")
    return KINDS[name]


# ---------------------------------------------------------------- the kinds


def _features(*specs):
    return tuple(Feature(*spec) for spec in specs)


PRETRAINING = register(RecordKind(
    "pretraining",
    "BERT masked-LM + next-sentence instances (google-research/bert create_pretraining_data.py)",
    _features(
        ("input_ids", INT, "seq"),
        ("input_mask", INT, "seq"),
        ("segment_ids", INT, "seq"),
        ("masked_lm_positions", INT, "pred"),
        ("masked_lm_ids", INT, "pred"),
        ("masked_lm_weights", FLOAT, "pred"),
        ("next_sentence_labels", INT, "1"),
    ),
    # OneFlow's published sample: re-encoding its records in this order reproduces the file byte for byte.
    ofrecord_order=("masked_lm_weights", "masked_lm_positions", "input_mask", "masked_lm_ids", "input_ids",
                    "segment_ids", "next_sentence_labels"),
))

# `create --masking dynamic`: the instances without masks, which loaders draw per epoch (bertprep.masking).
# The masking parameters (pred, masked_lm_prob, whole_word_mask) and each file's first global instance
# index are in the manifest.
UNMASKED = register(RecordKind(
    "unmasked",
    "BERT next-sentence instances without masks: masked at load time, a new mask each epoch",
    _features(
        ("input_ids", INT, "seq"),
        ("input_mask", INT, "seq"),
        ("segment_ids", INT, "seq"),
        ("next_sentence_labels", INT, "1"),
    ),
))

# Up to k sequences in one row of seq tokens (docs/reference-facts.md, "Packed rows: the MLPerf layout").
PACKED = register(RecordKind(
    "packed",
    "packed pretraining rows: up to k instances per row (MLPerf BERT layout)",
    _features(
        ("input_ids", INT, "seq"),
        ("input_mask", INT, "seq"),  # 0 padding, i for the i-th sequence of the row (1..k)
        ("segment_ids", INT, "seq"),
        ("positions", INT, "seq"),  # restart at 0 for each sequence
        ("masked_lm_positions", INT, "pred + k"),
        ("masked_lm_ids", INT, "pred + k"),
        ("masked_lm_weights", FLOAT, "pred + k"),  # the sequence index i, 0 for padding
        ("next_sentence_positions", INT, "k"),  # each sequence's [CLS]
        ("next_sentence_labels", INT, "k"),
        ("next_sentence_weights", FLOAT, "k"),
    ),
))

# google-research/bert run_squad.py FeatureWriter's insertion order.
SQUAD_TRAIN = register(RecordKind(
    "squad_train",
    "SQuAD training features (google-research/bert run_squad.py)",
    _features(
        ("unique_ids", INT, "1"),
        ("input_ids", INT, "seq"),
        ("input_mask", INT, "seq"),
        ("segment_ids", INT, "seq"),
        ("start_positions", INT, "1"),
        ("end_positions", INT, "1"),
        ("is_impossible", INT, "1"),
    ),
))

SQUAD_EVAL = register(RecordKind(
    "squad_eval",
    "SQuAD evaluation features (google-research/bert run_squad.py)",
    _features(
        ("unique_ids", INT, "1"),
        ("input_ids", INT, "seq"),
        ("input_mask", INT, "seq"),
        ("segment_ids", INT, "seq"),
    ),
))

# google-research/bert run_classifier.py file_based_convert_examples_to_features.
GLUE = register(RecordKind(
    "glue",
    "GLUE classification features (google-research/bert run_classifier.py)",
    _features(
        ("input_ids", INT, "seq"),
        ("input_mask", INT, "seq"),
        ("segment_ids", INT, "seq"),
        ("label_ids", INT, "1"),
        ("is_real_example", INT, "1"),
    ),
))

# STS-B is a regression task: its label is a float (the reference has no processor for it).
GLUE_REGRESSION = register(RecordKind(
    "glue_regression",
    "GLUE regression features (STS-B): a float label",
    _features(
        ("input_ids", INT, "seq"),
        ("input_mask", INT, "seq"),
        ("segment_ids", INT, "seq"),
        ("label_ids", FLOAT, "1"),
        ("is_real_example", INT, "1"),
    ),
))
