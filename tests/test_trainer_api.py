"""trainer's Python API: `trainer.train(TrainConfig(...))` and `trainer.finetune(FinetuneConfig(...))`
give the summaries the CLI prints (a `python -m trainer ... --json` run in a subprocess), the configs
are checked when built with the CLI's messages, and `import trainer` loads no framework."""

import dataclasses
import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest

from bertprep import formats
from bertprep.errors import UsageError
from bertprep.formats.schemas import GLUE
from trainer.cli import build_finetune_parser, build_parser, config_from, main
from trainer.config import FinetuneConfig, TrainConfig

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Clock-dependent: the rest of a summary is the same in every run.
TIMINGS = ("mean_sequences_per_second", "mean_tokens_per_second", "seconds_to_first_step", "startup")


def cli_summary(capsys, *argv, with_timings=False):
    """`python -m trainer ARGV --json`, run in this process (its parse, config and print): its summary (without
    the clock's figures unless `with_timings`)."""
    capsys.readouterr()
    assert main([*argv, "--json", "--quiet"]) == 0
    return {k: v for k, v in json.loads(capsys.readouterr().out).items() if with_timings or k not in TIMINGS}


def test_import_trainer_loads_no_framework():
    code = "import sys, trainer; trainer.TrainConfig; print(sorted({'keras', 'tensorflow', 'jax'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr


def test_configs_have_the_cli_defaults_and_its_checks():
    assert config_from(build_parser().parse_args(["--format", "ofrecord"]), TrainConfig) == TrainConfig("ofrecord")
    finetune_argv = ["--task", "MRPC", "--data", "d", "--format", "tfrecord"]
    assert (config_from(build_finetune_parser().parse_args(finetune_argv), FinetuneConfig)
            == FinetuneConfig("MRPC", "d", "tfrecord"))
    # Derived once, when built: the sample run's tiny model, a --data run's base, fine-tuning's output.
    assert (TrainConfig("ofrecord").model, TrainConfig("ofrecord", data="d").model) == ("tiny", "base")
    assert TrainConfig("ofrecord", bert_config="c.json").model is None
    assert FinetuneConfig("MRPC", "d", "tfrecord").output_dir == "finetune-mrpc"
    with pytest.raises(dataclasses.FrozenInstanceError):
        TrainConfig("ofrecord").steps = 3
    for kind, fields, message in [  # its fields named, as a Python caller wrote them (the CLI's: its flags)
            (TrainConfig, {"resume": True}, "TrainConfig.resume needs TrainConfig.checkpoint_dir"),
            (TrainConfig, {"optimizer": "adam", "clip_norm": 1.0},
             "TrainConfig.clip_norm: TrainConfig.optimizer adam does not clip gradients "
             "(only lamb and google-adam do)"),
            (TrainConfig, {"warmup": 30, "steps": 20}, "TrainConfig.warmup 30 exceeds TrainConfig.steps 20"),
            (TrainConfig, {"lr": float("nan")}, "TrainConfig.lr must be a positive number, got nan"),
            (TrainConfig, {"warmup": float("nan")},
             "TrainConfig.warmup must be a fraction below 1 or a whole number of steps, got nan"),
            (FinetuneConfig, {"warmup": float("inf")},
             "FinetuneConfig.warmup must be a fraction below 1 or a whole number of steps, got inf"),
            (TrainConfig, {"keep_checkpoints": 0}, "TrainConfig.keep_checkpoints: expected a positive integer, got 0"),
            # each was taken and ignored without a word
            (TrainConfig, {"checkpoint_every": 50}, "TrainConfig.checkpoint_every 50: no checkpoints are written "
                                                    "without TrainConfig.checkpoint_dir"),
            (TrainConfig, {"eval_steps": 3}, "TrainConfig.eval_steps 3: nothing is evaluated without "
                                             "TrainConfig.eval_every"),
            (TrainConfig, {"eval_every": 50, "steps": 20}, "TrainConfig.eval_every 50: past TrainConfig.steps 20, "
                                                           "nothing would be evaluated"),
            (TrainConfig, {"steps": 0}, "TrainConfig.steps: expected a positive integer, got 0"),
            # evaluated every fifth step, as --eval-every 5
            (TrainConfig, {"eval_every": -5}, "TrainConfig.eval_every: expected 0 (never) or a positive integer, "
                                              "got -5"),
            (TrainConfig, {"precision": "fp8"}, "TrainConfig.precision: expected one of fp32, amp, mixed_float16, "
                                                "mixed_bfloat16, got 'fp8'"),
            (FinetuneConfig, {"epochs": 0}, "FinetuneConfig.epochs must be positive, got 0"),
            # NumPy's legacy seed range: a ValueError traceback once the checkpoint was read
            (TrainConfig, {"seed": -1}, "TrainConfig.seed must be an integer from 0 to 4294967295, got -1"),
            (FinetuneConfig, {"seed": 2**32}, "FinetuneConfig.seed must be an integer from 0 to 4294967295, "
                                              "got 4294967296"),
            # the schedule's int32 step count: an OverflowError traceback from JAX at the first step
            (TrainConfig, {"steps": 2**31}, "TrainConfig.steps must be at most 2147483647, got 2147483648"),
            (FinetuneConfig, {"epochs": float("inf")}, "FinetuneConfig.epochs must be a finite number, got inf"),
            # SQuAD 2.0 then predicted an answer for every question, silently
            (FinetuneConfig, {"null_score_diff_threshold": float("nan")},
             "FinetuneConfig.null_score_diff_threshold must be a number, got nan")]:
        required = ("ofrecord",) if kind is TrainConfig else ("MRPC", "d", "tfrecord")
        with pytest.raises(UsageError) as raised:
            kind(*required, **fields)
        assert str(raised.value) == message


