"""`python -m trainer finetune`: SQuAD or GLUE from a pretraining checkpoint of this trainer.

The run: read the task's records (tasks.TaskData); take the model
configuration and the encoder's weights, by variable path, from the
pretraining checkpoint (its masked-LM and next-sentence heads are left out);
add the task head (heads.py); train with --optimizer (by default AdamW, linear
warmup and linear decay; google-adam is Google's own fine-tuning optimizer) on
every device of the host (pretraining.Devices, steps.py, as pretraining does);
then predict the eval split and score it: SQuAD answers through
write_predictions (squad_predictions.py) into predictions.json (and
null_odds.json for SQuAD 2.0), exact match and F1 as the official scripts
compute them; GLUE accuracy and the task's own metric (metrics.py).

--predict writes what google-research/bert's scripts write with --do_predict:
GLUE test_results.tsv (run_classifier.py: per test example, in record order,
the softmax class probabilities tab-separated; STS-B, which the reference has
no processor for, its one predicted value), SQuAD predictions.json and
nbest_predictions.json of the eval records (run_squad.py's --predict_file is
what becomes its eval.tf_record), scored as well unless --no-eval. Its records
are checked before any training, so a run that cannot predict writes nothing.

Without --init-checkpoint a tiny checkpoint is pretrained on the fly from the
embedded sample records (cached): enough to show the path runs, not to score.
"""

import contextlib
import json
import os
import sys

import numpy as np

from bertprep import formats, storage
from bertprep.atomic import atomic_write_bytes, hold
from bertprep.errors import DataError, UsageError
from bertprep.folder import Folder
from bertprep.formats import codecs
from bertprep.options import check_argument, run_errors_name_fields
from trainer import compilation_cache, metrics, run_state, xla_gpu
from trainer.caller_random_state import restores_caller_random_state
from trainer.config import (
    MAX_STEPS,
    SIZES,
    BertConfig,
    FinetuneConfig,
    FinetuneSummary,
    StepOptions,
    TrainConfig,
    refuse_log_json_on_inputs,
    size_of,
)
from trainer.data import RecordStream, feature_dtypes, prefetch
from trainer.heads import FEATURE_INPUTS
from trainer.loop import Schedule, train_loop
from trainer.precision import loss_scaling
from trainer.pretraining import (
    Devices,
    Log,
    initial_checkpoint_warnings,
    make_steps,
    set_precision,
    step_options,
    warmup_steps,
)
from trainer.squad_predictions import load_eval_metadata, write_predictions
from trainer.tasks import TaskData, task_named

EVAL_RESULTS = "eval_results.txt"  # a GLUE run's scores, named as run_classifier.py names its file

# The on-the-fly checkpoint of a run without --init-checkpoint: a few steps of the sample records.
SAMPLE_PRETRAINING = dict(format=codecs.OFRECORD.name, steps=20, batch_size=8, optimizer="adam", lr=1e-3, warmup=2.0,
                          log_every=20, quiet=True)


def carried_files(data, initial, log):
    """(files, manifests): the vocab and casing the task's records were made with (else `initial`, the
    tokenizer.RunTokenizer the --init-checkpoint carries) for the fine-tuned checkpoint to carry
    (trainer/checkpoint/tokenizer.py), and the records manifest with its sha256."""
    from trainer.checkpoint import tokenizer

    task_data = Folder(data.data_dir)
    named = ([(task_data.display("manifest.json"), data.manifest["vocab"], data.lower_case)]
             if isinstance(data.manifest.get("vocab"), dict) else [])
    notes = []
    found = tokenizer.of_records(named, notes) or initial
    for note in notes:
        log.note(note)
    manifests = {task_data.display("manifest.json"): task_data.sha256("manifest.json")} if data.manifest else {}
    return (found.checkpoint_files() if found else {}), manifests


