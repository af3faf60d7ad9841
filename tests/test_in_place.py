"""No output overwrites an input (issue 39): every stage refuses, before anything is touched, an output that is
one of its inputs, lies inside one or holds one, with one line naming both (exit 2). The case that lost data:
`dedup --input X/formatted/part0 --out X/formatted` deleted its own input part, then failed on it."""

import contextlib
import hashlib
import io
import json
import shutil
from pathlib import Path

import pytest

from bertprep.cli import main
from bertprep.errors import UsageError

REFUSED = "the run would overwrite or delete what it reads; write the output elsewhere"


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, err.getvalue().strip()


def tree(root):
    """{relative path: sha256} of every file under root."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(Path(root).rglob("*")) if p.is_file()}


@pytest.fixture
def formatted(tmp_path):
    """X/formatted/part0: a formatted corpus as `bertprep download` writes it."""
    corpus = tmp_path / "X" / "formatted" / "part0"
    corpus.mkdir(parents=True)
    lines = [{"id": str(i), "title": f"t{i}", "text": f"Document {i % 3} says the same words again. " * 5}
             for i in range(6)]
    (corpus / "part0.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (corpus / "manifest.json").write_text(json.dumps({"files": {}}) + "\n")
    return corpus


def test_dedup_into_its_inputs_parent_is_refused_and_the_input_survives(formatted):
    before = tree(formatted.parent)
    code, line = run("dedup", "--input", formatted, "--out", formatted.parent, "--quiet")
    assert code == 2 and line == (f"bertprep dedup: error: --out {formatted.parent} holds the input {formatted}: "
                                  f"{REFUSED}"), line
    assert tree(formatted.parent) == before


@pytest.mark.parametrize("where", ["same", "inside", "holds"])
def test_every_text_stage_refuses_an_output_over_its_input(formatted, tmp_path, golden_dir, where):
    shards = tmp_path / "shards"
    shards.mkdir()
    shutil.copy(golden_dir / "corpus.txt", shards / "corpus.txt")
    out_for = {"same": lambda path: path, "inside": lambda path: Path(path) / "out",
               "holds": lambda path: Path(path).parent}
    vocab = golden_dir / "vocab.txt"
    cases = {
        "dedup": (formatted, lambda out: ["dedup", "--input", formatted, "--out", out, "--quiet"]),
        "shard": (formatted, lambda out: ["shard", "--input", formatted, "--out", out, "--quiet"]),
        "vocab": (formatted, lambda out: ["vocab", "--input", formatted, "--out", out, "--quiet"]),
        "create": (shards, lambda out: ["create", "--input", shards, "--vocab", vocab, "--out", out, "--quiet"]),
        "convert": (shards, lambda out: ["convert", "--to", "ofrecord", shards, out]),
    }
    before = tree(tmp_path)
    for stage, (source, argv) in cases.items():
        if where != "inside" and stage == "create":
            continue  # create writes only OUT/<params>/<corpus>/: what is compared is that, never the input or above
        code, line = run(*argv(out_for[where](source)))
        assert code == 2 and line.endswith(REFUSED) and "the input" in line, (stage, line)
    assert tree(tmp_path) == before


def test_pack_and_finetuning_data_refuse_an_output_over_their_input(tmp_path, golden_dir, shared_dir):
    code, _ = run("create", "--input", golden_dir / "corpus.txt", "--vocab", golden_dir / "vocab.txt", "--out",
                  tmp_path / "records", "--quiet", "--format", "tfrecord")
    assert code == 0
    records = next(p.parent for p in (tmp_path / "records").rglob("manifest.json"))
    before = tree(tmp_path)
    code, line = run("pack", records, "--out", records / "packed", "--quiet")
    assert code == 2 and line.endswith(REFUSED), line
    squad = tmp_path / "squad"
    squad.mkdir()
    shutil.copy(shared_dir / "fixtures/finetune/squad/v1.1/dev-v1.1.json", squad / "dev-v1.1.json")
    before = tree(tmp_path)
    code, line = run("create-squad", "--input", squad / "dev-v1.1.json", "--vocab", golden_dir / "vocab.txt",
                     "--out", squad)
    assert code == 2 and line.endswith(REFUSED), line
    glue = shared_dir / "fixtures/finetune/glue/MRPC"
    code, line = run("create-glue", "--task", "MRPC", "--data-dir", glue, "--vocab", golden_dir / "vocab.txt",
                     "--out", glue / "records")
    assert code == 2 and line.endswith(REFUSED), line
    assert tree(tmp_path) == before


def test_the_trainers_outputs_are_refused_over_its_data(tmp_path):
    from trainer.config import FinetuneConfig, TrainConfig

    data = tmp_path / "records"
    with pytest.raises(UsageError, match=f"^TrainConfig.checkpoint_dir {data}/ck is inside the input {data}: "):
        TrainConfig(format="tfrecord", data=str(data), checkpoint_dir=str(data / "ck"))
    with pytest.raises(UsageError, match=f"^FinetuneConfig.output_dir {tmp_path} holds the input {data}: "):
        FinetuneConfig(task="mrpc", data=str(data), format="tfrecord", output_dir=str(tmp_path))
    TrainConfig(format="tfrecord", data=str(data), checkpoint_dir=str(tmp_path / "ck"))  # apart: fine


def test_the_trainers_outputs_are_refused_over_the_checkpoint_it_starts_from(tmp_path):
    """A --checkpoint-dir holding the --init-checkpoint replaced it with the run's own checkpoints (exit 0)."""
    from trainer.config import FinetuneConfig, TrainConfig

    start = tmp_path / "ck" / "ckpt-00000003"
    with pytest.raises(UsageError, match=f"^TrainConfig.checkpoint_dir {start.parent} holds the input {start}: "):
        TrainConfig(format="tfrecord", data=str(tmp_path / "records"), init_checkpoint=str(start),
                    checkpoint_dir=str(start.parent))
    for output in ("output_dir", "checkpoint_dir"):
        with pytest.raises(UsageError, match=f"^FinetuneConfig.{output} {start} is the input {start}: "):
            FinetuneConfig(task="mrpc", data=str(tmp_path / "records"), format="tfrecord",
                           init_checkpoint=str(start), **{output: str(start)})
    out = tmp_path / "out"
    with pytest.raises(UsageError, match=f"^FinetuneConfig.output_dir {out} holds the input {out}/dev.json: "):
        FinetuneConfig(task="squad", data=str(tmp_path / "records"), format="tfrecord",
                       eval_file=str(out / "dev.json"), output_dir=str(out))
    TrainConfig(format="tfrecord", data=str(tmp_path / "records"), init_checkpoint=str(start),
                checkpoint_dir=str(tmp_path / "ck2"))  # apart: fine


