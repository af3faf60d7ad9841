"""The tokenizer a model was trained with: carried in every checkpoint and exported with the model.

The records' manifest names the vocab they were made with (its path, sha256 and size) and the casing
(`params.lower_case`). A run reads that vocab once, checks it against the sha256, and writes it into
every `ckpt-<step>/` with a `tokenizer_config.json` (`do_lower_case`, the vocab's sha256 and where it came
from), as Hugging Face keeps a tokenizer beside its model; a run started from `--init-checkpoint` takes
that checkpoint's when its records name none. `checkpoint convert --to hf` then writes what
`save_pretrained` of a model and its tokenizer writes: vocab.txt, tokenizer.json (the `tokenizers`
library's BERT pipeline, as google-research/bert's FullTokenizer with that casing), tokenizer_config.json,
special_tokens_map.json, and a model card. Without a known vocab the export is refused: transformers
would otherwise build a 5-token tokenizer and `pipeline("fill-mask")` answer with empty strings.

Casing, where nothing says it: Google's releases name it (`uncased_L-12_H-768_A-12`, `cased_…`), and a
vocab whose tokens hold capitals was made for cased text (an uncased vocab has none but its [TOKENS]).
"""

import dataclasses
import hashlib
import itertools
import json
import os
import re

from bertprep import storage
from bertprep.errors import BertprepError, DataError, UsageError

CONFIG = "tokenizer_config.json"
SPECIAL = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
           "mask_token": "[MASK]"}
# The class AutoTokenizer builds for an export. Not "BertTokenizer": transformers 5's rebuilds its WordPiece from
# vocab.txt with its default limit of 100 characters a word and reads no setting that raises it (neither
# tokenizer_config.json's nor tokenizer.json's), so a word of 101-200 characters, which bertprep and the reference
# split, became [UNK]. PreTrainedTokenizerFast (transformers 4 and 5) loads tokenizer.json as written, limit
# included; its default inputs leave out token_type_ids, which a BERT's sentence pairs need.
HF_CONFIG = {"tokenizer_class": "PreTrainedTokenizerFast",
             "model_input_names": ["input_ids", "token_type_ids", "attention_mask"]}


@dataclasses.dataclass(frozen=True)
class RunTokenizer:
    vocab: bytes  # vocab.txt's bytes
    lower_case: bool
    source: str  # where the vocab came from, for the model card and tokenizer_config.json

    @property
    def sha256(self):
        return hashlib.sha256(self.vocab).hexdigest()

    def tokens(self):
        return _tokens(self.vocab)

    def checkpoint_files(self):
        """{name: bytes} a checkpoint of the run carries."""
        config = {"tokenizer_class": "BertTokenizer", "do_lower_case": self.lower_case,
                  "vocab_sha256": self.sha256, "vocab_source": self.source}
        return {"vocab.txt": self.vocab, CONFIG: (json.dumps(config, indent=1, sort_keys=True) + "\n").encode()}


def of_records(named, notes):
    """The RunTokenizer of the records' manifests (`named`: [(manifest path, its "vocab" entry, lower_case)]),
    or None with a note saying why (none named, two different ones, the file gone or changed)."""
    distinct = {(entry.get("sha256"), lower_case) for _source, entry, lower_case in named}
    if not named:
        return None
    if len(distinct) > 1:
        notes.append("the records' manifests name different vocabs or casings: checkpoints carry no vocab.txt")
        return None
    source, entry, lower_case = named[0]
    path = entry.get("path")
    try:
        data = storage.read_bytes(path)
    except (OSError, BertprepError, TypeError):
        notes.append(f"{source} names the vocab {path}, which is not there: checkpoints carry no vocab.txt "
                     "(checkpoint convert --to hf will need --vocab)")
        return None
    if hashlib.sha256(data).hexdigest() != entry.get("sha256"):
        notes.append(f"{path} is not the vocab {source} names (its sha256 differs): checkpoints carry no vocab.txt")
        return None
    return RunTokenizer(data, bool(lower_case) if lower_case is not None else casing_of_vocab(data), path)


def of_checkpoint(checkpoint):
    """The RunTokenizer a checkpoint carries (its vocab.txt and casing), or None."""
    if not checkpoint.vocab:
        return None
    with storage.local_copy(checkpoint.vocab) as local, open(local, "rb") as f:
        data = f.read()
    check_recorded_digest(checkpoint.vocab, data)
    lower_case = checkpoint.lower_case if checkpoint.lower_case is not None else casing_of_vocab(data)
    return RunTokenizer(data, lower_case, checkpoint.vocab)