@pytest.mark.parametrize("kind, fields, message", [
    # -1.0 trained without clipping (exit 0), nan made every clipped gradient nan
    (TrainConfig, {"clip_norm": -1.0}, "TrainConfig.clip_norm: expected a positive number, got -1.0"),
    (FinetuneConfig, {"optimizer": "lamb", "clip_norm": float("nan")},
     "FinetuneConfig.clip_norm: expected a positive number, got nan"),
    (TrainConfig, {"clip_norm": 0.0}, "TrainConfig.clip_norm: expected a positive number, got 0.0"),
    # Keras's ValueError traceback once the records had been read
    (TrainConfig, {"dropout": 1.5}, "TrainConfig.dropout: expected a probability in [0, 1), got 1.5"),
    (TrainConfig, {"dropout": float("nan")}, "TrainConfig.dropout: expected a probability in [0, 1), got nan"),
    # the run took the steps and ignored the epochs without a word
    (FinetuneConfig, {"epochs": 3.0, "steps": 10},
     "FinetuneConfig.epochs 3.0: not with FinetuneConfig.steps 10, which sets the run's length instead: give one "
     "of them"),
])
def test_a_config_refuses_the_values_the_cli_refuses(kind, fields, message):
    """--clip-norm and --dropout are checked by the CLI's parser (a positive number, a probability in [0, 1)), and
    it refuses --epochs with --steps; a config built in Python took any float, and both lengths."""
    required = ("ofrecord",) if kind is TrainConfig else ("MRPC", "d", "tfrecord")
    with pytest.raises(UsageError) as raised:
        kind(*required, **fields)
    assert str(raised.value) == message
    assert build_parser().parse_args(["--format", "ofrecord", "--dropout", "0", "--clip-norm", "2"])  # in range
    assert FinetuneConfig("MRPC", "d", "tfrecord", steps=10).steps == 10  # the default epochs beside steps


def test_a_finetune_config_of_an_unknown_task_is_refused_when_built():
    """FinetuneConfig(task="mrcp") was built; trainer.finetune refused it only once Keras had loaded. The refusal
    named no field (`unknown task 'mrcp' …`, on the command line too): it names FinetuneConfig.task, and --task
    on the command line."""
    with pytest.raises(UsageError) as raised:
        FinetuneConfig("mrcp", "d", "tfrecord")
    assert str(raised.value) == ("FinetuneConfig.task: unknown task 'mrcp' (known: squad, cola, sst-2, mrpc, sts-b, "
                                 "qqp, mnli, qnli, rte, wnli)")
    run = subprocess.run([sys.executable, "-m", "trainer", "finetune", "--task", "mrcp", "--data", "d", "--format",
                          "tfrecord"], capture_output=True, text=True, cwd=REPO)
    assert run.returncode == 2 and run.stderr.strip().endswith("error: --task: unknown task 'mrcp' (known: squad, "
                                                               "cola, sst-2, mrpc, sts-b, qqp, mnli, qnli, rte, wnli)")
    assert FinetuneConfig("sst2", "d", "tfrecord").output_dir == "finetune-sst2"  # any spelling task_named takes


