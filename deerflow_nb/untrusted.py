"""Untrusted text made inert for each place it is shown.

Model replies, tool arguments, memory.json and journal rows are untrusted: a prompt
injection hidden in a DataFrame can make the model write ``<img onerror=…>``, and an
imported memory.json can hold anything. JupyterLab renders a live ``text/markdown`` or
``text/html`` output as trusted, raw HTML and scripts included, so every view goes through
one of these functions instead of handing text to a renderer:

- ``render_markdown``: Markdown stays useful (emphasis, lists, tables, code, http(s)
  links) but is rendered with raw HTML disabled (markdown-it-py, ``html=False``), images
  become links (nothing remote is loaded), and the result passes an allow-list sanitizer
  (nh3) that keeps no event handler, script or non-http(s) link.
- ``escape_markdown``: text that must read literally inside Markdown we write (a table
  cell, a label): every ASCII punctuation character is backslash-escaped, which CommonMark
  defines as literal, so nothing in it is markup.
- ``clean_text``: text for a terminal, a plain-text mime type or a prompt: no control
  characters (an ESC sequence can rewrite a terminal), no bidi overrides, zero-width,
  soft-hyphen, invisible-operator or Unicode tag characters (which hide what text says),
  no lone surrogates (which no encoder accepts).
- ``prompt_text``: the one prompt boundary. Stored or model text quoted inside a prompt
  we write (extraction, consolidation, summarization, the ``<memory>`` block's
  characters): ``clean_text``, then NFKC and look-alike angle brackets mapped to ``<``
  and ``>``, then any tag of our prompts or a chat template (``</current_memory>``,
  ``<|im_start|>``) written with square brackets, and a role label starting a line
  (``User:``) marked as quoted, so quoted text can neither close a section nor speak as
  the user.
- ``code_block`` / ``code_span``: untrusted text shown verbatim as Markdown code, with a
  fence longer than any backtick run in it, so nothing in the text can close it; and
  ``reveal_invisible`` for code that will run (its hidden characters are shown, not
  dropped, so what is shown is what runs).
- ``SafeMarkdown``: a display object whose every mime type is one of the above.
- ``MarkdownStream``: a streamed reply for a front end that renders the Markdown itself
  (JupyterLab's chat panel): outside code fences, images become links and tags text.
"""

from __future__ import annotations

import html
import re
import string
import unicodedata
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from .schema.constants import PROMPT_TAG_NAMES

# C0/C1 controls except tab and newline, DEL, the soft hyphen, bidi embeddings/overrides/
# isolates and marks, zero-width characters, invisible operators (U+2061-U+2064), deprecated
# format characters, interlinear annotation marks, the BOM and Unicode tag characters
# (U+E0000-U+E007F, which spell hidden ASCII): removed wherever untrusted text is shown or
# prompted.
_INVISIBLE = (
    [c for c in range(0x20) if c not in (0x09, 0x0A)]
    + list(range(0x7F, 0xA0))
    + [0x00AD, 0x061C, 0x180E, 0x200B, 0x200C, 0x200D, 0x200E, 0x200F, 0xFEFF]
    + list(range(0x202A, 0x202F))
    + list(range(0x2060, 0x2065))
    + list(range(0x2066, 0x2070))
    + list(range(0xFFF9, 0xFFFC))
    + list(range(0xE0000, 0xE0080))
)
_REMOVE = dict.fromkeys(_INVISIBLE)
_MARKDOWN_ESCAPES = str.maketrans({c: "\\" + c for c in string.punctuation})
_TAGS = {
    "a", "p", "br", "hr", "em", "strong", "del", "s", "code", "pre", "blockquote",
    "ul", "ol", "li", "table", "thead", "tbody", "tr", "th", "td",
    "h1", "h2", "h3", "h4", "h5", "h6",
}  # fmt: skip
_SCHEMES = ("http://", "https://", "mailto:")
_BACKTICKS = re.compile(r"`+")
_INVISIBLE_SET = frozenset(chr(c) for c in _INVISIBLE)
# JupyterLab's output area wraps <pre> with ``word-break: break-all`` ("di/abetic", a
# DataFrame row torn in two): the code inside our <pre> keeps its lines (the pre scrolls).
_PRE_CODE = '<pre><code style="white-space: pre; word-break: normal; overflow-wrap: normal"'
# Blanks that can push code out of sight in a code view: 24 or more after something on a
# line, 40 or more leading one (deeper than any real indentation).
_OFF_SCREEN = re.compile(r"(?m)(?:(?<=\S)[ \t]{24,}|^[ \t]{40,})(?=\S)")
# Angle brackets NFKC leaves alone (full-width ＜ already becomes <), as ASCII brackets.
_LOOK_ALIKES = dict.fromkeys("‹〈〈⟨❬❮❰⧼﹤ᐸ˂˱", "<") | dict.fromkeys("›〉〉⟩❭❯❱⧽﹥ᐳ˃˲", ">")
_FULLWIDTH = range(0xFF01, 0xFF5F)  # ＡＢＣ, ＜／＞: ASCII in wide form


