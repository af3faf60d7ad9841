"""One training step per backend: gradients of a global batch, all-reduce, loss scaling, update.

A step takes one element of shape [accumulation, global batch, ...], runs
the micro-batches in a loop that sums gradients, divides the loss by the
totals of the whole element (losses.py), sums gradients across replicas,
and applies the optimizer only when every gradient is finite. Loss scaling
(mixed_float16): the loss is multiplied by the scale, gradients divided by
it; a non-finite step leaves weights and optimizer (its step counter too)
unchanged and halves the scale; after `GROWTH_INTERVAL` finite steps in a row
the scale doubles. Without loss scaling the scale stays 1 and a non-finite
step is skipped the same way.

TensorFlow: `tf.distribute` (Mirrored or MultiWorkerMirrored) strategy; the
optimizer runs in cross-replica context on the summed gradients (NVLAMB's
global norm needs them). JAX: `keras.distribution.ModelParallel` on a (batch,
model) mesh (trainer/parallel.py; a model axis of 1 is data parallelism); the
step is one jitted SPMD function over the global batch, and each variable
keeps the layout it was created with.
"""

import numpy as np
from keras import ops

from trainer.losses import PRETRAINING_OBJECTIVE

INITIAL_SCALE = 2.0**15
GROWTH_INTERVAL = 2000


def next_loss_scale(scale, good_steps, finite, dynamic):
    """(scale, good_steps) after a step; constant 1 when not `dynamic`."""
    if not dynamic:
        return scale, good_steps
    grown = good_steps + 1 >= GROWTH_INTERVAL
    new_scale = ops.where(finite, ops.where(grown, scale * 2.0, scale), scale * 0.5)
    new_good = ops.where(finite, ops.where(grown, 0, good_steps + 1), 0)
    return new_scale, ops.cast(new_good, "int32")


def _add(a, b):
    return [x + y for x, y in zip(a, b)]


def _accumulate(micro_step, batch, accumulation, zero_grads, sum_keys):
    """Sum micro_step(micro_batch) -> (grads, sums) over the leading axis of `batch`."""
    if accumulation == 1:
        return micro_step({k: v[0] for k, v in batch.items()})
    zero_sums = {k: ops.zeros((), "float32") for k in sum_keys}

    def body(i, carry):
        grads, sums = carry
        g, s = micro_step({k: v[i] for k, v in batch.items()})
        return _add(grads, g), {k: sums[k] + s[k] for k in sum_keys}

    return ops.fori_loop(0, accumulation, body, (zero_grads, zero_sums))


class _Steps:
    def fetch(self, handle):
        """A train step's device results as host floats (this waits for the step)."""
        sums, finite, learning_rate, scale = handle
        result = {k: float(v) for k, v in sums.items()}
        result.update(finite=bool(finite), learning_rate=float(learning_rate), loss_scale=float(scale))
        return result


