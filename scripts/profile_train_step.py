"""Where the JAX training step's time goes: the whole step against the same step without parts of it.

    python scripts/profile_train_step.py --data R128 [--model mini] [--batch-size 8] [--steps 12] [--json]

Each variant runs in a fresh process (KERAS_BACKEND=jax) on the same batches, as the trainer builds
them (`build_model`, `make_optimizer("adam")`, `JaxSteps`), and times `--steps` steps after two
untimed ones (compilation); a run's figure is its median step time, and a variant's the median of
`--runs` runs, interleaved with the other variants'. The variants:
- `step`: the trainer's whole step (gradients, finite check, conditional AdamW update), dropout 0.1;
- `step, no dropout`: the same with both dropout rates 0;
- `gradients`: only the jitted gradient of the loss (no optimizer, no finite check), dropout 0.1;
- `gradients, no dropout`;
- `step, log_softmax loss`: the whole step with the textbook cross-entropy instead of
  trainer.losses.cross_entropy_and_hits (log_softmax + take_along_axis, argmax for the hits): the
  baseline of that function's rewrite.
Each is printed with its ratio to `step`, so the differences are the shares of dropout and of the update,
and the last ratio is what the rewritten cross-entropy saves.
XLA_FLAGS in the environment reach every variant (to try XLA's own CPU options).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANTS = (("step", False, 0.1, False), ("step, no dropout", False, 0.0, False), ("gradients", True, 0.1, False),
            ("gradients, no dropout", True, 0.0, False), ("step, log_softmax loss", False, 0.1, True))


def textbook_cross_entropy_and_hits(logits, labels):
    """The cross-entropy and hits as usually written (the baseline of trainer.losses'
    cross_entropy_and_hits): log_softmax + take_along_axis, argmax."""
    from keras import ops

    labels = ops.cast(labels, "int32")
    log_probs = ops.log_softmax(logits, axis=-1)
    nll = -ops.squeeze(ops.take_along_axis(log_probs, labels[..., None], axis=-1), -1)
    return nll, ops.cast(ops.equal(ops.cast(ops.argmax(logits, axis=-1), "int32"), labels), "float32")


def time_variant(data, model_name, batch_size, steps, gradients_only, dropout, textbook_loss):
    """Median seconds per step of one variant, in this process."""
    import dataclasses
    import time

    import jax
    import keras
    import numpy as np

    from trainer.config import BertConfig
    from trainer.data import Records, RecordStream
    from trainer.model import build_model
    from trainer.optimizers import make_optimizer
    from trainer.pretraining import Devices
    from trainer.steps import JaxSteps

    if textbook_loss:
        import trainer.losses

        trainer.losses.cross_entropy_and_hits = textbook_cross_entropy_and_hits
    records = Records(data, "ofrecord")
    config = dataclasses.replace(BertConfig.sized(model_name, vocab_size=records.vocab_size or 30522),
                                 hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    keras.utils.set_random_seed(1)
    devices = Devices("jax")
    model = build_model(config, records.seq, records.pred)
    optimizer = make_optimizer("adam", 1e-4, 10, 100)
    optimizer.build(model.trainable_variables)
    trainer_steps = JaxSteps(devices.distribution, model, optimizer, 1, False)
    stream = RecordStream(records, "training", batch_size, 1).batches()
    batches = [trainer_steps.put({k: v[None] for k, v in next(stream).items()}) for _ in range(4)]

    if gradients_only:
        objective = trainer_steps.objective

        def gradients(trainable, non_trainable, batch):
            micro = {k: v[0] for k, v in batch.items()}
            totals = objective.totals(batch)

            def loss(trainable):
                outputs, _ = model.stateless_call(trainable, non_trainable, objective.inputs(micro), training=True)
                return objective.share(objective.sums(outputs, micro), totals)

            return jax.grad(loss)(trainable)

        compiled = jax.jit(gradients)

        def run(batch):
            jax.block_until_ready(compiled(trainer_steps.state[0], trainer_steps.state[1], batch))
    else:
        def run(batch):
            trainer_steps.fetch(trainer_steps.train(batch))

    for batch in batches[:2]:
        run(batch)
    times = []
    for i in range(steps):
        start = time.perf_counter()
        run(batches[i % len(batches)])
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main():
    if sys.argv[1:2] == ["--variant"]:
        data, model_name, batch_size, steps, gradients_only, dropout, textbook_loss = sys.argv[2:9]
        seconds = time_variant(data, model_name, int(batch_size), int(steps), gradients_only == "1", float(dropout),
                               textbook_loss == "1")
        print(json.dumps({"seconds": seconds}))
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="ofrecord records (bertprep create)")
    p.add_argument("--model", default="mini")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--steps", type=int, default=12, help="timed steps per variant")
    p.add_argument("--runs", type=int, default=3, help="processes per variant, interleaved; the median counts")
    p.add_argument("--json", action="store_true")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args()
    args.data = os.path.abspath(args.data)  # the variants' processes start in the checkout (cwd=REPO)
    env = dict(os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))
    seconds = {name: [] for name, *_ in VARIANTS}
    for run in range(1, args.runs + 1):  # interleaved, so a change in the machine's load falls on every variant
        for name, gradients_only, dropout, textbook_loss in VARIANTS:
            argv = [sys.executable, os.path.abspath(__file__), "--variant", args.data, args.model,
                    str(args.batch_size), str(args.steps), "1" if gradients_only else "0", str(dropout),
                    "1" if textbook_loss else "0"]
            done = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=REPO)
            if done.returncode != 0:
                print(f"profile_train_step: {name} failed: {done.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
                return 1
            seconds[name].append(json.loads(done.stdout.strip().splitlines()[-1])["seconds"])
            if not args.quiet:
                print(f"{name} run {run}/{args.runs}: {seconds[name][-1] * 1e3:.1f} ms", file=sys.stderr)
    rows = []
    for name, *_ in VARIANTS:
        median = statistics.median(seconds[name])
        rows.append({"variant": name, "ms_per_step": median * 1e3, "runs_ms": [s * 1e3 for s in seconds[name]],
                     "sequences_per_second": args.batch_size / median})
    for row in rows:
        row["ratio_to_step"] = row["ms_per_step"] / rows[0]["ms_per_step"]
    if args.json:
        print(json.dumps({"model": args.model, "batch_size": args.batch_size, "steps": args.steps, "runs": args.runs,
                          "variants": rows}))
        return 0
    print(f"{args.model}, batch {args.batch_size}; each run the median of {args.steps} steps; median of "
          f"{args.runs} runs per variant; JAX on {os.cpu_count()} cores")
    print(f"{'variant':<24}{'ms/step':>10}{'seq/s':>10}{'x step':>9}")
    for row in rows:
        print(f"{row['variant']:<24}{row['ms_per_step']:>10.1f}{row['sequences_per_second']:>10.2f}"
              f"{row['ratio_to_step']:>9.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
