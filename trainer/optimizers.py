"""BERT's optimizers as `keras.optimizers.Optimizer` subclasses, and their schedules.

- `AdamW`: Adam (β 0.9/0.999, ε 1e-6, bias-corrected) with decoupled weight
  decay: `w -= lr · (m̂/(√v̂+ε) + wd·w)`; LayerNorm parameters and biases get
  no decay. Linear warmup, then linear decay to 0 (the BERT paper).
- `NVLamb`: NVIDIA's LAMB (docs/reference-facts.md, "NVLAMB and Keras's Lamb"). Gradients are first divided by
  max(global norm, 1); Adam moments with bias correction; the decay term is
  inside the update `u = m̂/(√v̂+ε) + wd·w` (same exclusions); every variable
  steps `w -= lr · ‖w‖/‖u‖ · u` (ratio 1 where either norm is 0). Linear
  warmup, then polynomial decay with power 0.5 to 0.
- `GoogleAdamW`: google-research/bert's `AdamWeightDecayOptimizer` as its
  `optimization.create_optimizer` drives it (the optimizer of Google's and
  NVIDIA's TF fine-tuning): gradients clipped to global norm 1.0 as
  `tf.clip_by_global_norm` does, Adam moments WITHOUT bias correction,
  `w -= lr · (m/(√v+ε) + wd·w)` (same exclusions), and `GoogleSchedule`.

Under JAX the schedules' numbers (peak, warmup, total steps) are the compiled step's inputs, not its
constants (`_ScheduleOfNumbers`): one program serves every --lr, --warmup and --steps, with the same
learning rates bit for bit (docs/trainer.md, "Tests").

Keras's own `Lamb` decays outside the trust ratio and does not pre-normalize,
so it is not NVLAMB. `apply` must see the gradients of the whole global batch
(already summed across replicas): the global norm is taken over them. On
TensorFlow the steps sum them once in each replica and call `update_in_place`
there, inside an XLA-compiled function (trainer/steps.py): the same math as
`apply` without Keras's merge_call (which TensorFlow refuses inside a nested
function) and without counting the step, which the caller does.

`skips_nonfinite` (set under dynamic loss scaling): an element whose gradient
is not finite leaves its weight and moments unchanged. The steps make every
gradient NaN when any is not finite, so a skipped step changes nothing, with
selects rather than a branch (a branch on a device value syncs with the host).

Each variable's step is one pure function of its gradient, value, moments,
step number and learning rate (`_arithmetic`); the optimizer assigns what it
returns. Under JAX it is jitted once per optimizer and decay flag, so tracing a
training step traces it once per distinct shape (a dozen for BERT) instead of
once for each of BERT-base's 206 variables, and XLA inlines the calls (the
same arithmetic, in the same order). On a 2-core CPU the warm start of
BERT-base traced its step in 1.01 s instead of 1.62 under cProfile
(scripts/bench_startup.py --phases, docs/benchmarks.md).
"""

import contextlib
import functools

import keras
import numpy as np
from keras import ops

from trainer.config import DEFAULT_CLIP_NORM
from trainer.keras_internals import variable_index
from trainer.model import is_excluded_from_weight_decay


class _ScheduleOfNumbers(keras.optimizers.schedules.LearningRateSchedule):
    """A schedule whose numbers (the peak, the warmup, the total steps) are constants of the step that
    calls it (`with_constants`, the textbook formula), or, inside `numbers_as_inputs(values)`, that step's
    inputs: the JAX step takes `numbers()` as arguments (trainer/steps.py), so one compiled program serves
    every --lr, --warmup and --steps, and a run that differs from a cached one only in them compiles nothing.
    `with_inputs` writes the arithmetic as XLA's algebraic simplifier rewrites the constants' (a division
    by a number is a product with its float32 reciprocal, peak·n/warmup is n·(peak·(1/warmup)), the
    constants folded first), so the inputs give the learning rates that the constants gave, bit for bit,
    under the trainer's compiles (tests/test_optimizers.py). TensorFlow's steps keep the constants."""

    _inputs = None

    def numbers(self):
        """{name: float32} that `with_inputs` reads."""
        raise NotImplementedError

    def with_constants(self, step):
        raise NotImplementedError

    def with_inputs(self, step, numbers):
        raise NotImplementedError

    @contextlib.contextmanager
    def numbers_as_inputs(self, values):
        """Inside, the schedule reads `values` (numbers()'s keys; traced arrays) instead of its constants."""
        self._inputs = values
        try:
            yield
        finally:
            self._inputs = None

    def __call__(self, step):
        if self._inputs is None:
            return self.with_constants(step)
        return self.with_inputs(step, self._inputs)


