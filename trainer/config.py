"""Configuration: Google's BERT sizes on top of bertprep.bert_config (the keys of `bert_config.json`
and the rules a config file keeps, shared with `bertprep download pretrained`), and the runs' own:
TrainConfig and FinetuneConfig (checked once, when built), TrainSummary and FinetuneSummary. No Keras
import, so argument and data errors are reported before any framework loads."""

import dataclasses
import json
import math
import os

from bertprep import bert_config, storage
from bertprep.errors import UsageError
from bertprep.formats import codecs
from bertprep.options import (
    check_types,
    errors_name_fields,
    nearest_existing,
    refuse_dangling_file_link,
    refuse_dangling_link,
    refuse_empty_path,
    refuse_overlap,
)
from trainer.precision import GPU_PLATFORMS, PRECISIONS
from trainer.xla_gpu import GEMM_AUTOTUNE, GEMM_KERNELS

# Google's published BERT sizes: (layers, hidden, heads); intermediate = 4 * hidden.
SIZES = {
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "small": (4, 512, 8),
    "medium": (8, 512, 8),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}

# --optimizer's choices (trainer/optimizers.py; docs/trainer.md compares them).
OPTIMIZERS = {"adam": "AdamW", "lamb": "NVLAMB", "google-adam": "Google's AdamWeightDecay"}
# The optimizers that clip the summed gradients by global norm (--clip-norm), by default to 1.0.
CLIPPING = ("lamb", "google-adam")
DEFAULT_CLIP_NORM = 1.0


def size_of(config):
    """(layers, hidden, heads) of a BertConfig: what SIZES names."""
    return config.num_hidden_layers, config.hidden_size, config.num_attention_heads


class BertConfig(bert_config.BertConfig):
    """bertprep.bert_config.BertConfig (its fields, from_json_file, checked), and a config by size name."""

    @classmethod
    def sized(cls, name, **overrides):
        layers, hidden, heads = SIZES[name]
        return cls(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                   intermediate_size=4 * hidden, **overrides)


def user_cache(*parts, environ=os.environ):
    """A path in the user's cache for bertprep ($XDG_CACHE_HOME, else ~/.cache)."""
    return os.path.join(environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "bertprep", *parts)


# ---------------------------------------------------------------- run configurations

# How the step computes, not what (docs/trainer.md, "The step on one GPU, measured"): each lever's module says what
# its choices do and what they were measured to give; "auto" picks per platform (StepOptions.resolved).
EMBEDDING_GRADIENTS = ("auto", "scatter", "sorted")  # trainer/embedding_lookup.py
DROPOUT_RNGS = ("auto", "threefry", "rbg", "hash")  # trainer/dropout.py
ATTENTION_KERNELS = ("auto", "einsum", "fused")  # trainer/attention.py, trainer/fused_attention.py
GELU_FORMULAS = ("auto", "keras", "erf")  # trainer/gelu.py
QKV_PROJECTIONS = ("auto", "separate", "packed")  # trainer/attention.py
LAST_LAYERS = ("auto", "all", "predicted")  # trainer/last_layer.py
# GEMM_KERNELS and GEMM_AUTOTUNE are trainer/xla_gpu.py's, imported above.


