"""The pretraining run, `trainer.train(TrainConfig)`: devices, data, model, steps, logging, evaluation and
checkpoints."""

import contextlib
import dataclasses
import functools
import json
import math
import os
import signal
import sys

import numpy as np

from bertprep import storage
from bertprep.atomic import hold
from bertprep.errors import BertprepError, DataError, Stopped, UsageError
from bertprep.folder import Folder
from bertprep.options import check_argument, run_errors_name_fields
from bertprep.progress import Progress
from trainer import compilation_cache, run_state, traced_steps, xla_gpu
from trainer.caller_random_state import restores_caller_random_state
from trainer.config import (
    BertConfig,
    StepOptions,
    TrainConfig,
    TrainSummary,
    log_in_checkpoint_dir,
    refuse_log_json_on_inputs,
    tf_config_hosts,
    user_cache,
)
from trainer.data import Records, RecordStream, full_batches, prefetch
from trainer.library_logs import library_lines_left_out, load_keras
from trainer.loop import Hooks, Schedule, evaluate, train_loop
from trainer.precision import device_platform, has_bfloat16_tensor_cores, keras_policy, loss_scaling, resolve
from trainer.startup import StartupClock


class Devices:
    """Where the steps run: the strategy/distribution, (model) replica counts, this process's place,
    and its share of the data: `worker_index` of `num_workers` data feeds, `local_replicas` of them."""

    def __init__(self, backend, model_parallel=1, placement="intra_first", pipeline_stages=1):
        self.backend = backend
        self.mesh = None
        if backend == "tensorflow":
            import tensorflow as tf

            if os.environ.get("TF_CONFIG"):
                tf_config_hosts(os.environ["TF_CONFIG"])
                self.strategy = tf.distribute.MultiWorkerMirroredStrategy()
                resolver = self.strategy.cluster_resolver
                spec = resolver.cluster_spec().as_dict()
                tasks = [(t, i) for t in ("chief", "worker") for i in range(len(spec.get(t, [])))]
                self.worker_index = tasks.index((resolver.task_type, resolver.task_id))
                self.num_workers = len(tasks)
            else:
                names = [d.name for d in tf.config.list_logical_devices("GPU")]
                names = names or [d.name for d in tf.config.list_logical_devices("CPU")]
                self.strategy = tf.distribute.MirroredStrategy(names)
                self.worker_index, self.num_workers = 0, 1
            self.process_index = self.worker_index
            self.replicas = self.strategy.num_replicas_in_sync
            self.local_replicas = len(self.strategy.extended.worker_devices)
            self.description = f"{self.replicas} replica(s) on {self.num_workers} worker(s): " + ", ".join(
                self.strategy.extended.worker_devices)
        elif backend == "jax":
            import jax
            import keras

            from trainer import parallel

            # A (batch, model) mesh, model_parallel 1 being data parallelism; with pipeline stages a
            # (stage, batch, model) mesh (trainer/pipeline_parallel.py).
            if pipeline_stages > 1:
                from trainer import pipeline_parallel

                self.distribution = pipeline_parallel.make_distribution(pipeline_stages, model_parallel, placement)
                mesh = self.distribution.device_mesh
                processes = pipeline_parallel.replica_processes(mesh)
                self.mesh = pipeline_parallel.mesh_summary(mesh, placement)
                self.replicas = mesh.shape[1]
                shape = f"{pipeline_stages} stage x {self.replicas} batch x {model_parallel} model"
            else:
                self.distribution = parallel.make_distribution(model_parallel, placement)
                mesh = self.distribution.device_mesh
                processes, self.mesh = parallel.process_grid(mesh), parallel.mesh_summary(mesh, placement)
                self.replicas = mesh.shape[0]
                shape = f"{self.replicas} batch x {model_parallel} model"
            keras.distribution.set_distribution(self.distribution)
            self.process_index = jax.process_index()
            self.worker_index, self.num_workers, self.local_replicas = parallel.data_feed(processes, self.process_index)
            self.description = (f"{mesh.devices.size} device(s) on {jax.process_count()} process(es), mesh "
                                f"{shape} ({placement}): " + " ".join(np.asarray(mesh.devices).ravel()))
        else:
            raise UsageError(f"KERAS_BACKEND={backend!r} is not supported (use tensorflow or jax)")

    @property
    def is_chief(self):
        return self.process_index == 0

    def scope(self):
        return self.strategy.scope() if self.backend == "tensorflow" else contextlib.nullcontext()


def initialize_jax_processes():
    """Several JAX processes (one per host): Keras's variables name the coordinator (the first
    address), the process count and this process's index, as TF_CONFIG does for TensorFlow."""
    import keras

    env = os.environ
    try:
        count = int(env["KERAS_DISTRIBUTION_NUM_PROCESSES"])
        index = int(env["KERAS_DISTRIBUTION_PROCESS_ID"])
    except (KeyError, ValueError):
        raise UsageError("KERAS_DISTRIBUTION_JOB_ADDRESSES is set: KERAS_DISTRIBUTION_NUM_PROCESSES and "
                         "KERAS_DISTRIBUTION_PROCESS_ID must be set to integers too") from None
    if not 0 <= index < count:
        raise UsageError(f"KERAS_DISTRIBUTION_PROCESS_ID={index} is outside 0..{count - 1}")
    keras.distribution.initialize(env["KERAS_DISTRIBUTION_JOB_ADDRESSES"], count, index)