def test_train_and_finetune_name_a_config_of_the_wrong_kind():
    """trainer.finetune({...}) and trainer.finetune(TrainConfig(...)) were AttributeErrors from inside the run,
    trainer.train(FinetuneConfig(...)) a DataError about the records it had found no training split in."""
    import trainer

    finetune = FinetuneConfig("MRPC", "d", "tfrecord")
    for function, config, message in [
            (trainer.finetune, {"task": "mrpc"}, "trainer.finetune's config must be a FinetuneConfig, got dict "
                                                 "{'task': 'mrpc'}"),
            (trainer.finetune, TrainConfig("tfrecord"),
             "trainer.finetune's config must be a FinetuneConfig, got TrainConfig TrainConfig(format='tfrecord', "
             "data=None, model='tiny', b..."),
            (trainer.train, finetune, "trainer.train's config must be a TrainConfig, got FinetuneConfig "
                                      "FinetuneConfig(task='MRPC', data='d', format='tfrecord', ...")]:
        with pytest.raises(UsageError) as raised:
            function(config)
        assert str(raised.value) == message


def test_epochs_of_more_steps_than_a_run_can_take_are_refused():
    """--epochs 1e30 over 160 records was an OverflowError traceback from JAX at the first step."""
    from trainer.finetuning import epoch_steps

    config = FinetuneConfig("MRPC", "d", "tfrecord", epochs=1e30)
    with pytest.raises(UsageError) as raised:
        epoch_steps(config, 160, 4)
    assert str(raised.value) == ("--epochs 1e+30: 39999999999999998543585179860992 steps of global batch 4, more "
                                 "than the 2147483647 a run can take")
    assert epoch_steps(dataclasses.replace(config, epochs=2.0), 160, 4) == 80
    # A --warmup in steps beyond them is refused as it is beyond --steps: the run never left its warmup.
    with pytest.raises(UsageError) as raised:
        epoch_steps(dataclasses.replace(config, epochs=2.0, warmup=100), 160, 4)
    assert str(raised.value) == "--warmup 100 exceeds the 80 steps of --epochs 2.0 (global batch 4)"
    assert epoch_steps(dataclasses.replace(config, epochs=2.0, warmup=80), 160, 4) == 80


def test_path_objects_are_kept_as_strings(shared_dir):
    """A pathlib.Path --init-checkpoint was a TypeError traceback ('PosixPath' + 'str') when the checkpoint was
    sniffed: the run joins and compares strings."""
    import pathlib

    from trainer.checkpoint import read

    hf_tiny = shared_dir / "fixtures" / "checkpoints" / "hf_tiny"
    config = FinetuneConfig("MRPC", pathlib.Path("d"), "tfrecord", init_checkpoint=hf_tiny)
    assert (config.data, config.init_checkpoint) == ("d", str(hf_tiny))
    assert read(config.init_checkpoint).kind == "hf"
    assert TrainConfig("tfrecord", checkpoint_dir=pathlib.Path("ckpt")).checkpoint_dir == "ckpt"


