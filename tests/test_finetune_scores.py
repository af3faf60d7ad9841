"""Fine-tuning scores: our SQuAD EM/F1 equal the official evaluate scripts' on the same files, write_predictions
turns logits into the document's own text, and the GLUE metrics agree with SciPy and their definitions."""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from trainer import metrics
from trainer.squad_predictions import final_text, write_predictions

# What the official evaluate-v1.1.py / evaluate-v2.0.py printed for varied_predictions(dev set, seed): a golden
# the reference produced (its scripts are third-party code, so they are not in this repository).
# Regenerate with: python tests/test_finetune_scores.py DIR_HOLDING_THE_TWO_SCRIPTS
GOLDEN_SCORES = Path(__file__).parent / "data" / "squad_official_scores.json"


def official_script(version):
    """The official evaluate-v<version>.py where it is at hand ($BERTPREP_SQUAD_EVAL_DIR), else None."""
    path = os.path.join(os.environ.get("BERTPREP_SQUAD_EVAL_DIR", ""), f"evaluate-v{version}.py")
    return path if os.path.isfile(path) else None


def varied_predictions(dataset, seed):
    """Predictions that exercise every branch of the scorers: exact answers, answers with other case,
    punctuation and articles, partial and disjoint spans, empty answers, missing questions, and
    null odds with ties on both sides of the default threshold 1.0."""
    rng = random.Random(seed)
    predictions, null_odds = {}, {}
    for article in dataset["data"]:
        for paragraph in article["paragraphs"]:
            words = paragraph["context"].split()
            for qa in paragraph["qas"]:
                gold = qa["answers"][0]["text"] if qa["answers"] else ""
                choice = rng.randrange(7)
                if choice == 6 and dataset["version"] == "1.1":
                    continue  # unanswered: scores 0
                start = rng.randrange(len(words))
                predictions[qa["id"]] = [
                    gold,
                    f"The {gold.upper()}!",
                    " ".join(gold.split()[1:]),
                    " ".join(words[start:start + rng.randrange(1, 6)]),
                    "an " + " ".join(words[start:start + 2]) + " a",
                    "",
                    gold + " " + words[start],
                ][choice]
                null_odds[qa["id"]] = rng.choice([-2.5, 0.0, 0.5, 1.0, 1.5, 3.0, rng.uniform(-4, 4)])
    return predictions, null_odds


