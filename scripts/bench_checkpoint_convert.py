"""Converting a BERT-large checkpoint: seconds per kind and peak memory against one copy of the weights.

    python scripts/bench_checkpoint_convert.py [--model large] [--source google] [--tmp DIR] [--json]

Builds a BERT of Google's `--model` size (large: 24 layers, H 1024, 335M parameters) with random
float32 values, writes it as `--source` (Google's bert_model.ckpt by default, TensorFlow's writer),
then runs `python -m trainer checkpoint convert SRC OUT --to KIND --vocab V` (V: a vocab of the model's
size, written here) for hf, google and bertprep, each in
a fresh process, timing the command and taking the process's peak RSS (wait4's ru_maxrss).

Baselines, each in a fresh process in this same invocation:
- `copy`: np.load of the same weights from an .npz, then np.save of them (one copy of the weights
  in memory, the same bytes read and written): the floor a conversion is compared with;
- each run's imports: a fresh process importing the modules that run had loaded when it ended, no
  weights (a conversion from hf or bertprep imports no TensorFlow, one from google does; `copy`
  imports NumPy alone).
Printed per run: seconds, ratio to copy's seconds, peak RSS, its imports' peak RSS, RSS above its
imports in copies of the weights.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

KINDS = ("hf", "google", "bertprep")


def random_checkpoint(model):
    from trainer.checkpoint import Checkpoint, names
    from trainer.config import BertConfig

    config = BertConfig.sized(model)
    rng = np.random.default_rng(0)
    weights = {row.google: rng.standard_normal(names.google_shape(row, config), dtype=np.float32) * 0.02
               for row in names.rows(config)}
    return Checkpoint("random", "random", config, weights)


# Runs a module or a script and writes the process's own peak RSS (VmHWM, reset at exec; wait4's
# ru_maxrss would include the RSS of this parent, which the child inherits at fork), then the modules it
# had loaded, one a line, for its imports-alone baseline.
_WRAPPER = """import atexit, runpy, sys
target = sys.argv[1]
def hwm():
    modules = [name for name in sys.modules if name.split('.')[-1] not in ('__main__', '__mp_main__')]
    with open('/proc/self/status') as f, open(target, 'w') as out:
        out.write([l.split()[1] for l in f if l.startswith('VmHWM:')][0] + '\\n')
        out.writelines(name + '\\n' for name in modules)
atexit.register(hwm)
what, sys.argv = sys.argv[2], sys.argv[2:]
if what.endswith('.py'):
    runpy.run_path(what, run_name='__main__')
else:
    runpy.run_module(what, run_name='__main__', alter_sys=True)
"""

# Imports the modules named in argv[1] in the order the measured run loaded them. One that cannot be
# imported on its own (a name a package puts in sys.modules by hand) is passed over: its parent, imported
# before it, loaded it.
_IMPORTS = """import importlib, sys
with open(sys.argv[1]) as f:
    names = f.read().split()
for name in names:
    if name not in sys.modules:
        try:
            importlib.import_module(name)
        except Exception:
            pass
"""


def measured(argv, env, root):
    """(seconds, peak RSS bytes, peak RSS bytes of its imports alone) of a fresh process: argv is [module or
    script.py, args...]. The imports' figure is that of another fresh process importing what this one had
    loaded, so that RSS above it is what the run held beyond its libraries, whichever libraries it needed."""
    seconds, peak, modules = _wrapped(argv, env, root)
    imports = os.path.join(root, "imports.py")
    with open(imports, "w") as f:
        f.write(_IMPORTS)
    return seconds, peak, _wrapped([imports, modules], env, root)[1]


def _wrapped(argv, env, root):
    """(seconds, peak RSS bytes, the file naming the modules it loaded) of argv run by _WRAPPER."""
    hwm = os.path.join(root, "hwm")
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _WRAPPER, hwm, *argv], env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{done.stderr[-2000:]}")
    with open(hwm) as f:
        peak = int(f.readline()) * 1024
    modules = os.path.join(root, "modules")
    os.replace(hwm, modules)
    return seconds, peak, modules


COPY = "import numpy as np, sys\nwith np.load(sys.argv[1]) as z:\n    a = {k: z[k] for k in z.files}\n" \
       "with open(sys.argv[2], 'wb') as f:\n    np.savez(f, **a)\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="large")
    p.add_argument("--source", choices=KINDS, default="google")
    p.add_argument("--tmp", help="scratch directory (default: a temporary one)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    from trainer.checkpoint import google, hf, ours

    root = tempfile.mkdtemp(prefix="bench-ckpt-", dir=args.tmp)
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""), TF_CPP_MIN_LOG_LEVEL="3")
    try:
        checkpoint = random_checkpoint(args.model)
        weight_bytes = sum(v.nbytes for v in checkpoint.weights.values())
        npz = os.path.join(root, "weights.npz")
        with open(npz, "wb") as f:
            np.savez(f, **checkpoint.weights)
        parameters, vocab_size = checkpoint.parameters(), checkpoint.config.vocab_size
        source = os.path.join(root, "source")
        os.makedirs(source)
        {"hf": hf, "google": google, "bertprep": ours}[args.source].write(checkpoint, source)  # consumes it
        del checkpoint
        # A model is exported with its tokenizer (--to hf refuses one without): a vocab of the model's size, as
        # a real checkpoint carries, given to every kind alike.
        vocab = os.path.join(root, "vocab.txt")
        special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        with open(vocab, "w", encoding="utf-8") as f:
            f.writelines(f"{token}\n" for token in special + [f"w{i}" for i in range(vocab_size - len(special))])
        copy = os.path.join(root, "copy.py")
        with open(copy, "w") as f:
            f.write(COPY)
        runs = {"copy": measured([copy, npz, os.path.join(root, "copy.npz")], env, root)}
        for kind in KINDS:
            runs[kind] = measured(["trainer", "checkpoint", "convert", source,
                                   os.path.join(root, f"out-{kind}"), "--to", kind, "--vocab", vocab, "--quiet"],
                                  env, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    copy_seconds, copy_rss, _ = runs["copy"]
    result = {"model": args.model, "parameters": parameters, "weight_bytes": weight_bytes, "source": args.source,
              "runs": {name: {"seconds": round(s, 2), "seconds_vs_copy": round(s / copy_seconds, 2),
                              "peak_rss_mb": round(rss / 2**20), "imports_peak_rss_mb": round(import_rss / 2**20),
                              "rss_above_imports_in_weight_copies": round((rss - import_rss) / weight_bytes, 2),
                              "rss_vs_copy": round(rss / copy_rss, 2)}
                       for name, (s, rss, import_rss) in runs.items()}}
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(f"BERT-{args.model}: {parameters / 1e6:.0f}M parameters, {weight_bytes / 2**20:.0f} MiB float32; "
          f"source {args.source}")
    print(f"{'run':<10} {'seconds':>8} {'x copy':>7} {'peak RSS MiB':>13} {'x copy RSS':>10} "
          f"{'its imports MiB':>16} {'(RSS-imports)/weights':>22}")
    for name, r in result["runs"].items():
        print(f"{name:<10} {r['seconds']:>8.2f} {r['seconds_vs_copy']:>7.2f} {r['peak_rss_mb']:>13} "
              f"{r['rss_vs_copy']:>10.2f} {r['imports_peak_rss_mb']:>16} "
              f"{r['rss_above_imports_in_weight_copies']:>22.2f}")


if __name__ == "__main__":
    main()
