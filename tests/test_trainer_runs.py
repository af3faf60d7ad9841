"""A user's runs of `python -m trainer`: outputs that would land on what the run reads or rotates, and a Ctrl-C
while the programs compile (probes of 2026-11-28, fifth)."""

import json
import os
import signal
import subprocess
import sys
import time

from test_create import with_default_sigint
from trainer.cli import main
from trainer_checks import xla_flags

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TINY_CONFIG = {"vocab_size": 2000, "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
               "intermediate_size": 512, "max_position_embeddings": 512, "type_vocab_size": 2}


def test_a_log_json_that_is_the_bert_config_is_refused(tmp_path, capsys):
    """--log-json is appended to: naming the --bert-config the run reads trained and added the run's JSON lines
    to the config (exit 0), which no later run could read."""
    config = tmp_path / "bert_config.json"
    config.write_text(json.dumps(TINY_CONFIG))
    before = config.read_bytes()
    code = main(["--format", "tfrecord", "--bert-config", str(config), "--steps", "1", "--batch-size", "2",
                 "--quiet", "--log-json", str(config)])
    assert (code, capsys.readouterr().err.strip().splitlines()) == (2, [
        f"trainer: error: --log-json {config} is the input {config}: the run would overwrite or delete what it "
        "reads; write the output elsewhere"])
    assert config.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["bert_config.json"]


def _outside_checkpoints_error(flag, path, folder):
    return (f"trainer: error: {flag} {path}: at or inside {folder}, a checkpoint's folder of --checkpoint-dir, which "
            "the run resumes from, replaces and deletes: name a path outside its ckpt-<step> folders")


def test_a_log_json_in_the_checkpoint_a_resume_reads_is_refused(tmp_path, capsys):
    """`--resume --log-json CK/ckpt-00000002/state.json` appended the run's JSON lines to the state.json it
    resumed from (exit 0): the checkpoint was damaged for every later resume."""
    ck = tmp_path / "ck"
    run = ["--format", "ofrecord", "--steps", "2", "--batch-size", "2", "--checkpoint-dir", str(ck), "--quiet"]
    assert main(run) == 0
    state = ck / "ckpt-00000002" / "state.json"
    before = state.read_bytes()
    capsys.readouterr()
    assert main([*run, "--resume", "--log-json", str(state)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        _outside_checkpoints_error("--log-json", state, ck / "ckpt-00000002")]
    assert state.read_bytes() == before


def test_a_log_json_in_a_new_checkpoint_dir_is_written_there(tmp_path, capsys):
    """`--checkpoint-dir CK --log-json CK/log.jsonl` of a CK the run was to make was refused, "no directory CK":
    the run makes CK, so the log is written there; a log in another missing directory is still refused."""
    ck = tmp_path / "runs" / "ck"
    run = ["--format", "ofrecord", "--steps", "2", "--batch-size", "2", "--checkpoint-dir", str(ck), "--quiet"]
    assert main([*run, "--log-json", str(ck / "log.jsonl")]) == 0
    events = [json.loads(line)["event"] for line in (ck / "log.jsonl").read_text().splitlines()]
    assert "train" in events and (ck / "ckpt-00000002" / "state.json").is_file()
    capsys.readouterr()
    elsewhere = tmp_path / "nowhere" / "log.jsonl"
    assert main([*run, "--resume", "--steps", "3", "--log-json", str(elsewhere)]) == 2
    assert capsys.readouterr().err.strip() == f"trainer: error: --log-json {elsewhere}: no directory {elsewhere.parent}"


def test_a_tensorboard_dir_in_a_checkpoints_folder_is_refused(tmp_path, capsys):
    """`--tensorboard-dir CK/ckpt-00000002` was replaced by the checkpoint of that step: the run's events were
    deleted without a word (exit 0)."""
    ck, board = tmp_path / "ck", tmp_path / "ck" / "ckpt-00000002"
    assert main(["--format", "ofrecord", "--steps", "2", "--batch-size", "2", "--checkpoint-dir", str(ck),
                 "--tensorboard-dir", str(board), "--quiet"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        _outside_checkpoints_error("--tensorboard-dir", board, board)]
    assert os.listdir(tmp_path) == []


def test_ctrl_c_while_the_programs_compile_exits_130(tmp_path):
    """Ctrl-C during the first step's compilation (the minute a user sees the wrong flags) said `trainer:
    interrupted`, then the process died in a segmentation fault (exit 139, a core dump where enabled): JAX's
    compilation went on in its threads while the interpreter was torn down under them."""
    # JAX_LOG_COMPILES: JAX says when a program goes to XLA; the training step's takes seconds to compile with
    # XLA's optimized code (under the test processes' fast compiles it took under a second on a loaded 2-core VM,
    # the run ended before the Ctrl-C and the test failed).
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", PYTHONPATH=REPO, JAX_LOG_COMPILES="1",
               XLA_FLAGS=xla_flags(fast_compile=False))
    argv = [sys.executable, "-m", "trainer", "--format", "ofrecord", "--steps", "2", "--batch-size", "2",
            "--no-compilation-cache", "--checkpoint-dir", str(tmp_path / "ck")]
    # SIGINT as at a terminal: an ignored SIGINT is inherited through exec, and in full suites an xdist worker held
    # another SIGINT disposition than Python's default for most of the run (a per-test probe of signal.getsignal saw
    # it turn default only after test_python_api's notebook test); the run then never saw the Ctrl-C, trained its
    # 2 steps and exited 0 (twice in full suites; it passes alone, and fails alone under an ignored SIGINT).
    process = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, preexec_fn=with_default_sigint)
    lines = []
    for line in process.stderr:
        lines.append(line)
        if line.startswith("Finished jaxpr to MLIR module conversion jit(_train_step)"):
            # While XLA compiles it (3.4 s on an idle Zen 4 VM, JAX_LOG_COMPILES's figure).
            time.sleep(0.1)
            process.send_signal(signal.SIGINT)
            break
    lines.extend(process.stderr)
    assert process.wait(timeout=120) == 130, lines[-3:]
    assert lines[-1] == (f"trainer: interrupted before its first step; {tmp_path / 'ck'} holds no complete checkpoint "
                         "yet: a rerun starts from step 0\n")
    assert os.listdir(tmp_path / "ck") == ["tensorboard"]  # no lock left: a rerun is not refused


