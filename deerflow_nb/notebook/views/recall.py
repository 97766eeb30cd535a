"""Views of past conversations: ``%memory recall`` results, and one thread's transcript.

A transcript holds what recall searches: a lead thread's user messages and final replies
(no tool traffic, no ``--no-memory`` turns), read through the journal's message reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ...untrusted import clean_text, escape_html, escape_markdown
from .table import Table, View, count_of, day, short

if TYPE_CHECKING:
    from ...memory import Memory


@dataclass(frozen=True, repr=False)
class RecallResults(View):
    """Journal messages found by ``%memory recall``: thread, date, role, excerpt, score.

    Thread names and messages are untrusted journal text: every reading escapes them
    (``untrusted``), so a message holding Markdown or HTML shows as the text it is.
    """

    query: str
    results: tuple[Mapping[str, Any], ...]
    thread: str | None = None
    width: int = 100
    numbered: bool = False  # a leading "#" column, for the panel's buttons to name a row
    nearest: Mapping[str, Any] | None = None  # the best message below the relevance floor

    columns: ClassVar[tuple[str, ...]] = ("thread", "date", "role", "excerpt", "score", "project")

    @property
    def headers(self) -> tuple[str, ...]:
        return ("#", *self.columns) if self.numbered else self.columns

    @property
    def title(self) -> str:
        where = f" in thread {self.thread!r}" if self.thread else ""
        return f"Recall: {self.query!r}{where}"

    @property
    def empty(self) -> str:
        """Nothing matches, said plainly, with what to try and the nearest miss."""
        where = f" in thread {self.thread!r}" if self.thread else ""
        text = f"Nothing said{where} matches {self.query!r}. Try fewer or other words."
        if self.nearest is not None:
            said = short(" ".join(str(self.nearest.get("content") or "").split()), self.width)
            text += (
                f" Nearest miss, not a match: {self.nearest.get('thread')} "
                f"#{self.nearest.get('seq')} {self.nearest.get('role')}: {said}"
            )
        return text

    def _cells(self) -> list[tuple[str, ...]]:
        from ...memory import excerpt  # the stemmer: loaded on first use

        return [
            (
                *((str(rank),) if self.numbered else ()),
                str(r.get("thread") or ""),
                day(r.get("created_at")),
                str(r.get("role") or ""),
                excerpt(str(r.get("content") or ""), self.query, self.width),
                f"{float(r.get('score') or 0.0):.3f}",
                str(r.get("project") or ""),
            )
            for rank, r in enumerate(self.results, 1)
        ]

    def table(self) -> Table:
        rows = [tuple(clean_text(c) for c in row) for row in self._cells()]
        return Table(self.headers, rows, clean_text(self.title), clean_text(self.empty))

    def _repr_markdown_(self) -> str:
        head = f"**{escape_markdown(self.title)}**\n\n"
        if not self.results:
            return head + f"_{escape_markdown(self.empty)}_"
        lines = [
            "| " + " | ".join(self.headers) + " |",
            "|" + "|".join("---" for _ in self.headers) + "|",
        ]
        lines += [
            "| " + " | ".join(escape_markdown(c) for c in row) + " |" for row in self._cells()
        ]
        return head + "\n".join(lines)

    def _repr_html_(self) -> str:
        table = Table(
            self.headers,
            self._cells(),
            self.title,
            self.empty,
            html_rows=[[escape_html(c) for c in row] for row in self._cells()],
        )
        return table._html()


@dataclass(frozen=True, repr=False)
class ThreadTranscript(View):
    """One thread's user messages and final replies in order, the recalled one marked.

    Every message is untrusted journal text: HTML escapes it, Markdown quotes it literally,
    plain text drops control characters.
    """

    thread: str
    messages: tuple[Mapping[str, Any], ...]  # {seq, role, content, created_at}
    marked: int | None = None  # the seq of the message recall found

    @property
    def title(self) -> str:
        return f"Thread {self.thread!r}: {count_of(len(self.messages), 'message')}"

    def _head(self, message: Mapping[str, Any]) -> str:
        when, seq = day(message.get("created_at")), message.get("seq")
        found = " (found by recall)" if seq == self.marked else ""
        return f"{message.get('role')} · {when} · #{seq}{found}"

    def __str__(self) -> str:
        lines = [self.title]
        for m in self.messages:
            mark = "▶ " if m.get("seq") == self.marked else "  "
            lines += [
                "",
                mark + self._head(m),
                *(f"  {line}" for line in str(m.get("content")).splitlines()),
            ]
        return clean_text("\n".join(lines))

    def _repr_markdown_(self) -> str:
        parts = [f"**{escape_markdown(self.title)}**"]
        for m in self.messages:
            head = escape_markdown(self._head(m))
            parts.append(f"**{head}**" if m.get("seq") == self.marked else f"_{head}_")
            parts.append(escape_markdown(m.get("content")))
        return "\n\n".join(parts)

    def _repr_html_(self) -> str:
        items = []
        for m in self.messages:
            marked = m.get("seq") == self.marked
            style = "margin:4px 0;padding:4px 8px;border-left:3px solid " + (
                "#2563eb;background:#eff6ff" if marked else "#e5e7eb"
            )
            head = escape_html(self._head(m))
            items.append(
                f'<div style="{style}"><div><small>{"<b>" + head + "</b>" if marked else head}'
                f'</small></div><div style="white-space:pre-wrap">{escape_html(m.get("content"))}'
                "</div></div>"
            )
        body = "".join(items) or "<p><i>No messages.</i></p>"
        return (
            f"<p><b>{escape_html(self.title)}</b></p>"
            f'<div style="max-height:480px;overflow:auto">{body}</div>'
        )


def thread_transcript(memory: Memory, thread: str, marked: int | None = None) -> ThreadTranscript:
    """The messages of ``thread`` that recall searches, oldest first: user messages and
    replies without tool calls, outside ``--no-memory`` turns."""
    reader = memory.reader
    private = reader.private_turn_ids(thread)
    messages = tuple(
        {k: row.get(k) for k in ("seq", "role", "content", "created_at")}
        for row in reader.message_rows(thread)
        if str(row.get("content") or "").strip()
        and row.get("turn_id") not in private
        and (row["role"] == "user" or (row["role"] == "assistant" and not _calls(row)))
    )
    return ThreadTranscript(thread, messages, marked)


def _calls(row: Mapping[str, Any]) -> bool:
    """Whether a stored message row asked for tool calls (a step, not the turn's reply)."""
    return row.get("tool_calls") not in (None, "", "[]", "null")
