"""Pipeline parallelism (--pipeline-stages S, JAX): the Transformer layers split by depth over S stages.

The devices form a 3-D mesh (stage, batch, model): a model replica is S x K
devices, stage s holding layers s*L/S .. (s+1)*L/S - 1 (each split K ways
as trainer/parallel.py splits them). The layers' variables are held stacked,
one [L, ...] array per variable of a layer, sharded over `stage` on the
first dimension and over `model` as BERT_LAYOUT says for the layer's own
variable. Embeddings, pooler and heads (with the tied masked-LM embedding)
stay outside the pipeline, replicated over `stage`.

Schedule: GPipe, as JAX's shard_map guide ("SPMD pipeline parallelism")
writes it. The step's K micro-batches (--grad-accum) go through a
`lax.scan` of K + S - 1 ticks; at every tick each stage runs its layers
(the Keras layer's stateless call, under `vmap` over stages) on what it
holds, and `ppermute` (in a `shard_map` over `stage` only; batch and model
stay automatic) hands every stage's output to the next. `jax.grad` of that
scan is the GPipe backward: all forwards, then all backwards, with
S - 1 idle ticks of each kind per step (bubble (S-1)/(K+S-1)). Not 1F1B:
under one SPMD program the backward of a scan is derived by JAX as a whole,
in reverse; interleaving one forward and one backward per stage (1F1B's
memory saving: S micro-batches in flight instead of K) would need the
backward scheduled by hand, which `jax.grad` of a scan does not give.

Dropout: layer l on micro-batch m draws with its own seed state advanced m
times, exactly as the unpipelined step draws it (distinct per layer, so per
stage, and per micro-batch); the state after the step is advanced K times.

Checkpoints hold every variable under its per-layer name (unstacked on
save, stacked on load), as without pipelining: any S and K resume them.
The optimizer updates the per-layer slices of the stacks, so its arithmetic
(NVLAMB's per-variable trust ratio and global norm, google-adam's clipping
global norm) is the unpipelined one.
"""

import numpy as np
from keras import ops

from bertprep.errors import UsageError
from trainer import parallel
from trainer.losses import PRETRAINING_OBJECTIVE
from trainer.model import sequence_attention_mask
from trainer.steps import JaxSteps, Steps, _results_vector

STAGE = "stage"


