"""README's "Python API" example, run exactly as it is written, as the notebook docs/notebooks/pipeline.ipynb
(one cell per paragraph) in a fresh Jupyter kernel: download (from a stand-in hub on 127.0.0.1) -> shard ->
create -> validate -> train 20 steps -> finetune -> convert to Hugging Face -> pipeline("fill-mask"), in Python
calls only. Every cell runs; no output holds a traceback or a TensorFlow, absl or CUDA line; the report shows
as HTML; the trainer's progress is tqdm's notebook widget."""

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from stand_in_servers import REPO, StandInServer, parquet_bytes
from test_download_squad_glue import glue_files
from trainer_checks import xla_flags

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


NOTEBOOK = REPO / "docs" / "notebooks" / "pipeline.ipynb"
# What must never reach a cell: a traceback, TensorFlow's and absl's lines (Python's logger, C++ log lines).
LIBRARY_LINE = re.compile(r"Traceback|INFO:tensorflow|WARNING:tensorflow|[IWEF]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ \S+:\d+\]"
                          r"|absl::|cuInit|oneDNN|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] ")


def notebook_code():
    import nbformat

    notebook = nbformat.read(NOTEBOOK, as_version=4)
    return notebook, [cell.source for cell in notebook.cells if cell.cell_type == "code"]


def test_the_notebook_holds_the_readme_example():
    _notebook, cells = notebook_code()
    assert "\n\n".join(cells) == readme_example()


def texts(cell):
    """(stream and plain-text outputs of a cell, its HTML outputs)."""
    plain, html = [], []
    for output in cell.get("outputs", []):
        if output["output_type"] == "stream":
            plain.append(output["text"])
        elif output["output_type"] == "error":
            plain.append("Traceback: " + "\n".join(output["traceback"]))
        else:
            plain.append(output.get("data", {}).get("text/plain", "") + "\n")  # a display is a block of its own
            html.append(output.get("data", {}).get("text/html", ""))
    return "".join(plain), html


@pytest.mark.heavy
def test_readme_python_example_runs_the_whole_pipeline_in_a_notebook(tmp_path):
    from nbclient import NotebookClient

    shutil.copyfile(SAMPLE / "sample_vocab.txt", tmp_path / "vocab.txt")
    notebook, _cells = notebook_code()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "BERTPREP_", "TF_CPP_"))}
    with StandInServer() as server:
        server.add_hub_dataset("wikimedia/wikipedia", {"20231101.en/train-00000-of-00001.parquet": sample_articles()})
        server.add_hub_dataset("nyu-mll/glue", glue_files())
        env.update(HF_ENDPOINT=server.url, HF_HOME=str(tmp_path / "hf"), HF_HUB_DISABLE_TELEMETRY="1",
                   HF_HUB_DISABLE_PROGRESS_BARS="1", PYTHONPATH=str(REPO),
                   # XLA's optimized code, not the fast compiles conftest sets for the tests' short runs: the
                   # example's training and fine-tuning cells took 27 s at fast compiles, 20 s so (the test's
                   # CPU fell from 47 to 35 s). The example itself is run as it is written.
                   XLA_FLAGS=xla_flags(fast_compile=False))
        NotebookClient(notebook, timeout=600, kernel_name="python3").execute(env=env, cwd=str(tmp_path))
    outputs = [texts(cell) for cell in notebook.cells if cell.cell_type == "code"]
    printed = "".join(plain for plain, _html in outputs)
    assert not LIBRARY_LINE.search(printed), printed
    assert re.search(r"^loss after 20 steps: \d+\.\d{3}$", printed, re.M), printed
    # MRPC's dev-set scores (the stand-in's 2 dev pairs)
    assert re.search(r"^\{'examples': 2, 'loss': [0-9.]+, 'accuracy': [0-9.]+, 'f1_positive'", printed, re.M), printed
    # the trainer's progress: tqdm's widget (ipywidgets is in the test extra), not stderr lines
    train_cell = next(cell for cell in notebook.cells if "trainer.train(" in cell.source)
    assert any("application/vnd.jupyter.widget-view+json" in output.get("data", {})
               for output in train_cell["outputs"]), train_cell["outputs"]
    assert not re.search(r"^trainer: \d+/20 steps", printed, re.M), printed
    report_html = next(html for plain, html in outputs if "bertprep validate: SOUND" in plain)
    assert report_html[0].startswith("<pre>bertprep validate: SOUND") and "data:image/png;base64," in report_html[0]
    answers = outputs[-1][0]  # fill-mask's five answers: real tokens of the vocab, not empty strings
    assert answers.count("'token_str': '") == 5 and "'token_str': ''" not in answers, answers
    work = tmp_path / "bert-work"
    assert (work / "formatted").is_dir() and any((work / "sharded").rglob("*_training_*.txt"))
    hf = work / "hf"
    assert json.loads((hf / "config.json").read_text())["num_hidden_layers"] == 2  # the tiny model
    assert (hf / "model.safetensors").is_file() and (hf / "tokenizer.json").is_file()
    assert not Path(work / ".partial").exists()
