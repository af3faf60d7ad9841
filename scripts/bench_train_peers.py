"""Our trainer's step (TensorFlow and JAX backends) against the trainers users would pick instead.

    python scripts/bench_train_peers.py --data128 R128 --data512 R512 [--models mini,small]
        [--batch128 8 --batch512 2] [--precision fp32] [--iterations 8 --skip 2 --runs 3]
        [--device auto|cuda|cpu] [--torch-compile] [--json]

In one invocation, on the same records, model size, batch and precision:
- ours: `python -m trainer`'s own run, timed by trainer.benchmark's worker, under KERAS_BACKEND=tensorflow
  and KERAS_BACKEND=jax;
- Hugging Face `transformers` BertForPreTraining (PyTorch): its encoder, its heads on the masked positions
  gathered (as NVIDIA's PyTorch BERT does; the stock forward would run the vocab projection on every
  position), torch.optim.AdamW, bf16 autocast for amp; on CUDA where torch sees a GPU (fused AdamW, TF32 for
  fp32), with --torch-compile its forward and loss compiled (the figure users compare against on a GPU);
  ours then trains with --precision amp (bf16 on such a GPU, trainer/precision.py);
- keras-hub's BertBackbone with a MaskedLMHead tied to its token embedding and a next-sentence dense layer,
  trained by Keras's own compiled train step (XLA: jit_compile "auto"), under --keras-hub-backend.
Every one reads the records with bertprep's stream (same order, same batches), optimizes the reference
loss (weighted masked-LM cross-entropy + next-sentence cross-entropy) with Adam and decoupled weight decay,
and is timed by the same method as trainer.benchmark: a fresh process per run, the clock when each
iteration's loss reached the host, throughput = batch x (iterations - skip) / (t[iterations] - t[skip]),
median over runs. The runs of the frameworks are interleaved (run 1 of each, then run 2, ...) so that a
change in the machine's load falls on all of them. MFU = model FLOPs per sequence (trainer.benchmark's
count) x throughput / the machine's matmul peak: each run measures a large matmul's FLOP/s in its own
framework and precision, and the peak is the best framework's median in this invocation (each
framework's own figure is printed too). "MFU own" divides by the framework's own matmul figure instead:
on a machine whose load changes from minute to minute (this project's shared VM), the run and its matmul
see the same load, so it compares the frameworks' efficiency more steadily than sequences/s do. A peer
that is not installed is skipped with a note.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from trainer.benchmark import method  # noqa: E402
from trainer.config import BertConfig  # noqa: E402

FRAMEWORKS = ("ours-tensorflow", "ours-jax", "hf-torch", "keras-hub")
NEEDS = {"ours-tensorflow": ("tensorflow", "keras"), "ours-jax": ("jax", "keras"),
         "hf-torch": ("torch", "transformers"), "keras-hub": ("keras_hub",)}
PEAK_SIZE = 1024
GPU_PEAK_SIZE = 8192  # as trainer.benchmark.worker's on an accelerator


def missing_modules(framework, keras_hub_backend):
    import importlib.util

    needed = NEEDS[framework] + ((keras_hub_backend,) if framework == "keras-hub" else ())
    return [name for name in needed if importlib.util.find_spec(name) is None]


def peer_batches(data, batch_size, seed):
    """The records as `python -m trainer` streams them (same files, order and batches), prefetched."""
    from trainer.data import Records, RecordStream, prefetch

    records = Records(data, "ofrecord")
    return records, prefetch(RecordStream(records, "training", batch_size, seed).batches())


# --- Hugging Face transformers (PyTorch) -----------------------------------------------------------


def peer_device(cuda_available, requested="auto"):
    """Where the transformers peer runs: CUDA when torch sees a GPU (or --device cuda), else the CPU."""
    if requested != "auto":
        return requested
    return "cuda" if cuda_available else "cpu"


def run_hf_torch(config, data, batch_size, precision, iterations, seed, device="auto", compile_step=False):
    """transformers' BertForPreTraining trained on `device` (auto: CUDA where torch sees a GPU): bf16
    autocast for amp, TF32 for fp32 on a GPU, fused AdamW there, and with `compile_step` the forward and
    loss compiled by torch.compile (its backward through AOTAutograd). Timed as ours: the clock when
    each iteration's loss reached the host, the next step already dispatched."""
    import torch
    from transformers import BertConfig as HFConfig
    from transformers import BertForPreTraining

    device = peer_device(torch.cuda.is_available(), device)
    on_gpu = device == "cuda"
    if on_gpu:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(seed)
    _, batches = peer_batches(data, batch_size, seed)
    model = BertForPreTraining(HFConfig(
        vocab_size=config.vocab_size, hidden_size=config.hidden_size, num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads, intermediate_size=config.intermediate_size,
        hidden_act="gelu", hidden_dropout_prob=config.hidden_dropout_prob,
        attention_probs_dropout_prob=config.attention_probs_dropout_prob,
        max_position_embeddings=config.max_position_embeddings, type_vocab_size=config.type_vocab_size)).to(device)
    model.train()
    no_decay = [p for n, p in model.named_parameters() if "LayerNorm" in n or n.endswith("bias")]
    decay = [p for n, p in model.named_parameters() if not ("LayerNorm" in n or n.endswith("bias"))]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=1e-4, eps=1e-6, **({"fused": True} if on_gpu else {}))
    autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=precision != "fp32")

    def loss_of(t):
        with autocast:
            encoded, pooled = model.bert(input_ids=t["input_ids"], attention_mask=t["input_mask"],
                                         token_type_ids=t["segment_ids"], return_dict=False)[:2]
            positions = t["masked_lm_positions"].long()
            picked = torch.gather(encoded, 1, positions[..., None].expand(-1, -1, encoded.shape[-1]))
            mlm_logits, nsp_logits = model.cls(picked, pooled)
        weights = t["masked_lm_weights"]
        nll = torch.nn.functional.cross_entropy(mlm_logits.float().flatten(0, 1), t["masked_lm_ids"].long().flatten(),
                                                reduction="none")
        return (nll * weights.flatten()).sum() / (weights.sum() + 1e-5) + torch.nn.functional.cross_entropy(
            nsp_logits.float(), t["next_sentence_labels"].long().flatten())

    compute_loss = torch.compile(loss_of) if compile_step else loss_of

    def step(batch):
        t = {k: torch.from_numpy(v).to(device, non_blocking=True) for k, v in batch.items()}
        loss = compute_loss(t)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.detach()

    times, pending = [], step(next(batches))
    for _ in range(iterations):
        following = step(next(batches))  # dispatched before the previous loss is waited for, as ours
        pending.item()
        times.append(time.perf_counter())
        pending = following
    pending.item()
    dtype = torch.float32 if precision == "fp32" else torch.bfloat16
    size = GPU_PEAK_SIZE if on_gpu else PEAK_SIZE
    peak = _peak(lambda a, b: a @ b, lambda n: torch.randn(n, n, device=device).to(dtype),
                 lambda out: float(out[-1][0, 0]), size=size)
    return times, peak


