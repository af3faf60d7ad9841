"""Steady-state training throughput (sequences/s) of `python -m trainer`, next to the bare step.

    KERAS_BACKEND=jax python scripts/bench_train.py --model base --batch-size 256 \
        --precision mixed_bfloat16 --steps 60 [--data RECORDS_DIR --format ofrecord]

Two measurements in one run, same model, batch, precision and devices:
1. the trainer itself (records read, shuffled, batched, prefetched; steps,
   logging): its mean sequences/s after the first steps (compilation);
2. the bare training step fed one batch already on the devices, repeatedly:
   what the devices can do with no input pipeline.
The ratio trainer / bare step shows what the input pipeline and the loop
cost (1.00: the devices never wait). Without --data it uses the embedded
sample records (128/20).
"""

import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from trainer.cli import build_parser, config_from  # noqa: E402
from trainer.config import TrainConfig  # noqa: E402


def bare_step_rate(args, steps_to_time):
    """Sequences/s of the training step on one device-resident batch (no input pipeline)."""
    import keras

    from trainer import pretraining
    from trainer.data import Records, RecordStream

    data_dir = args.data or pretraining.sample_records()
    records = Records(data_dir, args.format)
    run_config = config_from(args, TrainConfig)
    config = pretraining.model_config(run_config, records)
    keras.backend.clear_session()
    keras.config.set_dtype_policy(args.precision if args.precision != "fp32" else "float32")
    keras.utils.set_random_seed(args.seed)
    devices = pretraining.Devices(keras.backend.backend(), args.model_parallel, args.placement)
    per_worker = args.batch_size * devices.local_replicas
    *_model_and_optimizer, steps = pretraining.build_steps(run_config, devices, config, records, warmup=0)
    stream = RecordStream(records, "training", per_worker * args.grad_accum, args.seed)
    batch = next(stream.batches())
    batch = {k: v.reshape((args.grad_accum, per_worker) + v.shape[1:]) for k, v in batch.items()}
    device_batch = steps.put(batch)
    for _ in range(3):  # compilation
        steps.fetch(steps.train(device_batch))
    start = time.perf_counter()
    handle = None
    for _ in range(steps_to_time):
        handle = steps.train(device_batch)
    steps.fetch(handle)
    seconds = time.perf_counter() - start
    # Real sequences, as the trainer counts them: packed rows hold several.
    sequences = steps.fetch(handle)["sequences"]
    return sequences * steps_to_time / seconds, devices.description


def main():
    parser = build_parser()
    parser.description = __doc__.splitlines()[0]
    parser.set_defaults(steps=40, log_every=10, quiet=True)
    args = parser.parse_args(sys.argv[1:] + ([] if "--format" in sys.argv else ["--format", "ofrecord"]))
    import trainer

    summary = trainer.train(config_from(args, TrainConfig)).to_dict()
    trainer_rate = summary["mean_sequences_per_second"]
    bare_rate, description = bare_step_rate(args, max(args.steps - 3, 5))
    import keras

    model = args.bert_config or args.model
    print(f"backend {keras.backend.backend()}; {description}")
    print(f"model {model}; batch {args.batch_size}/replica x {summary['replicas']} replicas x "
          f"{args.grad_accum} accumulation = {summary['global_batch']}; {args.precision}; {args.optimizer}")
    print(f"trainer (records -> steps), steady state: {trainer_rate:10,.1f} sequences/s over {summary['timed_steps']} "
          "steps")
    print(f"bare step, batch on device:             {bare_rate:10,.1f} sequences/s")
    print(f"ratio trainer / bare step:              {trainer_rate / bare_rate:10.2f}")


if __name__ == "__main__":
    main()
