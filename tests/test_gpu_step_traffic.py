"""scripts/gpu_step_traffic.py reads a compiled module: which instructions launch kernels, what each moves.
(Compiling for a GPU needs JAX's CUDA plugin, which the suite's environment has not: the compilation itself
is the script's; here its reading of XLA's text, on a GPU module's lines and on a module compiled here.)"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))

import gpu_step_traffic  # noqa: E402

# Lines of the BERT-base step XLA compiled for an H100 (shortened: metadata and backend configs cut): a
# cuBLASLt product with its workspace, the GELU's fusion reading it through a get-tuple-element, and a fused
# computation's body, which launches nothing of its own.
PRODUCT = ('  %cublas-lt-matmul.182 = (bf16[32768,3072]{1,0}, s8[4194304]{0}) custom-call(%x, %w, %b), '
           'custom_call_target="__cublas$lt$matmul", metadata={op_name="jit(_train_step)/jvp(layer_5)/intermediate/'
           'dot_general" scheduling_name="cublas-lt-matmul.182"}, backend_config={"operation_queue_id":"0"}')
GELU = ('  ROOT %loop_multiply_fusion.5 = bf16[256,128,3072]{2,1,0} fusion(%get-tuple-element.34.0), kind=kLoop, '
        'calls=%fused_multiply.5, metadata={op_name="jit(_train_step)/jvp(layer_5)/intermediate/mul"}')
GPU_MODULE = f"""HloModule jit__train_step, is_scheduled=true

%fused_multiply.5 (param_0.1: bf16[32768,3072]) -> bf16[256,128,3072] {{
  %param_0.1 = bf16[32768,3072]{{1,0}} parameter(0)
  %bitcast.1 = bf16[256,128,3072]{{2,1,0}} bitcast(%param_0.1)
  ROOT %multiply.1 = bf16[256,128,3072]{{2,1,0}} multiply(%bitcast.1, %bitcast.1)
}}

ENTRY %main.578 (x: bf16[32768,768], w: bf16[768,3072], b: bf16[3072]) -> bf16[256,128,3072] {{
  %x = bf16[32768,768]{{1,0}} parameter(0)
  %w = bf16[768,3072]{{1,0}} parameter(1)
  %b = bf16[3072]{{0}} parameter(2)
{PRODUCT}
  %get-tuple-element.34.0 = bf16[32768,3072]{{1,0}} get-tuple-element(%cublas-lt-matmul.182), index=0
{GELU}
}}
"""


def test_kernels_of_a_gpu_module_and_the_bytes_they_move():
    product, gelu = gpu_step_traffic.step_kernels(GPU_MODULE)
    activations = 32768 * 3072 * 2
    assert (product["kind"], product["bytes_in"], product["bytes_out"]) == (
        "gemm", 32768 * 768 * 2 + 768 * 3072 * 2 + 3072 * 2, activations)  # the workspace is not traffic
    assert (gelu["kind"], gelu["bytes_in"], gelu["bytes_out"]) == ("fusion", activations, activations)
    moved = gpu_step_traffic.summary([product, gelu])
    assert moved["kernels"] == 2 and round(moved["gemm_gb"] * 1e9) == product["bytes_in"] + activations
    assert moved["categories"] == {"feed-forward (fusion)": {"kernels": 1, "gb": 2 * activations / 1e9},
                                   "feed-forward (gemm)": {"kernels": 1, "gb": moved["gemm_gb"]}}
    assert round(moved["other_gb"] * 1e9) == 2 * activations
    assert moved["operations"] == {
        "jvp(layer_N)/intermediate/mul (fusion)": {"kernels": 1, "gb": 2 * activations / 1e9},
        "jvp(layer_N)/intermediate/dot_general (gemm)": {"kernels": 1, "gb": moved["gemm_gb"]}}


def test_a_buffer_a_kernel_takes_twice_is_read_once():
    """The packed attention's kernels take the one [batch, seq, 3 x heads, head_dim] array as query, key and
    value, and read a third of it for each: the buffer's bytes are counted once, not three times."""
    module = GPU_MODULE.replace(f"{GELU}\n", "  %qkv = bf16[256,128,36,64]{3,2,1,0} parameter(3)\n"
                                "  ROOT %attention = bf16[256,128,12,64]{3,2,1,0} custom-call(%qkv, %qkv, %qkv), "
                                'custom_call_target="__gpu$xla.gpu.triton", metadata={op_name="attention/'
                                'bert_attention_forward/pallas_call"}\n')
    attention = gpu_step_traffic.step_kernels(module)[-1]
    packed = 256 * 128 * 36 * 64 * 2
    assert (attention["kind"], attention["bytes_in"], attention["bytes_out"]) == ("pallas", packed, packed // 3)


def test_a_module_compiled_here_is_read_the_same_way():
    """A function XLA compiled on this CPU: its kernels read the arguments and write the result."""
    import jax
    import jax.numpy as jnp

    x, w = np.ones((64, 32), np.float32), np.ones((32, 16), np.float32)
    text = jax.jit(lambda x, w: jnp.tanh(x @ w) * 2.0).lower(x, w).compile().as_text()
    kernels = gpu_step_traffic.step_kernels(text)
    assert kernels and sum(k["bytes_out"] for k in kernels) >= 64 * 16 * 4
    assert sum(k["bytes_in"] for k in kernels) >= x.nbytes + w.nbytes


def test_a_profiled_kernel_without_an_op_name_is_placed_by_its_own_name():
    """scripts/profile_gpu_step.py: the fused attention's Pallas kernels have no op name in the compiled text;
    their own names say they are the attention's. A library product's name (cuBLAS's nvjet) says nothing."""
    from profile_gpu_step import kernel_category

    assert kernel_category("", "bert_attention_backward") == "attention"
    assert kernel_category("jit(_train_step)/jvp(layer_5)/intermediate/mul", "loop_multiply_fusion") == "feed-forward"
    assert kernel_category("", "nvjet_sm90_tst_192x192_64x3_2x1_v_bz_coopB_splitK_NTN") == "other"


def test_array_bytes_of_hlo_types():
    assert gpu_step_traffic.array_bytes("(bf16[2,3]{1,0}, f32[], pred[8]{0})") == 12 + 4 + 8
    assert gpu_step_traffic.array_bytes("u32[6291456]{0}") == 4 * 6291456
