"""`python -m trainer.benchmark`: arguments, the plan of configurations, one process per run, the report.

Nothing here imports TensorFlow, Keras or JAX: argument and data errors are
reported at once, and every measurement happens in a fresh worker process
(worker.py).
"""

import argparse
import datetime
import json
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time

from bertprep.errors import DataError, UsageError, run_reporting_errors
from bertprep.options import refuse_overlap
from bertprep.progress import Progress, add_output_arguments, print_summary
from trainer import compilation_cache, library_logs
from trainer.arguments import OneLineErrorParser, add_records_and_model_arguments, positive_int
from trainer.benchmark import method, report
from trainer.cli import STEP_FIELDS, add_step_arguments
from trainer.config import OPTIMIZERS, tf_config_hosts

PROG = "trainer.benchmark"
PRECISIONS = ("fp32", "amp")
# Environment variables that join processes of several hosts; the max-search probes and the platform
# check run on this host alone.
MULTI_HOST_VARIABLES = ("TF_CONFIG", "KERAS_DISTRIBUTION_JOB_ADDRESSES", "KERAS_DISTRIBUTION_NUM_PROCESSES",
                        "KERAS_DISTRIBUTION_PROCESS_ID")
PROBE_ITERATIONS = 3


def _int_list(text):
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}") from None
    if not values or min(values) < 1 or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"expected distinct positive integers, got {text!r}")
    return values


def _batch_list(text):
    values = []
    for item in text.split(","):
        if item == "max":
            values.append("max")
        elif item.isdigit() and int(item) >= 1:
            values.append(int(item))
        else:
            raise argparse.ArgumentTypeError(f"expected positive integers or 'max', got {item!r} in {text!r}")
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"repeated batch size in {text!r}")
    return values


def _precision_list(text):
    values = text.split(",")
    unknown = [v for v in values if v not in PRECISIONS]
    if unknown or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"expected distinct values of {', '.join(PRECISIONS)}, got {text!r}")
    return values


def build_parser():
    p = OneLineErrorParser(prog=PROG, description="DLPerf-method training throughput of `python -m trainer`: one fresh "
                                       "process per (devices, precision, batch, run), median over runs, "
                                       "speed-up over one device, MFU; report.md, results.json, throughput.png.")
    add_records_and_model_arguments(p)
    p.add_argument("--devices", type=_int_list, default=[1],
                   help="device counts per host, e.g. 1,2,8: the first N accelerators, or N logical CPU devices "
                        "(default: 1)")
    p.add_argument("--precision", type=_precision_list, default=list(PRECISIONS),
                   help="fp32 and/or amp (the trainer's --precision amp: mixed_bfloat16 where the device multiplies "
                        "bfloat16, mixed_float16 with loss scaling on older GPUs; the report says which; default: "
                        "fp32,amp)")
    add_step_arguments(p)
    p.add_argument("--batch-size", type=_batch_list, default=[32, 64, "max"],
                   help="sequences per device: integers and/or max (the largest that fits, searched; default: "
                        "32,64,max)")
    p.add_argument("--iterations", type=positive_int, default=120, help="training steps per run (default 120)")
    p.add_argument("--skip", type=positive_int, default=20, help="first steps left out of the timing (default 20)")
    p.add_argument("--runs", type=positive_int, default=5,
                   help="runs per configuration; the median is reported (default 5)")
    # The trainer's own choice, the modules found rather than imported: this process loads no framework.
    p.add_argument("--backend", choices=("tensorflow", "jax"),
                   default=library_logs.default_backend(available=library_logs.installed) or "tensorflow",
                   help="Keras backend (default: the trainer's: $KERAS_BACKEND, a keras.json naming another, else "
                        "tensorflow where it is installed, else jax)")
    p.add_argument("--optimizer", choices=tuple(OPTIMIZERS), default="lamb",
                   help="as `python -m trainer` (default: lamb)")
    p.add_argument("--seed", type=int, default=12345, help="as `python -m trainer` (default: 12345)")
    p.add_argument("--max-start", type=positive_int, default=32,
                   help="first per-device batch the max search tries (default 32)")
    p.add_argument("--timeout", type=positive_int, default=1800,
                   help="seconds a run may take before it is killed (default 1800)")
    p.add_argument("--baseline", help="results.json of an earlier report whose 1-device medians serve as the "
                                      "speed-up baseline where this one has none (a multi-host report)")
    p.add_argument("--out", default="trainer-benchmark", help="output directory (default: trainer-benchmark)")
    add_output_arguments(p)
    return p


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.command = "python -m trainer.benchmark " + " ".join(shlex.quote(a) for a in argv)
    if args.model is None and not args.bert_config:
        args.model = "tiny" if args.data is None else "base"
    # SIGTERM (a scheduler's stop, `timeout`) ends it as Ctrl-C does: its worker, in a session of its own, is killed
    return run_reporting_errors(PROG, lambda: _benchmark(args), sigterm=True)