# --- keras-hub ---------------------------------------------------------------------------------------


def run_keras_hub(config, data, batch_size, precision, iterations, seed):
    import keras
    import keras_hub

    keras.utils.set_random_seed(seed)
    keras.config.set_dtype_policy("float32" if precision == "fp32" else "mixed_bfloat16")
    records, batches = peer_batches(data, batch_size, seed)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=config.vocab_size, num_layers=config.num_hidden_layers, num_heads=config.num_attention_heads,
        hidden_dim=config.hidden_size, intermediate_dim=config.intermediate_size,
        dropout=config.hidden_dropout_prob, max_sequence_length=config.max_position_embeddings,
        num_segments=config.type_vocab_size)
    inputs = {"token_ids": keras.Input((records.seq,), dtype="int32"),
              "segment_ids": keras.Input((records.seq,), dtype="int32"),
              "padding_mask": keras.Input((records.seq,), dtype="int32"),
              "mask_positions": keras.Input((records.pred,), dtype="int32")}
    outputs = backbone({k: inputs[k] for k in ("token_ids", "segment_ids", "padding_mask")})
    mlm = keras_hub.layers.MaskedLMHead(vocabulary_size=config.vocab_size, token_embedding=backbone.token_embedding,
                                        intermediate_activation="gelu", name="mlm")(
        outputs["sequence_output"], mask_positions=inputs["mask_positions"])
    nsp = keras.layers.Dense(2, name="nsp")(outputs["pooled_output"])
    model = keras.Model(inputs, {"mlm": keras.ops.cast(mlm, "float32"), "nsp": keras.ops.cast(nsp, "float32")})
    model.compile(optimizer=keras.optimizers.AdamW(1e-4, weight_decay=0.01, epsilon=1e-6),
                  loss={"mlm": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                        "nsp": keras.losses.SparseCategoricalCrossentropy(from_logits=True)})

    def step(batch):
        x = {"token_ids": batch["input_ids"], "segment_ids": batch["segment_ids"], "padding_mask": batch["input_mask"],
             "mask_positions": batch["masked_lm_positions"]}
        y = {"mlm": batch["masked_lm_ids"], "nsp": batch["next_sentence_labels"]}
        # The masked-LM weights as sample weights: Keras divides by the batch, not by their sum; same work.
        logs = model.train_on_batch(x, y, sample_weight={"mlm": batch["masked_lm_weights"],
                                                         "nsp": keras.ops.ones((len(batch["input_ids"]),))},
                                    return_dict=True)
        return float(logs["loss"])

    times = [_timed(step, next(batches)) for _ in range(iterations)]
    dtype = "float32" if precision == "fp32" else "bfloat16"
    matmul = keras.ops.matmul
    peak = _peak(matmul, lambda n: keras.ops.cast(keras.random.normal((n, n)), dtype),
                 lambda out: float(keras.ops.convert_to_numpy(out[-1][0, 0])))
    return times, peak


