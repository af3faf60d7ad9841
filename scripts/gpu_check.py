"""The GPU check's measurements and its one table (scripts/gpu_check.sh makes the records and calls this).

    python scripts/gpu_check.py --records R [--out DIR] [--iterations 50] [--skip 10] [--batch-sizes 64,256]
        [--precisions amp,fp32] [--compiled-peer-batches 256] [--phases] [--no-start] [--no-peers]
        [--profile [--profile-flags FLAGS]]
        [--lever NAME=[VAR=VALUE ...] FLAGS ...] [--no-lever-starts] [--json]

In one invocation, on one GPU, BERT-base 128/20, optimizer adam, on the records R:
1. start-up: `python -m trainer` (amp, batch 256, 3 steps, a log line each) twice on an empty compilation
   cache folder of its own: cold, then warm. Seconds from the process's start to its "train step 1" line,
   the libraries' lines (XLA, absl, ptxas, TensorFlow) it printed, and where each start went by the trainer's
   own clock (its summary's `startup`, trainer/startup.py: imports, model built, first step; the seconds JAX
   traced, lowered, compiled or loaded from the cache; programs compiled and read), unprofiled.
2. ours: `python -m trainer.benchmark --backend jax --precision amp,fp32 --batch-size B --runs 1` (one fresh
   process per configuration): sequences/s, MFU, the amp policy, seconds from each worker's start to its
   first step, and the library lines in the workers' logs.
3. the peer: scripts/bench_train_peers.py's transformers BertForPreTraining on CUDA on the same records and
   batches (bf16 autocast for amp, TF32 for fp32, fused AdamW), compiled by torch.compile at the
   --compiled-peer-batches sizes and eager at the others.
Each --lever NAME=FLAGS (e.g. `scan=--scan-layers`) then measures the trainer (JAX) with those flags: its
start-up cold and warm (not with --no-lever-starts), and its amp at the largest batch beside the defaults'.
With --profile it then profiles the amp step at the largest batch (scripts/profile_gpu_step.py: the device
time by layer and kernel, in OUT/profile.txt). It prints one table (sequences/s, ratio to the peer, MFU,
seconds to the first step, library lines) and the
issue's checks (amp >= 1.2x the compiled peer and >= 1.5x our fp32 at batch 256, the first step within 20 s,
within 5 s warm, no library line), and writes everything to DIR/gpu-check.json (after each stage, what it has
so far to DIR/gpu-check-partial.json, which a run cut short by a time limit leaves). Figures are this machine's,
this run's: docs/benchmarks.md gives the command and, when it ran on a GPU, what it printed.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from trainer.library_logs import LIBRARY_LINE, default_backend, installed  # noqa: E402

# A library line: absl/glog/TensorFlow's (library_logs.LIBRARY_LINE), or ptxas's words in any line.
PTXAS = re.compile(r"ptxas|Registers are spilled")
FIRST_STEP = re.compile(r"^train step 1:")
TRAIN_LOSS = re.compile(r"train step \d+: loss (\S+)")
TARGETS = {"amp_vs_compiled_peer": 1.2, "amp_vs_fp32": 1.5, "first_step_cold_s": 20.0, "first_step_warm_s": 5.0}
# (phase, file, function): the cumulative seconds in that function of a run under cProfile (--phases, and
# scripts/bench_startup.py --phases): where a start-up went.
PHASES = (("Keras and JAX imported", "trainer/library_logs.py", "load_keras"),
          ("JAX's backends started (devices found)", "jax/_src/xla_bridge.py", "backends"),
          ("model built (variables drawn)", "trainer/model.py", "build_model"),
          ("optimizer's slots", "trainer/optimizers.py", "build_slots"),
          ("step traced (Keras through JAX)", "trainer/steps.py", "_train_step"),
          ("programs lowered to StableHLO", "jax/_src/interpreters/pxla.py", "lower_sharding_computation"),
          ("programs compiled or read from the cache", "jax/_src/compiler.py", "compile_or_get_cached"),
          ("first results fetched (steps run)", "trainer/steps.py", "fetch_all"))


# A line of Python's import profile (PYTHONPROFILEIMPORTTIME): "import time: SELF_US | CUMULATIVE_US | NAME",
# the name indented by its depth in the import tree.
IMPORT_TIME = re.compile(r"import time:\s+(\d+) \|\s+\d+ \| *([\w.]+)\s*$")


def library_lines(text):
    return [line for line in text.splitlines() if LIBRARY_LINE.match(line) or PTXAS.search(line)]


def env_for(cache_dir=None):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TF_CPP_", "BERTPREP_SET_"))}  # as a new user's shell
    env.update(PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join(filter(None, [REPO, env.get("PYTHONPATH")])))
    env.pop("KERAS_BACKEND", None)  # the trainer chooses (JAX where TensorFlow is not installed)
    if cache_dir:
        env["BERTPREP_COMPILATION_CACHE_DIR"] = cache_dir
    return env


def stamped_run(argv, env, cwd=REPO, timeout=None):
    """Run `argv`, its stderr into its stdout: (its exit status, its lines, the seconds since the start at which
    each came). Past `timeout` seconds the process is killed. scripts/bench_startup.py times with it too."""
    started = time.monotonic()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd)
    lines, seconds = [], []
    for line in process.stdout:
        lines.append(line)
        seconds.append(time.monotonic() - started)
        if timeout is not None and seconds[-1] > timeout:
            process.kill()
            break
    return process.wait(), lines, seconds


def first_time(pattern, lines, seconds):
    """The seconds at which the first line matching `pattern` came, or None."""
    return next((at for line, at in zip(lines, seconds) if pattern.match(line)), None)


def phase_seconds(profile):
    """{phase: cumulative seconds, or None where its function was not called} (PHASES) of a cProfile output."""
    import pstats

    found = {}
    for (path, _, function), (_, _, _, cumulative, _) in pstats.Stats(profile).stats.items():
        for name, suffix, wanted in PHASES:
            if function == wanted and path.replace(os.sep, "/").endswith(suffix):
                found[name] = found.get(name, 0.0) + cumulative
    return {name: found.get(name) for name, _, _ in PHASES}


def step_losses(output):
    """The losses of a run's logged steps ("train step N: loss X"), in order."""
    return [float(loss) for loss in TRAIN_LOSS.findall(output)]