class _PromptFolds(dict[int, str]):
    """``str.translate``'s table, filled as characters come: a look-alike bracket becomes
    ``<``/``>``, a full-width character its ASCII form, and a compatibility character whose
    NFKC form holds ASCII punctuation that form (…→..., ［→[), so nothing passes for a tag;
    every other character stays as written ("R²" stays "R²", not "R2")."""

    def __missing__(self, code: int) -> str:
        char = chr(code)
        folded = _LOOK_ALIKES.get(char) or unicodedata.normalize("NFKC", char)
        punctuation = any(c in string.punctuation for c in folded)
        if folded != char and code not in _FULLWIDTH and not punctuation:
            folded = char
        self[code] = folded
        return folded


_FOLDS = _PromptFolds()
_LINE_SEPARATORS = str.maketrans({"\u2028": "\n", "\u2029": "\n"})
# A tag of our prompts or of a chat template: quoted text holding one would close or
# forge a section.
_SECTION_TAG = re.compile(
    rf"<(\s*/?\s*{PROMPT_TAG_NAMES}\b[^<>]*)>|<(\|[^<>|]{{1,40}}\|)>", re.IGNORECASE
)
# A role label starting a line of quoted text ("User:", "> **Assistant**:", "1. System:"):
# it would read as a new message of that role. Matched on the line's skeleton
# (``_label_skeleton``), so look-alike letters, other spaces and other colons match too.
_ROLE_LABEL = re.compile(
    r"^((?:[ \t>*_#`~+\-•·‣◦▪▫●○■□–—\[(]|\d{1,4}[.)]|\(\d{1,4}\)|[a-z]\))*)"
    r"(?:user|assistant|system|human|ai|tool(?: result)?|developer)\b[ \t*_`\])]*:",
    re.MULTILINE,
)
# Letters that read as a role label's Latin ones (Cyrillic, Greek, Armenian, small
# capitals): "Usеr" with a Cyrillic е is the user's label to a reader.
_CONFUSABLES = {
    look: latin
    for latin, looks in {
        "a": "аАαΑᴀ", "b": "ВΒ", "c": "сСϲϹ", "d": "ԁ", "e": "еЕεΕᴇ", "h": "һНнΗʜ",
        "i": "іІιΙɪıӀ", "j": "јЈ", "k": "кКκΚ", "l": "ӏ", "m": "мМΜᴍ", "n": "ΝɴпП",
        "o": "оОοΟᴏօ", "p": "рРρΡᴘ", "r": "ʀгᴦ", "s": "ѕЅꜱ", "t": "тТτΤᴛ", "u": "υսᴜ",
        "v": "νᴠѵ", "w": "ԝ", "x": "хХχΧ", "y": "уУΥ", "z": "Ζ",
    }.items()
    for look in looks
}  # fmt: skip
_COLONS = frozenset(":∶꞉˸׃܃܄᠄⁚︓﹕：")
# Characters drawn as nothing that are not spaces to Python (Braille blank, Hangul fillers).
_BLANKS = frozenset("\u2800\u3164\u115f\u1160\uffa0")


