"""Length binning: batches whose sequences have similar lengths, padded only to their bin's width.

For frameworks without packed attention. A sequence of length L falls in bin
(L - 1) // bin_size; a batch holds sequences of one bin and is cut to that
bin's longest possible length rounded up to a multiple of 8 (so a model sees
at most seq / bin_size shapes). The plan is a pure function of the epoch's
order and the lengths, so every rank computes the same batches and bins.
"""

import numpy as np


def bins_of(lengths, bin_size):
    return (np.asarray(lengths, np.int64) - 1).clip(0) // bin_size


def bin_width(bin_index, bin_size, seq):
    """The columns a batch of bin `bin_index` keeps: the bin's longest length rounded up to 8, at most seq."""
    longest = (int(bin_index) + 1) * bin_size
    return min(seq, -(-longest // 8) * 8)


def uncut_bins_reason(bin_size, seq):
    """Why a `bin_size` cuts no batch of `seq`-token records (their loader refuses it), or None where it cuts some:
    at or above seq every record is in one bin; just below it every bin's width still rounds up to seq (57-63 of
    64), so the batches are only regrouped by length, none shortened."""
    if bin_size >= seq:
        return f"the records' sequences are {seq} tokens, one bin of them all: give a bin size below {seq}"
    if bin_width(0, bin_size, seq) < seq:
        return None
    most = (seq - 1) // 8 * 8
    return (f"the records' sequences are {seq} tokens and a bin's width is rounded up to a multiple of 8, so every "
            f"bin keeps all {seq} and no batch is cut: "
            + (f"give a bin size of at most {most}" if most else "leave binning out"))


def binned_batches(order, bins, batch_size, rng, drop_last=True):
    """Batches (arrays of record positions) from `order` (the epoch's shuffled positions), each of one bin.

    Each bin's records keep their order in `order` and are cut into batches
    of `batch_size` (a bin's last, short batch is dropped with drop_last);
    the batches of all bins are then put in an order drawn from `rng`, so the
    bins come mixed through the epoch.
    """
    order = np.asarray(order, np.int64)
    record_bins = np.asarray(bins)[order]
    batches = []
    for b in np.unique(record_bins):
        members = order[record_bins == b]
        cut = len(members) - len(members) % batch_size if drop_last else len(members)
        batches += [members[i:i + batch_size] for i in range(0, cut, batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]

