"""The model card (`README.md`) a Hugging Face export carries, in the hub's format: YAML front matter
(`library_name: transformers`, the pipeline the model serves, tags, a fine-tune's scores as `model-index`)
and a text that says what the model is, how it was trained (the run's settings from its state.json) and
on what (each records manifest with its sha256), so that a model found on the hub can be traced back
to its data."""

import json
import os

# The pipeline each exported architecture serves (transformers' pipeline tags).
PIPELINES = {"BertForPreTraining": "fill-mask", "BertModel": "feature-extraction",
             "BertForSequenceClassification": "text-classification",
             "BertForQuestionAnswering": "question-answering"}


def run_state_of(checkpoint):
    """The state.json of one of this trainer's checkpoints ({} for another kind or an unreadable one)."""
    if checkpoint.kind != "bertprep":
        return {}
    try:
        with open(os.path.join(checkpoint.path, "state.json"), encoding="utf-8") as f:
            state = json.load(f)
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def write(directory, name, checkpoint, tokenizer, architecture, state):
    """README.md into `directory`, for the model `name` (the export's directory name). `state`: the run's
    state.json ({} where unknown); a fine-tune's holds its eval scores, given in `model-index`."""
    config = checkpoint.config
    pipeline = PIPELINES.get(architecture, "feature-extraction")
    task = (state.get("settings") or {}).get("task")
    scores = {metric: value for metric, value in (state.get("evaluation") or {}).items()
              if metric not in ("examples", "loss") and isinstance(value, (int, float))} if task else {}
    front = ["---", "library_name: transformers", f"pipeline_tag: {pipeline}", "tags:", "- bert", "- bertprep"]
    if scores:
        dataset = "squad" if "SQUAD" in task.upper() else "glue"
        front += ["model-index:", f"- name: {name}", "  results:", "  - task:", f"      type: {pipeline}",
                  "    dataset:", f"      name: {task}", f"      type: {dataset}", "    metrics:"]
        for metric, value in scores.items():
            front += [f"    - type: {metric}", f"      value: {json.dumps(value)}"]
    front.append("---")
    text = [
        f"# {name}", "",
        f"A BERT {architecture} (L{config.num_hidden_layers}/H{config.hidden_size}/A{config.num_attention_heads}, "
        f"vocab {config.vocab_size:,}, {config.max_position_embeddings} positions), converted by bertprep's "
        f"`trainer checkpoint convert --to hf` from a {checkpoint.kind} checkpoint (`{checkpoint.path}`).", "",
        "## Tokenizer", "",
        f"WordPiece over `vocab.txt` ({len(tokenizer.tokens()):,} tokens, sha256 `{tokenizer.sha256}`, from "
        f"`{tokenizer.source}`), {'lower-cased' if tokenizer.lower_case else 'cased'} as google-research/bert's "
        f"FullTokenizer with do_lower_case={tokenizer.lower_case}; inputs longer than "
        f"{config.max_position_embeddings} tokens are truncated with `truncation=True`. Load it with "
        "`AutoTokenizer`, which reads `tokenizer.json` as written: `BertTokenizer.from_pretrained` rebuilds it from "
        "`vocab.txt` and makes a word of 101-200 characters `[UNK]`, which this tokenizer splits as the reference "
        "does.",
    ]
    settings = state.get("settings") or {}
    if settings:
        shown = {key: value for key, value in settings.items() if key != "model" and value is not None}
        text += ["", "## Training", "", "The run's settings (its `state.json`), at step "
                 f"{state.get('step', '?')}:", "", "```json", json.dumps(shown, indent=1, sort_keys=True), "```"]
    manifests = (state.get("data") or {}).get("manifests") or {}
    if manifests:
        text += ["", "## Data", "", "The records it was trained on, by their bertprep manifests:", ""]
        text += [f"- `{path}`: sha256 `{digest}`" for path, digest in sorted(manifests.items())]
    if scores:
        text += ["", "## Scores", "", f"On {task}'s eval split, after fine-tuning:", ""]
        text += [f"- {metric}: {value}" for metric, value in scores.items()]
    with open(os.path.join(directory, "README.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(front + text) + "\n")
