"""Hostile text and the checks that it is shown inert, shared by the untrusted-text tests.

``HOSTILE_PARTS`` is what a prompt-injected model or an imported memory.json could hold;
``assert_inert(data)`` checks one display bundle (``{mime: value}``) the way each kind of
frontend would read it: HTML as parsed, Markdown as a trusting renderer with raw HTML on
would turn it into HTML, and plain text for terminals.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser
from typing import Any

from deerflow_nb.llm.base import ChatResult, ToolCall, Usage

BEACON = "http://127.0.0.1:9/beacon"
HOSTILE_PARTS = [
    "<img src=x onerror=alert(1)>",
    "<script>alert(2)</script>",
    '<iframe src="http://127.0.0.1:9/frame"></iframe>',
    "[click](javascript:alert(3))",
    f"![]({BEACON})",
    '<a href="javascript:alert(4)">link</a>',
    "[rel](/api/contents/x) [data](data:text/html,<script>alert(5)</script>)",
]
TERMINAL_TRAPS = "\x1b[2J\x1b]0;owned\x07\u202eevil\u200b"
HOSTILE_LINE = " ".join(HOSTILE_PARTS) + " " + TERMINAL_TRAPS
HOSTILE_BLOCK = "\n\n".join([*HOSTILE_PARTS, TERMINAL_TRAPS])
LIVE_TAGS = {
    "img", "script", "iframe", "svg", "image", "object", "embed", "video", "audio", "source",
    "link", "style", "form", "frame", "frameset", "meta", "base", "math", "input", "details",
}  # fmt: skip
MIMES = {"text/html", "text/markdown", "text/plain", "application/vnd.jupyter.widget-view+json"}


class _Live(HTMLParser):
    """Collects every tag or attribute of parsed HTML that could run or fetch."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in LIVE_TAGS:
            self.found.append(f"<{tag}>")
        for name, value in attrs:
            value = (value or "").strip().lower()
            if name.startswith("on") or name in ("src", "srcdoc", "srcset", "formaction"):
                self.found.append(f"{name}=")
            if name == "href" and not value.startswith(("http://", "https://", "mailto:")):
                self.found.append(f"href={value}")
            if "javascript:" in value or "url(" in value or "expression(" in value:
                self.found.append(f"{name}={value}")

    handle_startendtag = handle_starttag


def live_parts(html: str) -> list[str]:
    """What in ``html`` could run script or fetch something (empty when inert)."""
    parser = _Live()
    parser.feed(html)
    parser.close()
    lowered = html.lower()
    raw = [t for t in ("<img", "<script", "<iframe") if t in lowered]  # as the brief words it
    return parser.found + raw


def markdown_as_trusted_html(markdown: str) -> str:
    """``markdown`` as a frontend that trusts it renders it: CommonMark with raw HTML on,
    GFM tables and autolinked URLs."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": True, "linkify": False}).enable(["table"])
    return md.render(markdown)


def assert_inert(data: dict[str, Any], where: str = "") -> None:
    """Every mime type of one display bundle is inert."""
    assert set(data) <= MIMES, (where, set(data) - MIMES)
    assert "text/plain" in data, where
    if "text/html" in data:
        assert live_parts(data["text/html"]) == [], (where, data["text/html"])
    if "text/markdown" in data:
        rendered = markdown_as_trusted_html(data["text/markdown"])
        assert live_parts(rendered) == [], (where, data["text/markdown"], rendered)
    for mime in ("text/plain", "text/markdown", "text/html"):
        text = data.get(mime, "")
        assert isinstance(text, str), where
        assert not any(c in text for c in "\x1b\x07\u202e\u200b"), (where, mime, text)


class ReplyModel:
    """The offline model, except that every chat turn (not extraction, not summaries)
    answers ``reply``: what a prompt-injected model would write."""

    def __init__(self, inner: Any, reply: str) -> None:
        self.inner = inner
        self.reply = reply
        self.turns = 0

    def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: Any = None,
        json_mode: bool = False,
        on_text: Any = None,
    ) -> ChatResult:
        last = str(messages[-1].get("content") or "") if messages else ""
        if json_mode or last.startswith("<conversation_to_summarize>"):
            return self.inner.chat(messages, tools=tools, json_mode=json_mode, on_text=on_text)
        self.turns += 1
        if on_text is not None:
            on_text(self.reply)
        return ChatResult(content=self.reply, usage=Usage(10, 10), model="loopback-model")

    def embed(self, texts: list[str]) -> list[list[float]]:
        return self.inner.embed(texts)


class HostileModel(ReplyModel):
    """The offline model's stand-in behind the loopback server (``server._httpd.model``):
    a prompt-injected model. The lead agent's first step calls a tool and a sub-agent with
    hostile arguments; its answer after the results is ``reply``; a sub-agent's model call
    fails with ``HOSTILE_LINE`` as the server's error; extraction (``json_mode``) fails the
    same way when ``fail_extraction``, so ``last_error`` holds it."""

    def __init__(self, inner: Any, reply: str, *, fail_extraction: bool = False) -> None:
        super().__init__(inner, reply)
        self.fail_extraction = fail_extraction

    def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: Any = None,
        json_mode: bool = False,
        on_text: Any = None,
    ) -> ChatResult:
        if json_mode and self.fail_extraction:
            raise RuntimeError(TERMINAL_TRAPS + HOSTILE_LINE)
        names = {t["function"]["name"] for t in tools or []}
        if not json_mode and tools and "task" not in names:  # a sub-agent: its call fails
            raise RuntimeError(TERMINAL_TRAPS + HOSTILE_LINE)
        if not json_mode and "task" in names and messages[-1].get("role") == "user":
            calls = [
                ToolCall("call_h1", "describe_variable", json.dumps({"name": HOSTILE_LINE})),
                ToolCall(
                    "call_h2", "task", json.dumps({"description": HOSTILE_LINE, "prompt": "go"})
                ),
            ]
            return ChatResult("", calls, Usage(10, 10), "loopback-model", "tool_calls")
        return super().chat(messages, tools=tools, json_mode=json_mode, on_text=on_text)