@dataclasses.dataclass(frozen=True)
class StepOptions:
    """The model's levers, concrete (no "auto"): how embedding rows' gradients reach their tables
    (trainer/embedding_lookup.py), which generator draws the dropout masks (trainer/dropout.py) and
    whether the Transformer layers run as one scanned loop (trainer/scan_layers.py) and which kernel
    computes the attention (trainer/attention.py), whether the fused attention's query, key and value
    projections multiply as one (trainer/attention.py), by which formula the exact GELU (trainer/gelu.py), and
    whether the last layer computes only the positions the heads read (trainer/last_layer.py). The defaults are
    Keras's own computations."""

    embedding_gradient: str = "scatter"
    dropout_rng: str = "threefry"
    scan_layers: bool = False
    attention: str = "einsum"
    gelu: str = "keras"
    qkv_projection: str = "separate"
    last_layer: str = "all"

    @classmethod
    def resolved(cls, embedding_gradient, dropout_rng, backend, platform, scan_layers=False, attention="einsum",
                 fused_attention_fits=False, gelu="auto", qkv_projection="auto", last_layer="auto"):
        """"auto" made concrete for `backend` on a device of `platform`: the sorted gradient, hash's masks and
        (where `fused_attention_fits` the run: its shapes, no model or pipeline parallelism) the fused
        attention under JAX on a GPU, where they were measured to help; Keras's own elsewhere (TensorFlow has
        none of them; on a CPU the scatter is a plain loop, the masks' generator no bottleneck, and the
        Pallas kernel would run interpreted). The GELU's erf formula, the packed projections and the last layer
        on the predicted positions are not yet measured on a GPU: "auto" is Keras's everywhere."""
        gpu = backend == "jax" and platform in GPU_PLATFORMS
        kernel = attention if attention != "auto" else ("fused" if gpu and fused_attention_fits else "einsum")
        if qkv_projection == "packed" and kernel != "fused":
            raise UsageError("--qkv-projection packed: only with the fused attention (--attention fused, or auto "
                             "under JAX on a GPU where it takes the run); this run's attention is einsum")
        return cls(embedding_gradient=embedding_gradient if embedding_gradient != "auto" else
                   ("sorted" if gpu else "scatter"),
                   dropout_rng=dropout_rng if dropout_rng != "auto" else ("hash" if gpu else "threefry"),
                   scan_layers=scan_layers,
                   attention=kernel,
                   gelu=gelu if gelu != "auto" else "keras",
                   qkv_projection=qkv_projection if qkv_projection != "auto" else "separate",
                   last_layer=last_layer if last_layer != "auto" else "all")


PLACEMENTS = ("intra_first", "inter_first")  # --placement (trainer/parallel.py orders the devices by it)
ALLREDUCE_DTYPES = ("fp32", "bf16")
PRETRAINING_FORMATS = codecs.record_names()
FINETUNING_FORMATS = codecs.finetuning_names()


def is_warmup(value):
    """A fraction of the steps (< 1) or a whole number of steps: nan and inf are neither (int() of them
    raised deep in the run, after the records were read)."""
    return math.isfinite(value) and value >= 0 and (value < 1 or value == int(value))


# The most optimizer steps a run can take: the learning-rate schedule computes with the step count as an int32
# (more was an OverflowError traceback from JAX at the first step).
MAX_STEPS = 2**31 - 1


def _check_schedule(optimizer, clip_norm, steps, warmup, lr):
    """The optimizer's flags together, pretraining and fine-tuning alike."""
    if steps and steps > MAX_STEPS:
        raise UsageError(f"--steps must be at most {MAX_STEPS}, got {steps}")
    if clip_norm is not None and not (math.isfinite(clip_norm) and clip_norm > 0):
        # the CLI's type checks it already: from Python, -1.0 trained without clipping and nan made every
        # clipped gradient nan, exit 0
        raise UsageError(f"--clip-norm: expected a positive number, got {clip_norm}")
    if not is_warmup(warmup):  # the CLI's type checks it already: for a Python caller
        raise UsageError(f"--warmup must be a fraction below 1 or a whole number of steps, got {warmup}")
    if clip_norm is not None and optimizer not in CLIPPING:
        raise UsageError(f"--clip-norm: --optimizer {optimizer} does not clip gradients "
                         f"(only {' and '.join(CLIPPING)} do)")
    if steps and warmup >= 1 and warmup > steps:
        raise UsageError(f"--warmup {int(warmup)} exceeds --steps {steps}")
    if not math.isfinite(lr) or lr <= 0:
        raise UsageError(f"--lr must be a positive number, got {lr}")


# --seed's range: keras.utils.set_random_seed seeds NumPy's legacy generator, which takes 0 .. 2**32 - 1 (a
# seed outside it was a ValueError traceback once the checkpoint had been read).
MAX_SEED = 2**32 - 1


def _check_seed(seed):
    if not 0 <= seed <= MAX_SEED:
        raise UsageError(f"--seed must be an integer from 0 to {MAX_SEED}, got {seed}")


# The formats of the embedded sample records that a run without --data trains on: create's default formats, which
# bertprep.stages.create.create_sample_records writes.
SAMPLE_FORMATS = codecs.DEFAULT_FORMATS


