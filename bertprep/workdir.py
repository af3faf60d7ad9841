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

import contextlib
import json
import os
import time

from bertprep import storage
from bertprep.atomic import STEPS
from bertprep.errors import DataError, UsageError
from bertprep.folder import Folder

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
    return storage.absolute(value or os.environ.get("BERTPREP_WORKDIR") or DEFAULT_WORKDIR)


def stage_dir(workdir, stage, *parts):
    return storage.join(resolve_workdir(workdir), stage, *parts)


def params_dirname(seq, pred, masked_lm_prob, seed, dupe_factor, lower_case=True, whole_word_mask=False):
    """NVIDIA's name for a records directory, e.g.
    lower_case_1_seq_len_128_max_pred_20_masked_lm_prob_0.15_random_seed_12345_dupe_factor_5"""
    name = (
        f"lower_case_{int(bool(lower_case))}_seq_len_{seq}_max_pred_{pred}"
        f"_masked_lm_prob_{masked_lm_prob}_random_seed_{seed}_dupe_factor_{dupe_factor}"
    )
    return name + ("_whole_word_mask" if whole_word_mask else "")


def nvidia_dirname(seq, pred, masked_lm_prob, seed, dupe_factor, lower_case, whole_word_mask, train_shards,
                   test_fraction):
    """NVIDIA's bertPrep name for a TFRecord directory, the one its training scripts hard-code, e.g.
    lower_case_1_seq_len_128_max_pred_20_masked_lm_prob_0.15_random_seed_12345_dupe_factor_5_shard_1472_test_split_10

    `train_shards` is the number of training shards asked of the shard stage and the test split
    is int(100 * fraction), both as bertPrep.py computes them; `_whole_word_mask` (a flag NVIDIA
    does not have) goes last."""
    name = params_dirname(seq, pred, masked_lm_prob, seed, dupe_factor, lower_case)
    name += f"_shard_{train_shards}_test_split_{int(test_fraction * 100)}"
    return name + ("_whole_word_mask" if whole_word_mask else "")


def check_corpus_name(corpus):
    """A corpus name becomes a directory and file-name prefix: one plain path component, never a path. Returned
    as a str (a Python caller's `corpus=Path("wiki")`, which the options' types take for a str, was a TypeError
    deep inside)."""
    corpus = os.fspath(corpus)
    if not corpus.replace("_", "").replace("-", "").isalnum():
        raise UsageError(f"--corpus {corpus!r}: use letters, digits, '_' and '-' only")
    return corpus


# The shape every stage's manifest keeps, checked before any stage relies on it.
_MANIFEST_KEYS = {"stage": str, "files": dict, "params": dict, "vocab": dict, "inputs": list}
_FILE_ENTRY_KEYS = {"bytes": int, "instances": int, "documents": int, "sha256": str, "source_sha256": str,
                    "settings": str, "format": str, "split": str, "source": str}


def manifest_shape_problem(manifest):
    """What makes a parsed manifest unusable (a phrase), or None when it has the expected shape."""
    if not isinstance(manifest, dict):
        return "not a JSON object"
    for key, kind in _MANIFEST_KEYS.items():
        if key in manifest and not isinstance(manifest[key], kind):
            return f'"{key}" is not a JSON {"object" if kind is dict else "array" if kind is list else "string"}'
    for name, entry in manifest.get("files", {}).items():
        if not isinstance(entry, dict):
            return f'files["{name}"] is not a JSON object'
        for key, kind in _FILE_ENTRY_KEYS.items():
            if key in entry and not isinstance(entry[key], kind):
                return f'files["{name}"]["{key}"] has the wrong type'
    return None