def read_initial_checkpoint(config, records):
    """--init-checkpoint (a trainer.checkpoint.Checkpoint); a --model or --bert-config that disagrees
    with its config is an error naming both, and so are `records` (trainer.data.Records) of another vocab or
    casing than the checkpoint's."""
    from trainer.checkpoint import check_size_flag, read
    from trainer.checkpoint.tokenizer import check_records

    with library_lines_left_out():  # reading Google's checkpoint imports TensorFlow
        checkpoint = read(config.init_checkpoint)
        check_size_flag(checkpoint, config.model, config.bert_config)
    check_records(checkpoint, records.vocabs)  # before training
    return checkpoint


def initial_checkpoint_warnings(checkpoint, config=None, resumed=None):
    """The warnings of the checkpoint a run starts from (None: none), each said at once in one stderr line,
    `trainer: warning: …`, --quiet or not, as `trainer checkpoint` says it; the run's summary lists them under
    "warnings". Checkpoint.non_finite_warning: NaN or inf in its weights (a diverged run's), which the run took
    without a word. A warning, not a refusal: the loop ends a run whose loss stays non-finite (trainer/loop.py).
    With `config` (a TrainConfig) and `resumed` (resumed_instead_of_init's path), an --init-checkpoint that
    --resume's checkpoint replaces (resumed_over_init)."""
    warnings = tuple(line for line in ([checkpoint.non_finite_warning()] if checkpoint else []) if line)
    warnings += tuple(line for line in [resumed_over_init(config, resumed)] if line)
    for line in warnings:
        print(f"trainer: warning: {line}", file=sys.stderr, flush=True)
    return warnings


def resumed_instead_of_init(config):
    """(path, its model's BertConfig) of the checkpoint --resume continues; None where there is none (the run
    then starts from --init-checkpoint, or anew). The model is that checkpoint's (its state.json's settings)
    where no --model or --bert-config names one (model_config): a run started from --init-checkpoint, or with
    --model tiny, resumed without repeating it took the default BERT-base, built it (about 45 s on a CPU) and was
    then refused ("checkpoint was written with model.hidden_size=128, this run has 768"). An --init-checkpoint
    is then neither read nor loaded: it was read (a hub id's downloaded), checked against --model and the
    records, its weights loaded ("initialized 46 variables from …"), and all replaced by the resumed
    checkpoint's, which it gave the run that wrote it."""
    if not config.resume:
        return None
    found = run_state.latest_state(config.checkpoint_dir)
    if found is None:
        return None
    path, state = found
    model, where = state["settings"].get("model"), Folder(path).display("state.json")
    if not isinstance(model, dict):
        raise DataError(f'{where}: damaged checkpoint state (no object "model" in its settings); remove the '
                        "checkpoint to resume from the one before")
    return path, BertConfig.checked(where, model, DataError)


def initial_or_resumed(config, records):
    """(--init-checkpoint's Checkpoint, None, None); or (None, path, BertConfig) of the checkpoint --resume
    continues (resumed_instead_of_init), --init-checkpoint or not; or (None, None, None) without either."""
    resumed = resumed_instead_of_init(config)
    if resumed is not None:
        return (None, *resumed)
    return (read_initial_checkpoint(config, records) if config.init_checkpoint else None), None, None


def resumed_over_init(config, resumed):
    """The warning where --resume continues the checkpoint `resumed` (a path) of --checkpoint-dir and
    --init-checkpoint is given too: the resumed weights and model replace the initial ones, as Google's
    run_pretraining ignores init_checkpoint where its --output_dir holds a checkpoint. Kept so, but it was unsaid:
    the user who meant to start from X trained on from the earlier run. None where there is nothing to say."""
    if config is None or resumed is None or not config.init_checkpoint:
        return None
    return (f"--init-checkpoint {storage.display(config.init_checkpoint)}: not read, its weights are not used: "
            f"--resume continues {storage.display(resumed)}, whose weights and model replace them (as Google's "
            "run_pretraining ignores init_checkpoint where the model dir holds a checkpoint); leave --resume out, "
            "with a new --checkpoint-dir, to start from it")


def model_config(config, records, initial=None, resumed=None):
    """The model: the config of `initial` (--init-checkpoint's), of `resumed` (the BertConfig of the checkpoint
    --resume continues) where no --model or --bert-config is given, --bert-config
    as given, or a Google size whose vocab is the one the records were made with; --dropout replaces both dropout
    rates. Records that do not fit it (vocab, sequence length, predictions) are a DataError."""
    if resumed is not None and not (config.model or config.bert_config):
        bert = resumed  # the records are checked against it with its checkpoint (check_compatible)
    elif initial is not None or config.bert_config:
        bert = initial.config if initial is not None else BertConfig.from_json_file(config.bert_config)
        owner = config.init_checkpoint if initial is not None else config.bert_config
        if records.vocab_size and records.vocab_size > bert.vocab_size:
            raise DataError(f"{owner}: vocab_size {bert.vocab_size} is smaller than the records' "
                            f"vocab ({records.vocab_size} entries)")
    elif records.vocab_size:
        bert = BertConfig.sized(config.model or config.default_size(), vocab_size=records.vocab_size)
    else:
        bert = BertConfig.sized(config.model or config.default_size())
    if config.dropout is not None:
        bert = dataclasses.replace(bert, hidden_dropout_prob=config.dropout,
                                   attention_probs_dropout_prob=config.dropout)
    return bert