def check_sample_format(fmt, data):
    """No --data: the run trains on the embedded sample records, which hold SAMPLE_FORMATS only (docs/trainer.md,
    "Data"). `--format hdf5` said `.../trainer-sample-shards/...: no hdf5 training records (looked for ...)` of a
    cache directory the user never named, exit 1."""
    if data is None and fmt not in SAMPLE_FORMATS:
        raise UsageError(f"--format {fmt}: the embedded sample records, which a run without --data trains on, are "
                         f"{' and '.join(SAMPLE_FORMATS)} only: give --data of records in {fmt}, or --format "
                         f"{' or '.join(SAMPLE_FORMATS)}")


def _check_choices(config, choices):
    """What the CLI's parser checks, for a config built in Python: {field: allowed values}."""
    for name, allowed in choices.items():
        value = getattr(config, name)
        if value not in allowed:
            raise UsageError(f"--{name.replace('_', '-')}: expected one of {', '.join(map(str, allowed))}, "
                             f"got {value!r}")


def _check_appendable(config):
    """--log-json and --tensorboard-dir are appended to line by line as the run goes: an object store
    cannot append to an object, so they must be local (the default TensorBoard directory of a URL
    --checkpoint-dir is local already: pretraining.tensorboard_dir)."""
    for name in ("log_json", "tensorboard_dir"):
        value = getattr(config, name)
        if value and not storage.appends(value):
            raise UsageError(f"--{name.replace('_', '-')} {storage.display(value)}: written as the run goes, which "
                             "an object store cannot append to: give a local path")


def _check_paths_named(config, names):
    """An empty path is refused: the run took "" for a flag not given (--checkpoint-dir "" saved nothing and
    exited 0, --eval-file "" scored against the manifest's source) or for the current directory (--data ""
    said the default --output-dir lay "inside the input "). A path object is kept as its string: the run joins
    and compares strings (a pathlib.Path --init-checkpoint was a TypeError traceback, 'PosixPath' + 'str'). A URL
    with credentials or a query is refused here, as bertprep's options refuse it (storage.check_path): `data=
    "s3://KEY:SECRET@b/r"` was taken, and the config's repr printed the secret until the run opened the path."""
    for name in names:
        value = getattr(config, name)
        if value is not None:
            refuse_empty_path(f"--{name.replace('_', '-')}", value)
            storage.check_path(value)
            object.__setattr__(config, name, os.fspath(value))


def _check_positive(config, names):
    for name in names:
        value = getattr(config, name)
        if value is not None and not (isinstance(value, int) and value >= 1):
            raise UsageError(f"--{name.replace('_', '-')}: expected a positive integer, got {value!r}")


def tf_config_hosts(text):
    """(host count, this host's index) of TF_CONFIG (several hosts under TensorFlow), checked before TensorFlow
    reads it: its JSON error, or a task outside the cluster, was a traceback from inside the strategy."""
    try:
        tf_config = json.loads(text)
        cluster, task = tf_config["cluster"], tf_config["task"]
        tasks = [(t, i) for t in ("chief", "worker") for i in range(len(cluster.get(t, [])))]
        return len(tasks), tasks.index((task["type"], int(task["index"])))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # AttributeError: a cluster of no names
        raise UsageError(f"TF_CONFIG is not a cluster with this task in it: {exc}") from None


def _check_read(config):
    """Flags a run reads only beside another, or only below --steps: given otherwise, each was taken and
    ignored without a word (a default left as it is says nothing, so it passes)."""
    default = {field.name: field.default for field in dataclasses.fields(config)}
    for name in ("checkpoint_every", "keep_checkpoints"):
        if not config.checkpoint_dir and getattr(config, name) != default[name]:
            raise UsageError(f"--{name.replace('_', '-')} {getattr(config, name)}: no checkpoints are written "
                             "without --checkpoint-dir")
    if not config.eval_every and config.eval_steps != default["eval_steps"]:
        raise UsageError(f"--eval-steps {config.eval_steps}: nothing is evaluated without --eval-every")
    if config.eval_every > config.steps:  # evaluations run at its multiples only: none would
        raise UsageError(f"--eval-every {config.eval_every}: past --steps {config.steps}, nothing would be evaluated")