def _timed(step, batch):
    step(batch)
    return time.perf_counter()


def _peak(product, make, wait, products=10, repeats=3, size=PEAK_SIZE):
    """The framework's own size x size matmul rate, as trainer.benchmark.worker measures ours."""
    a, b = make(size), make(size)

    def timed():
        start = time.perf_counter()
        wait([product(a, b) for _ in range(products)])
        return time.perf_counter() - start

    timed()
    return 2 * size**3 * products / min(timed() for _ in range(repeats))


# --- one process per run ---------------------------------------------------------------------------------


def peer_worker(argv):
    p = argparse.ArgumentParser()
    p.add_argument("framework")
    p.add_argument("config")
    p.add_argument("data")
    p.add_argument("batch_size", type=int)
    p.add_argument("precision")
    p.add_argument("iterations", type=int)
    p.add_argument("result")
    p.add_argument("--device", default="auto")
    p.add_argument("--torch-compile", action="store_true")
    args = p.parse_args(argv)
    config = BertConfig(**json.loads(args.config))
    if args.framework == "hf-torch":
        times, peak = run_hf_torch(config, args.data, args.batch_size, args.precision, args.iterations, seed=12345,
                                   device=args.device, compile_step=args.torch_compile)
    else:
        times, peak = run_keras_hub(config, args.data, args.batch_size, args.precision, args.iterations, seed=12345)
    with open(args.result, "w", encoding="utf-8") as f:
        json.dump({"status": "ok", "step_times": times, "peak_flops": peak}, f)