def run_official(script, *paths):
    result = subprocess.run([sys.executable, script, *map(str, paths)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def official_runs(dev_path, version, seed, directory, script):
    """{run name: the scores the official script prints} for one seed's predictions (and null odds)."""
    dataset = json.loads(Path(dev_path).read_text(encoding="utf-8"))
    predictions, null_odds = varied_predictions(dataset, seed)
    predictions_path, odds_path = directory / f"predictions-{seed}.json", directory / f"null_odds-{seed}.json"
    predictions_path.write_text(json.dumps(predictions, indent=4))
    odds_path.write_text(json.dumps(null_odds, indent=4))
    runs = {f"v{version}/seed{seed}": run_official(script, dev_path, predictions_path)}
    if version == "2.0":
        runs[f"v{version}/seed{seed}/na-prob"] = run_official(script, dev_path, predictions_path, "--na-prob-file",
                                                              odds_path)
    return runs


@pytest.mark.parametrize("version", ["1.1", "2.0"])
def test_squad_scores_equal_the_official_scripts(shared_dir, tmp_path, version):
    golden = json.loads(GOLDEN_SCORES.read_text(encoding="utf-8"))["scores"]
    dev_path = shared_dir / "fixtures" / "finetune" / "squad" / f"v{version}" / f"dev-v{version}.json"
    dataset = json.loads(dev_path.read_text(encoding="utf-8"))
    script = official_script(version)
    for seed in range(3):
        predictions, null_odds = varied_predictions(dataset, seed)
        if version == "1.1":
            ours = metrics.squad_v1_scores(dataset["data"], predictions)
            assert ours == golden[f"v1.1/seed{seed}"] and 0 < ours["exact_match"] < ours["f1"] < 100
        else:
            assert metrics.squad_v2_scores(dataset["data"], predictions) == golden[f"v2.0/seed{seed}"]
            ours = metrics.squad_v2_scores(dataset["data"], predictions, null_odds)
            assert ours == golden[f"v2.0/seed{seed}/na-prob"]
            assert {"HasAns_f1", "NoAns_f1", "best_f1_thresh"} <= set(ours)
        if script is not None:  # the scripts at hand: they still print the golden
            for name, theirs in official_runs(dev_path, version, seed, tmp_path, script).items():
                assert theirs == golden[name], name


def test_squad_scores_by_hand():
    answered = [{"id": "a", "answers": [{"text": "the Eiffel Tower"}, {"text": "Tower"}]},
                {"id": "b", "answers": [{"text": "in 1889"}]}]
    v1 = metrics.squad_v1_scores([{"paragraphs": [{"qas": answered}]}], {"a": "eiffel tower.", "b": "1889 paris"})
    # a: exact after normalization; b: one of two predicted tokens matches one of two gold tokens.
    assert v1 == {"exact_match": 50.0, "f1": 75.0}
    dataset = [{"paragraphs": [{"qas": answered + [{"id": "c", "answers": []}]}]}]
    v2 = metrics.squad_v2_scores(dataset, {"a": "Tower", "b": "", "c": ""})
    assert (v2["exact"], v2["HasAns_exact"], v2["NoAns_exact"], v2["total"]) == (200 / 3, 50.0, 100.0, 3)


def squad_features():
    """One example, two windows over the document; token 0 is [CLS], the question takes 1-2."""
    doc_tokens = ["Steve", "Smith's", "café", "opened", "in", "1889."]
    example = {"example_index": 0, "qas_id": "q1", "question_text": "who?", "doc_tokens": doc_tokens}
    first = {"unique_id": 1000000000, "example_index": 0, "doc_span_index": 0,
             "tokens": ["[CLS]", "who", "?", "[SEP]", "steve", "smith", "'", "s", "cafe", "[SEP]"],
             "token_to_orig_map": {4: 0, 5: 1, 6: 1, 7: 1, 8: 2},
             "token_is_max_context": {4: True, 5: True, 6: True, 7: True, 8: False}}
    second = {"unique_id": 1000000001, "example_index": 0, "doc_span_index": 1,
              "tokens": ["[CLS]", "who", "?", "[SEP]", "cafe", "opened", "in", "1889", ".", "[SEP]"],
              "token_to_orig_map": {4: 2, 5: 3, 6: 4, 7: 5, 8: 5},
              "token_is_max_context": {4: True, 5: True, 6: True, 7: True, 8: True}}
    return [example], [first, second]


def peaked(start, end, size=10, null=0.0):
    starts, ends = np.full(size, -5.0, np.float32), np.full(size, -5.0, np.float32)
    starts[start], ends[end] = 4.0, 4.0
    starts[0] = ends[0] = null
    return starts, ends


def test_write_predictions_maps_spans_back_to_the_documents_text():
    examples, features = squad_features()
    # "steve smith" spans tokens 4-5 of the first window: the answer drops "'s" from "Smith's".
    logits = {1000000000: peaked(4, 5), 1000000001: peaked(7, 8, null=-9.0)}
    predictions, nbest, odds = write_predictions(examples, features, logits)
    assert predictions == {"q1": "Steve Smith"} and odds == {}
    assert nbest["q1"][0]["text"] == "Steve Smith" and abs(sum(a["probability"] for a in nbest["q1"]) - 1) < 1e-9
    # A token outside its maximum context (cafe in window 0) is never an answer start; reversed or
    # too long spans neither: the best remaining answer comes from the second window.
    logits = {1000000000: peaked(8, 8), 1000000001: peaked(7, 8)}
    assert write_predictions(examples, features, logits)[0] == {"q1": "1889."}
    assert write_predictions(examples, features, logits, max_answer_length=1)[0]["q1"] != "1889."
    # SQuAD 2.0: the null answer wins when null minus best non-null exceeds the threshold.
    logits = {1000000000: peaked(4, 5, null=5.0), 1000000001: peaked(7, 8, null=6.0)}
    predictions, _, odds = write_predictions(examples, features, logits, version_2_with_negative=True)
    assert predictions == {"q1": ""} and odds == {"q1": pytest.approx(10.0 - 8.0)}
    predictions, _, _ = write_predictions(examples, features, logits, version_2_with_negative=True,
                                          null_score_diff_threshold=3.0)
    assert predictions == {"q1": "Steve Smith"}


def test_final_text_aligns_or_falls_back_to_the_original():
    assert final_text("steve smith", "Steve Smith's", lower_case=True) == "Steve Smith"
    assert final_text("cafe", "Café!", lower_case=True) == "Café"
    assert final_text("nowhere", "Steve Smith's", lower_case=True) == "Steve Smith's"


def test_glue_metrics():
    stats = pytest.importorskip("scipy.stats")
    labels = np.array([1, 0, 1, 1, 0, 0, 1, 0])
    predictions = np.array([1, 0, 0, 1, 1, 0, 1, 1])
    assert metrics.accuracy(predictions, labels) == 5 / 8
    # tp 3, fp 2, fn 1, tn 2
    assert metrics.f1_positive(predictions, labels) == 2 * 3 / (2 * 3 + 2 + 1)
    assert metrics.matthews_correlation(predictions, labels) == pytest.approx((3 * 2 - 2 * 1) / np.sqrt(5 * 4 * 4 * 3))
    assert metrics.matthews_correlation(np.ones(4), np.array([1, 0, 1, 0])) == 0.0
    rng = np.random.default_rng(0)
    x = rng.normal(size=50)
    y = np.round(x + rng.normal(size=50), 1)  # ties in the ranks
    y[:5] = y[5]
    assert metrics.pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0], rel=1e-12)
    assert metrics.spearman(x, y) == pytest.approx(stats.spearmanr(x, y)[0], rel=1e-12)


if __name__ == "__main__":  # regenerate tests/data/squad_official_scores.json from the official scripts
    import tempfile

    sys.path.insert(0, str(Path(__file__).parent))
    from conftest import shared_path

    scripts = sys.argv[1]
    scores = {}
    with tempfile.TemporaryDirectory() as directory:
        for version in ("1.1", "2.0"):
            dev = shared_path() / "fixtures" / "finetune" / "squad" / f"v{version}" / f"dev-v{version}.json"
            for seed in range(3):
                scores.update(official_runs(dev, version, seed, Path(directory),
                                            os.path.join(scripts, f"evaluate-v{version}.py")))
    made_by = ("the official evaluate-v1.1.py / evaluate-v2.0.py run on varied_predictions(dev set, seed) of "
               "tests/test_finetune_scores.py: python tests/test_finetune_scores.py DIR_HOLDING_THE_TWO_SCRIPTS")
    GOLDEN_SCORES.write_text(json.dumps({"made_by": made_by, "scores": scores}, indent=1, sort_keys=True) + "\n")
