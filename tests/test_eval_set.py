"""The fixed held-out evaluation set (issue 34): `shard --eval-documents` and `create --eval-samples`."""

import json
import random
from importlib import resources

import pytest

from bertprep.errors import UsageError
from bertprep.stages.create import create
from bertprep.stages.shard import ShardOptions, choose_eval, shard
from dedup_corpus import change_words, jaccard, wt2_documents
from stand_in_servers import ok, one_line_error, run_cli

DOCUMENTS, EVAL = 60, 6
VOCAB = str(resources.files("bertprep") / "data" / "sample_vocab.txt")


def change_a_run(text, share, rng):
    """`share` of the words changed in one run: a near copy above dedup's 0.8 threshold (the same share
    scattered changes a 5-gram per word changed, which falls below it)."""
    words = text.split(" ")
    count = max(1, int(len(words) * share))
    start = rng.randrange(len(words) - count)
    words[start:start + count] = ["omega"] * count
    return " ".join(words)


@pytest.fixture(scope="module")
def planted(shared_dir, tmp_path_factory):
    """A text corpus of wt2 documents and, last, an exact copy and two 5%-changed copies of an evaluation
    document. Returns (corpus directory, the evaluation document, {kind: copy})."""
    documents = wt2_documents(shared_dir / "fixtures" / "bench" / "wt2.txt", DOCUMENTS)
    mask = choose_eval(EVAL, DOCUMENTS + 3, 12345)
    assert not mask[DOCUMENTS:].any()  # the copies are training documents under the default seed
    original = documents[int(mask.nonzero()[0][0])]
    rng = random.Random(0)
    copies = {"exact": "  ".join(original.upper().split(" ")), "near": change_a_run(original, 0.05, rng),
              "scattered": change_words(original, 0.05, rng)}
    assert jaccard(original, copies["near"]) >= 0.8 > jaccard(original, copies["scattered"])
    root = tmp_path_factory.mktemp("corpus")
    (root / "a.txt").write_text("\n\n".join(documents) + "\n", encoding="utf-8")
    (root / "b.txt").write_text("\n\n".join(copies.values()) + "\n", encoding="utf-8")
    return root, original, copies


def shard_cli(corpus, out, *extra):
    return run_cli("shard", "--input", corpus, "--corpus", "c", "--out", out, "--train-shards", "3",
                   "--test-shards", "2", *extra)


def split_text(out, split):
    return "".join(p.read_text(encoding="utf-8") for p in sorted((out / split).glob("*.txt")))


def flat(text):
    return " ".join(text.split())