@errors_name_fields
@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """A pretraining run (`python -m trainer`'s flags, docs/trainer.md), checked when built: a bad
    combination is a UsageError with the CLI's message. `model` None: base, or tiny on the embedded
    sample (no `data`) (default_size), unless `bert_config` or `init_checkpoint` gives the model, or under
    `resume` the checkpoint it continues (pretraining.model_config; default_size where there is none)."""

    format: str
    data: str | None = None
    model: str | None = None
    bert_config: str | None = None
    dropout: float | None = None
    optimizer: str = "lamb"
    clip_norm: float | None = None
    lr: float = 1e-4
    warmup: float = 0.1
    steps: int = 1000
    batch_size: int = 32
    grad_accum: int = 1
    precision: str = "fp32"
    allreduce_dtype: str = "fp32"
    pad_vocab: int | None = None
    steps_per_call: int = 1
    seed: int = 12345
    bin_size: int | None = None
    model_parallel: int = 1
    pipeline_stages: int = 1
    placement: str = "intra_first"
    init_checkpoint: str | None = None
    checkpoint_dir: str | None = None
    checkpoint_every: int = 1000
    keep_checkpoints: int = 3
    resume: bool = False
    eval_every: int = 0
    eval_steps: int = 10
    log_every: int = 100
    log_json: str | None = None
    tensorboard_dir: str | None = None
    quiet: bool = False
    embedding_gradient: str = "auto"
    dropout_rng: str = "auto"
    gemm: str = "cublas"
    gemm_autotune: str = "on"
    compilation_cache: bool = True
    scan_layers: bool = False
    attention: str = "auto"
    gelu: str = "auto"
    qkv_projection: str = "auto"
    last_layer: str = "auto"

    def default_size(self) -> str:
        """The Google size of a run that names no model: tiny on the embedded sample (a demo that must finish in
        a minute on a laptop CPU), else base."""
        return "tiny" if self.data is None else "base"

    def __post_init__(self):
        check_types(self)
        _check_choices(self, {"format": PRETRAINING_FORMATS, "optimizer": tuple(OPTIMIZERS),
                              "precision": PRECISIONS, "allreduce_dtype": ALLREDUCE_DTYPES,
                              "placement": PLACEMENTS, "model": (None, *SIZES),
                              "embedding_gradient": EMBEDDING_GRADIENTS, "dropout_rng": DROPOUT_RNGS,
                              "gemm": GEMM_KERNELS, "gemm_autotune": GEMM_AUTOTUNE,
                              "attention": ATTENTION_KERNELS, "gelu": GELU_FORMULAS,
                              "qkv_projection": QKV_PROJECTIONS, "last_layer": LAST_LAYERS})
        _check_paths_named(self, ("data", "bert_config", "init_checkpoint", "checkpoint_dir", "log_json",
                                  "tensorboard_dir"))
        _check_positive(self, ("steps", "batch_size", "grad_accum", "pad_vocab", "steps_per_call", "bin_size",
                               "model_parallel", "pipeline_stages", "checkpoint_every", "keep_checkpoints",
                               "eval_steps", "log_every"))
        if self.eval_every < 0:  # step % -5 is 0 every fifth step: it evaluated as --eval-every 5, unsaid
            raise UsageError(f"--eval-every: expected 0 (never) or a positive integer, got {self.eval_every}")
        _check_read(self)
        check_sample_format(self.format, self.data)
        if self.dropout is not None and not 0 <= self.dropout < 1:  # the CLI's type checks it already: from
            # Python, 1.5 (or nan) was Keras's ValueError traceback once the records had been read
            raise UsageError(f"--dropout: expected a probability in [0, 1), got {self.dropout}")
        if self.model and self.bert_config:
            raise UsageError("--bert-config: not allowed with argument --model")
        if self.model is None and not self.bert_config and not self.init_checkpoint and not self.resume:
            object.__setattr__(self, "model", self.default_size())
        if self.resume and not self.checkpoint_dir:
            raise UsageError("--resume needs --checkpoint-dir")
        if self.scan_layers and (self.model_parallel > 1 or self.pipeline_stages > 1):
            raise UsageError("--scan-layers: not with --model-parallel or --pipeline-stages (they lay out and "
                             "place each layer apart)")
        if self.qkv_projection == "packed" and self.attention == "einsum":
            raise UsageError("--qkv-projection packed: only with the fused attention (--attention fused or auto)")
        if self.last_layer == "predicted" and self.pipeline_stages > 1:
            raise UsageError("--last-layer predicted: not with --pipeline-stages (the stages run the layers and "
                             "the heads apart)")
        if self.attention == "fused" and (self.model_parallel > 1 or self.pipeline_stages > 1):
            raise UsageError("--attention fused: not with --model-parallel or --pipeline-stages (XLA cannot split "
                             "the kernel's call over the heads' devices)")
        if self.pad_vocab is not None and self.pad_vocab > 1 and (self.model_parallel > 1 or self.pipeline_stages > 1):
            # pad_vocab_multiple keeps their vocabulary real: the flag was taken and ignored.
            raise UsageError(f"--pad-vocab {self.pad_vocab}: not with --model-parallel or --pipeline-stages (their "
                             "split checks and saved state are of the real vocabulary)")
        if self.allreduce_dtype != "fp32" and (self.model_parallel > 1 or self.pipeline_stages > 1):
            # Their step is XLA's (GSPMD): it places the reductions, in the gradients' dtype; the flag was ignored.
            raise UsageError(f"--allreduce-dtype {self.allreduce_dtype}: not with --model-parallel or "
                             "--pipeline-stages (XLA places their reductions, in the gradients' own dtype)")
        _check_schedule(self.optimizer, self.clip_norm, self.steps, self.warmup, self.lr)
        _check_seed(self.seed)
        _check_appendable(self)
        _check_outputs_apart(self, ("checkpoint_dir", "tensorboard_dir", "log_json"))
        if self.log_json is not None:  # appended to: the run's JSON lines were added to the config it had read
            refuse_overlap(self.log_json, [self.bert_config], what="--log-json")
        _check_output_places(self, ("checkpoint_dir", "tensorboard_dir"), ("log_json",))
        _check_log_json_apart(self, ("checkpoint_dir", "tensorboard_dir"))
        _check_outside_checkpoints(self, ("tensorboard_dir", "log_json"))

    def check_backend(self, backend: str) -> None:
        """What needs JAX, against the backend Keras loaded (known only once it has)."""
        if (self.model_parallel > 1 or self.placement != "intra_first") and backend != "jax":
            raise UsageError(f"--model-parallel and --placement need KERAS_BACKEND=jax (Keras's ModelParallel); "
                             f"this run's backend is {backend}")
        if self.pipeline_stages > 1 and backend != "jax":
            raise UsageError(f"--pipeline-stages needs KERAS_BACKEND=jax; this run's backend is {backend}")
        if self.attention == "fused" and backend != "jax":
            raise UsageError(f"--attention fused needs KERAS_BACKEND=jax (a Pallas kernel); this run's backend is "
                             f"{backend}")
        if self.scan_layers and backend != "jax":
            raise UsageError(f"--scan-layers needs KERAS_BACKEND=jax (jax.lax.scan); this run's backend is {backend}")

    @property
    def pad_vocab_multiple(self):
        """--pad-vocab, by default 8 for Google's sizes and 1 (none) for a --bert-config; 1 under
        --model-parallel (its split checks and layout estimates are of the real vocabulary) and
        --pipeline-stages (its stacked state is saved as it is, without the padding rows cut off)."""
        if self.model_parallel > 1 or self.pipeline_stages > 1:
            return 1
        if self.pad_vocab is None:
            return 1 if self.bert_config else 8
        return self.pad_vocab


