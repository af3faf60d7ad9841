"""Which sequences share a row: a histogram-based packing strategy, its baseline, and its lower bound.

Packing is bin packing with a second limit: at most `seq` tokens and at most
`k` sequences per row (and, because records are already masked, at most
`pred + k` predictions). Sequences are described by their lengths only, so
the strategy works on the length histogram of one shard, and its cost grows
with the number of distinct lengths, not the number of sequences.

Largest-first best fill: open a row with the longest sequence left; while
more than two slots remain, add the longest sequence that fits (`fill`
"tokens": best when rows run out of room) or the longest that still leaves
room for the shortest sequence in each other slot (`fill` "slots": best
when rows run out of slots; with k > 3 both are tried and the fewer rows
kept); fill the last two slots with the pair (or the single sequence) of
the largest total that fits. The same row is made again as long as its
lengths last, so each distinct row is one step: `compositions` returns
(count, lengths) and `assign` hands out real sequences, in input order, to
those rows.

`first_fit_decreasing` is the usual baseline (every sequence, longest first,
into the first row it fits), over the histogram too. `pack` keeps whichever
of them gives the fewest rows, so it never needs more than first-fit
decreasing; best fill needed fewer rows on the benchmark corpora, first-fit
decreasing on the golden set G1 (docs/benchmarks.md).
`lower_bound` is the fewest rows any strategy can reach:
max(⌈Σ lengths / seq⌉, ⌈n / k⌉).
"""

import numpy as np


