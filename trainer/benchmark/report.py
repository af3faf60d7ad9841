"""The benchmark's outputs: report.md (DLPerf's table layout), results.json, throughput.png, the summary."""

import json
import os


def _distinct(configs, fields):
    """The distinct values of `fields` (a tuple per config) in the order the configurations ran."""
    seen = []
    for config in configs:
        key = tuple(config[f] for f in fields)
        if key not in seen:
            seen.append(key)
    return seen


def column_keys(configs):
    """(precision, batch): the table's columns."""
    return _distinct(configs, ("precision", "batch"))


def device_rows(configs):
    """(devices, hosts): the table's rows."""
    return _distinct(configs, ("devices", "hosts"))


def devices_label(devices, hosts):
    return str(devices) if hosts == 1 else f"{devices} ({hosts} hosts x {devices // hosts})"


def column_label(precision, batch, policies):
    shown = {"fp32": "fp32", "amp": f"amp ({policies['amp']})"}[precision]
    return f"{shown} b{batch}"


def _cell(config, value):
    if config is None:
        return ""
    if config["status"] != "ok" or config["median"] is None:
        return "out of memory" if config["status"] == "oom" else "failed"
    return value(config)


def _table(results, value):
    configs = results["configs"]
    index = {(c["devices"], c["hosts"], c["precision"], c["batch"]): c for c in configs}
    columns = column_keys(configs)
    policies = {"amp": results["setup"]["amp"]}
    lines = ["| devices | " + " | ".join(column_label(p, b, policies) for p, b in columns) + " |",
             "|---|" + "---:|" * len(columns)]
    for devices, hosts in device_rows(configs):
        cells = [_cell(index.get((devices, hosts, p, b)), value) for p, b in columns]
        lines.append(f"| {devices_label(devices, hosts)} | " + " | ".join(cells) + " |")
    return lines


def _throughput(config):
    text = f"{config['median']:,.1f}"
    return f"{text} (b{config['batch_size']})" if config["batch"] == "max" else text


def _sequences(config):
    return f"{config['sequence_median']:,.1f}" if config.get("sequence_median") else "n/a"


def _speedup(config):
    if config["speedup"] is None:
        return "no 1-device run"
    return f"{config['speedup']:.2f}x ({config['scaling_efficiency']:.0%})"


def _mfu(config):
    return f"{config['mfu']:.1%}" if config["mfu"] is not None else "no peak"


def markdown(results):
    setup, host, m = results["setup"], results["host"], results["method"]
    c = setup["model_config"]
    configs = results["configs"]
    where = (f"{host['accelerators']} x {host['accelerator']} per host" if host["accelerators"] else
             f"no accelerator: N devices are N logical CPU devices sharing the host's {host['cores']} cores")
    amp = ("mixed_float16 with dynamic loss scaling" if setup["amp"] == "mixed_float16"
           else "mixed_bfloat16 (no loss scaling)")
    flops = next((x["flops_per_sequence"] for x in configs), 0)
    packed = setup.get("packed")
    unit = "row" if packed else "sequence"
    lines = [
        "# BERT pretraining throughput (`python -m trainer.benchmark`)",
        "",
        f"- Model: {setup['model']} (L{c['num_hidden_layers']}/H{c['hidden_size']}/A{c['num_attention_heads']}, "
        f"vocab {c['vocab_size']}); records {setup['seq']}/{setup['pred']} {setup['format']}; "
        f"optimizer {setup['optimizer']}; Keras backend {setup['backend']}.",
        f"- Host: {host['hostname']}, {host['cpu']}, {host['cores']} cores; {where}; {host['hosts']} host(s); "
        f"{host['date']}.",
        f"- amp = {amp}.",
        f"- Method (DLPerf): {m['iterations']} iterations per run, the first {m['skip']} skipped; throughput = "
        f"global batch x {m['iterations'] - m['skip']} / (t{m['iterations']} - t{m['skip']}), t = the clock when "
        f"an iteration's results reached the host; median of {m['runs']} runs, each in a fresh process.",
        f"- Command: `{setup['command']}`",
        "",
        "## Throughput (packed rows/s, median; rows per device)" if packed else
        "## Throughput (sequences/s, median; batch per device)",
        "",
        *_table(results, _throughput),
        "",
        *(["## Real sequences/s (median; a packed row holds several sequences)", "", *_table(results, _sequences), ""]
          if packed else []),
        "## Speed-up over 1 device (scaling efficiency)",
        "",
        *_table(results, _speedup),
        "",
        "## MFU",
        "",
        *_table(results, _mfu),
        "",
        f"MFU = model FLOPs per {unit} ({flops / 1e9:.2f} GFLOP: forward + backward = 3 x forward, the "
        f"masked-LM head on the {setup['pred']} predicted positions only"
        + (", the last layer's queries on the [CLS] and predicted positions only (--last-layer predicted)"
           if setup.get("last_layer") == "predicted" else "") + ") x throughput / the devices' peak. "
        "The peak is measured in the same run, after the training steps, by a large matrix product in the run's "
        "precision on one device, times the accelerators in use (N logical CPU devices share one host and count "
        "once).",
        "",
        *_peaks_searches_and_failures(configs),
        "Per run: `results.json` (every iteration's time), `logs/` (one log per run).",
    ]
    return "\n".join(lines) + "\n"


