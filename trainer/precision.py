"""The precision policy: what `--precision amp` means on the device at hand, and the Keras dtype policy.

`amp` is mixed precision as NVIDIA's and Hugging Face's current recipes take it: bfloat16 compute with
float32 variables where the device multiplies bfloat16 natively (NVIDIA compute capability 8.0 and
later, TPUs, CPUs), and float16 with dynamic loss scaling only where it does not (V100, T4: compute
capability 7.x). bfloat16 has float32's exponent range, so it needs no loss scaling, and no step is
skipped; float16 does. Measured on an H200 (docs/trainer.md): BERT-base at batch 256 ran 845 seq/s in
mixed_float16 against 1,432 in mixed_bfloat16 before the step was reshaped for the GPU. The explicit
policies (`mixed_float16`, `mixed_bfloat16`, `fp32`) stay as they are.

Nothing here imports a framework at module level: the CLI checks --precision before Keras loads.
"""

PRECISIONS = ("fp32", "amp", "mixed_float16", "mixed_bfloat16")
# What JAX's and TensorFlow's devices call a GPU (NVIDIA's "gpu"/"cuda", AMD's "rocm").
GPU_PLATFORMS = ("gpu", "cuda", "rocm")
# The first compute capability whose tensor cores multiply bfloat16 (Ampere).
BF16_COMPUTE_CAPABILITY = (8, 0)


def keras_policy(precision):
    """The Keras dtype policy name of a concrete precision (not `amp`)."""
    return "float32" if precision == "fp32" else precision


def loss_scaling(precision):
    """Dynamic loss scaling: float16 only (bfloat16 and float32 have float32's range)."""
    return precision == "mixed_float16"


def amp_policy_for(platform, compute_capability):
    """(policy, why) for `amp` on a device of `platform` ("gpu", "cuda", "rocm", "tpu", "cpu") with NVIDIA
    `compute_capability` (major, minor), or None where the platform has none."""
    if platform in GPU_PLATFORMS and compute_capability is not None:
        text = ".".join(map(str, compute_capability))
        if has_bfloat16_tensor_cores(compute_capability):
            return "mixed_bfloat16", f"compute capability {text} multiplies bfloat16"
        return "mixed_float16", f"compute capability {text} has no bfloat16 tensor cores: float16 with loss scaling"
    return "mixed_bfloat16", f"{platform} multiplies bfloat16"


def has_bfloat16_tensor_cores(compute_capability):
    """Whether an NVIDIA GPU of `compute_capability` (major, minor; None off NVIDIA) multiplies bfloat16 on its
    tensor cores: Ampere (8.0) and later."""
    return compute_capability is not None and tuple(compute_capability) >= BF16_COMPUTE_CAPABILITY


def _capability(text):
    """(major, minor) of "9.0" (JAX's device attribute) or of a tuple (TensorFlow's device details)."""
    if text is None:
        return None
    if isinstance(text, (tuple, list)):
        return tuple(int(v) for v in text)
    major, _, minor = str(text).partition(".")
    return int(major), int(minor or 0)


def device_platform(backend):
    """(platform, compute capability or None) of the first device Keras's backend trains on."""
    if backend == "jax":
        import jax

        device = jax.devices()[0]
        return device.platform, _capability(getattr(device, "compute_capability", None))
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return "cpu", None
    details = tf.config.experimental.get_device_details(gpus[0])
    return "gpu", _capability(details.get("compute_capability"))


def resolve(precision, backend):
    """(concrete precision, note for the run's first line or None): `amp` made mixed_bfloat16 or
    mixed_float16 for this backend's device; any other precision as it is."""
    if precision != "amp":
        return precision, None
    policy, why = amp_policy_for(*device_platform(backend))
    return policy, f"amp: {policy} ({why})"
