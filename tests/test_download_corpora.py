"""Wikipedia (hub parquet and XML dump) and BookCorpus against the stand-in
servers, and the chain download -> shard -> create."""

import bz2
import hashlib
import io
import json
import re
import tarfile

import pytest

from stand_in_servers import (
    StandInServer,
    looks_complete,
    ok,
    one_line_error,
    parquet_bytes,
    run_cli,
    run_python,
    same_apart_from_workdir,
)

ARTICLES = [
    ("1", "Ada Lovelace", "Ada Lovelace was an English mathematician. She worked on the Analytical Engine.\n"
                          "Early life\nShe was born in London. Her mother was Anne Isabella Milbanke."),
    ("2", "Alan Turing", "Alan Turing was a computer scientist. He formalised computation with the Turing machine."),
    ("3", "Empty", ""),
    ("4", "Grace Hopper", "Grace Hopper was a computer scientist. She led work on COBOL.\nShe was a rear admiral."),
]


def wiki_parquet():
    return parquet_bytes({"id": [a[0] for a in ARTICLES],
                          "url": [f"https://en.wikipedia.org/wiki?curid={a[0]}" for a in ARTICLES],
                          "title": [a[1] for a in ARTICLES], "text": [a[2] for a in ARTICLES]})


@pytest.fixture
def server():
    with StandInServer() as s:
        yield s


def read_jsonl(directory):
    docs = []
    for path in sorted(directory.glob("*.jsonl")):
        docs.extend(json.loads(line) for line in path.read_text(encoding="utf-8").splitlines())
    return docs


def test_wikipedia_from_hub_then_offline_from_cache(server, tmp_path):
    files = {"20231101.en/train-00000-of-00002.parquet": wiki_parquet(),
             "20231101.en/train-00001-of-00002.parquet": wiki_parquet(),
             "20231101.fr/train-00000-of-00001.parquet": b"not wanted"}
    server.add_hub_dataset("wikimedia/wikipedia", files)
    hf = tmp_path / "hf"
    summary = ok(run_cli("download", "wikipedia", "--workdir", tmp_path / "w1", "--json", server=server, hf_home=hf))
    assert summary["corpus"] == "wikicorpus_en" and summary["documents"] == 6  # the empty article is dropped
    assert not any("20231101.fr" in r[1] for r in server.requests)
    formatted = tmp_path / "w1/formatted/wikicorpus_en"
    docs = read_jsonl(formatted)
    assert [d["title"] for d in docs] == ["Ada Lovelace", "Alan Turing", "Grace Hopper"] * 2
    assert docs[0]["text"] == ARTICLES[0][2]
    download = json.loads((tmp_path / "w1/download/wikipedia/manifest.json").read_text())
    entry = download["files"]["20231101.en/train-00000-of-00002.parquet"]
    assert entry["sha256"] == hashlib.sha256(wiki_parquet()).hexdigest() and entry["verified"] == ["size", "sha256"]

    # The hub is gone; HF_HUB_OFFLINE=1 and the same HF_HOME serve the same files from the cache.
    server.stop()
    summary2 = ok(run_cli("download", "wikipedia", "--workdir", tmp_path / "w2", "--json", hf_home=hf, offline=True,
                          env={"HF_ENDPOINT": "http://127.0.0.1:9"}))
    assert summary2["commit"] == summary["commit"]
    manifest1 = json.loads((formatted / "manifest.json").read_text())["files"]
    manifest2 = json.loads((tmp_path / "w2/formatted/wikicorpus_en/manifest.json").read_text())["files"]
    assert manifest1 == manifest2
    # an empty cache offline is a one-line error
    line = one_line_error(run_cli("download", "wikipedia", "--workdir", tmp_path / "w3", hf_home=tmp_path / "empty",
                                  offline=True, env={"HF_ENDPOINT": "http://127.0.0.1:9"}))
    assert "wikimedia/wikipedia@main: not reachable" in line


