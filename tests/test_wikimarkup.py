"""The dump path's wiki-markup stripper: each construct of wikitext, and the exact text it leaves."""

import pytest

pytest.importorskip("mwparserfromhell")

from bertprep.stages.download.wikimarkup import wikitext_to_text  # noqa: E402

CASES = {
    # templates, nested, with links and tables inside; parser functions and arguments too
    "template": ("A {{convert|5|km|mi}} walk.", "A walk."),
    "nested templates": ("Born {{birth date|{{#if:x|1815|1816}}|12|{{nowrap|10}}}} in London.", "Born in London."),
    "template holding a link and a table": ("{{Infobox|a=[[London]]|b={|\n|x\n|}\n}}Text.", "Text."),
    "template argument": ("A {{{1|default}}} b.", "A b."),
    # references
    "ref": ("Fact.<ref>{{cite web|url=http://x.org|title=X}}</ref> More.", "Fact. More."),
    "named ref": ('Fact.<ref name="smith">Smith, p. 3.</ref> More.', "Fact. More."),
    "self-closing named ref": ('Fact.<ref name=smith /> More.<ref name="b"/>', "Fact. More."),
    "references list": ("== Notes ==\n<references />\n{{Reflist}}", ""),
    # tables: wiki markup and HTML
    "wiki table": ('Before.\n{| class="wikitable"\n|+ Caption\n! A !! B\n|-\n| 1 || [[x]]\n|}\nAfter.',
                   "Before.\nAfter."),
    "HTML table": ("Before.<table><tr><td>cell</td></tr></table> After.", "Before. After."),
    # categories and interlanguage links go, visible (leading colon) ones stay
    "category": ("Text.\n[[Category:Mathematicians]]\n[[Category:People|Lovelace, Ada]]", "Text."),
    "visible category link": ("See [[:Category:Mathematicians]].", "See Category:Mathematicians."),
    "interlanguage": ("Text.\n[[fr:Ada Lovelace]]\n[[zh-min-nan:Ada]]\n[[de:Ada|x]]", "Text."),
    "visible interlanguage link": ("See [[:fr:Ada Lovelace|the French article]].", "See the French article."),
    # file and image links go with their captions, links in the caption included
    "file with caption": ("[[File:Ada.jpg|thumb|right|Ada, painted by [[Alfred Chalon]] in 1840]]Text.", "Text."),
    "image and media": ("A [[Image:X.png|50px]] b [[Media:Y.ogg|listen]] c.", "A b c."),
    # links
    "link": ("The [[Analytical Engine]] was designed.", "The Analytical Engine was designed."),
    "piped link": ("She was [[England|English]].", "She was English."),
    "pipe trick and link trail": ("Two [[bus]]es and [[Paris (city)|]].", "Two buses and Paris (city)."),
    "section links": ("See [[#Life|below]], [[#Work]] and [[Ada Lovelace#Life]].", "See below, Work and Ada Lovelace."),
    "formatted label": ("A [[Note G|''Note G'']] b.", "A Note G b."),
    "other namespaces keep their label": ("A [[wikt:sine qua non|sine qua non]] and [[Wikipedia:NPOV]].",
                                          "A sine qua non and Wikipedia:NPOV."),
    "external links": ("See [http://x.org the site], [http://y.org] and http://z.org/p.",
                       "See the site, and http://z.org/p."),
    # bold and italic, balanced, nested, and left open at the end of a line
    "bold italic": ("'''Ada''' was ''an'' '''''English''''' writer.", "Ada was an English writer."),
    # Runs the parser leaves as text go whole, as they did before (MediaWiki would show "Ada's", "l'").
    "apostrophes left as text": ("''Ada'''s notes'' and l''''amour''", "Adas notes and lamour"),
    "unclosed italic": ("An ''open italic\nnext line.", "An open italic\nnext line."),
    # headings go, the paragraphs around them stay
    "headings": ("Lead.\n== Life ==\nBorn.\n=== Early ''years'' ===\nGrew.\n====== Deep ======", "Lead.\nBorn.\nGrew."),
    # lists of every kind drop their lines
    "lists": ("Intro.\n* one\n** two\n# three\n#: four\n; term : definition\n: indented\nOutro.", "Intro.\nOutro."),
    # comments (also an unclosed one, which hides the rest of the page) and HTML tags
    "comments": ("A <!-- hidden\nover lines --> b.<!---->", "A b."),
    "unclosed comment": ("Kept.\nAlso kept. <!-- never closed\nHidden.\n[[Hidden link]]", "Kept.\nAlso kept."),
    "HTML tags keep their text": ("H<sub>2</sub>O, <span style=\"x\">E</span>=mc<sup>2</sup>, <small>s</small>.",
                                  "H2O, E=mc2, s."),
    "line breaks and rules": ("One<br>two<br/>three<br />four\n----\nFive.", "One two three four\nFive."),
    "non-text tags": ("Area <math>\\pi r^2</math>.<gallery>\nA.jpg|a\n</gallery> Code <syntaxhighlight lang=c>x;"
                      "</syntaxhighlight>end.", "Area . Code end."),
    "nowiki and pre": ("<nowiki>[[not a link]]</nowiki> and <pre>pre text</pre>", "[[not a link]] and pre text"),
    # magic words
    "behaviour switches": ("__NOTOC__Text __NOEDITSECTION__here.\n__TOC__", "Text here."),
    "variables and parser functions": ("On {{CURRENTYEAR}} {{#if:{{{x|}}}|a|b}}{{DEFAULTSORT:Lovelace, Ada}}.", "On ."),
    # entities and white space
    "entities": ("A&nbsp;b &amp; c &lt;d&gt; &#233; &eacute; &mdash; e", "A b & c <d> é é — e"),
    "white space": ("  A \t b  \n\n\n  c  ", "A b\nc"),
    # broken markup the parser keeps as text does not start a paragraph
    "unclosed template": ("Text.\n{{Infobox\n| name = x\nMore.", "Text.\nMore."),
    "empty": ("", ""),
}