def run_once(framework, config, data, batch_size, precision, iterations, keras_hub_backend, scratch, log, repo=REPO,
             peer_flags=()):
    """One fresh process, with the code of the tree `repo` (this one by default); returns
    (step_times, peak FLOP/s) or raises RuntimeError with the log's tail. `peer_flags`: the transformers
    peer's --device and --torch-compile."""
    result = os.path.join(scratch, "result.json")
    if os.path.exists(result):
        os.remove(result)
    others = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.abspath(p) != REPO]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=os.pathsep.join([repo] + others))
    if framework.startswith("ours-"):
        env["KERAS_BACKEND"] = framework.split("-", 1)[1]
        config_path = os.path.join(scratch, "bert_config.json")
        with open(config_path, "w", encoding="utf-8") as f:
            json.dump(config.to_dict(), f)
        policy = "fp32" if precision == "fp32" else "amp"  # the trainer's amp: bf16 where the device has it
        fields = {"format": "ofrecord", "data": data, "bert_config": config_path, "batch_size": batch_size,
                  "precision": policy, "optimizer": "adam", "lr": 1e-4, "seed": 12345, "quiet": True}
        argv = [sys.executable, "-m", "trainer.benchmark.worker", "--devices", "1", "--iterations", str(iterations),
                "--result", result, "--peak", "--config", json.dumps(fields)]
    else:
        env["KERAS_BACKEND"] = keras_hub_backend
        argv = [sys.executable, os.path.abspath(__file__), "--peer-worker", framework, json.dumps(config.to_dict()),
                data, str(batch_size), precision, str(iterations), result,
                *(peer_flags if framework == "hf-torch" else ())]
    with open(log, "w", encoding="utf-8") as out:
        code = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=repo).returncode
    try:
        with open(result, encoding="utf-8") as f:
            outcome = json.load(f)
    except (OSError, ValueError):
        outcome = {"status": "error"}
    if code != 0 or outcome["status"] != "ok":
        with open(log, encoding="utf-8", errors="replace") as f:
            tail = [line.strip() for line in f if line.strip()][-1:]
        raise RuntimeError(outcome.get("error") or (tail[0] if tail else f"exit {code}"))
    return outcome["step_times"], outcome["peak_flops"]


