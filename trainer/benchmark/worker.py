"""One benchmark process: N devices, one precision and batch, `python -m trainer`'s own run, timed.

    python -m trainer.benchmark.worker --devices N --iterations K --result PATH [--peak] --config JSON

`trainer.benchmark` starts this once per (devices, precision, batch, run) and
per probe of the `max` search, so every measurement begins in a fresh
process. The devices are the first N accelerators (CUDA_VISIBLE_DEVICES is
narrowed before any framework loads) or, on a host without one, N logical CPU
devices (TensorFlow logical devices; XLA's forced host device count for
JAX). The run itself is `trainer.train` of the TrainConfig whose fields
--config holds (the same records, stream, prefetch, steps and loop as
`python -m trainer`), which hands back the clock at the end of every
iteration. It runs K + 1 steps and
keeps the times of the first K: the trainer dispatches step k + 1 before it
waits for step k's results, so every timed iteration, the last included,
ends with the next step under way (where dispatch is synchronous, TensorFlow
on a CPU, the next step has even finished). With --peak, the devices'
peak FLOP/s is then measured by a large matrix product in the run's
precision. The result is one JSON object written to --result:
`{"status": "ok" | "oom" | "error", "error", "step_times", "replicas",
"global_batch", "dtype_policy", "peak_flops", "first_step_s", "startup", ...}`;
first_step_s: seconds from the process's start to the first step's results
on the host (imports, model, compilation and the step itself); startup: where
they went, the run's summary's (trainer/startup.py).

The options are read by `worker_main` (`build_worker_parser`); `work` does
the rest.
`--detect` reports the platform instead (accelerator kind and count) without
training; the parent asks it once, before any run.

Test hook: with `BERTPREP_TEST_MEMORY_LIMIT=N` set, a batch of more than N
sequences per device fails the way a device out of memory does (the
backend's own RESOURCE_EXHAUSTED error, raised where the run starts), so the
`max` search is tested on a host whose memory never runs out.
"""

import argparse
import contextlib
import json
import os
import sys
import threading
import time

from trainer.startup import PROCESS_START  # the origin of a result's first_step_s

MEMORY_LIMIT_VARIABLE = "BERTPREP_TEST_MEMORY_LIMIT"


def work(devices, iterations, result_path, peak=False, detect_only=False, train_fields=None):
    """One measurement (or with `detect_only` the platform) into `result_path`; the exit status."""
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    if detect_only:  # every accelerator the host shows: narrowed to `devices`, it counted 1 of 8 GPUs
        result = detect(backend)
    else:
        select_devices(devices, backend)
        result = run_timed(dict(train_fields, steps=iterations + 1), devices, backend, peak)
    write_json(result_path, result)
    return 0 if result.get("status", "ok") == "ok" else 1


def select_devices(count, backend):
    """Before any framework loads: the first `count` accelerators, else `count` CPU devices."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")  # "": the user hid every GPU, and they stay hidden
    ids = visible.split(",") if visible is not None else [str(i) for i in range(count)]
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(ids[:count])
    if backend == "jax":
        flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if "xla_force_host_platform_device_count" not in f]
        os.environ["XLA_FLAGS"] = " ".join(flags + [f"--xla_force_host_platform_device_count={count}"])
    else:
        import tensorflow as tf

        if not tf.config.list_physical_devices("GPU") and count > 1:
            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * count)


def accelerators(backend):
    """(kind, count) of the accelerators this process sees; ("cpu", 0) where there is none."""
    if backend == "jax":
        import jax

        devices = [d for d in jax.local_devices() if d.platform != "cpu"]
        return (devices[0].device_kind if devices else "cpu"), len(devices)
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return "cpu", 0
    return tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU"), len(gpus)


def detect(backend):
    from trainer.precision import amp_policy_for, device_platform

    kind, count = accelerators(backend)
    amp, _ = amp_policy_for(*device_platform(backend))
    return {"status": "ok", "backend": backend, "accelerator": kind if count else None, "accelerators": count,
            "cpu": _cpu_name(), "cores": len(os.sched_getaffinity(0)), "amp": amp}


def _cpu_name():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def out_of_memory_error(backend, message):
    """The exception a device out of memory raises in this backend."""
    if backend == "jax":
        import jax

        return jax.errors.JaxRuntimeError(f"RESOURCE_EXHAUSTED: {message}")
    import tensorflow as tf

    return tf.errors.ResourceExhaustedError(None, None, message)


def is_out_of_memory(exc):
    text = str(exc)
    return (isinstance(exc, MemoryError) or type(exc).__name__ == "ResourceExhaustedError"
            or "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower())


def run_timed(train_fields, devices, backend, measure_peak):
    """The run of TrainConfig(**train_fields), timed: the result's JSON object."""
    from bertprep.errors import BertprepError
    from trainer.config import TrainConfig
    from trainer.pretraining import train

    config = TrainConfig(**train_fields)
    step_times, step_sequences = [], []
    result = {"status": "ok", "backend": backend, "batch_size": config.batch_size, "precision": config.precision}
    try:
        limit = os.environ.get(MEMORY_LIMIT_VARIABLE)
        if limit and config.batch_size > int(limit):
            raise out_of_memory_error(backend, f"{config.batch_size} sequences per device exceed the test limit "
                                               f"{MEMORY_LIMIT_VARIABLE}={limit}")
        with progress_lines(step_times):
            summary = train(config, step_times=step_times, step_sequences=step_sequences)
        # step_sequences: the real sequences of each timed iteration (a packed row holds several)
        result.update(step_times=step_times[:-1], step_sequences=step_sequences[:-1], replicas=summary.replicas,
                      global_batch=summary.global_batch, final_loss=summary.last_loss,
                      dtype_policy=summary.precision, first_step_s=step_times[0] - PROCESS_START if step_times
                      else None, startup=summary.startup)
        kind, count = accelerators(backend)
        result.update(accelerator=kind if count else None, accelerators=count)
        if measure_peak:
            # Accelerators each count; N logical CPU devices share one host's cores, which count once.
            physical = summary.replicas if count else summary.replicas // devices
            result["peak_flops_per_device"] = matmul_peak(backend, summary.precision)  # amp made concrete
            result["peak_flops"] = result["peak_flops_per_device"] * physical
    except BertprepError as exc:
        result.update(status="error", error=str(exc))
    except Exception as exc:  # noqa: BLE001  (reported in the table; the other configurations go on)
        if is_out_of_memory(exc):
            result.update(status="oom", error=_first_line(exc))
        else:
            result.update(status="error", error=f"{type(exc).__name__}: {_first_line(exc)}")
    return result