def _peaks_searches_and_failures(configs):
    """The report's closing sections, those that have something to say."""
    lines = []
    peaks = {}
    for config in configs:
        if config.get("peak_flops"):
            peaks.setdefault((config["dtype_policy"], config["devices"]), config["peak_flops"])
    if peaks:
        lines.append("Measured peaks: " + "; ".join(f"{policy}, {devices} device(s): {peak / 1e9:,.1f} GFLOP/s"
                                                    for (policy, devices), peak in peaks.items()) + ".")
        lines.append("")
    searches = [x for x in configs if x.get("max_search")]
    if searches:
        lines += ["## Max batch search", ""]
        for x in searches:
            probes = ", ".join(f"{p['batch_size']} {'fits' if p['fits'] else 'out of memory'}"
                               for p in x["max_search"])
            lines.append(f"- {devices_label(x['devices'], x['hosts'])} device(s), {x['precision']}: "
                         f"{x['batch_size'] or 'none'} ({probes})")
        lines.append("")
    failures = [x for x in configs if x["status"] != "ok"]
    if failures:
        lines += ["## Failures", ""]
        for x in failures:
            logs = ", ".join(r["log"] for r in x["runs"] if r.get("log"))
            lines.append(f"- {devices_label(x['devices'], x['hosts'])} device(s), {x['precision']}, batch "
                         f"{x['batch']}: {x['status']}: {x.get('error')}" + (f" ({logs})" if logs else ""))
        lines.append("")
    return lines


def plot(path, results):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    configs, setup = results["configs"], results["setup"]
    policies = {"amp": setup["amp"]}
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    most = 1
    for precision, batch in column_keys(configs):
        points = sorted((c["devices"], c["median"], c["speedup"]) for c in configs
                        if (c["precision"], c["batch"]) == (precision, batch) and c["median"])
        if not points:
            continue
        label = column_label(precision, batch, policies)
        devices = [p[0] for p in points]
        most = max(most, *devices)
        left.plot(devices, [p[1] for p in points], marker="o", label=label)
        scaled = [(d, s) for d, _, s in points if s is not None]
        if scaled:
            right.plot([d for d, _ in scaled], [s for _, s in scaled], marker="o", label=label)
    right.plot([1, most], [1, most], linestyle="--", color="grey", label="ideal")
    left.set(xlabel="devices", ylabel="packed rows/s (median)" if setup.get("packed") else "sequences/s (median)",
             title=f"{os.path.basename(setup['model'])} {setup['seq']}/{setup['pred']}, "
             f"{setup['backend']}")
    right.set(xlabel="devices", ylabel="speed-up over 1 device", title="scaling")
    counts = sorted({c["devices"] for c in configs})
    for axes in (left, right):
        axes.set_xticks(counts)
        axes.grid(True, alpha=0.3)
        if axes.get_legend_handles_labels()[0]:  # none ran: matplotlib warned in two lines of an empty legend
            axes.legend(fontsize=8)
    host = results["host"]
    figure.suptitle(f"{host['hostname']}: {host['accelerator'] or host['cpu']}", fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def write(out_dir, results):
    """report.md, results.json and throughput.png in `out_dir`; returns their paths."""
    paths = [os.path.join(out_dir, name) for name in ("report.md", "results.json", "throughput.png")]
    with open(paths[0], "w", encoding="utf-8") as f:
        f.write(markdown(results))
    with open(paths[1], "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)
    try:
        plot(paths[2], results)
    except ImportError:  # matplotlib is the `plot` extra
        paths.pop()
    return paths


def summary(results, out_dir, written):
    """results without the per-iteration times: what --json prints."""
    configs = [{k: v for k, v in c.items() if k != "runs"} | {"throughputs": [r.get("throughput") for r in c["runs"]]}
               for c in results["configs"]]
    return {"out": out_dir, "written": written, "configs": configs, "method": results["method"],
            "setup": {k: v for k, v in results["setup"].items() if k != "model_config"}, "seconds": results["seconds"]}


def summary_rows(results, written):
    rows = []
    policies = {"amp": results["setup"]["amp"]}
    for c in results["configs"]:
        label = (f"{devices_label(c['devices'], c['hosts'])} device(s), "
                 f"{column_label(c['precision'], c['batch'], policies)}")
        if c["status"] != "ok" or c["median"] is None:
            rows.append((label, f"{c['status']}: {c.get('error')}"))
            continue
        parts = [f"{_throughput(c)} rows/s ({_sequences(c)} real seq/s)" if results["setup"].get("packed")
                 else f"{_throughput(c)} seq/s"]
        if c["speedup"] is not None:
            parts.append(f"speed-up {_speedup(c)}")
        if c["mfu"] is not None:
            parts.append(f"MFU {c['mfu']:.1%}")
        rows.append((label, ", ".join(parts)))
    rows.append(("wrote", ", ".join(written) if written else "nothing (not the chief host: logs only)"))
    rows.append(("seconds", results["seconds"]))
    return rows