def check_records_fit(bert, records, data_dir):
    if records.seq > bert.max_position_embeddings:
        raise DataError(f"{storage.display(data_dir)}: records have sequence length {records.seq} but the model has "
                        f"{bert.max_position_embeddings} positions (max_position_embeddings)")
    if records.pred > records.seq:
        raise DataError(f"{storage.display(data_dir)}: {records.pred} predictions per sequence exceed sequence "
                        f"length {records.seq}")


def make_steps(devices, model, optimizer, accumulation=1, dynamic_scale=False, objective=None,
               allreduce_dtype="fp32", pipeline_stages=1):
    """The Steps of `devices` (pretraining.Devices: TensorFlow's strategy or JAX's distribution) for a
    built model and optimizer; `pipeline_stages` > 1: the GPipe pipeline (JAX, pretraining). Here, above
    steps.py and pipeline_parallel.py, so that pipeline_parallel.PipelineSteps (a JaxSteps) and the other two are
    chosen without steps.py importing pipeline_parallel.py; `objective` None: pretraining's."""
    from trainer.losses import PRETRAINING_OBJECTIVE
    from trainer.steps import JaxSteps, TensorFlowSteps

    objective = PRETRAINING_OBJECTIVE if objective is None else objective
    if devices.backend == "tensorflow":
        return TensorFlowSteps(devices.strategy, model, optimizer, accumulation, dynamic_scale, objective,
                               allreduce_dtype=allreduce_dtype)
    if pipeline_stages > 1:
        from trainer.pipeline_parallel import PipelineSteps

        return PipelineSteps(devices.distribution, model, optimizer, accumulation, dynamic_scale, pipeline_stages)
    return JaxSteps(devices.distribution, model, optimizer, accumulation, dynamic_scale, objective,
                    allreduce_dtype=allreduce_dtype)


def build_steps(config, devices, bert, records, warmup, initial=None, log=None, options=StepOptions()):
    """The model (its weights from `initial`, a trainer.checkpoint.Checkpoint, where given; its step's
    levers `options`), its optimizer and the compiled step functions of this backend."""
    from trainer.checkpoint.run import assigned_paths
    from trainer.model import build_model
    from trainer.optimizers import build_slots, make_optimizer

    if options.attention == "fused":
        check_fused_attention(records.seq, bert)

    def assigned(model):  # what load_initial gives a value below is not drawn
        return assigned_paths(model, initial.our_paths(), fresh_paths(model, initial))

    with devices.scope():
        model = build_model(bert, records.seq, records.pred, pad_vocab=config.pad_vocab_multiple, options=options,
                            assigned=None if initial is None else assigned)
        optimizer = make_optimizer(config.optimizer, config.lr, warmup, config.steps, config.clip_norm)
        build_slots(optimizer, model.trainable_variables)
        if initial is not None:
            load_initial(model, initial, log)
    steps = make_steps(devices, model, optimizer, config.grad_accum, loss_scaling(config.precision),
                       allreduce_dtype=config.allreduce_dtype, pipeline_stages=config.pipeline_stages)
    return model, optimizer, steps


def load_initial(model, initial, log=None):
    """The checkpoint's weights into `model`; what it lacks starts from random: the heads of a
    BertModel, its pooler too if saved without."""
    from trainer.checkpoint.run import assign

    loaded = assign(model, initial.ours(), initial.path, skip=fresh_paths(model, initial))
    if log is not None:
        lacking = ("" if initial.has_heads else
                   " (no pretraining heads in it: they start from random)" if initial.has_pooler else
                   " (no pretraining heads or pooler in it: they start from random)")
        log.note(f"initialized {loaded} variables from {initial.kind} checkpoint {initial.path}{lacking}"
                 + "".join(f"; {note}" for note in initial.notes))


def fresh_paths(model, initial):
    """The paths of the model's variables that start from random, not from the checkpoint `initial`: the
    heads of a BertModel, its pooler too if saved without."""
    fresh = (() if initial.has_heads else ("bert/masked_lm/", "bert/next_sentence/")) + (
        () if initial.has_pooler else ("bert/pooler/",))
    return {v.path for v in model.trainable_variables if fresh and v.path.startswith(fresh)}


def set_precision(config, keras):
    """The run's Keras dtype policy set: (`config` with `amp` made concrete for this device, the note that
    the run's first line gives for it, or None). trainer/precision.py says what amp becomes where."""
    precision, note = resolve(config.precision, keras.backend.backend())
    keras.config.set_dtype_policy(keras_policy(precision))
    return dataclasses.replace(config, precision=precision), note