def mesh_devices(devices, s, k, placement):
    """The (S, replicas, K) grid of devices: each replica is S x K consecutive devices of
    `parallel.device_order` (intra_first: on one host when they fit; inter_first: across hosts)."""
    if len(devices) % (s * k):
        raise UsageError(f"--pipeline-stages {s} x --model-parallel {k} does not divide the {len(devices)} devices")
    ordered = parallel.device_order(devices, placement)
    grid = np.empty(len(ordered), dtype=object)
    grid[:] = ordered
    return grid.reshape(len(devices) // (s * k), s, k).transpose(1, 0, 2)


def make_distribution(s, k, placement):
    """`keras.distribution.ModelParallel` over a (stage, batch, model) mesh with BERT_LAYOUT."""
    import jax
    import keras

    grid = mesh_devices(jax.devices(), s, k, placement)
    names = np.vectorize(lambda d: f"{d.platform}:{d.id}", otypes=[object])(grid)
    mesh = keras.distribution.DeviceMesh(grid.shape, (STAGE, parallel.BATCH, parallel.MODEL), devices=names)
    return keras.distribution.ModelParallel(layout_map=parallel.layout_map(mesh), batch_dim_name=parallel.BATCH)


def replica_processes(device_mesh):
    """The process index of each device, one row per model replica (its S x K devices)."""
    devices = np.asarray(device_mesh.backend_mesh.devices).transpose(1, 0, 2)
    return [[d.process_index for d in replica.ravel()] for replica in devices]


def mesh_summary(device_mesh, placement):
    return {"shape": dict(zip(device_mesh.axis_names, device_mesh.shape)), "placement": placement,
            "devices": np.asarray(device_mesh.devices).tolist(), "processes": replica_processes(device_mesh)}


def check_layers(config, s):
    if config.num_hidden_layers % s:
        raise UsageError(f"--pipeline-stages {s} does not divide the {config.num_hidden_layers} layers "
                         "(num_hidden_layers); use an S that divides it")


class LayerStack:
    """Which entries of a flat list of variables are the same variable of every Transformer layer:
    `pack` turns the list into (the other entries, one stacked [L, ...] array per layer variable),
    `unpack` back."""

    def __init__(self, variables, per_layer):
        index = {id(v): i for i, v in enumerate(variables)}
        self.size = len(variables)
        self.groups = [[index[id(layer[j])] for layer in per_layer] for j in range(len(per_layer[0]))]
        grouped = {i for group in self.groups for i in group}
        self.plain = [i for i in range(self.size) if i not in grouped]

    def pack(self, values, stack):
        return [values[i] for i in self.plain], [stack([values[i] for i in group]) for group in self.groups]

    def unpack(self, plain, stacked):
        values = [None] * self.size
        for i, value in zip(self.plain, plain):
            values[i] = value
        for group, value in zip(self.groups, stacked):
            for layer, i in enumerate(group):
                values[i] = value[layer]
        return values


def bubble_fraction(s, k):
    """Idle share of a GPipe step: each stage works K of K + S - 1 ticks (forward and backward alike)."""
    return (s - 1) / (k + s - 1)


class PipelineSteps(JaxSteps):
    """JaxSteps whose Transformer layers run as an S-stage GPipe pipeline (pretraining only)."""

    def __init__(self, distribution, model, optimizer, accumulation, dynamic_scale, stages):
        # The micro-batches are the pipeline's own (a scan over ticks); each stage's gradients are
        # reduced by XLA, so --allreduce-dtype does not apply here.
        import jax
        import jax.numpy as jnp

        from trainer.steps import INITIAL_SCALE

        # Not JaxSteps.__init__, which lays out unstacked state: a non-finite fp16 step is skipped by selects.
        Steps.__init__(self, model, optimizer, accumulation, dynamic_scale, PRETRAINING_OBJECTIVE)
        self.jax = jax
        self.stages = stages
        layers = model.encoder_layers
        self.mesh = mesh = distribution.device_mesh.backend_mesh
        P = jax.sharding.PartitionSpec
        self.named = lambda *spec: jax.sharding.NamedSharding(mesh, P(*spec))
        self.batch_sharding = self.named(None, parallel.BATCH)
        self.replicated = self.named()
        slots = [[optimizer.moments(v)[0] for v in layer.trainable_variables]
                 + [optimizer.moments(v)[1] for v in layer.trainable_variables]
                 for layer in layers]
        self.stacks = (LayerStack(model.trainable_variables, [layer.trainable_variables for layer in layers]),
                       LayerStack(model.non_trainable_variables, [layer.non_trainable_variables for layer in layers]),
                       LayerStack(optimizer.variables, slots))
        self.outer_trainable = [model.trainable_variables[i] for i in self.stacks[0].plain]
        self.outer_non_trainable = [model.non_trainable_variables[i] for i in self.stacks[1].plain]
        flat = ([v.value for v in model.trainable_variables], [v.value for v in model.non_trainable_variables],
                [v.value for v in optimizer.variables])
        self.seed_advance = self._seed_advance()
        # Stacks: sharded over stage on the layer dimension, and as the layer's own variable otherwise.
        self.stacked_specs = [[(STAGE,) + tuple(values[group[0]].sharding.spec) for group in stack.groups]
                              for stack, values in zip(self.stacks, flat)]

        def place(stack, values, specs):
            plain, stacked = stack.pack(values, jnp.stack)
            return plain, [jax.device_put(v, self.named(*spec)) for v, spec in zip(stacked, specs)]

        self.state = (*(place(*args) for args in zip(self.stacks, flat, self.stacked_specs)),
                      jax.device_put(np.float32(INITIAL_SCALE if dynamic_scale else 1.0), self.replicated),
                      jax.device_put(np.int32(0), self.replicated))
        self.shardings = jax.tree.map(lambda value: value.sharding, self.state)
        for values, stack in zip(flat, self.stacks):  # the per-layer copies are now in the stacks
            for group in stack.groups:
                for i in group:
                    values[i].delete()
        self.schedule_numbers = jax.device_put(optimizer.schedule_numbers(), self.replicated)
        self._train = jax.jit(self._schedule_as_inputs(self._train_step), donate_argnums=0,
                              out_shardings=(self.shardings, None))
        self._eval = jax.jit(self._eval_step)
        self._predict = jax.jit(self._predict_step)

    def _seed_advance(self):
        """How much one training call of a layer moves each of its seed states (0 where the layer
        draws nothing: dropout 0), from a call of layer 0 on a tiny input."""
        layer = self.model.encoder_layers[0]
        before = [v.value for v in layer.non_trainable_variables]

        def after(trainable, non_trainable):  # one program (op by op, some 40)
            x = ops.zeros((1, 2, self.model.config.hidden_size), layer.compute_dtype)
            return layer.stateless_call(trainable, non_trainable, x, ops.ones((1, 2, 2), "bool"), training=True)[1]

        moved = self.jax.jit(after)([v.value for v in layer.trainable_variables], before)
        return [np.asarray(a) - np.asarray(b) for a, b in zip(moved, before)]

    # --- the forward pass --------------------------------------------------------------------------

    def _stateless(self, trainable, non_trainable, fn):
        """fn() with the outer (embedding, pooler, head) variables bound to these values;
        (its result, the non-trainable values after it)."""
        from keras import StatelessScope

        mapping = list(zip(self.outer_trainable, trainable)) + list(zip(self.outer_non_trainable, non_trainable))
        with StatelessScope(state_mapping=mapping) as scope:
            result = fn()
        after = [scope.get_current_value(v) for v in self.outer_non_trainable]
        return result, [old if new is None else new for old, new in zip(non_trainable, after)]

    def _encode(self, trainable, non_trainable, batch, training):
        """The sequence outputs [K, batch, seq, hidden] of the K micro-batches of `batch`, and the
        non-trainable state ((outer, stacked)) after them."""
        jax = self.jax
        (t_plain, t_stacked), (nt_plain, nt_stacked) = trainable, non_trainable

        def embed(nt, micro):
            x, nt = self._stateless(t_plain, nt, lambda: self.model.embed(self.objective.inputs(micro), training))
            return nt, x

        nt_plain, xs = jax.lax.scan(embed, nt_plain, batch)
        masks = jax.vmap(sequence_attention_mask)(batch["input_mask"])
        ys = self._pipeline(t_stacked, nt_stacked, xs, masks, training)
        micro_batches = xs.shape[0]
        nt_stacked = [s + np.asarray(a * micro_batches, s.dtype) for s, a in zip(nt_stacked, self.seed_advance)]
        return ys, (nt_plain, nt_stacked)

    def _pipeline(self, t_stacked, nt_stacked, xs, masks, training):
        jax = self.jax
        jnp = jax.numpy
        stages, micro_batches = self.stages, xs.shape[0]
        per_stage = len(self.model.encoder_layers) // stages
        constrain = jax.lax.with_sharding_constraint
        params = [constrain(v.reshape((stages, per_stage) + v.shape[1:]), self.named(STAGE, None, *spec[1:]))
                  for v, spec in zip(t_stacked, self.stacked_specs[0])]
        seeds = [v.reshape((stages, per_stage) + v.shape[1:]) for v in nt_stacked]
        advance = [jnp.asarray(a) for a in self.seed_advance]
        layer = self.model.encoder_layers[0]

        def stage(params, seeds, x, mask, micro):
            for j in range(per_stage):
                states = [s[j] + micro.astype(s.dtype) * a for s, a in zip(seeds, advance)]
                x, _ = layer.stateless_call([p[j] for p in params], states, x, mask, training=training)
            return x

        stage_ids = jnp.arange(stages)
        held_sharding = self.named(STAGE, parallel.BATCH)
        feed = jnp.concatenate([xs, jnp.zeros((stages - 1,) + xs.shape[1:], xs.dtype)])

        def tick(held, inputs):
            t, x = inputs
            held = jnp.where((stage_ids == 0)[:, None, None, None], x[None], held)
            micro = t - stage_ids
            out = jax.vmap(stage)(params, seeds, held, masks[jnp.clip(micro, 0, micro_batches - 1)], micro)
            out = constrain(out, held_sharding)
            return self._to_next_stage(out), out[stages - 1]

        held = constrain(jnp.zeros((stages,) + xs.shape[1:], xs.dtype), held_sharding)
        _, last = jax.lax.scan(tick, held, (jnp.arange(micro_batches + stages - 1), feed))
        return last[stages - 1:]

    def _to_next_stage(self, x):
        """Stage s's slice to stage s + 1 (the last's to the first, where it is overwritten)."""
        jax = self.jax
        P = jax.sharding.PartitionSpec
        permutation = [(i, (i + 1) % self.stages) for i in range(self.stages)]
        return jax.shard_map(lambda held: jax.lax.ppermute(held, STAGE, permutation), mesh=self.mesh,
                             in_specs=P(STAGE), out_specs=P(STAGE), axis_names={STAGE})(x)

    def _heads(self, trainable, non_trainable, ys, batch, fn):
        """fn(outputs, micro) of every micro-batch, stacked."""
        def one(args):
            y, micro = args
            outputs, _ = self._stateless(trainable[0], non_trainable[0],
                                         lambda: self.model.heads(y, self.objective.inputs(micro)))
            return fn(outputs, micro)

        return self.jax.lax.map(one, (ys, batch))

    # --- steps -------------------------------------------------------------------------------------

    def _train_step(self, state, batch):
        jax = self.jax
        trainable, non_trainable, optimizer_vars, scale, good_steps = state
        objective = self.objective
        totals = objective.totals(batch)

        def loss_fn(trainable):
            ys, non_trainable_after = self._encode(trainable, non_trainable, batch, training=True)
            sums = self._heads(trainable, non_trainable, ys, batch, objective.sums)
            sums = {k: ops.sum(v) for k, v in sums.items()}
            return objective.share(sums, totals) * scale, (sums, non_trainable_after)

        grads, (sums, non_trainable) = jax.grad(loss_fn, has_aux=True)(trainable)
        model_stack, _, optimizer_stack = self.stacks
        new_trainable, new_optimizer, scale_after, good_after, applied, learning_rate = self._update(
            model_stack.unpack(*trainable), optimizer_stack.unpack(*optimizer_vars), model_stack.unpack(*grads),
            scale, good_steps)
        stack = jax.numpy.stack
        new_state = (model_stack.pack(new_trainable, stack), non_trainable,
                     optimizer_stack.pack(new_optimizer, stack), scale_after, good_after)
        return new_state, _results_vector(sums, objective.sum_keys, applied, learning_rate, scale)

    def _eval_step(self, trainable, non_trainable, batch):
        batch = {k: v[:1] for k, v in batch.items()}
        ys, _ = self._encode(trainable, non_trainable, batch, training=False)
        return {k: v[0] for k, v in self._heads(trainable, non_trainable, ys, batch, self.objective.sums).items()}

    def _predict_step(self, trainable, non_trainable, batch):
        batch = {k: v[:1] for k, v in batch.items()}
        ys, _ = self._encode(trainable, non_trainable, batch, training=False)
        outputs = self._heads(trainable, non_trainable, ys, batch, lambda outputs, _micro: outputs)
        return self.jax.tree.map(lambda v: v[0], outputs)

    # --- state, by per-layer name --------------------------------------------------------------------

    def iterations(self):
        index = [id(v) for v in self.optimizer.variables].index(id(self.optimizer.iterations))
        return int(self.state[2][0][self.stacks[2].plain.index(index)])

    def _flat_state(self):
        """Every variable as the unpipelined step holds it (per layer), in its order."""
        lists = [stack.unpack(*packed) for stack, packed in zip(self.stacks, self.state[:3])]
        return [value for values in lists for value in values] + list(self.state[3:])

    def set_state(self, arrays):
        names = iter(self._names())
        packed = []
        for stack, shardings in zip(self.stacks, self.shardings[:3]):
            values = [np.asarray(arrays[next(names)]) for _ in range(stack.size)]
            plain, stacked = stack.pack(values, np.stack)
            packed.append(self.jax.device_put((plain, stacked), shardings))
        scalars = [self.jax.device_put(np.asarray(arrays[next(names)]), s) for s in self.shardings[3:]]
        self.state = (*packed, *scalars)

    def param_bytes_per_device(self):
        return parallel.bytes_per_device(self.jax.tree.leaves(self.state))

    def summary(self):
        """The pipeline's figures for the run's summary: the stacked layers' bytes (parameters,
        seed states, optimizer slots) on the fullest device and in all, and the schedule's bubble."""
        stacked = [v for packed in self.state[:3] for v in packed[1]]
        return {"stages": self.stages, "micro_batches": self.accumulation,
                "bubble_fraction": bubble_fraction(self.stages, self.accumulation),
                "layer_bytes_per_device": parallel.bytes_per_device(stacked),
                "layer_bytes": sum(v.nbytes for v in stacked)}
