"""The step's levers and the GPU check's plumbing, as plain functions (no framework loads): what `amp` becomes on
which device, which step options "auto" picks, the XLA flags, the compilation cache's folder and switch, the
libraries' log level kept as ours, the backend chosen without TensorFlow, where the transformers peer runs, and
the GPU check's table and verdicts. The runs themselves: tests/test_trainer_jax.py."""

import argparse
import dataclasses
import json
import math
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "scripts"))

import bench_train_peers  # noqa: E402
import gpu_check  # noqa: E402
from bertprep.errors import UsageError  # noqa: E402
from trainer import compilation_cache, library_logs, precision, startup, xla_gpu  # noqa: E402
from trainer.config import StepOptions, TrainConfig  # noqa: E402


@pytest.mark.parametrize("platform, capability, policy", [
    ("gpu", (9, 0), "mixed_bfloat16"), ("cuda", (8, 0), "mixed_bfloat16"), ("gpu", (8, 6), "mixed_bfloat16"),
    ("gpu", (7, 0), "mixed_float16"), ("gpu", (7, 5), "mixed_float16"),
    ("cpu", None, "mixed_bfloat16"), ("tpu", None, "mixed_bfloat16")])
def test_amp_is_bfloat16_where_the_device_multiplies_it(platform, capability, policy):
    chosen, why = precision.amp_policy_for(platform, capability)
    assert chosen == policy
    assert ("loss scaling" in why) == (policy == "mixed_float16")
    assert precision.loss_scaling(chosen) == (policy == "mixed_float16")


def test_compute_capability_reads_jax_and_tensorflow_forms():
    assert precision._capability("9.0") == (9, 0) and precision._capability((7, 5)) == (7, 5)
    assert precision._capability(None) is None
    assert precision.resolve("fp32", "jax") == ("fp32", None)  # only amp is resolved
    assert precision.keras_policy("fp32") == "float32" and precision.keras_policy("mixed_float16") == "mixed_float16"


def test_trainer_accepts_amp_and_the_levers():
    config = TrainConfig(format="ofrecord", precision="amp", embedding_gradient="sorted", dropout_rng="rbg",
                         gemm="xla", compilation_cache=False)
    assert config.precision == "amp"
    with pytest.raises(UsageError, match="dropout_rng: expected one of auto, threefry, rbg, hash, got 'philox'"):
        TrainConfig(format="ofrecord", dropout_rng="philox")
    assert TrainConfig(format="ofrecord", gelu="erf").gelu == "erf"
    with pytest.raises(UsageError, match="gelu: expected one of auto, keras, erf, got 'tanh'"):
        TrainConfig(format="ofrecord", gelu="tanh")
    assert TrainConfig(format="ofrecord", qkv_projection="packed").qkv_projection == "packed"  # attention auto
    with pytest.raises(UsageError, match="qkv_projection: expected one of auto, separate, packed, got 'fused'"):
        TrainConfig(format="ofrecord", qkv_projection="fused")


def test_scanned_layers_need_jax_and_one_stage_of_whole_layers():
    assert TrainConfig(format="ofrecord", scan_layers=True).scan_layers
    for split in ({"model_parallel": 2}, {"pipeline_stages": 2}):
        with pytest.raises(UsageError, match="scan_layers: not with .*model_parallel or .*pipeline_stages"):
            TrainConfig(format="ofrecord", scan_layers=True, **split)
    TrainConfig(format="ofrecord", scan_layers=True).check_backend("jax")
    with pytest.raises(UsageError, match="--scan-layers needs KERAS_BACKEND=jax .*backend is tensorflow"):
        TrainConfig(format="ofrecord", scan_layers=True).check_backend("tensorflow")
    assert StepOptions.resolved("auto", "auto", "jax", "gpu", scan_layers=True).scan_layers


def test_the_allreduce_dtype_is_refused_where_xla_places_the_reductions(capsys):
    """--model-parallel and --pipeline-stages run XLA's GSPMD step, which reduces in the gradients' own dtype:
    --allreduce-dtype bf16 was taken and ignored."""
    from trainer.cli import main

    assert TrainConfig(format="ofrecord", allreduce_dtype="bf16").allreduce_dtype == "bf16"
    TrainConfig(format="ofrecord", allreduce_dtype="fp32", model_parallel=2, pipeline_stages=2)
    for split in (["--model-parallel", "2"], ["--pipeline-stages", "2"]):
        assert main(["--format", "ofrecord", "--allreduce-dtype", "bf16", *split]) == 2
        assert capsys.readouterr().err.splitlines() == [
            "trainer: error: --allreduce-dtype bf16: not with --model-parallel or --pipeline-stages (XLA places "
            "their reductions, in the gradients' own dtype)"]