def compositions(histogram, seq, k, fill="slots"):
    """[(count, lengths)]: `count` rows each holding sequences of `lengths` (descending), for
    `histogram[l]` sequences of length l (1 <= l <= seq). Deterministic; uses every sequence once.
    `fill` ("slots" or "tokens") is the rule for the slots before the last two."""
    left = np.array(histogram, dtype=np.int64)
    if len(left) != seq + 1 or left[0]:
        raise ValueError(f"histogram must have seq + 1 = {seq + 1} counts and none of length 0")
    rows = []
    longest = seq
    while True:
        while longest > 0 and left[longest] == 0:
            longest -= 1
        if longest == 0:
            return rows
        lengths = [longest]
        left[longest] -= 1
        room = seq - longest
        while k - len(lengths) > 2:
            chosen = _longest_leaving_room(left, room, k - len(lengths) if fill == "slots" else 1)
            if chosen is None:
                break
            lengths.append(chosen)
            left[chosen] -= 1
            room -= chosen
        if k - len(lengths) >= 1:
            for length in _best_fill(left, room, pair=k - len(lengths) >= 2):
                lengths.append(length)
                left[length] -= 1
        # Make this row as often as its lengths last: the choice depends only on which lengths are left.
        uses = {}
        for length in lengths:
            left[length] += 1
            uses[length] = uses.get(length, 0) + 1
        count = min(int(left[length]) // used for length, used in uses.items())
        for length, used in uses.items():
            left[length] -= count * used
        rows.append((count, tuple(lengths)))


def _available(left, room):
    """The lengths 1..room that have sequences left, ascending."""
    return np.flatnonzero(left[1:room + 1]) + 1


def _longest_leaving_room(left, room, slots):
    """The longest length that fits and leaves room for the shortest one in each of the other `slots - 1`
    (None if none: the row cannot have all its slots filled, and best fill takes over)."""
    available = _available(left, room)
    fitting = available[available <= room - (slots - 1) * available[0]] if len(available) else available
    return int(fitting[-1]) if len(fitting) else None


def _best_fill(left, room, pair):
    """The lengths of the largest total <= room: one length, or (with `pair`) two, from those left.

    Among pairs of the same total, the most unequal (its shorter length the
    shortest): medium lengths stay for the rows opened later, which have
    more room.
    """
    available = _available(left, room)
    if not len(available):
        return ()
    single = int(available[-1])
    if not pair:
        return (single,)
    # For each length a, the longest partner b >= a with a + b <= room (b = a needs two sequences).
    partner = np.searchsorted(available, room - available, side="right") - 1
    alone = (partner >= 0) & (available[np.maximum(partner, 0)] == available) & (left[available] < 2)
    partner -= alone
    valid = partner >= np.arange(len(available))
    if not valid.any():
        return (single,)
    shorter = available[valid]
    longer = available[partner[valid]]
    totals = shorter + longer
    best = int(np.argmax(totals))  # first maximum: the shortest `shorter`
    if totals[best] <= single:
        return (single,)
    return int(longer[best]), int(shorter[best])


def assign(lengths, rows, k):
    """The sequences of each row: an (n_rows, k) array of indices into `lengths`, -1 where a row has
    fewer sequences. Each length's sequences are handed out in input order."""
    lengths = np.asarray(lengths)
    order = np.argsort(lengths, kind="stable")
    starts = np.searchsorted(lengths[order], np.arange(lengths.max(initial=0) + 2))
    taken = starts[:-1].copy()  # next unassigned position in `order`, per length
    members = np.full((sum(count for count, _ in rows), k), -1, dtype=np.int64)
    first = 0
    for count, row in rows:
        for slot, length in enumerate(row):
            members[first:first + count, slot] = order[taken[length]:taken[length] + count]
            taken[length] += count
        first += count
    if (taken != starts[1:]).any():
        raise ValueError("the rows do not use every sequence exactly once")
    return members


def pack(lengths, predictions, seq, pred, k):
    """The rows of one shard and the strategy that made them: ((n_rows, k) indices into `lengths`,
    -1 pads, name). Each row's sequences are in input order and rows in the order of their first
    sequence, so a shuffled input stays shuffled.

    A row whose sequences hold more than `pred + k` predictions between them
    (possible only when masked_lm_prob × seq exceeds pred) gives its last
    sequences rows of their own.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    predictions = np.asarray(predictions, dtype=np.int64)
    if not len(lengths):
        return np.zeros((0, k), dtype=np.int64), None
    strategy, rows = fewest_rows(np.bincount(lengths, minlength=seq + 1), seq, k)
    members = assign(lengths, rows, k)
    members = _within_prediction_slots(members, predictions, pred + k)
    members = np.sort(np.where(members < 0, np.iinfo(np.int64).max, members), axis=1)
    members[members == np.iinfo(np.int64).max] = -1
    return members[np.argsort(members[:, 0], kind="stable")], strategy


def fewest_rows(histogram, seq, k):
    """(strategy name, compositions) of the fewest rows among best fill (both rules) and first-fit
    decreasing; on a tie the first in that order. Never more rows than first-fit decreasing."""
    candidates = {"best fill": compositions(histogram, seq, k, "slots")}
    if k > 3:  # with at most two slots after the first the two rules agree
        candidates["best fill (tokens)"] = compositions(histogram, seq, k, "tokens")
    candidates["first-fit decreasing"] = first_fit_decreasing(histogram, seq, k)
    return min(candidates.items(), key=lambda item: row_count(item[1]))


def row_count(rows):
    return sum(count for count, _ in rows)


def _within_prediction_slots(members, predictions, slots):
    used = np.where(members >= 0, predictions[np.maximum(members, 0)], 0)
    over = np.flatnonzero(used.sum(axis=1) > slots)
    if not len(over):
        return members
    extra = []
    for row in over.tolist():
        while used[row].sum() > slots:
            last = int(np.flatnonzero(members[row] >= 0)[-1])
            extra.append(members[row, last])
            members[row, last], used[row, last] = -1, 0
    spilled = np.full((len(extra), members.shape[1]), -1, dtype=np.int64)
    spilled[:, 0] = extra
    return np.concatenate([members, spilled])


def first_fit_decreasing(histogram, seq, k):
    """[(count, lengths)] of first-fit decreasing: each sequence, longest first, goes into the first
    row (in the order rows were opened) with room and fewer than k sequences.

    Over the histogram: rows that are alike form a group, and the c sequences
    of one length fill a group's rows one after the other, as many per row as
    fit, which is what placing them one at a time does.
    """
    open_rows = []  # [count, lengths, room] in the order the rows were opened
    closed = []
    for length in range(seq, 0, -1):
        left = int(histogram[length])
        if not left:
            continue
        updated = []
        for count, lengths, room in open_rows:
            per_row = min(room // length, k - len(lengths)) if left else 0
            if per_row == 0:
                updated.append([count, lengths, room])
                continue
            filled = min(count, left // per_row)
            left -= filled * per_row
            if filled:
                updated.append([filled, lengths + (length,) * per_row, room - per_row * length])
            if filled < count and left:  # the next row takes the rest
                updated.append([1, lengths + (length,) * left, room - left * length])
                filled, left = filled + 1, 0
            if count > filled:
                updated.append([count - filled, lengths, room])
        per_row = min(seq // length, k)
        if left // per_row:
            updated.append([left // per_row, (length,) * per_row, seq - per_row * length])
        if left % per_row:
            updated.append([1, (length,) * (left % per_row), seq - (left % per_row) * length])
        open_rows = []
        for row in updated:
            (closed if len(row[1]) == k or row[2] == 0 else open_rows).append(row)
    return [(count, lengths) for count, lengths, _ in closed + open_rows]


def lower_bound(lengths, seq, k):
    """The fewest rows any packing of these lengths can have."""
    lengths = np.asarray(lengths, dtype=np.int64)
    return max(-(-int(lengths.sum()) // seq), -(-len(lengths) // k))