def hosts_and_index(env):
    """(host count, this host's index) from the trainer's multi-host variables; (1, 0) on one host."""
    if env.get("TF_CONFIG"):
        return tf_config_hosts(env["TF_CONFIG"])
    if env.get("KERAS_DISTRIBUTION_JOB_ADDRESSES"):
        try:
            return int(env["KERAS_DISTRIBUTION_NUM_PROCESSES"]), int(env["KERAS_DISTRIBUTION_PROCESS_ID"])
        except (KeyError, ValueError):
            raise UsageError("KERAS_DISTRIBUTION_JOB_ADDRESSES is set: KERAS_DISTRIBUTION_NUM_PROCESSES and "
                             "KERAS_DISTRIBUTION_PROCESS_ID must be set to integers too") from None
    return 1, 0


def _check(args):
    if args.skip >= args.iterations:
        raise UsageError(f"--skip {args.skip} must be below --iterations {args.iterations}")
    if args.baseline and not os.path.isfile(args.baseline):
        raise UsageError(f"--baseline {args.baseline}: no such file")
    # --out gets results.json, report.md and logs/: an --out holding the --baseline wrote over it unsaid.
    refuse_overlap(args.out, [args.data, args.baseline], what="--out")
    # The workers' cache of compiled programs (trainer/compilation_cache.py): a bad switch or folder is said once
    # here, not as every run's error.
    if args.backend == "jax" and compilation_cache.wanted(args.compilation_cache):
        compilation_cache.check_directory()