def losses_line(losses, default_losses):
    """A lever's start-up losses beside the defaults' (the same seed, records and steps): a lever that
    computes otherwise than it should shows here, before its speed means anything."""
    line = ", ".join(f"{x:.4f}" for x in losses) or "none"
    if losses and default_losses and len(losses) == len(default_losses):
        gap = max(abs(a - b) for a, b in zip(losses, default_losses))
        line += f" (the defaults' {', '.join(f'{x:.4f}' for x in default_losses)}; largest difference {gap:.4f})"
    return line


def import_seconds(text, top=12):
    """{package: seconds} of the `top` top-level packages whose modules took longest to import in a run's
    output under PYTHONPROFILEIMPORTTIME (each module's own time, summed by its first name component)."""
    seconds = {}
    for line in text.splitlines():
        found = IMPORT_TIME.search(line)
        if found:
            package = found.group(2).split(".")[0]
            seconds[package] = seconds.get(package, 0.0) + int(found.group(1)) / 1e6
    ranked = sorted(seconds.items(), key=lambda item: -item[1])[:top]
    return {package: round(value, 4) for package, value in ranked}


def start_up_argv(records, model, batch_size, precision, extra=(), profile=None, log_json=None):
    """`python -m trainer` as the start-up runs time it (adam, 3 steps, a log line each; scripts/bench_startup.py
    too), under cProfile writing to `profile` where given, its events to `log_json` where given."""
    runner = ["-m", "cProfile", "-o", profile] if profile else []
    return [sys.executable, *runner, "-m", "trainer", "--format", "ofrecord", "--data", records, "--model", model,
            "--batch-size", str(batch_size), "--precision", precision, "--optimizer", "adam", "--steps", "3",
            "--log-every", "1", *(["--log-json", log_json] if log_json else []), *extra]


def startup_log(cache_dir):
    """A start-up run's --log-json file, beside its cache folder and removed if there: what logged_startup then
    reads is this run's summary, not an earlier run's."""
    log_json = cache_dir + "-events.jsonl"
    if os.path.exists(log_json):
        os.remove(log_json)
    return log_json