def step_options(config, keras, seq=None, bert=None):
    """The model's levers (StepOptions) of `config`, "auto" made concrete for this backend's device (a
    FinetuneConfig, which has no such flags: "auto", and the einsum attention); `seq` and `bert`: the
    records' length and the model, which say whether the fused attention takes the run: on an NVIDIA GPU
    of compute capability 8.0 or later (Triton's bfloat16 tiles; measured on an H200), under JAX."""
    backend = keras.backend.backend()
    platform, capability = device_platform(backend)
    fused_fits = (backend == "jax" and has_bfloat16_tensor_cores(capability)
                  and _fused_attention_fits(config, seq, bert))
    return StepOptions.resolved(getattr(config, "embedding_gradient", "auto"), getattr(config, "dropout_rng", "auto"),
                                backend, platform, getattr(config, "scan_layers", False),
                                getattr(config, "attention", "einsum"), fused_fits, getattr(config, "gelu", "auto"),
                                getattr(config, "qkv_projection", "auto"), getattr(config, "last_layer", "auto"))


def _fused_attention_fits(config, seq, bert):
    """Whether `--attention fused` would take this run (its shapes; one device's model and layers)."""
    if seq is None or bert is None or config.model_parallel > 1 or config.pipeline_stages > 1:
        return False
    kernel = _fused_attention_module()
    return kernel is not None and kernel.supports(seq, bert.hidden_size // bert.num_attention_heads)


def _fused_attention_module():
    """trainer.fused_attention, or None under a JAX without Pallas's Triton backend (deprecated since JAX
    0.11, in favour of Mosaic GPU, which the kernel is not written for)."""
    try:
        from trainer import fused_attention
    except ImportError:
        return None
    return fused_attention


def check_fused_attention(seq, bert):
    """A one-line UsageError where `--attention fused` cannot take the run: its shapes, or this JAX."""
    kernel = _fused_attention_module()
    if kernel is None:
        raise UsageError("--attention fused: this JAX has no Pallas Triton backend (jax.experimental.pallas."
                         "triton), which the kernel is written for; use --attention einsum")
    kernel.check_shapes(seq, bert.hidden_size, bert.num_attention_heads)


def warmup_steps(value, total_steps):
    return int(round(value * total_steps)) if value < 1 else int(value)


# Steps after the first that are left out of the ETA's rate: they may still compile.
WARMUP_STEPS = 2


class Log:
    """Log lines and progress (bertprep.progress: a bar with an ETA on a terminal, a line every few seconds
    elsewhere) on stderr, JSON lines, TensorBoard scalars (chief only)."""

    def __init__(self, config, total_steps, enabled):
        """`config`: a TrainConfig or FinetuneConfig (quiet, log_json, tensorboard_dir, checkpoint_dir)."""
        self.enabled = enabled
        self.quiet = config.quiet
        self.total = total_steps
        self.progress = None  # made at the first step: fine-tuning knows its total only then
        self.step = None  # the steps applied, as of the last results (a stopped run's line names it)
        self.warm_from = None
        if config.log_json and enabled and log_in_checkpoint_dir(config, config.log_json):
            os.makedirs(os.path.dirname(os.path.abspath(config.log_json)), exist_ok=True)  # before the first save
        self.json = open(config.log_json, "a", encoding="utf-8") if (config.log_json and enabled) else None
        self.tensorboard = None
        tb_dir = tensorboard_dir(config)
        if tb_dir and enabled:
            from trainer.tensorboard import EventWriter

            self.tensorboard = EventWriter(tb_dir)
            if not config.tensorboard_dir and not storage.appends(config.checkpoint_dir):
                self.note(f"TensorBoard scalars in {tb_dir}: event files are appended to as the run goes, which "
                          f"{storage.display(config.checkpoint_dir)}'s store cannot do (--tensorboard-dir to choose)")

    def note(self, message):
        self._write(f"trainer: {message}")

    def _write(self, line):
        if not self.enabled or self.quiet:
            return
        if self.progress:
            self.progress.write(line)
        else:
            print(line, file=sys.stderr, flush=True)

    def bar(self, step, text=""):
        self.step = step
        if not self.enabled or self.quiet:
            return
        if self.progress is None:
            # From the first step done: its compilation and a resumed run's earlier steps are not in the
            # rate that the ETA comes from.
            self.progress = Progress("trainer", total=self.total, unit="steps", initial=step)
            self.warm_from = step + WARMUP_STEPS
        else:
            self.progress.advance(step - self.progress.done, detail=text)
            if self.warm_from is not None and step >= self.warm_from:
                # The steps after the first still compile (the logged metrics' step, a retrace): a 12 s
                # run said "ETA 44s" at step 5. The ETA comes from the steps measured after them.
                self.progress.rebase()
                self.warm_from = None

    def record(self, event, values, step):
        """`values` to the JSON lines and TensorBoard, and but for the summary (printed once, by the CLI)
        as a line on stderr."""
        if not self.enabled:
            return
        if self.json:
            self.json.write(json.dumps({"event": event, "step": step, **values}, sort_keys=True) + "\n")
            self.json.flush()
        if self.tensorboard:
            self.tensorboard.scalars(step, {f"{event}/{key}": float(value) for key, value in values.items()
                                            if isinstance(value, (int, float)) and math.isfinite(value)})
        if event != "summary":
            self._write(f"{event} step {step}: " + " ".join(_fmt(k, v) for k, v in values.items() if v is not None))

    def close(self):
        if self.json:
            self.json.close()
        if self.tensorboard:
            self.tensorboard.close()
        if self.progress:
            self.progress.close()


def tensorboard_dir(config):
    """--tensorboard-dir, else CHECKPOINT_DIR/tensorboard; for a URL checkpoint directory a local one named
    after it in the user's cache (an object cannot be appended to); None without either."""
    if config.tensorboard_dir or not config.checkpoint_dir:
        return config.tensorboard_dir
    if storage.appends(config.checkpoint_dir):
        return os.path.join(config.checkpoint_dir, "tensorboard")
    scheme, key = storage.display(storage.absolute_normpath(config.checkpoint_dir)).split("://", 1)
    return user_cache("tensorboard", scheme, *key.split("/"))


def _fmt(key, value):
    if key == "learning_rate":
        return f"lr {value:.3e}"
    if key == "sequences_per_second":
        return f"{value:,.1f} seq/s"
    if key == "tokens_per_second":
        return f"{value:,.0f} tok/s"
    if isinstance(value, float):
        return f"{key} {value:.4f}"
    return f"{key} {value}"


def refuse_an_earlier_runs_checkpoints(config):
    """A --checkpoint-dir that holds an earlier run's checkpoints is continued with --resume, or refused before
    anything is read (run_state.refuse_earlier_run); a fine-tuning run's is not continued (refuse_fine_tuned)."""
    if config.checkpoint_dir and not config.resume:
        run_state.refuse_earlier_run(config.checkpoint_dir)
    elif config.resume:  # a fine-tuned model's checkpoint there: named before the model is built
        run_state.refuse_fine_tuned(config.checkpoint_dir)


@run_errors_name_fields(TrainConfig)
@restores_caller_random_state
def train(config: TrainConfig, step_times: list[float] | None = None,
          step_sequences: list[int] | None = None) -> TrainSummary:
    """Pretrain as `config` (a trainer.TrainConfig) says; return the trainer.TrainSummary. `step_times`, a
    list, receives the clock (time.perf_counter, monotonic) when each step was done (loop.Meter.lap):
    trainer.benchmark's timing; `step_sequences`, a list, the real sequences of each of those steps (a
    packed row holds several)."""
    clock = StartupClock()
    check_argument("trainer.train's config", config, TrainConfig)  # then data and model, before any device
    refuse_an_earlier_runs_checkpoints(config)
    data_dir = config.data
    if data_dir is None:
        data_dir = sample_records(config.quiet)
        if not config.quiet:
            print(f"trainer: no --data: training on the embedded sample records in {data_dir}", file=sys.stderr)
    records = Records(data_dir, config.format)
    refuse_log_json_on_inputs(config, [entry.get("path") for _, entry, _ in records.vocabs if isinstance(entry, dict)])
    initial, resumed, resumed_model = initial_or_resumed(config, records)
    bert = model_config(config, records, initial, resumed_model)
    check_records_fit(bert, records, data_dir)
    warnings = initial_checkpoint_warnings(initial, config, resumed)  # once the run is not refused, before it starts
    xla_gpu.apply(config.gemm, autotune=config.gemm_autotune)  # XLA flags: before JAX's GPU backend starts
    keras = load_keras()
    clock.mark("imports_s")
    if keras.backend.backend() == "jax":
        clock.listen_to_jax()
    cache_folder = compilation_cache.enable(config.compilation_cache)  # before the first compilation

    if keras.backend.backend() == "jax" and os.environ.get("KERAS_DISTRIBUTION_JOB_ADDRESSES"):
        initialize_jax_processes()  # before anything asks JAX for its devices (tracing the model does)
    config.check_backend(keras.backend.backend())
    if config.pipeline_stages > 1:
        from trainer.pipeline_parallel import check_layers

        check_layers(bert, config.pipeline_stages)
    if config.model_parallel > 1:
        from trainer import parallel

        # Before the session is cleared: tracing the model moves Keras's name counters and seeds.
        trainable, non_trainable = parallel.abstract_variables(bert, records.seq, records.pred)
        parallel.check_splits(trainable, non_trainable, config.model_parallel)
    keras.backend.clear_session()  # a fresh name space: checkpoints name variables by path
    config, precision_note = set_precision(config, keras)
    options = step_options(config, keras, records.seq, bert)
    keras.utils.set_random_seed(config.seed)
    devices = Devices(keras.backend.backend(), config.model_parallel, config.placement, config.pipeline_stages)
    clock.mark("devices_s")  # the backend started (under JAX on a GPU: CUDA and NVIDIA's libraries)
    # The chief writes the checkpoints: it holds their directory (a second run into it is refused,
    # checkpoints half-written by a killed run are cleared) before anything is logged there.
    holding = (hold(config.checkpoint_dir, "trainer") if config.checkpoint_dir and devices.is_chief
               else contextlib.nullcontext())
    with holding:
        log = Log(config, config.steps, enabled=devices.is_chief)
        try:
            return _train(config, devices, log, clock, data_dir, records, bert, step_times, step_sequences, initial,
                          precision_note, options, cache_folder, warnings)
        except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM (bertprep.errors.Stopped): say where, and what is kept
            raise stopped(exc, config, log.step) from None
        finally:
            clock.close()  # a run that failed before its first results stops counting JAX's events
            log.close()


def stopped(exc, config, step):
    """The Stopped that ends a run a signal stopped (`exc`: a Stopped, or Ctrl-C's KeyboardInterrupt), its line
    naming the step reached (`step`; None before the first step's results) and the newest complete checkpoint, which
    --resume continues: a scheduler's SIGTERM ended the run at once, exit 143, without a word of either. A
    checkpoint being written when the signal came was dropped whole (bertprep.atomic.atomic_dir): not listed."""
    signum = getattr(exc, "signum", signal.SIGINT)
    how = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
    where = "before its first step" if step is None else f"at step {step} of {config.steps}"
    return Stopped(signum, f"{how} {where}; {kept_checkpoint(config)}")


def kept_checkpoint(config):
    """What a stopped run leaves to continue from, for its last line."""
    if not config.checkpoint_dir:
        return "no --checkpoint-dir: nothing was kept"
    directory = storage.display(config.checkpoint_dir)
    try:
        found = run_state.list_checkpoints(config.checkpoint_dir)
    except (OSError, BertprepError) as exc:  # a store out of reach: the stop is still said, exit 130 or 143
        return f"{directory}: its checkpoints could not be listed ({exc})"
    if not found:
        return f"{directory} holds no complete checkpoint yet: a rerun starts from step 0"
    rerun = "the same command" if config.resume else "the same command with --resume"
    return f"newest complete checkpoint {storage.display(found[-1][1])}: {rerun} continues from it"


def _train(config, devices, log, clock, data_dir, records, bert, step_times=None, step_sequences=None, initial=None,
           precision_note=None, options=StepOptions(), cache_folder=None, warnings=()):
    """Streams, model and steps, a resumed state, the loop, the summary."""
    if cache_folder is not None:
        traced_steps.code()  # the sources digested as the run starts, before a later edit could be read
    stream, eval_stream, eval_steps = record_streams(config, devices, records, bert, data_dir, log)
    model, _, steps = build_steps(config, devices, bert, records, warmup_steps(config.warmup, config.steps),
                                  initial, log, options)
    if cache_folder is not None and hasattr(steps, "keep_traced_program"):  # JAX's steps, the cache on
        steps.keep_traced_program(os.path.join(cache_folder, traced_steps.FOLDER),
                                  traced_step_description(config, bert, options))
    clock.mark("model_built_s")
    settings = run_settings(config, bert, devices)
    carried = carried_files(config, records, initial, log)
    draws = resume(config, steps, settings, log, records) if config.resume else 0
    log.note(describe(config, devices, bert, records, stream, model, precision_note, options))
    schedule = Schedule(config.steps, config.log_every, config.steps_per_call,
                        eval_every=config.eval_every if eval_stream else 0,
                        checkpoint_every=config.checkpoint_every if config.checkpoint_dir else 0)
    hooks = Hooks(evaluate=lambda step: evaluate(steps, eval_stream, eval_steps),
                  checkpoint=functools.partial(checkpoint, config, devices, steps, settings, log, carried),
                  step_times=step_times, step_sequences=step_sequences, first_results=clock.first_results)
    batches = prefetch(stream.batches(draws * stream.batch_size))
    counts, meter = train_loop(steps, batches, schedule, log, config.grad_accum, hooks, draws)
    summary = dataclasses.replace(train_summary(config, devices, steps, counts, meter, clock), warnings=warnings)
    if devices.is_chief:
        log.record("summary", summary.to_dict(), counts.step)
    return summary


# TrainConfig's fields that do not reach the train step's program: where the data and outputs are, logging,
# evaluation (a program of its own), the learning-rate schedule's numbers (the step's arguments), and the seed
# (it reaches the step as the dropout layers' seed states, variables; the data's order is the host's).
OUTSIDE_THE_STEP = ("data", "bert_config", "init_checkpoint", "seed", "lr", "warmup", "steps", "checkpoint_dir",
                    "checkpoint_every", "keep_checkpoints", "resume", "eval_every", "eval_steps", "log_every",
                    "log_json", "tensorboard_dir", "quiet", "compilation_cache")


def traced_step_description(config, bert, options):
    """What shapes the train step's tracing besides its arguments' types: the traced-step cache's key
    (trainer/traced_steps.py). Every other field of `config` (a new one too) is in it."""
    settings = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name not in OUTSIDE_THE_STEP}
    return repr(("pretraining", sorted(settings.items()), bert, options))