class _LabelFolds(dict[int, str]):
    """``str.translate``'s table for a role label's skeleton: each character as the
    lower-case ASCII letter it reads as (NFKC, then ``_CONFUSABLES``), any colon as ``:``,
    any space but a line break (or blank-looking filler) as `` ``, and combining marks
    dropped."""

    def __missing__(self, code: int) -> str:
        char = chr(code)
        folded = unicodedata.normalize("NFKC", char)
        folded = folded if len(folded) == 1 else char
        folded = _CONFUSABLES.get(folded, folded).lower()
        if char in _COLONS or folded in _COLONS:
            folded = ":"
        elif (char.isspace() and char != "\n") or char in _BLANKS:
            folded = " "
        elif unicodedata.category(char) in ("Mn", "Me"):
            folded = ""
        elif len(folded) != 1:
            folded = char
        self[code] = folded
        return folded


_LABEL_FOLDS = _LabelFolds()


def _quote_role_labels(text: str) -> str:
    """``text`` with ``(quoted) `` before each role label starting a line, found on the
    text's skeleton (``_LabelFolds``); every other character stays as written."""
    skeleton = text.lower() if text.isascii() else text.translate(_LABEL_FOLDS)
    cuts = [m.end(1) for m in _ROLE_LABEL.finditer(skeleton)]
    if cuts and len(skeleton) != len(text):  # combining marks dropped: find each place
        places = [place for place, char in enumerate(text) for _ in char.translate(_LABEL_FOLDS)]
        cuts = [places[cut] for cut in cuts]
    if not cuts:
        return text
    pieces, start = [], 0
    for cut in cuts:
        pieces += [text[start:cut], "(quoted) "]
        start = cut
    return "".join([*pieces, text[start:]])


def clean_text(text: object) -> str:
    """``text`` without control, bidi and zero-width characters or lone surrogates."""
    text = str(text).translate(_REMOVE)
    if not text.isascii():
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def prompt_chars(text: object) -> str:
    """``clean_text`` with look-alikes folded (``_PromptFolds``: brackets, full-width and
    punctuation-bearing compatibility characters) and Unicode line and paragraph separators
    as line breaks: what a prompt's reader sees is what the checks after this see."""
    text = clean_text(text)
    if not text.isascii():
        text = unicodedata.normalize("NFC", text).translate(_FOLDS)
        text = clean_text(text).translate(_LINE_SEPARATORS)
    return text


def prompt_text(text: object, *, one_line: bool = False) -> str:
    """Stored or model text to quote inside a prompt section we write: ``prompt_chars``,
    tags of our prompts or chat templates in square brackets (``</memory>`` becomes
    ``[/memory]``) and a role label starting a line marked ``(quoted)``, so the text can
    neither close or open a section nor pass for another message. ``one_line`` folds
    whitespace runs (line breaks included) to one space."""
    text = prompt_chars(text)
    if one_line:
        text = " ".join(text.split())
    text = _SECTION_TAG.sub(lambda m: f"[{m.group(1) or m.group(2)}]", text)
    return _quote_role_labels(text)


def escape_markdown(text: object) -> str:
    """``text`` as literal Markdown on one line: all ASCII punctuation backslash-escaped."""
    return " ".join(clean_text(text).split()).translate(_MARKDOWN_ESCAPES)


def escape_html(text: object) -> str:
    """``text`` as literal HTML (entities for ``& < > " '``), controls removed."""
    return html.escape(clean_text(text))


def reveal_invisible(text: object) -> str:
    """``text`` with each character ``clean_text`` would drop (carriage returns and Unicode
    tag characters included) and each Unicode space but the plain one written as
    ``<U+XXXX>``, and a run of blanks that could push code off-screen (``_OFF_SCREEN``)
    written as ``<N blanks>``, so code shown before it runs hides nothing."""
    text = str(text)
    if not text.isascii():
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        text = "".join(
            f"<U+{ord(c):04X}>" if c in _INVISIBLE_SET or _odd_space(c) else c for c in text
        )
    elif not text.isprintable():
        text = "".join(f"<U+{ord(c):04X}>" if c in _INVISIBLE_SET else c for c in text)
    return _OFF_SCREEN.sub(lambda m: f"<{len(m.group(0))} blanks>", text)


def _odd_space(char: str) -> bool:
    """A space other than the ASCII one, tab and newline (NBSP, U+2000-U+200A, U+3000…)."""
    return char.isspace() and char not in " \t\n\r\x0b\x0c"


