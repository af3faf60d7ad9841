"""Tensor (model) parallelism on the JAX backend through Keras's distribution API
(docs/reference-facts.md, "Model parallelism in Keras 3").

The devices form a 2-D `keras.distribution.DeviceMesh` (batch, model) of
shape (devices / K, K): each row is one model replica split over K devices,
and batches are sharded over the rows only. `BERT_LAYOUT` says, by regexes
on variable paths, which dimension of which variable is split over the model
axis (Megatron-LM's split); `keras.distribution.ModelParallel` creates every
variable, and its optimizer slots, with that layout, and XLA inserts the
collectives. K = 1 is plain data parallelism on the same code path.

Several hosts: `--placement` decides the device order given to the mesh,
that is whether the K devices of a model replica sit on one host
(intra_first) or on K different hosts (inter_first).
"""

import collections
import re

import numpy as np

from bertprep.errors import UsageError

BATCH, MODEL = "batch", "model"

# (regex on the variable path, mesh axis per dimension, what the split dimension counts).
# Attention: query/key/value split by heads, the output projection on its input (heads), so each
# device attends with its own heads and one all-reduce joins them. Feed-forward: the intermediate
# dense split on its output, the output dense on its input (one all-reduce). Word embeddings, and
# with them the tied masked-LM output and its bias, split over the vocabulary. Everything else
# (LayerNorm, position and segment embeddings, pooler, small heads) matches no rule: replicated.
BERT_LAYOUT = (
    (r".*/attention/(query|key|value)/kernel", (None, MODEL, None), "attention heads"),  # [hidden, heads, size]
    (r".*/attention/(query|key|value)/bias", (MODEL, None), "attention heads"),  # [heads, size]
    (r".*/attention/attention_output/kernel", (MODEL, None, None), "attention heads"),  # [heads, size, hidden]
    (r".*/intermediate/kernel", (None, MODEL), "intermediate size"),  # [hidden, intermediate]
    (r".*/intermediate/bias", (MODEL,), "intermediate size"),  # [intermediate]
    (r".*/output/kernel", (MODEL, None), "intermediate size"),  # [intermediate, hidden]
    (r".*/word_embeddings/embeddings", (MODEL, None), "vocab size"),  # [vocab, hidden]
    (r".*/masked_lm/bias", (MODEL,), "vocab size"),  # [vocab]
)

# Optimizer slots per trainable variable (Adam's m and v; both optimizers.py optimizers keep them).
OPTIMIZER_SLOTS = 2


def layout_map(device_mesh=None):
    """BERT_LAYOUT as a `keras.distribution.LayoutMap` (without a mesh: for looking layouts up)."""
    import keras

    layouts = keras.distribution.LayoutMap(device_mesh)
    for pattern, axes, _what in BERT_LAYOUT:
        layouts[pattern] = axes
    return layouts


def split_axes(layouts, path):
    """The mesh axis of each dimension of the variable at `path` (None: replicated), or None."""
    layout = layouts[path]
    return None if layout is None else layout.axes


def check_splits(trainable, non_trainable, k):
    """Every variable the layout splits must have the rule's rank and split evenly over k devices
    ({path: shaped value} as `abstract_variables` gives them)."""
    layouts = layout_map()
    for path, value in {**trainable, **non_trainable}.items():
        axes = split_axes(layouts, path)
        if axes is None:
            continue
        shape = tuple(value.shape)
        if len(axes) != len(shape):
            raise UsageError(f"--model-parallel: variable {path} has shape {shape}, but the layout expects "
                             f"{len(axes)} dimensions {axes}")
        for dim, axis in zip(shape, axes):
            if axis == MODEL and dim % k:
                what = next(counted for pattern, _axes, counted in BERT_LAYOUT if re.fullmatch(pattern, path))
                raise UsageError(f"--model-parallel {k} does not divide the {what} ({dim}) of {path} {shape}; "
                                 "use a K that divides it"
                                 + (" or a --bert-config whose vocab_size is a multiple of K (the extra "
                                    "entries are never used as inputs)" if what == "vocab size" else ""))