def _reciprocal(value):
    """1/value rounded to float32, as XLA folds a division by the constant `value`."""
    return np.float32(1) / np.float32(value)


class WarmupPolynomialDecay(_ScheduleOfNumbers):
    """lr for optimizer step `step` (0-based; the update it applies is number step+1):
    peak·(step+1)/warmup during warmup, then peak·((total-step-1)/(total-warmup))**power."""

    def __init__(self, peak, warmup_steps, total_steps, power):
        self.peak = float(peak)
        self.warmup_steps = int(warmup_steps)
        self.total_steps = int(total_steps)
        self.power = float(power)

    def with_constants(self, step):
        n = ops.cast(step, "float32") + 1.0
        warmup = float(max(self.warmup_steps, 1))
        decay_span = float(max(self.total_steps - self.warmup_steps, 1))
        remaining = ops.clip((self.total_steps - n) / decay_span, 0.0, 1.0)
        decayed = self.peak * ops.power(remaining, self.power)
        return ops.where(n <= self.warmup_steps, self.peak * n / warmup, decayed)

    def numbers(self):
        return {"peak": np.float32(self.peak), "warmup_steps": np.float32(self.warmup_steps),
                "total_steps": np.float32(self.total_steps),
                "peak_per_warmup_step": np.float32(self.peak) * _reciprocal(max(self.warmup_steps, 1)),
                "inverse_decay_span": _reciprocal(max(self.total_steps - self.warmup_steps, 1))}

    def with_inputs(self, step, k):
        n = ops.cast(step, "float32") + 1.0
        remaining = ops.clip((k["total_steps"] - n) * k["inverse_decay_span"], 0.0, 1.0)
        decayed = k["peak"] * ops.power(remaining, self.power)
        return ops.where(n <= k["warmup_steps"], n * k["peak_per_warmup_step"], decayed)

    def get_config(self):
        return {"peak": self.peak, "warmup_steps": self.warmup_steps,
                "total_steps": self.total_steps, "power": self.power}


class GoogleSchedule(_ScheduleOfNumbers):
    """optimization.create_optimizer's lr for optimizer step `step` (0-based, its global_step before
    the update): peak·step/warmup while step < warmup (the first update has lr 0), then
    polynomial_decay power 1 over all `total_steps`: peak·(1 − min(step, total)/total)."""

    def __init__(self, peak, warmup_steps, total_steps):
        self.peak = float(peak)
        self.warmup_steps = int(warmup_steps)
        self.total_steps = int(total_steps)

    def with_constants(self, step):
        s = ops.cast(step, "float32")
        decayed = self.peak * (1.0 - ops.minimum(s, float(self.total_steps)) / float(self.total_steps))
        if not self.warmup_steps:  # create_optimizer adds no warmup branch for 0
            return decayed
        return ops.where(s < self.warmup_steps, self.peak * (s / float(self.warmup_steps)), decayed)

    def numbers(self):
        return {"peak": np.float32(self.peak), "warmup_steps": np.float32(self.warmup_steps),
                "total_steps": np.float32(self.total_steps), "inverse_total": _reciprocal(self.total_steps),
                "peak_per_warmup_step": np.float32(self.peak) * _reciprocal(max(self.warmup_steps, 1))}

    def with_inputs(self, step, k):
        s = ops.cast(step, "float32")
        decayed = k["peak"] * (1.0 - ops.minimum(s, k["total_steps"]) * k["inverse_total"])
        # No Python branch on warmup 0 (with_constants has one): the program must not depend on a number it
        # takes as an input (the traced-step cache keys programs by everything else). s < 0 never holds, so
        # warmup 0 selects `decayed`, as with_constants returns it.
        return ops.where(s < k["warmup_steps"], s * k["peak_per_warmup_step"], decayed)

    def get_config(self):
        return {"peak": self.peak, "warmup_steps": self.warmup_steps, "total_steps": self.total_steps}


