"""Speed of the wiki-markup stripper (mwparserfromhell) against the hand-written one it replaced.

    python scripts/bench_wikimarkup.py [--size-mb 8] [--repeat 3] [--seed 1]

The corpus is generated here, deterministically from --seed: articles shaped
like English Wikipedia's wikitext (an infobox with nested templates, a lead
with bold title, piped links and references, sections with headings,
paragraphs, lists, an occasional table, file links with captions, quotes,
external links, entities, comments, categories, interlanguage links and
behaviour switches). Both strippers run over the same articles in this one
process; each figure is the best of --repeat passes, in MB of wikitext
(UTF-8) per second on one core. The baseline is bertprep's previous
stripper, copied below unchanged and labelled as such.
"""

import argparse
import html
import random
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bertprep.stages.download.wikimarkup import STRIPPER, wikitext_to_text  # noqa: E402

# ---------------------------------------------------------------------------
# BASELINE: bertprep/stages/download/wikimarkup.py as it was before mwparserfromhell
# replaced it (git history: the commit before "wikimarkup: mwparserfromhell").
# Copied unchanged apart from the function's name (its imports, html and re, are at the top of this file);
# only this benchmark uses it.
# ---------------------------------------------------------------------------

# Extension tags whose content is not prose (dropped with their content).
_DROP_TAGS = ("ref", "math", "chem", "ce", "gallery", "timeline", "score", "syntaxhighlight", "source", "imagemap",
              "mapframe", "maplink", "graph", "templatedata", "hiero", "inputbox", "categorytree", "references",
              "table")
_COMMENT = re.compile(r"<!--.*?(?:-->|$)", re.S)
_SELF_CLOSING = re.compile(r"<(?:%s)\b[^>]*/>" % "|".join(_DROP_TAGS), re.I)
_PAIRED = re.compile(r"<(%s)\b[^>]*>.*?</\1\s*>" % "|".join(_DROP_TAGS), re.I | re.S)
_BR = re.compile(r"<br\s*/?>", re.I)
_TAG = re.compile(r"</?[a-zA-Z][a-zA-Z0-9]*\b[^<>]*>")
_INNER_LINK = re.compile(r"\[\[([^\[\]]*)\]\]")
_EXTERNAL_LINK = re.compile(r"\[(?:https?:|ftp:|//)[^\s\]]*\s*([^\]]*)\]")
_BOLD_ITALIC = re.compile(r"'{2,5}")
_MAGIC_WORD = re.compile(r"__[A-Z]+__")
_HEADING = re.compile(r"^=+.*=+$")
_SPACES = re.compile(r"[ \t\u00a0]+")
# Namespaces whose links are not text. Interlanguage links ("fr:...") are
# recognised by a short lowercase prefix.
_NON_TEXT_NAMESPACES = {"file", "image", "category", "media", "wikt", "wiktionary", "special", "template"}
_INTERLANGUAGE = re.compile(r"[a-z]{2,3}(?:-[a-z]+)*$")


def remove_nested(text, opener, closer):
    """Remove balanced opener...closer spans (nesting allowed).

    An opener that is never closed is dropped alone, keeping the text after
    it, rather than losing the rest of the page.
    """
    out, depth, start, open_at = [], 0, 0, 0
    for match in re.finditer(re.escape(opener) + "|" + re.escape(closer), text):
        if match.group() == opener:
            if depth == 0:
                out.append(text[start:match.start()])
                open_at = match.start()
            depth += 1
        elif depth:
            depth -= 1
            if depth == 0:
                start = match.end()
    if depth:
        return "".join(out) + remove_nested(text[open_at + len(opener):], opener, closer)
    out.append(text[start:])
    return "".join(out)


def _link(match):
    target, _, label = match.group(1).partition("|")
    target = target.strip()
    if target.startswith(":"):
        target = target[1:]  # [[:Category:X]] is a visible link
    elif ":" in target:
        namespace = target.split(":", 1)[0].strip().lower()
        if namespace in _NON_TEXT_NAMESPACES or _INTERLANGUAGE.fullmatch(namespace):
            return ""
    if label:
        return label.rsplit("|", 1)[-1]
    return target.split("#", 1)[0] if not target.startswith("#") else target[1:]


