"""What the JAX training step asks of an NVIDIA GPU, compiled here without one: kernels and bytes they move.

    python scripts/gpu_compile_prepare.sh                      # once: .gpu-compile, JAX's CUDA plugin over .venv
    .gpu-compile/bin/python scripts/gpu_step_traffic.py --data R128 [--model base] [--batch-size 256]
        [--precision amp] [--variant=FLAGS ...] [--baseline REF] [--target H100_SPEC] [--save-hlo DIR]
        [--operations N] [--json]

JAX compiles for a GPU that is not there (deviceless AOT: jax.experimental.topologies with XLA's GPU
target description, scripts/gpu_specs/h100_sxm.txtpb, the facts XLA's own hlo_opt tool keeps for an H100
SXM) when its CUDA plugin and NVIDIA's libraries are installed; no GPU, no driver. Each variant (trainer
flags; the first is the baseline; with --baseline REF the first variant also runs with the code of commit
REF, extracted as scripts/bench_train_before_after.py does) is built as profile_gpu_step.py builds the
trainer's step, traced as on a GPU (the fused attention lowered for Triton, not interpreted), compiled by
XLA's GPU pipeline, and its optimized module read: every kernel the step launches (fusions, library calls,
Pallas kernels) with the bytes of its operands (each buffer once) and results, summed by the Keras layer
it came from (profile_gpu_step.CATEGORIES) and by kind (matrix products apart). Printed per variant:
kernels, gigabytes moved (all, matrix products, the rest), the categories, and each as a ratio to the
baseline's; with --operations N, the N operations (each layer's alike summed) that move the most in the
last variant.

A loop (a `while`, as --scan-layers makes) is counted by its operands, not by the kernels of its body: a
scanned step's figures are not comparable with an unrolled one's.

What it is: the shape of the program XLA would run, in the same process that a GPU run's compilation
would take (autotuning aside: without a device XLA takes its default GEMM and sort algorithms, and
bytes are operand and result sizes, not what the caches serve). What it is not: a speed. A kernel's
time is what scripts/profile_gpu_step.py measures on the GPU; these bytes say where a step's memory
traffic goes and what a change removed, before a GPU measures it.
"""

import argparse
import collections
import json
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
TARGET = os.path.join(HERE, "gpu_specs", "h100_sxm.txtpb")
DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s16": 2, "u16": 2, "f32": 4, "s32": 4, "u32": 4,
               "f64": 8, "s64": 8, "u64": 8}
ARRAY = re.compile(r"\b(" + "|".join(DTYPE_BYTES) + r")\[([\d,]*)\]")
INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = (.*?) ([a-z][a-z\-]*)\((.*?)\)(.*)$")
# Instructions that launch nothing: they name, bundle or reinterpret buffers.
NO_KERNEL = {"parameter", "get-tuple-element", "tuple", "bitcast", "constant", "after-all", "partition-id",
             "replica-id", "opt-barrier"}
GEMM_TARGET = re.compile(r"gemm|cublas|matmul", re.IGNORECASE)
PALLAS_TARGET = re.compile(r"triton", re.IGNORECASE)


def array_bytes(type_text):
    """Bytes of every array in an HLO type ("(bf16[2,3]{1,0}, f32[])" -> 16)."""
    total = 0
    for dtype, dims in ARRAY.findall(type_text):
        size = DTYPE_BYTES[dtype]
        for dim in filter(None, dims.split(",")):
            size *= int(dim)
        total += size
    return total


def entry_lines(hlo_text):
    """The instructions of a compiled module's ENTRY computation (what the device is asked to run)."""
    lines = hlo_text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("ENTRY"))
    body = []
    for line in lines[start + 1:]:
        if line.startswith("}"):
            break
        body.append(line)
    return body


def step_kernels(hlo_text):
    """[{name, opcode, kind, op_name, bytes_in, bytes_out}] of each kernel-launching instruction of the ENTRY
    computation: kind "gemm" (a library or fused matrix product), "pallas" (a Triton kernel of ours), or the
    opcode (fusion, copy, sort, while, ...). bytes_in: its operands' sizes; bytes_out: its results'."""
    types, kernels = {}, []
    for line in entry_lines(hlo_text):
        match = INSTRUCTION.match(line)
        if not match:
            continue
        name, result_type, opcode, operands, attributes = match.groups()
        types[name] = result_type
        if opcode in NO_KERNEL:
            continue
        target = re.search(r'custom_call_target="([^"]*)"', attributes)
        target = target.group(1) if target else ""
        if GEMM_TARGET.search(target) or (opcode == "fusion" and "kind=kCustom" in attributes and "gemm" in name):
            kind = "gemm"
        elif PALLAS_TARGET.search(target):
            kind = "pallas"
        else:
            kind = opcode
        op_name = re.search(r'op_name="([^"]*)"', attributes)
        # A library product's result is (product, scratch workspace): the workspace is not traffic.
        results = ARRAY.search(result_type).group(0) if kind == "gemm" and result_type.startswith("(") else result_type
        kernels.append({"name": name, "opcode": opcode, "kind": kind, "op_name": op_name.group(1) if op_name else "",
                        "bytes_in": sum(array_bytes(types.get(o, "")) for o in _distinct(operands)),
                        "bytes_out": array_bytes(results)})
    return kernels