def _check_outputs_apart(config, names, inputs=("data", "init_checkpoint")):
    """No output of the run is one of its inputs (--data, the --init-checkpoint it starts from), inside one or
    holding one: the run would write over what it reads (a --checkpoint-dir holding the --init-checkpoint
    replaced it with the run's own checkpoints, and finetune's rotation then deleted its own)."""
    from trainer.checkpoint.base import files_read

    # An --init-checkpoint prefix or .pt with its config and vocab beside it: a --log-json there was appended to.
    sources = [path for name in inputs for path in (files_read(getattr(config, name)) if name == "init_checkpoint"
                                                    else [getattr(config, name)])]
    for name in names:
        if getattr(config, name) is not None:
            refuse_overlap(getattr(config, name), sources, what=f"--{name.replace('_', '-')}")


def _check_output_places(config, directories, files):
    """Every local output of the run where it can be made, checked when the config is built: fine-tuning writes
    --output-dir and --checkpoint-dir only after its last step (issue 57: an --output-dir naming a file failed
    after every step had been trained). A URL's bucket must be there (its place under it is the store's to
    refuse, when the run reaches it)."""
    for name in (*directories, *files):
        path = getattr(config, name)
        storage.refuse_read_only(f"--{name.replace('_', '-')}", path)
        if path is not None and not storage.checks_locally(path):
            storage.check_reachable(path)  # a missing bucket: fine-tuning's --output-dir was found after scoring
        elif path is not None:
            check_output_place(f"--{name.replace('_', '-')}", storage.local_path(path), name in directories,
                               makes_parents=True if log_in_checkpoint_dir(config, path) else None)