@run_errors_name_fields(FinetuneConfig)
@restores_caller_random_state
def finetune(config: FinetuneConfig) -> FinetuneSummary:
    """Fine-tune as `config` (a trainer.FinetuneConfig) says; return the trainer.FinetuneSummary."""
    check_argument("trainer.finetune's config", config, FinetuneConfig)  # a dict or TrainConfig: AttributeError
    if os.environ.get("TF_CONFIG") or os.environ.get("KERAS_DISTRIBUTION_JOB_ADDRESSES"):
        raise UsageError("finetune runs on the devices of one host: unset TF_CONFIG / KERAS_DISTRIBUTION_JOB_ADDRESSES")
    if config.checkpoint_dir:  # it keeps one checkpoint there: another run's of a higher step would outrank it
        run_state.refuse_earlier_run(config.checkpoint_dir, resumable=False)
    # Held for the whole run, as pretraining holds it: two runs into one --checkpoint-dir both trained, exit 0, and
    # the last one's rotation (it keeps one) deleted the other's fine-tuned checkpoint. A second run is refused.
    with contextlib.ExitStack() as held:
        if config.checkpoint_dir:
            held.enter_context(hold(config.checkpoint_dir, "trainer finetune"))
        # --output-dir too (unless it is --checkpoint-dir, held already): two runs into one both wrote their
        # test_results.tsv or predictions.json there, the last one's kept, and both summaries named it.
        if not config.checkpoint_dir or storage.comparable(config.output_dir) != \
                storage.comparable(config.checkpoint_dir):
            held.enter_context(hold(config.output_dir, "trainer finetune"))
        return _held_finetune(config)


def _held_finetune(config):
    """finetune's run once its --checkpoint-dir is held: the records, the checkpoint, the training, the scores."""
    task = task_named(config.task)
    data = TaskData(config.data, config.format, task)
    check_scoring_inputs(config, task, data)
    refuse_log_json_on_inputs(config, [(data.manifest.get("vocab") or {}).get("path"), dev_file(config, data)])
    from trainer.checkpoint import read, tokenizer

    initial = read(config.init_checkpoint or sample_checkpoint(config, data))
    bert, weights, checkpoint_path = initial.config, initial.ours(), initial.path
    # The vocab and casing --init-checkpoint carries (any kind, a URL's too), for the fine-tuned checkpoint
    # where the task's records name none; the on-the-fly sample checkpoint's is not the task records' vocab.
    initial_tokenizer = tokenizer.of_checkpoint(initial) if config.init_checkpoint else None
    if config.init_checkpoint and isinstance(data.manifest.get("vocab"), dict):  # what the records were made with
        tokenizer.check_records(initial, [(Folder(data.data_dir).display("manifest.json"), data.manifest["vocab"],
                                           data.manifest.get("lower_case"))])
    if config.model and size_of(bert) != SIZES[config.model]:
        raise UsageError(f"--model {config.model}: the checkpoint {checkpoint_path} holds L{bert.num_hidden_layers}/"
                         f"H{bert.hidden_size}/A{bert.num_attention_heads} (leave --model out to use it)")
    if data.seq > bert.max_position_embeddings:
        raise DataError(f"{storage.display(config.data)}: records have sequence length {data.seq} but the "
                        f"checkpoint's model has {bert.max_position_embeddings} positions")
    if data.vocab_size and data.vocab_size > bert.vocab_size:
        raise DataError(f"{storage.display(config.data)}: records were made with a vocab of {data.vocab_size} "
                        f"entries, the checkpoint's model has {bert.vocab_size}")
    read_after = ([] if config.no_eval else ["eval"]) + ([task.predict_split] if config.predict else [])
    for split in dict.fromkeys(read_after):  # read after the training, checked before it (SQuAD's eval: once)
        data.check_split_values(split, bert)
    warnings = initial_checkpoint_warnings(initial)  # once the run is not refused, before it starts
    del initial  # its weights are in `weights`, in our layout
    xla_gpu.apply("cublas")  # before JAX's GPU backend starts (trainer/xla_gpu.py)
    import keras

    compilation_cache.enable()
    keras.backend.clear_session()  # a fresh name space: variables are matched by path
    config, precision_note = set_precision(config, keras)
    options = step_options(config, keras)  # the GPU's levers under JAX, as pretraining's "auto"
    keras.utils.set_random_seed(config.seed)
    devices = Devices(keras.backend.backend())
    log = Log(config, 0, enabled=True)
    try:
        carried = carried_files(data, initial_tokenizer, log) if config.checkpoint_dir else ({}, {})
        return _finetune(config, task, data, bert, weights, checkpoint_path, devices, log, carried, precision_note,
                         options, warnings)
    finally:
        log.close()