def global_batch(config, devices):
    return config.batch_size * devices.replicas * config.grad_accum


def record_streams(config, devices, records, bert, data_dir, log):
    """(training stream, test stream or None, batches an evaluation reads) of this worker's share of the records,
    their ids checked against the model `bert` (data.check_model_values)."""
    per_worker = config.batch_size * devices.local_replicas
    stream = RecordStream(records, "training", per_worker * config.grad_accum, config.seed,
                          worker_index=devices.worker_index, num_workers=devices.num_workers,
                          bin_size=config.bin_size, model=bert)
    if not config.eval_every:
        return stream, None, 0
    # Fewer test files than data workers: every worker evaluates the whole test split (one share), so each record
    # counts once in each worker's sums and the workers' mean is the split's. Cut into as many shares as files, a
    # worker past them had none, a DataError ("the test files of worker 1 hold no records") that ended a two-host
    # run on records of one test file; and reading another's share would have counted that share twice.
    workers = devices.num_workers if len(records.files["test"]) >= devices.num_workers else 1
    eval_steps = evaluation_batches(config, records, data_dir, per_worker, workers, log)
    eval_stream = RecordStream(records, "test", per_worker, config.seed, worker_index=devices.worker_index % workers,
                               num_workers=workers, model=bert)
    return stream, eval_stream, eval_steps