def _distinct(operands):
    """An instruction's operand names, each once: a buffer passed twice (the packed query, key and value, which
    the fused attention takes three times and reads a third of each time) is read at most once."""
    return list(dict.fromkeys(re.findall(r"%([\w.\-]+)", operands)))


def summary(kernels):
    """Counts and gigabytes of `step_kernels`: all, matrix products, the rest, and by (category, kind)."""
    from profile_gpu_step import category

    def gigabytes(items):
        return sum(k["bytes_in"] + k["bytes_out"] for k in items) / 1e9

    def grouped(name_of):
        """{name: its kernels' count and GB} of the kernels grouped by name_of(kernel), the most bytes first."""
        groups = collections.defaultdict(list)
        for k in kernels:
            groups[name_of(k)].append(k)
        return {name: {"kernels": len(items), "gb": gigabytes(items)}
                for name, items in sorted(groups.items(), key=lambda kv: -gigabytes(kv[1]))}

    gemms = [k for k in kernels if k["kind"] == "gemm"]
    return {"kernels": len(kernels), "gb": gigabytes(kernels), "gemm_gb": gigabytes(gemms),
            "other_gb": gigabytes(kernels) - gigabytes(gemms),
            "categories": grouped(lambda k: f"{category(k['op_name'])} ({k['kind']})"),
            "operations": grouped(operation)}


def operation(kernel):
    """What a kernel computes, every layer's alike: the last parts of its op_name with the layer's number
    folded ("transpose(jvp(layer_N))/intermediate/reduce_sum") and its kind."""
    name = re.sub(r"layer_\d+", "layer_N", "/".join(kernel["op_name"].split("/")[-3:]))
    return f"{name} ({kernel['kind']})"


def compile_for_gpu(args, target):
    """The trainer's step of `args` compiled by XLA's GPU pipeline for the device `target` describes: the
    optimized module's text and the seconds spent lowering and compiling."""
    import time

    import jax
    from jax.experimental import topologies

    from profile_gpu_step import build

    try:
        topology = topologies.get_topology_desc(platform="cuda", target_config=open(target).read(), topology="1x1x1")
    except (NotImplementedError, RuntimeError) as e:
        raise SystemExit(f"gpu_step_traffic: error: JAX cannot compile for CUDA here ({str(e).splitlines()[0]}); "
                         "run it with the Python of scripts/gpu_compile_prepare.sh") from None
    steps, batches, policy = build(args)
    device = jax.sharding.SingleDeviceSharding(topology.devices[0])
    abstract = jax.tree.map(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=device),
                            (steps.state, batches[0]))
    started = time.perf_counter()
    # Traced as on a GPU: the kernels that run interpreted on a CPU (Pallas) are lowered for Triton.
    on_cpu = jax.default_backend
    jax.default_backend = lambda: "gpu"
    try:
        traced = jax.jit(steps._train_step, donate_argnums=0).trace(*abstract)
    finally:
        jax.default_backend = on_cpu
    lowered = traced.lower(lowering_platforms=("cuda",))
    lowered_at = time.perf_counter()
    text = lowered.compile().as_text()
    return text, policy, lowered_at - started, time.perf_counter() - lowered_at


def one(args):
    """This process's variant: compile, read, print one JSON line."""
    import profile_gpu_step  # noqa: F401  (it puts this tree first on the path: the baseline's goes before)

    if args.tree:
        sys.path.insert(0, args.tree)
    os.environ.setdefault("KERAS_BACKEND", "jax")
    text, policy, lowering_s, compiling_s = compile_for_gpu(args, args.target)
    if args.save_hlo:
        os.makedirs(args.save_hlo, exist_ok=True)
        with open(os.path.join(args.save_hlo, f"{args.label or 'step'}.hlo.txt"), "w", encoding="utf-8") as f:
            f.write(text)
    print(json.dumps({"policy": policy, "lowering_s": lowering_s, "compiling_s": compiling_s,
                      **summary(step_kernels(text))}))


def file_name(label):
    """A variant's label as a file name ("--attention fused" -> "attention_fused")."""
    return re.sub(r"[^\w.-]+", "_", label).strip("_-") or "baseline"