def read_manifest(path):
    """(manifest, None), or (None, what is wrong) for a manifest that is not JSON or not of the expected shape."""
    try:
        with storage.open(path, "rb") as f:
            manifest = json.loads(f.read().decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        return None, f"not JSON ({exc})"
    problem = manifest_shape_problem(manifest)
    return (None, problem) if problem else (manifest, None)


def inside_its_folder(name):
    """Whether a file name of a manifest (or a claim) stays inside the folder it is relative to: no absolute path
    or `..` step (joined to a root, a URL-like name is a name under it)."""
    return bool(name) and not name.startswith("/") and ".." not in name.split("/")


def refuse_names_outside(directory, names):
    """A DataError, as load_manifest's for a damaged manifest, naming the first of `names` (an earlier run's
    manifest's files, relative to `directory`: a Folder or a path) that leads outside it. Stages remove an earlier
    run's files by these names: a manifest that listed `../../notes.txt` (edited, or copied from elsewhere) had
    tokenize, create and shard delete that file outside their output, with a warning, exit 0."""
    folder = Folder.of(directory)
    for name in names:
        if not inside_its_folder(name):
            raise DataError(f'{folder.display(MANIFEST)}: damaged manifest (files["{name}"] names a file outside '
                            "its folder); remove it to redo this stage from scratch")


def load_manifest(directory):
    """The manifest of a stage directory (a Folder or a path), or None when there is none; a damaged one is an
    error.

    Manifests are written whole (atomic rename), so one that does not parse
    or has the wrong shape was changed by something else: say so instead of
    guessing which files it vouches for.
    """
    folder = Folder.of(directory)
    path = folder.path(MANIFEST)
    if not folder.isfile(MANIFEST):
        return None
    manifest, problem = read_manifest(path)
    if problem:
        raise DataError(f"{path}: damaged manifest ({problem}); remove it to redo this stage from scratch")
    return manifest


def refuse_another_stages(directory, stage, choose):
    """A DataError when the output `directory` (a Folder or a path) holds a manifest of another stage or tool: the
    run would replace it and remove the files it lists as an earlier run's (tokenize into a shard folder deleted
    the text shards with a warning). `choose` names the flags that pick another directory."""
    manifest = load_manifest(directory)
    if manifest is not None and manifest.get("stage") != stage:
        raise DataError(f"{storage.display(Folder.of(directory).path(MANIFEST))}: a manifest of bertprep "
                        f"{manifest.get('stage') or 'another tool'}, not of {stage}: {stage} would replace it and "
                        f"remove the files it lists; choose another {choose}")


def file_matches(path, entry):
    """Whether the file at `path` is the one a manifest `entry` lists, for a rerun to keep it (storage.holds)."""
    return storage.holds(path, entry.get("bytes"), entry.get("sha256"))


def outputs_complete(directory, entries, relatives, source_sha256, settings, fields=()):
    """Whether a task's outputs (`relatives`, under `directory`: a Folder or a path) are done, for a rerun to keep
    them: each has a manifest entry for the same source and settings, holding `fields` (what the summary reads
    back), and the file that entry lists (`file_matches`)."""
    folder = Folder.of(directory)
    for relative in relatives:
        entry = entries.get(relative)
        if (not entry or entry.get("source_sha256") != source_sha256 or entry.get("settings") != settings
                or any(field not in entry for field in fields)):
            return False
        if not file_matches(folder.path(relative), entry):
            return False
    return True


def forget_outputs(entries, relatives):
    """Remove from `entries` (a manifest's files) those of `relatives`, the outputs a run is about to rewrite; whether
    any were there. Saved before the first is written: a run killed between a file's rename and its new entry had
    left the earlier run's entry over this run's bytes, and a rerun with the earlier settings kept them (sizes
    agree for a vocab of the same size)."""
    found = [relative for relative in relatives if relative in entries]
    for relative in found:
        del entries[relative]
    return bool(found)


def save_manifest(directory, manifest):
    """Atomically replace the manifest of `directory` (a Folder or a path); keys sorted so equal content gives
    equal bytes."""
    data = json.dumps(manifest, indent=1, sort_keys=True).encode() + b"\n"
    Folder.of(directory).atomic_write_bytes(MANIFEST, data)


# How often a stage that lists its shards in a manifest as they finish saves it: it is rewritten whole and fsynced,
# and saved after every shard a corpus of N shards wrote O(N²) bytes (2,000 tiny shards: 1.8 GB, tokenize 203 s;
# docs/benchmarks.md). A save that takes longer stretches the pace to PACE_FACTOR times its length.
SAVE_EVERY_S = 1.0
PACE_FACTOR = 10


class PacedSaves:
    """The saves of a manifest that grows as shards finish (`save`: a function of no arguments): the first change
    at once (a first run's manifest appears with its first shard), then at most once per SAVE_EVERY_S (or
    PACE_FACTOR times the last save's length), and what is unsaved when the `paced_saves` block ends, however it
    ends. A run killed outright leaves the files of its last unsaved shards unlisted, as a kill between a shard's
    rename and its save did: a rerun redoes them, never taking them for complete."""

    def __init__(self, save):
        self.save, self.next_at, self.unsaved = save, float("-inf"), False

    def changed(self):
        self.unsaved = True
        if time.monotonic() >= self.next_at:
            self.flush()

    def flush(self):
        if not self.unsaved:
            return
        started = time.monotonic()
        self.save()
        self.unsaved = False
        ended = time.monotonic()
        self.next_at = ended + max(SAVE_EVERY_S, PACE_FACTOR * (ended - started))


@contextlib.contextmanager
def paced_saves(save):
    """A PacedSaves of `save` whose unsaved changes are saved when the block ends: before its error is raised
    too, for what a failed run finished to be kept (a failure of that save leaves the run's own error told)."""
    saves = PacedSaves(save)
    try:
        yield saves
    except BaseException:
        with contextlib.suppress(Exception):
            saves.flush()
        raise
    saves.flush()


def removed_warning(names, shown=5):
    """A stage's warning for the files of an earlier run it removed from its output (`names` relative to it):
    how many, the first `shown` named. A warning, not only a progress note: a quiet Python caller hears of it
    too (issue 57: a rerun with fewer inputs deleted the earlier run's files without a word)."""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return f"removed {len(names)} file(s) of an earlier run that this run does not write: " \
           f"{', '.join(names[:shown])}{more}"


def setting_changes(before, now, names):
    """`name was A, now B` for each of `names` (sorted) whose value in an earlier run's settings `before` differs
    from this run's `now`: what a rerun's replacing warning names."""
    return [f"{name} was {before[name]}, now {now.get(name)}" for name in sorted(names)
            if before[name] != now.get(name)]


def other_settings_warning(outputs, directory, changes):
    """The warning of a rerun that replaces the `outputs` an earlier run wrote into its `directory` with other
    settings (`changes`, as setting_changes words them). create and shard word it alike: replacing is what a
    rerun into the same --out is for, so it is said, not refused."""
    return (f"replacing the {outputs} an earlier run wrote here with other settings ({'; '.join(changes)}): a "
            f"{directory} holds one setting; give another --out to keep both")


def other_inputs_warning(outputs, directory, before, now, keep="--out"):
    """other_settings_warning's line for a rerun from other inputs (`before` and `now` say which)."""
    return (f"replacing the {outputs} an earlier run wrote here from other inputs (inputs were {before}, now "
            f"{now}): a {directory} holds the {outputs} of one set of inputs; give another {keep} to keep both")


def read_claim(staging, claim):
    """The names a run's `claim` (a JSON list in the STEPS of its staging directory `staging`, which a killed run
    leaves) holds; none without one, or where it is no JSON list (the files are then refused, never taken for
    the run's own)."""
    steps = Folder(staging).folder(STEPS)
    if not steps.isfile(claim):
        return set()
    try:
        names = json.loads(steps.read_bytes(claim))
    except ValueError:
        return set()
    if not isinstance(names, list):
        return set()
    return {name for name in names if isinstance(name, str) and inside_its_folder(name)}


def write_claim(staging, claim, names):
    """Claim `names` in the run's `claim` in the STEPS of its staging directory `staging` (read_claim's); none:
    remove the claim, and STEPS with it, for the tree's .partial/ to go."""
    steps = Folder(staging).folder(STEPS)
    if names:
        steps.atomic_write_bytes(claim, json.dumps(sorted(names)).encode(), staging)
    elif steps.isfile(claim):
        Folder(staging).remove_tree(STEPS)


def refuse_unlisted(folder, names, reader, ours=None):
    """A DataError naming the first of `names` (files relative to the Folder `folder`) that its manifest does not
    list, where the manifest lists its files: a file of another run or corpus in a stage's output, which `reader`
    globbing the folder would take with the rest (issue 57: `dedup --out` into a corpus folder left its other
    .jsonl files there, and `shard` read them into training). A manifest that lists nothing checks nothing.

    With `ours`, the names a stage's own runs wrote in its output `folder` (its manifest's, a killed run's),
    `reader` says what the stage would do to the others, and every other name is refused, manifest or not:
    with none, a file named like the stage's outputs may be the user's, and taking it for a killed run's would
    overwrite or delete it."""
    if ours is not None:
        stray = [name for name in names if name not in ours]
        if stray:
            raise DataError(f"{folder.display(stray[0])}: no manifest of bertprep lists it (a file of yours or of "
                            f"another tool?): {reader}; remove it, or choose another --out")
        return
    listed = (load_manifest(folder) or {}).get("files") or {}
    stray = [name for name in names if name not in listed] if listed else []
    if stray:
        raise DataError(f"{folder.display(stray[0])}: not listed in {folder.display(MANIFEST)} (a file of another "
                        f"run or corpus?): {reader} would read it with the files listed; remove it, or give the "
                        "files you mean")


def refuse_repeated_inputs(named):
    """A UsageError for the first input file that two --input values (or one given twice) name, `named` being
    [(file, the --input value that named it)] in order: read twice, `shard` doubled its documents, and
    `create`/`tokenize`, which kept one, left the repeat out without a word."""
    first = {}
    for path, value in named:
        # links resolved: `--input a.txt link.txt` (link.txt -> a.txt) read one file twice, without a word
        key = storage.comparable(path)
        if key in first:
            earlier, earlier_value = first[key]
            if storage.absolute_normpath(earlier) != storage.absolute_normpath(path):
                raise UsageError(f"--input {storage.display(path)}: the same file as {storage.display(earlier)} (by "
                                 f"--input {earlier_value!r}), through a link; give each input file once")
            how = f"--input {earlier_value!r} given twice" if earlier_value == value else \
                f"by --input {earlier_value!r} and by --input {value!r}"
            raise UsageError(f"--input {storage.display(path)}: named twice ({how}); give each input file once")
        first[key] = (path, value)


def resuming_note(kept, total):
    """The progress note of a rerun that keeps `kept` of `total` shards, saying what keeping trusts: a local
    output of the recorded size is kept unread, so a byte changed in place is found by `bertprep validate`,
    not here (issue 57: a flipped byte was "already complete" without saying what was checked)."""
    return (f"resuming: {kept} of {total} shards already complete (same input sha256 and settings, output files "
            "of the recorded size; `bertprep validate` checks their bytes)")