def check_recorded_digest(vocab, data):
    """A DataError where the tokenizer_config.json beside `vocab` records a vocab_sha256 (ours write one) that
    its bytes `data` do not have: the vocab.txt was replaced after the run, and every check against it, and an
    export's tokenizer, would take another vocab for the one the model was trained with (issue 57)."""
    config = os.path.join(os.path.dirname(vocab), CONFIG)
    if not storage.reads_in_place(vocab) or not os.path.isfile(config):
        return
    try:
        with open(config, encoding="utf-8") as f:
            recorded = json.load(f).get("vocab_sha256")
    except (OSError, ValueError, AttributeError):
        return
    actual = hashlib.sha256(data).hexdigest()
    if isinstance(recorded, str) and recorded != actual:
        raise DataError(f"{vocab}: not the vocab this checkpoint was trained with ({config} records vocab_sha256 "
                        f"{recorded[:12]}…, the file has {actual[:12]}…): put its vocab back")


def check_records(checkpoint, named):
    """A UsageError where records (`named`: [(manifest, its "vocab" entry, its lower_case)], as of_records takes)
    were made with another vocab or casing than `checkpoint` (an --init-checkpoint) records: their ids would
    be other tokens to the model, or the capitalised words [UNK]."""
    carried = of_checkpoint(checkpoint)
    for source, entry, lower_case in named:
        if carried is not None and entry.get("sha256") != carried.sha256:
            tokens = _records_tokens(entry)
            if tokens is None or not same_vocab(carried.tokens(), tokens):
                shown = (_differ(carried.tokens(), tokens, "the records'") if tokens is not None
                         else f"sha256 {carried.sha256}, the records' {entry.get('sha256')}")
                raise UsageError(f"{source}: records made with the vocab {entry.get('path')}, {checkpoint.path} was "
                                 f"trained with {carried.source} ({shown}): make the records with its vocab")
        if lower_case is not None and checkpoint.lower_case is not None and bool(lower_case) != checkpoint.lower_case:
            raise UsageError(f"{source}: records made {_casing_name(lower_case)}, {checkpoint.path} was trained "
                             f"{_casing_name(checkpoint.lower_case)} ({checkpoint.casing_source}): make the records "
                             f"{'without' if checkpoint.lower_case else 'with'} --no-lower-case")


def _records_tokens(entry):
    """The tokens of the vocab a manifest's "vocab" entry names where it is still that file, else None."""
    try:
        data = storage.read_bytes(entry.get("path"))
    except (OSError, BertprepError, TypeError):
        return None
    return _tokens(data) if hashlib.sha256(data).hexdigest() == entry.get("sha256") else None


def casing_beside(directory):
    """(do_lower_case, what says it) of a checkpoint directory: its tokenizer_config.json, else what Google's
    release names say (`uncased_…` / `cased_…`); (None, None) where nothing does."""
    path = os.path.join(directory, CONFIG)
    if os.path.isfile(path):
        try:
            with open(path, encoding="utf-8") as f:
                value = json.load(f).get("do_lower_case")
            if isinstance(value, bool):
                return value, f"do_lower_case {str(value).lower()} in {path}"
        except (OSError, ValueError, AttributeError):
            pass
    name = os.path.basename(os.path.normpath(directory))
    for pattern, value in ((r"(^|[_-])uncased", True), (r"(^|[_-])cased", False)):
        if re.search(pattern, name.lower()):
            return value, f"its directory's name {name}"
    return None, None


def casing_of_vocab(data):
    """Whether a vocab is for lower-cased text: no token but its [SPECIAL] ones holds a capital letter."""
    return not _has_capitals(_tokens(data))