def check_scoring_inputs(config, task, data):
    """What is read only after the training, checked before it: the eval records (and their label ids), the
    records --predict predicts, and SQuAD's dev JSON (--eval-file, else the manifest's source: a missing or
    damaged one failed once every step had been trained). --eval-file names SQuAD's: a GLUE task ignored it."""
    if not data.files["eval"] and not config.no_eval:
        raise UsageError(f"{storage.display(config.data)}: no {config.format} eval records "
                         f"({codecs.get(config.format).task_glob('eval')}) to score: add them, or give --no-eval to "
                         "train without scores")
    if config.predict and not data.files[task.predict_split]:
        split = task.predict_split
        raise UsageError(f"{storage.display(config.data)}: --predict: no {config.format} "
                         f"{'test' if split == 'test' else 'eval (predict file)'} records "
                         f"({codecs.get(config.format).task_glob(split)}) to predict")
    if not config.no_eval:  # scored after the training: a label id beyond the head's is refused before it
        data.check_split_labels("eval")
    if config.eval_file and not task.is_squad:
        raise UsageError(f"--eval-file {storage.display(config.eval_file)}: a SQuAD dev JSON, but --task "
                         f"{task.name} scores the labels of its eval records")
    if config.eval_file and config.no_eval and not config.predict:  # read by the scoring and --predict alone
        raise UsageError(f"--eval-file {storage.display(config.eval_file)}: not with --no-eval (nothing is scored "
                         "or predicted)")
    if config.null_score_diff_threshold and not task.is_squad:  # SQuAD 2.0's no-answer: a GLUE task ignored it
        raise UsageError(f"--null-score-diff-threshold: SQuAD's, but --task {task.name} has no null answer")
    dataset = None
    if task.is_squad and (not config.no_eval or config.predict) and (path := dev_file(config, data)):
        dataset = _read_squad_json(path)  # read again when scoring (a few MB)
    written = written_names(config, task, data, dataset)
    refuse_directories_in_the_way(config, written)
    refuse_log_json_among(config, written)


def written_names(config, task, data, dataset):
    """The files the scoring and --predict write in --output-dir once the training is done (`dataset`: the
    SQuAD dev JSON or None)."""
    if not task.is_squad:
        return [*([] if config.no_eval else [EVAL_RESULTS]), *(["test_results.tsv"] if config.predict else [])]
    if config.no_eval and not config.predict:
        return []
    return ["predictions.json", "nbest_predictions.json", *(["null_odds.json"] if is_version_2(data, dataset) else [])]


def refuse_directories_in_the_way(config, names):
    """A directory named as one of the files `names` in a local --output-dir: writing the file over it failed
    ('Is a directory') once every step had been trained and --checkpoint-dir saved."""
    if not storage.checks_locally(config.output_dir):
        return
    for name in names:
        if os.path.isdir(os.path.join(storage.local_path(config.output_dir), name)):
            raise UsageError(f"--output-dir {storage.display(config.output_dir)}: "
                             f"{Folder(config.output_dir).display(name)} is a directory, where the run writes its "
                             f"{name} after training: move it, or give another --output-dir")


def refuse_log_json_among(config, names):
    """--log-json named as one of the files `names` in --output-dir: that file replaced the log after training
    (the summary event then went to the replaced file), exit 0, the log lost."""
    if config.log_json is None:
        return
    for name in names:
        path = Folder(config.output_dir).path(name)
        if storage.comparable(path) == storage.comparable(config.log_json):
            raise UsageError(f"--log-json {storage.display(config.log_json)}: the run writes its {name} there after "
                             "training (--output-dir): name another --log-json")


def is_version_2(data, dataset):
    """SQuAD 2.0 (null answers): the manifest's version_2_with_negative, else the dev JSON's "version"."""
    return data.version_2_with_negative or (dataset is not None and dataset.get("version") == "2.0")


def dev_file(config, data):
    """The SQuAD dev JSON the predictions are scored against: --eval-file, else the manifest's source, or None."""
    return config.eval_file or data.source("eval") or data.source("dev")