def refuse_log_json_on_inputs(config, paths):
    """--log-json is appended to: a file the run reads that only the records' manifest names (their vocab, SQuAD's
    dev JSON), not known when the config is built, is refused once the records are. `--log-json vocab.txt` had
    the run's JSON lines appended to the records' vocab (exit 0), and fine-tuning's to the dev JSON, which its
    scoring then could not read, once every step had been trained."""
    if config.log_json is not None:
        refuse_overlap(config.log_json, [path for path in paths if isinstance(path, str) and path], what="--log-json")


def log_in_checkpoint_dir(config, path):
    """Whether the file `path` (--log-json) lies directly in the run's local --checkpoint-dir, which the run makes
    (Log makes it first): "no directory CK" refused `--log-json CK/log.jsonl` of a new CK."""
    directory = config.checkpoint_dir
    return bool(directory) and storage.checks_locally(directory) and os.path.dirname(
        os.path.abspath(storage.local_path(path))) == os.path.abspath(storage.local_path(directory))


def _check_log_json_apart(config, directories):
    """--log-json is a file, opened before the run makes its directories: a directory output at its path or
    under it (the default TensorBoard directory CHECKPOINT_DIR/tensorboard too) stopped the run once the devices
    had started, `same: File exists` (exit 1), leaving the log file empty."""
    if config.log_json is None:
        return
    made = {f"--{name.replace('_', '-')}": getattr(config, name) for name in directories}
    if config.tensorboard_dir is None and config.checkpoint_dir and storage.appends(config.checkpoint_dir):
        made["--checkpoint-dir's TensorBoard directory"] = os.path.join(config.checkpoint_dir, "tensorboard")
    log = storage.comparable(config.log_json)
    for flag, path in made.items():
        if path is None or not storage.checks_locally(path):
            continue
        if storage.comparable(path) == log or storage.comparable(path).startswith(log + os.sep):
            raise UsageError(f"--log-json {config.log_json}: {flag} {path} would be a directory at or under that "
                             "file; name another --log-json")


def _check_outside_checkpoints(config, names):
    """No output lies in a checkpoint's folder of --checkpoint-dir (`ckpt-<step>/`, or `.partial/` where they are
    made): the run resumes from, replaces and deletes those. A --log-json in the --resume checkpoint had the
    run's lines appended to its state.json, and a --tensorboard-dir ckpt-<step> was replaced by that checkpoint,
    its events gone (both exit 0)."""
    from bertprep.atomic import PARTIAL
    from trainer.run_state import is_checkpoint_name

    if config.checkpoint_dir is None or not storage.checks_locally(config.checkpoint_dir):
        return
    root = storage.comparable(config.checkpoint_dir).rstrip(os.sep) + os.sep
    for name in names:
        path = getattr(config, name)
        if path is None or not storage.checks_locally(path) or not storage.comparable(path).startswith(root):
            continue
        folder = storage.comparable(path)[len(root):].split(os.sep)[0]
        if folder == PARTIAL or is_checkpoint_name(folder):
            inside = os.path.join(config.checkpoint_dir, folder)
            raise UsageError(f"--{name.replace('_', '-')} {path}: at or inside {inside}, a checkpoint's folder of "
                             "--checkpoint-dir, which the run resumes from, replaces and deletes: name a path "
                             "outside its ckpt-<step> folders")


