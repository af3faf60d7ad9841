"""A user's runs of `python -m trainer`: outputs that would land on what the run reads or rotates, and a Ctrl-C
while the programs compile (probes of 2026-11-28, fifth)."""

import json
import os

from trainer.cli import main

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
