"""One training step per backend: gradients of a global batch, all-reduce, loss scaling, update.

A step takes one element of shape [accumulation, global batch, ...], runs
the micro-batches in a loop that sums gradients, divides the loss by the
totals of the whole element (losses.py), sums gradients across replicas once,
and applies the optimizer. Loss scaling (mixed_float16 only): the loss is
multiplied by the scale, gradients divided by it; a step with any non-finite
gradient leaves weights and optimizer (its step counter too) unchanged and
halves the scale; after `GROWTH_INTERVAL` finite steps in a row the scale
doubles. The skip is made of selects (every gradient NaN, the optimizer keeps
old values where a gradient is not finite: optimizers.py), never a branch on
a device value, which would make the host wait for the device mid-step.
Without loss scaling (fp32, mixed_bfloat16) there is no finite check at all:
every step is applied, and the host sees a non-finite loss when it fetches.

A step returns one small float32 vector on the device (the loss sums, whether
it was applied, learning rate, loss scale): the loop fetches several with one
transfer (`fetch_all`), once per log line, not once per step.

TensorFlow: `tf.distribute` (Mirrored or MultiWorkerMirrored) strategy; each
replica computes its gradients in one XLA-compiled function (`jit_compile=True`),
sums them across replicas with one batched all-reduce (outside XLA: TensorFlow
allows no cross-replica call inside a nested function), then in a second
XLA-compiled function unscales, checks and (NVLAMB) norms them itself and
runs the optimizer's math, assigning its own copy of every weight and moment
(variables of aggregation NONE: each replica writes its own component). The
step counter and the loss scale are updated once, in cross-replica context. JAX:
`keras.distribution.ModelParallel` on a (batch, model) mesh (trainer/parallel.py; a model axis of 1 is
data parallelism); the step is one jitted SPMD function over the global batch, and each variable
keeps the layout it was created with.
"""

import abc

import numpy as np
from keras import ops

from trainer import keras_internals
from trainer.losses import PRETRAINING_OBJECTIVE

INITIAL_SCALE = 2.0**15
# --allreduce-dtype: the gradients' dtype while they are summed across replicas.
ALLREDUCE_DTYPES = {"fp32": "float32", "bf16": "bfloat16"}
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


def _results_vector(sums, sum_keys, applied, learning_rate, scale):
    """The step's scalars as one float32 vector: sums in `sum_keys` order, applied, lr, scale."""
    values = [sums[k] for k in sum_keys] + [applied, learning_rate, scale]
    return ops.stack([ops.cast(v, "float32") for v in values])