@pytest.mark.parametrize("name", CASES)
def test_construct(name):
    wikitext, expected = CASES[name]
    assert wikitext_to_text(wikitext) == expected


def test_an_article():
    wikitext = """{{Short description|English mathematician}}
{{Infobox person
| name = Ada Lovelace
| image = Ada_Lovelace_portrait.jpg
| birth_date = {{birth date|1815|12|10|df=y}}
| known_for = [[Analytical Engine|Mathematics]]
}}
'''Augusta Ada King, Countess of Lovelace''' (''née'' '''Byron'''; 10 December 1815&nbsp;– 27 November 1852) was an \
English [[mathematician]] and writer.<ref name="Hopper">{{cite book |last=Hopper |year=2001}}</ref> She was the \
first to recognise that the machine had applications beyond pure calculation.<ref name="Hopper" />

== Early life ==
[[File:Ada Byron daguerreotype.jpg|thumb|upright|Ada, about 1843 by [[Antoine Claudet]]]]
Lord Byron expected his child to be a "glorious boy".<!-- source: Stein 1985 -->
* Born in [[London]]
* Daughter of [[Lord Byron]]

{| class="wikitable"
! Year !! Event
|-
| 1833 || Met [[Charles Babbage]]
|}
She met [[Charles Babbage|Babbage]] in 1833 (see [[#Work|below]]).

== References ==
{{Reflist}}
{{Authority control}}
[[Category:1815 births]]
[[de:Ada Lovelace]]
__NOTOC__
"""
    assert wikitext_to_text(wikitext) == (
        "Augusta Ada King, Countess of Lovelace (née Byron; 10 December 1815 – 27 November 1852) was an English "
        "mathematician and writer. She was the first to recognise that the machine had applications beyond pure "
        "calculation.\n"
        'Lord Byron expected his child to be a "glorious boy".\n'
        "She met Babbage in 1833 (see below)."
    )