def abstract_variables(config, seq, pred):
    """(trainable, non_trainable): {path: jax.ShapeDtypeStruct} of the model's variables in the model's
    order, from a trace of building it (nothing is allocated). Keras's global state (names, seeds)
    moves on: call this before `keras.backend.clear_session()` and seeding, as pretraining.train does."""
    import jax

    from trainer.model import build_model

    paths = []

    def build():
        model = build_model(config, seq, pred)
        paths.extend([[v.path for v in model.trainable_variables], [v.path for v in model.non_trainable_variables]])
        return [v.value for v in model.trainable_variables], [v.value for v in model.non_trainable_variables]

    values = jax.eval_shape(build)
    return tuple(dict(zip(names, shapes)) for names, shapes in zip(paths, values))


def layout_bytes_per_device(trainable, non_trainable, k, gradients=False):
    """Bytes of parameters and optimizer slots (and their gradients, with `gradients`) each device
    holds when BERT_LAYOUT splits over k devices, from the shapes alone (scalars such as the
    optimizer's step counter not counted)."""
    layouts = layout_map()
    copies = 1 + OPTIMIZER_SLOTS + gradients

    def shard_bytes(path, value):
        axes = split_axes(layouts, path) or ()
        return value.size * value.dtype.itemsize // k ** sum(axis == MODEL for axis in axes)

    return (sum(shard_bytes(p, v) * copies for p, v in trainable.items())
            + sum(shard_bytes(p, v) for p, v in non_trainable.items()))


def device_order(devices, placement):
    """The devices in the order the mesh takes them, row by row (a row is one model replica).
    intra_first: host by host, so consecutive devices (one replica's K) share a host; inter_first:
    the first device of every host, then the second, ..., so a replica's K devices span K hosts."""
    hosts = collections.defaultdict(list)
    for device in devices:
        hosts[device.process_index].append(device)
    grid = [sorted(hosts[h], key=lambda d: d.id) for h in sorted(hosts)]
    if len({len(row) for row in grid}) != 1:
        raise UsageError(f"hosts have different numbers of devices ({', '.join(str(len(r)) for r in grid)}); "
                         "the mesh needs the same number on every host")
    if placement == "inter_first":
        grid = [list(column) for column in zip(*grid)]
    return [device for row in grid for device in row]


def make_distribution(k, placement):
    """`keras.distribution.ModelParallel` over all devices: mesh (devices / k, k), BERT_LAYOUT."""
    import jax
    import keras

    devices = jax.devices()
    if len(devices) % k:
        raise UsageError(f"--model-parallel {k} does not divide the {len(devices)} devices")
    ordered = device_order(devices, placement)
    mesh = keras.distribution.DeviceMesh((len(devices) // k, k), (BATCH, MODEL),
                                         devices=[f"{d.platform}:{d.id}" for d in ordered])
    return keras.distribution.ModelParallel(layout_map=layout_map(mesh), batch_dim_name=BATCH)


def process_grid(device_mesh):
    """The process index of each device of the mesh, row by row."""
    return [[device.process_index for device in row] for row in device_mesh.backend_mesh.devices]


def data_feed(processes, process_index):
    """(feed index, number of feeds, mesh rows this process feeds), from `process_grid`. Processes
    whose devices lie in the same rows feed the same batch rows, so they read the same data."""
    rows_of = collections.defaultdict(set)
    for row, row_processes in enumerate(processes):
        for process in row_processes:
            rows_of[process].add(row)
    feeds = sorted({tuple(sorted(rows)) for rows in rows_of.values()})
    if len({row for rows in feeds for row in rows}) != sum(len(rows) for rows in feeds):
        raise UsageError(f"model replicas of {len(processes[0])} devices straddle hosts unevenly with this "
                         "placement; use a --model-parallel that divides the devices per host or is a "
                         "multiple of them")
    mine = tuple(sorted(rows_of[process_index]))
    return feeds.index(mine), len(feeds), len(mine)


def mesh_summary(device_mesh, placement):
    """The mesh for the run's summary: axis sizes, placement, device names and their processes (hosts)."""
    return {"shape": dict(zip(device_mesh.axis_names, device_mesh.shape)), "placement": placement,
            "devices": np.asarray(device_mesh.devices).tolist(), "processes": process_grid(device_mesh)}


def bytes_per_device(arrays):
    """The most bytes any one (local) device holds of these jax arrays: what sharding saves."""
    held = collections.Counter()
    for array in arrays:
        for shard in array.addressable_shards:
            held[shard.device] += shard.data.nbytes
    return max(held.values())