def check_output_place(flag, path, directory, makes_parents=None):
    """A UsageError where the local `path` cannot be written: a file where a directory (`directory`) is to be,
    or the reverse; under a file; a file whose directory is missing where its writer does not make it
    (`makes_parents`, by default: a directory's does, --log-json's `open` does not); a place that is not
    writable; a symbolic link to nothing in the way, or a file output that is one, in the stages' words
    (refuse_dangling_link, refuse_dangling_file_link). Nothing is made: a run that fails before writing leaves
    nothing. bertprep's stages use options.refuse_file_above instead, which checks only the file in the way
    (found by the same nearest_existing): a stage makes every folder above its output, and takes store paths."""
    shown, path = path, os.path.abspath(path)
    if os.path.exists(path):
        if os.path.isdir(path) != directory:
            raise UsageError(f"{flag} {shown}: is a {'file' if directory else 'directory'}; name a "
                             f"{'directory' if directory else 'file'}")
        place = path
    else:
        if directory:  # a directory that is a link to nothing: making it fails as making one below it does
            refuse_dangling_link(flag, shown, path)
        else:  # a file that is one: --log-json's append wrote at its target, or failed after training
            refuse_dangling_file_link(flag, shown, path)
        place = nearest_existing(path, exists=os.path.lexists)
        refuse_dangling_link(flag, shown, place)  # was "… is a file", which a link to nothing is not
        if not os.path.isdir(place):
            raise UsageError(f"{flag} {shown}: {place} is a file: nothing can be made under it")
        if not (directory if makes_parents is None else makes_parents) and place != os.path.dirname(path):
            raise UsageError(f"{flag} {shown}: no directory {os.path.dirname(path)}")
    # abspath drops a trailing '/' or '.': `--out new/` passed, the model ran, and the write failed ('Not a
    # directory', or 'Device or resource busy' for new/.), leaving an empty new/
    tail = "/" if shown.endswith("/") else "/" + os.path.basename(shown)
    if not directory and tail in ("/", "/.", "/.."):
        raise UsageError(f"{flag} {shown}: names a directory (it ends in '{tail}'); name a file")
    if not os.access(place, os.W_OK):
        raise UsageError(f"{flag} {shown}: {place} is not writable")


@errors_name_fields
@dataclasses.dataclass(frozen=True)
class FinetuneConfig:
    """A fine-tuning run (`python -m trainer finetune`'s flags), checked when built. `output_dir`
    None: ./finetune-<task>."""

    task: str
    data: str
    format: str
    init_checkpoint: str | None = None
    model: str | None = None
    epochs: float = 2.0
    steps: int | None = None
    lr: float = 3e-5
    warmup: float = 0.1
    batch_size: int = 32
    optimizer: str = "adam"
    clip_norm: float | None = None
    precision: str = "fp32"
    seed: int = 12345
    output_dir: str | None = None
    checkpoint_dir: str | None = None
    no_eval: bool = False
    predict: bool = False
    eval_file: str | None = None
    null_score_diff_threshold: float = 0.0
    log_every: int = 10
    log_json: str | None = None
    tensorboard_dir: str | None = None
    quiet: bool = False

    def __post_init__(self):
        from trainer.tasks import task_named

        check_types(self)
        task_named(self.task)  # when built, as the other choices: it was refused by trainer.finetune, once Keras loaded
        _check_choices(self, {"format": FINETUNING_FORMATS, "optimizer": tuple(OPTIMIZERS),
                              "precision": PRECISIONS, "model": (None, *SIZES)})
        _check_paths_named(self, ("data", "init_checkpoint", "output_dir", "checkpoint_dir", "eval_file", "log_json",
                                  "tensorboard_dir"))
        _check_positive(self, ("steps", "batch_size", "log_every"))
        _check_schedule(self.optimizer, self.clip_norm, self.steps, self.warmup, self.lr)
        _check_seed(self.seed)
        if not self.epochs > 0:
            raise UsageError(f"--epochs must be positive, got {self.epochs}")
        # the CLI's parser refuses both; from Python the epochs were ignored (FinetuneConfig.epochs: the default)
        if self.steps is not None and self.epochs != FinetuneConfig.epochs:
            raise UsageError(f"--epochs {self.epochs}: not with --steps {self.steps}, which sets the run's length "
                             "instead: give one of them")
        if math.isinf(self.epochs):  # int() of its steps was an OverflowError traceback
            raise UsageError(f"--epochs must be a finite number, got {self.epochs}")
        if math.isnan(self.null_score_diff_threshold):  # no score difference exceeds it: never the null answer
            raise UsageError(f"--null-score-diff-threshold must be a number, got {self.null_score_diff_threshold}")
        _check_appendable(self)
        if self.output_dir is None:
            object.__setattr__(self, "output_dir", f"finetune-{self.task.lower()}")
        _check_outputs_apart(self, ("output_dir", "checkpoint_dir", "tensorboard_dir", "log_json"),
                             ("data", "init_checkpoint", "eval_file"))
        _check_output_places(self, ("output_dir", "checkpoint_dir", "tensorboard_dir"), ("log_json",))
        _check_log_json_apart(self, ("output_dir", "checkpoint_dir", "tensorboard_dir"))
        # --output-dir too: SQuAD's predictions, written there before the checkpoint, were deleted by its save
        _check_outside_checkpoints(self, ("output_dir", "tensorboard_dir", "log_json"))