def logged_startup(log_json):
    """The run's start by its own clock (its summary's `startup`, trainer/startup.py), or None."""
    try:
        with open(log_json, encoding="utf-8") as f:
            events = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return None
    return next((e.get("startup") for e in events if e.get("event") == "summary"), None)


def timed_trainer(args, cache_dir, extra=(), backend=None, environ=None, profile=None):
    """(seconds from the start to "train step 1", library lines, output, the trainer's own start-up figures)
    of one `python -m trainer` run (under cProfile writing to `profile`, where given); the output's lines each
    prefixed with the seconds since the start at which it came (the logs keep them: the first "trainer:"
    line's time is how long the model took to build)."""
    log_json = startup_log(cache_dir)
    argv = start_up_argv(args.records, args.model, args.start_batch, "amp", extra, profile, log_json)
    env = dict(env_for(cache_dir), **(environ or {}))
    if backend:
        env["KERAS_BACKEND"] = backend
    _, lines, seconds = stamped_run(argv, env, timeout=args.timeout)
    stamped = "".join(f"{at:7.1f} {line}" for line, at in zip(lines, seconds))
    return first_time(FIRST_STEP, lines, seconds), library_lines("".join(lines)), stamped, logged_startup(log_json)


def ours(args, out, name="benchmark", precisions=None, batch_sizes=None, extra=(), environ=None):
    """trainer.benchmark's results.json (and the library lines of its workers' logs); `extra`: trainer flags."""
    bench_out = os.path.join(out, name)
    argv = [sys.executable, "-m", "trainer.benchmark", "--format", "ofrecord", "--data", args.records, "--model",
            args.model, "--backend", "jax", "--devices", "1", "--precision", precisions or args.precisions,
            "--batch-size", batch_sizes or args.batch_sizes, "--runs", "1", "--iterations", str(args.iterations),
            "--skip", str(args.skip), "--optimizer", "adam", "--timeout", "300", "--out", bench_out, "--quiet", *extra]
    env = dict(env_for(os.path.join(args.work, f"{name}-cache")), **(environ or {}))
    done = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=args.timeout)
    if done.returncode != 0:
        raise RuntimeError(f"trainer.benchmark failed: {done.stderr.strip().splitlines()[-1:]}")
    with open(os.path.join(bench_out, "results.json"), encoding="utf-8") as f:
        results = json.load(f)
    logs = os.path.join(bench_out, "logs")
    lines = []
    for name in sorted(os.listdir(logs)):
        with open(os.path.join(logs, name), encoding="utf-8", errors="replace") as f:
            lines += library_lines(f.read())
    return results, lines


def peer(args, precision, batch, compiled):
    """The transformers peer's sequences/s (one run of scripts/bench_train_peers.py on CUDA), or None."""
    argv = [sys.executable, os.path.join(REPO, "scripts", "bench_train_peers.py"), "--data128", args.records,
            "--models", args.model, "--batch128", str(batch), "--precision", precision, "--iterations",
            str(args.iterations), "--skip", str(args.skip), "--runs", "1", "--frameworks", "hf-torch",
            "--device", args.peer_device, "--json", "--quiet"] + (["--torch-compile"] if compiled else [])
    try:
        done = subprocess.run(argv, env=env_for(), cwd=REPO, capture_output=True, text=True, timeout=args.timeout)
        row = json.loads(done.stdout)["rows"][0]
    except (subprocess.TimeoutExpired, ValueError, KeyError, IndexError) as exc:
        print(f"gpu_check: peer {precision} batch {batch} failed: {exc}", file=sys.stderr)
        return None
    if row.get("error"):
        print(f"gpu_check: peer {precision} batch {batch} failed: {row['error']}", file=sys.stderr)
    return row.get("median")


def profile(args, out):
    """scripts/profile_gpu_step.py on the records, amp at the largest batch: its table in OUT/profile.txt."""
    batch = max(int(b) for b in args.batch_sizes.split(","))
    argv = [sys.executable, os.path.join(REPO, "scripts", "profile_gpu_step.py"), "--data", args.records, "--model",
            args.model, "--batch-size", str(batch), "--precision", "amp", "--steps", "10", "--top", "80",
            "--save", os.path.join(out, "profile.json")]  # 80 kernels: the H100's 25 left 11 ms of "other" unnamed
    argv += [f"--trainer-flag={flag}" for flag in args.profile_flags.split()]
    env = dict(env_for(os.path.join(args.work, "profile-cache")), KERAS_BACKEND="jax")
    try:
        done = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        print("gpu_check: the profile ran out of time", file=sys.stderr)
        return
    write_logs(out, {"profile.txt": done.stdout + done.stderr[-3000:]})