@contextlib.contextmanager
def progress_lines(step_times, interval=2.0):
    """While the run lasts, a line `benchmark: iteration K at T` on stderr (the run's log) every
    `interval` seconds when K grew: the parent shows the current sequences/s from the last two."""
    stop = threading.Event()

    def report():
        shown = 0
        while not stop.wait(interval):
            if len(step_times) > shown:
                shown = len(step_times)
                print(f"benchmark: iteration {shown} at {step_times[shown - 1]:.6f}", file=sys.stderr, flush=True)

    thread = threading.Thread(target=report, daemon=True, name="benchmark-progress")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _first_line(exc):
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return (lines[0] if lines else type(exc).__name__)[:300]


# Matrix sizes for the peak: large enough that one product keeps the device busy for milliseconds.
PEAK_SIZE = {"cpu": 1024, "accelerator": 8192}
PEAK_DTYPES = {"fp32": "float32", "mixed_bfloat16": "bfloat16", "mixed_float16": "float16"}


def matmul_peak(backend, precision, size=None, products=10, repeats=3):
    """FLOP/s of one device multiplying two size x size matrices in the compute dtype of `precision`:
    the best of `repeats` timings of `products` products (each 2 size^3 FLOPs) after one untimed."""
    dtype = PEAK_DTYPES[precision]
    if backend == "jax":
        import jax
        import jax.numpy as jnp

        device = jax.local_devices()[0]
        size = size or PEAK_SIZE["cpu" if device.platform == "cpu" else "accelerator"]
        key = jax.random.key(0)
        a = jax.device_put(jax.random.normal(key, (size, size), dtype), device)
        b = jax.device_put(jax.random.normal(jax.random.key(1), (size, size), dtype), device)
        product = jax.jit(jnp.matmul)

        def timed():
            start = time.perf_counter()
            outputs = [product(a, b) for _ in range(products)]
            jax.block_until_ready(outputs)
            return time.perf_counter() - start
    else:
        import tensorflow as tf

        device = "/GPU:0" if tf.config.list_logical_devices("GPU") else "/CPU:0"
        size = size or PEAK_SIZE["cpu" if device == "/CPU:0" else "accelerator"]
        with tf.device(device):
            a = tf.cast(tf.random.normal((size, size)), dtype)
            b = tf.cast(tf.random.normal((size, size)), dtype)
            product = tf.function(tf.matmul, jit_compile=True)

            def timed():
                start = time.perf_counter()
                outputs = [product(a, b) for _ in range(products)]
                outputs[-1].numpy()  # waits for all: the device runs them in order
                return time.perf_counter() - start
    timed()
    return 2 * size**3 * products / min(timed() for _ in range(repeats))


def write_json(path, value):
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(value, f)
    os.replace(tmp, path)


def build_worker_parser():
    """trainer.benchmark.worker's options (the parent, trainer.benchmark.cli, passes them)."""
    p = argparse.ArgumentParser(prog="trainer.benchmark.worker")
    p.add_argument("--devices", type=int, default=1, help="devices on this host")
    p.add_argument("--iterations", type=int, default=3, help="timed iterations")
    p.add_argument("--result", required=True, help="where to write the JSON result")
    p.add_argument("--peak", action="store_true", help="measure the devices' matmul peak after the run")
    p.add_argument("--detect", action="store_true", help="report the platform and exit")
    p.add_argument("--config", type=json.loads, default={}, help="the run's TrainConfig fields, a JSON object")
    return p


def worker_main(argv=None):
    """`python -m trainer.benchmark.worker`: one measurement process."""
    args = build_worker_parser().parse_args(argv)
    return work(args.devices, args.iterations, args.result, args.peak, args.detect, args.config)


if __name__ == "__main__":
    from trainer.library_logs import lean_process

    lean_process()  # as `python -m trainer`: Keras loads without the packages it imports for APIs we never call
    sys.exit(worker_main())
