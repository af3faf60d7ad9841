"""Dynamic masking (`create --masking dynamic`, bertprep.masking), the PyTorch loader (bertprep.torch) and
length binning: masks keyed by (seed, epoch, instance) whatever the workers, ranks or restarts, the
reference's rules, the vectorised masks equal to their plain-Python twin, resume mid-epoch exact."""

import glob
import os
import re

import numpy as np
import pytest

from bertprep import formats, masking
from bertprep.binning import bin_width, binned_batches, bins_of
from bertprep.cli import main as bertprep_main
from bertprep.instances import MaskingVocab
from bertprep.stages.create import sample_paths
from bertprep.tokenization import load_vocab


def create(out, *extra):
    corpus, vocab = sample_paths()
    assert bertprep_main(["create", "--input", corpus, "--vocab", vocab, "--out", str(out), "--seq", "64",
                          "--pred", "10", "--workers", "1", "--corpus", "sample", "--quiet", *extra]) == 0
    found = glob.glob(os.path.join(str(out), "*", "sample"))
    assert len(found) == 1
    return found[0]


@pytest.fixture(scope="module")
def dynamic_dir(tmp_path_factory):
    return create(tmp_path_factory.mktemp("dynamic"), "--masking", "dynamic")


@pytest.fixture(scope="module")
def vocab():
    return MaskingVocab.from_vocab(load_vocab(sample_paths()[1]))


def training_files(directory, fmt):
    """The split's files in instance order (the sample corpus ships as several shards)."""
    return sorted(glob.glob(os.path.join(directory, fmt, "training", "*")),
                  key=lambda path: [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path)])


def all_records(directory, fmt="tfrecord"):
    return next(formats.read_batches(training_files(directory, fmt), 1 << 20, fmt))


def test_unmasked_records_are_the_static_instances_with_their_masks_given_back(dynamic_dir, tmp_path):
    assert "dupe_factor_1_dynamic_masking" in dynamic_dir  # dupe 1 by default, a directory of its own
    static = all_records(create(tmp_path, "--dupe-factor", "1"))
    dynamic = all_records(dynamic_dir)
    assert set(dynamic) == {"input_ids", "input_mask", "segment_ids", "next_sentence_labels"}
    restored = static["input_ids"].copy()
    rows, slots = np.nonzero(static["masked_lm_weights"])
    restored[rows, static["masked_lm_positions"][rows, slots]] = static["masked_lm_ids"][rows, slots]
    for name in ("input_mask", "segment_ids", "next_sentence_labels"):
        assert np.array_equal(static[name], dynamic[name]), name
    assert np.array_equal(restored, dynamic["input_ids"])
    assert np.array_equal(all_records(dynamic_dir, "ofrecord")["input_ids"], dynamic["input_ids"])


def test_dynamic_masking_refuses_nvidias_layout(tmp_path, capsys):
    corpus, vocab = sample_paths()
    assert bertprep_main(["create", "--input", corpus, "--vocab", vocab, "--out", str(tmp_path),
                          "--masking", "dynamic", "--layout", "nvidia"]) == 2
    assert "--layout nvidia" in capsys.readouterr().err