def lever_parts(flags):
    """(environment, trainer flags) of a lever's FLAGS: leading words VAR=VALUE (an upper-case name, as
    XLA_FLAGS=--xla_gpu_autotune_level=0) are environment variables of its runs, the rest trainer flags."""
    words = flags.split()
    environ = {}
    while words and re.match(r"[A-Z][A-Z0-9_]*=", words[0]):
        key, value = words.pop(0).split("=", 1)
        environ[key] = value
    return environ, words


def worker_losses(out, name, precision, batch):
    """The logged losses of trainer.benchmark's first run of `precision` at `batch` under OUT/NAME (its
    worker's log: every few steps), or [] where there is none."""
    try:
        with open(os.path.join(out, name, "logs", f"d1-{precision}-b{batch}-run1.log"), encoding="utf-8") as f:
            return step_losses(f.read())
    except OSError:
        return []


def lever(args, out, name, flags, default_rows):
    """One --lever NAME=FLAGS: the start-up runs (cold, warm; not with --no-lever-starts) and trainer.benchmark's
    amp at the largest batch with the trainer flags FLAGS (and environment variables: lever_parts), beside the
    defaults' amp at that batch. Its losses: the cold start's three steps, or with --no-lever-starts its
    benchmark run's logged steps, each set beside the defaults' same run (the same seed, records and steps)."""
    environ, extra = lever_parts(flags)
    batch = max(int(b) for b in args.batch_sizes.split(","))
    cold_s = warm_s = cold_startup = warm_startup = None
    cold_output = ""
    if not args.no_lever_starts:
        cache = os.path.join(args.work, f"start-cache-{name}")
        shutil.rmtree(cache, ignore_errors=True)
        cold_s, _, cold_output, cold_startup = timed_trainer(args, cache, extra, "jax", environ)  # the levers: JAX
        warm_s, _, warm_output, warm_startup = timed_trainer(args, cache, extra, "jax", environ)
        write_logs(out, {f"trainer-cold-{name}.log": cold_output, f"trainer-warm-{name}.log": warm_output})
    try:
        results, _ = ours(args, out, f"benchmark-{name}", "amp", str(batch), extra, environ)
        rate = results["configs"][0].get("median")
    except (RuntimeError, subprocess.TimeoutExpired, KeyError, IndexError) as exc:
        print(f"gpu_check: lever {name} ({flags}): trainer.benchmark failed: {exc}", file=sys.stderr)
        rate = None
    default = next((r["ours"] for r in default_rows if r["precision"] == "amp" and r["batch"] == batch), None)
    found = {"name": name, "flags": flags, "batch": batch, "amp": rate, "default_amp": default,
             "vs_default": rate / default if rate and default else None, "cold_s": cold_s, "warm_s": warm_s,
             "cold_startup": cold_startup, "warm_startup": warm_startup, "cold_losses": step_losses(cold_output)}
    if args.no_lever_starts:
        found.update(benchmark_losses=worker_losses(out, f"benchmark-{name}", "amp", batch),
                     default_benchmark_losses=worker_losses(out, "benchmark", "amp", batch))
    return found