def run_variant(args, flags, tree, label):
    """One variant in a process of its own (XLA's flags are read once a process)."""
    argv = [sys.executable, os.path.abspath(__file__), "--one", "--data", args.data, "--model", args.model,
            "--batch-size", str(args.batch_size), "--precision", args.precision, "--optimizer", args.optimizer,
            "--target", args.target, f"--label={file_name(label)}",
            *(["--tree", tree] if tree != REPO else []), *(["--save-hlo", args.save_hlo] if args.save_hlo else []),
            *[f"--trainer-flag={flag}" for flag in flags.split()]]
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=os.pathsep.join(filter(None, [tree, HERE])))
    result = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tree)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0 or not lines:
        raise SystemExit(f"gpu_step_traffic: {label} failed: {result.stderr.strip().splitlines()[-1:]}")
    return {"variant": label, "flags": flags, **json.loads(lines[-1])}


def ratio(value, base):
    return f"{value / base:.2f}x" if base else "-"


def print_table(results, operations=0):
    base = results[0]
    print(f"{'variant':<64}{'kernels':>9}{'GB moved':>10}{'x base':>8}{'GEMM GB':>9}{'other GB':>10}{'x base':>8}"
          f"{'compile s':>11}")
    for r in results:
        print(f"{r['variant'][:63]:<64}{r['kernels']:>9}{r['gb']:>10.2f}{ratio(r['gb'], base['gb']):>8}"
              f"{r['gemm_gb']:>9.2f}{r['other_gb']:>10.2f}{ratio(r['other_gb'], base['other_gb']):>8}"
              f"{r['compiling_s']:>11.1f}")
    names = list(dict.fromkeys(name for r in results for name in r["categories"]))
    print("\nGB moved by category (kind), per variant in the order above:")
    for name in names:
        cells = "".join(f"{r['categories'].get(name, {'gb': 0.0})['gb']:>9.2f}" for r in results)
        print(f"  {name[:40]:<40}{cells}")
    if operations:
        print(f"\nthe {operations} operations moving the most in the last variant (GB, kernels), per variant:")
        for name in list(results[-1]["operations"])[:operations]:
            cells = "".join(f"{r['operations'].get(name, {'gb': 0.0})['gb']:>9.2f}" for r in results)
            print(f"  {name[-78:]:<78}{cells}{results[-1]['operations'][name]['kernels']:>6}")


def main():
    from profile_gpu_step import add_build_arguments

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_build_arguments(p, precision="amp")  # only the records' shapes size the step
    p.add_argument("--variant", action="append", default=None, metavar="FLAGS",
                   help="trainer flags of a variant, as --variant='--dropout-rng hash' (repeatable; the first is "
                        "the baseline; default: the GPU's defaults, spelled out)")
    p.add_argument("--baseline", metavar="REF", help="run the first variant at commit REF too, as the baseline")
    p.add_argument("--target", default=TARGET, help="XLA's GPU target description (default: an H100 SXM)")
    p.add_argument("--save-hlo", metavar="DIR", help="also write each variant's optimized module there")
    p.add_argument("--operations", type=int, default=0, metavar="N",
                   help="also print the N operations (layers alike) that move the most bytes in the last variant")
    p.add_argument("--json", action="store_true")
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--tree", help=argparse.SUPPRESS)
    p.add_argument("--label", default="", help=argparse.SUPPRESS)
    p.add_argument("--trainer-flag", action="append", default=[], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        return one(args)
    # each variant's process starts in the tree it runs (cwd), not the caller's folder: the paths it is given
    args.data, args.target = os.path.abspath(args.data), os.path.abspath(args.target)
    args.save_hlo = args.save_hlo and os.path.abspath(args.save_hlo)
    # What --attention/--dropout-rng/--embedding-gradient "auto" take on a GPU (this process has none).
    variants = args.variant or ["--attention fused --dropout-rng rbg --embedding-gradient sorted"]
    runs = [(flags, REPO, flags or "(no flags)") for flags in variants]
    if args.baseline:
        from bench_train_before_after import baseline_tree

        tree, commit = baseline_tree(args.baseline, quiet=args.json)
        runs.insert(0, (variants[0], tree, f"{args.baseline} ({commit[:12]}) {variants[0]}"))
    results = []
    for flags, tree, label in runs:
        results.append(run_variant(args, flags, tree, label))
        print(f"gpu_step_traffic: {label} compiled", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(results))
    else:
        print(f"the step as XLA compiles it for {os.path.basename(args.target)}: BERT-{args.model}, batch "
              f"{args.batch_size}, {results[0]['policy']}")
        print_table(results, args.operations)
    return 0


if __name__ == "__main__":
    sys.exit(main())