def baseline_wikitext_to_text(wikitext):
    text = _COMMENT.sub("", wikitext)
    text = _SELF_CLOSING.sub("", text)
    text = _PAIRED.sub("", text)
    text = remove_nested(text, "{{", "}}")
    text = remove_nested(text, "{|", "|}")
    while True:  # innermost links first, so a file caption's links go with the file
        replaced = _INNER_LINK.sub(_link, text)
        if replaced == text:
            break
        text = replaced
    text = _EXTERNAL_LINK.sub(lambda m: m.group(1), text)
    text = _BR.sub(" ", text)
    text = _TAG.sub("", text)
    text = _BOLD_ITALIC.sub("", text)
    text = _MAGIC_WORD.sub("", text)
    text = html.unescape(text)
    paragraphs = []
    for line in text.split("\n"):
        line = _SPACES.sub(" ", line).strip()
        if not line or _HEADING.match(line) or line[0] in "*#:;|!{}" or line.startswith("----"):
            continue
        paragraphs.append(line)
    return "\n".join(paragraphs)

# ------------------------------ end of BASELINE ------------------------------


# -- the generated corpus ------------------------------------------------------

WORDS = ("the of and in to was a is for on as by with he that at from his it an were are which this also be "
         "has or had first its new after who they not their she her been one two three years year between "
         "during city river county state school university church team season war army party government "
         "album song film series station line village district region population built named became used "
         "known later early national international world history member members company game games award "
         "north south east west century period area town family house railway road bridge island language").split()
NAMES = ("London Paris Berlin Ohio Texas Kerala Danube Lovelace Babbage Turing Hopper Curie Newton Darwin "
         "Einstein Tesla Faraday Kepler Galileo Copernicus Mozart Beethoven Bach Chopin Verdi Wagner").split()
TEMPLATES = ("nowrap", "convert", "lang", "abbr", "small", "IPA", "sfn", "efn", "cvt", "ill")
LANGS = ("fr", "de", "es", "it", "ja", "zh", "ru", "pt", "nl", "pl", "simple", "zh-min-nan")


def sentence(rng, refs):
    words = []
    for _ in range(rng.randint(8, 25)):
        roll = rng.random()
        word = rng.choice(WORDS)
        if roll < 0.06:
            words.append(f"[[{rng.choice(NAMES)}]]")
        elif roll < 0.10:
            words.append(f"[[{rng.choice(NAMES)} {word}|{word}]]")
        elif roll < 0.12:
            words.append(f"''{word} {rng.choice(WORDS)}''")
        elif roll < 0.13:
            words.append(f"{{{{{rng.choice(TEMPLATES)}|{rng.randint(1, 999)}|{word}}}}}")
        elif roll < 0.14:
            words.append(f"{rng.randint(1, 99)}&nbsp;km")
        elif roll < 0.145:
            words.append(f"{rng.randint(1800, 2000)}&ndash;{rng.randint(2001, 2020)}")
        elif roll < 0.15:
            words.append(f"[https://example.org/{word} {word} site]")
        else:
            words.append(word)
    text = " ".join(words)
    text = text[0].upper() + text[1:] + "."
    roll = rng.random()
    if roll < 0.25:
        refs.append(f"r{len(refs)}")
        text += (f'<ref name="{refs[-1]}">{{{{cite web |url=https://example.org/{len(refs)} |title={rng.choice(NAMES)} '
                 f"{rng.choice(WORDS)} |publisher=[[{rng.choice(NAMES)}]] "
                 f"|access-date={rng.randint(1, 28)} May 2020}}}}</ref>")
    elif roll < 0.35 and refs:
        text += f'<ref name="{rng.choice(refs)}" />'
    elif roll < 0.38:
        text += "<ref>{{cite book |last=" + rng.choice(NAMES) + " |year=" + str(rng.randint(1900, 2020)) + "}}</ref>"
    elif roll < 0.40:
        text += "<!-- please do not change without a source -->"
    return text


def paragraph(rng, refs):
    return " ".join(sentence(rng, refs) for _ in range(rng.randint(2, 7)))


def infobox(rng, title):
    fields = [f"| name = {title}", f"| image = {title.replace(' ', '_')}.jpg",
              f"| caption = {rng.choice(WORDS).title()} in [[{rng.choice(NAMES)}]], {rng.randint(1900, 2020)}",
              f"| birth_date = {{{{birth date|{rng.randint(1700, 1990)}|{rng.randint(1, 12)}|{rng.randint(1, 28)}}}}}",
              f"| birth_place = [[{rng.choice(NAMES)}]], {{{{flagcountry|{rng.choice(NAMES)}}}}}"]
    fields += [f"| {rng.choice(WORDS)}_{i} = {rng.choice(WORDS)} [[{rng.choice(NAMES)}]]"
               for i in range(rng.randint(4, 14))]
    return "{{Infobox " + rng.choice(WORDS) + "\n" + "\n".join(fields) + "\n}}\n"