def _benchmark(args):
    _check(args)
    baseline_configs = _load_baseline(args.baseline)  # a malformed one: one line now, not after every run
    from trainer.config import TrainConfig, check_sample_format
    from trainer.data import Records
    from trainer.pretraining import check_records_fit, model_config, sample_records

    check_sample_format(args.format, args.data)
    if args.data is None:
        args.data = sample_records()
    records = Records(args.data, args.format)
    # Every field the runs share, checked once here: a --seed out of range (or levers that do not go together)
    # failed in every worker, each run an error and the command exit 0.
    shared = {"optimizer": args.optimizer, "seed": args.seed, **{field: getattr(args, field) for field in STEP_FIELDS}}
    config = model_config(TrainConfig(format=args.format, data=args.data, model=args.model,
                                      bert_config=args.bert_config, dropout=args.dropout, **shared), records)
    check_records_fit(config, records, args.data)
    _check_baseline_setup(args.baseline, {"backend": args.backend, "seq": records.seq, "pred": records.pred,
                                          "packed": records.packed, "optimizer": args.optimizer,
                                          "last_layer": args.last_layer, "model_config": config.to_dict()})
    hosts, host_index = hosts_and_index(os.environ)
    log_dir = os.path.join(args.out, "logs")
    try:
        os.makedirs(log_dir, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {args.out}: {exc.strerror}") from None

    bench = Benchmark(args, hosts, host_index, log_dir, "rows/s" if records.packed else "seq/s")
    try:
        results = _run_plan(args, bench, records, config, hosts, baseline_configs)
    finally:
        bench.close()
    written = report.write(args.out, results) if host_index == 0 else []  # the chief writes the report
    print_summary("trainer.benchmark: done", report.summary(results, args.out, written), as_json=args.json,
                  rows=report.summary_rows(results, written))
    return 0


def cpu_device_limit(cores):
    """The most logical CPU devices a run may ask for: four per core, and at least 8 (the tests' meshes). XLA
    makes as many as asked, each holding a replica of the model, so a mistyped count (4096 for 4) had the run
    ask for thousands of replicas' memory and compile time before its first line of progress."""
    return max(8, 4 * cores)


def _run_plan(args, bench, records, config, hosts, baseline_configs):
    """Every configuration of --devices x --precision x --batch-size, run after run: the results dict."""
    platform = bench.detect()
    if platform.get("status") != "ok":
        raise DataError(f"cannot start {args.backend}: {platform.get('error')}")
    if platform["accelerators"] and max(args.devices) > platform["accelerators"]:
        raise UsageError(f"--devices {max(args.devices)}: this host has {platform['accelerators']} "
                         f"{platform['accelerator']} accelerators")
    if not platform["accelerators"] and max(args.devices) > cpu_device_limit(platform["cores"]):
        raise UsageError(f"--devices {max(args.devices)}: this host has no accelerator, and as many logical CPU "
                         f"devices on its {platform['cores']} cores would measure their contention, each holding "
                         f"a replica (at most {cpu_device_limit(platform['cores'])} here)")
    # What the trainer's --precision amp is on this host's devices (trainer/precision.py), asked of a worker.
    amp_policy = platform.get("amp") or ("mixed_float16" if platform["accelerators"] else "mixed_bfloat16")
    policies = {"fp32": "fp32", "amp": amp_policy}
    flops = method.training_flops_per_sequence(config, records.seq, records.pred,
                                               method.last_layer_rows(records, args.last_layer))

    plan = [(d, p, b) for d in args.devices for p in args.precision for b in args.batch_size]
    bench.count_runs(len(plan) * args.runs)
    configs = []
    started = time.monotonic()
    for number, (devices, precision, batch) in enumerate(plan, 1):
        entry = {"devices": devices * hosts, "devices_per_host": devices, "hosts": hosts, "precision": precision,
                 "dtype_policy": policies[precision], "batch": batch, "runs": []}
        configs.append(entry)
        label = f"config {number}/{len(plan)} ({devices * hosts} device(s), {precision}, batch {batch})"
        _run_config(args, bench, records, entry, label)
    method.add_medians_and_speedups(configs, baseline_configs)
    for entry in configs:
        if records.packed:
            entry["sequence_median"] = method.median(
                [run["sequence_throughput"] for run in entry["runs"] if run.get("sequence_throughput")])
        peaks = [run["peak_flops"] for run in entry["runs"] if run.get("peak_flops")]
        entry["peak_flops"] = method.median(peaks)
        entry["flops_per_sequence"] = flops
        entry["mfu"] = method.mfu(flops, entry["median"], entry["peak_flops"])

    results = {
        "method": {"iterations": args.iterations, "skip": args.skip, "runs": args.runs,
                   "throughput": "global_batch * (iterations - skip) / (t[iterations] - t[skip]), "
                                 "t = clock when an iteration's results reached the host",
                   "statistic": "median over runs", "speedup": "median / median of 1 device, same precision and batch",
                   "mfu": "training FLOPs per sequence (3 x forward; MLM head on the predicted positions only; "
                          "with --last-layer predicted, the last layer's queries on the [CLS] and predicted "
                          "positions only) x "
                          "median / peak FLOP/s of the devices, measured in each run by a large matrix product "
                          "in the run's precision",
                   "max": f"largest per-device batch that runs: doubling from {args.max_start}, then bisecting on "
                          "out-of-memory, each probe a process of its own"},
        "setup": {"backend": args.backend, "model": args.bert_config or args.model, "data": os.path.abspath(args.data),
                  "format": args.format, "seq": records.seq, "pred": records.pred, "packed": records.packed,
                  "optimizer": args.optimizer, "last_layer": args.last_layer,
                  "hosts": hosts, "amp": amp_policy, "model_config": config.to_dict(),
                  "command": args.command},
        "configs": configs,
        "host": host_description(platform, hosts),
        "seconds": round(time.monotonic() - started, 1),
    }
    return results


def _run_config(args, bench, records, entry, label):
    """One configuration's runs (after the max search for batch "max") into `entry`."""
    devices, policy, batch = entry["devices_per_host"], entry["dtype_policy"], entry["batch"]
    if batch == "max":
        try:
            batch_size, probes = bench.search_max(devices, policy, label)
        except ProbeFailed as exc:
            entry.update(batch_size=None, global_batch=None, status="error", error=str(exc))
            bench.progress(f"{label}: {exc}", final=True, runs=args.runs)
            return
        entry["max_search"] = [{"batch_size": b, "fits": fits} for b, fits in probes]
        if batch_size is None:
            entry.update(batch_size=None, global_batch=None, status="oom",
                         error="out of memory at every batch size down to 1")
            bench.progress("", runs=args.runs)
            return
    else:
        batch_size = batch
    entry.update(batch_size=batch_size, global_batch=batch_size * entry["devices"], status="ok")
    for run_number in range(1, args.runs + 1):
        name = f"d{entry['devices']}-{entry['precision']}-b{batch}-run{run_number}"
        outcome = bench.run(devices, policy, batch_size, name, f"{label} run {run_number}/{args.runs}")
        if outcome["status"] != "ok":
            # A configuration that failed once (out of memory, an error) fails again: the next goes on.
            entry.update(status=outcome["status"], error=outcome.get("error"))
            entry["runs"].append({"log": outcome["log"], "status": outcome["status"]})
            bench.progress(f"{label} run {run_number}/{args.runs}: {_failure(outcome)}", final=True,
                           runs=args.runs - run_number + 1)  # the configuration's later runs are left out
            return
        run = {"throughput": method.throughput(outcome["step_times"], entry["global_batch"], args.skip),
               "step_times": outcome["step_times"], "peak_flops": outcome.get("peak_flops"),
               "first_step_s": outcome.get("first_step_s"), "startup": outcome.get("startup"), "log": outcome["log"]}
        shown = f"{run['throughput']:,.1f} {bench.unit}"
        if records.packed:
            run["step_sequences"] = outcome["step_sequences"]
            run["sequence_throughput"] = method.sequence_throughput(
                outcome["step_times"], outcome["step_sequences"], args.skip)
            shown += f" ({run['sequence_throughput']:,.1f} real seq/s)"
        entry["runs"].append(run)
        entry["accelerator"] = outcome.get("accelerator")
        bench.progress(f"{label} run {run_number}/{args.runs}: {shown}", final=True, runs=1)


def _failure(outcome):
    return "out of memory" if outcome["status"] == "oom" else f"failed: {outcome.get('error')}"


def _load_baseline(path):
    """The configurations of the --baseline results.json, each checked for what method.speedup_baseline reads
    (a malformed one was a KeyError once every run had finished)."""
    if not path:
        return []
    try:
        with open(path, encoding="utf-8") as f:
            configs = json.load(f)["configs"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataError(f"--baseline {path}: not a trainer.benchmark results.json ({exc})") from None
    if not isinstance(configs, list):
        raise DataError(f"--baseline {path}: configs is {json.dumps(configs)[:40]}, expected a list of "
                        "configurations")
    for index, entry in enumerate(configs):
        problem = _baseline_entry_problem(entry)
        if problem:
            raise DataError(f"--baseline {path}: configs[{index}] {problem}")
    return configs


def _check_baseline_setup(path, setup):
    """A UsageError where the --baseline measured another model, records, optimizer or backend than `setup`
    (this run's; the fields of its report's setup that fix a step's work): its 1-device medians were taken as
    this run's, and the speed-ups and scaling efficiencies of two different runs printed as one report's. A
    field the baseline's report does not have is not compared."""
    if not path:
        return
    with open(path, encoding="utf-8") as f:
        theirs = json.load(f).get("setup")
    if not isinstance(theirs, dict):
        return
    for field, ours in setup.items():
        was = theirs.get(field, ours)
        if was == ours or (field == "last_layer" and "predicted" not in (was, ours)):  # auto is all
            continue
        if field == "model_config" and isinstance(was, dict):  # the first key that differs
            key = next(k for k in sorted({*ours, *was}) if was.get(k) != ours.get(k))
            field, was, ours = f"model_config.{key}", was.get(key), ours.get(key)
        raise UsageError(f"--baseline {path}: measured with {field}={json.dumps(was)}, this run's "
                         f"{json.dumps(ours)}: its 1-device medians are no baseline for this run's speed-ups")


def _is_count(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _is_rate(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


# What a baseline entry needs for the speed-up (method.speedup_baseline): (field, check, what is expected).
_BASELINE_FIELDS = (
    ("devices", _is_count, "an integer >= 1"),
    ("precision", lambda value: value in PRECISIONS, f"one of {', '.join(PRECISIONS)}"),
    ("batch", lambda value: value == "max" or _is_count(value), 'a positive integer or "max"'),
    # null: a configuration that failed (out of memory, an error) has no median, and no speed-up is taken from it
    ("median", lambda value: value is None or _is_rate(value), "a positive number (or null)"),
)


def _baseline_entry_problem(entry):
    """What is wrong with one configuration of a --baseline, or None."""
    if not isinstance(entry, dict):
        return f"is {json.dumps(entry)[:40]}, expected an object"
    for field, ok, expected in _BASELINE_FIELDS:
        if field not in entry:
            return f"lacks {field}: expected {expected}"
        if not ok(entry[field]):
            return f"has {field} {json.dumps(entry[field])[:40]}, expected {expected}"
    return None


def host_description(platform, hosts):
    import platform as platform_module

    versions = {}
    for name in ("keras", "tensorflow", "jax", "numpy"):
        try:
            from importlib.metadata import version

            versions[name] = version(name)
        except Exception:  # noqa: BLE001  (not installed)
            pass
    return {"hostname": platform_module.node(), "cpu": platform.get("cpu"), "cores": platform.get("cores"),
            "accelerator": platform.get("accelerator"), "accelerators": platform.get("accelerators"),
            "hosts": hosts, "python": platform_module.python_version(), "versions": versions,
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds")}


class ProbeFailed(Exception):
    """A probe of the max search failed for another reason than memory: the search cannot go on."""


class Benchmark:
    """Starts the worker processes of this host and shows their progress."""

    def __init__(self, args, hosts, host_index, log_dir, unit="seq/s"):
        self.args = args
        self.unit = unit  # what a step's batch counts: sequences, or packed rows
        self.hosts = hosts
        self.host_index = host_index
        self.log_dir = log_dir
        self.scratch = tempfile.mkdtemp(prefix="trainer-benchmark-")
        self.runs = None

    def count_runs(self, total):
        """Progress (bertprep.progress: a bar with an ETA on a terminal, a line every few seconds elsewhere)
        over the `total` runs of the plan."""
        self.runs = Progress(PROG, total=total, unit="runs", quiet=self.args.quiet)

    def progress(self, text, final=False, runs=0):
        """`text`, the running worker's status, beside the count, or with `final` a line of its own;
        `runs` more runs done (or left out after one that failed)."""
        if final:
            self.runs.write(f"{PROG}: {text}")
        self.runs.advance(runs, detail="" if final else text)

    def _train_fields(self, policy, batch_size, iterations):
        """The TrainConfig fields of a run (the worker adds steps), for its --config."""
        a = self.args
        return {"format": a.format, "data": a.data, "batch_size": batch_size, "precision": policy,
                "optimizer": a.optimizer, "seed": a.seed, "log_every": max(1, min(10, iterations // 4)),
                "dropout": a.dropout, "bert_config": a.bert_config, "model": None if a.bert_config else a.model,
                **{field: getattr(a, field) for field in STEP_FIELDS}}

    def _env(self, local_only):
        env = dict(os.environ, KERAS_BACKEND=self.args.backend)
        library_logs.keep_quiet(env)  # the libraries' lines left out of the workers' logs, unless the user chose
        if local_only:
            for name in MULTI_HOST_VARIABLES:
                env.pop(name, None)
        return env

    def _start(self, devices, name, worker_args, train_fields, local_only, status, global_batch=0):
        """Run one worker to the end (or --timeout); its output goes to logs/NAME.log. Returns its result."""
        host = f".host{self.host_index}" if self.hosts > 1 else ""
        log_path = os.path.join(self.log_dir, f"{name}{host}.log")
        result_path = os.path.join(self.scratch, f"{name}.json")
        argv = [sys.executable, "-m", "trainer.benchmark.worker", "--devices", str(devices), "--result",
                result_path, *worker_args] + (["--config", json.dumps(train_fields)] if train_fields else [])
        with open(log_path, "w", encoding="utf-8") as log:
            log.write("$ " + " ".join(shlex.quote(a) for a in argv) + "\n")
            log.flush()
            process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self._env(local_only),
                                       start_new_session=True)
            deadline = time.monotonic() + self.args.timeout
            timed_out = False
            try:
                while process.poll() is None:
                    if time.monotonic() > deadline:
                        os.killpg(process.pid, signal.SIGKILL)
                        timed_out = True
                        process.wait()
                        break
                    time.sleep(0.5)
                    if status:
                        rate = _latest_rate(log_path, global_batch)
                        self.progress(status + (f": {rate:,.1f} {self.unit}" if rate else ": starting"))
            except BaseException:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                raise
        result = _read_json(result_path)
        if result is None:
            if timed_out:
                result = {"status": "error", "error": f"killed after --timeout {self.args.timeout} s"}
            elif process.returncode == -signal.SIGKILL:
                # Killed by the kernel: a host out of memory (a CPU "device" has no memory error of its own).
                result = {"status": "oom", "error": "killed by SIGKILL (host out of memory)"}
            else:
                result = {"status": "error", "error": f"exit {process.returncode}: {_last_line(log_path)}"}
        result["log"] = os.path.relpath(log_path, self.args.out)
        return result

    def detect(self):
        return self._start(1, "platform", ["--detect"], None, local_only=True, status=None)

    def run(self, devices, policy, batch_size, name, status):
        return self._start(devices, name, ["--peak", "--iterations", str(self.args.iterations)],
                           self._train_fields(policy, batch_size, self.args.iterations), local_only=False,
                           status=status, global_batch=batch_size * devices * self.hosts)

    def search_max(self, devices, policy, status):
        """The largest per-device batch that runs on `devices` devices of this host, each probe a process."""

        def fits(batch_size):
            name = f"d{devices}-{policy}-probe-b{batch_size}"
            outcome = self._start(devices, name, ["--iterations", str(PROBE_ITERATIONS)],
                                  self._train_fields(policy, batch_size, PROBE_ITERATIONS),
                                  local_only=True, status=f"{status}: max search, batch {batch_size}",
                                  global_batch=batch_size * devices)
            if outcome["status"] == "error":
                raise ProbeFailed(f"max search: batch {batch_size} failed, not out of memory: "
                                  f"{outcome.get('error')} (log {outcome['log']})")
            self.progress(f"{status}: max search, batch {batch_size} "
                          f"{'fits' if outcome['status'] == 'ok' else 'out of memory'}", final=True)
            return outcome["status"] == "ok"

        return method.search_max_batch(fits, self.args.max_start)

    def close(self):
        import shutil

        if self.runs:
            self.runs.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


_ITERATION = re.compile(r"^benchmark: iteration (\d+) at ([\d.]+)$", re.MULTILINE)


def _latest_rate(log_path, global_batch):
    """Sequences/s between the worker's last two progress lines (worker.progress_lines), or None."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            marks = _ITERATION.findall(f.read()[-8000:])
    except OSError:
        return None
    if len(marks) < 2:
        return None
    (k1, t1), (k2, t2) = [(int(k), float(t)) for k, t in marks[-2:]]
    return global_batch * (k2 - k1) / (t2 - t1) if t2 > t1 else None


def _last_line(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = [line.strip() for line in f if line.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
