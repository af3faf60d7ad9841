"""`python -m trainer` (pretraining) and `python -m trainer finetune`: arguments, one-line errors,
the final summary.

Backend: `KERAS_BACKEND` (tensorflow by default, or jax). Several hosts
(TensorFlow): set `TF_CONFIG` on every host; see docs/trainer.md.
"""

import contextlib
import dataclasses
import os
import sys

from bertprep.errors import run_reporting_errors
from bertprep.progress import add_output_arguments, print_summary, readable_rows
from trainer.arguments import (
    OneLineErrorParser,
    add_records_and_model_arguments,
    positive_int,
    positive_number,
    warmup,
)
from trainer.config import (
    ALLREDUCE_DTYPES,
    ATTENTION_KERNELS,
    CLIPPING,
    DEFAULT_CLIP_NORM,
    DROPOUT_RNGS,
    EMBEDDING_GRADIENTS,
    FINETUNING_FORMATS,
    GELU_FORMULAS,
    GEMM_AUTOTUNE,
    GEMM_KERNELS,
    LAST_LAYERS,
    OPTIMIZERS,
    PLACEMENTS,
    PRECISIONS,
    QKV_PROJECTIONS,
    SIZES,
    FinetuneConfig,
    TrainConfig,
)

PROG = "trainer"


def add_optimizer_arguments(p, default):
    """--optimizer and --clip-norm, for pretraining and fine-tuning (docs/trainer.md compares the optimizers)."""
    p.add_argument("--optimizer", choices=tuple(OPTIMIZERS), default=default,
                   help=f"{', '.join(f'{k}: {v}' for k, v in OPTIMIZERS.items())} (default: {default})")
    p.add_argument("--clip-norm", type=positive_number, default=None, metavar="C",
                   help=f"clip the summed gradients to global norm C ({' and '.join(CLIPPING)}; "
                        f"default: {DEFAULT_CLIP_NORM})")


# The TrainConfig fields that add_step_arguments sets: what trainer.benchmark passes on to its workers.
STEP_FIELDS = ("embedding_gradient", "dropout_rng", "gemm", "gemm_autotune", "attention", "gelu", "qkv_projection",
               "last_layer", "scan_layers", "compilation_cache")