def _finetune(config, task, data, bert, weights, checkpoint_path, devices, log, carried, precision_note=None,
              options=StepOptions(), warnings=()):
    from trainer.optimizers import build_slots, make_optimizer

    global_batch = config.batch_size * devices.replicas
    train_records = data.records("train")
    total_steps = config.steps or epoch_steps(config, train_records, global_batch)
    log.total = total_steps
    with devices.scope():
        model, objective = build_task_model(task, bert, data, options=options, weights=weights)
        optimizer = make_optimizer(config.optimizer, config.lr, warmup_steps(config.warmup, total_steps), total_steps,
                                   config.clip_norm)
        build_slots(optimizer, model.trainable_variables)
        loaded, fresh_pooler = load_encoder(model, weights, checkpoint_path)
    steps = make_steps(devices, model, optimizer, 1, loss_scaling(config.precision), objective)
    parameters = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    log.note(f"{task.name}: {train_records:,} training records ({data.fmt}, seq {data.seq}); "
             f"{loaded} encoder variables from {checkpoint_path}; model L{bert.num_hidden_layers}/"
             f"H{bert.hidden_size} ({parameters / 1e6:.1f}M parameters); {total_steps} steps of global batch "
             f"{global_batch} ({config.batch_size} x {devices.replicas} replicas); "
             f"{precision_note or config.precision}; {config.optimizer} lr {config.lr}")
    if fresh_pooler:
        log.note(f"{checkpoint_path} has no pooler (bert/pooler/dense): the pooler starts from its random "
                 "initialization, as transformers starts a BertModel saved without one")

    stream = RecordStream(data, "train", config.batch_size * devices.local_replicas, config.seed, model=bert)
    train = training_figures(*train_loop(steps, prefetch(stream.batches()), Schedule(total_steps, config.log_every),
                                         log))
    evaluation, prediction = {}, {}
    eval_batch = config.batch_size * devices.replicas
    if not config.no_eval:
        if task.is_squad:
            evaluation = evaluate_squad(config, data, steps, eval_batch, log)
        else:
            evaluation = evaluate_glue(task, data, steps, eval_batch)
            write_eval_results(config, evaluation, train["steps"])
        log.record("eval", {k: v for k, v in evaluation.items() if isinstance(v, (int, float))}, train["steps"])
    else:
        log.note("--no-eval: nothing scored")
    if config.checkpoint_dir:  # after scoring (the weights are the same): its model card names the scores
        files, manifests = carried
        path = run_state.save(config.checkpoint_dir, train["steps"], steps.get_state(),
                              {"settings": {"task": task.name, "labels": head_labels(task, data),
                                            "model": bert.to_dict(), "init": checkpoint_path},
                               "data": {"manifests": manifests},
                               "evaluation": {k: v for k, v in evaluation.items() if isinstance(v, (int, float))}},
                              keep=1, files=files)
        log.note(f"checkpoint {storage.display(path)}")
    if config.predict:
        prediction = predict(config, task, data, steps, eval_batch, evaluation)
        log.note(f"--predict: {prediction['examples']} examples into {prediction['file']}")
    output_folder(config)  # a run that wrote nothing there has it still, as before
    summary = FinetuneSummary(task=task.name, format=data.fmt, init_checkpoint=checkpoint_path,
                              replicas=devices.replicas, global_batch=global_batch, precision=config.precision,
                              optimizer=config.optimizer, **train, evaluation=evaluation, prediction=prediction,
                              warnings=warnings)
    figures = {k: v for k, v in summary.to_dict().items() if isinstance(v, (int, float)) or k == "warnings"}
    log.record("summary", figures, train["steps"])  # the numbers, and the warnings a script reads
    return summary


def epoch_steps(config, train_records, global_batch):
    """The optimizer steps of --epochs over `train_records`, at most MAX_STEPS and at least a --warmup given in
    steps, as --steps is checked (a longer warmup ran the whole run warming up, never reaching --lr)."""
    steps = max(1, int(train_records * config.epochs / global_batch))
    if steps > MAX_STEPS:
        raise UsageError(f"--epochs {config.epochs}: {steps} steps of global batch {global_batch}, more than the "
                         f"{MAX_STEPS} a run can take")
    if config.warmup >= 1 and config.warmup > steps:
        raise UsageError(f"--warmup {int(config.warmup)} exceeds the {steps} steps of --epochs {config.epochs} "
                         f"(global batch {global_batch})")
    return steps