def test_an_empty_path_is_refused_naming_its_field(capsys):
    """"" was taken for a flag not given (--checkpoint-dir "" saved nothing, exit 0; --eval-file "" scored against
    the manifest's source) or for the current directory (--data "": the output "inside the input ")."""
    finetune = {"task": "MRPC", "data": "d", "format": "tfrecord"}
    for kind, required, name in [(TrainConfig, {"format": "ofrecord"}, "checkpoint_dir"),
                                 (TrainConfig, {"format": "ofrecord"}, "data"), (FinetuneConfig, finetune, "eval_file"),
                                 (FinetuneConfig, finetune, "init_checkpoint"), (FinetuneConfig, finetune, "data")]:
        with pytest.raises(UsageError) as raised:
            kind(**{**required, name: ""})
        assert str(raised.value) == f"{kind.__name__}.{name}: an empty path names no file or directory"
    assert main(["finetune", "--task", "mrpc", "--data", "", "--format", "tfrecord"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "trainer: error: --data: an empty path names no file or directory"]


@pytest.mark.parametrize("value", ["0", "-1"])
def test_keep_checkpoints_must_be_positive(value, capsys):
    """0 and -1 were taken and kept every checkpoint, which --help never said (run_state.save prunes only
    for a positive count)."""
    with pytest.raises(SystemExit) as exit_:
        main(["--format", "tfrecord", "--data", "nowhere", "--keep-checkpoints", value])
    assert exit_.value.code == 2 and capsys.readouterr().err.strip().splitlines() == [
        f"trainer: error: argument --keep-checkpoints: expected a positive integer, got {value}"]


@pytest.mark.parametrize("argv, said", [
    (["--keep-checkpoints", "9"], "--keep-checkpoints 9: no checkpoints are written without --checkpoint-dir"),
    (["--eval-steps", "3"], "--eval-steps 3: nothing is evaluated without --eval-every"),
    (["--steps", "20", "--eval-every", "50"], "--eval-every 50: past --steps 20, nothing would be evaluated")])
def test_a_flag_the_run_would_not_read_is_refused(argv, said, capsys):
    """Checkpoint flags without --checkpoint-dir, --eval-steps without --eval-every and an --eval-every past the
    last step were taken and never read; the defaults pass (not told apart from a flag given its default)."""
    assert main(["--format", "tfrecord", "--data", "nowhere", *argv]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"trainer: error: {said}"]


@pytest.mark.heavy
def test_train_and_finetune_in_python_give_the_cli_summaries(shared_dir, golden_dir, tmp_path, capsys):
    """Pretraining the tiny model on the golden records, then fine-tuning MRPC (Google's records) from
    that checkpoint: in Python and through the CLI, the same summary (losses, steps, scores) but for the
    clock's figures."""
    pytest.importorskip("tensorflow")
    import trainer
    from test_trainer_data import golden_records
    from trainer_checks import bert_config

    records, config = str(golden_records(golden_dir, tmp_path / "records")), bert_config(tmp_path, 0.0)
    random.seed(7)
    np.random.seed(7)
    expected_draws = (random.random(), np.random.random())
    random.seed(7)
    np.random.seed(7)
    summary = trainer.train(TrainConfig("tfrecord", data=records, bert_config=config, steps=3, batch_size=4,
                                        log_every=1, checkpoint_dir=str(tmp_path / "ckpt"), quiet=True))
    # the caller's generators as they were (the run seeds them with --seed: they were left reseeded)
    assert (random.random(), np.random.random()) == expected_draws
    assert isinstance(summary, trainer.TrainSummary) and summary.steps == 3
    cli = cli_summary(capsys, "--format", "tfrecord", "--data", records, "--bert-config", config, "--steps", "3",
                      "--batch-size", "4", "--log-every", "1", "--checkpoint-dir", str(tmp_path / "ckpt-cli"),
                      with_timings=True)
    # A second run in one process counts its start from its call, not from the process's start.
    assert cli["startup"]["from"] == "train() call" and cli["seconds_to_first_step"] > 0, cli["startup"]
    assert {k: v for k, v in summary.to_dict().items() if k not in TIMINGS} == {
        k: v for k, v in cli.items() if k not in TIMINGS}

    golden = shared_dir / "fixtures" / "finetune" / "glue" / "MRPC_train_seq128.tfrecord"
    data = tmp_path / "mrpc"
    data.mkdir()
    for split in ("train", "eval"):
        formats.write_records(data / f"{split}.tf_record", list(formats.read_records(golden))[:16], "tfrecord",
                              kind=GLUE)
    random.seed(7)
    np.random.seed(7)
    tuned = trainer.finetune(FinetuneConfig("mrpc", str(data), "tfrecord", init_checkpoint=str(tmp_path / "ckpt"),
                                            steps=4, batch_size=8, log_every=2,
                                            output_dir=str(tmp_path / "out"), quiet=True))
    assert isinstance(tuned, trainer.FinetuneSummary) and tuned.evaluation["examples"] == 16
    assert (random.random(), np.random.random()) == expected_draws  # seeded before finetune, below
    cli = cli_summary(capsys, "finetune", "--task", "mrpc", "--data", str(data), "--format", "tfrecord",
                      "--init-checkpoint", str(tmp_path / "ckpt-cli"), "--steps", "4", "--batch-size", "8",
                      "--log-every", "2", "--output-dir", str(tmp_path / "out-cli"))
    expected = {k: v for k, v in tuned.to_dict().items() if k not in TIMINGS}
    assert expected == dict(cli, init_checkpoint=expected["init_checkpoint"])


def test_a_resume_of_another_model_names_the_field_that_differs():
    """--resume with another --bert-config printed both whole model dicts in its one line."""
    from trainer.run_state import check_compatible

    model = {"vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}
    saved = {"model": model, "optimizer": "lamb"}
    with pytest.raises(UsageError) as raised:
        check_compatible("ckpt/ckpt-2", saved, {"model": {**model, "hidden_size": 128}, "optimizer": "lamb"}, {}, {})
    assert str(raised.value) == "ckpt/ckpt-2: checkpoint was written with model.hidden_size=64, this run has 128"
    with pytest.raises(UsageError) as raised:
        check_compatible("ckpt/ckpt-2", saved, {"model": model, "optimizer": "adam"}, {}, {})
    assert str(raised.value) == "ckpt/ckpt-2: checkpoint was written with optimizer='lamb', this run has 'adam'"


@pytest.mark.parametrize("config, field", [(TrainConfig, "data"), (TrainConfig, "init_checkpoint"),
                                           (TrainConfig, "bert_config"), (FinetuneConfig, "data"),
                                           (FinetuneConfig, "init_checkpoint"), (FinetuneConfig, "eval_file"),
                                           (FinetuneConfig, "output_dir")])
def test_a_config_refuses_credentials_in_a_url_when_built(config, field):
    """Only --checkpoint-dir's URL was checked when the config was built: `TrainConfig(data="s3://KEY:S3cret@b/r")`
    was accepted, and its repr (a caller's log line, a traceback's locals) printed the secret until train() refused
    the path. Refused when built now, with the command line's line, as bertprep's options are."""
    given = {"task": "squad", "data": "records"} if config is FinetuneConfig else {}
    with pytest.raises(UsageError) as refused:
        config(format="tfrecord", **{**given, field: "s3://AKIAABCDEFGHIJKLMNOP:S3cret@bucket/x"})
    assert str(refused.value).startswith("s3://bucket/x: credentials in a URL are refused"), refused.value
    assert "S3cret" not in str(refused.value) and "AKIA" not in str(refused.value)


def test_an_error_found_while_a_run_starts_names_the_config_field_for_a_python_caller(tmp_path, capsys):
    """Only the checks made when a config is built named its fields: trainer.finetune's refusal of an earlier run's
    checkpoint_dir said `--checkpoint-dir ck: holds 1 checkpoint(s) ...` to a caller who set no flag."""
    import trainer

    (tmp_path / "ck" / "ckpt-00000002").mkdir(parents=True)
    for name in ("state.npz", "state.json"):  # listed as a complete checkpoint: refused before it is read
        (tmp_path / "ck" / "ckpt-00000002" / name).write_bytes(b"x")
    fields = {"task": "mrpc", "format": "tfrecord", "data": str(tmp_path / "glue"), "steps": 1,
              "init_checkpoint": str(tmp_path / "init"), "checkpoint_dir": str(tmp_path / "ck")}
    with pytest.raises(UsageError) as raised:
        trainer.finetune(FinetuneConfig(**fields))
    assert str(raised.value).startswith(f"FinetuneConfig.checkpoint_dir {tmp_path / 'ck'}: holds 1 checkpoint(s) of "
                                        "an earlier run"), raised.value
    argv = ["finetune", *(f"--{name.replace('_', '-')}={value}" for name, value in fields.items())]
    assert main(argv) == 2  # the command line's message is unchanged: the flag
    assert capsys.readouterr().err.startswith(f"trainer: error: --checkpoint-dir {tmp_path / 'ck'}: holds 1 ")