class TensorFlowSteps(_Steps):
    def __init__(self, strategy, model, optimizer, accumulation, dynamic_scale, objective=PRETRAINING_OBJECTIVE):
        import tensorflow as tf

        self.tf = tf
        self.strategy = strategy
        self.model = model
        self.objective = objective
        self.optimizer = optimizer
        self.accumulation = accumulation
        self.dynamic_scale = dynamic_scale
        self.local_replicas = len(strategy.extended.worker_devices)
        with strategy.scope():
            self.scale = tf.Variable(INITIAL_SCALE if dynamic_scale else 1.0, trainable=False, name="loss_scale",
                                     aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
            self.good_steps = tf.Variable(0, trainable=False, name="loss_scale_good_steps",
                                          aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        self._train = tf.function(self._train_step)
        self._eval = tf.function(self._eval_step)
        self._predict = tf.function(self._predict_step)

    def put(self, batch):
        """Hand each local replica its slice of the worker's element (axis 1)."""
        tf = self.tf
        per_replica = batch["input_ids"].shape[1] // self.local_replicas

        def slice_for(ctx):
            j = ctx.replica_id_in_sync_group % self.local_replicas
            return {k: tf.constant(v[:, j * per_replica:(j + 1) * per_replica]) for k, v in batch.items()}

        return self.strategy.experimental_distribute_values_from_function(slice_for)

    def _replica_grads(self, batch):
        tf = self.tf
        ctx = tf.distribute.get_replica_context()
        sum_op = tf.distribute.ReduceOp.SUM
        objective = self.objective
        totals = {k: ctx.all_reduce(sum_op, v) for k, v in objective.totals(batch).items()}
        variables = self.model.trainable_variables
        scale = tf.cast(self.scale, tf.float32)

        def micro_step(micro):
            with tf.GradientTape() as tape:
                sums = objective.sums(self.model(objective.inputs(micro), training=True), micro)
                loss = objective.share(sums, totals) * scale
            grads = tape.gradient(loss, variables)
            return [tf.convert_to_tensor(g) for g in grads], sums

        zeros = [tf.zeros(v.shape, tf.float32) for v in variables]
        return _accumulate(micro_step, batch, self.accumulation, zeros, objective.sum_keys)

    def _train_step(self, batch):
        tf = self.tf
        strategy = self.strategy
        sum_op = tf.distribute.ReduceOp.SUM
        grads, sums = strategy.run(self._replica_grads, args=(batch,))
        variables = self.model.trainable_variables
        grads = strategy.extended.batch_reduce_to(sum_op, [(g, v.value) for g, v in zip(grads, variables)])
        sums = {k: strategy.reduce(sum_op, v, axis=None) for k, v in sums.items()}
        scale = tf.identity(self.scale)
        grads = [g / scale for g in grads]
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads])
        learning_rate = tf.identity(self.optimizer.learning_rate)

        def apply():
            self.optimizer.apply(grads, variables)
            return tf.constant(True)

        tf.cond(finite, apply, lambda: tf.constant(False))
        new_scale, new_good = next_loss_scale(scale, tf.identity(self.good_steps), finite, self.dynamic_scale)
        self.scale.assign(new_scale)
        self.good_steps.assign(new_good)
        return sums, finite, learning_rate, scale

    def train(self, device_batch):
        return self._train(device_batch)

    def _eval_step(self, batch):
        sum_op = self.tf.distribute.ReduceOp.SUM

        def replica_sums(b):
            micro = {k: v[0] for k, v in b.items()}
            return self.objective.sums(self.model(self.objective.inputs(micro), training=False), micro)

        sums = self.strategy.run(replica_sums, args=(batch,))
        return {k: self.strategy.reduce(sum_op, v, axis=None) for k, v in sums.items()}

    def evaluate(self, device_batch):
        return {k: float(v) for k, v in self._eval(device_batch).items()}

    def _predict_step(self, batch):
        return self.strategy.run(lambda b: self.model(self.objective.inputs({k: v[0] for k, v in b.items()}),
                                                      training=False), args=(batch,))

    def predict(self, device_batch):
        """The model's outputs for a put() element of one micro-batch, as NumPy, rows in batch order."""
        return self.tf.nest.map_structure(
            lambda v: np.concatenate([np.asarray(p) for p in self.strategy.experimental_local_results(v)]),
            self._predict(device_batch))

    def iterations(self):
        return int(self.optimizer.iterations.numpy())

    def state_variables(self):
        """(name, variable) of everything a checkpoint holds, in a fixed order."""
        return _named_state(self.model, self.optimizer) + [("loss_scale/scale", self.scale),
                                                           ("loss_scale/good_steps", self.good_steps)]

    def get_state(self):
        return {name: np.asarray(v.numpy() if hasattr(v, "numpy") else v) for name, v in self.state_variables()}

    def set_state(self, arrays):
        for name, variable in self.state_variables():
            variable.assign(arrays[name])

    def param_bytes_per_device(self):
        """Every replica holds all of the state."""
        return sum(array.nbytes for array in self.get_state().values())