def add_step_arguments(p):
    """The levers of how the step computes (docs/trainer.md, "The step on one GPU, measured"): same model, same
    loss; their destinations are STEP_FIELDS."""
    p.add_argument("--embedding-gradient", choices=EMBEDDING_GRADIENTS, default="auto",
                   help="how the embedding rows' gradients reach their tables: Keras's scatter-add, or sorted "
                        "(summed per distinct id first; JAX); auto: sorted on a GPU under JAX, else scatter")
    p.add_argument("--dropout-rng", choices=DROPOUT_RNGS, default="auto",
                   help="generator of the dropout masks: threefry (Keras's), rbg (XLA's RngBitGenerator; JAX) or "
                        "hash (a counter hash of each element's position, computed where the mask is applied; "
                        "JAX); auto: hash on a GPU under JAX, else threefry")
    p.add_argument("--gemm", choices=GEMM_KERNELS, default="cublas",
                   help="matrix products on an NVIDIA GPU: cublas, cublaslt (cuBLASLt, bias adds in the "
                        "products' epilogue; not yet measured), or xla (XLA's choice, with its Triton fusions "
                        "autotuned at compile time) (default: cublas)")
    p.add_argument("--gemm-autotune", choices=GEMM_AUTOTUNE, default="on",
                   help="on an NVIDIA GPU, XLA times each matrix product's cuBLAS algorithms while it compiles (on), "
                        "or takes cuBLAS's heuristic choice (off: a first step seconds sooner, a few percent "
                        "slower steps) (default: on)")
    p.add_argument("--attention", choices=ATTENTION_KERNELS, default="auto",
                   help="the attention's kernel: einsum (Keras's: two products around XLA's softmax and dropout) or "
                        "fused (one Pallas kernel, dropout included; JAX, sequences of 16-256 tokens, a power of two; "
                        "interpreted off a GPU); auto: fused under JAX on an NVIDIA GPU of compute capability 8.0 or "
                        "later where it takes the run, else einsum")
    p.add_argument("--gelu", choices=GELU_FORMULAS, default="auto",
                   help="the exact GELU's formula: keras (Keras's: under JAX 0.5x erfc(-x/sqrt 2), which XLA expands "
                        "into a long float32 expression) or erf (0.5x (1 + erf(x/sqrt 2)), one XLA instruction; "
                        "JAX; not yet measured on a GPU); auto: keras")
    p.add_argument("--qkv-projection", choices=QKV_PROJECTIONS, default="auto",
                   help="with the fused attention, the query, key and value projections as separate matrix "
                        "products (Keras's) or packed (one product, the kernel reading its output in place and "
                        "writing the gradient packed: one product back to the input instead of three and two "
                        "adds; JAX; not yet measured on a GPU); auto: separate")
    p.add_argument("--last-layer", choices=LAST_LAYERS, default="auto",
                   help="the last Transformer layer on all positions, or on the predicted ones only (the [CLS] "
                        "and masked positions the heads read; keys and values still over the whole sequence: 5.6%% "
                        "fewer FLOPs for BERT-base at 128/20; not with --pipeline-stages; not yet measured on a "
                        "GPU); auto: all")
    p.add_argument("--scan-layers", action="store_true",
                   help="run the Transformer layers as one jax.lax.scan loop: one layer traced and compiled "
                        "instead of each (JAX; not with --model-parallel or --pipeline-stages)")
    p.add_argument("--no-compilation-cache", dest="compilation_cache", action="store_false",
                   help="do not use JAX's persistent cache of compiled programs (also: BERTPREP_COMPILATION_CACHE=0)")


