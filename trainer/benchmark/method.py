"""DLPerf's method as pure functions: throughput of a run, medians, speed-up, FLOPs, MFU, the `max` search.

A run of `iterations` steps records the clock when each step was done (its
results on the host, trainer/loop.py): `step_times[i]` is the end of iteration i + 1. Throughput drops the
first `skip` iterations (compilation, autotuning, warm caches):

    throughput = global batch x (iterations - skip) / (t[iterations] - t[skip])

A configuration (devices, precision, batch) is run several times, each in a
fresh process; its figure is the median of the runs' throughputs. Speed-up is
that median over the 1-device median of the same precision and batch, and
scaling efficiency is the speed-up over the device count.
"""

import statistics


def throughput(step_times, global_batch, skip):
    """Sequences/s over iterations skip+1 .. len(step_times) (1-based), DLPerf's formula."""
    return global_batch * (len(step_times) - skip) / _timed_seconds(step_times, skip)


def sequence_throughput(step_times, step_sequences, skip):
    """Real sequences/s over the same iterations, from the sequences each iteration trained on:
    packed rows hold several, so the rows/s of `throughput` understate the work."""
    if len(step_sequences) != len(step_times):
        raise ValueError(f"{len(step_sequences)} sequence counts for {len(step_times)} iterations")
    return sum(step_sequences[skip:]) / _timed_seconds(step_times, skip)


def _timed_seconds(step_times, skip):
    if not 1 <= skip < len(step_times):
        raise ValueError(f"skip {skip} must be at least 1 and below the {len(step_times)} iterations timed")
    return step_times[-1] - step_times[skip - 1]


def median(values):
    return statistics.median(values) if values else None


def speedup_baseline(configs, precision, batch):
    """The 1-device median of `precision` and `batch` (a number or "max") among `configs`, or None."""
    for config in configs:
        if (config["devices"] == 1 and config["precision"] == precision and config["batch"] == batch
                and config.get("median")):
            return config["median"]
    return None


def add_medians_and_speedups(configs, baseline_configs=()):
    """Fill `median`, `speedup` and `scaling_efficiency` of each config (dicts with `devices`,
    `precision`, `batch`, `runs` [{"throughput"}]) in place. The 1-device baseline comes from the same
    list, else from `baseline_configs` (an earlier report's, e.g. a 1-device run before a multi-host one)."""
    for config in configs:
        config["median"] = median([run["throughput"] for run in config["runs"] if run.get("throughput")])
    for config in configs:
        base = (speedup_baseline(configs, config["precision"], config["batch"])
                or speedup_baseline(baseline_configs, config["precision"], config["batch"]))
        if config["median"] and base:
            config["speedup"] = config["median"] / base
            config["scaling_efficiency"] = config["speedup"] / config["devices"]
        else:
            config["speedup"] = config["scaling_efficiency"] = None
    return configs


def forward_flops_per_sequence(config, seq, pred, last_layer_rows=None):
    """Multiply-adds x 2 of one sequence's forward pass (docs/reference-facts.md, "FLOPs per sequence"): the
    encoder's dense layers on every token, attention scores and context (4 x S^2 x H per layer), the pooler
    and NSP head on [CLS], the masked-LM head (dense + output against the vocab) on the `pred` predicted
    positions only. Embedding lookups, LayerNorm, softmax and GELU count nothing. With `last_layer_rows`
    (`--last-layer predicted`, trainer/last_layer.py: the [CLS] and predicted positions), the last layer's
    queries and everything after them on those rows only, its keys and values on every token: what the
    step computes."""
    h, inter, layers, vocab = (config.hidden_size, config.intermediate_size, config.num_hidden_layers,
                               config.vocab_size)
    encoder = layers * _layer_flops(h, inter, seq, seq)
    if last_layer_rows:
        encoder += _layer_flops(h, inter, seq, last_layer_rows) - _layer_flops(h, inter, seq, seq)
    masked_lm = pred * 2 * (h * h + h * vocab)
    pooler_and_nsp = 2 * (h * h + 2 * h)
    return encoder + masked_lm + pooler_and_nsp


def _layer_flops(h, inter, seq, rows):
    """One Transformer layer over `seq` tokens whose `rows` query rows go on: key and value projections on every
    token; the query, attention output, intermediate and output products, scores and context on the rows."""
    keys_and_values = 2 * 2 * h * h * seq
    per_row = 2 * (2 * h * h + 2 * h * inter)  # query, attention output; intermediate, output
    return keys_and_values + per_row * rows + 4 * rows * seq * h


def last_layer_rows(records, last_layer):
    """The last layer's query rows under `--last-layer` (None: all of them): each sequence's [CLS] and the
    prediction slots."""
    if last_layer != "predicted":
        return None
    return records.pred + (records.dims["k"] if records.packed else 1)


def training_flops_per_sequence(config, seq, pred, last_layer_rows=None):
    """Forward + backward: the backward pass costs twice the forward (gradients of inputs and weights)."""
    return 3 * forward_flops_per_sequence(config, seq, pred, last_layer_rows)


def mfu(flops_per_sequence, sequences_per_second, peak_flops):
    """Model FLOPs utilization: the model's FLOP/s at this throughput over the devices' measured peak."""
    if not (sequences_per_second and peak_flops):
        return None
    return flops_per_sequence * sequences_per_second / peak_flops


def search_max_batch(fits, start):
    """The largest batch for which `fits(batch)` is true, assuming it is true up to some limit and false
    above: double from `start` while it fits (halve while it does not), then bisect between the largest
    batch that fits and the smallest that does not. Above 8 the bisection stops at multiples of 8 (the
    sizes accelerators prefer; each probe is a process that compiles the model). Returns (batch or None
    when even 1 does not fit, [(batch, fitted)] in probe order)."""
    probes = []

    def probe(batch):
        fitted = bool(fits(batch))
        probes.append((batch, fitted))
        return fitted

    if probe(start):
        good, bad = start, start * 2
        while probe(bad):
            good, bad = bad, bad * 2
    else:
        bad, good = start, start // 2
        while good >= 1 and not probe(good):
            bad, good = good, good // 2
        if good < 1:
            return None, probes
    while True:
        granule = 8 if good >= 8 else 1
        if bad - good <= granule:
            return good, probes
        middle = good + (bad - good) // 2 // granule * granule
        if probe(middle):
            good = middle
        else:
            bad = middle