class Steps(abc.ABC):
    """What the training loop, evaluation and checkpoints use of a backend's steps: TensorFlowSteps,
    JaxSteps and pipeline.PipelineSteps, made by `pretraining.make_steps`. A device batch is what `put` returns;
    a handle is a step's results still on the device, fetched (several at once) by `fetch_all`."""

    model: object  # the Keras model the steps train
    optimizer: object
    objective: object  # losses.PRETRAINING_OBJECTIVE or a task head's (heads.py)

    def __init__(self, model, optimizer, accumulation, dynamic_scale, objective):
        """What every backend's steps hold: `accumulation` micro-batches a step; `dynamic_scale`: fp16 loss
        scaling, whose non-finite steps the optimizer skips."""
        self.model = model
        self.objective = objective
        self.optimizer = optimizer
        self.accumulation = accumulation
        self.dynamic_scale = dynamic_scale
        optimizer.skips_nonfinite = dynamic_scale

    @abc.abstractmethod
    def put(self, batch):
        """A host element {feature: [accumulation, batch, ...]} on the devices."""

    @abc.abstractmethod
    def train(self, device_batch):
        """One optimizer step, dispatched (not waited for): its handle."""

    @abc.abstractmethod
    def evaluate(self, device_batch):
        """The objective's loss sums of one micro-batch, as host floats."""

    @abc.abstractmethod
    def predict(self, device_batch):
        """The model's outputs for one micro-batch, as NumPy, rows in batch order."""

    @abc.abstractmethod
    def iterations(self):
        """Optimizer steps applied so far."""

    @abc.abstractmethod
    def get_state(self):
        """{name: array} of everything a checkpoint holds (every process must call it)."""

    @abc.abstractmethod
    def set_state(self, arrays):
        """The state of get_state's names put back, each with its variable's layout."""

    @abc.abstractmethod
    def param_bytes_per_device(self):
        """Bytes of state on the fullest device."""

    @abc.abstractmethod
    def _to_host(self, handles, width):
        """Steps' results, each reshaped to rows of `width` and concatenated, as one NumPy array."""

    # A backend that runs a step as it is dispatched (TensorFlow on CPUs: the call returns once the step is
    # done) says so: the loop then times the step to its dispatch's return, not to its results' fetch.
    runs_when_dispatched = False

    def send_to_host(self, handle):
        """Start a dispatched step's results on their way to the host now: a device runs its work in
        order, so a copy asked for only at the fetch would wait for the steps dispatched since as well."""

    def summary(self):
        """Figures of the run's summary particular to these steps (the pipeline's), or None."""
        return None

    def train_many(self, device_batches):
        """Several steps in a row; one handle whose results are a [steps, n] block."""
        return ops.stack([self.train(b) for b in device_batches])

    def fetch(self, handle):
        """A train step's device results as host floats (this waits for the step)."""
        return self.fetch_all([handle])[0]

    def fetch_all(self, handles):
        """Several steps' results, fetched at once: a list of dicts of host floats;
        `applied`: the step changed the weights; `finite`: applied and its loss finite."""
        keys = self.objective.sum_keys
        width = len(keys) + 3
        rows = self._to_host(handles, width)
        results = []
        for row in rows:
            result = {k: float(v) for k, v in zip(keys, row)}
            applied = bool(row[len(keys)])
            result.update(applied=applied, finite=applied and bool(np.isfinite(row[:len(keys)]).all()),
                          learning_rate=float(row[len(keys) + 1]), loss_scale=float(row[len(keys) + 2]))
            results.append(result)
        return results


