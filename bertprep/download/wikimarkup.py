"""Wikitext to plain paragraphs, for the XML dump path.

A small, conservative stripper standing in for wikiextractor /
mwparserfromhell (neither is a dependency). It keeps running prose and drops
what is not prose: templates and parser functions, tables, references,
comments, file/image/category and interlanguage links, headings, lists,
math and other non-text extension tags. Links keep their label, bold and
italic marks are removed, HTML entities are decoded. The result is
paragraphs separated by "\\n" (the formatted stage's `text`).
"""

import html
import re

# Extension tags whose content is not prose (dropped with their content).
_DROP_TAGS = ("ref", "math", "chem", "ce", "gallery", "timeline", "score", "syntaxhighlight", "source", "imagemap",
              "mapframe", "maplink", "graph", "templatedata", "hiero", "inputbox", "categorytree", "references", "table")
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


def wikitext_to_text(wikitext):
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
