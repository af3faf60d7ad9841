"""bertprep create: reference parity, determinism, resume after SIGKILL, bad input, inspect/convert."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import bertprep
from bertprep import formats
from bertprep.cli import main
from bertprep.corpus import read_text, tokenize_corpus
from bertprep.formats.schemas import PRETRAINING
from bertprep.instances import InstanceParams, MaskingVocab, create_instances
from bertprep.tokenization import LineTokenizer, load_vocab

GOLDEN = {  # name: (seq, pred, dupe_factor, seed, whole_word_mask), from fixtures/README.md
    "G1": (128, 20, 2, 12345, False),
    "G2": (512, 80, 1, 12345, False),
    "G3": (128, 20, 2, 1, True),
}


def golden_argv(golden_dir, out, name, *extra):
    seq, pred, dupe, seed, wwm = GOLDEN[name]
    argv = ["create", "--input", str(golden_dir / "corpus.txt"), "--vocab", str(golden_dir / "vocab.txt"),
            "--out", str(out), "--seq", str(seq), "--pred", str(pred), "--dupe-factor", str(dupe),
            "--seed", str(seed), "--quiet", *extra]
    return argv + (["--whole-word-mask"] if wwm else [])


def output_files(root):
    """{relative path: bytes} of every file under root, manifest excluded."""
    root = Path(root)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != "manifest.json"}


def only_records_dir(out):
    (manifest,) = Path(out).rglob("manifest.json")
    return manifest.parent


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_sets_byte_identical_in_both_formats(golden_dir, tmp_path, name):
    assert main(golden_argv(golden_dir, tmp_path, name)) == 0
    records = only_records_dir(tmp_path)
    assert ((records / "tfrecord/training/corpus.tfrecord").read_bytes()
            == (golden_dir / f"{name}.tfrecord").read_bytes())
    assert (records / "ofrecord/training/part-0").read_bytes() == (golden_dir / f"{name}.ofrecord").read_bytes()
    manifest = json.loads((records / "manifest.json").read_text())
    entry = manifest["files"]["ofrecord/training/part-0"]
    assert entry["instances"] == sum(1 for _ in formats.iter_payloads(golden_dir / f"{name}.ofrecord"))
    assert entry["bytes"] == (golden_dir / f"{name}.ofrecord").stat().st_size
    assert manifest["vocab"]["sha256"] == "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"


def test_pure_python_and_default_path_give_the_same_instances(golden_dir):
    vocab = load_vocab(golden_dir / "vocab.txt")
    corpus = tokenize_corpus(read_text(golden_dir / "corpus.txt"), LineTokenizer(vocab))
    masking = MaskingVocab.from_vocab(vocab)
    params = InstanceParams(128, 20, 1, 0.1, 0.15, True)
    python = create_instances(corpus, params, masking, 7, use_native=False)
    default = create_instances(corpus, params, masking, 7)
    for field in python.__dataclass_fields__:
        assert (getattr(python, field) == getattr(default, field)).all(), field


def test_instances_are_held_compactly(golden_dir):
    vocab = load_vocab(golden_dir / "vocab.txt")
    corpus = tokenize_corpus(read_text(golden_dir / "corpus.txt"), LineTokenizer(vocab))
    instances = create_instances(corpus, InstanceParams(128, 20, 2), MaskingVocab.from_vocab(vocab), 12345)
    assert instances.nbytes / len(instances) <= 400


def fail_after_writing(monkeypatch, module, name, message):
    """Make `module.name`, a stage's function of one shard, write its shard and then raise DataError(`message`): a
    run whose other worker failed while this shard's result was not yet taken, played in one process."""
    from bertprep.errors import DataError

    real = getattr(module, name)

    def written_then_another_fails(task):
        real(task)
        raise DataError(message)

    monkeypatch.setattr(module, name, written_then_another_fails)


def write_shards(corpus, directory, count, copies=1):
    """`corpus` cut into `count` shards at document boundaries (each repeated `copies` times), under training/."""
    documents = Path(corpus).read_text(encoding="utf-8").strip("\n").split("\n\n")
    name = Path(directory).name
    shard_dir = Path(directory) / "training"
    shard_dir.mkdir(parents=True)
    for i in range(count):
        (shard_dir / f"{name}_training_{i}.txt").write_text("\n\n".join(documents[i::count] * copies) + "\n",
                                                            encoding="utf-8")
    return Path(directory)


def test_same_bytes_whatever_the_worker_count(golden_dir, tmp_path):
    shards = write_shards(golden_dir / "corpus.txt", tmp_path / "golden", 4)
    results = []
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        argv = ["create", "--input", str(shards), "--vocab", str(golden_dir / "vocab.txt"), "--out", str(out),
                "--dupe-factor", "1", "--workers", str(workers), "--quiet"]
        assert main(argv) == 0
        results.append(output_files(out))
    assert len(results[0]) == 8 and results[0] == results[1]
    assert {p.split("/")[-1] for p in results[0] if "ofrecord" in p} == {"part-0", "part-1", "part-2", "part-3"}


def test_splits_and_seed_per_shard(golden_dir, tmp_path):
    shards = write_shards(golden_dir / "corpus.txt", tmp_path / "golden", 2)
    (shards / "test").mkdir()
    (shards / "training" / "golden_training_1.txt").rename(shards / "test" / "golden_test_0.txt")
    argv = ["create", "--input", str(shards), "--vocab", str(golden_dir / "vocab.txt"), "--out", str(tmp_path / "o"),
            "--dupe-factor", "1", "--quiet", "--seed-per-shard"]
    assert main(argv) == 0
    records = only_records_dir(tmp_path / "o")
    assert records.name == "golden"
    assert sorted(output_files(records)) == [
        "ofrecord/test/part-0", "ofrecord/training/part-0",
        "tfrecord/test/golden_test_0.tfrecord", "tfrecord/training/golden_training_0.tfrecord",
    ]
    seeds = {e["seed"] for e in json.loads((records / "manifest.json").read_text())["files"].values()}
    assert len(seeds) == 2 and 12345 not in seeds


def test_rerun_skips_complete_shards_and_redoes_changed_ones(golden_dir, tmp_path, capsys):
    shards = write_shards(golden_dir / "corpus.txt", tmp_path / "golden", 3)
    argv = ["create", "--input", str(shards), "--vocab", str(golden_dir / "vocab.txt"), "--out", str(tmp_path / "o"),
            "--dupe-factor", "1", "--json", "--workers", "1"]
    assert main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["shards_created"] == 3
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["shards_created"] == 0
    changed = shards / "training" / "golden_training_1.txt"
    changed.write_text(changed.read_text(encoding="utf-8") + "\nOne more document.\nWith two sentences.\n",
                       encoding="utf-8")
    assert main(argv) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["shards_created"] == 1 and again["instances"]["training"] > first["instances"]["training"]


def test_records_of_a_create_that_did_not_finish_are_refused_by_their_readers(golden_dir, tmp_path, capsys):
    """A create that stopped after some shards (here a bad third shard; a SIGKILL alike) left a manifest
    listing the shards done, which pack packed and validate called SOUND, exit 0. The manifest says "writing"
    until the run's last save, and every reader refuses it."""
    training = tmp_path / "in" / "training"
    training.mkdir(parents=True)
    text = (golden_dir / "corpus.txt").read_text(encoding="utf-8")[:20000]
    for number in (0, 1):
        (training / f"c_training_{number}.txt").write_text(text, encoding="utf-8")
    (training / "c_training_2.txt").write_text("\x01\n")
    argv = ["create", "--input", str(tmp_path / "in"), "--vocab", str(golden_dir / "vocab.txt"), "--out",
            str(tmp_path / "o"), "--seq", "64", "--pred", "10", "--workers", "1", "--quiet"]
    assert main(argv) == 1
    (manifest,) = (tmp_path / "o").rglob("manifest.json")
    assert "writing" in json.loads(manifest.read_text()) and len(json.loads(manifest.read_text())["files"]) == 4
    capsys.readouterr()
    assert main(["pack", str(manifest.parent), "--out", str(tmp_path / "packed"), "--quiet"]) == 1
    assert capsys.readouterr().err.strip().endswith(f"{manifest}: writing: the create run that writes these records "
                                                    "has not finished (killed, or still running): rerun it to "
                                                    "complete them")
    assert not (tmp_path / "packed").exists()
    assert main(["validate", str(manifest.parent), "--quiet"]) == 1
    capsys.readouterr()
    (training / "c_training_2.txt").write_text(text, encoding="utf-8")
    assert main(argv) == 0
    assert "writing" not in json.loads(manifest.read_text())
    assert main(["pack", str(manifest.parent), "--out", str(tmp_path / "packed"), "--quiet"]) == 0


