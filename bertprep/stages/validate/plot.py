"""`bertprep validate --plot`: length histogram, mask rate by position and NSP balance in one PNG; for token
sequences (tokenize's), their lengths and the sequences per document."""

# A Figure of its own, not pyplot: no backend is chosen or switched (a notebook's inline plots stay as
# they are when a report draws itself there), and nothing is left open in pyplot's figure list.
from matplotlib.figure import Figure

from bertprep.atomic import atomic_open


def plot_report(report, path):
    """Draw the statistics of every records dataset in `report` (one row of three panels per format/split)."""
    groups = [(f"{fmt} {split}", figures) for section in report["datasets"]
              for fmt, splits in section["stats"].items() for split, figures in splits.items()]
    sequence_sets = [section for section in report.get("sequences") or () if section.get("length_histogram")]
    rows = max(len(groups) + len(sequence_sets), 1)
    fig = Figure(figsize=(15, 3.6 * rows))
    axes = fig.subplots(rows, 3, squeeze=False)
    for (label, s), (ax_len, ax_pos, ax_nsp) in zip(groups, axes):
        hist = s["length_histogram"]
        ax_len.bar(range(len(hist)), hist, width=1.0)
        ax_len.set_title(f"{label}: sequence length ({s.get('instances', s.get('records')):,} records)")
        ax_len.set_xlabel("real tokens")
        if "mask_rate_by_position" not in s:  # fine-tuning records: their answers or labels instead
            _plot_finetune(label, s, ax_pos)
            ax_nsp.axis("off")
            continue
        rate = s["mask_rate_by_position"]
        ax_pos.plot(range(len(rate)), rate)
        ax_pos.axhline(s["expected_mask_rate"], color="gray", linestyle="--", linewidth=0.8)
        ax_pos.set_title(f"{label}: mask rate by position (overall {s['mask_rate']:.4f})")
        ax_pos.set_xlabel("position")
        nsp = s["nsp"]
        ax_nsp.bar(["IsNext (0)", "RandomNext (1)", "other"], [nsp["is_next"], nsp["random_next"], nsp["other"]])
        ax_nsp.set_title(f"{label}: NSP labels")
    for section, (ax_len, ax_doc, ax_off) in zip(sequence_sets, axes[len(groups):]):
        _plot_sequences(section, ax_len, ax_doc)
        ax_off.axis("off")
    if not groups and not sequence_sets:
        axes[0][0].text(0.5, 0.5, "no records", ha="center")
    fig.tight_layout()
    with atomic_open(path) as f:
        fig.savefig(f, format="png", dpi=80)


def _plot_sequences(section, ax_len, ax_doc):
    """A tokenize output's row: sequences by length, documents by their count of sequences (the last bin of
    each holds every longer one, sequences.HISTOGRAM_BINS)."""
    label = f"{section['format']} sequences"
    hist = section["length_histogram"]
    ax_len.bar(range(len(hist)), hist, width=1.0)
    ax_len.set_title(f"{label}: length ({section['sequences']:,} sequences)")
    ax_len.set_xlabel("tokens")
    docs = section["document_histogram"]
    ax_doc.bar(range(len(docs)), docs, width=1.0)
    ax_doc.set_title(f"{label}: per document ({section['documents']:,} documents)")
    ax_doc.set_xlabel("sequences in the document")


def _plot_finetune(label, s, ax):
    if "answers" in s:
        ax.bar(["answer in window", "not in window", "impossible"], list(s["answers"].values()))
        ax.set_title(f"{label}: SQuAD answers")
    elif "labels" in s:
        ax.bar(list(s["labels"]), list(s["labels"].values()))
        ax.set_title(f"{label}: label ids")
    else:
        ax.axis("off")