def test_a_padded_vocab_is_refused_where_the_vocabulary_stays_real(capsys):
    """--model-parallel and --pipeline-stages keep the real vocabulary (TrainConfig.pad_vocab_multiple 1): --pad-vocab
    8 was taken and ignored. --pad-vocab 1 (none) is what they do anyway."""
    from trainer.cli import main

    assert TrainConfig(format="ofrecord", pad_vocab=1, model_parallel=2).pad_vocab_multiple == 1
    assert TrainConfig(format="ofrecord", model_parallel=2).pad_vocab_multiple == 1
    for split in (["--model-parallel", "2"], ["--pipeline-stages", "2"]):
        assert main(["--format", "ofrecord", "--pad-vocab", "8", *split]) == 2
        assert capsys.readouterr().err.splitlines() == [
            "trainer: error: --pad-vocab 8: not with --model-parallel or --pipeline-stages (their split checks and "
            "saved state are of the real vocabulary)"]


@pytest.mark.parametrize("tf_config, said", [
    ("{", "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    ('{"cluster": 5, "task": {}}', "'int' object has no attribute 'get'"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 5}}', "('worker', 5) is not in list"),
])
def test_a_tf_config_that_is_no_cluster_with_this_task_is_one_line(tf_config, said):
    """TensorFlow's strategy read it with a JSON or index traceback from inside; trainer.benchmark (hosts_and_index)
    says the same line."""
    from trainer.benchmark.cli import hosts_and_index
    from trainer.config import tf_config_hosts

    tf_config_hosts('{"cluster": {"chief": ["a:1"], "worker": ["b:1"]}, "task": {"type": "worker", "index": 0}}')
    for check in (tf_config_hosts, lambda text: hosts_and_index({"TF_CONFIG": text})):
        with pytest.raises(UsageError) as refused:
            check(tf_config)
        assert str(refused.value) == f"TF_CONFIG is not a cluster with this task in it: {said}"


def test_the_last_layer_on_the_predicted_positions_takes_one_stage_and_either_backend():
    assert TrainConfig(format="ofrecord", last_layer="predicted").last_layer == "predicted"
    TrainConfig(format="ofrecord", last_layer="predicted", model_parallel=2)  # the layers stay whole
    with pytest.raises(UsageError, match="last_layer predicted: not with .*pipeline_stages"):
        TrainConfig(format="ofrecord", last_layer="predicted", pipeline_stages=2)
    with pytest.raises(UsageError, match="last_layer: expected one of auto, all, predicted, got 'masked'"):
        TrainConfig(format="ofrecord", last_layer="masked")
    for backend, platform in (("jax", "gpu"), ("jax", "cpu"), ("tensorflow", "cpu")):
        # not yet measured on a GPU: the whole layer unless asked for; asked for, on either backend
        assert StepOptions.resolved("auto", "auto", backend, platform).last_layer == "all"
        assert StepOptions.resolved("auto", "auto", backend, platform, last_layer="predicted").last_layer == "predicted"


def test_the_flops_counted_are_the_steps_own_with_the_last_layer_on_the_predicted_positions():
    """method.training_flops_per_sequence counts what the step computes: BERT-base at 128/20, the last layer's
    queries on 21 rows, 5.6% fewer; rows by hand: 12 whole layers less one, plus its keys and values on 128
    tokens and the rest on 21."""
    from trainer.benchmark import method
    from trainer.config import BertConfig

    base, h, inter = BertConfig.sized("base", vocab_size=30522), 768, 3072
    whole = method.forward_flops_per_sequence(base, 128, 20)
    layer = 2 * (4 * h * h + 2 * h * inter) * 128 + 4 * 128 * 128 * h
    rows = 2 * 2 * h * h * 128 + 2 * (2 * h * h + 2 * h * inter) * 21 + 4 * 21 * 128 * h
    assert method.forward_flops_per_sequence(base, 128, 20, 21) == whole - layer + rows
    assert 0.055 < 1 - method.training_flops_per_sequence(base, 128, 20, 21) / (3 * whole) < 0.057
    unpacked, packed = (argparse.Namespace(pred=20, packed=False, dims={"seq": 128, "pred": 20}),
                        argparse.Namespace(pred=23, packed=True, dims={"seq": 128, "pred": 20, "k": 3}))
    assert method.last_layer_rows(unpacked, "predicted") == 21 and method.last_layer_rows(packed, "predicted") == 26
    assert method.last_layer_rows(unpacked, "all") is method.last_layer_rows(unpacked, "auto") is None


def test_fused_attention_needs_jax():
    config = TrainConfig(format="ofrecord", attention="fused")
    config.check_backend("jax")
    with pytest.raises(UsageError, match="--attention fused needs KERAS_BACKEND=jax .*backend is tensorflow"):
        config.check_backend("tensorflow")
    with pytest.raises(UsageError, match="attention: expected one of auto, einsum, fused, got 'flash'"):
        TrainConfig(format="ofrecord", attention="flash")
    assert StepOptions.resolved("auto", "auto", "jax", "gpu", attention="fused").attention == "fused"
    for split in ({"model_parallel": 2}, {"pipeline_stages": 2}):
        with pytest.raises(UsageError, match="attention fused: not with .*model_parallel or .*pipeline_stages"):
            TrainConfig(format="ofrecord", attention="fused", **split)


@pytest.mark.parametrize("backend, platform, options", [
    ("jax", "gpu", StepOptions("sorted", "hash")), ("jax", "cuda", StepOptions("sorted", "hash")),
    ("jax", "cpu", StepOptions("scatter", "threefry")), ("tensorflow", "gpu", StepOptions("scatter", "threefry"))])
def test_auto_levers_are_the_gpus_under_jax_and_keras_own_elsewhere(backend, platform, options):
    assert StepOptions.resolved("auto", "auto", backend, platform) == options
    assert StepOptions.resolved("scatter", "rbg", backend, platform) == StepOptions("scatter", "rbg")  # as given
    # the fused attention where it takes the run (shapes, one device's layers), under JAX on a GPU alone
    fused = StepOptions.resolved("auto", "auto", backend, platform, attention="auto", fused_attention_fits=True)
    assert fused == dataclasses.replace(options, attention="fused" if options.dropout_rng == "hash" else "einsum")
    assert StepOptions.resolved("auto", "auto", backend, platform, attention="auto").attention == "einsum"
    assert StepOptions.resolved("auto", "auto", backend, platform, attention="einsum",
                                fused_attention_fits=True).attention == "einsum"  # as given
    # the GELU's erf formula, not yet measured on a GPU: Keras's unless asked for
    assert StepOptions.resolved("auto", "auto", backend, platform, gelu="auto").gelu == "keras"
    assert StepOptions.resolved("auto", "auto", backend, platform, gelu="erf").gelu == "erf"
    # the packed query, key and value projections, not yet measured on a GPU: only when asked for, with the
    # fused attention; asked for where the attention is einsum, a one-line error
    assert fused.qkv_projection == "separate"
    assert StepOptions.resolved("auto", "auto", backend, platform, attention="fused",
                                qkv_projection="packed").qkv_projection == "packed"
    with pytest.raises(UsageError, match="--qkv-projection packed: only with the fused attention"):
        StepOptions.resolved("auto", "auto", backend, platform, attention="auto", qkv_projection="packed")


def test_the_fused_attention_fits_runs_of_its_shapes_on_one_devices_layers():
    pytest.importorskip("jax")
    from trainer.config import BertConfig
    from trainer.pretraining import _fused_attention_fits

    base = BertConfig.sized("base")
    config = TrainConfig(format="ofrecord")
    assert config.attention == "auto"
    assert _fused_attention_fits(config, 128, base)
    assert not _fused_attention_fits(config, 512, base)  # longer than the kernel's 256 tokens
    assert not _fused_attention_fits(config, None, base)
    for split in ({"model_parallel": 2}, {"pipeline_stages": 2}):
        assert not _fused_attention_fits(TrainConfig(format="ofrecord", **split), 128, base)


def test_without_pallas_triton_auto_takes_einsum_and_fused_is_one_line(monkeypatch):
    """A JAX without Pallas's Triton backend (deprecated in JAX 0.11): the module cannot be imported."""
    pytest.importorskip("jax")
    from jax.experimental import pallas

    import trainer
    from trainer.config import BertConfig
    from trainer.pretraining import _fused_attention_fits, check_fused_attention

    base = BertConfig.sized("base")
    check_fused_attention(128, base)  # this JAX has it
    monkeypatch.setitem(sys.modules, "jax.experimental.pallas.triton", None)  # as if it had not
    monkeypatch.delattr(pallas, "triton", raising=False)
    monkeypatch.delitem(sys.modules, "trainer.fused_attention", raising=False)
    monkeypatch.delattr(trainer, "fused_attention", raising=False)
    assert not _fused_attention_fits(TrainConfig(format="ofrecord"), 128, base)
    with pytest.raises(UsageError, match=r"^--attention fused: this JAX has no Pallas Triton backend .*use "
                                         r"--attention einsum$"):
        check_fused_attention(128, base)


def test_xla_flags_add_cublas_and_leave_the_users_own():
    assert xla_gpu.xla_flags("cublas", "") == "--xla_gpu_enable_triton_gemm=false"
    assert xla_gpu.xla_flags("cublas", "--a=1") == "--a=1 --xla_gpu_enable_triton_gemm=false"
    assert xla_gpu.xla_flags("cublas", "--xla_gpu_enable_triton_gemm=true") == "--xla_gpu_enable_triton_gemm=true"
    assert xla_gpu.xla_flags("xla", "--a=1") == "--a=1"
    assert xla_gpu.xla_flags("cublas", "", autotune="off") == (
        "--xla_gpu_enable_triton_gemm=false --xla_gpu_autotune_level=0")
    assert xla_gpu.xla_flags("xla", "--xla_gpu_autotune_level=2", autotune="off") == "--xla_gpu_autotune_level=2"
    assert xla_gpu.xla_flags("cublaslt", "--a=1") == (
        "--a=1 --xla_gpu_enable_triton_gemm=false --xla_gpu_enable_cublaslt=true")
    assert xla_gpu.xla_flags("cublaslt", "--xla_gpu_enable_cublaslt=false") == (
        "--xla_gpu_enable_cublaslt=false --xla_gpu_enable_triton_gemm=false")
    assert TrainConfig(format="ofrecord", gemm_autotune="off").gemm_autotune == "off"
    with pytest.raises(UsageError, match="gemm_autotune: expected one of on, off, got 'fast'"):
        TrainConfig(format="ofrecord", gemm_autotune="fast")
    env = {"XLA_FLAGS": "--b=2"}
    xla_gpu.apply("cublas", env)
    assert env["XLA_FLAGS"] == "--b=2 --xla_gpu_enable_triton_gemm=false"


def test_the_start_up_clock_counts_nested_spans_once_and_starts_with_the_process():
    """trainer/startup.py: a trace inside another (a jit inside the step) is not counted twice; the first run's
    clock starts when the process did, before this module's import."""
    assert startup._union([]) == 0.0
    assert startup._union([(0.0, 1.0), (2.0, 3.0)]) == 2.0  # apart
    assert startup._union([(0.0, 4.0), (1.0, 2.0), (1.5, 3.0)]) == 4.0  # nested
    assert startup._union([(2.0, 5.0), (0.0, 3.0)]) == 5.0  # overlapping, out of order
    import time

    assert startup.PROCESS_START < startup._LOADED <= time.perf_counter()


def test_the_compilation_cache_is_on_unless_turned_off_and_lives_per_processor(tmp_path):
    assert compilation_cache.wanted(True, {}) and not compilation_cache.wanted(False, {})
    assert not compilation_cache.wanted(True, {"BERTPREP_COMPILATION_CACHE": "0"})
    assert not compilation_cache.wanted(True, {"BERTPREP_COMPILATION_CACHE": "off"})
    both = {"BERTPREP_COMPILATION_CACHE_DIR": "/a", "JAX_COMPILATION_CACHE_DIR": "/b"}
    assert compilation_cache.directory(both) == "/a"
    assert compilation_cache.directory({"JAX_COMPILATION_CACHE_DIR": "/b"}) == "/b"
    default = compilation_cache.directory({"XDG_CACHE_HOME": str(tmp_path)})
    assert default == os.path.join(str(tmp_path), "bertprep", "jax-compilation-cache",
                                   compilation_cache.host_fingerprint())
    assert len(compilation_cache.host_fingerprint()) == 16


def test_the_compilation_caches_switch_and_folder_are_refused_in_one_line_where_unusable(tmp_path):
    """Another value of the switch had left the cache on without a word; a folder that cannot be made had JAX warn
    twice a program and run without it."""
    for value in ("yes", "ON", " 1 ", ""):
        assert compilation_cache.wanted(True, {"BERTPREP_COMPILATION_CACHE": value})
    with pytest.raises(UsageError, match=r"^BERTPREP_COMPILATION_CACHE='disabled': expected 0, off, false, no "
                                         r"\(off\) or 1, on, true, yes \(on\)$"):
        compilation_cache.wanted(True, {"BERTPREP_COMPILATION_CACHE": "disabled"})
    taken = tmp_path / "taken"
    taken.write_text("")
    compilation_cache.check_directory({"BERTPREP_COMPILATION_CACHE_DIR": str(tmp_path / "new" / "cache")})
    with pytest.raises(UsageError, match=f"^BERTPREP_COMPILATION_CACHE_DIR {taken}: is a file; name a directory "
                                         r"\(or BERTPREP_COMPILATION_CACHE=0: no cache\)$"):
        compilation_cache.check_directory({"BERTPREP_COMPILATION_CACHE_DIR": str(taken)})
    with pytest.raises(UsageError, match=f"^JAX_COMPILATION_CACHE_DIR {taken}/x: {taken} is a file"):
        compilation_cache.check_directory({"JAX_COMPILATION_CACHE_DIR": str(taken / "x")})
    with pytest.raises(UsageError, match=f"^the compilation cache's folder {taken}/bertprep/"):
        compilation_cache.check_directory({"XDG_CACHE_HOME": str(taken)})


def test_the_quiet_level_is_marked_as_ours_so_later_processes_still_leave_lines_out():
    env = {}
    assert not library_logs.user_chose_level(env)
    library_logs.keep_quiet(env)
    assert env["TF_CPP_MIN_LOG_LEVEL"] == "2" and not library_logs.user_chose_level(env)
    env["TF_CPP_MIN_LOG_LEVEL"] = "0"  # the user's own, set after ours
    assert library_logs.user_chose_level(env)
    chosen = {"TF_CPP_MIN_LOG_LEVEL": "1"}
    library_logs.keep_quiet(chosen)
    assert chosen == {"TF_CPP_MIN_LOG_LEVEL": "1"}  # the user's choice stays
    assert library_logs.user_chose_level(dict(env, TF_CPP_VMODULE="x=1", TF_CPP_MIN_LOG_LEVEL="2"))


def test_a_jax_run_leaves_tensorflow_unimported_where_it_is_installed(tmp_path):
    """keras.utils.set_random_seed would import TensorFlow under any backend (over a second of the start); the JAX
    trainer has no use for it. The run's losses are pinned by the trajectory tests. A Python session's run keeps
    the rest of Keras whole: matplotlib and pandas (installed by [all]) imported by Keras, as without the trainer
    (`python -m trainer` leaves them out: tests/test_trainer_output.py)."""
    pytest.importorskip("tensorflow")
    code = ("import sys, trainer; trainer.train(trainer.TrainConfig(format='ofrecord', steps=1, quiet=True)); "
            "print(sorted({'tensorflow', 'jax', 'matplotlib', 'pandas'} & set(sys.modules)))")
    env = dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=REPO)  # the test worker's compilation cache
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == "['jax', 'matplotlib', 'pandas']", done.stdout