def _fence_for(text: str, minimum: int) -> str:
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    return "`" * max(minimum, longest + 1)


def code_block(text: object, info: str = "") -> str:
    """``text`` as a fenced Markdown code block that nothing inside it can close: the fence
    is longer than the longest run of backticks in the text. ``info`` (a language name)
    keeps only letters, digits and ``+-_.``."""
    body = str(text)
    fence = _fence_for(body, 3)
    info = re.sub(r"[^A-Za-z0-9+\-_.]", "", info)
    end = "" if body.endswith("\n") else "\n"
    return f"{fence}{info}\n{body}{end}{fence}"


def code_span(text: object) -> str:
    """``text`` on one line as an inline Markdown code span nothing inside can close."""
    body = " ".join(str(text).split())
    fence = _fence_for(body, 1)
    pad = " " if body.startswith("`") or body.endswith("`") else ""
    return f"{fence}{pad}{body}{pad}{fence}" if body else ""


def _link_filter(tag: str, attribute: str, value: str) -> str | None:
    """Keep only absolute http(s) and mailto links: no ``javascript:``, ``data:`` or
    relative URLs (a relative link in JupyterLab points at the Jupyter server's API)."""
    if attribute == "href" and not value.strip().lower().startswith(_SCHEMES):
        return None
    return value


