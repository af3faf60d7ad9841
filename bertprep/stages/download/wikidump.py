"""Wikipedia from the Wikimedia XML dump (`bertprep download wikipedia --dump`).

    <base>/<lang>wiki/<date>/<lang>wiki-<date>-pages-articles.xml.bz2
    <base>/<lang>wiki/<date>/<lang>wiki-<date>-md5sums.txt

`--dump latest` reads `<lang>wiki/latest/<lang>wiki-latest-md5sums.txt`,
which names the dated file, and then downloads from the dated directory so
the manifest pins the date. The dump is downloaded resumably and checked
against the published md5, then streamed (bz2 → XML → pages, never held
whole): main-namespace pages that are not redirects are stripped of markup
(`wikimarkup`, with mwparserfromhell) in a pool of workers and written as
formatted parts of `PAGES_PER_PART` documents, with the title kept as
metadata.
"""

import bz2
import itertools
import os
import re
import xml.etree.ElementTree as ET

from mwparserfromhell.parser import ParserError

from bertprep.atomic import hold
from bertprep.engines import pool_results
from bertprep.errors import DataError, UsageError
from bertprep.stages.download.formatted import corpus_dir, save_parts_manifest, write_part
from bertprep.stages.download.http import SourceDownloads, fetch_text, join_url, mirror_base, page_note
from bertprep.stages.download.wikimarkup import STRIPPER, wikitext_to_text

DEFAULT_BASE_URL = "https://dumps.wikimedia.org"
BASE_URL_ENV = "BERTPREP_WIKIDUMP_URL"
PAGES_PER_PART = 50_000
BATCH = 256  # pages per task sent to a worker


def resolve_dump(base, lang, dump, limits):
    """(date, file name, md5) of the pages-articles dump, from the published md5 list."""
    wiki = f"{lang}wiki"
    if dump == "latest":
        listing_url = join_url(base, wiki, "latest", f"{wiki}-latest-md5sums.txt")
    elif re.fullmatch(r"\d{8}", dump):
        listing_url = join_url(base, wiki, dump, f"{wiki}-{dump}-md5sums.txt")
    else:
        raise UsageError(f"--dump: expected 'latest' or a date YYYYMMDD, got {dump!r}")
    pattern = re.compile(rf"([0-9a-f]{{32}})\s+\*?({re.escape(wiki)}-(\d{{8}})-pages-articles\.xml\.bz2)$")
    listing = fetch_text(listing_url, limits=limits)
    for line in listing.splitlines():
        match = pattern.match(line.strip())
        if match and (dump == "latest" or match.group(3) == dump):
            return match.group(3), match.group(2), match.group(1)
    raise DataError(f"{listing_url}: no md5 for {wiki}-{'<date>' if dump == 'latest' else dump}-pages-articles.xml.bz2"
                    f"{page_note(listing.encode())}")


def iter_pages(path):
    """Yield (page id, title, wikitext) of main-namespace, non-redirect pages from a .xml.bz2 dump."""
    pages = 0
    try:
        with bz2.open(path, "rb") as stream:
            context = ET.iterparse(stream, events=("start", "end"))
            _event, root = next(context)
            for event, element in context:
                if event != "end" or not (element.tag == "page" or element.tag.endswith("}page")):
                    continue
                pages += 1
                ns = _child_text(element, "ns")
                redirect = any(child.tag.endswith("redirect") for child in element)
                if ns == "0" and not redirect:
                    revision = next((c for c in element if c.tag.endswith("revision")), None)
                    text = _child_text(revision, "text") if revision is not None else None
                    yield _child_text(element, "id") or "", _child_text(element, "title") or "", text or ""
                root.clear()  # drop finished pages: memory stays that of one page
    except (OSError, EOFError) as exc:
        raise DataError(f"{path}: corrupt bz2 archive after {pages:,} pages ({exc})") from None
    except ET.ParseError as exc:
        raise DataError(f"{path}: invalid XML at line {exc.position[0]} after {pages:,} pages ({exc})") from None


def _child_text(element, name):
    for child in element:
        if child.tag == name or child.tag.endswith("}" + name):
            return child.text
    return None


def _clean_batch(batch):
    return [{"id": page_id, "title": title, "text": _page_text(page_id, title, text)} for page_id, title, text in batch]


def _page_text(page_id, title, wikitext):
    try:
        return wikitext_to_text(wikitext)
    except ParserError as exc:  # the parser's own bug report; name the page that met it
        raise DataError(f"page {page_id} ({title}): mwparserfromhell could not parse its wikitext ({exc})") from None


def extract(path, directory, prefix, staging, workers=1, progress=None):
    """Stream the dump into `<prefix>-<i>.jsonl` parts of PAGES_PER_PART documents; returns {file: stats}."""
    batches = _batched(iter_pages(path), BATCH)
    if workers > 1:
        import multiprocess

        pool = multiprocess.Pool(workers)
        cleaned = pool_results(pool, pool.imap(_clean_batch, batches))  # ends at a worker killed mid-batch
    else:
        pool, cleaned = None, map(_clean_batch, batches)
    documents = (doc for batch in cleaned for doc in batch)
    files = {}
    try:
        for index in itertools.count():
            chunk = itertools.islice(documents, PAGES_PER_PART)
            first = next(chunk, None)
            if first is None:
                break
            filename = f"{prefix}-{index:04d}.jsonl"
            stats = write_part(os.path.join(directory, filename), itertools.chain([first], chunk), staging)
            files[filename] = stats
            if progress is not None:
                progress.advance(0, documents=stats["documents"])
    finally:
        if pool is not None:
            pool.terminate()
    return files


def _batched(iterable, size):
    iterator = iter(iterable)
    while batch := list(itertools.islice(iterator, size)):
        yield batch


def run(options, workdir, progress):
    """`download wikipedia --dump` (WikipediaOptions)."""
    base = mirror_base(options.base_url, BASE_URL_ENV, DEFAULT_BASE_URL)
    wiki = f"{options.lang}wiki"
    limits = options.limits
    date, name, md5 = resolve_dump(base, options.lang, options.dump, limits)
    downloads = SourceDownloads(os.path.join(workdir, "download", "wikipedia"), "wikipedia", progress, limits)
    entry = downloads.get(join_url(base, wiki, date, name), name, checksums={"md5": md5})
    downloads.set_info(dump=date, lang=options.lang)
    corpus = f"wikicorpus_{options.lang}"
    directory = corpus_dir(workdir, corpus)
    # The stripper is part of what made the text: another version re-extracts.
    source = {"dump": name, "md5": md5, "markup": STRIPPER}
    with hold(directory, "bertprep download") as staging:
        done = save_parts_manifest(directory, corpus, source, None)
        if done is None:
            files = extract(downloads.path(name), directory, f"{wiki}-{date}", staging, options.workers, progress)
            done = save_parts_manifest(directory, corpus, source, files)
    documents = sum(f["documents"] for f in done["files"].values())
    rows = [(name, f"{entry['bytes']:,} bytes, md5 verified"), ("formatted", f"{directory} ({documents:,} documents)")]
    return {"source": "wikipedia", "dump": date, "corpus": corpus, "documents": documents,
            "download": downloads.manifest["files"], "formatted": directory}, rows