def test_hub_file_with_a_wrong_published_checksum_is_rejected(server, tmp_path):
    server.add_hub_dataset("wikimedia/wikipedia", {"20231101.en/train-00000-of-00001.parquet": wiki_parquet()})
    # the listing publishes the sha256 of other bytes than the server then sends
    tree = server.hub[("wikimedia/wikipedia", "main")]["files"]
    original = tree["20231101.en/train-00000-of-00001.parquet"]

    class Tampered(dict):
        def get(self, key, default=None):  # the resolve endpoint serves a flipped byte
            data = super().get(key, default)
            return data[:-1] + bytes([data[-1] ^ 1]) if data is not None and key.endswith(".parquet") else data

    server.hub[("wikimedia/wikipedia", "main")]["files"] = Tampered(tree)
    result = run_cli("download", "wikipedia", "--workdir", tmp_path / "w", server=server, hf_home=tmp_path / "hf")
    line = one_line_error(result)
    tampered = original[:-1] + bytes([original[-1] ^ 1])
    assert (f"train-00000-of-00001.parquet: sha256 mismatch: expected {hashlib.sha256(original).hexdigest()} "
            f"(published), got {hashlib.sha256(tampered).hexdigest()}, again after a fresh download: the hub serves "
            "other bytes than it publishes (the copy was removed from the cache)") in line
    assert not (tmp_path / "w/formatted/wikicorpus_en/manifest.json").exists()
    assert not [p for p in (tmp_path / "hf").rglob("*.parquet")]  # nothing damaged is left in the cache


# -- the XML dump ---------------------------------------------------------------------

PAGES = [
    {"title": "Ada Lovelace", "id": 11,
     "text": "{{Infobox person|name=Ada}}'''Ada Lovelace''' was an [[England|English]] "
             "[[mathematician]].<ref>{{cite book|title=X}}</ref> She wrote notes.\n"
             "== Life ==\nShe met [[Charles Babbage]] in 1833.\n[[Category:Mathematicians]]"},
    {"title": "Lovelace", "id": 12, "text": "#REDIRECT [[Ada Lovelace]]", "redirect": "Ada Lovelace"},
    {"title": "Talk:Ada Lovelace", "id": 13, "ns": 1, "text": "A talk page. It is not an article."},
    {"title": "Only markup", "id": 14, "text": "{{Disambiguation}}\n{| class=wikitable\n| a || b\n|}\n[[Category:X]]"},
    {"title": "Alan Turing", "id": 15, "text": "'''Alan Turing''' was a [[computer scientist]]. He broke codes &amp; "
                                               "designed machines.\n\nHe was born in [[London]]."},
]


def publish_dump(server, date="20240101", data=None, md5=None, latest=False):
    data = data if data is not None else bz2.compress(wiki_dump_xml(PAGES))
    name = f"enwiki-{date}-pages-articles.xml.bz2"
    server.add_file(f"dumps/enwiki/{date}/{name}", data)
    listing = (f"{md5 or hashlib.md5(data).hexdigest()}  {name}\n"
               f"0123456789abcdef0123456789abcdef  enwiki-{date}-stub-articles.xml.gz\n")
    server.add_file(f"dumps/enwiki/{date}/enwiki-{date}-md5sums.txt", listing.encode())
    if latest:
        server.add_file("dumps/enwiki/latest/enwiki-latest-md5sums.txt", listing.encode())
    return f"/dumps/enwiki/{date}/{name}", data


def wiki_dump_xml(pages):
    from stand_in_servers import wiki_dump_xml as build

    return build(pages)


def test_wikipedia_dump_resumes_a_dropped_connection_and_extracts_text(server, tmp_path):
    path, data = publish_dump(server, latest=True)
    server.drop_after[path] = len(data) // 2
    work = tmp_path / "w"
    summary = ok(run_cli("download", "wikipedia", "--dump", "latest", "--workdir", work, "--json",
                         env={"BERTPREP_WIKIDUMP_URL": server.url + "/dumps"}))
    assert summary["dump"] == "20240101" and summary["documents"] == 2
    gets = [r for r in server.requests if r[1] == path]
    assert gets == [("GET", path, None), ("GET", path, f"bytes={len(data) // 2}-")]
    docs = read_jsonl(work / "formatted/wikicorpus_en")
    assert docs == [
        {"id": "11", "title": "Ada Lovelace",
         "text": "Ada Lovelace was an English mathematician. She wrote notes.\nShe met Charles Babbage in 1833."},
        {"id": "15", "title": "Alan Turing",
         "text": "Alan Turing was a computer scientist. He broke codes & designed machines.\nHe was born in London."},
    ]
    manifest = json.loads((work / "download/wikipedia/manifest.json").read_text())
    entry = manifest["files"]["enwiki-20240101-pages-articles.xml.bz2"]
    assert entry["md5"] == hashlib.md5(data).hexdigest() and entry["verified"] == ["md5"]
    assert looks_complete(work / "download/wikipedia") == ["enwiki-20240101-pages-articles.xml.bz2", "manifest.json"]