class _ShownAsTable:
    """A summary that shows itself as the table the command prints (a REPL's repr, a notebook's HTML)
    instead of the dataclass's one long line of every field."""

    TITLE = ""

    def _rows(self):
        from bertprep.progress import readable_rows

        return readable_rows(self.to_dict())

    def __repr__(self):
        from bertprep.progress import text_table

        return text_table(self.TITLE, self._rows())

    def _repr_html_(self):
        from bertprep.progress import html_table

        return html_table(self.TITLE, self._rows())


def _listing_warnings(summary):
    """A summary's dict with its warnings as a list ("warnings", as `trainer checkpoint`'s JSON has them; the
    table leaves a list out, its lines were said on stderr), or without the key where there are none."""
    warnings = summary.pop("warnings")
    return {**summary, "warnings": list(warnings)} if warnings else summary


@dataclasses.dataclass(frozen=True, repr=False)  # shown as its table
class TrainSummary(_ShownAsTable):
    """What a pretraining run reports (`--json` prints `to_dict()`)."""

    TITLE = "trainer: done"

    steps: int
    skipped_steps: int
    global_batch: int
    replicas: int
    model_parallel: int
    pipeline_stages: int
    pipeline: dict | None
    mesh: dict | None
    param_bytes_per_device: int
    precision: str
    final_learning_rate: float | None
    final_loss_scale: float | None
    mean_sequences_per_second: float | None
    mean_tokens_per_second: float | None
    timed_steps: int
    sequences: int  # real sequences trained on (packed rows hold several)
    tokens: int
    # Those of the last log line; None (and left out of to_dict) when the run logged none.
    last_loss: float | None = None
    last_mlm_accuracy: float | None = None
    last_nsp_accuracy: float | None = None
    # From the start (the process's, for its first run) to the first step's results on the host, and where
    # that went (trainer/startup.py: imports_s, devices_s, model_built_s, first_step_s, and under JAX the seconds
    # traced, lowered, compiled or loaded, and the programs compiled and read from the cache). None: no step ran.
    seconds_to_first_step: float | None = None
    startup: dict | None = None
    # One line each (the --init-checkpoint's NaN or inf), said on stderr as the run started; to_dict lists them
    # under "warnings", a key a run without any does not get.
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        last = ("last_loss", "last_mlm_accuracy", "last_nsp_accuracy")
        return _listing_warnings({k: v for k, v in dataclasses.asdict(self).items()
                                  if not (k in last and v is None)})


@dataclasses.dataclass(frozen=True, repr=False)  # shown as its table
class FinetuneSummary(_ShownAsTable):
    """What a fine-tuning run reports: its training figures, `evaluation`, the scores (`to_dict()`
    names them eval_<name>, as `--json` prints them), and `prediction`, what --predict wrote (predict_<name>)."""

    TITLE = "trainer finetune: done"

    task: str
    format: str
    init_checkpoint: str
    replicas: int
    global_batch: int
    precision: str
    optimizer: str
    steps: int
    skipped_steps: int
    first_logged_loss: float | None
    last_logged_loss: float | None
    mean_sequences_per_second: float | None
    evaluation: dict = dataclasses.field(default_factory=dict)
    prediction: dict = dataclasses.field(default_factory=dict)  # --predict: examples, file
    warnings: tuple[str, ...] = ()  # as TrainSummary's

    def to_dict(self) -> dict:
        figures = _listing_warnings({k: v for k, v in dataclasses.asdict(self).items()
                                     if k not in ("evaluation", "prediction")})
        return {**figures, **{f"eval_{k}": v for k, v in self.evaluation.items()},
                **{f"predict_{k}": v for k, v in self.prediction.items()}}