def output_folder(config):
    """--output-dir, made when a file is written there or the run is done: a run that fails before (in
    training, in scoring) leaves no empty one behind."""
    output = Folder(config.output_dir)
    output.makedirs()
    return output


def head_labels(task, data):
    """The labels of a classifier head, by index (saved with the fine-tuned checkpoint, so an export names
    them); None for a regression or SQuAD."""
    return None if task.is_squad or task.is_regression else list(data.labels)


def training_figures(counts, meter):
    """The summary's figures of the loop's Counts and Meter."""
    return {"steps": counts.step, "skipped_steps": counts.skipped,
            "first_logged_loss": counts.first_logged["loss"] if counts.first_logged else None,
            "last_logged_loss": counts.last_logged.get("loss"),
            "mean_sequences_per_second": meter.rates(meter.timed)["sequences_per_second"]}


def build_task_model(task, config, data, batch=2, options=StepOptions(), weights=None):
    """The task's model (variables created; its step's levers `options`; those that load_encoder gives
    `weights` next not drawn) and its training objective."""
    from trainer.checkpoint.run import assigned_paths
    from trainer.heads import (
        BertForSequences,
        BertForSpans,
        ClassificationObjective,
        RegressionObjective,
        SpanObjective,
    )
    from trainer.model import symbolic_inputs, variables_initialized_together

    if task.is_squad:
        model, objective = BertForSpans(config, name="bert", options=options), SpanObjective()
    elif task.is_regression:
        model, objective = BertForSequences(config, 1, name="bert", options=options), RegressionObjective()
    else:
        model, objective = (BertForSequences(config, len(data.labels), name="bert", options=options),
                            ClassificationObjective())
    with variables_initialized_together() as not_drawn:
        model(symbolic_inputs(batch, data.seq))
        if weights is not None:
            not_drawn.update(assigned_paths(model, weights, encoder_skipped(model, weights)[0]))
    return model, objective



# ---------------------------------------------------------------- the pretraining checkpoint


def read_pretraining_checkpoint(path):
    """(BertConfig, {our variable path: array}, the checkpoint's path) of any checkpoint kind
    trainer.checkpoint reads: ours, Google's bert_model.ckpt, Hugging Face, NVIDIA .pt."""
    from trainer.checkpoint import read

    checkpoint = read(path)
    return checkpoint.config, checkpoint.ours(), checkpoint.path


def load_encoder(model, weights, path):
    """Assign the checkpoint's value to every encoder variable, matched by path; the task head keeps
    its initialization, and so does the pooler of a checkpoint that has none (a BertModel saved with
    add_pooling_layer=False: trainer.checkpoint.checked reads a pooler whole or not at all). Returns the
    number of variables loaded and whether the pooler starts fresh."""
    from trainer.checkpoint.run import assign

    skip, fresh_pooler = encoder_skipped(model, weights)
    return assign(model, weights, path, skip=skip), fresh_pooler


def encoder_skipped(model, weights):
    """(the paths load_encoder leaves as initialized: the task head's, and the pooler's where `weights` have
    none; whether the pooler starts fresh)."""
    pooler = {v.path for v in model.pooler.variables} if model.pooler is not None else set()
    fresh_pooler = bool(pooler) and not pooler & set(weights)
    return {v.path for v in model.head.variables} | (pooler if fresh_pooler else set()), fresh_pooler