def test_sigterm_ends_a_run_with_its_step_and_the_checkpoint_to_resume(tmp_path):
    """SIGTERM, a cluster scheduler's stop, killed the run at once: exit 143 and not a word of the step it had
    reached or of which checkpoint a --resume would continue. It now ends as Ctrl-C does, in one line, 143; the
    checkpoint being written when it came (one each step here) is dropped whole, never left half-written."""
    import re

    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", PYTHONPATH=REPO)
    ck = tmp_path / "ck"
    argv = [sys.executable, "-m", "trainer", "--format", "ofrecord", "--steps", "100000", "--batch-size", "2",
            "--checkpoint-dir", str(ck), "--checkpoint-every", "1", "--log-every", "100000"]
    process = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    lines = []
    for line in process.stderr:
        lines.append(line)
        if line.startswith("trainer: checkpoint "):  # one complete, the run saving one each step from now on
            process.send_signal(signal.SIGTERM)
            break
    lines.extend(process.stderr)
    assert process.wait(timeout=120) == 143, lines[-3:]
    stopped = re.fullmatch(r"trainer: stopped by SIGTERM at step (\d+) of 100000; newest complete checkpoint "
                           r"(.*): the same command with --resume continues from it\n", lines[-1])
    assert stopped, lines[-3:]
    checkpoints = sorted(name for name in os.listdir(ck) if name != "tensorboard")
    assert stopped.group(2) == str(ck / checkpoints[-1])  # the newest on disk, at or before the step reached
    assert 1 <= int(checkpoints[-1].removeprefix("ckpt-")) <= int(stopped.group(1))
    for name in checkpoints:  # whole: no .partial/ (nor its lock) left, no checkpoint short of a file
        assert name.startswith("ckpt-") and {"state.json", "state.npz"} <= set(os.listdir(ck / name)), name