class _BertOptimizer(keras.optimizers.Optimizer):
    """Adam moments (bias-corrected unless `bias_correction` is False) and per-variable decay flags."""

    bias_correction = True

    def __init__(self, learning_rate, decay_rate=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-6, **kwargs):
        super().__init__(learning_rate=learning_rate, **kwargs)
        object.__setattr__(self, "schedule", learning_rate)  # not Keras-tracked
        self.skips_nonfinite = False
        self.decay_rate = decay_rate
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        object.__setattr__(self, "_jitted", {})  # (decays, skips) -> jitted _arithmetic (JAX); not Keras-tracked

    def schedule_numbers(self):
        """{name: float32} of its learning-rate schedule (_ScheduleOfNumbers); {} for a fixed rate."""
        return self.schedule.numbers() if isinstance(self.schedule, _ScheduleOfNumbers) else {}

    def schedule_numbers_as_inputs(self, values):
        """Inside, its schedule reads `values` (schedule_numbers()'s, traced) instead of its constants."""
        if isinstance(self.schedule, _ScheduleOfNumbers):
            return self.schedule.numbers_as_inputs(values)
        return contextlib.nullcontext()

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self._m = self.add_optimizer_variables(variables, "m")
        self._v = self.add_optimizer_variables(variables, "v")
        self._decays = [not is_excluded_from_weight_decay(v) for v in variables]

    def moments(self, variable):
        """(first, second) Adam moment of `variable` (pipeline_parallel.py stacks them per layer)."""
        index = variable_index(self, variable)
        return self._m[index], self._v[index]

    def _prepared(self, grads):
        """The gradients as the per-variable updates take them (float32)."""
        return [ops.cast(g, "float32") for g in grads]

    def apply(self, grads, trainable_variables=None):
        super().apply(self._prepared(grads), trainable_variables)

    def update_in_place(self, grads, variables):
        """One step on `variables` (the ones it was built with, in that order), assigning each
        variable and its moments directly; the step counter is left as it was. Returns the
        learning rate used. TensorFlow: called in a replica's XLA function, every replica updates
        its own copies with the gradients summed across replicas (trainer/steps.py)."""
        learning_rate = ops.convert_to_tensor(self.learning_rate)
        for gradient, variable in zip(self._prepared(grads), variables):
            self.update_step(gradient, variable, learning_rate)
        return learning_rate

    def _kept(self, gradient, new, old):
        """`new`, or `old` where the gradient is not finite (under `skips_nonfinite`)."""
        if not self.skips_nonfinite:
            return new
        return ops.where(ops.isfinite(gradient), new, ops.convert_to_tensor(old))

    def update_step(self, gradient, variable, learning_rate):
        """One variable's step: its moments and value assigned what `_arithmetic` returns."""
        index = variable_index(self, variable)
        m, v = self._m[index], self._v[index]
        t = ops.cast(self.iterations + 1, "float32")
        values = [ops.convert_to_tensor(x) for x in (gradient, variable, m, v)]
        new_m, new_v, delta = self._arithmetic_of(self._decays[index])(*values, t, learning_rate)
        self.assign(m, new_m)
        self.assign(v, new_v)
        self.assign_sub(variable, delta)

    def _arithmetic_of(self, decays):
        """`_arithmetic` for a variable that decays or not: jitted under JAX (the module docstring says why)."""
        if keras.backend.backend() != "jax":
            return functools.partial(self._arithmetic, decays=decays)
        key = (decays, self.skips_nonfinite)  # what the trace reads of the optimizer besides its constants
        if key not in self._jitted:
            import jax

            self._jitted[key] = jax.jit(functools.partial(self._arithmetic, decays=decays))
        return self._jitted[key]

    def _arithmetic(self, gradient, w, m, v, t, learning_rate, decays):
        """(new m, new v, the amount subtracted from w) of one variable's step: `_step` of its direction."""
        g = ops.cast(gradient, "float32")
        new_m, new_v, update = self._moments_and_direction(g, w, m, v, t, decays)
        delta = self._step(w, update, ops.cast(learning_rate, "float32"))
        return new_m, new_v, self._kept(g, delta, ops.zeros_like(delta))

    def _moments_and_direction(self, g, w, m, v, t, decays):
        """The new moments and the direction m̂/(√v̂+ε) + wd·w (m, v for m̂, v̂ without bias correction),
        in float32."""
        m = self._kept(g, self.beta_1 * m + (1.0 - self.beta_1) * g, m)
        v = self._kept(g, self.beta_2 * v + (1.0 - self.beta_2) * ops.square(g), v)
        corrected_m, corrected_v = m, v
        if self.bias_correction:
            corrected_m = m / (1.0 - ops.power(self.beta_1, t))
            corrected_v = v / (1.0 - ops.power(self.beta_2, t))
        update = corrected_m / (ops.sqrt(corrected_v) + self.epsilon)
        if decays and self.decay_rate:
            update = update + self.decay_rate * ops.cast(w, "float32")
        return m, v, update

    def get_config(self):
        config = super().get_config()
        config.update(decay_rate=self.decay_rate, beta_1=self.beta_1, beta_2=self.beta_2, epsilon=self.epsilon)
        return config