def test_checkpoint_run_and_convert_refuse_to_write_over_what_they_read(shared_dir, tmp_path):
    from trainer.checkpoint.cli import main as checkpoint_main

    hf_tiny = tmp_path / "hf_tiny"
    shutil.copytree(shared_dir / "fixtures" / "checkpoints" / "hf_tiny", hf_tiny)
    inputs = tmp_path / "inputs.jsonl"
    shutil.copyfile(shared_dir / "fixtures" / "checkpoints" / "inputs.jsonl", inputs)
    before = tree(tmp_path)
    for argv, line in [(["run", hf_tiny, "--inputs", inputs, "--out", inputs], f"--out {inputs} is the input"),
                       (["run", hf_tiny, "--inputs", inputs, "--out", hf_tiny / "model.safetensors"],
                        f"--out {hf_tiny}/model.safetensors is inside the input {hf_tiny}"),
                       (["convert", hf_tiny, hf_tiny / "hf", "--to", "hf"], f"the output {hf_tiny}/hf is inside")]:
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = checkpoint_main([str(a) for a in argv])
        printed = err.getvalue()
        assert code == 2 and printed.startswith(f"trainer checkpoint: error: {line}"), printed
        assert printed.endswith(f"{REFUSED}\n") and printed.count("\n") == 1, printed
    assert tree(tmp_path) == before


@pytest.mark.parametrize("command", ["pretrain", "finetune"])
def test_a_checkpoint_dir_of_an_earlier_run_is_refused_without_resume(tmp_path, command):
    """Pretraining into a --checkpoint-dir of an earlier run mixed their checkpoints (a later --resume took
    the newest of either); fine-tuning keeps one checkpoint, so an earlier ckpt of a higher step deleted its
    own. Refused before anything is read or trained; pretraining continues it with --resume."""
    from trainer import FinetuneConfig, TrainConfig, finetune, train

    earlier = tmp_path / "ck" / "ckpt-00000005"
    earlier.mkdir(parents=True)
    (earlier / "state.json").write_text("{}")
    before = tree(tmp_path)
    if command == "pretrain":
        run, config = train, TrainConfig(format="tfrecord", data=str(tmp_path / "none"),
                                          checkpoint_dir=str(earlier.parent))
        remedy = "give TrainConfig.resume to continue that run, or name a new folder"
    else:
        run, config = finetune, FinetuneConfig(task="mrpc", data=str(tmp_path / "none"), format="tfrecord",
                                               output_dir=str(tmp_path / "out"), checkpoint_dir=str(earlier.parent))
        remedy = "name a new folder"
    with pytest.raises(UsageError) as refused:
        run(config)
    # a Python caller reads its config's fields where the command line names flags (options.run_errors_name_fields)
    assert str(refused.value) == (f"{type(config).__name__}.checkpoint_dir {earlier.parent}: holds 1 checkpoint(s) "
                                  "of an earlier run "
                                  f"(the newest {earlier}): {remedy}; this run's checkpoints would be mixed with "
                                  "them and the oldest deleted")
    assert tree(tmp_path) == before