def test_eval_documents_are_seeded_and_their_duplicates_leave_training(planted, tmp_path):
    corpus, original, copies = planted
    outputs = {}
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        summary = ok(shard_cli(corpus, out, "--eval-documents", str(EVAL), "--workers", str(workers), "--json"))
        outputs[workers] = {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*.txt"))}
    assert outputs[1] == outputs[2]
    manifest = json.loads((tmp_path / "w1" / "manifest.json").read_text())
    chosen = [(d["input"].endswith("a.txt"), d["document"]) for d in manifest["eval"]["chosen"]]
    expected = choose_eval(EVAL, DOCUMENTS + 3, 12345).nonzero()[0] + 1
    assert chosen == [(True, int(n)) for n in expected]
    assert summary["documents"] == {"training": DOCUMENTS + 3 - EVAL - 2, "test": EVAL}
    dropped = [(d["document"], d["reason"]) for d in manifest["eval"]["dropped"] if d["input"].endswith("b.txt")]
    assert dropped == [(1, "exact"), (2, "near")] and manifest["eval"]["dropped_training"] == 2
    assert summary["eval"]["dropped_training"] == 2 and manifest["params"]["eval_documents"] == EVAL
    training, test = flat(split_text(tmp_path / "w1", "training")), flat(split_text(tmp_path / "w1", "test"))
    # sentence splitting puts each sentence on a line; flattening whitespace compares the words
    assert flat(original) in test and flat(original) not in training
    assert flat(copies["exact"]).casefold() not in training.casefold() and flat(copies["near"]) not in training
    # scattered changes leave it below dedup's default threshold: a distinct document to dedup, so it stays
    assert flat(copies["scattered"]) in training


def test_eval_documents_from_python_matches_the_command(planted, tmp_path):
    corpus = planted[0]
    ok(shard_cli(corpus, tmp_path / "cli", "--eval-documents", str(EVAL)))
    summary = shard(input=(str(corpus),), corpus="c", out=str(tmp_path / "py"), train_shards=3, test_shards=2,
                    eval_documents=EVAL)
    assert summary["eval"]["dropped_training"] == 2
    assert records(tmp_path / "py") == records(tmp_path / "cli")


def test_another_eval_setting_reshards(planted, tmp_path):
    corpus, _original, _copies = planted
    out = tmp_path / "out"
    ok(shard_cli(corpus, out, "--eval-documents", "4"))
    summary = ok(shard_cli(corpus, out, "--eval-documents", "4", "--eval-seed", "7", "--json"))
    assert summary["documents"]["test"] == 4 and summary["eval"]["seed"] == 7
    assert "already complete" not in json.dumps(summary)


def test_eval_documents_needs_a_document_left_for_training(planted, tmp_path):
    corpus, _original, _copies = planted
    error = one_line_error(shard_cli(corpus, tmp_path / "out", "--eval-documents", str(DOCUMENTS + 3)))
    assert "--eval-documents 63 needs more documents than the 63" in error
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_eval_documents_whose_duplicates_are_all_the_training_documents_is_one_line(planted, tmp_path):
    """The count check above is before the drop: a corpus whose documents not drawn are all copies of drawn ones
    was written with no training split ("training  no documents", a warning), exit 0."""
    _corpus, original, copies = planted
    corpus = tmp_path / "copies"
    corpus.mkdir()
    (corpus / "a.txt").write_text("\n\n".join([original, copies["exact"], copies["near"]]) + "\n", encoding="utf-8")
    for seed in range(100):  # the seed that draws the original: both copies are then its duplicates
        if choose_eval(1, 3, seed)[0]:
            break
    error = one_line_error(shard_cli(corpus, tmp_path / "out", "--eval-documents", "1", "--eval-seed", str(seed)))
    assert error == (f"bertprep shard: error: {corpus / 'a.txt'}: --eval-documents 1 leaves no training document: "
                     "each of the 2 not drawn is an exact or near duplicate of an evaluation document (dropped); "
                     "give fewer --eval-documents or a larger corpus")
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_a_test_fraction_beside_eval_documents_is_refused(planted, tmp_path):
    """The evaluation set is the test split: --test-fraction 0.5 with it was ignored without a word, exit 0."""
    error = one_line_error(shard_cli(planted[0], tmp_path / "out", "--eval-documents", "3", "--test-fraction", "0.5"),
                           2)
    assert error == ("bertprep shard: error: --test-fraction 0.5 is not used with --eval-documents 3 (the "
                     "evaluation set is the test split): give one of them")
    assert not (tmp_path / "out").exists()
    with pytest.raises(UsageError, match=r"^ShardOptions.test_fraction 0.0 is not used with "
                                         r"ShardOptions.eval_documents 3 "):
        ShardOptions(input=(str(planted[0]),), corpus="c", eval_documents=3, test_fraction=0.0)
    ShardOptions(input=(str(planted[0]),), corpus="c", eval_documents=3)  # no fraction given: no error


def test_the_default_test_fraction_given_beside_eval_documents_is_refused_too(planted, shards, tmp_path):
    """--test-fraction 0.1 (its default's value) with --eval-documents was accepted without a word, exit 0, and
    ignored as any other value was: it could not be told from no --test-fraction. The default is now None."""
    error = one_line_error(shard_cli(planted[0], tmp_path / "out", "--eval-documents", "3", "--test-fraction", "0.1"),
                           2)
    assert error == ("bertprep shard: error: --test-fraction 0.1 is not used with --eval-documents 3 (the "
                     "evaluation set is the test split): give one of them")
    assert not (tmp_path / "out").exists()
    with pytest.raises(UsageError, match=r"^ShardOptions.test_fraction 0.1 is not used with "):
        ShardOptions(input=(str(planted[0]),), corpus="c", eval_documents=3, test_fraction=0.1)
    # the manifest of an --eval-documents run still records 0.1 (create names its records after it)
    assert json.loads((shards / "manifest.json").read_text())["params"]["test_fraction"] == 0.1
    # without --eval-documents, none and 0.1 are the same split, byte for byte
    ok(shard_cli(planted[0], tmp_path / "none"))
    ok(shard_cli(planted[0], tmp_path / "given", "--test-fraction", "0.1"))
    assert {p.relative_to(tmp_path / "none"): p.read_bytes() for p in (tmp_path / "none").rglob("*.txt")} == \
        {p.relative_to(tmp_path / "given"): p.read_bytes() for p in (tmp_path / "given").rglob("*.txt")}
    assert json.loads((tmp_path / "none" / "manifest.json").read_text())["params"]["test_fraction"] == 0.1


def test_an_eval_seed_without_eval_documents_is_refused(planted, shards, tmp_path):
    """--eval-seed seeds only the --eval-documents draw: `shard --eval-seed 7` alone wrote the hash-chosen split of
    no --eval-seed, exit 0, without a word (a user meaning another test split got the same one)."""
    error = one_line_error(shard_cli(planted[0], tmp_path / "out", "--eval-seed", "7"), 2)
    assert error == ("bertprep shard: error: --eval-seed 7 is only used with --eval-documents (it draws the "
                     "evaluation set; the test split of --test-fraction is chosen by hash, with no seed): give "
                     "--eval-documents N, or no --eval-seed")
    assert not (tmp_path / "out").exists()
    with pytest.raises(UsageError, match=r"^ShardOptions.eval_seed 12345 is only used with "
                                         r"ShardOptions.eval_documents "):
        ShardOptions(input=(str(planted[0]),), corpus="c", eval_seed=12345)
    # with --eval-documents, no --eval-seed is 12345, as before: the same draw and manifest, byte for byte
    ok(shard_cli(planted[0], tmp_path / "given", "--eval-documents", str(EVAL), "--eval-seed", "12345"))
    assert {p.relative_to(shards): p.read_bytes() for p in shards.rglob("*") if p.is_file()} == \
        {p.relative_to(tmp_path / "given"): p.read_bytes() for p in (tmp_path / "given").rglob("*") if p.is_file()}
    manifest = json.loads((shards / "manifest.json").read_text())
    assert manifest["params"]["eval_seed"] == manifest["eval"]["seed"] == 12345


@pytest.fixture(scope="module")
def shards(planted, tmp_path_factory):
    out = tmp_path_factory.mktemp("sharded") / "c"
    ok(shard_cli(planted[0], out, "--eval-documents", str(EVAL)))
    return out


def records(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != "manifest.json" and ".partial" not in p.parts}


def create_cli(shards, out, *extra):
    return run_cli("create", "--input", shards, "--vocab", VOCAB, "--out", out, "--seq", "64",
                   "--pred", "10", "--dupe-factor", "1", "--json", *extra)


def test_eval_samples_writes_exactly_k_test_instances_for_any_worker_count(shards, tmp_path):
    written = {}
    for workers in (1, 2):
        summary = ok(create_cli(shards, tmp_path / f"w{workers}", "--eval-samples", "50", "--workers", str(workers)))
        assert summary["instances"]["test"] == 50 and summary["eval_samples"] == 50
        written[workers] = records(tmp_path / f"w{workers}")
    assert written[1] == written[2]
    # the first 50 of the full test split: the same records as a run without the flag, cut
    full = ok(create_cli(shards, tmp_path / "full"))
    assert full["instances"]["test"] > 50 and full["instances"]["training"] == summary["instances"]["training"]
    def test_tfrecords(name):  # TFRecord frames records one after another: the cut split is a prefix
        return b"".join(data for path, data in records(tmp_path / name).items() if "tfrecord/test/" in path)

    assert test_tfrecords("full").startswith(test_tfrecords("w1")) and test_tfrecords("w1")
    # into the full run's tree: the test shards past the 50 are gone from disk, not only from the manifest
    ok(create_cli(shards, tmp_path / "full", "--eval-samples", "50"))
    assert records(tmp_path / "full") == written[1]


def test_fewer_test_instances_than_eval_samples_is_one_line_and_writes_nothing(shards, tmp_path):
    error = one_line_error(create_cli(shards, tmp_path / "out", "--eval-samples", "1000000"))
    assert "fewer than --eval-samples 1,000,000" in error and "/test" in error
    assert not (tmp_path / "out").exists()


def test_eval_samples_from_python_matches_the_command(shards, tmp_path):
    ok(create_cli(shards, tmp_path / "cli", "--eval-samples", "20"))
    summary = create(input=(str(shards),), vocab=VOCAB, out=str(tmp_path / "py"), seq=64, pred=10,
                     dupe_factor=1, eval_samples=20)
    assert summary["instances"]["test"] == 20 and records(tmp_path / "py") == records(tmp_path / "cli")


def test_eval_samples_shows_progress_while_it_counts_the_test_split(shards, tmp_path, capsys):
    """--eval-samples makes every test instance once to count them, which showed nothing (minutes on a large
    test split) before the shards' progress began; quiet, it still shows nothing."""
    create(input=(str(shards),), vocab=VOCAB, out=str(tmp_path / "shown"), seq=64, pred=10, dupe_factor=1,
           eval_samples=20, quiet=False)
    counted = [line for line in capsys.readouterr().err.splitlines() if line.startswith("create (eval set): ")]
    test_shards = len(list((shards / "test").glob("*.txt")))
    assert counted and counted[-1].startswith(f"create (eval set): {test_shards}/{test_shards} test shards counted, ")
    create(input=(str(shards),), vocab=VOCAB, out=str(tmp_path / "quiet"), seq=64, pred=10, dupe_factor=1,
           eval_samples=20)
    assert capsys.readouterr().err == ""
