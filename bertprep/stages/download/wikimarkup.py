"""Wikitext to plain paragraphs, for the XML dump path.

mwparserfromhell parses the wikitext into a tree of nodes; this module only
says which nodes are prose. It keeps running text, the labels of links,
the contents of formatting tags and decoded entities, and drops what is not
prose: templates and parser functions, tables, references, comments,
headings, lists, file/image/media/category and interlanguage links, and
math and the other extension tags whose content is not text. The result is
paragraphs separated by "\\n" (the formatted stage's `text`).

Why mwparserfromhell rather than wikiextractor (which NVIDIA's and MLPerf's
pipelines run as a command): it is a maintained library with a tokenizer in
C, and a real parser, so nesting (templates in templates, links in file
captions, tables in templates) is handled by the tree, not by patterns, and
our policy is a handful of sets of node names below. wikiextractor is a
command-line program whose options are module globals and whose extraction
is itself a cascade of regular expressions.
"""

import mwparserfromhell
from mwparserfromhell.nodes import Argument, Comment, ExternalLink, Heading, HTMLEntity, Tag, Template, Text, Wikilink

STRIPPER = f"mwparserfromhell {mwparserfromhell.__version__}"

# Tags dropped with their content: extension tags that are not prose, and
# tables ("table" is also what the parser calls {| ... |}).
DROP_TAGS = frozenset({
    "ref", "references", "math", "chem", "ce", "gallery", "timeline", "score", "syntaxhighlight", "source",
    "imagemap", "mapframe", "maplink", "graph", "templatedata", "hiero", "inputbox", "categorytree", "table",
})
# List items (* # ; : at the start of a line): the whole line goes.
LIST_TAGS = frozenset({"li", "dt", "dd"})
# Link namespaces that are not text. Interlanguage links ([[fr:Page]]) are
# recognised by a language-code prefix (`_is_language_code`).
NON_TEXT_NAMESPACES = frozenset({"file", "image", "media", "category"})
# MediaWiki's behaviour switches: the parser leaves them in the text.
BEHAVIOUR_SWITCHES = (
    "__NOTOC__", "__FORCETOC__", "__TOC__", "__NOEDITSECTION__", "__NEWSECTIONLINK__", "__NONEWSECTIONLINK__",
    "__NOGALLERY__", "__HIDDENCAT__", "__EXPECTUNUSEDCATEGORY__", "__NOCONTENTCONVERT__", "__NOCC__",
    "__NOTITLECONVERT__", "__NOTC__", "__START__", "__END__", "__INDEX__", "__NOINDEX__", "__STATICREDIRECT__",
    "__NOGLOBAL__", "__DISAMBIG__", "__EXPECTED_UNCONNECTED_PAGE__", "__ARCHIVEDTALK__", "__NOTALK__",
    "__EXPECTUNUSEDTEMPLATE__",
)
# Paragraphs left starting with these are broken table or template markup
# the parser kept as text (an unclosed {{ or {|), not prose.
MARKUP_LINE_STARTS = ("{", "}", "|", "!")
# Marks a list item's line for removal. XML 1.0 cannot carry U+0000, so no
# dump text contains it.
_LIST_LINE = "\x00"


def wikitext_to_text(wikitext):
    """Plain paragraphs of one article's wikitext, separated by "\\n"."""
    rendered = _render(mwparserfromhell.parse(_hide_unclosed_comment(wikitext)))
    paragraphs = []
    for line in rendered.split("\n"):
        if _LIST_LINE in line:
            continue
        line = " ".join(line.split())
        if line and not line.startswith(MARKUP_LINE_STARTS):
            paragraphs.append(line)
    return "\n".join(paragraphs)


def _hide_unclosed_comment(wikitext):
    # MediaWiki hides everything after a "<!--" that is never closed; the
    # parser would show it as text.
    position = 0
    while (start := wikitext.find("<!--", position)) >= 0:
        end = wikitext.find("-->", start + 4)
        if end < 0:
            return wikitext[:start]
        position = end + 3
    return wikitext


def _render(wikicode):
    return "".join(_render_node(node) for node in wikicode.nodes)


def _render_node(node):
    if isinstance(node, Text):
        return _text(node.value)
    if isinstance(node, Wikilink):
        return _wikilink(node)
    if isinstance(node, Tag):
        return _tag(node)
    if isinstance(node, HTMLEntity):
        return node.normalize()
    if isinstance(node, ExternalLink):
        if node.title is not None:
            return _render(node.title)
        return "" if node.brackets else str(node.url)  # [http://x] shows only a footnote number
    if isinstance(node, (Template, Argument, Comment, Heading)):
        return ""
    raise TypeError(f"wikimarkup: no rule for {type(node).__name__} nodes")


def _text(value):
    if "__" in value:
        for switch in BEHAVIOUR_SWITCHES:
            value = value.replace(switch, "")
    if "''" in value:
        # Balanced '' and ''' are Tag nodes; what is left here is bold or
        # italic that MediaWiki closes at the end of the line. Runs of 4 show
        # one apostrophe, as in MediaWiki.
        value = value.replace("'''", "").replace("''", "")
    return value


def _wikilink(node):
    title = _render(node.title).strip()
    if title.startswith(":"):
        title = title[1:]  # [[:Category:X]] and [[:fr:X]] are visible links
    elif ":" in title:
        prefix = title.split(":", 1)[0].strip().lower()
        if prefix in NON_TEXT_NAMESPACES or _is_language_code(prefix):
            return ""
    if node.text is not None:
        label = _render(node.text)
        if label.strip():
            return label
    return title[1:] if title.startswith("#") else title.split("#", 1)[0]


def _is_language_code(prefix):
    """Wikipedia language codes: 2-3 letters, optionally with -suffixes (en, als, zh-min-nan)."""
    parts = prefix.split("-")
    return 2 <= len(parts[0]) <= 3 and all(part.isascii() and part.isalpha() for part in parts)


def _tag(node):
    name = str(node.tag).strip().lower()
    if name in DROP_TAGS:
        return ""
    if name in LIST_TAGS:
        return _LIST_LINE
    if name == "br":
        return " "
    if node.self_closing or node.contents is None:
        return ""
    return _render(node.contents)
