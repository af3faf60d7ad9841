"""`python -m trainer checkpoint inspect|convert|run`: what a checkpoint holds, the same weights in
another kind, its outputs on given inputs."""

import argparse
import io
import json
import os
import sys

import numpy as np

from bertprep import storage
from bertprep.atomic import atomic_open
from bertprep.errors import UsageError, run_reporting_errors
from bertprep.progress import QUIET_HELP, print_summary, readable_rows
from trainer.arguments import positive_int
from trainer.checkpoint import WRITERS
from trainer.library_logs import library_lines_left_out

PROG = "trainer checkpoint"


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _labels(text):
    """--labels' comma-separated names, each stripped."""
    return [label.strip() for label in text.split(",")]


def build_parser():
    p = _Parser(prog=PROG, description="Read, convert and run pretrained BERT checkpoints: ours (ckpt-<step>), "
                                       "Google's bert_model.ckpt, Hugging Face (directory or hub id), NVIDIA .pt.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    inspect = sub.add_parser("inspect", help="kind, config, variables and parameter count")
    inspect.add_argument("src")
    inspect.add_argument("--json", action="store_true", help="one JSON object on stdout")
    convert = sub.add_parser("convert", help="write the checkpoint as another kind")
    convert.add_argument("src")
    convert.add_argument("out", help="output directory or s3:// / gs:// prefix (must not exist)")
    convert.add_argument("--to", required=True, choices=WRITERS,
                         help="hf: config.json + model.safetensors, with the tokenizer (tokenizer.json, "
                              "tokenizer_config.json, special_tokens_map.json, vocab.txt) and a model card "
                              "(README.md); google: bert_model.ckpt + bert_config.json; bertprep: state.npz + "
                              "state.json for --init-checkpoint; these two with vocab.txt and tokenizer_config.json "
                              "where the vocab is known")
    convert.add_argument("--vocab", help="vocab.txt to export with the model, where the checkpoint carries none "
                                         "(--to hf refuses a model without one)")
    casing = convert.add_mutually_exclusive_group()
    casing.add_argument("--cased", dest="cased", action="store_const", const=True,
                        help="the vocab is for cased text (default: what the checkpoint says, else the vocab's "
                             "own tokens: capitals mean cased)")
    casing.add_argument("--uncased", dest="cased", action="store_const", const=False,
                        help="the vocab is for lower-cased text")
    convert.add_argument("--labels", type=_labels, help="a fine-tuned classifier's labels in id order, comma-"
                         "separated (e.g. not_equivalent,equivalent): what --to hf's config.json names, where the "
                         "checkpoint names none (Google's run_classifier.py keeps no labels)")
    convert.add_argument("--json", action="store_true", help="summary as JSON")
    convert.add_argument("--quiet", action="store_true", help=QUIET_HELP)
    run = sub.add_parser("run", help="outputs on given inputs, dropout off, into an .npz")
    run.add_argument("src")
    run.add_argument("--inputs", required=True, help="JSON lines with input_ids, input_mask, segment_ids "
                                                     "[, masked_lm_positions], or a records file")
    run.add_argument("--out", required=True, help="output .npz: sequence_output, pooled_output, "
                                                  "mlm_logits, nsp_logits (float32); a fine-tune's logits, or "
                                                  "start_logits and end_logits")
    run.add_argument("--batch-size", type=positive_int, default=32, help="inputs per model call (default: 32)")
    run.add_argument("--json", action="store_true", help="summary as JSON")
    run.add_argument("--quiet", action="store_true", help=QUIET_HELP)
    return p


def main(argv):
    parser = build_parser()
    args = parser.parse_args(argv)
    # An empty path names nothing: a read took it for no file (': No such file or directory', once the checkpoint
    # had been read), a join for the current directory.
    for name in ("src", "out", "inputs", "vocab"):
        if getattr(args, name, None) == "":
            flag = name if name == "src" or (name == "out" and args.command == "convert") else f"--{name}"
            parser.error(f"{flag}: an empty path names no file or directory")

    def command():
        with library_lines_left_out():  # TensorFlow's start-up lines, where a kind of checkpoint needs it
            return COMMANDS[args.command](args)

    return run_reporting_errors(PROG, command)


def _inspect(args):
    from trainer.checkpoint import read

    checkpoint = read(args.src)
    # every variable held, in the model's order, a fine-tune's task head last (attach): the model's rows alone left
    # the head out, 39 variables said where convert's summary says 41, while its parameters were counted
    variables = [{"name": name, "shape": list(value.shape)} for name, value in checkpoint.weights.items()]
    report = {"kind": checkpoint.kind, "path": checkpoint.path, "config": checkpoint.config.to_dict(),
              "heads": checkpoint.has_heads, "variables": len(variables), "parameters": checkpoint.parameters(),
              **({"task_head": checkpoint.task_head.describe()} if checkpoint.task_head else {}),
              "vocab": checkpoint.vocab, "notes": checkpoint.notes}
    warning = checkpoint.non_finite_warning()
    _warn(warning)
    if warning and args.json:
        report["warnings"] = [warning]
    if args.json:
        print(json.dumps(dict(report, variable_shapes=variables)))
        return 0
    for key, value in report.items():
        print(f"{key}: {value}")
    for variable in variables:
        print(f"  {variable['name']} {tuple(variable['shape'])}")
    return 0


def _warn(*warnings):
    """Each of a command's warnings (None: none), one stderr line, --quiet or not (a NaN checkpoint's:
    Checkpoint.non_finite_warning); stdout, the table or the JSON a script reads, stays as it was."""
    for warning in warnings:
        if warning:
            print(f"{PROG}: warning: {warning}", file=sys.stderr)


def _convert(args):
    from trainer.checkpoint import convert

    summary = convert(args.src, args.out, args.to, vocab=args.vocab, cased=args.cased, labels=args.labels)
    _warn(*summary.get("warnings", ()))
    if not args.quiet or args.json:
        print_summary("trainer checkpoint convert: done", summary, as_json=args.json, rows=readable_rows(summary))
    return 0


def _run(args):
    from bertprep.options import refuse_overlap
    from trainer.checkpoint import read
    from trainer.checkpoint.base import files_read
    from trainer.checkpoint.run import outputs, read_inputs
    from trainer.config import check_output_place

    # it would replace what it reads: the checkpoint's config and TF files beside a prefix too (files_read)
    refuse_overlap(args.out, [*files_read(args.src), args.inputs])
    storage.refuse_read_only("--out", args.out)  # before the model runs
    if storage.checks_locally(args.out):  # before the model runs, not after
        check_output_place("--out", storage.local_path(args.out), directory=False, makes_parents=True)
    refuse_npz_name(args.out)
    if storage.checks_locally(args.inputs):  # a directory or no file was OSError's words, the flag unnamed
        local = storage.local_path(args.inputs)
        if os.path.isdir(local):
            raise UsageError(f"--inputs {args.inputs}: is a directory; name one file: JSON lines (input_ids, "
                             "input_mask, segment_ids) or a records file")
        if not os.path.exists(local):
            raise UsageError(f"--inputs {args.inputs}: no such file")
    if os.path.basename(args.inputs.rstrip("/")) == "manifest.json":  # was "line 1: not JSON: Expecting property"
        raise UsageError(f"--inputs {args.inputs}: a stage's manifest, not inputs; name one file: JSON lines "
                         "(input_ids, input_mask, segment_ids) or a records file")
    inputs = read_inputs(args.inputs)
    checkpoint = read(args.src)
    _warn(checkpoint.non_finite_warning())  # its outputs may not be numbers: said before the model runs
    arrays = outputs(checkpoint, inputs, args.batch_size)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    with atomic_open(args.out) as f:
        f.write(buffer.getvalue())
    if not args.quiet or args.json:
        summary = {"kind": checkpoint.kind, "inputs": len(inputs.places), "out": args.out,
                   "arrays": ", ".join(f"{k} {list(v.shape)}" for k, v in arrays.items()),
                   **({} if checkpoint.has_pooler else {"pooled_output": "none: the checkpoint has no pooler "
                                                                          "(bert/pooler/dense)"})}
        print_summary("trainer checkpoint run: done", summary, as_json=args.json, rows=readable_rows(summary))
    return 0


def refuse_npz_name(out):
    """A UsageError for a `run --out` whose name does not end in .npz: the outputs are a NumPy archive, written
    under the name as given (np.savez would add .npz), so `--out records/manifest.json`, a slip for another
    folder's file, replaced that manifest with an archive and every stage then called the records damaged."""
    if not out.endswith(".npz"):
        stem = os.path.splitext(os.path.basename(out.rstrip("/")))[0] or "outputs"
        raise UsageError(f"--out {out}: not a .npz name: the outputs are a NumPy .npz archive; name the file so, "
                         f"such as {stem}.npz")


COMMANDS = {"inspect": _inspect, "convert": _convert, "run": _run}