def test_fine_tuning_records_given_to_pretraining_are_named(tmp_path, capsys, shared_dir):
    """`--data` of `bertprep create-glue`: "no tfrecord training records (looked for ...)", as if the stage had
    written nothing; it is named as fine-tuning records, and where they go."""
    from bertprep.cli import main as bertprep_main

    mrpc = tmp_path / "mrpc"
    assert bertprep_main(["create-glue", "--task", "MRPC", "--data-dir", str(shared_dir / "fixtures" / "finetune" /
                          "glue" / "MRPC"), "--vocab", str(shared_dir / "fixtures" / "golden" / "vocab.txt"),
                          "--out", str(mrpc), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["--format", "tfrecord", "--data", str(mrpc), "--model", "tiny", "--steps", "1", "--quiet"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"trainer: error: {mrpc}: fine-tuning records (create-glue, task MRPC), not pretraining records: fine-tune "
        "on them with `python -m trainer finetune`; pretraining reads the records `bertprep create` or `pack` "
        "writes"]


def test_pretraining_records_given_to_fine_tuning_are_named(capsys):
    """`finetune --data` of `bertprep create` records: "no tfrecord training records (train.tf_record)", as if
    there were none; they are named as pretraining records, and where they go."""
    from trainer.pretraining import sample_records

    records = sample_records(quiet=True)
    assert main(["finetune", "--task", "mrpc", "--data", records, "--format", "tfrecord", "--steps", "1",
                 "--quiet"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"trainer: error: {records}: pretraining records (of `bertprep create` or `pack`), not fine-tuning records: "
        "pretrain on them with `python -m trainer`; fine-tuning reads the records `bertprep create-squad` or "
        "`create-glue` writes"]


def test_a_record_file_the_manifest_does_not_list_is_refused_before_the_model_is_built(tmp_path, capsys,
                                                                                       shared_dir, monkeypatch):
    """A record file in --data's records directory that its manifest does not list (a stray copy, `x
    copy.tfrecord`, or another run's part) was trained on with the listed ones without a word, its records twice,
    where `bertprep validate` fails the directory and bertprep.hf.load and bertprep.torch refuse it: pretraining and
    fine-tuning now end with the loaders' one line, exit 1, before any model is built (probes of 2026-11-29,
    tenth)."""
    import shutil

    from bertprep.cli import main as bertprep_main
    from trainer import finetuning, model
    from trainer.data import Records
    from trainer.pretraining import sample_records
    from trainer.tasks import TaskData, task_named

    def refused(stray, manifest):
        return [f"trainer: error: {stray}: not listed in {manifest} (an unfinished or stray file): the trainer would "
                "read its records with the listed files'; remove it, or move it out of the records directory"]

    def no_model(*args, **kwargs):
        raise AssertionError("a model was built before the records were checked")

    records = tmp_path / "records"
    shutil.copytree(sample_records(quiet=True), records)
    listed = sorted((records / "tfrecord" / "training").glob("*.tfrecord"))[0]
    stray = listed.with_name(listed.stem + " copy.tfrecord")
    shutil.copy(listed, stray)
    mrpc = tmp_path / "mrpc"
    assert bertprep_main(["create-glue", "--task", "MRPC", "--data-dir", str(shared_dir / "fixtures" / "finetune" /
                          "glue" / "MRPC"), "--vocab", str(shared_dir / "fixtures" / "golden" / "vocab.txt"),
                          "--out", str(mrpc), "--quiet"]) == 0
    part = mrpc / "train.of_record-1"  # another run's second part: train.of_record-* takes it
    shutil.copy(mrpc / "train.of_record-0", part)
    capsys.readouterr()
    monkeypatch.setattr(model, "build_model", no_model)  # pretraining's model
    monkeypatch.setattr(finetuning, "sample_checkpoint", no_model)  # fine-tuning's, without --init-checkpoint
    assert main(["--format", "tfrecord", "--data", str(records), "--model", "tiny", "--steps", "1", "--quiet"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == refused(stray, records / "manifest.json")
    assert main(["finetune", "--task", "mrpc", "--data", str(mrpc), "--format", "ofrecord", "--steps", "1",
                 "--quiet"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == refused(part, mrpc / "manifest.json")
    for path, directory in ((stray, records), (part, mrpc)):  # without them, the records validate and are read
        path.unlink()
        assert bertprep_main(["validate", str(directory), "--quiet"]) == 0
    assert str(listed) in Records(str(records), "tfrecord").files["training"]
    assert TaskData(str(mrpc), "ofrecord", task_named("mrpc")).files["train"] == [str(mrpc / "train.of_record-0")]


def test_a_resume_on_other_records_is_refused_and_on_the_same_records_moved_is_not(tmp_path, capsys):
    """--resume with a --data of other records (here: the same corpus packed, 128/23) continued the checkpoint's
    run on them without a word (exit 0), its data position counting batches of the records it was trained on.
    The records are told by their manifests' sha256: a copy elsewhere resumes. It resumes without --model tiny:
    the model is the checkpoint's (it took the default BERT-base, built it and was refused: "checkpoint was
    written with model.hidden_size=128, this run has 768")."""
    import shutil

    from bertprep.cli import main as bertprep_main
    from trainer.pretraining import sample_records

    records = sample_records(quiet=True)
    assert bertprep_main(["pack", records, "--out", str(tmp_path / "packed"), "--workers", "1", "--quiet"]) == 0
    moved = tmp_path / "moved"
    shutil.copytree(records, moved / "sample")
    ck = tmp_path / "ck"
    run = ["--format", "tfrecord", "--model", "tiny", "--steps", "2", "--batch-size", "2", "--checkpoint-dir",
           str(ck), "--quiet"]
    assert main([*run, "--data", records]) == 0
    capsys.readouterr()
    assert main([*run, "--resume", "--data", str(tmp_path / "packed")]) == 2
    (packed_manifest,) = (tmp_path / "packed").glob("*/sample/manifest.json")
    assert capsys.readouterr().err.strip().splitlines() == [
        f"trainer: error: {ck / 'ckpt-00000002'}: checkpoint was trained on other records "
        f"({os.path.join(records, 'manifest.json')}); this run's --data holds {packed_manifest}: resume with the "
        "records it was trained on, or name a new --checkpoint-dir"]
    assert main([*(a for a in run if a not in ("--model", "tiny")), "--resume", "--data", str(moved)]) == 0


def test_a_columnar_format_without_data_is_one_usage_line(tmp_path, capsys):
    """Without --data a run trains on the embedded sample records, TFRecord and OFRecord only (docs/trainer.md,
    "Data"). `--format hdf5` said `.../trainer-sample-shards/.../sample: no hdf5 training records (looked for
    [*/[*/]]/hdf5/training/*.hdf5)`, exit 1, of a cache directory the user never named. It is one usage line now,
    before the sample is made, in `python -m trainer` and trainer.benchmark alike."""
    from trainer.benchmark.cli import main as benchmark_main

    def line(prog, fmt):
        return [f"{prog}: error: --format {fmt}: the embedded sample records, which a run without --data trains on, "
                f"are tfrecord and ofrecord only: give --data of records in {fmt}, or --format tfrecord or ofrecord"]

    for fmt in ("hdf5", "parquet"):
        assert main(["--format", fmt, "--steps", "1", "--quiet"]) == 2
        assert capsys.readouterr().err.strip().splitlines() == line("trainer", fmt)
    out = tmp_path / "bench"
    assert benchmark_main(["--format", "hdf5", "--devices", "1", "--runs", "1", "--out", str(out), "--quiet"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == line("trainer.benchmark", "hdf5")
    assert not out.exists()


def test_a_log_json_that_is_the_records_vocab_is_refused(tmp_path, capsys):
    """--log-json is appended to: naming the vocab the records' manifest names (the checkpoints carry it) trained
    and added the run's JSON lines to that vocab.txt (exit 0), which no later stage could read as it was. It is
    refused once the records are read, before any model is built."""
    import shutil

    from trainer.pretraining import sample_records

    records, vocab = tmp_path / "records", tmp_path / "vocab" / "vocab.txt"
    shutil.copytree(sample_records(quiet=True), records)
    manifest = json.loads((records / "manifest.json").read_text())
    vocab.parent.mkdir()
    shutil.copy(manifest["vocab"]["path"], vocab)
    manifest["vocab"]["path"] = str(vocab)
    (records / "manifest.json").write_text(json.dumps(manifest))
    before = vocab.read_bytes()
    assert main(["--format", "ofrecord", "--data", str(records), "--model", "tiny", "--steps", "1", "--batch-size",
                 "2", "--checkpoint-dir", str(tmp_path / "ck"), "--log-json", str(vocab), "--quiet"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"trainer: error: --log-json {vocab} is the input {vocab}: the run would overwrite or delete what it reads; "
        "write the output elsewhere"]
    assert vocab.read_bytes() == before
    assert not (tmp_path / "ck").exists()


def test_an_earlier_runs_checkpoint_without_its_state_json_is_named_not_replaced(tmp_path, capsys):
    """A ckpt-<step>/ that lost its state.json is not listed as a checkpoint, so a run without --resume took the
    directory for a new one, trained, and replaced it at that step (exit 0): the earlier run's weights were deleted
    without a word, where --resume names it. The run is now refused as --resume is, before anything is read."""
    import numpy as np

    ck = tmp_path / "ck"
    (ck / "ckpt-00000002").mkdir(parents=True)
    np.savez(ck / "ckpt-00000002" / "state.npz", weights=np.arange(4.0))
    before = (ck / "ckpt-00000002" / "state.npz").read_bytes()
    assert main(["--format", "ofrecord", "--steps", "2", "--batch-size", "2", "--checkpoint-dir", str(ck),
                 "--quiet"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"trainer: error: {ck / 'ckpt-00000002'}: incomplete checkpoint: no state.json (the step and the model's "
        "config): restore it, or remove that directory (the checkpoint before it, if any, is then the newest)"]
    assert sorted(os.listdir(ck)) == ["ckpt-00000002"]
    assert os.listdir(ck / "ckpt-00000002") == ["state.npz"]
    assert (ck / "ckpt-00000002" / "state.npz").read_bytes() == before


def test_a_fine_tuning_output_dir_in_a_checkpoints_folder_is_refused(tmp_path, capsys):
    """`finetune --task squad --output-dir CK/ckpt-00000001 --checkpoint-dir CK --steps 1`: SQuAD's predictions
    were written there after training, then the checkpoint of step 1 replaced that folder: the summary named a
    predictions.json that was gone (exit 0). --output-dir is held to what --log-json and --tensorboard-dir are."""
    ck = tmp_path / "ck"
    out = ck / "ckpt-00000001"
    assert main(["finetune", "--task", "squad", "--format", "tfrecord", "--data", str(tmp_path / "squad"),
                 "--steps", "1", "--output-dir", str(out), "--checkpoint-dir", str(ck), "--quiet"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [_outside_checkpoints_error("--output-dir", out, out)]
    assert os.listdir(tmp_path) == []


def _earlier_checkpoint(ck):
    """A checkpoint of TINY_CONFIG's model in `ck` for --resume to find (the runs stop before its weights are
    read: it holds none)."""
    earlier = ck / "ckpt-00000002"
    earlier.mkdir(parents=True)
    (earlier / "state.npz").write_bytes(b"")
    (earlier / "state.json").write_text(json.dumps({"step": 2, "draws": 2, "settings": {"model": TINY_CONFIG}}))
    return earlier


def _ignored_init_warning(init, earlier):
    return (f"trainer: warning: --init-checkpoint {init}: not read, its weights are not used: --resume continues "
            f"{earlier}, whose weights and model replace them (as Google's run_pretraining ignores init_checkpoint "
            "where the model dir holds a checkpoint); leave --resume out, with a new --checkpoint-dir, to start "
            "from it")


def test_an_init_checkpoint_that_resume_replaces_is_said(shared_dir, tmp_path, capsys):
    """`--init-checkpoint X --resume` into a --checkpoint-dir holding a checkpoint resumed that checkpoint and
    never used X's weights (as Google's run_pretraining ignores init_checkpoint where the model dir holds one),
    without a word. Kept so, and said at once in a warning line, before the model is built: the run is stopped
    here at the held --checkpoint-dir, before compiling anything."""
    from bertprep.atomic import hold

    ck = tmp_path / "ck"
    earlier = _earlier_checkpoint(ck)
    init = shared_dir / "fixtures" / "checkpoints" / "hf_tiny"
    run = ["--format", "tfrecord", "--steps", "3", "--batch-size", "2", "--init-checkpoint", str(init),
           "--checkpoint-dir", str(ck), "--quiet"]
    with hold(ck, "the test"):
        assert main([*run, "--resume"]) == 1
    said = capsys.readouterr().err.strip().splitlines()
    assert said[0] == _ignored_init_warning(init, earlier), said
    assert said[1].startswith(f"trainer: error: {ck}: another run is writing here (the test, "), said
    # Nothing to resume: the run starts from --init-checkpoint, nothing to say.
    empty = tmp_path / "empty"
    with hold(empty, "the test"):
        assert main([*run[:-2], str(empty), "--quiet", "--resume"]) == 1
    assert "warning" not in capsys.readouterr().err


def test_an_init_checkpoint_that_resume_replaces_is_not_read(tmp_path, capsys):
    """Under --resume of a checkpoint, --init-checkpoint X was still read (a hub id downloaded), checked, and its
    weights loaded ("initialized 46 variables from X"), all to be replaced by the resumed checkpoint's: an X that
    cannot be read (here not a checkpoint at all) ended the run, exit 1, though nothing of it would be used. It is
    neither read nor loaded now: the model is the resumed checkpoint's, and the run goes on (to the held
    --checkpoint-dir here, before compiling anything)."""
    from bertprep.atomic import hold

    ck, init = tmp_path / "ck", tmp_path / "not-a-checkpoint"
    init.mkdir()
    earlier = _earlier_checkpoint(ck)
    with hold(ck, "the test"):
        assert main(["--format", "tfrecord", "--steps", "3", "--batch-size", "2", "--init-checkpoint", str(init),
                     "--checkpoint-dir", str(ck), "--resume", "--quiet"]) == 1
    said = capsys.readouterr().err.strip().splitlines()
    assert said[0] == _ignored_init_warning(init, earlier), said
    assert said[1].startswith(f"trainer: error: {ck}: another run is writing here (the test, "), said