def table(rng):
    rows = ["{| class=\"wikitable sortable\"", "|+ " + rng.choice(WORDS),
            "! Year !! " + rng.choice(WORDS) + " !! Notes"]
    for _ in range(rng.randint(3, 12)):
        rows += ["|-", f"| {rng.randint(1900, 2020)} || [[{rng.choice(NAMES)}]] "
                       f"|| {{{{sort|{rng.randint(1, 9)}|{rng.choice(WORDS)}}}}}"]
    return "\n".join(rows + ["|}"])


def article(rng, index):
    title = f"{rng.choice(NAMES)} {rng.choice(WORDS).title()} {index}"
    refs = []
    out = []
    if rng.random() < 0.6:
        out.append("{{Short description|" + " ".join(rng.choice(WORDS) for _ in range(4))
                   + "}}\n{{Use dmy dates|date=May 2020}}")
    out.append(infobox(rng, title) + f"'''{title}''' ({{{{lang-fr|{rng.choice(NAMES)}}}}}) " + paragraph(rng, refs))
    for _ in range(rng.randint(3, 9)):
        out.append(f"== {rng.choice(WORDS).title()} {rng.choice(WORDS)} ==")
        for _ in range(rng.randint(1, 4)):
            roll = rng.random()
            if roll < 0.15:
                out.append(f"[[File:{rng.choice(NAMES)}_{index}.jpg|thumb|right|{rng.choice(WORDS).title()} of "
                           f"[[{rng.choice(NAMES)}]] in {rng.randint(1900, 2020)}]]")
            elif roll < 0.25:
                out.append("\n".join(f"* {sentence(rng, refs)}" for _ in range(rng.randint(2, 6))))
            elif roll < 0.30:
                out.append(table(rng))
            elif roll < 0.33:
                out.append(f"=== {rng.choice(WORDS).title()} ===")
            elif roll < 0.36:
                out.append(f"<blockquote>{sentence(rng, refs)}</blockquote>")
            out.append(paragraph(rng, refs))
    out.append("== References ==\n{{Reflist}}" if rng.random() < 0.7 else "== Notes ==\n<references />")
    out.append("== External links ==\n* [https://example.org/" + str(index)
               + " Official website]\n{{Commons category}}")
    out.append("{{Authority control}}\n{{DEFAULTSORT:" + title + "}}")
    out += [f"[[Category:{rng.choice(WORDS).title()} {rng.choice(WORDS)}]]" for _ in range(rng.randint(2, 8))]
    if rng.random() < 0.2:
        out += [f"[[{lang}:{title}]]" for lang in rng.sample(LANGS, 3)]
    if rng.random() < 0.1:
        out.append("__NOTOC__")
    return "\n\n".join(out) + "\n"


def corpus(size_bytes, seed):
    rng = random.Random(seed)
    articles, total = [], 0
    while total < size_bytes:
        articles.append(article(rng, len(articles)))
        total += len(articles[-1].encode("utf-8"))
    return articles, total


def best_pass(strip, articles, repeat):
    best, outputs = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        outputs = [strip(text) for text in articles]
        best = min(best, time.perf_counter() - start)
    return best, outputs


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mb", type=float, default=8.0, help="MB of wikitext to generate (default 8)")
    parser.add_argument("--repeat", type=int, default=3, help="passes per stripper; the best is reported (default 3)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    articles, total = corpus(int(args.size_mb * 1e6), args.seed)
    print(f"corpus: {len(articles):,} generated articles, {total / 1e6:.1f} MB of wikitext "
          f"(mean {total / len(articles) / 1e3:.1f} kB), seed {args.seed}; best of {args.repeat}, 1 core")
    rows = []
    for name, strip in (("baseline: hand-written regex stripper", baseline_wikitext_to_text),
                        (f"wikitext_to_text ({STRIPPER})", wikitext_to_text)):
        seconds, outputs = best_pass(strip, articles, args.repeat)
        rows.append((name, seconds, outputs))
        print(f"{name:<48} {seconds:7.2f} s  {total / seconds / 1e6:6.2f} MB/s  "
              f"{sum(len(o.encode('utf-8')) for o in outputs) / 1e6:5.2f} MB of text out")
    (_, old_seconds, old_outputs), (_, new_seconds, new_outputs) = rows
    same = sum(a == b for a, b in zip(old_outputs, new_outputs))
    print(f"ratio new/baseline: {old_seconds / new_seconds:.2f}x the baseline's speed; "
          f"identical text on {same:,} of {len(articles):,} articles")


if __name__ == "__main__":
    main()