def test_a_checkpoint_dir_of_a_fine_tuning_is_refused_with_advice_that_fits_it(tmp_path):
    """Pretraining without --resume into a `trainer finetune` --checkpoint-dir said "give --resume to continue
    that run", which --resume then refused ("is a fine-tuned checkpoint ... not a pretraining run's"). It now
    says what fits a fine-tuned model, before anything is read."""
    from trainer import TrainConfig, train

    earlier = tmp_path / "ck" / "ckpt-00000003"
    earlier.mkdir(parents=True)
    (earlier / "state.json").write_text(json.dumps({"step": 3, "settings": {"task": "MRPC"}}))
    before = tree(tmp_path)
    with pytest.raises(UsageError) as refused:
        train(TrainConfig(format="tfrecord", data=str(tmp_path / "none"), checkpoint_dir=str(earlier.parent)))
    assert str(refused.value) == (f"TrainConfig.checkpoint_dir {earlier.parent}: holds 1 checkpoint(s) of an "
                                  f"earlier run (the newest {earlier}): it is a fine-tuned checkpoint (trainer "
                                  "finetune --task MRPC), which TrainConfig.resume does not continue: name a new "
                                  "folder (TrainConfig.init_checkpoint of "
                                  "it starts pretraining from its encoder); this run's checkpoints would be mixed "
                                  "with them and the oldest deleted")
    assert tree(tmp_path) == before


def test_validates_report_files_are_refused_over_what_it_reads(golden_dir, tmp_path):
    """--json REPORT and --plot PNG replaced the records they checked (exit 0, "SOUND"); and `--json q1 q2`,
    --json taking q1 for its file name, replaced the dataset q1 with q2's report."""
    for name in ("a.tfrecord", "b.tfrecord", "dir/x.tfrecord"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        shutil.copyfile(golden_dir / "G1.tfrecord", tmp_path / name)
    before = tree(tmp_path)
    a, b, folder = tmp_path / "a.tfrecord", tmp_path / "b.tfrecord", tmp_path / "dir"
    for argv, line in [((a, "--json", a), f"--json {a} is the input {a}: {REFUSED}"),
                       ((a, "--plot", a), f"--plot {a} is the input {a}: {REFUSED}"),
                       ((folder, "--plot", folder / "x.png"), f"--plot {folder}/x.png is inside the input {folder}: "
                                                              f"{REFUSED}"),
                       (("--json", a, b), f"--json {a}: exists and is not a report validate wrote: it would be "
                                          "replaced; name a new file (--json without a value prints the report on "
                                          "stdout)")]:
        assert run("validate", *argv, "--quiet") == (2, f"bertprep validate: error: {line}")
    assert tree(tmp_path) == before
    report = tmp_path / "report.json"
    assert run("validate", a, "--json", report, "--quiet")[0] == 0
    assert run("validate", a, "--json", report, "--quiet")[0] == 0  # its own report, written again: fine
    assert json.loads(report.read_text())["sound"] is True


def test_validates_json_report_is_refused_over_a_json_that_is_no_report(golden_dir, tmp_path):
    """--json checked only that an existing file began with "{": a stage's manifest.json (here another records
    tree's) or a SQuAD file given as REPORT was replaced by the report, exit 0."""
    a = tmp_path / "a.tfrecord"
    shutil.copyfile(golden_dir / "G1.tfrecord", a)
    others = {"manifest.json": '{\n "files": {},\n "stage": "create"\n}\n',
              "dev.json": '{"data": [], "version": "1.1"}'}
    for name, text in others.items():
        (tmp_path / name).write_text(text)
        assert run("validate", a, "--json", tmp_path / name, "--quiet") == (
            2, f"bertprep validate: error: --json {tmp_path / name}: exists and is not a report validate wrote: it "
               "would be replaced; name a new file (--json without a value prints the report on stdout)")
        assert (tmp_path / name).read_text() == text


def test_urls_are_compared_by_bucket_and_key():
    from bertprep.options import refuse_overlap

    with pytest.raises(UsageError, match="holds the input"):
        refuse_overlap("s3://b/work/", ["s3://b/work/formatted/part0"])
    refuse_overlap("s3://b/work2", ["s3://b/work/formatted"])  # a common prefix of characters is no overlap
    refuse_overlap("gs://b/work", ["s3://b/work/formatted"])  # another store
