"""Views of past conversations: ``%memory recall`` results, and one thread's transcript."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from ...untrusted import clean_text, escape_html, escape_markdown
from .table import Table, View, day, short


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

    headers: ClassVar[tuple[str, ...]] = ("thread", "date", "role", "excerpt", "score")

    @property
    def title(self) -> str:
        where = f" in thread {self.thread!r}" if self.thread else ""
        return f"Recall: {self.query!r}{where}"

    def _cells(self) -> list[tuple[str, str, str, str, str]]:
        return [
            (
                str(r.get("thread") or ""),
                day(r.get("created_at")),
                str(r.get("role") or ""),
                short(" ".join(str(r.get("content") or "").split()), self.width),
                f"{float(r.get('score') or 0.0):.3f}",
            )
            for r in self.results
        ]

    def table(self) -> Table:
        rows = [tuple(clean_text(c) for c in row) for row in self._cells()]
        return Table(self.headers, rows, clean_text(self.title), "No message matches.")

    def _repr_markdown_(self) -> str:
        head = f"**{escape_markdown(self.title)}**\n\n"
        if not self.results:
            return head + "_No message matches._"
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
            "No message matches.",
            html_rows=[[escape_html(c) for c in row] for row in self._cells()],
        )
        return table._html()