def main():
    if sys.argv[1:2] == ["--peer-worker"]:
        peer_worker(sys.argv[2:])
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data128", required=True, help="ofrecord records at 128/20")
    p.add_argument("--data512", help="ofrecord records at 512/80")
    p.add_argument("--models", default="mini,small")
    p.add_argument("--batch128", type=int, default=8)
    p.add_argument("--batch512", type=int, default=2)
    p.add_argument("--precision", choices=("fp32", "amp"), default="fp32")
    p.add_argument("--iterations", type=int, default=8)
    p.add_argument("--skip", type=int, default=2)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    p.add_argument("--keras-hub-backend", choices=("tensorflow", "jax"), default="jax")
    p.add_argument("--dropout", type=float, default=0.1, help="hidden and attention dropout of every model")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                   help="where the transformers peer runs (auto: CUDA when torch sees a GPU)")
    p.add_argument("--torch-compile", action="store_true",
                   help="compile the transformers peer's forward and loss with torch.compile")
    p.add_argument("--logs", default=None, help="directory for one log per run (default: a temporary one)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args()
    from trainer.data import Records

    frameworks = []
    for framework in args.frameworks.split(","):
        missing = missing_modules(framework, args.keras_hub_backend)
        if missing:
            print(f"note: {framework} skipped: {', '.join(missing)} not installed", file=sys.stderr)
        else:
            frameworks.append(framework)
    peer_flags = ["--device", args.device] + (["--torch-compile"] if args.torch_compile else [])
    # the runs start in the tree they run (cwd): a relative path means the caller's folder
    args.data128, args.data512 = os.path.abspath(args.data128), args.data512 and os.path.abspath(args.data512)
    shapes = [(args.data128, args.batch128)] + ([(args.data512, args.batch512)] if args.data512 else [])
    scratch = tempfile.mkdtemp(prefix="bench-peers-")
    logs = args.logs or scratch
    os.makedirs(logs, exist_ok=True)
    rows = []
    for model in args.models.split(","):
        for data, batch in shapes:
            records = Records(data, "ofrecord")
            config = BertConfig.sized(model, vocab_size=records.vocab_size or 30522,
                                      hidden_dropout_prob=args.dropout, attention_probs_dropout_prob=args.dropout)
            flops = method.training_flops_per_sequence(config, records.seq, records.pred)
            found = {f: {"throughputs": [], "peaks": [], "error": None} for f in frameworks}
            for run in range(1, args.runs + 1):
                for framework in frameworks:
                    entry = found[framework]
                    if entry["error"]:
                        continue
                    log = os.path.join(logs, f"{framework}-{model}-{records.seq}-run{run}.log")
                    try:
                        times, peak = run_once(framework, config, data, batch, args.precision, args.iterations,
                                               args.keras_hub_backend, scratch, log, peer_flags=peer_flags)
                    except RuntimeError as exc:
                        entry["error"] = str(exc)
                        print(f"{model} {records.seq}/{records.pred} {framework} run {run}: failed: {exc}",
                              file=sys.stderr)
                        continue
                    entry["throughputs"].append(method.throughput(times, batch, args.skip))
                    entry["peaks"].append(peak)
                    if not args.quiet:
                        print(f"{model} {records.seq}/{records.pred} {framework} run {run}/{args.runs}: "
                              f"{entry['throughputs'][-1]:.2f} seq/s, matmul {peak / 1e9:.1f} GFLOP/s", file=sys.stderr)
            machine_peak = max((method.median(e["peaks"]) for e in found.values() if e["peaks"]), default=None)
            for framework in frameworks:
                entry = found[framework]
                rate, peak = method.median(entry["throughputs"]), method.median(entry["peaks"])
                rows.append({"model": model, "shape": f"{records.seq}/{records.pred}", "batch": batch,
                             "framework": framework, "median": rate, "throughputs": entry["throughputs"],
                             "peak_flops": peak, "machine_peak_flops": machine_peak,
                             "mfu": method.mfu(flops, rate, machine_peak),
                             "mfu_own_matmul": method.mfu(flops, rate, peak), "error": entry["error"],
                             "flops_per_sequence": flops})
    if any(row["error"] for row in rows):
        if logs == scratch:  # the failures above name no log: say where they are
            print(f"the runs' logs: {scratch}", file=sys.stderr)
    else:
        shutil.rmtree(scratch, ignore_errors=True)  # results, configs and (without --logs) the logs
    for row in rows:
        peers = [r["median"] for r in rows if (r["model"], r["shape"]) == (row["model"], row["shape"])
                 and not r["framework"].startswith("ours-") and r["median"]]
        row["vs_fastest_peer"] = row["median"] / max(peers) if (peers and row["median"]) else None
    if args.json:
        print(json.dumps({"precision": args.precision, "iterations": args.iterations, "skip": args.skip,
                          "runs": args.runs, "rows": rows}, indent=1))
        return 0
    print(f"precision {args.precision}; {args.iterations} iterations, first {args.skip} skipped; median of "
          f"{args.runs} runs, interleaved; dropout {args.dropout}; {len(os.sched_getaffinity(0))} cores")
    print(f"{'model':<6} {'shape':<7} {'batch':>5}  {'framework':<16} {'seq/s':>8} {'matmul GFLOP/s':>15} "
          f"{'MFU':>6} {'MFU own':>8} {'x fastest peer':>15}")
    for r in rows:
        if r["median"] is None:
            print(f"{r['model']:<6} {r['shape']:<7} {r['batch']:>5}  {r['framework']:<16} failed: {r['error']}")
            continue
        versus = f"{r['vs_fastest_peer']:.2f}" if r["vs_fastest_peer"] else ""
        print(f"{r['model']:<6} {r['shape']:<7} {r['batch']:>5}  {r['framework']:<16} {r['median']:8.2f} "
              f"{r['peak_flops'] / 1e9:15.1f} {r['mfu']:6.1%} {r['mfu_own_matmul']:8.1%} {versus:>15}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