def sample_checkpoint(config, data):
    """A tiny pretraining checkpoint made on the fly from the embedded sample records (cached per
    user), with the vocab size of the fine-tuning records so their token ids fit."""
    from bertprep.atomic import hold, retry_while_held
    from bertprep.stages.create import SAMPLE_WAIT_S
    from trainer.config import user_cache
    from trainer.pretraining import sample_records, train, waiting_line

    vocab_size = data.vocab_size or BertConfig().vocab_size
    model = config.model or "tiny"
    directory = user_cache("finetune-sample-checkpoint", f"{model}-vocab-{vocab_size}")

    if run_state.list_checkpoints(directory):
        return directory
    if not config.quiet:
        print(f"trainer: no --init-checkpoint: pretraining the {model} model for a few steps on the embedded "
              f"sample records into {directory}", file=sys.stderr)

    def pretrain():
        # Checked and made under the lock of the cache's folder: a process that finds another making one
        # waits for it (retry_while_held), then finds its checkpoint instead of pretraining again.
        with hold(os.path.dirname(directory), "trainer finetune"):
            if run_state.list_checkpoints(directory):
                return
            os.makedirs(directory, exist_ok=True)
            config_path = os.path.join(directory, "bert_config.json")
            atomic_write_bytes(config_path,
                               json.dumps(BertConfig.sized(model, vocab_size=vocab_size).to_dict()).encode())
            train(TrainConfig(**SAMPLE_PRETRAINING, data=sample_records(config.quiet), bert_config=config_path,
                              checkpoint_dir=directory))

    retry_while_held(pretrain, SAMPLE_WAIT_S, waiting=waiting_line(config.quiet, "the sample checkpoint"))
    return directory


# ---------------------------------------------------------------- evaluation


def predict_split(steps, data, split, batch):
    """(records, model outputs) for consecutive batches of a split, in record order; the last
    batch is padded with copies of its last record for the devices and cut back afterwards."""
    kind = data.task.eval_kind if split == "eval" else data.kind
    dtypes = feature_dtypes(kind)
    for records in formats.read_batches(data.files[split], batch, data.fmt, kind=kind, dims=data.dims):
        n = len(records["input_ids"])
        inputs = {name: _pad_rows(records[name], batch).astype(dtypes[name]) for name in FEATURE_INPUTS}
        outputs = steps.predict(steps.put({name: values[None] for name, values in inputs.items()}))
        yield records, {name: values[:n] for name, values in outputs.items()}


def _pad_rows(values, rows):
    missing = rows - len(values)
    return np.concatenate([values, np.repeat(values[-1:], missing, axis=0)]) if missing else values


def evaluate_glue(task, data, steps, batch):
    """Accuracy (classification) or mean squared error (regression), plus the task's metrics, over
    the real examples of the eval split (is_real_example = 1)."""
    outputs, labels = [], []
    for records, predicted in predict_split(steps, data, "eval", batch):
        real = records["is_real_example"][:, 0] == 1
        outputs.append(predicted["logits"][real])
        labels.append(records["label_ids"][real, 0])
    logits, labels = np.concatenate(outputs).astype(np.float64), np.concatenate(labels)
    result = {"examples": len(labels)}
    if task.is_regression:
        predictions = logits[:, 0]
        result["loss"] = float(np.mean((predictions - labels) ** 2))
    else:
        predictions = np.argmax(logits, axis=-1)
        log_probs = logits - np.max(logits, axis=-1, keepdims=True)
        log_probs -= np.log(np.sum(np.exp(log_probs), axis=-1, keepdims=True))
        result["loss"] = float(-np.mean(log_probs[np.arange(len(labels)), labels]))
        result["accuracy"] = metrics.accuracy(predictions, labels)
    for name in task.metrics:
        result[name] = getattr(metrics, name)(predictions, labels)
    return result


def write_eval_results(config, evaluation, step):
    """eval_results.txt in --output-dir, as run_classifier.py --do_eval writes it: a `name = value` line per
    score, sorted by name, with global_step (scripts that read Google's file read ours). Its names are the
    summary's (eval_accuracy, eval_loss, and the task's metrics, eval_f1_positive ...)."""
    scores = {f"eval_{name}": value for name, value in evaluation.items()} | {"global_step": step}
    text = "".join(f"{name} = {scores[name]}\n" for name in sorted(scores))
    output_folder(config).atomic_write_bytes(EVAL_RESULTS, text.encode())


def predict(config, task, data, steps, batch, evaluation):
    """--predict: GLUE's test_results.tsv, or SQuAD's predictions of the eval records (written already
    where they were scored); {"examples": how many, "file": where}."""
    if not task.is_squad:
        return predict_glue(config, task, data, steps, batch)
    if "predictions" not in evaluation:
        evaluation = {"examples": len(write_squad_predictions(config, data, steps, batch)[0]),
                      "predictions": Folder(config.output_dir).display("predictions.json")}
    return {"examples": evaluation["examples"], "file": evaluation["predictions"]}