def evaluation_batches(config, records, data_dir, per_worker, workers, log):
    """--eval-steps, or fewer where the test split holds fewer whole batches: each evaluation reads each test
    record at most once, as google-research/bert's evaluation (no repeat, the last partial batch dropped); an
    --eval-steps past the split's end went round it again, counting records twice, unsaid. Records without a
    test split are refused, as every flag the run would not read: "--eval-every ignored" was a note that
    --quiet hid."""
    if not records.files["test"]:
        raise UsageError(f"--eval-every {config.eval_every}: {storage.display(data_dir)} holds no {config.format} "
                         "test records to evaluate on (bertprep shard --test-fraction makes a test split)")
    whole = full_batches(records, "test", per_worker, workers)
    held = f"{storage.display(data_dir)}: the {config.format} test split holds"
    if whole == 0:
        raise UsageError(f"--eval-every: {held} fewer records than one evaluation batch of {per_worker}"
                         + (f" on each of {workers} data workers" if workers > 1 else "")
                         + " (a smaller --batch-size, or more test records)")
    records.check_split_shape("test")
    if whole < config.eval_steps:
        log.note(f"--eval-steps {config.eval_steps}: {held} {whole} batches of {per_worker}"
                 + (f" on each of {workers} data workers" if workers > 1 else "")
                 + f": each evaluation reads those {whole}")
    return min(whole, config.eval_steps)