class AdamW(_BertOptimizer):
    def __init__(self, learning_rate, name="adamw", **kwargs):
        super().__init__(learning_rate, name=name, **kwargs)

    def _step(self, w, update, learning_rate):
        return learning_rate * update


class NVLamb(_BertOptimizer):
    def __init__(self, learning_rate, max_grad_norm=DEFAULT_CLIP_NORM, name="nvlamb", **kwargs):
        super().__init__(learning_rate, name=name, **kwargs)
        self.max_grad_norm = max_grad_norm

    def _prepared(self, grads):
        """Divided by max(global norm / max_grad_norm, 1)."""
        divisor = ops.maximum(global_norm(grads) / self.max_grad_norm, 1.0)
        return [g / divisor for g in super()._prepared(grads)]

    def _step(self, w, update, learning_rate):
        w_norm = ops.sqrt(ops.sum(ops.square(ops.cast(w, "float32"))))
        u_norm = ops.sqrt(ops.sum(ops.square(update)))
        ratio = ops.where((w_norm > 0) & (u_norm > 0), w_norm / ops.maximum(u_norm, 1e-30), 1.0)
        return learning_rate * ratio * update

    def get_config(self):
        config = super().get_config()
        config.update(max_grad_norm=self.max_grad_norm)
        return config


class GoogleAdamW(AdamW):
    """AdamWeightDecayOptimizer after create_optimizer's clip_by_global_norm(clip_norm): AdamW's step
    on clipped gradients, without bias correction."""

    bias_correction = False

    def __init__(self, learning_rate, clip_norm=DEFAULT_CLIP_NORM, name="google_adamw", **kwargs):
        super().__init__(learning_rate, name=name, **kwargs)
        self.clip_norm = clip_norm

    def _prepared(self, grads):
        return clip_by_global_norm(super()._prepared(grads), self.clip_norm)

    def get_config(self):
        config = super().get_config()
        config.update(clip_norm=self.clip_norm)
        return config


def clip_by_global_norm(grads, clip_norm):
    """`tf.clip_by_global_norm`'s arithmetic: each times clip·min(1/norm, 1/clip), all NaN where the
    norm is not finite."""
    norm = global_norm(grads)
    scale = clip_norm * ops.minimum(1.0 / norm, 1.0 / clip_norm) + (norm - norm)
    return [g * scale for g in grads]


def global_norm(tensors):
    return ops.sqrt(sum(ops.sum(ops.square(ops.cast(t, "float32"))) for t in tensors))


def build_slots(optimizer, variables):
    """optimizer.build(variables): under JAX its slots are drawn in one program. Call it after the
    model's variables are initialized: a slot takes the layout of its variable."""
    from trainer.model import variables_initialized_together

    with variables_initialized_together():
        optimizer.build(variables)


def make_optimizer(name, peak_lr, warmup_steps, total_steps, clip_norm=None):
    """'adam': AdamW with linear decay; 'lamb': NVLamb with power-0.5 decay; 'google-adam': GoogleAdamW
    with GoogleSchedule. `clip_norm` (lamb, google-adam): None for DEFAULT_CLIP_NORM."""
    clip_norm = DEFAULT_CLIP_NORM if clip_norm is None else clip_norm
    if name == "adam":
        return AdamW(WarmupPolynomialDecay(peak_lr, warmup_steps, total_steps, power=1.0))
    if name == "lamb":
        return NVLamb(WarmupPolynomialDecay(peak_lr, warmup_steps, total_steps, power=0.5), max_grad_norm=clip_norm)
    if name == "google-adam":
        return GoogleAdamW(GoogleSchedule(peak_lr, warmup_steps, total_steps), clip_norm=clip_norm)
    raise ValueError(f"unknown optimizer {name!r}")