class TensorFlowSteps(Steps):
    def __init__(self, strategy, model, optimizer, accumulation, dynamic_scale, objective=PRETRAINING_OBJECTIVE,
                 allreduce_dtype="fp32"):
        import tensorflow as tf

        super().__init__(model, optimizer, accumulation, dynamic_scale, objective)
        self.tf = tf
        self.strategy = strategy
        self.local_replicas = len(strategy.extended.worker_devices)
        self.runs_when_dispatched = all(":CPU:" in device.upper() for device in strategy.extended.worker_devices)
        self.allreduce_dtype = ALLREDUCE_DTYPES[allreduce_dtype]
        with strategy.scope():
            self.scale = tf.Variable(INITIAL_SCALE if dynamic_scale else 1.0, trainable=False, name="loss_scale",
                                     aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
            self.good_steps = tf.Variable(0, trainable=False, name="loss_scale_good_steps",
                                          aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        self._compiled_functions = {}  # replica -> its XLA-compiled (gradients, update)
        self._train = tf.function(self._train_step)
        self._train_many = tf.function(self._train_many_steps)
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

    def _replica_gradients(self, batch, totals):
        """This replica's gradients summed over its micro-batches, and its loss sums (XLA-compiled)."""
        tf = self.tf
        objective = self.objective
        variables = self.model.trainable_variables
        scale = tf.cast(self.scale, tf.float32)

        def micro_step(micro):
            with tf.GradientTape() as tape:
                sums = objective.sums(self.model(objective.inputs(micro), training=True), micro)
                loss = objective.share(sums, totals)
                if self.dynamic_scale:
                    loss = loss * scale
            grads = tape.gradient(loss, variables)
            return [tf.convert_to_tensor(g) for g in grads], sums

        zeros = [tf.zeros(v.shape, tf.float32) for v in variables]
        return _accumulate(micro_step, batch, self.accumulation, zeros, objective.sum_keys)

    def _replica_update(self, grads, scale):
        """In one replica, XLA-compiled: unscale and check (loss scaling only) the summed gradients,
        and the optimizer's step (NVLAMB's norm, Adam's moments) assigned to this replica's own
        copies; returns (applied, learning rate). The step counter is the caller's."""
        tf = self.tf
        applied = tf.constant(True)
        if self.dynamic_scale:
            grads, applied = _unscaled_or_nan(grads, scale)
        learning_rate = self.optimizer.update_in_place(grads, self.model.trainable_variables)
        return applied, learning_rate

    def _compiled(self, replica):
        """This replica's XLA-compiled functions (one per replica: each captures its own variables)."""
        if replica not in self._compiled_functions:
            jit = self.tf.function
            self._compiled_functions[replica] = (jit(self._replica_gradients, jit_compile=True),
                                                 jit(self._replica_update, jit_compile=True),
                                                 jit(self._lone_replica_step, jit_compile=True))
        return self._compiled_functions[replica]

    def _summed_gradients(self, grads, all_reduce=lambda grads: grads):
        """The gradients summed by `all_reduce` (none with a lone replica) in `allreduce_dtype`, back to
        float32: the same rounding with one replica as with several."""
        tf = self.tf
        return [tf.cast(g, tf.float32) for g in all_reduce([tf.cast(g, self.allreduce_dtype) for g in grads])]

    def _replica_step(self, batch):
        """In one replica: its gradients (XLA), summed across replicas once (the all-reduce cannot
        be inside a nested function), then its update (XLA); returns (results vector, applied).
        With one replica in sync there is nothing to sum: one XLA function does it all."""
        tf = self.tf
        ctx = tf.distribute.get_replica_context()
        gradients, update, lone_step = self._compiled(int(tf.get_static_value(ctx.replica_id_in_sync_group)))
        if self.strategy.num_replicas_in_sync == 1:
            return lone_step(batch)
        sum_op = tf.distribute.ReduceOp.SUM
        objective = self.objective
        totals = {k: ctx.all_reduce(sum_op, v) for k, v in objective.totals(batch).items()}
        grads, sums = gradients(batch, totals)
        grads = self._summed_gradients(grads, lambda grads: ctx.all_reduce(sum_op, grads))
        sums = ctx.all_reduce(sum_op, sums)
        scale = tf.cast(self.scale, tf.float32)
        applied, learning_rate = update(grads, scale)
        return _results_vector(sums, objective.sum_keys, applied, learning_rate, scale), applied

    def _lone_replica_step(self, batch):
        """_replica_step's work when this replica is the only one, as one function."""
        objective = self.objective
        grads, sums = self._replica_gradients(batch, objective.totals(batch))
        scale = self.tf.cast(self.scale, self.tf.float32)
        applied, learning_rate = self._replica_update(self._summed_gradients(grads), scale)
        return _results_vector(sums, objective.sum_keys, applied, learning_rate, scale), applied

    def _train_step(self, batch):
        tf = self.tf
        results, applied = self.strategy.run(self._replica_step, args=(batch,))
        results = self.strategy.experimental_local_results(results)[0]  # the same in every replica
        applied = self.strategy.experimental_local_results(applied)[0]
        # Counted here, in cross-replica context (a skipped step is not counted).
        iterations = self.optimizer.iterations
        iterations.assign_add(tf.cast(applied, iterations.dtype))
        if self.dynamic_scale:
            new_scale, new_good = next_loss_scale(tf.identity(self.scale), tf.identity(self.good_steps), applied,
                                                  self.dynamic_scale)
            self.scale.assign(new_scale)
            self.good_steps.assign(new_good)
        return results

    def train(self, device_batch):
        return self._train(device_batch)

    def train_many(self, device_batches):
        """--steps-per-call: the steps run in one tf.function call (DLE's steps_per_loop)."""
        return self._train_many(tuple(device_batches))

    def _train_many_steps(self, device_batches):
        return self.tf.stack([self._train_step(b) for b in device_batches])

    def _to_host(self, handles, width):
        tf = self.tf
        return tf.concat([tf.reshape(h, (-1, width)) for h in handles], axis=0).numpy()  # one transfer

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
        return _real_vocab_rows(self.model, {name: np.asarray(v.numpy() if hasattr(v, "numpy") else v)
                                             for name, v in self.state_variables()})

    def set_state(self, arrays):
        for name, variable in self.state_variables():
            variable.assign(_padded_rows(arrays[name], tuple(variable.shape)))

    def param_bytes_per_device(self):
        """Every replica holds all of the state."""
        return sum(array.nbytes for array in self.get_state().values())


class JaxSteps(Steps):
    _traced_program = None  # (folder, description) where keep_traced_program was asked

    def __init__(self, distribution, model, optimizer, accumulation, dynamic_scale, objective=PRETRAINING_OBJECTIVE,
                 allreduce_dtype="fp32"):
        import jax

        super().__init__(model, optimizer, accumulation, dynamic_scale, objective)
        self.jax = jax
        mesh = distribution.device_mesh.backend_mesh
        axis = distribution.batch_dim_name
        P = jax.sharding.PartitionSpec
        self.mesh, self.batch_axis = mesh, axis
        # A model axis of 1: gradients are reduced once per step by hand (_per_device_gradients).
        self.data_parallel = mesh.devices.size == mesh.shape[axis]
        self.allreduce_dtype = ALLREDUCE_DTYPES[allreduce_dtype]
        self.seed_indices = {i for i, v in enumerate(model.non_trainable_variables)
                             if keras_internals.is_seed_state(v)}
        self.batch_sharding = jax.sharding.NamedSharding(mesh, P(None, axis))
        self.replicated = jax.sharding.NamedSharding(mesh, P())
        self.state = (
            [v.value for v in model.trainable_variables],
            [v.value for v in model.non_trainable_variables],
            [v.value for v in optimizer.variables],
            jax.device_put(np.float32(INITIAL_SCALE if dynamic_scale else 1.0), self.replicated),
            jax.device_put(np.int32(0), self.replicated),
        )
        # Every value on the mesh: a value Keras left on one device (so on a mesh of one) would give the
        # step's first call other input types than its outputs, and a second compilation at step 2.
        self.state = jax.tree.map(
            lambda value: value if isinstance(value.sharding, jax.sharding.NamedSharding)
            else jax.device_put(value, self.replicated), self.state)
        # The new state keeps the layouts of the old (sharded variables stay sharded, as Keras's own
        # JAX trainer pins them); XLA chooses where the outputs go.
        state_shardings = jax.tree.map(lambda value: value.sharding, self.state)
        self.schedule_numbers = jax.device_put(optimizer.schedule_numbers(), self.replicated)
        self._train_options = {"donate_argnums": 0, "out_shardings": (state_shardings, None)}
        self._train = jax.jit(self._schedule_as_inputs(self._train_step), **self._train_options)
        self._eval = jax.jit(self._eval_step)
        self._predict = jax.jit(self._predict_step)

    def keep_traced_program(self, folder, description):
        """From the first step on, call the step's exported program, read from `folder` where a run with this
        `description` (what shapes the step besides its arguments) left one, else exported there
        (trainer/traced_steps.py). On one device of one process (several: traced as before); returns
        whether it will."""
        if self.mesh.devices.size != 1 or self.jax.process_count() != 1:
            return False
        self._traced_program, self._traced_steps = (folder, description), {}
        return True

    def put(self, batch):
        # This process's slice of the global batch; with one process it is the whole batch.
        return {k: self.jax.make_array_from_process_local_data(self.batch_sharding, v) for k, v in batch.items()}

    def _gradients(self, trainable, non_trainable, batch, totals, scale):
        """(gradients summed over the element's micro-batches, loss sums, non-trainable state after)."""
        jax = self.jax
        objective = self.objective

        def loss_fn(trainable, non_trainable, micro):
            outputs, non_trainable = self.model.stateless_call(
                trainable, non_trainable, objective.inputs(micro), training=True)
            sums = objective.sums(outputs, micro)
            loss = objective.share(sums, totals)
            return (loss * scale if self.dynamic_scale else loss), (sums, non_trainable)

        grad_fn = jax.grad(loss_fn, has_aux=True)
        if self.accumulation == 1:
            grads, (sums, non_trainable) = grad_fn(trainable, non_trainable, {k: v[0] for k, v in batch.items()})
            return grads, sums, non_trainable

        # fori_loop needs the non-trainable state (dropout seeds) in its carry.
        def body(i, carry):
            acc, acc_sums, ntv = carry
            (g, (s, ntv)) = grad_fn(trainable, ntv, {k: v[i] for k, v in batch.items()})
            return _add(acc, g), {k: acc_sums[k] + s[k] for k in objective.sum_keys}, ntv

        zeros = [ops.zeros_like(v) for v in trainable]
        zero_sums = {k: ops.zeros((), "float32") for k in objective.sum_keys}
        return jax.lax.fori_loop(0, self.accumulation, body, (zeros, zero_sums, non_trainable))

    def _per_device_gradients(self, trainable, non_trainable, batch, totals, scale):
        """Data parallelism: each device sums the gradients of its own rows over every micro-batch,
        then one all-reduce (in `allreduce_dtype`) sums them across devices. Under GSPMD the
        accumulator is replicated and XLA reduces every micro-batch. Each device draws its dropout
        masks from the seeds offset by its index (device 0: the seeds as they are)."""
        jax = self.jax
        axis = self.batch_axis

        def offset_seeds(non_trainable, offset):
            return [v + jax.numpy.asarray([offset, 0], v.dtype) if i in self.seed_indices else v
                    for i, v in enumerate(non_trainable)]

        def local(trainable, non_trainable, batch, totals, scale):
            index = jax.lax.axis_index(axis)
            non_trainable = offset_seeds(non_trainable, index)
            grads, sums, non_trainable = self._gradients(trainable, non_trainable, batch, totals, scale)
            grads = [jax.lax.psum(g.astype(self.allreduce_dtype), axis).astype(g.dtype) for g in grads]
            sums = jax.lax.psum(sums, axis)
            return grads, sums, offset_seeds(non_trainable, -index)

        P = jax.sharding.PartitionSpec
        return jax.shard_map(local, mesh=self.mesh, in_specs=(P(), P(), P(None, axis), P(), P()),
                             out_specs=(P(), P(), P()), check_vma=False)(
            trainable, non_trainable, batch, totals, scale)

    def _schedule_as_inputs(self, train_step):
        """train_step(state, batch) as a function of (state, batch, schedule numbers): the learning-rate
        schedule's peak, warmup and total steps are the step's inputs, not constants compiled into it, so
        one program serves every --lr, --warmup and --steps, and the persistent cache serves a rerun that
        changes only those (optimizers._ScheduleOfNumbers: the same learning rates, bit for bit)."""
        def step(state, batch, schedule_numbers):
            with self.optimizer.schedule_numbers_as_inputs(schedule_numbers):
                return train_step(state, batch)

        step.__name__ = train_step.__name__  # JAX names the program after it: jit(_train_step) in its logs
        return step

    def _train_step(self, state, batch):
        trainable, non_trainable, optimizer_vars, scale, good_steps = state
        objective = self.objective
        totals = objective.totals(batch)
        if self.data_parallel and self.mesh.devices.size > 1:
            grads, sums, non_trainable = self._per_device_gradients(trainable, non_trainable, batch, totals, scale)
        else:  # GSPMD, or one device: no collective to place by hand
            grads, sums, non_trainable = self._gradients(trainable, non_trainable, batch, totals, scale)
            if self.data_parallel:  # the all-reduce's rounding, as with several devices
                grads = [g.astype(self.allreduce_dtype).astype(g.dtype) for g in grads]
        new_trainable, new_optimizer_vars, scale_after, good_after, applied, learning_rate = self._update(
            trainable, optimizer_vars, grads, scale, good_steps)
        new_state = (new_trainable, non_trainable, new_optimizer_vars, scale_after, good_after)
        return new_state, _results_vector(sums, objective.sum_keys, applied, learning_rate, scale)

    def _update(self, trainable, optimizer_vars, grads, scale, good_steps):
        """The optimizer step on flat lists, without a branch: (trainable, optimizer variables, scale,
        good steps, applied, learning rate). Under fp16 a non-finite step leaves everything as it was
        (gradients all NaN, skips_nonfinite) and is not counted."""
        applied = True
        if self.dynamic_scale:
            grads, applied = _unscaled_or_nan(grads, scale)
        learning_rate = self._learning_rate(optimizer_vars)
        new_trainable, new_optimizer_vars = self.optimizer.stateless_apply(optimizer_vars, grads, trainable)
        new_optimizer_vars = list(new_optimizer_vars)
        if self.dynamic_scale:  # a skipped step is not counted
            i = self._iterations_index
            new_optimizer_vars[i] = ops.where(applied, new_optimizer_vars[i], optimizer_vars[i])
        scale_after, good_after = next_loss_scale(scale, good_steps, applied, self.dynamic_scale)
        return list(new_trainable), new_optimizer_vars, scale_after, good_after, applied, learning_rate

    def _learning_rate(self, optimizer_vars):
        from keras import StatelessScope

        with StatelessScope(state_mapping=list(zip(self.optimizer.variables, optimizer_vars))):
            return ops.convert_to_tensor(self.optimizer.learning_rate)

    def step_arguments(self, device_batch):
        """What the compiled step takes for `device_batch`: to lower or export it (scripts, tests)."""
        return self.state, device_batch, self.schedule_numbers

    def train(self, device_batch):
        arguments = self.step_arguments(device_batch)
        step = self._train if self._traced_program is None else self._traced_step(arguments)
        self.state, outputs = step(*arguments)
        return outputs

    def _traced_step(self, arguments):
        """The exported step for these arguments' batch shapes (binned records, --bin-size, give a few: one
        program each, as the jit traced one each), read or exported at its first step."""
        shapes = tuple((name, value.shape) for name, value in arguments[1].items())
        if shapes not in self._traced_steps:
            from trainer.traced_steps import step_with_traced_program  # at a width's first step only

            self._traced_steps[shapes] = step_with_traced_program(self._train, arguments, *self._traced_program,
                                                                  **self._train_options)
        return self._traced_steps[shapes]

    def send_to_host(self, handle):
        handle.copy_to_host_async()

    def _to_host(self, handles, width):
        # Each handle's copy began when it was dispatched (send_to_host): joined on the host, not by a
        # device operation that would queue behind the steps dispatched since.
        return np.concatenate([np.asarray(h).reshape(-1, width) for h in handles])

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

    @property
    def _iterations_index(self):
        return [id(v) for v in self.optimizer.variables].index(id(self.optimizer.iterations))

    def iterations(self):
        return int(self.state[2][self._iterations_index])

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

        state = {name: whole(value) for name, value in zip(self._names(), self._flat_state())}
        return _real_vocab_rows(self.model, state)

    def set_state(self, arrays):
        """Each array placed with the layout of the value it replaces, whatever layout it was saved from."""
        jax = self.jax
        counts = (len(self.state[0]), len(self.state[1]), len(self.state[2]))
        values = [jax.device_put(_padded_rows(np.asarray(arrays[name]), value.shape), value.sharding)
                  for name, value in zip(self._names(), self._flat_state())]
        a, b, c = counts
        self.state = (values[:a], values[a:a + b], values[a + b:a + b + c], values[-2], values[-1])

    def param_bytes_per_device(self):
        from trainer.parallel import bytes_per_device

        return bytes_per_device(self._flat_state())


def _unscaled_or_nan(grads, scale):
    """(gradients / scale, all finite): every gradient NaN when any is not, so the optimizer
    (skips_nonfinite) leaves everything as it was, without a branch."""
    grads = [g / scale for g in grads]
    finite = ops.all(ops.stack([ops.all(ops.isfinite(g)) for g in grads]))
    return [ops.where(finite, g, float("nan")) for g in grads], finite


def _real_vocab_rows(model, arrays):
    """--pad-vocab: a checkpoint holds the real vocabulary's rows (of the word embeddings, the
    masked-LM bias and their optimizer moments), as an unpadded model has them."""
    padded = getattr(model, "padded_vocab", None)
    vocab = model.config.vocab_size if padded else None
    if padded is None or padded == vocab:
        return arrays
    return {name: a[:vocab] if a.ndim and a.shape[0] == padded else a for name, a in arrays.items()}


def _padded_rows(array, shape):
    """A saved array with the padding rows (zero) put back, to the variable's `shape`."""
    array = np.asarray(array)
    missing = shape[0] - array.shape[0] if array.ndim and len(shape) == array.ndim else 0
    if missing <= 0:
        return array
    return np.concatenate([array, np.zeros((missing,) + array.shape[1:], array.dtype)])


def _named_state(model, optimizer):
    """Model variables (trainable first, as the JAX state holds them) and optimizer variables,
    named by index and path so a checkpoint of another model is recognised."""
    named = [(f"model/trainable/{i:04d}/{v.path}", v) for i, v in enumerate(model.trainable_variables)]
    named += [(f"model/non_trainable/{i:04d}/{v.path}", v) for i, v in enumerate(model.non_trainable_variables)]
    named += [(f"optimizer/{i:04d}/{v.path}", v) for i, v in enumerate(optimizer.variables)]
    return named