@lru_cache(maxsize=1)
def _renderer() -> tuple[Any, Any]:
    """markdown-it with raw HTML off and images as links, and the nh3 cleaner after it."""
    import nh3
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(
        ["table", "strikethrough"]
    )

    def image_as_link(renderer: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
        token = tokens[idx]
        alt = escape_html(token.content or "image")
        src = str(token.attrGet("src") or "")
        if not src.lower().startswith(("http://", "https://")):
            return f"[image: {alt}]"
        return f'<a href="{escape_html(src)}">[image: {alt}]</a>'

    md.add_render_rule("image", image_as_link)
    cleaner = nh3.Cleaner(
        tags=_TAGS,
        clean_content_tags={"script", "style"},
        attributes={"a": {"href", "title"}, "th": {"style"}, "td": {"style"}},
        attribute_filter=_link_filter,
        url_schemes={"http", "https", "mailto"},
        filter_style_properties={"text-align"},
        link_rel="noopener noreferrer nofollow",
    )
    return md, cleaner


def render_markdown(text: object) -> str:
    """Untrusted Markdown as sanitized HTML: formatting kept, nothing live, nothing fetched.
    Code blocks keep their lines (``_PRE_CODE``): the style is added after the cleaner, to
    the ``<pre><code`` tags it emits (text that spells a tag is escaped by then)."""
    md, cleaner = _renderer()
    return cleaner.clean(md.render(clean_text(text))).replace("<pre><code", _PRE_CODE)


class SafeMarkdown:
    """Markdown shown inert in every mime type: sanitized HTML, and the text itself as plain
    text. There is deliberately no ``text/markdown``: a frontend renders that as trusted.

    ``text`` may be a sequence of Markdown blocks: each is rendered on its own (so an
    unclosed fence in a model's reply cannot swallow the footer after it) and the blocks
    are joined by ``separator`` (HTML we write). ``plain`` is the ``text/plain`` reading
    when it should differ from the Markdown source (no backslash escapes, say)."""

    def __init__(
        self, text: str | Sequence[str], plain: str | None = None, separator: str = ""
    ) -> None:
        self.text = text
        self.plain = plain
        self.separator = separator

    @property
    def blocks(self) -> list[str]:
        return [self.text] if isinstance(self.text, str) else list(self.text)

    def html(self) -> str:
        return self.separator.join(render_markdown(block) for block in self.blocks)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {"text/html": self.html(), "text/plain": repr(self)}

    def __repr__(self) -> str:
        return clean_text("\n\n".join(self.blocks) if self.plain is None else self.plain)


_FENCE_OPEN = re.compile(r" {0,3}(`{3,}|~{3,})")
_TAG_START = re.compile(r"[A-Za-z/!?]")
_FENCE_SO_FAR = re.compile(r" {0,3}(`*|~*)")


def _could_be_fence(start: str) -> bool:
    """Whether a line beginning ``start`` (its end not seen yet) may open or close a fence."""
    return bool(_FENCE_SO_FAR.fullmatch(start) or _FENCE_OPEN.match(start))


class MarkdownStream:
    """Untrusted Markdown streamed to a renderer we do not control (the chat panel renders
    a message's Markdown itself), made inert chunk by chunk: outside fenced code, ``![``
    is written ``\\![`` (an image becomes a link: nothing remote is loaded) and ``<``
    before a letter, ``/``, ``!`` or ``?`` is written ``\\<`` (a tag or comment is text);
    controls and hidden characters go (``clean_text``). Inside a fence text passes
    unchanged, so the renderer must see the same fences: a fence line is written at the
    line's start, its indent dropped (a fence in a list item or a quote would close where
    this stream cannot tell), and a fence closes only as CommonMark closes one (a run as
    long, of the same character, with nothing after it). An inline code span is not
    trusted to be one (an unclosed backtick is literal), so it shows the backslashes.
    ``end`` closes a fence the reply left open, so nothing after it is swallowed. No link
    definition forms (``]:`` is written ``\\]:``): marked, the chat panel's renderer, lets a
    definition's title run over a fence line, which would then open no fence there.

    Chunk boundaries never change the result: a line's start waits until it is known not
    to open or close a fence, and a trailing ``!``, ``<``, ``]`` or ``\\`` for the next
    chunk."""

    def __init__(self) -> None:
        self._pending = ""
        self._fence = ""  # the open fence's run (``` or ~~~~), "" outside fences
        self._line_start = True

    def feed(self, text: str) -> str:
        """What of ``text`` (after what was held back) can be shown now."""
        self._pending += clean_text(text)
        return self._drain(final=False)

    def end(self) -> str:
        """The rest, and a closing fence when one is open."""
        out = self._drain(final=True)
        if self._fence:
            out += ("" if self._line_start else "\n") + self._fence
            self._fence = ""
        return out

    def _drain(self, final: bool) -> str:
        text, out, i = self._pending, [], 0
        while i < len(text):
            if self._line_start:
                end = text.find("\n", i)
                if end < 0 and not final and _could_be_fence(text[i:]):
                    break  # the line may still open or close a fence: wait for its end
                line_end = len(text) if end < 0 else end
                if self._fence_line(text[i:line_end]):
                    # at the line's start: a fence in a list item or a quote, which this
                    # stream cannot follow, is a top-level one for the renderer too
                    out.append(text[i : line_end + 1].lstrip(" "))
                    i = line_end + 1
                    self._line_start = end >= 0
                    continue
                self._line_start = False
            char = text[i]
            if char == "\n":
                out.append(char)
                self._line_start = True
                i += 1
            elif self._fence:
                out.append(char)
                i += 1
            elif char in "!<\\]":
                if i + 1 == len(text) and not final:
                    break
                after = text[i + 1 : i + 2]
                if char == "]":  # ``]:`` would end a link definition's label: see above
                    out.append("\\]" if after == ":" else char)
                    i += 1
                    continue
                if char == "\\":
                    pair = after not in ("", "\n")  # an escape pair stays a pair
                    out.append(char + after if pair else char)
                    i += 2 if pair else 1
                    continue
                live = after == "[" if char == "!" else bool(_TAG_START.match(after))
                out.append("\\" + char if live else char)
                i += 1
            else:
                out.append(char)
                i += 1
        self._pending = text[i:]
        return "".join(out)

    def _fence_line(self, line: str) -> bool:
        """Whether the whole ``line`` opens or closes a fence (the state is updated)."""
        match = _FENCE_OPEN.match(line)
        if match is None:
            return False
        run, rest = match.group(1), line[match.end() :]
        if self._fence:  # closes on a run as long, of the same character, and nothing else
            if run[0] == self._fence[0] and len(run) >= len(self._fence) and not rest.strip(" \t"):
                self._fence = ""
                return True
            return False
        if run[0] == "`" and "`" in rest:
            return False  # a backtick fence's info string has no backtick: not a fence
        self._fence = run
        return True