class JaxSteps(_Steps):
    def __init__(self, distribution, model, optimizer, accumulation, dynamic_scale, objective=PRETRAINING_OBJECTIVE):
        import jax

        self.jax = jax
        self.model = model
        self.objective = objective
        self.optimizer = optimizer
        self.accumulation = accumulation
        self.dynamic_scale = dynamic_scale
        mesh = distribution.device_mesh.backend_mesh
        axis = distribution.batch_dim_name
        P = jax.sharding.PartitionSpec
        self.batch_sharding = jax.sharding.NamedSharding(mesh, P(None, axis))
        self.replicated = jax.sharding.NamedSharding(mesh, P())
        self.state = (
            [v.value for v in model.trainable_variables],
            [v.value for v in model.non_trainable_variables],
            [v.value for v in optimizer.variables],
            jax.device_put(np.float32(INITIAL_SCALE if dynamic_scale else 1.0), self.replicated),
            jax.device_put(np.int32(0), self.replicated),
        )
        # The new state keeps the layouts of the old (sharded variables stay sharded, as Keras's own
        # JAX trainer pins them); XLA chooses where the outputs go.
        state_shardings = jax.tree.map(lambda value: value.sharding, self.state)
        self._train = jax.jit(self._train_step, donate_argnums=0, out_shardings=(state_shardings, None))
        self._eval = jax.jit(self._eval_step)
        self._predict = jax.jit(self._predict_step)

    def put(self, batch):
        # This process's slice of the global batch; with one process it is the whole batch.
        return {k: self.jax.make_array_from_process_local_data(self.batch_sharding, v) for k, v in batch.items()}

    def _train_step(self, state, batch):
        jax = self.jax
        trainable, non_trainable, optimizer_vars, scale, good_steps = state
        objective = self.objective
        totals = objective.totals(batch)

        def loss_fn(trainable, non_trainable, micro):
            outputs, non_trainable = self.model.stateless_call(
                trainable, non_trainable, objective.inputs(micro), training=True)
            sums = objective.sums(outputs, micro)
            return objective.share(sums, totals) * scale, (sums, non_trainable)

        grad_fn = jax.grad(loss_fn, has_aux=True)
        carried = {"non_trainable": non_trainable}

        def micro_step(micro):
            grads, (sums, carried["non_trainable"]) = grad_fn(trainable, carried["non_trainable"], micro)
            return grads, sums

        if self.accumulation == 1:
            grads, sums = micro_step({k: v[0] for k, v in batch.items()})
        else:
            # fori_loop needs the non-trainable state (dropout seeds) in its carry.
            def body(i, carry):
                acc, acc_sums, ntv = carry
                (g, (s, ntv)) = grad_fn(trainable, ntv, {k: v[i] for k, v in batch.items()})
                return _add(acc, g), {k: acc_sums[k] + s[k] for k in objective.sum_keys}, ntv

            zeros = [ops.zeros_like(v) for v in trainable]
            zero_sums = {k: ops.zeros((), "float32") for k in objective.sum_keys}
            grads, sums, carried["non_trainable"] = jax.lax.fori_loop(
                0, self.accumulation, body, (zeros, zero_sums, non_trainable))
        grads = [g / scale for g in grads]
        finite = ops.all(ops.stack([ops.all(ops.isfinite(g)) for g in grads]))
        learning_rate = self._learning_rate(optimizer_vars)
        trainable, optimizer_vars = jax.lax.cond(
            finite,
            lambda: self.optimizer.stateless_apply(optimizer_vars, grads, trainable),
            lambda: (list(trainable), list(optimizer_vars)),
        )
        scale_after, good_after = next_loss_scale(scale, good_steps, finite, self.dynamic_scale)
        new_state = (trainable, carried["non_trainable"], optimizer_vars, scale_after, good_after)
        return new_state, (sums, finite, learning_rate, scale)

    def _learning_rate(self, optimizer_vars):
        from keras.src.backend import StatelessScope

        with StatelessScope(state_mapping=list(zip(self.optimizer.variables, optimizer_vars))):
            return ops.convert_to_tensor(self.optimizer.learning_rate)

    def train(self, device_batch):
        self.state, outputs = self._train(self.state, device_batch)
        return outputs

    def _eval_step(self, trainable, non_trainable, batch):
        micro = {k: v[0] for k, v in batch.items()}
        outputs, _ = self.model.stateless_call(trainable, non_trainable, self.objective.inputs(micro), training=False)
        return self.objective.sums(outputs, micro)

    def evaluate(self, device_batch):
        sums = self._eval(self.state[0], self.state[1], device_batch)
        return {k: float(v) for k, v in sums.items()}

    def _predict_step(self, trainable, non_trainable, batch):
        micro = {k: v[0] for k, v in batch.items()}
        outputs, _ = self.model.stateless_call(trainable, non_trainable, self.objective.inputs(micro), training=False)
        return outputs

    def predict(self, device_batch):
        """The model's outputs for a put() element of one micro-batch, as NumPy (one process)."""
        outputs = self._predict(self.state[0], self.state[1], device_batch)
        return self.jax.tree_util.tree_map(np.asarray, outputs)

    def iterations(self):
        index = [id(v) for v in self.optimizer.variables].index(id(self.optimizer.iterations))
        return int(self.state[2][index])

    def _flat_state(self):
        trainable, non_trainable, optimizer_vars, scale, good = self.state
        return list(trainable) + list(non_trainable) + list(optimizer_vars) + [scale, good]

    def _names(self):
        return [name for name, _ in _named_state(self.model, self.optimizer)] + [
            "loss_scale/scale", "loss_scale/good_steps"]

    def get_state(self):
        """Whole arrays on the host. With shards on other processes' devices this is a collective:
        every process must call it."""
        from jax.experimental import multihost_utils

        def whole(value):
            if value.is_fully_addressable or value.is_fully_replicated:
                return np.asarray(value)
            return np.asarray(multihost_utils.process_allgather(value, tiled=True))

        return {name: whole(value) for name, value in zip(self._names(), self._flat_state())}

    def set_state(self, arrays):
        """Each array placed with the layout of the value it replaces, whatever layout it was saved from."""
        jax = self.jax
        counts = (len(self.state[0]), len(self.state[1]), len(self.state[2]))
        values = [jax.device_put(np.asarray(arrays[name]), value.sharding)
                  for name, value in zip(self._names(), self._flat_state())]
        a, b, c = counts
        self.state = (values[:a], values[a:a + b], values[a + b:a + b + c], values[-2], values[-1])

    def param_bytes_per_device(self):
        from trainer.parallel import bytes_per_device

        return bytes_per_device(self._flat_state())


def _named_state(model, optimizer):
    """Model variables (trainable first, as the JAX state holds them) and optimizer variables,
    named by index and path so a checkpoint of another model is recognised."""
    named = [(f"model/trainable/{i:04d}/{v.path}", v) for i, v in enumerate(model.trainable_variables)]
    named += [(f"model/non_trainable/{i:04d}/{v.path}", v) for i, v in enumerate(model.non_trainable_variables)]
    named += [(f"optimizer/{i:04d}/{v.path}", v) for i, v in enumerate(optimizer.variables)]
    return named