def predict_glue(config, task, data, steps, batch):
    """test_results.tsv as run_classifier.py --do_predict writes it: a line per real test example
    (is_real_example 1: the reference cuts its TPU padding off too), in record order, of the softmax
    class probabilities tab-separated, each as str() of the float32 (the reference prints NumPy's);
    STS-B's line is its one predicted value."""
    lines = []
    for records, predicted in predict_split(steps, data, "test", batch):
        logits = predicted["logits"][records["is_real_example"][:, 0] == 1].astype(np.float64)
        values = logits if task.is_regression else softmax(logits)
        lines += ["\t".join(str(value) for value in row) + "\n" for row in values.astype(np.float32)]
    output = output_folder(config)
    output.atomic_write_bytes("test_results.tsv", "".join(lines).encode())
    return {"examples": len(lines), "file": output.display("test_results.tsv")}


def softmax(logits):
    shifted = np.exp(logits - np.max(logits, axis=-1, keepdims=True))
    return shifted / np.sum(shifted, axis=-1, keepdims=True)


def evaluate_squad(config, data, steps, batch, log):
    """predictions.json, nbest_predictions.json (and null_odds.json for SQuAD 2.0) in --output-dir,
    scored against the dev JSON as the official evaluate script would score them."""
    examples, predictions, null_odds, dataset, version_2 = write_squad_predictions(config, data, steps, batch)
    result = {"examples": len(examples), "predictions": Folder(config.output_dir).display("predictions.json")}
    if dataset is None:
        log.note("no dev JSON (manifest source or --eval-file): predictions written, not scored")
        return result
    if version_2:
        result.update(metrics.squad_v2_scores(dataset["data"], predictions, null_odds))
    else:
        result.update(metrics.squad_v1_scores(dataset["data"], predictions))
    result["dev_file"] = dev_file(config, data)
    return result


def write_squad_predictions(config, data, steps, batch):
    """predictions.json, nbest_predictions.json (and null_odds.json for SQuAD 2.0) of the eval records in
    --output-dir; (examples, predictions, null_odds, the dev JSON or None, whether SQuAD 2.0)."""
    features_path, examples_path = data.eval_metadata
    examples, features = load_eval_metadata(features_path, examples_path)
    logits, order = {}, []
    for records, predicted in predict_split(steps, data, "eval", batch):
        for unique_id, start, end in zip(records["unique_ids"][:, 0], predicted["start_logits"],
                                         predicted["end_logits"]):
            logits[int(unique_id)] = (start, end)
            order.append(int(unique_id))
    expected = [feature["unique_id"] for feature in features]
    if order != expected:
        mismatch = next((i for i, (a, b) in enumerate(zip(order, expected)) if a != b), min(len(order), len(expected)))
        raise DataError(f"{features_path}: does not match the eval records ({len(expected)} features, "
                        f"{len(order)} records; first difference at record {mismatch})")
    dev_json = dev_file(config, data)
    dataset = _read_squad_json(dev_json) if dev_json else None
    version_2 = is_version_2(data, dataset)
    predictions, nbest, null_odds = write_predictions(examples, features, logits, version_2, data.lower_case,
                                                      null_score_diff_threshold=config.null_score_diff_threshold)
    written = {"predictions.json": predictions, "nbest_predictions.json": nbest}
    if version_2:
        written["null_odds.json"] = null_odds
    output = output_folder(config)
    for name, content in written.items():
        # The reference's layout (json.dumps indent 4), so the official scripts read them as usual.
        output.atomic_write_bytes(name, (json.dumps(content, indent=4) + "\n").encode())
    return examples, predictions, null_odds, dataset, version_2


def _read_squad_json(path):
    try:
        with storage.open(path, "r", encoding="utf-8") as f:
            dataset = json.load(f)
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: cannot read the SQuAD dev JSON: {exc}") from None
    if not isinstance(dataset, dict) or not isinstance(dataset.get("data"), list):
        raise DataError(f"{path}: not SQuAD JSON (expected an object with a \"data\" list)")
    return dataset