CHOOSE = """
import sys
sys.path.insert(0, {tests!r})
import trainer_checks
trainer_checks.block_imports({blocked!r})
from trainer.library_logs import default_backend
print(default_backend())
"""


@pytest.mark.parametrize("blocked, chosen", [(["tensorflow"], "jax"), (["tensorflow", "jax"], "None")])
def test_without_tensorflow_the_backend_is_jax_and_without_either_none(blocked, chosen, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    env.update(PYTHONPATH=REPO, KERAS_HOME=str(tmp_path))  # no keras.json of the user's
    code = CHOOSE.format(tests=os.path.join(REPO, "tests"), blocked=blocked)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == chosen


NEITHER = """
import sys
sys.path.insert(0, {tests!r})
import trainer_checks
trainer_checks.block_imports(["tensorflow", "jax"])
from bertprep.errors import run_reporting_errors
from trainer.library_logs import choose_backend
sys.exit(run_reporting_errors("trainer", lambda: choose_backend({{}})))
"""


def test_with_neither_backend_the_trainer_says_how_to_install_one(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    env.update(PYTHONPATH=REPO, KERAS_HOME=str(tmp_path))
    result = subprocess.run([sys.executable, "-c", NEITHER.format(tests=os.path.join(REPO, "tests"))],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip() == ("trainer: error: neither TensorFlow nor JAX is installed: pip install "
                                     "'bertprep[train]' (TensorFlow) or 'bertprep[jax]' (JAX; on NVIDIA GPUs "
                                     "jax[cuda12] or jax[cuda13])")


def test_keras_json_names_the_backend_only_when_it_is_not_kerass_default(tmp_path):
    (tmp_path / "keras.json").write_text('{"backend": "jax"}')
    assert library_logs.default_backend({"KERAS_HOME": str(tmp_path)}) == "jax"
    assert library_logs.default_backend({"KERAS_BACKEND": "tensorflow", "KERAS_HOME": str(tmp_path)}) == "tensorflow"
    assert library_logs._keras_json_backend({"KERAS_HOME": str(tmp_path / "none")}) is None


def test_a_backend_the_trainer_does_not_run_on_is_refused_before_keras_loads(tmp_path, capsys):
    """KERAS_BACKEND=foo was Keras's ValueError traceback from its import; torch was imported (seconds, CUDA's
    lines) for Devices to refuse it after. keras.json's choice is named as its own."""
    for environ, said in (({"KERAS_BACKEND": "foo"}, "KERAS_BACKEND='foo'"),
                          ({"KERAS_BACKEND": "torch"}, "KERAS_BACKEND='torch'"),
                          ({"KERAS_HOME": str(tmp_path)}, "keras.json's backend 'numpy'")):
        (tmp_path / "keras.json").write_text('{"backend": "numpy"}')
        with pytest.raises(UsageError) as refused:
            library_logs.choose_backend(environ)
        assert str(refused.value) == f"{said} is not supported (use tensorflow or jax)"
        assert environ.get("KERAS_BACKEND") in ("foo", "torch", None)  # not set to what was refused
    env = dict(os.environ, KERAS_BACKEND="foo", PYTHONPATH=REPO)
    result = subprocess.run([sys.executable, "-m", "trainer", "finetune", "--task", "mrpc", "--data",
                             str(tmp_path / "mrpc"), "--format", "tfrecord"], capture_output=True, text=True,
                            env=env, cwd=tmp_path, timeout=300)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "trainer: error: KERAS_BACKEND='foo' is not supported (use tensorflow or jax)"]


def test_the_peer_runs_on_cuda_when_torch_sees_a_gpu():
    assert bench_train_peers.peer_device(True) == "cuda"
    assert bench_train_peers.peer_device(False) == "cpu"
    assert bench_train_peers.peer_device(True, "cpu") == "cpu"


RESULTS = {"configs": [
    {"precision": "amp", "dtype_policy": "mixed_bfloat16", "batch": 256, "median": 6000.0, "mfu": 0.5,
     "runs": [{"first_step_s": 12.0}]},
    {"precision": "fp32", "dtype_policy": "fp32", "batch": 256, "median": 3000.0, "mfu": 0.4,
     "runs": [{"first_step_s": 11.0}]},
    {"precision": "amp", "dtype_policy": "mixed_bfloat16", "batch": 64, "median": 3000.0, "mfu": 0.3,
     "runs": [{"status": "oom"}]}]}


def test_the_gpu_checks_table_and_verdicts():
    peers = {("amp", 256): (4800.0, "compiled"), ("fp32", 256): (2400.0, "compiled"), ("amp", 64): (None, "eager")}
    rows = gpu_check.table_rows(RESULTS, peers)
    assert [(r["precision"], r["batch"]) for r in rows] == [("amp", 64), ("amp", 256), ("fp32", 256)]
    amp = rows[1]
    assert amp["ratio"] == 1.25 and amp["first_step_s"] == 12.0 and rows[0]["ratio"] is None
    found = gpu_check.checks(rows, {"cold_s": 19.0, "warm_s": 6.0, "library_lines": 0})
    assert found["amp_vs_compiled_peer"] == (1.25, 1.2, True)
    assert found["amp_vs_fp32"] == (2.0, 1.5, True)
    assert found["first_step_cold_s"] == (19.0, 20.0, True)
    assert found["first_step_warm_s"] == (6.0, 5.0, False)
    assert found["library_lines"] == (0, 0, True)
    eager = gpu_check.checks(gpu_check.table_rows(RESULTS, {("amp", 256): (4800.0, "eager")}),
                             {"cold_s": None, "warm_s": None, "library_lines": 3})
    assert eager["amp_vs_compiled_peer"][2] is False and eager["library_lines"][2] is False


def test_the_gpu_checks_start_up_line_names_the_backend_the_trainer_took(capsys):
    """The start-up runs leave the backend to the trainer: on a CPU rehearsal with TensorFlow installed they ran
    TensorFlow, which no compilation cache serves, and the line said only "47.6 s warm (compilation cache)"."""
    start = {"backend": "tensorflow", "cold_s": 57.5, "warm_s": 47.6, "library_lines": 0}
    gpu_check.print_table([], start, {}, "no accelerator", "tiny", 8)
    assert "python -m trainer (tensorflow), amp batch 8: first step 57.5 s cold, 47.6 s warm" in capsys.readouterr().out


def test_library_lines_are_what_the_gpu_run_printed():
    text = ("I1126 01:31:38.657003     496 service.cc:154] XLA service initialized\n"
            "I1126 01:32:36.442027     597 subprocess_compilation.cc:349] ptxas warning : Registers are spilled\n"
            "trainer: 1 device(s)\n2026-11-23 13:05:00.123456: I tensorflow/core/util/port.cc:153] oneDNN\n")
    assert len(gpu_check.library_lines(text)) == 3


def test_the_gpu_check_sums_a_runs_import_profile_by_package():
    """--phases: the packages a start's imports went to, from Python's own import profile of the run."""
    stamped = ("   0.4 import time: self [us] | cumulative | imported package\n"
               "   0.5 import time:       300 |        300 |     jax._src.lib\n"
               "   0.5 import time:      1200 |       1500 |   jax\n"
               "   0.6 import time:      2500 |       4000 | keras\n"
               "   0.6 import time:       100 |        100 | keras.src.ops\n"
               "   0.7 trainer: 1 device(s)\n")
    assert gpu_check.import_seconds(stamped) == {"keras": 0.0026, "jax": 0.0015}
    assert gpu_check.import_seconds(stamped, top=1) == {"keras": 0.0026}
    done = subprocess.run([sys.executable, "-c", "import email.mime.text, json.decoder"], capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPROFILEIMPORTTIME="1"), check=True)
    seconds = gpu_check.import_seconds(done.stderr, top=1000)
    assert {"email", "json", "encodings"} <= set(seconds) and all(value >= 0 for value in seconds.values())
    assert list(seconds.values()) == sorted(seconds.values(), reverse=True)


def test_the_gpu_check_sets_a_levers_start_up_losses_beside_the_defaults():
    """A lever is trained on the same seed, records and steps as the defaults' start-up run: its losses
    beside theirs show a lever that computes otherwise (a kernel writing the wrong rows) before its speed."""
    output = ("   13.2 trainer: 1 device(s)\n   39.6 train step 1: loss 11.1268 mlm_loss 10.4163 nsp_loss 0.7105\n"
              "   39.7 trainer: 2/3 steps, loss 11.2729, ETA 0s, 0s\n   39.7 train step 2: loss 11.2729 mlm_loss 9.7\n"
              "   39.7 train step 3: loss nan mlm_loss nan\n")
    losses = gpu_check.step_losses(output)
    assert losses[:2] == [11.1268, 11.2729] and math.isnan(losses[2]) and len(losses) == 3
    assert gpu_check.losses_line([11.1268, 11.2731], [11.1268, 11.2729]) == (
        "11.1268, 11.2731 (the defaults' 11.1268, 11.2729; largest difference 0.0002)")
    assert gpu_check.losses_line([11.1268], None) == "11.1268"
    assert gpu_check.losses_line([], [11.0]) == "none"


def test_the_gpu_check_reads_each_start_from_the_trainers_log(tmp_path):
    """gpu_check prints where a start went from the run's --log-json summary (trainer/startup.py's figures)."""
    log = tmp_path / "events.jsonl"
    startup = {"from": "process start", "imports_s": 2.1, "devices_s": 3.4, "model_built_s": 6.0, "first_step_s": 9.5,
               "traced_s": 1.04, "lowered_s": 0.3, "compiled_or_loaded_s": 0.8, "programs": 6, "programs_from_cache": 6}
    log.write_text(json.dumps({"event": "train", "step": 1, "loss": 11.0}) + "\n"
                   + json.dumps({"event": "summary", "step": 3, "startup": startup}) + "\n")
    assert gpu_check.logged_startup(str(log)) == startup
    assert gpu_check.logged_startup(str(tmp_path / "absent.jsonl")) is None  # a run that died before its summary
    assert gpu_check.startup_line(startup) == ("imports 2.1, devices 3.4, model built 6.0, first step 9.5 s; traced "
                                               "1.0, lowered 0.3, compiled or loaded 0.8 s (6 programs, 6 from the "
                                               "cache)")
    assert gpu_check.startup_line({"imports_s": 3.0, "model_built_s": 5.0, "first_step_s": 9.0}) == (
        "imports 3.0, model built 5.0, first step 9.0 s")  # TensorFlow's: no JAX programs; an older log's: no devices


def test_a_gpu_check_levers_leading_assignments_are_its_environment():
    assert gpu_check.lever_parts("--attention fused") == ({}, ["--attention", "fused"])
    assert gpu_check.lever_parts("XLA_FLAGS=--xla_gpu_autotune_level=0 --scan-layers") == (
        {"XLA_FLAGS": "--xla_gpu_autotune_level=0"}, ["--scan-layers"])
    # only leading words: a trainer flag's own "=" is the trainer's
    assert gpu_check.lever_parts("--attention=fused A=1") == ({}, ["--attention=fused", "A=1"])


def test_a_gpu_check_lever_without_starts_sets_its_benchmark_losses_beside_the_defaults(tmp_path, capsys):
    """--no-lever-starts: a lever's losses are its trainer.benchmark worker's logged steps (the log files
    trainer.benchmark writes, d1-PRECISION-bBATCH-run1.log), set beside the defaults' same run."""
    for name, losses in (("benchmark", ("11.0301", "10.9757")), ("benchmark-rows", ("11.0304", "10.9754"))):
        logs = tmp_path / name / "logs"
        logs.mkdir(parents=True)
        (logs / "d1-amp-b256-run1.log").write_text("".join(
            f"train step {3 * n}: loss {loss} mlm_loss 10.3 nsp_loss 0.7\n" for n, loss in enumerate(losses, 1)))
    assert gpu_check.worker_losses(str(tmp_path), "benchmark-rows", "amp", 256) == [11.0304, 10.9754]
    assert gpu_check.worker_losses(str(tmp_path), "benchmark-rows", "fp32", 256) == []  # no such run
    lever = {"name": "rows", "flags": "--last-layer predicted", "batch": 256, "amp": 4500.0, "vs_default": 1.05,
             "cold_s": None, "warm_s": None,
             "benchmark_losses": gpu_check.worker_losses(str(tmp_path), "benchmark-rows", "amp", 256),
             "default_benchmark_losses": gpu_check.worker_losses(str(tmp_path), "benchmark", "amp", 256)}
    gpu_check.print_levers([lever])
    assert capsys.readouterr().out.splitlines() == [
        "lever rows (--last-layer predicted): amp batch 256 4,500 seq/s, 1.05x the defaults'; first step — s cold, "
        "— s warm",
        "  its benchmark run's losses: 11.0304, 10.9754 (the defaults' 11.0301, 10.9757; largest difference 0.0003)"]


def test_a_gpu_check_keeps_what_it_measured_so_far_for_a_run_cut_short(tmp_path):
    """save_partial after each stage: OUT/gpu-check-partial.json holds the latest stage's figures, whole (written
    under a temporary name, then renamed), nothing else left beside it."""
    gpu_check.save_partial(str(tmp_path), start={"cold_s": 39.6, "warm_s": 13.9})
    gpu_check.save_partial(str(tmp_path), start={"cold_s": 39.6, "warm_s": 13.9}, levers=[{"name": "rows"}])
    assert json.loads((tmp_path / "gpu-check-partial.json").read_text()) == {
        "start": {"cold_s": 39.6, "warm_s": 13.9}, "levers": [{"name": "rows"}]}
    assert [p.name for p in tmp_path.iterdir()] == ["gpu-check-partial.json"]


def test_trainer_benchmark_passes_every_step_lever_to_its_workers(tmp_path):
    """Each flag of trainer.cli.add_step_arguments reaches the benchmark's workers' TrainConfig (a lever the
    benchmark parsed and left out would be measured as the defaults)."""
    import argparse

    from trainer.benchmark.cli import Benchmark, build_parser
    from trainer.cli import STEP_FIELDS, add_step_arguments

    parser = argparse.ArgumentParser()
    add_step_arguments(parser)
    assert {action.dest for action in parser._actions} - {"help"} == set(STEP_FIELDS)
    args = build_parser().parse_args(["--format", "ofrecord", "--gemm-autotune", "off", "--attention", "einsum",
                                      "--scan-layers", "--gemm", "xla", "--dropout-rng", "rbg", "--gelu", "erf",
                                      "--qkv-projection", "packed", "--last-layer", "predicted"])
    bench = Benchmark(args, 1, 0, str(tmp_path))
    fields = bench._train_fields("fp32", 8, 20)
    bench.close()  # its scratch folder
    assert {k: fields[k] for k in ("gemm_autotune", "attention", "scan_layers", "gemm", "dropout_rng", "gelu",
                                   "qkv_projection", "last_layer")} == {
        "gemm_autotune": "off", "attention": "einsum", "scan_layers": True, "gemm": "xla", "dropout_rng": "rbg",
        "gelu": "erf", "qkv_projection": "packed", "last_layer": "predicted"}
    TrainConfig(**{k: fields[k] for k in STEP_FIELDS if k != "qkv_projection"}, format="ofrecord")  # TrainConfig's
    with pytest.raises(UsageError, match="qkv_projection packed: only with the fused attention"):
        TrainConfig(**{k: fields[k] for k in STEP_FIELDS}, format="ofrecord")  # with --attention einsum