def run_settings(config, bert, devices):
    """What fixes the trajectory: the global batch and how the data are split into feeds, not how
    many devices share the work or how a model is split over them (--model-parallel may change)."""
    return {
        "model": bert.to_dict(), "optimizer": config.optimizer, "lr": config.lr, "warmup": config.warmup,
        "steps": config.steps, "global_batch": global_batch(config, devices), "grad_accum": config.grad_accum,
        "data_workers": devices.num_workers, "precision": config.precision, "seed": config.seed,
        "format": config.format,
        "bin_size": config.bin_size,  # None in checkpoints from before binning: the same as no binning
        "clip_norm": config.clip_norm,  # None (the optimizer's default) in checkpoints from before --clip-norm
    }


def resume(config, steps, settings, log, records):
    """The newest checkpoint of --checkpoint-dir into `steps` (its settings must be this run's, its vocab and
    casing the records'); the batches it had drawn (0 without one)."""
    found = run_state.load_latest(config.checkpoint_dir)
    if found is None:
        log.note(f"{storage.display(config.checkpoint_dir)}: no checkpoint yet, starting at step 0")
        return 0
    path, arrays, saved = found
    expected = {name: value.shape for name, value in steps.get_state().items()}
    run_state.check_compatible(path, saved.get("settings", {}), settings, arrays, expected)
    check_records_against_carried_vocab(path, records)  # records of another vocab: named as such
    check_same_records(path, saved, records)
    steps.set_state(arrays)
    draws = int(saved["draws"])
    log.note(f"resumed from {storage.display(path)} (step {saved['step']}, {draws} batches drawn)")
    return draws


def check_same_records(path, saved, records):
    """--resume with other records than the checkpoint `path` was trained on (its state.json's manifests, by their
    sha256: the same records moved elsewhere pass): its data position, the batches drawn, counts batches of those
    records, and the run went on over the others (packed rows after single sequences, another corpus) without a
    word. A checkpoint or records without manifests is not compared."""
    theirs = (saved.get("data") or {}).get("manifests")
    if not isinstance(theirs, dict) or not theirs or not records.manifests:
        return
    if sorted(theirs.values()) != sorted(records.manifests.values()):
        was, now = ", ".join(sorted(theirs)), ", ".join(sorted(records.manifests))
        raise UsageError(f"{storage.display(path)}: checkpoint was trained on other records ({was}); this run's "
                         f"--data holds {now}: resume with the records it was trained on, or name a new "
                         "--checkpoint-dir")


def check_records_against_carried_vocab(path, records):
    """--resume with records of another vocab or casing than the checkpoint `path` carries (its vocab.txt and
    tokenizer_config.json, written from the earlier run's records): refused as --init-checkpoint's are; the
    settings only compare the vocab's size (issue 57). A store's checkpoint is compared by its settings alone."""
    from trainer.checkpoint.base import Checkpoint
    from trainer.checkpoint.tokenizer import casing_beside, check_records

    vocab = os.path.join(path, "vocab.txt")
    if not storage.reads_in_place(path) or not os.path.isfile(vocab):
        return
    lower_case, casing_source = casing_beside(path)
    check_records(Checkpoint(kind="ours", path=path, config=None, weights={}, vocab=vocab, lower_case=lower_case,
                             casing_source=casing_source), records.vocabs)


