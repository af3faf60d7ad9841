"""How far `python -m trainer checkpoint run` outputs lie from another project's own (a fixture's expected/).

    python -m trainer checkpoint run SRC --inputs inputs.jsonl --out ours.npz
    python scripts/compare_checkpoint_outputs.py ours.npz ../shared/fixtures/checkpoints/google_tiny/expected

Prints the largest absolute difference per array. The MLM logits are compared at the positions
the expected file holds (the first P masked positions of each input). Names: ours, then Google's
and Hugging Face's for the same array.
"""

import argparse
import os

import numpy as np

NAMES = {
    "sequence_output": ("sequence_output", "last_hidden_state"),
    "pooled_output": ("pooled_output", "pooler_output"),
    "mlm_logits": ("prediction_logits",),
    "nsp_logits": ("seq_relationship_logits",),
}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("ours", help="npz of `python -m trainer checkpoint run`")
    p.add_argument("expected", help="directory of the other project's .npy files")
    args = p.parse_args()
    if not os.path.isfile(args.ours):
        p.error(f"{args.ours}: not a file (the npz `python -m trainer checkpoint run --out` wrote)")
    if not os.path.isdir(args.expected):
        p.error(f"{args.expected}: not a directory (a fixture's expected/, of .npy files)")
    compared = 0
    with np.load(args.ours) as ours:
        for name, theirs in NAMES.items():
            path = next((os.path.join(args.expected, f"{t}.npy") for t in theirs
                         if os.path.exists(os.path.join(args.expected, f"{t}.npy"))), None)
            if name not in ours.files or path is None:
                continue
            expected = np.load(path)
            got = ours[name][:, :expected.shape[1]] if name == "mlm_logits" else ours[name]
            if got.shape != expected.shape:
                raise SystemExit(f"compare_checkpoint_outputs.py: {name}: ours is {list(got.shape)}, {path} is "
                                 f"{list(expected.shape)}: not outputs of the same inputs and model")
            compared += 1
            print(f"{name:16s} max |ours - theirs| = {float(np.abs(got - expected).max()):.3g}  "
                  f"({os.path.basename(path)})")
    if not compared:  # a wrong directory compared nothing, and said nothing, exit 0
        raise SystemExit(f"compare_checkpoint_outputs.py: nothing to compare: {args.expected} holds none of "
                         f"{', '.join(t + '.npy' for names in NAMES.values() for t in names)} for an array of "
                         f"{args.ours}")


if __name__ == "__main__":
    main()
