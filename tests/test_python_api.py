"""README's "Python API" example, run exactly as it is written: download (from a stand-in hub on 127.0.0.1)
-> shard -> create -> validate -> train 20 steps -> finetune -> convert to Hugging Face, in Python calls only."""

import json
import re
import shutil
from pathlib import Path

import pytest

from stand_in_servers import REPO, StandInServer, ok, parquet_bytes, run_python
from test_download_squad_glue import glue_files

SAMPLE = REPO / "bertprep/data"


def readme_example():
    """The fenced Python block after README's <!-- python-api --> marker."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    match = re.search(r"<!-- python-api -->\n```python\n(.*?)\n```", text, re.S)
    assert match, "README lacks the python-api example"
    return match.group(1)


def sample_articles():
    """The embedded sample corpus's documents as a wikimedia/wikipedia parquet file."""
    documents = []
    for path in sorted(SAMPLE.glob("sample_corpus/training/*.txt")):
        documents += [d for d in path.read_text(encoding="utf-8").split("\n\n") if d.strip()]
    return parquet_bytes({"id": [str(i) for i in range(len(documents))],
                          "url": [f"https://en.wikipedia.org/wiki?curid={i}" for i in range(len(documents))],
                          "title": [f"Article {i}" for i in range(len(documents))],
                          "text": [d.replace("\n", " ") for d in documents]})


@pytest.mark.heavy
def test_readme_python_example_runs_the_whole_pipeline(tmp_path):
    shutil.copyfile(SAMPLE / "sample_vocab.txt", tmp_path / "vocab.txt")
    with StandInServer() as server:
        server.add_hub_dataset("wikimedia/wikipedia", {"20231101.en/train-00000-of-00001.parquet": sample_articles()})
        server.add_hub_dataset("nyu-mll/glue", glue_files())
        result = run_python(readme_example(), server=server, hf_home=tmp_path / "hf", cwd=tmp_path)
    output = ok(result)
    assert re.search(r"^loss after 20 steps: \d+\.\d{3}$", output, re.M), output
    work = tmp_path / "bert-work"
    assert (work / "formatted").is_dir() and any((work / "sharded").rglob("*_training_*.txt"))
    hf = work / "hf"
    assert json.loads((hf / "config.json").read_text())["num_hidden_layers"] == 2  # the tiny model
    assert (hf / "model.safetensors").is_file()
    # MRPC's dev-set scores (the stand-in's 2 dev pairs)
    assert re.search(r"^\{'examples': 2, 'loss': [0-9.]+, 'accuracy': [0-9.]+, 'f1_positive'", output, re.M), output
    assert not Path(work / ".partial").exists()