def carried_files(config, records, initial, log):
    """(files, data): what every checkpoint carries besides its state: the records' vocab and casing (else the
    --init-checkpoint's; trainer/checkpoint/tokenizer.py), and the records' manifests with their sha256."""
    if not config.checkpoint_dir:
        return {}, {}
    from trainer.checkpoint import tokenizer

    notes = []
    found = tokenizer.of_records(records.vocabs, notes) or (initial is not None and tokenizer.of_checkpoint(initial))
    for note in notes:
        log.note(note)
    files = found.checkpoint_files() if found else resumed_files(config)
    return files, {"manifests": records.manifests}


def resumed_files(config):
    """Under --resume, what the checkpoint it continues carries (its vocab.txt and casing): a run resumed without
    reading its --init-checkpoint (resumed_instead_of_init) carries that checkpoint's, which came from it."""
    found = run_state.list_checkpoints(config.checkpoint_dir) if config.resume else []
    return run_state.carried_files(found[-1][1]) if found else {}


def checkpoint(config, devices, steps, settings, log, carried, step, draws):
    """The run's state after `step` into --checkpoint-dir (the chief writes it)."""
    state = steps.get_state()  # every process takes part: model-parallel shards span hosts
    if devices.is_chief:
        files, data = carried
        path = run_state.save(config.checkpoint_dir, step, state, {"draws": draws, "settings": settings,
                                                                   "data": data},
                              config.keep_checkpoints, files)
        log.note(f"checkpoint {storage.display(path)}")


def describe(config, devices, bert, records, stream, model, precision_note=None, options=StepOptions()):
    """The run's first log line: devices, model, data, batch, precision (what `amp` became), optimizer, and
    the step's levers where they are not Keras's own computations."""
    parameters = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    packing = f" packed rows of up to {records.dims['k']} sequences" if records.packed else ""
    return (f"{devices.description}; model L{bert.num_hidden_layers}/H{bert.hidden_size}/"
            f"A{bert.num_attention_heads} ({parameters / 1e6:.1f}M parameters); data {records.seq}/{records.pred} "
            f"{config.format}{packing} ({stream.epoch_size:,} training records on this worker); global batch "
            f"{global_batch(config, devices)} ({config.batch_size} x {devices.replicas} replicas x "
            f"{config.grad_accum} accumulation); {precision_note or config.precision}; "
            f"{config.optimizer} lr {config.lr}{step_levers(options)}")


def step_levers(options):
    """"; embedding gradient sorted, dropout rbg, scan layers" for the first line; "" for Keras's own
    computations."""
    changed = [name.replace("_", " ") + ("" if value is True else f" {value}")
               for name, value in dataclasses.asdict(options).items() if value != getattr(StepOptions(), name)]
    return "; " + ", ".join(changed) if changed else ""


def train_summary(config, devices, steps, counts, meter, clock):
    last, logged = counts.last, counts.last_logged
    startup = clock.figures()
    mean = meter.rates(meter.timed)
    return TrainSummary(
        steps=counts.step, skipped_steps=counts.skipped, global_batch=global_batch(config, devices),
        replicas=devices.replicas, model_parallel=config.model_parallel, pipeline_stages=config.pipeline_stages,
        pipeline=steps.summary(), mesh=devices.mesh, param_bytes_per_device=steps.param_bytes_per_device(),
        precision=config.precision, final_learning_rate=last["learning_rate"] if last else None,
        final_loss_scale=last["loss_scale"] if last else None,
        mean_sequences_per_second=mean["sequences_per_second"], mean_tokens_per_second=mean["tokens_per_second"],
        timed_steps=meter.timed["steps"], sequences=int(meter.trained["sequences"]),
        tokens=int(meter.trained["tokens"]), seconds_to_first_step=startup.get("first_step_s"), startup=startup,
        **{f"last_{k}": logged[k] for k in ("loss", "mlm_accuracy", "nsp_accuracy") if k in logged})


def sample_records(quiet=True):
    """Records (both formats) made on the fly from the package's embedded sample corpus, cached per user;
    a process that finds another making them waits for it (saying so unless `quiet`)."""
    from bertprep.stages import create

    # Not "trainer-sample": a cache made before the sample came as shards holds one training file
    # under another name, which the reader's glob would take beside the eight.
    out_dir = user_cache("trainer-sample-shards")
    return create.create_sample_records(out_dir, waiting=waiting_line(quiet, "the sample records"))


def waiting_line(quiet, what):
    """retry_while_held's `waiting` for the trainer's cached samples: one line naming the run it waits for
    (None when `quiet`)."""
    from bertprep.stages.create import SAMPLE_WAIT_S

    if quiet:
        return None
    return lambda error: print(f"trainer: waiting up to {SAMPLE_WAIT_S} s for another run making {what}: {error}",
                               file=sys.stderr)