def test_wikipedia_dump_checksum_mismatch(server, tmp_path):
    publish_dump(server, md5="0" * 32)
    work = tmp_path / "w"
    line = one_line_error(run_cli("download", "wikipedia", "--dump", "20240101", "--workdir", work,
                                  "--base-url", server.url + "/dumps"))
    assert ("enwiki-20240101-pages-articles.xml.bz2: md5 mismatch: expected 00000000000000000000000000000000 "
            "(published)") in line
    assert looks_complete(work / "download/wikipedia") in ([], ["manifest.json"])
    assert not (work / "formatted/wikicorpus_en/manifest.json").exists()


def test_wikipedia_dump_404(server, tmp_path):
    line = one_line_error(run_cli("download", "wikipedia", "--dump", "20990101", "--workdir", tmp_path / "w",
                                  "--base-url", server.url + "/dumps"))
    assert line.endswith("/dumps/enwiki/20990101/enwiki-20990101-md5sums.txt: HTTP 404 Not Found")


def test_wikipedia_dump_corrupt_bz2(server, tmp_path):
    good = bz2.compress(wiki_dump_xml(PAGES * 50))
    corrupt = good[: len(good) // 2] + bytes(100) + good[len(good) // 2 + 100:]
    publish_dump(server, data=corrupt)  # the published md5 is that of the corrupt file
    work = tmp_path / "w"
    line = one_line_error(run_cli("download", "wikipedia", "--dump", "20240101", "--workdir", work,
                                  "--base-url", server.url + "/dumps"))
    assert "enwiki-20240101-pages-articles.xml.bz2: corrupt bz2 archive after" in line
    assert looks_complete(work / "formatted") == []


@pytest.mark.parametrize("fields, message", [
    ({"lang": "en/../../x", "dump": "latest"}, r"WikipediaOptions\.lang: expected a Wikipedia language code "
                                               r"\(lowercase letters and digits, joined by '-' or '_', such as en or "
                                               r"zh-min-nan\), got 'en/\.\./\.\./x'"),
    ({"lang": "EN"}, r"WikipediaOptions\.lang: .* got 'EN'"),
    ({"lang": ""}, r"WikipediaOptions\.lang: .* got ''"),
    ({"dump": "../20240101"}, r"WikipediaOptions\.dump: expected 'latest' or a date YYYYMMDD, got '\.\./20240101'"),
    ({"dump": ""}, r"WikipediaOptions\.dump: expected 'latest' or a date YYYYMMDD, got ''"),
    ({"date": "*"}, r"WikipediaOptions\.date: expected a hub release date YYYYMMDD such as 20231101, got '\*'"),
])
def test_wikipedia_refuses_a_lang_or_dump_that_is_no_code_before_any_request(server, tmp_path, fields, message):
    """lang and the dump's date go into URLs and into the corpus directory wikicorpus_<lang>: 'en/../../x' led
    outside the work directory."""
    from bertprep.errors import UsageError
    from bertprep.stages.download import download
    from bertprep.stages.download.wikipedia import WikipediaOptions

    with pytest.raises(UsageError, match=f"^{message}$"):
        WikipediaOptions(**fields)
    with pytest.raises(UsageError, match=f"^{message}$"):
        download("wikipedia", workdir=tmp_path / "w", base_url=server.url + "/dumps", **fields)
    assert server.requests == [] and not (tmp_path / "w").exists()
    for lang in ("en", "zh-min-nan", "be-x-old", "roa_rup", "simple"):  # the codes Wikipedia and the hub use
        assert WikipediaOptions(lang=lang, dump="20240101").lang == lang


def test_wikipedia_and_prepare_refuse_a_bad_lang_on_the_command_line(server, tmp_path):
    from bertprep.errors import UsageError
    from bertprep.stages.prepare import PrepareOptions

    line = one_line_error(run_cli("download", "wikipedia", "--lang", "../x", "--dump", "latest", "--workdir",
                                  tmp_path / "w", "--base-url", server.url + "/dumps"), code=2)
    assert line.startswith("bertprep download: error: --lang: expected a Wikipedia language code") and \
        line.endswith("got '../x'")
    assert server.requests == [] and not (tmp_path / "w").exists()
    with pytest.raises(UsageError, match=r"^PrepareOptions\.lang: expected a Wikipedia language code .* got '\.\./x'$"):
        PrepareOptions(sources=("wikipedia",), vocab="v.txt", lang="../x")


@pytest.mark.parametrize("flags, said, field_said", [
    (["--train-shards", "0"], "--train-shards and --test-shards must be at least 1",
     "PrepareOptions.train_shards and PrepareOptions.test_shards must be at least 1"),
    (["--dupe-factor", "0"], "--dupe-factor must be at least 1, not 0",
     "PrepareOptions.dupe_factor must be at least 1"),
    (["--configs", "128/20,64/70"], "--configs 64/70: --pred 70 is not possible with --seq 64: at most seq - 3 = 61",
     "PrepareOptions.configs 64/70: --pred 70 is not possible with --seq 64"),
    (["--configs", "128/20,512/80,128/20"], "--configs 128/20 is given twice: give each seq/pred pair once",
     "PrepareOptions.configs 128/20 is given twice"),
])
def test_prepare_checks_every_stages_flags_before_the_first_stage_runs(server, tmp_path, flags, said, field_said):
    """Each stage's options were built as it started: a bad --train-shards or --configs pair ended the run after
    the downloads (hours, for Wikipedia), under `bertprep shard` or `bertprep create`."""
    from bertprep.errors import UsageError
    from bertprep.stages.prepare import PrepareOptions

    server.add_hub_dataset("wikimedia/wikipedia", {"20231101.en/train-00000-of-00001.parquet": wiki_parquet()})
    line = one_line_error(run_cli("prepare", "wikipedia", "--vocab", "v.txt", "--workdir", tmp_path / "w", *flags,
                                  server=server, hf_home=tmp_path / "hf"), code=2)
    assert line.startswith(f"bertprep prepare: error: {said}"), line
    assert server.requests == [] and not (tmp_path / "w").exists()
    fields = {"train_shards": 0} if "--train-shards" in flags else {"dupe_factor": 0} if "--dupe-factor" in flags \
        else {"configs": flags[1]}
    with pytest.raises(UsageError, match=f"^{re.escape(field_said)}"):
        PrepareOptions(sources=("wikipedia",), vocab="v.txt", **fields)


@pytest.mark.parametrize("configs", [(), [], ((128, 20), (128, 20))])
def test_prepare_refuses_no_config_or_one_twice_from_python(configs):
    """`PrepareOptions(configs=())` (the command line's parser refuses an empty --configs) was taken: `prepare`
    downloaded and sharded the corpus, created no records and returned its "done" summary; a pair given twice ran
    its create twice under one label, the summary keeping one. Both are refused when the options are built."""
    from bertprep.errors import UsageError
    from bertprep.stages.prepare import PrepareOptions

    said = "is given twice: give each seq/pred pair once" if configs else "is empty: give at least one value"
    with pytest.raises(UsageError, match=rf"^PrepareOptions\.configs (128/20 )?{said}"):
        PrepareOptions(sources=("wikipedia",), vocab="v.txt", configs=configs)


@pytest.mark.parametrize("workers", [0, -3])
def test_download_refuses_fewer_than_one_worker_as_the_engines_do(server, tmp_path, workers):
    """0 and -3 quietly meant one worker, where EngineOptions(workers=0) is refused."""
    from bertprep.errors import UsageError
    from bertprep.stages.download.glue import GlueOptions
    from bertprep.stages.download.wikipedia import WikipediaOptions

    for cls in (GlueOptions, WikipediaOptions):
        with pytest.raises(UsageError, match=f"^{cls.__name__}\\.workers must be at least 1, not {workers}$"):
            cls(workers=workers)
    line = one_line_error(run_cli("download", "glue", "--workers", workers, "--workdir", tmp_path / "w",
                                  server=server), code=2)
    assert line == f"bertprep download: error: --workers must be at least 1, not {workers}"
    assert server.requests == [] and not (tmp_path / "w").exists()


@pytest.mark.parametrize("source", [["squad"], ["glue"], ["pretrained", "--model", "bert-base-uncased"]])
def test_download_of_a_source_without_workers_refuses_workers(server, tmp_path, source):
    """squad, glue and pretrained took --workers 4 and read it nowhere, exit 0; even the default's value, given,
    is refused."""
    import os

    from bertprep.errors import UsageError
    from bertprep.stages.download import options_class

    for workers in (4, os.cpu_count() or 1):
        line = one_line_error(run_cli("download", *source, "--workers", workers, "--workdir", tmp_path / "w",
                                      server=server), code=2)
        assert line == (f"bertprep download: error: --workers {workers}: download {source[0]} has no text to "
                        "extract and runs no workers (only wikipedia and bookcorpus do); leave it out")
    cls = options_class(source[0])
    with pytest.raises(UsageError, match=f"^{cls.__name__}\\.workers 4: download {source[0]} has no text"):
        cls(workers=4, **({"model": "bert-base-uncased"} if source[0] == "pretrained" else {}))
    assert server.requests == [] and not (tmp_path / "w").exists()


@pytest.mark.parametrize("source", ["squad", "glue", "pretrained"])
def test_download_from_python_refuses_workers_equal_to_the_core_count_where_the_source_runs_none(server, tmp_path,
                                                                                                source):
    """The options' default was the core count, and only another value was refused: `SquadOptions(workers=2)`
    passed on a 2-core machine and was refused on an 8-core one. Any value given is refused on every machine;
    left out, it is None, and one per core where the source extracts."""
    import os

    from bertprep.errors import UsageError
    from bertprep.stages.download import download, options_class

    cls = options_class(source)
    model = {"model": "bert-base-uncased"} if source == "pretrained" else {}
    cores = os.cpu_count() or 1
    with pytest.raises(UsageError, match=f"^{cls.__name__}\\.workers {cores}: download {source} has no text to "
                                         "extract and runs no workers \\(only wikipedia and bookcorpus do\\); "
                                         "leave it out$"):
        download(source, workers=cores, workdir=tmp_path / "w", base_url=server.url, **model)
    assert server.requests == [] and not (tmp_path / "w").exists()
    assert cls(**model).workers is None
    for extracting in ("wikipedia", "bookcorpus"):
        assert options_class(extracting)().workers == cores


# -- BookCorpus --------------------------------------------------------------------

BOOK_LINES = [f"line {i} of the books ." if i % 7 else "" for i in range(1, 26)]


def test_bookcorpus_from_hub_groups_lines(server, tmp_path):
    server.add_hub_dataset("bookcorpus/bookcorpus",
                           {"plain_text/train/0000.parquet": parquet_bytes({"text": BOOK_LINES})},
                           revision="refs/convert/parquet")
    work = tmp_path / "w"
    summary = ok(run_cli("download", "bookcorpus", "--lines-per-document", "10", "--workdir", work, "--json",
                         server=server, hf_home=tmp_path / "hf"))
    assert summary["documents"] == 3
    docs = read_jsonl(work / "formatted/bookcorpus")
    assert [d["text"].count("\n") + 1 for d in docs] == [9, 9, 4]  # lines 7, 14, 21 are blank
    assert docs[2]["text"].splitlines()[-1] == "line 25 of the books ."
    assert any("refs%2Fconvert%2Fparquet" in r[1] for r in server.requests)


def _tarball(lines_by_member):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:bz2") as archive:
        for name, lines in lines_by_member.items():
            data = ("\n".join(lines) + "\n").encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_bookcorpus_tarball(server, tmp_path):
    data = _tarball({"books_large_p1.txt": BOOK_LINES, "books_large_p2.txt": BOOK_LINES[:5]})
    server.add_file("bc/bookcorpus.tar.bz2", data)
    work = tmp_path / "w"
    line = one_line_error(run_cli("download", "bookcorpus", "--tarball", "--workdir", work, "--base-url",
                                  server.url + "/bc"))
    assert "md5 mismatch: expected 5c906ede3c5265f8934b62c275a754bc (published)" in line
    summary = ok(run_cli("download", "bookcorpus", "--tarball", "--md5", hashlib.md5(data).hexdigest(),
                         "--lines-per-document", "10",
                         "--workdir", work, "--base-url", server.url + "/bc", "--json"))
    assert summary["documents"] == 4  # 3 from p1, 1 from p2: a document never spans two files
    assert [d["id"] for d in read_jsonl(work / "formatted/bookcorpus")] == [
        "books_large_p1.txt:0", "books_large_p1.txt:10", "books_large_p1.txt:20", "books_large_p2.txt:0"]


# -- the chain -----------------------------------------------------------------------


def test_chain_download_shard_create_books_wiki(server, tmp_path, shared_dir):
    wiki_pages = [{"title": f"Page {i}", "id": 100 + i,
                   "text": " ".join(f"Sentence {j} of page {i} talks about [[history]] and science."
                                    for j in range(40))}
                  for i in range(30)]
    publish_dump(server, data=bz2.compress(wiki_dump_xml(wiki_pages)))
    server.add_hub_dataset("bookcorpus/bookcorpus", {
        "plain_text/train/0000.parquet": parquet_bytes({"text": [f"the book line {i} says something ."
                                                                 for i in range(2000)]})},
        revision="refs/convert/parquet")
    work = tmp_path / "w"
    ok(run_cli("download", "wikipedia", "--dump", "20240101", "--workdir", work, "--base-url", server.url + "/dumps"))
    ok(run_cli("download", "bookcorpus", "--lines-per-document", "100", "--workdir", work, server=server,
               hf_home=tmp_path / "hf"))
    summary = ok(run_cli("shard", "--workdir", work, "--corpus", "books_wiki_en_corpus", "--train-shards", "4",
                         "--test-shards", "2", "--json"))
    assert summary["documents"] == {"training": 45, "test": 5}  # 30 pages + 20 book chunks, 10% test
    shards = work / "sharded/books_wiki_en_corpus"
    assert sorted(p.name for p in (shards / "training").iterdir()) == [f"books_wiki_en_corpus_training_{i}.txt"
                                                                       for i in range(4)]
    text = (shards / "training/books_wiki_en_corpus_training_0.txt").read_text(encoding="utf-8")
    assert "Sentence 3 of page" in text or "the book line" in text
    created = ok(run_cli("create", "--workdir", work, "--corpus", "books_wiki_en_corpus", "--vocab",
                         shared_dir / "fixtures/golden/vocab.txt", "--dupe-factor", "1", "--json"))
    records = list((work / "records").rglob("*.tfrecord"))
    assert len(records) == 6, created
    assert list((work / "records").rglob("part-*"))


def test_prepare_chains_download_shard_and_both_create_configs_and_resumes(server, tmp_path, shared_dir):
    server.add_hub_dataset("wikimedia/wikipedia", {"20231101.en/train-00000-of-00001.parquet": parquet_bytes({
        "id": [str(i) for i in range(12)], "url": [f"u{i}" for i in range(12)],
        "title": [f"Page {i}" for i in range(12)],
        "text": [" ".join(f"Sentence {j} of page {i} is about science." for j in range(20)) for i in range(12)]})})
    server.add_hub_dataset("bookcorpus/bookcorpus", {
        "plain_text/train/0000.parquet": parquet_bytes({"text": [f"the book line {i} says something ."
                                                                 for i in range(1000)]})},
        revision="refs/convert/parquet")
    work = tmp_path / "w"
    argv = ["prepare", "wikipedia", "bookcorpus", "--vocab", shared_dir / "fixtures/golden/vocab.txt", "--workdir",
            work,
            "--configs", "128/20,512/80", "--dupe-factor", "1", "--train-shards", "3", "--test-shards", "1", "--json"]
    first = ok(run_cli(*argv, server=server, hf_home=tmp_path / "hf"))
    assert sorted(first) == ["create 128/20", "create 512/80", "download bookcorpus", "download wikipedia", "shard"]
    assert first["shard"]["corpus"] == "books_wiki_en_corpus"
    for config, name in (("create 128/20", "seq_len_128_max_pred_20"), ("create 512/80", "seq_len_512_max_pred_80")):
        assert name in first[config]["records_dir"] and first[config]["shards_created"] == 4
        assert len(list((work / "records").glob(f"*{name}*/books_wiki_en_corpus/ofrecord/*/part-*"))) == 4
    again = ok(run_cli(*argv, server=server, hf_home=tmp_path / "hf"))
    assert again["create 128/20"]["shards_created"] == again["create 512/80"]["shards_created"] == 0
    assert again["create 128/20"]["instances"] == first["create 128/20"]["instances"]


def test_prepare_stops_at_the_first_failing_stage(server, tmp_path, shared_dir):
    server.add_hub_dataset("wikimedia/wikipedia", {"20231101.en/train-00000-of-00001.parquet": wiki_parquet()})
    # bookcorpus is not on this hub: its download fails, and nothing after it runs.
    result = run_cli("prepare", "wikipedia", "bookcorpus", "--vocab", shared_dir / "fixtures/golden/vocab.txt",
                     "--workdir", tmp_path / "w", server=server, hf_home=tmp_path / "hf")
    assert one_line_error(result).startswith("bertprep download: error:")
    assert (tmp_path / "w/formatted/wikicorpus_en").is_dir()
    assert not (tmp_path / "w/sharded").exists() and not (tmp_path / "w/records").exists()


# -- the Python API (issue 31): download(...) without argv -----------------------------------------------


def test_wikipedia_dump_function_gives_the_cli_corpus_and_summary(server, tmp_path):
    from bertprep.stages.download import download

    publish_dump(server)
    base = server.url + "/dumps"
    by_cli = ok(run_cli("download", "wikipedia", "--dump", "20240101", "--base-url", base, "--workdir",
                        tmp_path / "cli", "--workers", "1", "--json"))
    summary = download("wikipedia", dump="20240101", base_url=base, workdir=tmp_path / "py", workers=1)
    assert same_apart_from_workdir(summary, tmp_path / "py", by_cli, tmp_path / "cli")
    assert read_jsonl(tmp_path / "py/formatted/wikicorpus_en") == read_jsonl(tmp_path / "cli/formatted/wikicorpus_en")


def test_bookcorpus_function_from_the_hub_gives_the_cli_corpus_and_summary(server, tmp_path):
    from bertprep.errors import UsageError
    from bertprep.stages.download.bookcorpus import BookcorpusOptions

    server.add_hub_dataset("bookcorpus/bookcorpus",
                           {"plain_text/train/0000.parquet": parquet_bytes({"text": BOOK_LINES})},
                           revision="refs/convert/parquet")
    settings = {"server": server, "hf_home": tmp_path / "hf"}
    by_cli = ok(run_cli("download", "bookcorpus", "--lines-per-document", "10", "--workdir", tmp_path / "cli", "--json",
                        **settings))
    code = ("import json; from bertprep.stages.download import download; "
            f"print(json.dumps(dict(download('bookcorpus', lines_per_document=10, workdir={str(tmp_path / 'py')!r}))))")
    summary = ok(run_python(code, **settings))
    assert same_apart_from_workdir(summary, tmp_path / "py", by_cli, tmp_path / "cli")
    assert read_jsonl(tmp_path / "py/formatted/bookcorpus") == read_jsonl(tmp_path / "cli/formatted/bookcorpus")
    with pytest.raises(UsageError, match="^BookcorpusOptions.lines_per_document must be at least 1$"):
        BookcorpusOptions(lines_per_document=0)


def test_prepare_function_gives_the_cli_records_and_summary(server, tmp_path, shared_dir):
    from bertprep.errors import UsageError
    from bertprep.stages.prepare import PrepareOptions

    server.add_hub_dataset("wikimedia/wikipedia", {"20231101.en/train-00000-of-00001.parquet": wiki_parquet()})
    vocab = shared_dir / "fixtures/golden/vocab.txt"
    settings = {"server": server, "hf_home": tmp_path / "hf"}
    by_cli = ok(run_cli("prepare", "wikipedia", "--vocab", vocab, "--workdir", tmp_path / "cli", "--configs", "64/10",
                        "--dupe-factor", "1", "--train-shards", "2", "--test-shards", "1", "--workers", "1", "--json",
                        **settings))
    code = ("import json; from bertprep.engines import EngineOptions; from bertprep.stages.prepare import prepare; "
            f"print(json.dumps(dict(prepare(sources=('wikipedia',), vocab={str(vocab)!r}, "
            f"workdir={str(tmp_path / 'py')!r}, "
            "configs=((64, 10),), dupe_factor=1, train_shards=2, test_shards=1, engine=EngineOptions(workers=1)))))")
    summary = ok(run_python(code, **settings))
    for run in (summary, by_cli):  # how long a stage took is all that may differ
        for timed in (run["shard"], run["create 64/10"]):
            timed.update(seconds=None, mb_per_s=None)
    assert same_apart_from_workdir(summary, tmp_path / "py", by_cli, tmp_path / "cli")
    records = sorted((tmp_path / "cli/records").rglob("*.tfrecord"))
    assert records and [p.read_bytes() for p in records] == \
        [(tmp_path / "py" / p.relative_to(tmp_path / "cli")).read_bytes() for p in records]
    # the first stage that fails raises its own error, and nothing after it runs
    code = ("from bertprep.errors import DataError; from bertprep.stages.prepare import prepare\n"
            f"try: prepare(sources=('wikipedia', 'bookcorpus'), vocab={str(vocab)!r}, "
            f"workdir={str(tmp_path / 'w')!r})\n"
            "except DataError as exc: print(exc)")
    failed = run_python(code, **settings)
    assert failed.stdout.startswith("bookcorpus/bookcorpus@refs/convert/parquet")
    assert not (tmp_path / "w/sharded").exists()
    with pytest.raises(UsageError,
                       match="^wikipedia with bookcorpus is the English books_wiki_en_corpus: "
                             "use PrepareOptions.lang en$"):
        PrepareOptions(sources=("wikipedia", "bookcorpus"), vocab="v.txt", lang="fr")
    assert PrepareOptions(sources=("bookcorpus", "bookcorpus"), vocab="v.txt", configs="128/20, 512/80").configs == \
        ((128, 20), (512, 80))


def test_a_damaged_copy_in_the_hub_cache_is_downloaded_again(server, tmp_path):
    """A cached hub file whose bytes went bad (a disk error, a copy killed mid-write) ended every later download in
    `sha256 mismatch ...; delete <blob> and rerun`, the damaged blob kept. It is now removed and fetched once more;
    offline, where it cannot be, the one line still says which file to delete."""
    server.add_hub_dataset("wikimedia/wikipedia", {"20231101.en/train-00000-of-00001.parquet": wiki_parquet()})
    assert run_cli("download", "wikipedia", "--workdir", tmp_path / "w1", "--quiet", server=server,
                   hf_home=tmp_path / "hf").returncode == 0
    (blob,) = [p for p in (tmp_path / "hf").rglob("blobs/*") if p.is_file()]
    good = blob.read_bytes()
    blob.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    offline = one_line_error(run_cli("download", "wikipedia", "--workdir", tmp_path / "w2", server=server,
                                     hf_home=tmp_path / "hf", offline=True))
    assert offline.endswith(f"(published), got {hashlib.sha256(blob.read_bytes()).hexdigest()}; the cached copy is "
                            f"damaged (HF_HUB_OFFLINE=1: not downloaded again): delete {blob} and rerun online")
    result = run_cli("download", "wikipedia", "--workdir", tmp_path / "w3", server=server, hf_home=tmp_path / "hf")
    assert (result.returncode, result.stderr.count("error")) == (0, 0), result.stderr
    assert blob.read_bytes() == good
    for workdir in ("w1", "w3"):
        assert (tmp_path / workdir / "formatted/wikicorpus_en/manifest.json").is_file()