def _tokens(data):
    """A vocab.txt's tokens as bertprep.tokenization.load_vocab reads them (only "\n" ends a line)."""
    lines = data.decode("utf-8", "replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.strip() for line in lines]


def for_export(checkpoint, vocab=None, cased=None):
    """The RunTokenizer an export writes: `vocab` (a --vocab file) or the checkpoint's, its casing from
    `cased` (--cased / --uncased), else the checkpoint's, else the vocab's own (_casing). A UsageError where
    there is none, where a --vocab is not the one the checkpoint carries or its size is not the model's (nor
    short of it by NVIDIA's padding to a multiple of 8); the checkpoint's own vocab, where the run's model has
    more rows than it (records of a smaller vocab, a larger --bert-config), and such a --vocab are padded
    (_padded)."""
    found = _bert_vocab_of(checkpoint)
    if vocab is not None:
        data = _read_vocab(vocab)
        given = RunTokenizer(data, casing_of_vocab(data), storage.display(vocab))
        if found is not None and not same_vocab(found.tokens(), given.tokens()):
            raise UsageError(f"--vocab {given.source}: not the vocab {checkpoint.path} was trained with "
                             f"({found.source}: {_differ(found.tokens(), given.tokens(), '--vocab')}): leave "
                             "--vocab out")
        found = given
    elif found is None:
        raise UsageError(f"{checkpoint.path}: no vocab.txt is known for this checkpoint, and a model without "
                         "its tokenizer is not usable (transformers would build a 5-token one): give --vocab "
                         "FILE, and --cased for a cased vocab")
    found = dataclasses.replace(found, lower_case=_casing(checkpoint, found, cased))
    lines = len(found.tokens())
    size = checkpoint.config.vocab_size
    # a --vocab may be short of the model only by NVIDIA's padding of the rows to a multiple of 8
    if lines > size or (vocab is not None and lines < size and size > -(-lines // 8) * 8):
        raise _not_the_models(found, size)
    # padded as the checkpoint's own: a --vocab of 30,522 tokens for 30,528 rows was exported as it was, and
    # fill-mask answered an id beyond it with an empty string
    return _padded(found, size, checkpoint.notes) if lines < size else found


def carried_by(checkpoint):
    """of_checkpoint's RunTokenizer, refused as for_export refuses it where it holds more tokens than the model
    has rows: `convert --to bertprep|google` copied such a vocab.txt (its tokenizer_config.json vouching for it)
    without a word, and only a later `--to hf` of the result refused it. A smaller one is carried as it is."""
    found = _bert_vocab_of(checkpoint)
    if found is not None and len(found.tokens()) > checkpoint.config.vocab_size:
        raise _not_the_models(found, checkpoint.config.vocab_size)
    return found


def _bert_vocab_of(checkpoint):
    """of_checkpoint's RunTokenizer, a DataError where its vocab.txt is none bertprep reads with every SPECIAL token
    (an empty file, a copy cut short at its start): `--to bertprep|google` carried it, a tokenizer_config.json
    vouching for it, and `--to hf` refused it (no remedy said), or, given --vocab, refused that ('not the vocab it
    was trained with: leave --vocab out'), each pointing at the other."""
    found = of_checkpoint(checkpoint)
    if found is not None:
        try:
            check_for_hf(found)
        except UsageError as exc:
            raise DataError(f"{exc}: the vocab.txt beside {checkpoint.path} is no BERT vocab; put back the one it "
                            "was trained with, or remove it and give --vocab FILE") from None
    return found


def _not_the_models(found, size):
    return UsageError(f"{found.source}: {len(found.tokens()):,} tokens, the model's vocab_size is {size:,}: not "
                      "this model's vocab")


def _read_vocab(vocab):
    try:
        with storage.local_copy(vocab) as local, open(local, "rb") as f:
            return f.read()
    except OSError as exc:
        raise UsageError(f"--vocab {vocab}: cannot read it ({exc.strerror or exc})") from None


def _casing(checkpoint, found, cased):
    """do_lower_case of an export: --cased/--uncased where the checkpoint records no casing (refused where it
    records the other), else the recorded one, else the vocab's own. A cased tokenizer over a vocab without
    capitals makes every capitalised word [UNK]: refused where --cased asks for it, said where the checkpoint
    was trained so (the export keeps to its training)."""
    recorded = checkpoint.lower_case
    if cased is not None and recorded is not None and cased == recorded:
        raise UsageError(f"--{_casing_name(not cased)}: {checkpoint.path} was trained {_casing_name(recorded)} "
                         f"({checkpoint.casing_source}): leave the flag out")
    lower_case = (not cased) if cased is not None else recorded if recorded is not None else found.lower_case
    if not lower_case and not _has_capitals(found.tokens()) and _has_lower_case(found.tokens()):
        said = (f"{found.source} holds no capital letter, so a cased tokenizer makes every capitalised word "
                "[UNK]")
        if cased is not None:
            raise UsageError(f"--cased: {said}: give --uncased, or the cased vocab")
        checkpoint.notes.append(f"{checkpoint.path} was trained cased ({checkpoint.casing_source}), but {said}")
    elif lower_case and _has_capitals(found.tokens()):
        checkpoint.notes.append(f"{found.source} holds capitalised tokens, but the tokenizer is uncased "
                                f"({checkpoint.casing_source or '--uncased'}): no text reaches them")
    return lower_case


def _casing_name(lower_case):
    return "uncased" if lower_case else "cased"


def _has_capitals(tokens):
    """Whether any token but the [SPECIAL] ones holds a capital letter (casing_of_vocab's evidence)."""
    return any(token != token.lower() and not (token.startswith("[") and token.endswith("]")) for token in tokens)


def _has_lower_case(tokens):
    """Whether any token holds a letter that has a capital (a vocab of Chinese characters has none: casing is
    no matter to it)."""
    return any(char != char.upper() for token in tokens for char in token)


def same_vocab(carried, given):
    """Whether the token lists `given` (the records', a --vocab) and `carried` (a checkpoint's) give each id the
    same token: equal, or `carried` is `given` padded with [unused] tokens as an export pads it (_padded)."""
    extra = carried[len(given):]
    return carried[:len(given)] == given and all(re.fullmatch(r"\[unused\d+\]", token) for token in extra)


def _differ(carried, given, given_name):
    """Where the token lists of a checkpoint's vocab and `given_name`'s first differ, for a message."""
    first = next((i for i, (a, b) in enumerate(zip(carried, given)) if a != b), None)
    if first is None:
        return f"{len(carried):,} tokens, {len(given):,} in {given_name}"
    return f"line {first + 1} is {carried[first]!r}, {given[first]!r} in {given_name}"


def _padded(found, size, notes):
    """`found` with `[unused<i>]` tokens after its own up to `size`, as Google's vocabs reserve rows: the
    model's rows beyond the vocab were never an input, but fill-mask ranks them too, and an id the
    tokenizer does not know decodes to an empty string. No text tokenizes to them (BERT's pre-tokenizer
    splits "[" off), so the ids of text stay the vocab's own."""
    tokens = set(found.tokens())
    extra = (f"[unused{i}]" for i in itertools.count() if f"[unused{i}]" not in tokens)
    lines = len(found.tokens())
    padding = "".join(f"{next(extra)}\n" for _ in range(size - lines)).encode()
    data = found.vocab if found.vocab.endswith(b"\n") or not found.vocab else found.vocab + b"\n"
    notes.append(f"{found.source}: {lines:,} tokens, the model's vocab_size {size:,}: vocab.txt padded with "
                 f"{size - lines:,} [unused] tokens")
    return dataclasses.replace(found, vocab=data + padding)


def write_hf_files(tokenizer, directory, max_length):
    """vocab.txt, tokenizer.json, tokenizer_config.json and special_tokens_map.json into `directory`, as
    `save_pretrained` writes them, for AutoTokenizer to load tokenizer.json as it is (HF_CONFIG)."""
    from tokenizers import decoders, processors

    from bertprep.tokenization import build_tokenizer

    vocab = _hf_vocab(tokenizer, directory)
    # bertprep's own BERT pipeline (BertNormalizer: lower-casing strips accents, as the FullTokenizer; WordPiece
    # with [UNK] and 200 characters a word), plus what a model's tokenizer adds: [CLS] A [SEP] B [SEP].
    fast = build_tokenizer(vocab, tokenizer.lower_case)
    fast.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab.id_of("[CLS]")), ("[SEP]", vocab.id_of("[SEP]"))])
    fast.decoder = decoders.WordPiece(prefix="##")
    fast.save(os.path.join(directory, "tokenizer.json"))
    config = dict(HF_CONFIG, do_lower_case=tokenizer.lower_case, tokenize_chinese_chars=True, strip_accents=None,
                  model_max_length=max_length, clean_up_tokenization_spaces=True, **SPECIAL)
    _write_json(os.path.join(directory, CONFIG), config)
    _write_json(os.path.join(directory, "special_tokens_map.json"), SPECIAL)


def check_for_hf(tokenizer):
    """The UsageError write_hf_files would raise where the vocab lacks a token the export's tokenizer names
    (SPECIAL) or is no vocab file bertprep reads, raised before the weights are converted: it came once the whole
    model was written (minutes for BERT-large), and nothing of it kept."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="bertprep-vocab-") as directory:
        _hf_vocab(tokenizer, directory)


def _hf_vocab(tokenizer, directory):
    """The Vocab of `tokenizer`'s vocab.txt, written into `directory` and read as `bertprep create` reads it (so
    the ids are the records' ids) with every SPECIAL token; a UsageError naming its source where it is not."""
    from bertprep.tokenization import load_vocab

    vocab_path = os.path.join(directory, "vocab.txt")
    with open(vocab_path, "wb") as f:
        f.write(tokenizer.vocab)
    try:
        return load_vocab(vocab_path, required=tuple(SPECIAL.values()))
    except DataError as exc:
        raise UsageError(str(exc).replace(vocab_path, tokenizer.source)) from None


def _write_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, sort_keys=True)
        f.write("\n")