def synthetic_batch(vocab, count=400, seq=64, seed=0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(5, seq + 1, count)
    mask = (np.arange(seq)[None] < lengths[:, None]).astype(np.int64)
    ids = rng.integers(0, len(vocab.is_subword), (count, seq))
    rows = np.arange(count)
    ids[rows, 0], ids[rows, lengths - 1], ids[rows, lengths // 2] = vocab.cls_id, vocab.sep_id, vocab.sep_id
    return ids * mask, mask, lengths


def native_built():
    return masking._native_mask_batch is not None


PATHS = [pytest.param(True, id="C-core", marks=pytest.mark.skipif(not native_built(), reason="C core not built")),
         pytest.param(False, id="numpy")]


@pytest.mark.parametrize("use_native", PATHS)
@pytest.mark.parametrize("whole_word", [False, True])
def test_vectorised_masks_equal_the_plain_python_twin(vocab, whole_word, use_native):
    ids, mask, lengths = synthetic_batch(vocab)
    keys = masking.instance_keys(7, 3, np.arange(len(ids)) + 100)
    out = masking.mask_batch(ids, mask, keys, 20, 0.15, vocab, whole_word, use_native=use_native)
    for i, length in enumerate(lengths):
        key = masking.instance_key(7, 3, 100 + i)
        assert key == int(keys[i])
        tokens, positions, labels = masking.mask_instance(ids[i, :length].tolist(), key, 20, 0.15, vocab, whole_word)
        n = len(positions)
        assert out["input_ids"][i, :length].tolist() == tokens
        assert out["masked_lm_positions"][i, :n].tolist() == positions
        assert out["masked_lm_ids"][i, :n].tolist() == labels
        assert out["masked_lm_weights"][i].tolist() == [1.0] * n + [0.0] * (20 - n)
        assert not out["input_ids"][i, length:].any()


def subword_heavy_batch(vocab, count, seq, seed):
    """Rows of mostly "##" pieces: long whole words, so a word often overflows the budget and is skipped."""
    ids, mask, lengths = synthetic_batch(vocab, count, seq, seed)
    rng = np.random.default_rng(seed)
    pieces = np.flatnonzero(vocab.is_subword)
    heavy = (rng.random(ids.shape) < 0.8) & (mask != 0) & ~np.isin(ids, [vocab.cls_id, vocab.sep_id])
    ids[heavy] = rng.choice(pieces, heavy.sum())
    return ids, mask, lengths


@pytest.mark.skipif(not native_built(), reason="C core not built (python setup.py build_ext --inplace)")
@pytest.mark.parametrize("seq, pred, prob", [(128, 20, 0.15), (512, 80, 0.15), (16, 3, 0.15), (64, 0, 0.15),
                                             (64, 10, 0.5), (8, 2, 0.15)])
def test_c_core_masks_equal_the_numpy_form_exactly(vocab, seq, pred, prob):
    """Thousands of rows at several shapes (short rows, a zero budget, rows of only specials, long words):
    the C core's selection shortcuts (a bound on the keys, quickselect, the whole-word retry) change nothing."""
    for whole_word in (False, True):
        for make in (synthetic_batch, subword_heavy_batch):
            ids, mask, _ = make(vocab, 1500, seq, seed=seq + pred)
            ids[:5, 1:] = np.where(mask[:5, 1:] != 0, vocab.sep_id, 0)  # [CLS] then only [SEP]s: no candidate
            keys = masking.instance_keys(11, 4, np.arange(len(ids)) * 13)
            fast = masking.mask_batch(ids, mask, keys, pred, prob, vocab, whole_word, use_native=True)
            slow = masking.mask_batch(ids, mask, keys, pred, prob, vocab, whole_word, use_native=False)
            for name in slow:
                assert fast[name].dtype == slow[name].dtype and np.array_equal(fast[name], slow[name]), \
                    (name, whole_word, make.__name__)


@pytest.mark.skipif(not native_built(), reason="C core not built (python setup.py build_ext --inplace)")
def test_c_core_whole_words_equal_the_twin_when_words_overflow(vocab):
    ids, mask, lengths = subword_heavy_batch(vocab, 300, 64, seed=5)
    keys = masking.instance_keys(2, 0, np.arange(len(ids)))
    out = masking.mask_batch(ids, mask, keys, 10, 0.15, vocab, True, use_native=True)
    for i, length in enumerate(lengths):
        tokens, positions, _ = masking.mask_instance(ids[i, :length].tolist(), int(keys[i]), 10, 0.15, vocab, True)
        assert out["input_ids"][i, :length].tolist() == tokens
        assert out["masked_lm_positions"][i, :len(positions)].tolist() == positions


@pytest.mark.parametrize("use_native", PATHS)
def test_masks_equal_the_twin_past_2048_positions(vocab, use_native):
    """Beyond seq 2048 a position no longer fits beside the 53 random bits in one 64-bit key (NumPy's sort)."""
    ids, mask, lengths = synthetic_batch(vocab, count=4, seq=2100, seed=3)
    lengths[0] = mask[0].sum()
    keys = masking.instance_keys(5, 1, np.arange(4))
    for whole_word in (False, True):
        out = masking.mask_batch(ids, mask, keys, 320, 0.15, vocab, whole_word, use_native=use_native)
        for i, length in enumerate(lengths):
            tokens, positions, _ = masking.mask_instance(ids[i, :length].tolist(), int(keys[i]), 320, 0.15, vocab,
                                                         whole_word)
            assert out["masked_lm_positions"][i, :len(positions)].tolist() == positions
            assert out["input_ids"][i, :length].tolist() == tokens


def test_without_the_c_core_the_loaders_mask_alike(dynamic_dir, monkeypatch):
    """What a machine without a compiler runs (bertprep._native absent): the same masks, from NumPy."""
    from bertprep.torch import BertRecords

    dataset = BertRecords(dynamic_dir, 16, seed=2)
    dataset.set_epoch(1)
    positions = dataset.batches_of_rank()[0]
    built = dataset.read_batch(positions)
    monkeypatch.setattr(masking, "_native_mask_batch", None)
    fallback = dataset.read_batch(positions)
    assert built.keys() == fallback.keys() and all(np.array_equal(built[k], fallback[k]) for k in built)
    assert fallback["masked_lm_weights"].sum() > 0


@pytest.mark.skipif(not native_built(), reason="C core not built (python setup.py build_ext --inplace)")
def test_native_mask_batch_rejects_bad_arguments(vocab):
    ids, mask, lengths = synthetic_batch(vocab, count=4, seq=16)
    keys = masking.instance_keys(0, 0, np.arange(4))
    words, flags = vocab.word_ids.astype(np.int32), vocab.is_subword.astype(np.uint8)

    def call(ids=ids, lengths=lengths.astype(np.int64), keys=keys, pred=3, words=words, out_ids=None, weights=None):
        out_ids = np.empty_like(ids) if out_ids is None else out_ids
        weights = np.empty((4, pred), np.float32) if weights is None else weights
        masking._native_mask_batch(ids, lengths, keys, pred, 0.15, False, vocab.cls_id, vocab.sep_id, vocab.mask_id,
                                   words, flags, out_ids, np.empty((4, pred), np.int64),
                                   np.empty((4, pred), np.int64), weights)

    call()
    with pytest.raises(TypeError, match="input_ids"):
        call(ids=ids.astype(np.int32))
    with pytest.raises(TypeError, match="keys"):
        call(keys=keys.astype(np.int64))
    with pytest.raises(TypeError, match="out_weights"):
        call(weights=np.empty((4, 3), np.float64))
    with pytest.raises(ValueError, match="as many keys"):
        call(keys=keys[:3].copy())
    with pytest.raises(ValueError, match="non-empty word_ids"):
        call(words=words[:0])
    with pytest.raises(ValueError, match="out_ids must be the size"):
        call(out_ids=np.empty((4, 8), np.int64))
    with pytest.raises(ValueError, match="read-only"):
        readonly = np.empty_like(ids)
        readonly.flags.writeable = False
        call(out_ids=readonly)


def test_masks_follow_the_reference_rules(vocab):
    ids, mask, lengths = synthetic_batch(vocab, count=4000, seq=128, seed=1)
    out = masking.mask_batch(ids, mask, masking.instance_keys(1, 0, np.arange(len(ids))), 20, 0.15, vocab)
    weights = out["masked_lm_weights"]
    expected = [masking.num_to_predict(int(n), 20, 0.15) for n in lengths]
    assert weights.sum(1).astype(int).tolist() == expected  # every instance gets its budget exactly
    rows, slots = np.nonzero(weights)
    positions = out["masked_lm_positions"][rows, slots]
    original = ids[rows, positions]
    assert not np.isin(original, [vocab.cls_id, vocab.sep_id]).any()  # no special token is masked
    assert (positions < lengths[rows]).all()
    seen = out["input_ids"][rows, positions]
    as_mask = np.mean(seen == vocab.mask_id)
    kept = np.mean((seen == original) & (original != vocab.mask_id))
    assert abs(as_mask - 0.8) < 0.01 and abs(kept - 0.1) < 0.01  # 80% [MASK], 10% kept, 10% random
    masked_rate = weights.sum() / (lengths - 3).sum()
    assert abs(masked_rate - 0.15) < 0.01


def test_masks_differ_between_epochs_and_instances(vocab):
    ids, mask, _ = synthetic_batch(vocab, count=200, seq=128)
    epoch0 = masking.mask_batch(ids, mask, masking.instance_keys(5, 0, np.arange(200)), 20, 0.15, vocab)
    epoch1 = masking.mask_batch(ids, mask, masking.instance_keys(5, 1, np.arange(200)), 20, 0.15, vocab)
    same = (epoch0["masked_lm_positions"] == epoch1["masked_lm_positions"]).all(1)
    assert same.mean() < 0.05
    again = masking.mask_batch(ids, mask, masking.instance_keys(5, 0, np.arange(200)), 20, 0.15, vocab)
    assert np.array_equal(again["masked_lm_positions"], epoch0["masked_lm_positions"])


def test_bins_batches_by_length():
    lengths = np.array([3, 9, 17, 30, 31, 8, 16, 2, 40, 64])
    bins = bins_of(lengths, 16)
    assert bins.tolist() == [0, 0, 1, 1, 1, 0, 0, 0, 2, 3]
    batches = binned_batches(np.arange(10)[::-1], bins, 2, np.random.default_rng(0))
    assert sorted(len(set(bins[b])) for b in batches) == [1, 1, 1]  # each batch of one bin; short ones dropped
    assert sum(len(b) for b in batches) == 6
    assert [bin_width(b, 20, 64) for b in range(4)] == [24, 40, 64, 64]


# ---------------------------------------------------------------- the PyTorch loader

torch = pytest.importorskip("torch")


def epoch_of(directory, **kwargs):
    from bertprep.torch import BertLoader

    loader = BertLoader(directory, 8, seed=3, **kwargs)
    return [{k: v.numpy() for k, v in batch.items()} for batch in loader], loader


def assert_same(batches_a, batches_b):
    assert len(batches_a) == len(batches_b)
    for a, b in zip(batches_a, batches_b):
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_torch_loader_masks_alike_for_any_workers_and_ranks(dynamic_dir):
    single, loader = epoch_of(dynamic_dir)
    assert len(single) == len(loader.dataset.index) // 8 and single[0]["masked_lm_weights"].sum() > 0
    assert single[0]["input_ids"].dtype == np.int64
    for workers in (2, 4):
        assert_same(epoch_of(dynamic_dir, num_workers=workers)[0], single)
    ranks = [epoch_of(dynamic_dir, rank=r, world_size=2, num_workers=2)[0] for r in range(2)]
    interleaved = [batch for pair in zip(*ranks) for batch in pair]
    assert_same(interleaved, single[:len(interleaved)])
    second = list(loader)  # iterating again is the next epoch: new order, new masks
    assert not np.array_equal(second[0]["input_ids"], single[0]["input_ids"])


def test_torch_loader_resumes_mid_epoch_with_the_rest_of_the_epoch(dynamic_dir):
    from bertprep.torch import BertLoader

    whole, _ = epoch_of(dynamic_dir, num_workers=2)
    loader = BertLoader(dynamic_dir, 8, seed=3, num_workers=2)
    for number, _batch in enumerate(loader):
        if number == 4:
            break
    state = loader.state_dict()
    assert state == {"epoch": 0, "batches": 5, "seed": 3, "batch_size": 8, "world_size": 1, "bin_size": None,
                     "drop_last": True, "records": len(loader.dataset.index)}
    resumed = BertLoader(dynamic_dir, 8, seed=3, num_workers=2)
    resumed.load_state_dict(state)
    assert_same([{k: v.numpy() for k, v in b.items()} for b in resumed], whole[5:])


def test_a_resumed_datasets_length_is_the_batches_it_yields(dynamic_dir):
    """len(BertRecords) after load_state_dict counted the whole epoch: a DataLoader over it promised the batches
    already handed out too (a len 5 more than the batches that came)."""
    import torch

    from bertprep.torch import BertRecords

    dataset = BertRecords(dynamic_dir, 4, seed=3)
    whole = len(dataset)
    dataset.load_state_dict({**dataset.state_dict(), "batches": 5})
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)
    assert len(dataset) == len(loader) == sum(1 for _ in loader) == whole - 5


def test_torch_loader_refuses_a_second_iterator_while_one_is_unfinished(dynamic_dir):
    """Two iterators of one BertLoader at once shared its count: a batch from each handed out batch 0 twice and
    state_dict said 2 batches of epoch 0, and each iterator's end started another epoch (2 after one). A second
    one is now refused until the first has run out or is closed; a loop left by `break` is closed with it."""
    from bertprep.errors import UsageError
    from bertprep.torch import BertLoader

    whole, _ = epoch_of(dynamic_dir)
    loader = BertLoader(dynamic_dir, 8, seed=3)
    first, second = iter(loader), iter(loader)
    next(first)
    with pytest.raises(UsageError, match=re.escape(
            "bertprep.torch.BertLoader: another iterator of this loader is unfinished (epoch 0, 1 batch(es) handed "
            "out): one loader counts one iterator's batches (its state_dict) and each iterator ends the epoch; run "
            "that one out or close it (its .close(), or del) first, or make a BertLoader for each")):
        next(second)
    assert loader.state_dict()["epoch"] == 0 and loader.state_dict()["batches"] == 1
    assert_same([{k: v.numpy() for k, v in b.items()} for b in first], whole[1:])
    assert loader.state_dict()["epoch"] == 1 and loader.state_dict()["batches"] == 0
    for _batch in loader:
        break
    third = iter(loader)
    next(third)  # the loop's iterator was closed as the loop ended
    third.close()
    assert loader.state_dict()["epoch"] == 1 and loader.state_dict()["batches"] == 2
    assert len(list(loader)) == len(whole) - 2


def test_torch_loader_refuses_a_state_loaded_under_an_unfinished_iterator(dynamic_dir):
    """load_state_dict under a live iterator: the iterator went on from its own place while the count restarted
    from the state's (loaded at 10 after 3 taken: the next was batch 3, and state_dict said 11 handed out)."""
    from bertprep.errors import UsageError
    from bertprep.torch import BertLoader

    whole, _ = epoch_of(dynamic_dir)
    loader = BertLoader(dynamic_dir, 8, seed=3)
    batches = iter(loader)
    for _ in range(3):
        next(batches)
    state = {**loader.state_dict(), "batches": 10}
    with pytest.raises(UsageError, match=re.escape(
            "bertprep.torch.BertLoader: load_state_dict while an iterator of this loader is unfinished (epoch 0, 3 "
            "batch(es) handed out): it would go on from its own place, not the state's; run it out or close it (its "
            ".close(), or del) first")):
        loader.load_state_dict(state)
    batches.close()
    loader.load_state_dict(state)  # once closed, as before
    assert_same([{k: v.numpy() for k, v in b.items()} for b in loader], whole[10:])


def test_torch_loader_refuses_a_saved_state_its_epoch_cannot_resume(dynamic_dir):
    """A negative count of batches made len() count batches never handed out; a count past the epoch's end (a state
    of another batch_size) skipped the whole epoch without a word; `int()` took an epoch of 2.7 as 2 and "x" was
    a ValueError traceback, and set_epoch(-1) failed later inside NumPy's seed."""
    from bertprep.errors import UsageError
    from bertprep.torch import BertLoader

    loader = BertLoader(dynamic_dir, 8, seed=3)
    count = len(loader)
    for state, message in [
        ({"epoch": 0, "batches": -5, "seed": 3}, "the saved data state's batches must be at least 0, not -5"),
        ({"epoch": 0, "batches": count + 1, "seed": 3},
         f"the saved data state has {count + 1} batches of epoch 0 handed out, but this loader's rank has {count} "
         "in it (saved with another batch_size or world_size?)"),
        ({"epoch": 2.7, "batches": 1}, "the saved data state's epoch must be an int, got float 2.7"),
        (None, "the saved data state must be a dict with epoch and batches (what state_dict returns), got NoneType "
               "None"),
    ]:
        with pytest.raises(UsageError) as raised:
            loader.load_state_dict(state)
        assert str(raised.value) == message
    assert loader.state_dict()["epoch"] == loader.state_dict()["batches"] == 0 and len(loader) == count
    with pytest.raises(UsageError, match=r"^epoch must be at least 0, not -1$"):
        loader.dataset.set_epoch(-1)
    loader.load_state_dict({"epoch": 1, "batches": count, "seed": 3})  # a whole epoch handed out: nothing left
    assert len(loader) == 0 and list(loader) == [] and loader.state_dict()["epoch"] == 2


def test_torch_loader_refuses_a_saved_state_of_another_plan(dynamic_dir):
    """A state saved with another batch_size (world_size, bin_size, drop_last) or over other records resumed
    without a word at its count of batches in this loader's plan: 5 batches of 8 skipped 80 records at 16. A
    state of an earlier release, without these fields, still loads."""
    from bertprep.errors import UsageError
    from bertprep.torch import BertLoader

    saved = BertLoader(dynamic_dir, 8, seed=3)
    saved.load_state_dict({"epoch": 0, "batches": 5, "seed": 3})  # an earlier release's state
    state = saved.state_dict()
    for other, message in [
            (BertLoader(dynamic_dir, 16, seed=3), "batch_size 8, this loader's is 16"),
            (BertLoader(dynamic_dir, 8, seed=3, world_size=2), "world_size 1, this loader's is 2"),
            (BertLoader(dynamic_dir, 8, seed=3, bin_size=16), "bin_size None, this loader's is 16"),
            (BertLoader(dynamic_dir, 8, seed=3, drop_last=False), "drop_last True, this loader's is False")]:
        with pytest.raises(UsageError) as raised:
            other.load_state_dict(state)
        assert str(raised.value) == (f"the saved data state is of {message}: its count of batches would resume "
                                     "elsewhere in the epoch (load it into a loader of the records and settings it "
                                     "was saved with)")
        assert other.state_dict()["batches"] == 0
    with pytest.raises(UsageError, match=r"^the saved data state is of records 7, this loader's is \d+: "):
        BertLoader(dynamic_dir, 8, seed=3).load_state_dict({**state, "records": 7})
    # a seed of another type is named as such: "seed 3, this loader's is 3" said they were the same
    for seed, shown in ((4, "4"), ("3", "'3'")):
        with pytest.raises(UsageError, match=f"^the saved data state is of seed {shown}, this loader's is 3$"):
            BertLoader(dynamic_dir, 8, seed=3).load_state_dict({**state, "seed": seed})
    resumed = BertLoader(dynamic_dir, 8, seed=3, num_workers=1)
    resumed.load_state_dict(state)
    assert resumed.state_dict() == state and len(resumed) == len(saved)


def test_torch_loader_without_drop_last_leaves_no_batch_out(dynamic_dir):
    """drop_last=False with batches that do not divide among the ranks left the last ones out of every epoch
    without a word (each rank takes the same number of batches)."""
    from bertprep.errors import UsageError
    from bertprep.torch import BertLoader

    count = len(BertLoader(dynamic_dir, 8, seed=3, drop_last=False))
    world_size = next(n for n in range(2, count) if count % n)
    with pytest.raises(UsageError) as raised:
        BertLoader(dynamic_dir, 8, seed=3, drop_last=False, world_size=world_size, rank=1)
    assert re.fullmatch(rf".*: drop_last=False, but its \d+ training records make {count} batches, which do not "
                        rf"divide among world_size {world_size} ranks \(each takes the same number\): "
                        rf"{count % world_size} batch\(es\) \(\d+ records in epoch 0\) would be left out of every "
                        r"epoch; give drop_last=True, or a batch_size or world_size whose batches divide evenly",
                        str(raised.value))
    assert len(BertLoader(dynamic_dir, 8, seed=3, world_size=world_size)) == count // world_size  # drop_last
    divisor = next(n for n in range(2, count + 1) if count % n == 0)
    ranks = [BertLoader(dynamic_dir, 8, seed=3, drop_last=False, world_size=divisor, rank=r) for r in range(divisor)]
    assert sum(len(rank) for rank in ranks) == count


def test_torch_loader_given_creates_out_names_the_records_below(dynamic_dir):
    """create's --out holds <params>/<corpus>/ records directories: given it, the loader said only "no
    manifest.json (give the directory `bertprep create` or `pack` wrote)", the directory the caller had given."""
    from bertprep.errors import DataError
    from bertprep.torch import BertLoader

    out = os.path.dirname(os.path.dirname(dynamic_dir))
    with pytest.raises(DataError) as raised:
        BertLoader(out, 8)
    assert str(raised.value) == (f"{out}: no manifest.json (give the directory `bertprep create` or `pack` wrote); "
                                 f"below it are the records directories they wrote, {dynamic_dir} (a summary's "
                                 "records_dir): give one")


def test_torch_loader_given_a_workdir_names_its_records_not_its_shards(dynamic_dir, tmp_path):
    """Given a workdir (records/<params>/<corpus>/, sharded/<corpus>/), the loader named its text shards as "the
    records directories they wrote" and its records directory, a level deeper, not at all."""
    import shutil

    from bertprep.errors import DataError
    from bertprep.torch import BertLoader

    work = tmp_path / "work"
    assert bertprep_main(["shard", "--workdir", str(work), "--input", sample_paths()[0], "--corpus", "sample",
                          "--quiet"]) == 0
    records = shutil.copytree(dynamic_dir, work / "records" / os.path.basename(os.path.dirname(dynamic_dir)) /
                              "sample")
    (work / "other" / "manifest.json").mkdir(parents=True)  # unreadable as a manifest: no hint, no traceback
    with pytest.raises(DataError) as raised:
        BertLoader(str(work), 8)
    assert str(raised.value) == (f"{work}: no manifest.json (give the directory `bertprep create` or `pack` wrote); "
                                 f"below it are the records directories they wrote, {records} (a summary's "
                                 "records_dir): give one")


def test_torch_loader_names_a_path_that_is_not_there_or_a_file(dynamic_dir):
    """A typo's path or a file (the manifest itself, a record file) said "no manifest.json (give the directory
    `bertprep create` or `pack` wrote)", as if a records directory stood there without its manifest."""
    from bertprep.errors import DataError
    from bertprep.torch import BertLoader

    missing = dynamic_dir + "-typo"
    with pytest.raises(DataError) as raised:
        BertLoader(missing, 8)
    assert str(raised.value) == f"{missing}: no such directory"
    for given in (os.path.join(dynamic_dir, "manifest.json"), training_files(dynamic_dir, "tfrecord")[0]):
        with pytest.raises(DataError) as raised:
            BertLoader(given, 8)
        assert str(raised.value) == (f"{given}: a file, not a directory: give the directory `bertprep create` or "
                                     "`pack` wrote")


def test_torch_loader_names_a_vocab_argument_that_is_no_file(dynamic_dir, tmp_path):
    """vocab= of a path that is not there, or of a directory, said the manifest named it: "manifest.json: names
    the vocab X, which is not there: give the vocab.txt it was made with (--vocab)"."""
    from bertprep.errors import DataError
    from bertprep.torch import BertLoader

    missing = str(tmp_path / "vocab.txt")
    for given, said in ((missing, "no such file"), (str(tmp_path), "a directory, not a vocab file")):
        with pytest.raises(DataError) as raised:
            BertLoader(dynamic_dir, 8, vocab=given)
        assert str(raised.value) == f"vocab: {given}: {said} (give the vocab.txt the records were made with)"


def test_torch_loader_reads_static_records_and_bins(tmp_path):
    directory = create(tmp_path, "--dupe-factor", "1", "--format", "ofrecord")
    batches, loader = epoch_of(directory, bin_size=16, fmt="ofrecord")
    lengths = loader.dataset.index.lengths()
    assert len(batches) > 0
    for batch in batches:
        width = batch["input_ids"].shape[1]
        real = batch["input_mask"].sum(1)
        assert width % 8 == 0 and real.max() <= width and set(((real - 1) // 16).tolist()).__len__() == 1
        assert batch["masked_lm_positions"].max() < width
    assert sum(b["input_mask"].sum() for b in batches) <= lengths.sum()


def test_torch_loader_refuses_a_bin_size_of_the_whole_sequence(dynamic_dir):
    """bin_size=64 (or 512) of 64-token records makes one bin: every batch kept whole, binning taken without
    effect and without a word, where the trainer's --bin-size 64 is refused (fails on the old code: a loader)."""
    from bertprep.errors import UsageError
    from bertprep.torch import BertLoader

    assert len(BertLoader(dynamic_dir, 8, bin_size=56)) > 0
    for bin_size in (64, 512):
        with pytest.raises(UsageError) as refused:
            BertLoader(dynamic_dir, 8, bin_size=bin_size)
        assert str(refused.value) == (f"bin_size {bin_size}: the records' sequences are 64 tokens, one bin of them "
                                      "all: give a bin size below 64")
    with pytest.raises(UsageError) as refused:  # 57-63: every bin's width rounds up to 64 (taken before 2026-11-30)
        BertLoader(dynamic_dir, 8, bin_size=57)
    assert str(refused.value) == ("bin_size 57: the records' sequences are 64 tokens and a bin's width is rounded up "
                                  "to a multiple of 8, so every bin keeps all 64 and no batch is cut: give a bin "
                                  "size of at most 56")

def test_trainer_stream_masks_unmasked_records_bins_and_reopens_exactly(dynamic_dir):
    from trainer.data import Records, RecordStream

    records = Records(dynamic_dir, "tfrecord")
    assert records.kind.name == "unmasked" and records.pred == 10 and records.batch_kind.name == "pretraining"
    stream = RecordStream(records, "training", 8, seed=1, window=64, bin_size=16)
    first = [batch for _, batch in zip(range(40), stream.batches(0))]  # past the first epoch (262 records)
    reopened = [batch for _, batch in zip(range(37), stream.batches(24))]
    assert_same(reopened, first[3:])
    for batch in first:
        width = batch["input_ids"].shape[1]
        assert width % 8 == 0 and batch["input_mask"].sum(1).max() <= width
        assert (batch["masked_lm_weights"].sum(1) > 0).all() and batch["masked_lm_positions"].max() < width
    epoch_size = stream.epoch_size
    plain = RecordStream(records, "training", 1, seed=1, window=64)
    ids = [b["masked_lm_positions"] for _, b in zip(range(epoch_size + 1), plain.batches(0))]
    again = next(RecordStream(records, "training", 1, seed=1, window=64).batches(epoch_size))["masked_lm_positions"]
    assert np.array_equal(ids[epoch_size], again)


@pytest.mark.heavy  # TensorFlow's start and a model's compile: about 15 s
def test_trainer_trains_on_unmasked_records(dynamic_dir, tmp_path):
    pytest.importorskip("tensorflow")
    import json

    from trainer.cli import main
    from trainer_checks import bert_config

    log = tmp_path / "log.jsonl"
    assert main(["--format", "tfrecord", "--data", dynamic_dir, "--bert-config", bert_config(tmp_path, 0.0),
                 "--steps", "2", "--batch-size", "4", "--bin-size", "16", "--log-every", "1", "--log-json", str(log),
                 "--quiet"]) == 0
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert events[-1]["steps"] == 2 and all(np.isfinite(e["loss"]) for e in events if "loss" in e)


def test_inspect_shows_the_mask_of_an_epoch_as_the_loader_draws_it(dynamic_dir, capsys):
    import json

    from bertprep.torch import BertRecords

    path = training_files(dynamic_dir, "ofrecord")[0]  # its first instance is the split's instance 0
    assert bertprep_main(["inspect", path, "--json", "--epoch", "2", "--skip", "5", "-n", "1"]) == 0
    shown = json.loads(capsys.readouterr().out)
    dataset = BertRecords(dynamic_dir, 8, fmt="ofrecord")
    dataset.set_epoch(2)
    loaded = dataset.read_batch(np.array([5]))
    assert shown["record"] == 5 and set(shown) - {"record"} == set(loaded)
    assert all(shown[name] == loaded[name][0].tolist() for name in loaded)
    assert bertprep_main(["inspect", path, "--epoch", "3", "--skip", "5", "-n", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["masked_lm_positions"] != shown["masked_lm_positions"]


def test_validate_checks_unmasked_records(dynamic_dir, tmp_path, capsys):
    from bertprep.formats.schemas import UNMASKED

    assert bertprep_main(["validate", dynamic_dir, "--quiet"]) == 0
    record = {"input_ids": [2, 50, 3, 60, 3, 0], "input_mask": [1, 1, 1, 1, 1, 0], "segment_ids": [0, 0, 0, 1, 1, 0],
              "next_sentence_labels": [2]}
    bad = tmp_path / "bad.tfrecord"
    formats.write_records(str(bad), [record], "tfrecord", UNMASKED)
    capsys.readouterr()
    assert bertprep_main(["validate", str(bad), "--quiet", "--vocab", sample_paths()[1]]) == 1
    assert "next_sentence_labels: label 2, expected 0 or 1" in capsys.readouterr().out


def test_without_torch_the_loader_says_what_to_install():
    import subprocess
    import sys

    code = ("import sys; sys.modules['torch'] = None\n"  # what an environment without PyTorch gives: ImportError
            "import bertprep.torch as t\n"
            "try:\n    t.BertLoader('.', 8)\nexcept Exception as exc:\n    print(type(exc).__name__, exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == 'UsageError bertprep.torch needs PyTorch: pip install "bertprep[torch]"'


def test_inspect_called_in_python_shows_what_the_command_prints(dynamic_dir, capsys):
    import io
    import json

    from bertprep.errors import UsageError
    from bertprep.stages.inspect import InspectOptions, inspect

    path = training_files(dynamic_dir, "tfrecord")[0]
    vocab = sample_paths()[1]
    assert bertprep_main(["inspect", path, "--epoch", "2", "--vocab", vocab, "--skip", "1", "-n", "2"]) == 0
    printed = capsys.readouterr().out
    stream = io.StringIO()
    summary = inspect(InspectOptions(path, vocab=vocab, num=2, skip=1, epoch=2), stream=stream)
    assert stream.getvalue() == printed and "masked as in epoch 2" in printed
    assert bertprep_main(["inspect", path, "--epoch", "2", "--skip", "1", "-n", "2", "--json"]) == 0
    assert summary["records"] == [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert summary["kind"] == "unmasked" and summary["epoch"] == 2
    assert inspect(file=path, skip=10 ** 9)["records"] == []  # no stream: nothing written
    assert capsys.readouterr() == ("", "")
    with pytest.raises(UsageError, match=r"^InspectOptions.epoch: -1 is not an epoch \(0\.\.9223372036854775807\)$"):
        InspectOptions(path, epoch=-1)