def build_parser():
    p = OneLineErrorParser(
        prog=PROG, description="Pretrain BERT (Keras 3) on the records of `bertprep create` or `bertprep pack` "
                               "(TFRecord, OFRecord, HDF5 or Parquet).")
    add_records_and_model_arguments(p)
    add_optimizer_arguments(p, default="lamb")
    p.add_argument("--lr", type=float, default=1e-4, help="peak learning rate (default: 1e-4)")
    p.add_argument("--warmup", type=warmup, default=0.1, help="warmup: fraction of --steps or steps (default: 0.1)")
    p.add_argument("--steps", type=positive_int, default=1000, help="optimizer steps (default: 1000)")
    p.add_argument("--batch-size", type=positive_int, default=32,
                   help="sequences per replica per micro-batch (default: 32)")
    p.add_argument("--grad-accum", type=positive_int, default=1, help="micro-batches per optimizer step (default: 1)")
    p.add_argument("--precision", choices=PRECISIONS, default="fp32",
                   help="fp32, or amp: mixed_bfloat16 where the device multiplies bfloat16 (NVIDIA compute "
                        "capability 8.0 and later, TPUs, CPUs), mixed_float16 with loss scaling elsewhere; or "
                        "either named (default: fp32)")
    p.add_argument("--allreduce-dtype", choices=ALLREDUCE_DTYPES, default="fp32",
                   help="dtype of the gradients while they are summed across replicas, once per step (default: fp32)")
    p.add_argument("--pad-vocab", type=positive_int, default=None, metavar="N",
                   help="embedding rows rounded up to a multiple of N; checkpoints and logits keep the real "
                        "vocab (default: 8 for Google's sizes, 1 = none with --bert-config)")
    p.add_argument("--steps-per-call", type=positive_int, default=1, metavar="N",
                   help="optimizer steps per compiled call between log lines (TensorFlow: one tf.function call, "
                        "as DLE's steps_per_loop; JAX dispatches asynchronously anyway) (default: 1)")
    p.add_argument("--seed", type=int, default=12345,
                   help="seed of initialization, dropout and data order (default: 12345)")
    add_step_arguments(p)
    p.add_argument("--bin-size", type=positive_int, default=None, metavar="N",
                   help="length binning: batches of sequences whose lengths share a bin of N tokens, cut to the "
                   "bin's longest rounded up to 8 (one data worker; each new width compiles a step once)")
    p.add_argument("--model-parallel", type=positive_int, default=1, metavar="K",
                   help="split each model replica over K devices (JAX; default: 1, data parallel only)")
    p.add_argument("--pipeline-stages", type=positive_int, default=1, metavar="S",
                   help="split the Transformer layers over S pipeline stages, --grad-accum micro-batches "
                        "(JAX; default: 1, no pipeline)")
    p.add_argument("--placement", choices=PLACEMENTS, default="intra_first",
                   help="several hosts: a replica's K (x S) devices on one host (intra_first, the default) or across "
                        "hosts")
    p.add_argument("--init-checkpoint", help="start from these weights (encoder and MLM/NSP heads) and their config: "
                                             "ours, Google's bert_model.ckpt, Hugging Face directory or hub id, "
                                             "NVIDIA .pt (see `python -m trainer checkpoint inspect`)")
    p.add_argument("--checkpoint-dir", help="directory of checkpoints (and TensorBoard scalars)")
    p.add_argument("--checkpoint-every", type=positive_int, default=1000,
                   help="steps between checkpoints (default: 1000)")
    p.add_argument("--keep-checkpoints", type=positive_int, default=3, metavar="K",
                   help="keep the K newest checkpoints, deleting older ones (default: 3; at least 1, the one a "
                        "--resume continues from; a large K keeps all)")
    p.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --checkpoint-dir")
    p.add_argument("--eval-every", type=int, default=0,
                   help="steps between evaluations on the test split (0, the default: never)")
    p.add_argument("--eval-steps", type=positive_int, default=10, help="batches per evaluation (default: 10)")
    p.add_argument("--log-every", type=positive_int, default=100, help="steps between log lines (default: 100)")
    p.add_argument("--log-json", help="append log lines as JSON to this file")
    p.add_argument("--tensorboard-dir", help="TensorBoard scalars (default: CHECKPOINT_DIR/tensorboard)")
    add_output_arguments(p)
    return p