def table_rows(results, peers):
    rows = []
    by_key = {(c["precision"], c["batch"]): c for c in results["configs"]}
    for (precision, batch), entry in sorted(by_key.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        peer_rate, peer_kind = peers.get((precision, batch), (None, None))
        runs = [r for r in entry.get("runs", []) if r.get("first_step_s") is not None]
        rows.append({"precision": precision, "policy": entry.get("dtype_policy"), "batch": batch,
                     "ours": entry.get("median"), "mfu": entry.get("mfu"), "peer": peer_rate, "peer_kind": peer_kind,
                     "ratio": entry["median"] / peer_rate if entry.get("median") and peer_rate else None,
                     "first_step_s": runs[0]["first_step_s"] if runs else None})
    return rows


def checks(rows, start):
    """The issue's checks: {name: (value, target, met)}."""
    at = {(r["precision"], r["batch"]): r for r in rows}
    amp, fp32 = at.get(("amp", 256), {}), at.get(("fp32", 256), {})
    values = {"amp_vs_compiled_peer": amp.get("ratio") if amp.get("peer_kind") == "compiled" else None,
              "amp_vs_fp32": amp["ours"] / fp32["ours"] if amp.get("ours") and fp32.get("ours") else None,
              "first_step_cold_s": start["cold_s"], "first_step_warm_s": start["warm_s"]}
    found = {name: (value, TARGETS[name], value is not None and (
        value >= TARGETS[name] if name.startswith("amp") else value <= TARGETS[name]))
        for name, value in values.items()}
    found["library_lines"] = (start["library_lines"], 0, start["library_lines"] == 0)
    return found


def write_logs(out, texts):
    for name, text in texts.items():
        with open(os.path.join(out, name), "w", encoding="utf-8") as f:
            f.write(text)


def save_partial(out, **found):
    """What the check has measured so far, in OUT/gpu-check-partial.json (replaced after each stage, removed
    once gpu-check.json is written): a run cut short by a time limit keeps what it measured."""
    path = os.path.join(out, "gpu-check-partial.json")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(found, f, indent=1, default=str)
    os.replace(path + ".tmp", path)


def _fmt(value, pattern):
    return "—" if value is None else format(value, pattern)


def print_table(rows, start, found, device, model, start_batch):
    print(f"gpu_check: {device}; BERT-{model} 128/20, adam; ours = trainer.benchmark (JAX), peer = transformers "
          "BertForPreTraining")
    print(f"{'precision':<22}{'batch':>6}{'ours seq/s':>12}{'MFU':>7}{'peer seq/s':>12}{'peer':>10}{'ours/peer':>11}"
          f"{'1st step s':>12}")
    for r in rows:
        precision = f"{r['precision']} ({r['policy']})" if r["precision"] == "amp" else r["precision"]
        print(f"{precision[:22]:<22}{r['batch']:>6}{_fmt(r['ours'], ',.0f'):>12}{_fmt(r['mfu'], '.0%'):>7}"
              f"{_fmt(r['peer'], ',.0f'):>12}{r['peer_kind'] or '—':>10}{_fmt(r['ratio'], '.2f'):>11}"
              f"{_fmt(r['first_step_s'], '.1f'):>12}")
    print(f"python -m trainer ({start.get('backend') or 'no backend'}), amp batch {start_batch}: first step "
          f"{_fmt(start['cold_s'], '.1f')} s cold, "
          f"{_fmt(start['warm_s'], '.1f')} s warm (compilation cache); library lines printed: "
          f"{start['library_lines']} (trainer runs and benchmark workers)")
    for name, (value, target, met) in found.items():
        print(f"  {'met' if met else 'NOT MET':<8} {name}: {_fmt(value, '.2f') if value is not None else '—'} "
              f"(target {'>=' if name.startswith('amp') else '<='} {target})")


def startup_line(startup):
    """The trainer's own clock of one start (trainer/startup.py), in one line."""
    if not startup:
        return "—"
    phases = (("imports_s", "imports"), ("devices_s", "devices"), ("model_built_s", "model built"),
              ("first_step_s", "first step"))
    line = ", ".join(f"{label} {_fmt(startup[key], '.1f')}" for key, label in phases if key in startup) + " s"
    if "programs" in startup:
        line += (f"; traced {_fmt(startup['traced_s'], '.1f')}, lowered {_fmt(startup['lowered_s'], '.1f')}, "
                 f"compiled or loaded {_fmt(startup['compiled_or_loaded_s'], '.1f')} s ({startup['programs']} "
                 f"programs, {startup['programs_from_cache']} from the cache)")
    return line


def print_startups(start, levers):
    """Where each start went, by the trainer's clock: the defaults' cold and warm starts, then each lever's."""
    runs = [("defaults", start)] + [(f"lever {r['name']}", r) for r in levers]
    for name, run in runs:
        for kind in ("cold", "warm"):
            if run.get(f"{kind}_startup"):
                print(f"start-up, {name}, {kind} (the trainer's clock): {startup_line(run[f'{kind}_startup'])}")


def print_phases(phases, imports=None):
    if phases:
        print("where the warm start went, under cProfile (one phase may call another): " + "; ".join(
            f"{name} {_fmt(seconds, '.2f')} s" for name, seconds in phases.items()))
    if imports:
        print("its imports by package (modules' own seconds, under cProfile): " + ", ".join(
            f"{package} {seconds:.2f}" for package, seconds in imports.items()))


def print_levers(levers, default_losses=None):
    for r in levers:
        print(f"lever {r['name']} ({r['flags']}): amp batch {r['batch']} {_fmt(r['amp'], ',.0f')} seq/s, "
              f"{_fmt(r['vs_default'], '.2f')}x the defaults'; first step {_fmt(r['cold_s'], '.1f')} s cold, "
              f"{_fmt(r['warm_s'], '.1f')} s warm")
        if "benchmark_losses" in r:  # --no-lever-starts: its benchmark run's, beside the defaults' (both JAX)
            print(f"  its benchmark run's losses: "
                  f"{losses_line(r['benchmark_losses'], r['default_benchmark_losses'])}")
        else:
            print(f"  its start-up losses: {losses_line(r.get('cold_losses') or [], default_losses)}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", required=True, help="BERT-base 128/20 ofrecord records (bertprep create)")
    p.add_argument("--out", default="gpu-check-out")
    p.add_argument("--model", default="base", help="model size (default base; tiny to try the script on a CPU)")
    p.add_argument("--start-batch", type=int, default=256, help="batch of the start-up runs (default 256)")
    p.add_argument("--peer-device", default="cuda", help="the peer's --device (default cuda)")
    p.add_argument("--work", default=None, help="scratch folder (default: OUT/work)")
    p.add_argument("--iterations", type=int, default=50)
    p.add_argument("--skip", type=int, default=10)
    p.add_argument("--batch-sizes", default="64,256")
    p.add_argument("--precisions", default="amp,fp32", help="trainer.benchmark's precisions (default amp,fp32)")
    p.add_argument("--phases", action="store_true",
                   help="after the start-up runs, one more warm run under cProfile and Python's import profile: "
                        "where its start-up went and which packages its imports took (OUT/trainer-warm.prof "
                        "and two lines)")
    p.add_argument("--no-start", action="store_true",
                   help="skip the defaults' start-up runs (for a short run that measures levers)")
    p.add_argument("--no-peers", action="store_true",
                   help="skip the transformers peers (no ratio; for a short run that measures levers)")
    p.add_argument("--compiled-peer-batches", default="256", help="batch sizes the peer runs torch.compile'd")
    p.add_argument("--timeout", type=int, default=400, help="seconds any one measurement may take")
    p.add_argument("--profile", action="store_true",
                   help="last, where the step's device time goes: scripts/profile_gpu_step.py, amp at the largest "
                        "batch (its output in OUT/profile.txt and OUT/profile.json)")
    p.add_argument("--profile-flags", default="", metavar="FLAGS",
                   help="trainer flags of the profiled step (e.g. \"--attention fused\")")
    p.add_argument("--lever", action="append", default=[], metavar="NAME=FLAGS",
                   help="also measure the trainer with FLAGS (e.g. scan=--scan-layers): its start-up cold and "
                        "warm and its amp at the largest batch beside the defaults'; leading VAR=VALUE words are "
                        "environment variables of its runs (e.g. \"noautotune=XLA_FLAGS=--xla_gpu_autotune_level=0\"); "
                        "repeatable")
    p.add_argument("--no-lever-starts", action="store_true",
                   help="measure each lever's throughput only, not its cold and warm start-up (46-48 s a lever "
                        "in the H100 run of docs/benchmarks.md); its losses are then its benchmark run's beside the "
                        "defaults'")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    for spec in args.lever:
        if "=" not in spec or not spec.split("=", 1)[0].isidentifier():
            p.error(f"--lever {spec}: expected NAME=FLAGS, NAME a word (e.g. scan=--scan-layers)")
    out = os.path.abspath(args.out)
    # the runs start in the checkout (cwd=REPO): a relative path means the caller's folder, as here
    args.records, args.work = os.path.abspath(args.records), os.path.abspath(args.work or os.path.join(out, "work"))
    os.makedirs(args.work, exist_ok=True)
    started = time.monotonic()

    cold_s = warm_s = warm_phases = warm_imports = cold_startup = warm_startup = None
    cold_lines, warm_lines, cold_losses = [], [], []
    if not args.no_start:
        cache = os.path.join(args.work, "start-cache")
        shutil.rmtree(cache, ignore_errors=True)
        cold_s, cold_lines, cold_output, cold_startup = timed_trainer(args, cache)
        warm_s, warm_lines, warm_output, warm_startup = timed_trainer(args, cache)
        write_logs(out, {"trainer-cold.log": cold_output, "trainer-warm.log": warm_output})
        cold_losses = step_losses(cold_output)
        if args.phases:  # with Python's import profile: which packages the imports' seconds went to
            _, _, phases_output, _ = timed_trainer(args, cache, profile=os.path.join(out, "trainer-warm.prof"),
                                                   environ={"PYTHONPROFILEIMPORTTIME": "1"})
            warm_phases = phase_seconds(os.path.join(out, "trainer-warm.prof"))
            warm_imports = import_seconds(phases_output)
    print(f"gpu_check: python -m trainer first step {_fmt(cold_s, '.1f')} s cold, {_fmt(warm_s, '.1f')} s warm "
          f"({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
    # the backend those runs took, the trainer's own choice (KERAS_BACKEND unset): JAX on a GPU machine, which has
    # no TensorFlow; TensorFlow, which no compilation cache serves, where it is installed (a CPU rehearsal)
    start = {"backend": default_backend(env_for(), available=installed), "cold_s": cold_s, "warm_s": warm_s,
             "cold_startup": cold_startup, "warm_startup": warm_startup,
             "warm_phases_s": warm_phases, "warm_imports_s": warm_imports, "cold_losses": cold_losses}
    save_partial(out, start=start)

    results, worker_lines = ours(args, out)
    save_partial(out, start=start, benchmark=results)
    medians = ", ".join(f"{c['precision']} b{c['batch']} {_fmt(c.get('median'), ',.0f')}" for c in results["configs"])
    print(f"gpu_check: trainer.benchmark: {medians} seq/s ({time.monotonic() - started:.0f} s)", file=sys.stderr,
          flush=True)
    compiled_batches = {int(b) for b in args.compiled_peer_batches.split(",") if b}
    peers = {}
    for batch in [] if args.no_peers else [int(b) for b in args.batch_sizes.split(",")]:
        for precision in args.precisions.split(","):
            compiled = batch in compiled_batches
            peers[(precision, batch)] = (peer(args, precision, batch, compiled), "compiled" if compiled else "eager")
            print(f"gpu_check: peer {precision} batch {batch}: {_fmt(peers[(precision, batch)][0], ',.0f')} seq/s "
                  f"({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
    rows = table_rows(results, peers)
    save_partial(out, start=start, benchmark=results, rows=rows)

    if args.profile:
        profile(args, out)
        print(f"gpu_check: profile done ({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)

    levers = []
    for spec in args.lever:
        name, flags = spec.split("=", 1)
        levers.append(lever(args, out, name, flags, rows))
        print(f"gpu_check: lever {name}: amp {_fmt(levers[-1]['amp'], ',.0f')} seq/s "
              f"({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
        save_partial(out, start=start, benchmark=results, rows=rows, levers=levers)
    every_line = cold_lines + warm_lines + worker_lines
    start.update(library_lines=len(every_line), examples=every_line[:5])
    found = checks(rows, start)
    device = (results.get("host") or {}).get("accelerator") or "no accelerator"
    report = {"device": device, "rows": rows, "start": start, "levers": levers,
              "checks": {k: list(v) for k, v in found.items()},
              "seconds": round(time.monotonic() - started, 1), "benchmark": results}
    with open(os.path.join(out, "gpu-check.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
    os.remove(os.path.join(out, "gpu-check-partial.json"))
    if args.json:
        print(json.dumps(report))
    else:
        print_table(rows, start, found, device, args.model, args.start_batch)
        # the levers run under JAX: the defaults' losses are theirs to compare only where the defaults ran
        # under JAX too (a host with TensorFlow starts the defaults on it; the GPU machine has none)
        print_levers(levers, cold_losses if cold_startup and "programs" in cold_startup else None)
        print_startups(start, levers)
        print_phases(warm_phases, warm_imports)
        print(f"gpu_check: {report['seconds']:.0f} s; {os.path.join(out, 'gpu-check.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