def cli(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "bertprep", *args], capture_output=True, text=True, **kwargs)


@pytest.mark.heavy
def test_sigkill_at_any_moment_then_rerun_ends_byte_identical(shared_dir, tmp_path):
    bench = shared_dir / "fixtures" / "bench" / "wt2.txt"
    vocab = shared_dir / "fixtures" / "golden" / "vocab.txt"
    write_shards(bench, tmp_path / "wt2", 6, copies=4)
    args = ["create", "--input", str(tmp_path / "wt2"), "--vocab", str(vocab), "--dupe-factor", "5", "--workers", "2",
            "--quiet"]
    start = time.monotonic()
    assert cli(*args, "--out", str(tmp_path / "clean")).returncode == 0
    clean_seconds = time.monotonic() - start
    expected = output_files(tmp_path / "clean")
    out = tmp_path / "killed"
    killed_mid_run = 0
    for fraction in (0.1, 0.3, 0.5, 0.7, 0.85):  # of the clean run's duration: start-up, mid-run, near the end
        delay = fraction * clean_seconds
        proc = subprocess.Popen([sys.executable, "-m", "bertprep", *args, "--out", str(out)], start_new_session=True)
        time.sleep(delay)
        if proc.poll() is None:
            killed_mid_run += 1
            os.killpg(proc.pid, signal.SIGKILL)  # the whole group: parent and workers
        proc.wait()
        for path, data in output_files(out).items():
            if ".partial" not in Path(path).parts:  # staging, where no reader globs
                assert data == expected[path], f"{path} is under its final name but incomplete"
        for manifest in out.rglob("manifest.json"):  # only the run's last save takes "writing" out
            assert "writing" in json.loads(manifest.read_text()) or output_files(out) == expected
        assert not [p for p in out.rglob(".partial") if p.parent.name in ("training", "test")]
    assert killed_mid_run >= 3, f"the clean run took {clean_seconds:.1f}s: too short to kill mid-run"
    result = cli(*args, "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert output_files(out) == expected
    assert not list(out.rglob(".partial"))


def children_of(pid):
    """The pids whose parent is `pid` (Linux's /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:  # ended meanwhile
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


@pytest.mark.heavy
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel's parent-death signal is Linux's")
def test_the_workers_end_with_a_killed_run_and_print_nothing(shared_dir, tmp_path):
    """SIGKILL to the run alone (not its group): its workers went on with their tasks, then each printed a
    BrokenPipeError traceback; now the kernel ends them with it."""
    write_shards(shared_dir / "fixtures" / "bench" / "wt2.txt", tmp_path / "wt2", 6, copies=4)
    proc = subprocess.Popen([sys.executable, "-m", "bertprep", "create", "--input", str(tmp_path / "wt2"), "--vocab",
                             str(shared_dir / "fixtures" / "golden" / "vocab.txt"), "--dupe-factor", "5", "--workers",
                             "2", "--quiet", "--out", str(tmp_path / "out")],
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    while len(workers := children_of(proc.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(workers) >= 2 and proc.poll() is None, "the run ended before its workers were seen"
    time.sleep(0.5)  # at work on their first tasks
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while (alive := [w for w in workers if is_running(w)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    for worker in alive:  # not left running after the test
        os.kill(worker, signal.SIGKILL)
    assert not alive, f"workers {alive} outlived the killed run"
    assert "Traceback" not in proc.stderr.read()


def is_running(pid):
    """Whether `pid` is a process that has not ended (a zombie, ended and not yet reaped, has)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def with_default_sigint():
    """Ctrl-C as at a terminal: an ignored SIGINT is inherited through exec, and the test process may
    have been left ignoring it (a pool or cluster earlier in this xdist worker), in which case Python
    keeps it ignored and the run would never see the interrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.heavy
def test_ctrl_c_stops_workers_and_exits_cleanly(shared_dir, tmp_path):
    bench = shared_dir / "fixtures" / "bench" / "wt2.txt"
    vocab = shared_dir / "fixtures" / "golden" / "vocab.txt"
    shards = tmp_path / "wt2" / "training"
    shards.mkdir(parents=True)
    for i in range(16):  # long enough to be mid-run when the first shard lands
        (shards / f"wt2_training_{i}.txt").write_bytes(bench.read_bytes() * 2)
    out = tmp_path / "o"
    proc = subprocess.Popen(
        [sys.executable, "-m", "bertprep", "create", "--input", str(tmp_path / "wt2"), "--vocab", str(vocab),
         "--out", str(out), "--workers", "2", "--quiet"],
        stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=with_default_sigint,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(out.rglob("*.tfrecord")):
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert "interrupted" in stderr and "Traceback" not in stderr
    assert not list(out.rglob(".partial"))
    assert len(list(out.rglob("*.tfrecord"))) < 16


def test_a_ctrl_c_that_a_finalizer_swallows_still_exits_130():
    """Python loses a KeyboardInterrupt raised inside a finalizer ("Exception ignored"): the command
    must still end as interrupted, not with 0 as if it had finished."""
    script = """if True:
        import os, signal, sys
        from bertprep.errors import run_reporting_errors

        class Finalized:
            def __del__(self):
                os.kill(os.getpid(), signal.SIGINT)  # the interrupt lands inside the finalizer

        def command():
            Finalized()
            return 0

        sys.exit(run_reporting_errors("prog", command))
    """
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            preexec_fn=with_default_sigint)
    assert result.returncode == 130, result.stderr
    assert result.stderr.rstrip().endswith("prog: interrupted")


def test_embedded_default_runs_offline_and_says_so(tmp_path):
    env = {**os.environ, "BERTPREP_WORKDIR": str(tmp_path / "work"), "HF_HUB_OFFLINE": "1"}
    result = cli("create", "--seq", "128", "--pred", "20", "--workers", "1", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "embedded sample corpus" in result.stderr
    # the demo is quiet: eight training shards and a test split, so no warning about the sample itself
    assert "warning" not in result.stderr + result.stdout
    assert result.stdout.startswith("bertprep create: done")
    records = only_records_dir(tmp_path / "work" / "records")
    files = output_files(records)
    assert set(files) == ({f"tfrecord/training/sample_corpus_training_{i}.tfrecord" for i in range(8)}
                          | {f"ofrecord/training/part-{i}" for i in range(8)}
                          | {"tfrecord/test/sample_corpus_test_0.tfrecord", "ofrecord/test/part-0"})
    for split, tf_name, of_name in (("training", "sample_corpus_training_0.tfrecord", "part-0"),
                                    ("test", "sample_corpus_test_0.tfrecord", "part-0")):
        tf_records = list(formats.read_records(records / "tfrecord" / split / tf_name))
        of_records = list(formats.read_records(records / "ofrecord" / split / of_name))
        assert len(tf_records) == len(of_records) > 50
        assert all((a[k] == b[k]).all() for a, b in zip(tf_records, of_records) for k in PRETRAINING.names)


@pytest.fixture
def tiny_inputs(tmp_path, golden_dir):
    vocab = golden_dir / "vocab.txt"
    good = tmp_path / "good.txt"
    good.write_text("A first sentence.\nA second sentence.\n\nAnother document here.\nIt ends.\n", encoding="utf-8")
    return tmp_path, vocab, good


def assert_one_line_error(result, code, *needles):
    assert result.returncode == code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def no_record_files(root):
    return not [p for p in Path(root).rglob("*") if p.is_file() and (p.suffix == ".tfrecord"
                                                                     or p.name.startswith("part-")
                                                                     or ".partial" in p.parts)]


def test_bad_inputs_get_one_line_errors_and_leave_no_records(tiny_inputs):
    tmp, vocab, good = tiny_inputs
    out = tmp / "out"
    base = ["create", "--out", str(out), "--quiet"]

    missing = cli(*base, "--input", str(tmp / "nope.txt"), "--vocab", str(vocab))
    assert_one_line_error(missing, 1, "nope.txt", "not found")

    no_vocab = cli(*base, "--input", str(good), "--vocab", str(tmp / "missing_vocab.txt"))
    assert_one_line_error(no_vocab, 1, "missing_vocab.txt")

    partial_vocab = tmp / "partial_vocab.txt"
    partial_vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n", encoding="utf-8")
    lacking = cli(*base, "--input", str(good), "--vocab", str(partial_vocab))
    assert_one_line_error(lacking, 1, "partial_vocab.txt", "[MASK]")

    latin1 = tmp / "latin1.txt"
    latin1.write_bytes("First line is fine.\nSecond line also.\nThird has caf\xe9 in Latin-1.\n".encode("latin-1"))
    not_utf8 = cli(*base, "--input", str(latin1), "--vocab", str(vocab))
    assert_one_line_error(not_utf8, 1, "latin1.txt:3", "UTF-8")

    blank = tmp / "blank.txt"
    blank.write_text("\n\n   \n", encoding="utf-8")
    empty = cli(*base, "--input", str(blank), "--vocab", str(vocab))
    assert_one_line_error(empty, 1, "blank.txt", "no documents")

    too_many = cli(*base, "--input", str(good), "--vocab", str(vocab), "--seq", "16", "--pred", "14")
    assert_one_line_error(too_many, 2, "--pred 14", "--seq 16")

    unknown = cli(*base, "--input", str(good), "--vocab", str(vocab), "--format", "tfrecord,avro")
    assert_one_line_error(unknown, 2, "--format", "avro")

    assert no_record_files(tmp)
    # and the good input works with the same flags
    assert cli(*base, "--input", str(good), "--vocab", str(vocab)).returncode == 0


@pytest.mark.parametrize("stage", ["create", "tokenize", "shard"])
def test_a_file_two_inputs_name_is_a_usage_error(tiny_inputs, capsys, stage):
    """Named twice (a directory and one of its files, or the same path again), an input was doubled by `shard`
    (its documents twice) and kept once by create and tokenize, without a word; now neither is read."""
    tmp, vocab, good = tiny_inputs
    (tmp / "other.txt").write_text("One more document.\nIt ends too.\n", encoding="utf-8")
    flags = ["--corpus", "c"] if stage == "shard" else ["--vocab", str(vocab)]

    def run(*inputs):
        return main([stage, "--input", *inputs, *flags, "--out", str(tmp / f"out-{stage}"), "--quiet"])

    assert run(str(tmp), str(good)) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"bertprep {stage}: error: --input {good}: named twice (by --input {str(tmp)!r} and by --input "
        f"{str(good)!r}); give each input file once"]
    assert run(str(good), str(tmp / "other.txt"), str(good)) == 2
    assert f"(--input {str(good)!r} given twice)" in capsys.readouterr().err
    assert not (tmp / f"out-{stage}").exists()
    assert run(str(good), str(tmp / "other.txt")) == 0


@pytest.mark.parametrize("stage", ["create", "tokenize", "shard"])
def test_a_file_and_a_link_to_it_are_one_input(tiny_inputs, capsys, stage):
    """A link beside its target (`training/latest.txt -> w_0.txt`, or given as another --input) was read as a
    second file: its documents twice in the output, exit 0. It is the same file named twice."""
    tmp, vocab, good = tiny_inputs
    training = tmp / "tree" / "training"
    training.mkdir(parents=True)
    shutil.copy(good, training / "w_0.txt")
    (training / "latest.txt").symlink_to("w_0.txt")
    (tmp / "link.txt").symlink_to(good)
    flags = ["--corpus", "c"] if stage == "shard" else ["--vocab", str(vocab)]

    def run(*inputs):
        return main([stage, "--input", *inputs, *flags, "--out", str(tmp / f"out-{stage}"), "--quiet"])

    assert run(str(good), str(tmp / "link.txt")) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"bertprep {stage}: error: --input {tmp / 'link.txt'}: the same file as {good} (by --input {str(good)!r}), "
        "through a link; give each input file once"]
    if stage != "shard":  # shard reads a corpus folder's files, not a shard tree's
        assert run(str(tmp / "tree")) == 2
        assert capsys.readouterr().err.strip().splitlines() == [
            f"bertprep {stage}: error: --input {training / 'w_0.txt'}: the same file as {training / 'latest.txt'} "
            f"(by --input {str(tmp / 'tree')!r}), through a link; give each input file once"]
    assert not (tmp / f"out-{stage}").exists()


def test_a_bad_shard_among_good_ones_fails_before_anything_is_written(tiny_inputs):
    tmp, vocab, good = tiny_inputs
    bad = tmp / "bad.txt"
    bad.write_bytes(b"ok line\n\xff\xfe broken\n")
    result = cli("create", "--input", str(good), str(bad), "--vocab", str(vocab), "--out", str(tmp / "out"), "--quiet")
    assert_one_line_error(result, 1, "bad.txt:2")
    assert no_record_files(tmp)


def test_inspect_shows_tokens_with_masks_and_every_field(golden_dir):
    result = cli("inspect", str(golden_dir / "G1.ofrecord"), "--vocab", str(golden_dir / "vocab.txt"), "-n", "2")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("== ") == 2
    assert "tokens: [CLS]" in result.stdout and "|" in result.stdout
    for name in PRETRAINING.names:
        assert f"  {name} (int32" in result.stdout or f"  {name} (float32" in result.stdout


def test_convert_oneflow_sample_to_tfrecord_and_back_is_byte_identical(shared_dir, tmp_path):
    sample = shared_dir / "fixtures" / "oneflow" / "part-0"
    assert main(["convert", str(sample), str(tmp_path / "s.tfrecord"), "--to", "tfrecord", "--quiet"]) == 0
    assert formats.sniff_format(tmp_path / "s.tfrecord") == "tfrecord"
    assert main(["convert", str(tmp_path / "s.tfrecord"), str(tmp_path / "part-0"), "--to", "ofrecord", "--quiet"]) == 0
    assert (tmp_path / "part-0").read_bytes() == sample.read_bytes()


def test_convert_golden_tfrecord_gives_golden_ofrecord(golden_dir, tmp_path):
    assert main(["convert", str(golden_dir / "G2.tfrecord"), str(tmp_path / "g2"), "--to", "ofrecord", "--quiet"]) == 0
    assert (tmp_path / "g2").read_bytes() == (golden_dir / "G2.ofrecord").read_bytes()


def test_convert_json_prints_the_summary_the_function_returns(golden_dir, tmp_path, capsys):
    """convert had --quiet but no --json, as every other stage has for scripts."""
    out = tmp_path / "g2.parquet"
    assert main(["convert", str(golden_dir / "G2.tfrecord"), str(out), "--to", "parquet", "--json", "--quiet"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == dict(bertprep.convert(src=golden_dir / "G2.tfrecord", dst=tmp_path / "again.parquet",
                                             to="parquet").fields, files=printed["files"])
    source = str(golden_dir / "G2.tfrecord")
    assert printed["files"] == [{"src": source, "dst": str(out), "records": printed["records"]}]
    assert printed["records"] > 0 and printed["to"] == "parquet"


def test_convert_of_a_tree_says_which_files_it_left(golden_dir, tmp_path, capsys):
    """A directory's files not named as records (*.tfrecord, part-*, *.hdf5, *.parquet) are not read, and now said
    so: a valid TFRecord named b.rec and a notes file were left without a word."""
    tree = tmp_path / "mix"
    tree.mkdir()
    for name in ("a.tfrecord", "b.rec"):
        shutil.copyfile(golden_dir / "G2.tfrecord", tree / name)
    (tree / "notes.txt").write_text("notes\n")
    assert main(["convert", str(tree), str(tmp_path / "out"), "--to", "ofrecord"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"not converted (not named *.tfrecord, part-*, *.hdf5 or *.parquet): {tree}/b.rec, {tree}/notes.txt")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["part-0"]
    (tmp_path / "none").mkdir()  # the message named two of the four formats it reads
    (tmp_path / "none" / "notes.txt").write_text("notes\n")
    assert main(["convert", str(tmp_path / "none"), str(tmp_path / "out3"), "--to", "ofrecord"]) == 1
    assert capsys.readouterr().err.strip() == (f"bertprep convert: error: {tmp_path / 'none'}: no record files "
                                               "(*.tfrecord, part-*, *.hdf5 or *.parquet) found")
    from bertprep import convert

    summary = convert(src=str(tree), dst=str(tmp_path / "out2"), to="ofrecord")
    assert summary["not_converted"] == [f"{tree}/b.rec", f"{tree}/notes.txt"]


def test_convert_of_eleven_or_more_parts_there_and_back_gives_each_part_its_bytes(golden_dir, tmp_path):
    """An OFRecord tree's parts are numbered in natural order: a tree of part-0 .. part-11 converted to TFRecord and
    back came out with part-2 holding part-10's records (parts were numbered in name order, part-10 third)."""
    parts, tfrecord, back = tmp_path / "parts", tmp_path / "tf", tmp_path / "back"
    parts.mkdir()
    for i in range(12):
        shutil.copyfile(golden_dir / f"G{1 + i % 3}.ofrecord", parts / f"part-{i}")
    assert main(["convert", str(parts), str(tfrecord), "--to", "tfrecord", "--quiet"]) == 0
    assert main(["convert", str(tfrecord), str(back), "--to", "ofrecord", "--quiet"]) == 0
    assert [(back / f"part-{i}").read_bytes() == (parts / f"part-{i}").read_bytes() for i in range(12)] == [True] * 12


def test_convert_of_a_shard_output_says_what_it_holds(tmp_path, capsys):
    """`convert WORKDIR/sharded/c` (text shards) said only "no record files … found", as of an empty folder: now
    it names the stage's output and what makes records of it; a folder of no stage's keeps the short line."""
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "a.txt").write_text("One sentence here. Another one.\n\nA second document. Yes.\n")
    assert main(["shard", "--input", str(tmp_path / "c"), "--out", str(tmp_path / "sharded"), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["convert", str(tmp_path / "sharded"), str(tmp_path / "out"), "--to", "parquet"]) == 1
    assert capsys.readouterr().err.strip() == (
        f"bertprep convert: error: {tmp_path / 'sharded'}: no record files (*.tfrecord, part-*, *.hdf5 or *.parquet) "
        "found: a bertprep shard output (text shards), not records: run `bertprep create` on it and convert its "
        "records")
    assert not (tmp_path / "out").exists()


def test_convert_refuses_an_output_directory_holding_another_runs_record_files(golden_dir, tmp_path, capsys):
    """A convert of two files then of one into the same directory left the first run's part-1 beside the new
    part-0 (mixed sequence lengths, nothing telling them apart) and exited 0: now refused before anything is
    written, while a rerun writing the same names still works."""
    two, one, out = tmp_path / "two", tmp_path / "one", tmp_path / "out"
    for tree, names in ((two, ("G1", "G2")), (one, ("G3",))):
        tree.mkdir()
        for name in names:
            shutil.copyfile(golden_dir / f"{name}.tfrecord", tree / f"{name}.tfrecord")
    assert main(["convert", str(two), str(out), "--to", "ofrecord", "--quiet"]) == 0
    assert main(["convert", str(two), str(out), "--to", "ofrecord", "--quiet"]) == 0  # the same names: rewritten
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    for to in ("ofrecord", "tfrecord"):
        capsys.readouterr()
        assert main(["convert", str(one), str(out), "--to", to, "--quiet"]) == 1
        stray = out / ("part-1" if to == "ofrecord" else "part-0")
        assert capsys.readouterr().err.splitlines() == [
            f"bertprep convert: error: {stray}: a record file this convert does not write (of an earlier run?): "
            f"readers of {out} would read it with the converted files; remove it or choose another output"]
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing written


@pytest.mark.parametrize("stage", ["create", "tokenize"])
def test_a_stages_manifest_given_as_a_shard_is_refused(tmp_path, stage):
    """`create --input SHARDED/*` (the shell's glob of a shard folder: training, test and manifest.json) read the
    manifest's JSON as a text shard and wrote records of its lines, exit 0; so did tokenize. It is refused as
    shard and vocab refuse it, before anything is written."""
    from bertprep.stages.create import sample_paths

    corpus, vocab = sample_paths()
    sharded = tmp_path / "sharded"
    run = subprocess.run([sys.executable, "-m", "bertprep", "shard", "--input", corpus, "--out", str(sharded),
                          "--train-shards", "2", "--test-shards", "1", "--quiet"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    run = subprocess.run([sys.executable, "-m", "bertprep", stage, "--input", *map(str, sorted(sharded.glob("*"))),
                          "--vocab", vocab, "--out", str(tmp_path / "out"), "--quiet"], capture_output=True, text=True)
    assert run.returncode == 2 and run.stderr == (
        f"bertprep {stage}: error: --input {sharded}/manifest.json: a stage's manifest, not a text shard: give the "
        "shard directory or its .txt files\n")
    assert not (tmp_path / "out").exists()


def test_convert_of_a_records_tree_refuses_a_folder_of_another_stage(tmp_path):
    """`convert RECORDS SHARDED --to hdf5` into `bertprep shard`'s output replaced the shard manifest with the
    records' (its text shards left unlisted, and shard's rerun into it refused as another stage's), exit 0. It
    is refused before anything is written, as create, tokenize, pack, shard and dedup refuse another stage's."""
    from bertprep.stages.create import sample_paths

    corpus, vocab = sample_paths()
    sharded, records = tmp_path / "sharded", tmp_path / "records"
    for argv in (["shard", "--input", corpus, "--out", str(sharded), "--train-shards", "2", "--test-shards", "1"],
                 ["create", "--input", corpus, "--vocab", vocab, "--out", str(records), "--corpus", "wiki",
                  "--dupe-factor", "1", "--workers", "1"]):
        run = subprocess.run([sys.executable, "-m", "bertprep", *argv, "--quiet"], capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
    before = {p: p.read_bytes() for p in sharded.rglob("*") if p.is_file()}
    (tree,) = records.glob("*/wiki")
    run = subprocess.run([sys.executable, "-m", "bertprep", "convert", str(tree), str(sharded), "--to", "hdf5"],
                         capture_output=True, text=True)
    assert run.returncode == 1 and run.stderr == (
        f"bertprep convert: error: {sharded}/manifest.json: a manifest of bertprep shard, not of a records tree: "
        "convert would replace it; choose another output\n")
    assert {p: p.read_bytes() for p in sharded.rglob("*") if p.is_file()} == before


def test_convert_of_a_create_records_tree_gives_a_records_tree_of_the_new_format(golden_dir, tmp_path, capsys):
    """`convert R R_of --to ofrecord` of a create tree wrote OFRecord parts under R_of/tfrecord/ and left the
    manifest out, so `validate R_of` checked against the default vocab and failed every record: now the format
    directory is renamed and the manifest converted, and validate passes."""
    assert main(["create", "--input", str(golden_dir / "corpus.txt"), "--vocab", str(golden_dir / "vocab.txt"),
                 "--out", str(tmp_path / "created"), "--seq", "128", "--pred", "20", "--dupe-factor", "1",
                 "--format", "tfrecord", "--quiet"]) == 0
    records = next((tmp_path / "created").rglob("manifest.json")).parent
    out = tmp_path / "R_of"
    assert main(["convert", str(records), str(out), "--to", "ofrecord", "--quiet"]) == 0
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) == [
        "manifest.json", "ofrecord/training/part-0"]
    manifest = json.loads((out / "manifest.json").read_text())
    source = json.loads((records / "manifest.json").read_text())
    assert manifest["formats"] == ["ofrecord"] and manifest["vocab"] == source["vocab"]
    assert manifest["params"] == source["params"] and list(manifest["files"]) == ["ofrecord/training/part-0"]
    capsys.readouterr()
    assert main(["validate", str(out), "--quiet"]) == 0, capsys.readouterr()
    assert main(["convert", str(records), str(out), "--to", "ofrecord", "--quiet"]) == 0  # a rerun: the same tree
    capsys.readouterr()
    assert main(["convert", str(out), str(tmp_path / "again"), "--to", "ofrecord", "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"bertprep convert: error: {out}: a records tree that already holds its records as ofrecord "
        f"({out}/ofrecord); nothing to convert (copy the tree, or convert another format)")


def test_convert_of_a_records_tree_names_its_output_without_a_doubled_slash(golden_dir, tmp_path, capsys):
    """`convert R out/ --to ofrecord` printed `a records tree: its tfrecord files converted into out//ofrecord/,
    out//manifest.json lists them`: the output pasted before a `/`."""
    assert main(["create", "--input", str(golden_dir / "corpus.txt"), "--vocab", str(golden_dir / "vocab.txt"),
                 "--out", str(tmp_path / "created"), "--seq", "128", "--pred", "20", "--dupe-factor", "1",
                 "--format", "tfrecord", "--quiet"]) == 0
    records = next((tmp_path / "created").rglob("manifest.json")).parent
    capsys.readouterr()
    assert main(["convert", str(records), f"{tmp_path / 'out'}/", "--to", "ofrecord"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"a records tree: its tfrecord files converted into {tmp_path / 'out' / 'ofrecord'}/, "
        f"{tmp_path / 'out' / 'manifest.json'} lists them")


def test_vocab_given_as_a_hub_model_id_is_fetched_then_served_from_cache(golden_dir, tmp_path):
    from stand_in_servers import StandInServer, run_cli

    hf_home = tmp_path / "hf"
    argv = ["create", "--input", golden_dir / "corpus.txt", "--vocab", "bert-base-uncased", "--dupe-factor", "2",
            "--quiet"]
    with StandInServer() as server:
        server.add_hub_model("bert-base-uncased", {"vocab.txt": (golden_dir / "vocab.txt").read_bytes()})
        online = run_cli(*argv, "--out", tmp_path / "online", server=server, hf_home=hf_home)
        assert online.returncode == 0, online.stderr
        assert any(path.endswith("/bert-base-uncased/resolve/main/vocab.txt") for _, path, _ in server.requests)
        missing = run_cli(*argv[:4], "no-such-org/no-such-model", *argv[5:], "--out", tmp_path / "x", server=server,
                          hf_home=hf_home)
    assert missing.returncode == 1 and "no-such-org/no-such-model" in missing.stderr
    assert "Traceback" not in missing.stderr
    # The server is gone: the cached vocab serves an offline rerun.
    offline = run_cli(*argv, "--out", tmp_path / "offline", hf_home=hf_home, offline=True)
    assert offline.returncode == 0, offline.stderr
    for out in ("online", "offline"):
        records = only_records_dir(tmp_path / out)
        assert (records / "tfrecord/training/corpus.tfrecord").read_bytes() == (golden_dir / "G1.tfrecord").read_bytes()


def test_a_vocab_with_repeated_lines_gives_records_that_validate_and_train(golden_dir, tmp_path, capsys):
    from trainer.data import Records

    vocab = tmp_path / "vocab.txt"
    vocab.write_bytes((golden_dir / "vocab.txt").read_bytes() + b"[CLS]\nthe\n")  # ids 30522, 30523 win
    argv = ["create", "--input", str(golden_dir / "corpus.txt"), "--vocab", str(vocab), "--out", str(tmp_path / "o"),
            "--dupe-factor", "1", "--workers", "1", "--corpus", "golden", "--json"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "create: warning: " + f"{vocab}: 2 token(s) on more than one line ('[CLS]' on lines 102, 30523; " \
        "'the' on lines 1997, 30524)" in err
    records = only_records_dir(tmp_path / "o")
    assert json.loads((records / "manifest.json").read_text())["vocab"]["size"] == 30524
    first = next(formats.read_records(records / "tfrecord/training/corpus.tfrecord"))
    assert first["input_ids"][0] == 30522  # [CLS] has its last line's id, as in the reference
    assert main(["validate", str(records), "--quiet"]) == 0  # the manifest's vocab, read by the same loader
    capsys.readouterr()
    assert main(["validate", str(records), "--vocab", str(vocab), "--json", "-"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["datasets"][0]["vocab_size"] == 30524 and any("on more than one line" in w
                                                                for w in report["warnings"])
    assert Records(records, "ofrecord").vocab_size == 30524  # the trainer's embedding table covers every id


NVIDIA_NAME = ("lower_case_1_seq_len_128_max_pred_20_masked_lm_prob_0.15_random_seed_12345_dupe_factor_1"
               "_shard_3_test_split_20")


def test_layout_nvidia_writes_the_tree_nvidias_scripts_read(golden_dir, tmp_path, capsys):
    from trainer.data import Records

    work = tmp_path / "work"
    assert main(["shard", "--input", str(golden_dir / "corpus.txt"), "--corpus", "golden", "--workdir", str(work),
                 "--train-shards", "3", "--test-shards", "1", "--test-fraction", "0.2", "--workers", "1",
                 "--quiet"]) == 0
    capsys.readouterr()
    common = ["create", "--workdir", str(work), "--corpus", "golden", "--vocab", str(golden_dir / "vocab.txt"),
              "--dupe-factor", "1", "--workers", "1", "--min-parts", "3", "--json"]
    assert main([*common, "--layout", "nvidia"]) == 0
    summary = json.loads(capsys.readouterr().out)
    corpus_dir = work / "tfrecord" / NVIDIA_NAME / "golden"  # DATA/tfrecord/<name>/<corpus>, DATA = the work directory
    assert summary["records_dir"] == str(corpus_dir) and summary["warnings"] == []
    assert sorted(str(p.relative_to(work)) for p in work.rglob("*") if p.is_file() and "sharded" not in p.parts) == [
        f"tfrecord/{NVIDIA_NAME}/golden/{name}" for name in
        ("manifest.json", "test/golden_test_0.tfrecord", "training/golden_training_0.tfrecord",
         "training/golden_training_1.tfrecord", "training/golden_training_2.tfrecord")]
    # the same bytes as bertprep's own layout: only the place differs
    assert main([*common, "--out", str(tmp_path / "ours")]) == 0
    ours = only_records_dir(tmp_path / "ours") / "tfrecord"
    for path in corpus_dir.rglob("*.tfrecord"):
        assert path.read_bytes() == (ours / path.relative_to(corpus_dir)).read_bytes()
    records = Records(work, "tfrecord")  # the trainer finds NVIDIA's tree, and the manifest beside it
    assert (len(records.files["training"]), len(records.files["test"]), records.vocab_size) == (3, 1, 30522)


def test_layout_nvidia_needs_shard_stage_inputs_and_tfrecord(golden_dir, tmp_path):
    base = ["create", "--vocab", golden_dir / "vocab.txt", "--out", tmp_path / "o", "--layout", "nvidia", "--quiet"]
    result = cli(*map(str, base), "--input", str(golden_dir / "corpus.txt"))
    assert_one_line_error(result, 2, f"--layout nvidia: {golden_dir} has no manifest of `bertprep shard`")
    result = cli(*map(str, base), "--input", str(golden_dir / "corpus.txt"), "--format", "tfrecord,ofrecord")
    assert_one_line_error(result, 2, "--layout nvidia writes NVIDIA's TFRecord tree, which has no place for OFRecord")
    assert not (tmp_path / "o").exists()


def test_prepare_passes_the_layout_to_create():
    from bertprep.cli import build_parser, prepare
    from bertprep.stages.prepare import stage_calls

    args = build_parser("prepare").parse_args(["prepare", "wikipedia", "--vocab", "v.txt", "--layout", "nvidia"])
    creates = [call.options for call in stage_calls(prepare.options(args)) if call.label.startswith("create")]
    assert len(creates) == 2 and all(options.layout == "nvidia" for options in creates)


def test_few_training_files_and_no_test_split_are_warned_about(golden_dir, tmp_path):
    argv = ["create", "--input", str(golden_dir / "corpus.txt"), "--vocab", str(golden_dir / "vocab.txt"),
            "--out", str(tmp_path / "o"), "--dupe-factor", "1", "--workers", "1", "--json"]
    result = cli(*argv)
    assert result.returncode == 0, result.stderr
    warnings = json.loads(result.stdout)["warnings"]
    assert [w.split(":")[0] for w in warnings] == ["1 training file(s) per format, fewer than --min-parts 8",
                                                   "no test split"]
    assert [line for line in result.stderr.splitlines() if "warning" in line] == [f"create: warning: {w}"
                                                                                  for w in warnings]
    quiet = cli(*argv, "--quiet", "--min-parts", "1")
    assert quiet.returncode == 0 and quiet.stderr == "" and json.loads(quiet.stdout)["warnings"] == [warnings[1]]


# -- the Python API (issue 31): create(...) without argv -------------------------------------------------


def test_create_function_writes_the_cli_bytes_and_summary(golden_dir, tmp_path):
    from bertprep.engines import EngineOptions
    from bertprep.stages.create import CreateOptions, create

    result = cli(*golden_argv(golden_dir, tmp_path / "cli", "G1", "--json", "--workers", "1"))
    assert result.returncode == 0, result.stderr
    summary = create(input=[golden_dir / "corpus.txt"], vocab=golden_dir / "vocab.txt", out=tmp_path / "py",
                     dupe_factor=2, engine=EngineOptions(workers=1))
    records = only_records_dir(tmp_path / "py")
    assert (records / "tfrecord/training/corpus.tfrecord").read_bytes() == (golden_dir / "G1.tfrecord").read_bytes()
    assert output_files(records) == output_files(only_records_dir(tmp_path / "cli"))
    by_cli = json.loads(result.stdout)
    assert summary["records_dir"] == str(records) and not summary.complete_before
    assert {k: v for k, v in summary.items() if k not in ("records_dir", "seconds")} == \
        {k: v for k, v in by_cli.items() if k not in ("records_dir", "seconds")}
    again = create(CreateOptions(input=(str(golden_dir / "corpus.txt"),), vocab=str(golden_dir / "vocab.txt"),
                                 out=str(tmp_path / "py"), dupe_factor=2))
    assert again.complete_before and again["shards_created"] == 0 and again["instances"] == summary["instances"]


def test_create_options_decide_the_dupe_factor_and_check_flags_once():
    from bertprep.errors import UsageError
    from bertprep.stages.create import CreateOptions

    assert CreateOptions().dupe_factor == 5 and CreateOptions(masking="dynamic").dupe_factor == 1
    assert CreateOptions(masking="dynamic", dupe_factor=3).dupe_factor == 3
    assert CreateOptions().format == ("tfrecord", "ofrecord") and CreateOptions(layout="nvidia").format == ("tfrecord",)
    with pytest.raises(UsageError, match=r"^CreateOptions.dupe_factor must be at least 1, not 0$"):
        CreateOptions(dupe_factor=0)
    with pytest.raises(UsageError, match=r"^CreateOptions.seq 3 is too small"):
        CreateOptions(seq=3)
    with pytest.raises(UsageError, match=r"^CreateOptions.seq 65536 is too large: at most 65,535 positions"):
        CreateOptions(seq=65536)  # was the native core's ValueError, a traceback, after the output was made
    with pytest.raises(UsageError, match=r"^CreateOptions.dupe_factor 9223372036854775808 is too large: at most "
                                         r"9,223,372,036,854,775,807 \(the native core's count of passes\)$"):
        CreateOptions(dupe_factor=2 ** 63)  # the native core's OverflowError, a traceback, after the output was made


def test_a_dupe_factor_whose_instances_no_memory_holds_is_refused(golden_dir, tmp_path, monkeypatch):
    """A shard's instances of every pass are held at once, to be shuffled: --dupe-factor 2**40 on a small corpus
    grew by gigabytes until it was killed. Refused where even one instance a pass exceeds the machine's memory:
    before anything is written for one document a shard, and for the documents a shard holds as it is read."""
    from bertprep import engines
    from bertprep.engines import EngineOptions
    from bertprep.errors import DataError, UsageError
    from bertprep.stages.create import CreateOptions, create

    with pytest.raises(UsageError, match=r"^CreateOptions.dupe_factor 1099511627776: a shard's instances need more "
                                         r"than 31.0 TiB \(1,099,511,627,776 passes over 1 document\(s\), at least "
                                         r"an instance each, held together to be shuffled\), more than this machine's"):
        CreateOptions(dupe_factor=2 ** 40)
    monkeypatch.setattr(engines, "machine_memory", lambda: 1 << 20)  # 3,000 passes: 15 documents' instances, >1 MiB
    with pytest.raises(DataError, match=r"corpus.txt: its instances need more than 1.3 MiB \(3,000 passes over 15 "
                                        r"document\(s\), at least an instance each, held together to be shuffled\), "
                                        r"more than this machine's 1.0 MiB$"):
        create(input=[golden_dir / "corpus.txt"], vocab=golden_dir / "vocab.txt", out=tmp_path / "out",
               dupe_factor=3000, engine=EngineOptions(workers=1))



def test_a_run_killed_before_its_manifest_is_saved_is_not_resumed_as_the_earlier_runs(tmp_path, monkeypatch):
    """A rerun with another vocab was stopped after it renamed a shard's records and before it saved their
    entries: the manifest still listed them with the earlier vocab's settings and sizes, and a third run with that
    vocab kept the other vocab's records as complete. The entries of the shards a run rewrites go from the
    manifest before any of them is written."""
    from bertprep.stages import create as create_module

    corpus, vocab = create_module.sample_paths()
    lines = Path(vocab).read_text(encoding="utf-8").split("\n")
    swapped = tmp_path / "swapped.txt"  # "the" and "of" trade ids: records of the same size, other bytes
    a, b = lines.index("the"), lines.index("of")
    lines[a], lines[b] = lines[b], lines[a]
    swapped.write_text("\n".join(lines), encoding="utf-8")
    args = {"input": (corpus,), "out": str(tmp_path / "out"), "seq": 64, "pred": 10, "format": ("tfrecord",),
            "engine": bertprep.EngineOptions(workers=1)}
    bertprep.create(vocab=vocab, **args)
    first = {p.relative_to(tmp_path): p.read_bytes() for p in sorted((tmp_path / "out").rglob("*.tfrecord"))}
    (manifest,) = (tmp_path / "out").rglob("manifest.json")
    ours = json.loads(manifest.read_text())["files"]
    save = create_module.save_manifest

    def killed_once_a_shard_is_written(directory, written):
        if any(entry not in ours.values() for entry in written["files"].values()):
            raise KeyboardInterrupt  # as a kill between the shard's rename and its manifest entry
        save(directory, written)

    monkeypatch.setattr(create_module, "save_manifest", killed_once_a_shard_is_written)
    with pytest.raises(KeyboardInterrupt):
        bertprep.create(vocab=str(swapped), **args)
    monkeypatch.undo()
    assert any(first[name] != (tmp_path / name).read_bytes() for name in first)  # the killed run wrote a shard
    assert bertprep.create(vocab=vocab, **args)["shards_created"] >= 1
    assert {p.relative_to(tmp_path): p.read_bytes() for p in sorted((tmp_path / "out").rglob("*.tfrecord"))} == first


def small_create_argv(out, *inputs):
    """`create` of the sample corpus's `inputs` (its shards' names) into `out`, small and quick."""
    from bertprep.stages.create import sample_paths

    corpus, vocab = sample_paths()
    shards = [str(Path(corpus) / name) for name in inputs]
    return ["create", "--input", *shards, "--vocab", vocab, "--out", str(out), "--corpus", "c", "--seq", "64",
            "--pred", "10", "--dupe-factor", "1", "--workers", "1", "--quiet"]


def test_a_file_named_as_a_create_output_that_no_manifest_lists_is_refused(tmp_path, capsys):
    """A rerun overwrote a user's file in its records directory named as one of its outputs without a word, and
    left a stray record file beside its own for the readers that glob a split's folder to read with them. (A
    directory without a manifest is redone from scratch, as the damaged-manifest message tells.)"""
    from bertprep.workdir import params_dirname

    argv = small_create_argv(tmp_path / "out", "training/sample_corpus_training_0.txt")
    records = tmp_path / "out" / params_dirname(64, 10, 0.15, 12345, 1) / "c"
    assert main(argv) == 0
    (records / "notes.txt").write_text("nothing writes or reads it")
    (records / "tfrecord" / "training" / ".tmp-1-x.tfrecord").write_bytes(b"a hidden name: no reader globs it")
    assert main(argv) == 0  # a rerun: notes.txt and the hidden name are let be
    mine = records / "tfrecord" / "training" / "sample_corpus_training_0.tfrecord"
    for stray in (mine, records / "tfrecord/training/tiny.tfrecord", records / "ofrecord/training/part-1",
                  records / "hdf5/test/x.hdf5"):
        listed = json.loads((records / "manifest.json").read_text())
        if stray == mine:  # a user's file in the place of one the manifest no longer lists
            del listed["files"]["tfrecord/training/sample_corpus_training_0.tfrecord"]
            (records / "manifest.json").write_text(json.dumps(listed))
        stray.parent.mkdir(parents=True, exist_ok=True)
        stray.write_bytes(b"stray")
        assert main(argv) == 1
        assert capsys.readouterr().err.strip().endswith(
            f"error: {stray}: no manifest of bertprep lists it (a file of yours or of another tool?): create would "
            "overwrite it, or its readers take it for one of its files; remove it, or choose another --out")
        assert stray.read_bytes() == b"stray"
        stray.unlink()


def test_a_create_rerun_takes_the_records_a_killed_run_renamed_before_its_manifest_listed_them(tmp_path, capsys):
    """A worker renames a shard's records before the run's manifest lists them: a run killed between the two left
    files no manifest lists. The run's claim in .partial/steps names them, so the rerun rewrites them (a file of
    such a name that nothing claims is refused, above)."""
    argv = small_create_argv(tmp_path / "out", *(f"training/sample_corpus_training_{i}.txt" for i in (0, 1)))
    assert main(argv) == 0
    (manifest_path,) = (tmp_path / "out").rglob("manifest.json")
    records = manifest_path.parent
    done = output_files(records)
    killed = "tfrecord/training/sample_corpus_training_1.tfrecord"
    manifest = json.loads(manifest_path.read_text())
    del manifest["files"][killed]  # the state a kill leaves: the file in place, unlisted, claimed
    manifest_path.write_text(json.dumps(manifest))
    (records / killed).write_bytes(b"renamed, not listed")
    steps = records / ".partial" / "steps"
    steps.mkdir(parents=True)
    (steps / "create-names.json").write_text(json.dumps([killed, "ofrecord/training/part-1"]))
    assert main([*argv[:-1], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["shards_created"] == 1
    assert output_files(records) == done and not (records / ".partial").exists()
    manifest_path.write_text(json.dumps(manifest))  # unlisted and unclaimed: refused
    assert main(argv) == 1
    assert f"error: {records / killed}: no manifest of bertprep lists it" in capsys.readouterr().err


def test_a_failed_create_leaves_no_record_it_did_not_list(tmp_path, monkeypatch):
    """A run stopped between a shard's rename and its manifest entry (here an exception; a Ctrl-C alike) removes
    the records it put in place under names no run had written, and its claim: its folder holds only what its
    manifest lists, and no .partial/. The rerun completes it."""
    from bertprep.stages import create as create_module

    argv = small_create_argv(tmp_path / "out", *(f"training/sample_corpus_training_{i}.txt" for i in (0, 1)))
    save = create_module.save_manifest

    def interrupted_at_the_second_shard(directory, written):
        if len(written["files"]) > 2:
            raise KeyboardInterrupt
        save(directory, written)

    monkeypatch.setattr(create_module, "save_manifest", interrupted_at_the_second_shard)
    assert main(argv) == 130
    monkeypatch.undo()
    (manifest_path,) = (tmp_path / "out").rglob("manifest.json")
    records = manifest_path.parent
    listed = json.loads(manifest_path.read_text())["files"]
    assert len(listed) == 2 and sorted(output_files(records)) == sorted(listed)
    assert main(argv) == 0


def test_create_refuses_a_records_folder_of_another_stage(tmp_path):
    """`create --out ROOT --corpus NAME` where ROOT/<params>/NAME is another stage's output (here tokenize's) took
    that manifest's files for an earlier run's: it deleted the .bin/.idx files, left data-path.txt naming them and
    replaced the manifest, exit 0. It is refused before anything is written, as tokenize and pack refuse it."""
    from bertprep.stages.create import sample_paths
    from bertprep.workdir import params_dirname

    corpus, vocab = sample_paths()
    tokenized = tmp_path / "records" / params_dirname(128, 20, 0.15, 12345, 1) / "wiki"
    run = subprocess.run([sys.executable, "-m", "bertprep", "tokenize", "--input", corpus, "--vocab", vocab, "--out",
                          str(tokenized.parent), "--corpus", "wiki", "--quiet"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    before = {p: p.read_bytes() for p in tokenized.rglob("*") if p.is_file()}
    run = subprocess.run([sys.executable, "-m", "bertprep", "create", "--input", corpus, "--vocab", vocab, "--out",
                          str(tmp_path / "records"), "--corpus", "wiki", "--dupe-factor", "1", "--workers", "1"],
                         capture_output=True, text=True)
    assert run.returncode == 1 and run.stderr == (
        f"bertprep create: error: {tokenized}/manifest.json: a manifest of bertprep tokenize, not of create: create "
        "would replace it and remove the files it lists; choose another --out or --corpus\n")
    assert {p: p.read_bytes() for p in tokenized.rglob("*") if p.is_file()} == before


def test_a_rerun_with_other_settings_the_directory_name_omits_says_it_replaces_the_records(golden_dir, tmp_path,
                                                                                           capsys):
    """--short-seq-prob, --seed-per-shard, --eval-samples and the vocab's content are not in the records
    directory's name: a second run with another of them rewrote every shard of the first, which was gone
    without a word. The rerun now says so; a rerun with the same settings does not."""
    text = tmp_path / "short.txt"
    text.write_text("the cat sat on the mat.\nit was warm there.\n\na dog ran in the park.\nthen it slept.\n")
    argv = ["create", "--input", str(text), "--vocab", str(golden_dir / "vocab.txt"), "--out", str(tmp_path / "out"),
            "--dupe-factor", "1", "--format", "tfrecord", "--quiet", "--json"]

    def replacing(*extra):
        assert main([*argv, *extra]) == 0
        return [w for w in json.loads(capsys.readouterr().out)["warnings"] if w.startswith("replacing")]

    assert replacing() == []
    assert replacing("--short-seq-prob", "0.5", "--seed-per-shard") == [
        "replacing the records an earlier run wrote here with other settings (seed_per_shard was False, now True; "
        "short_seq_prob was 0.1, now 0.5): a records directory holds one setting; give another --out to keep both"]
    assert replacing("--short-seq-prob", "0.5", "--seed-per-shard") == []  # the same settings: complete, kept


def test_a_rerun_from_another_shard_tree_of_the_same_name_says_it_replaces_the_records(golden_dir, tmp_path,
                                                                                        capsys):
    """--layout nvidia names the records directory by the training shard count and int(100 × test fraction), the
    default layout by the corpus name alone: trees sharded with --test-fraction 0.16 and 0.169 (2 and 3 of the
    golden corpus's 15 documents in the test split) wrote to one directory, and the second run replaced the first
    one's records without a word, exit 0. It now says which inputs it replaces; a rerun from the same ones does
    not, and the records are those a fresh run writes."""
    for fraction in ("0.16", "0.169"):
        assert main(["shard", "--input", str(golden_dir / "corpus.txt"), "--out", str(tmp_path / fraction / "a"),
                     "--corpus", "g", "--train-shards", "2", "--test-shards", "1", "--test-fraction", fraction,
                     "--workers", "1", "--quiet"]) == 0

    def create(fraction, out="out"):
        assert main(["create", "--layout", "nvidia", "--input", str(tmp_path / fraction / "a"), "--vocab",
                     str(golden_dir / "vocab.txt"), "--out", str(tmp_path / out), "--format", "tfrecord",
                     "--dupe-factor", "1", "--min-parts", "1", "--workers", "1", "--quiet", "--json"]) == 0
        summary = json.loads(capsys.readouterr().out)
        return summary["records_dir"], [w for w in summary["warnings"] if w.startswith("replacing")]

    first, replacing = create("0.16")
    assert first.endswith("_shard_2_test_split_16/a") and replacing == []
    second, replacing = create("0.169")
    assert second == first and replacing == [
        f"replacing the records an earlier run wrote here from other inputs (inputs were {tmp_path}/0.16/a (3 shards), "
        f"now {tmp_path}/0.169/a (3 shards)): a records directory holds the records of one set of inputs; give "
        "another --out or --corpus to keep both"]
    assert create("0.169") == (first, [])  # the same inputs: complete, kept
    fresh, _ = create("0.169", out="fresh")
    assert output_files(fresh) == output_files(first)


def test_a_rerun_from_moved_inputs_keeps_the_records_and_names_the_new_place(golden_dir, tmp_path, capsys):
    """Inputs moved with their content unchanged are complete and kept; the manifest named the old place, unlike a
    fresh run's from the new one, and once a moved input was edited its rerun warned of replacing the records
    made "from other inputs" (the old place). The manifest now names where this run read each input."""
    assert main(["shard", "--input", str(golden_dir / "corpus.txt"), "--out", str(tmp_path / "old" / "a"),
                 "--corpus", "g", "--train-shards", "2", "--test-shards", "1", "--workers", "1", "--quiet"]) == 0

    def create(place, out="out"):
        assert main(["create", "--input", str(tmp_path / place / "a"), "--vocab", str(golden_dir / "vocab.txt"),
                     "--out", str(tmp_path / out), "--format", "tfrecord", "--dupe-factor", "1", "--min-parts", "1",
                     "--workers", "1", "--quiet", "--json"]) == 0
        summary = json.loads(capsys.readouterr().out)
        manifest = json.loads((Path(summary["records_dir"]) / "manifest.json").read_text(encoding="utf-8"))
        sources = {entry["source"] for entry in manifest["files"].values()}
        return summary, sources

    first, sources = create("old")
    assert {os.path.dirname(source) for source in sources} == {f"{tmp_path}/old/a/training", f"{tmp_path}/old/a/test"}
    records = output_files(first["records_dir"])
    os.rename(tmp_path / "old", tmp_path / "new")
    moved, sources = create("new")
    assert moved["shards_created"] == 0 and not moved["warnings"]
    assert {os.path.dirname(source) for source in sources} == {f"{tmp_path}/new/a/training", f"{tmp_path}/new/a/test"}
    assert output_files(moved["records_dir"]) == records
    fresh = json.loads((Path(create("new", out="fresh")[0]["records_dir"]) / "manifest.json").read_text())
    assert fresh["files"] == json.loads((Path(moved["records_dir"]) / "manifest.json").read_text())["files"]
    shard = tmp_path / "new" / "a" / "training" / "g_training_0.txt"
    shard.write_text(shard.read_text(encoding="utf-8") + "\nOne more document here.\n", encoding="utf-8")
    edited, _ = create("new")  # an input edited where it now is: redone, as a rerun is for
    assert edited["shards_created"] == 1 and not [w for w in edited["warnings"] if w.startswith("replacing")]


def test_a_python_caller_not_quiet_hears_each_warning_once(golden_dir, tmp_path, capsys):
    """bertprep.create(quiet=False) printed each warning twice on stderr: the stage's "create: warning: ..." note
    and the BertprepWarning raised from its summary. A Python caller now gets the BertprepWarning alone; the
    command line's lines are as they were."""
    text = tmp_path / "short.txt"
    text.write_text("the cat sat on the mat.\nit was warm there.\n\na dog ran in the park.\nthen it slept.\n")
    fields = {"input": (str(text),), "vocab": str(golden_dir / "vocab.txt"), "out": str(tmp_path / "out"),
              "dupe_factor": 1, "format": "tfrecord"}
    with pytest.warns(bertprep.BertprepWarning):
        bertprep.create(**fields)
    with pytest.warns(bertprep.BertprepWarning) as caught:
        summary = bertprep.create(**fields, short_seq_prob=0.5, quiet=False)
    assert [str(w.message) for w in caught] == [f"bertprep.create: {w}" for w in summary["warnings"]]
    assert any(w.startswith("replacing the records") for w in summary["warnings"])
    stderr = capsys.readouterr().err
    assert "warning" not in stderr and stderr.startswith("create: 1/1 shards")
    argv = ["create", "--input", str(text), "--vocab", fields["vocab"], "--out", fields["out"], "--dupe-factor", "1",
            "--format", "tfrecord", "--short-seq-prob", "0.7"]
    assert main(argv) == 0
    said = capsys.readouterr()
    # the Python caller's name the options' fields, the command line's its flags
    assert any("fewer than CreateOptions.min_parts 8" in w for w in summary["warnings"])
    assert [line for line in said.err.splitlines() if "warning" in line] == [
        f"create: warning: {w.replace('CreateOptions.min_parts', '--min-parts')}" for w in summary["warnings"][:2]] + [
        "create: warning: replacing the records an earlier run wrote here with other settings (short_seq_prob was "
        "0.5, now 0.7): a records directory holds one setting; give another --out to keep both"]
    assert said.out.count("  warning  ") == 3