def build_finetune_parser():
    p = OneLineErrorParser(prog=f"{PROG} finetune",
                           description="Fine-tune a pretraining checkpoint of the trainer on SQuAD or GLUE records "
                                       "from `bertprep create-squad` / `create-glue`.")
    p.add_argument("--task", required=True, help="squad, or a GLUE task: cola, sst-2, mrpc, sts-b, qqp, mnli, qnli, "
                                                 "rte, wnli")
    p.add_argument("--data", required=True, help="output directory of create-squad / create-glue")
    p.add_argument("--format", required=True, choices=FINETUNING_FORMATS, help="record format to read")
    p.add_argument("--init-checkpoint", help="pretraining checkpoint: ours (ckpt-<step> or a --checkpoint-dir), "
                                             "Google's "
                                             "bert_model.ckpt, a Hugging Face directory or hub id, NVIDIA .pt; "
                                             "default: a tiny one pretrained on the embedded sample")
    p.add_argument("--model", choices=tuple(SIZES), help="size of the on-the-fly checkpoint (default: tiny); "
                                                         "with --init-checkpoint it must be the checkpoint's")
    length = p.add_mutually_exclusive_group()  # both given, one would be silently ignored
    length.add_argument("--epochs", type=float, default=2.0, help="passes over the training records (default: 2)")
    length.add_argument("--steps", type=positive_int, help="optimizer steps instead of --epochs")
    p.add_argument("--lr", type=float, default=3e-5, help="peak learning rate (default: 3e-5)")
    p.add_argument("--warmup", type=warmup, default=0.1, help="warmup: fraction of the steps or steps (default: 0.1)")
    p.add_argument("--batch-size", type=positive_int, default=32, help="sequences per replica (default: 32)")
    add_optimizer_arguments(p, default="adam")
    p.add_argument("--precision", choices=PRECISIONS, default="fp32",
                   help="as `python -m trainer --precision` (default: fp32)")
    p.add_argument("--seed", type=int, default=12345,
                   help="seed of the head's initialization, dropout and data order (default: 12345)")
    p.add_argument("--output-dir", help="GLUE's eval_results.txt (the scores, as run_classifier.py writes them), "
                                         "SQuAD's predictions.json and nbest_predictions.json (null_odds.json for "
                                         "2.0), --predict's test_results.tsv of GLUE; the scores are also in the "
                                         "summary and --log-json (default: ./finetune-<task>)")
    p.add_argument("--checkpoint-dir", help="also save the fine-tuned model (and optimizer) state here")
    p.add_argument("--no-eval", action="store_true",
                   help="train only, score nothing (without it, --data without eval records is an error)")
    p.add_argument("--predict", action="store_true",
                   help="also predict the test split as google-research/bert's --do_predict: GLUE test_results.tsv "
                        "(predict.tf_record / test.of_record-*: class probabilities, tab-separated, one line per "
                        "example; STS-B one value), SQuAD predictions.json and nbest_predictions.json of the eval "
                        "records (run_squad.py's predict file), into --output-dir")
    p.add_argument("--eval-file", help="SQuAD dev JSON to score against (default: the manifest's eval source)")
    p.add_argument("--null-score-diff-threshold", type=float, default=0.0,
                   help="SQuAD 2.0: predict no answer above this null minus best score (default: 0.0)")
    p.add_argument("--log-every", type=positive_int, default=10, help="steps between log lines (default: 10)")
    p.add_argument("--log-json", help="append log lines as JSON to this file")
    p.add_argument("--tensorboard-dir", help="TensorBoard scalars")
    add_output_arguments(p)
    return p


@contextlib.contextmanager
def _library_output_to_stderr(enabled):
    """With --json, stdout carries the summary alone: what libraries print there from C++ while the
    run lasts (Gloo's connection line under several JAX processes) goes to stderr."""
    if not enabled:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["checkpoint"]:
        from trainer.checkpoint.cli import main as checkpoint_main

        return checkpoint_main(argv[1:])
    if argv[:1] == ["finetune"]:
        args = build_finetune_parser().parse_args(argv[1:])
        return run_reporting_errors(PROG, lambda: _finetune(args), sigterm=True)
    args = build_parser().parse_args(argv)
    # SIGTERM (a scheduler's stop) ends a run as Ctrl-C does, with a line of where it stopped, exit 143
    return run_reporting_errors(PROG, lambda: _train(args), sigterm=True)


def config_from(args, kind):
    """The run's config (TrainConfig or FinetuneConfig) of parsed arguments: checked as it is built."""
    given = vars(args)
    return kind(**{field.name: given[field.name] for field in dataclasses.fields(kind)})


def train_config(argv):
    """The TrainConfig of `python -m trainer` arguments."""
    return config_from(build_parser().parse_args(argv), TrainConfig)


def _train(args):
    return _run(args, TrainConfig, "train", "trainer: done")


def _finetune(args):
    return _run(args, FinetuneConfig, "finetune", "trainer finetune: done")


def _run(args, kind, function, title):
    """Build the run's config (checked), call trainer.train or trainer.finetune, print its summary."""
    import trainer

    config = config_from(args, kind)
    with _library_output_to_stderr(args.json):
        summary = getattr(trainer, function)(config).to_dict()
    if not args.quiet or args.json:
        print_summary(title, summary, as_json=args.json, rows=readable_rows(summary))
    return 0
