"""The work directory shared by all stages (mirrors NVIDIA's bertPrep layout).

    WORKDIR/download/<source>/...                         raw files + checksums
    WORKDIR/formatted/<corpus>/...                        extracted documents
    WORKDIR/sharded/<corpus>/{training,test}/<corpus>_{training,test}_<i>.txt
    WORKDIR/records/<params>/<corpus>/manifest.json
    WORKDIR/records/<params>/<corpus>/tfrecord/{training,test}/<shard>.tfrecord
    WORKDIR/records/<params>/<corpus>/ofrecord/{training,test}/part-<i>

Each stage reads the previous stage's directory by default and writes its
own, with a manifest.json saying what is complete.
"""

import json
import os

from bertprep.atomic import atomic_write_bytes

DEFAULT_WORKDIR = "bertprep-work"
SPLITS = ("training", "test")
MANIFEST = "manifest.json"


def add_workdir_argument(parser):
    parser.add_argument(
        "--workdir",
        default=None,
        help=f"work directory (default: $BERTPREP_WORKDIR or ./{DEFAULT_WORKDIR})",
    )


def resolve_workdir(value=None):
    return os.path.abspath(value or os.environ.get("BERTPREP_WORKDIR") or DEFAULT_WORKDIR)


def stage_dir(workdir, stage, *parts):
    return os.path.join(resolve_workdir(workdir), stage, *parts)


def params_dirname(seq, pred, masked_lm_prob, seed, dupe_factor, lower_case=True, whole_word_mask=False):
    """NVIDIA's name for a records directory, e.g.
    lower_case_1_seq_len_128_max_pred_20_masked_lm_prob_0.15_random_seed_12345_dupe_factor_5"""
    name = (
        f"lower_case_{int(bool(lower_case))}_seq_len_{seq}_max_pred_{pred}"
        f"_masked_lm_prob_{masked_lm_prob}_random_seed_{seed}_dupe_factor_{dupe_factor}"
    )
    return name + ("_whole_word_mask" if whole_word_mask else "")


def load_manifest(directory):
    """The manifest of a stage directory, or None when there is none (or it is unreadable)."""
    path = os.path.join(directory, MANIFEST)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
        return None


def save_manifest(directory, manifest):
    """Atomically replace the manifest (keys sorted so equal content gives equal bytes)."""
    data = json.dumps(manifest, indent=1, sort_keys=True).encode() + b"\n"
    atomic_write_bytes(os.path.join(directory, MANIFEST), data)
