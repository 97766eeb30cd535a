"""The table every list-like view renders through, the ``View`` base, and the cell helpers.

A view builds a :class:`Table` of plain values; the table gives its plain text, literal
Markdown and escaped HTML readings (see the package docstring for why each is inert).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...untrusted import clean_text, escape_html, escape_markdown


def count_of(n: int, noun: str) -> str:
    """``1 fact``, ``2 facts``: a count with its noun agreeing."""
    return f"{n} {noun}{'s' * (n != 1)}"


def confidence_bar(value: float | None, width: int = 10) -> str:
    """A text bar such as ``█████████░ 0.90`` that reads in any font."""
    if value is None:
        return "—"
    filled = max(0, min(width, round(float(value) * width)))
    return "█" * filled + "░" * (width - filled) + f" {float(value):.2f}"


def html_bar(value: float | None) -> str:
    if value is None:
        return "—"
    pct = max(0.0, min(100.0, float(value) * 100))
    return (
        '<div style="display:flex;align-items:center;gap:6px">'
        '<div style="width:80px;height:8px;background:#e5e7eb;border-radius:4px">'
        f'<div style="width:{pct:.0f}%;height:8px;background:#2563eb;border-radius:4px">'
        f"</div></div><span>{float(value):.2f}</span></div>"
    )


def md_cell(value: Any) -> str:
    """A value as literal Markdown on one line (a table cell, a list item)."""
    return "" if value is None else escape_markdown(value)


def short(text: Any, width: int) -> str:
    value = "" if text is None else str(text).replace("\n", " ")
    return value if len(value) <= width else value[: width - 1] + "…"


def day(stamp: Any) -> str:
    """``2025-01-31T12:00:00.000Z`` → ``2025-01-31 12:00`` for compact tables."""
    text = "" if stamp is None else str(stamp)
    return text[:16].replace("T", " ")


@dataclass(frozen=True)
class Table:
    """A generic table: the one renderer every list-like view delegates to."""

    headers: Sequence[str]
    rows: Sequence[Sequence[Any]]
    title: str = ""
    empty: str = "Nothing to show."
    html_rows: Sequence[Sequence[str]] | None = None  # pre-rendered HTML cells, if any

    def _text(self) -> str:
        lines = [self.title] if self.title else []
        if not self.rows:
            return clean_text("\n".join([*lines, self.empty]))
        cells = [[("" if c is None else str(c)) for c in row] for row in self.rows]
        widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(self.headers)]
        lines.append(
            "  ".join(h.ljust(w) for h, w in zip(self.headers, widths, strict=True)).rstrip()
        )
        lines.append("  ".join("-" * w for w in widths))
        lines.extend(
            "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells
        )
        return clean_text("\n".join(lines))

    def _markdown(self) -> str:
        head = f"**{md_cell(self.title)}**\n\n" if self.title else ""
        if not self.rows:
            return head + f"_{md_cell(self.empty)}_"
        lines = [
            "| " + " | ".join(self.headers) + " |",
            "|" + "|".join("---" for _ in self.headers) + "|",
        ]
        lines.extend("| " + " | ".join(md_cell(c) for c in row) + " |" for row in self.rows)
        return head + "\n".join(lines)

    def _html(self) -> str:
        head = f"<p><b>{escape_html(self.title)}</b></p>" if self.title else ""
        if not self.rows:
            return head + f"<p><i>{escape_html(self.empty)}</i></p>"
        body = self.html_rows or [
            [escape_html("" if c is None else str(c)) for c in row] for row in self.rows
        ]
        ths = "".join(f'<th style="text-align:left">{escape_html(h)}</th>' for h in self.headers)
        trs = "".join(
            "<tr>" + "".join(f'<td style="text-align:left">{c}</td>' for c in row) + "</tr>"
            for row in body
        )
        return f"{head}<table><thead><tr>{ths}</tr></thead><tbody>{trs}</tbody></table>"


class View:
    """Base: subclasses build a :class:`Table` (or text) and get every rendering from it."""

    def table(self) -> Table:
        raise NotImplementedError

    def _note(self) -> str:
        """A line shown below the table (what a proposal waits for, how to undo it); none."""
        return ""

    def _repr_markdown_(self) -> str:
        note = self._note()
        return self.table()._markdown() + (f"\n\n{md_cell(note)}" if note else "")

    def _repr_html_(self) -> str:
        note = self._note()
        return self.table()._html() + (f"<p>{escape_html(note)}</p>" if note else "")

    def __str__(self) -> str:
        note = self._note()
        return self.table()._text() + (f"\n{clean_text(note)}" if note else "")

    def __repr__(self) -> str:
        return str(self)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(str(self))


@dataclass(frozen=True, repr=False)
class Notice(View):
    """A one-line confirmation of a write (``Forgot fact_x: …``)."""

    text: str
    details: tuple[str, ...] = ()

    def __str__(self) -> str:
        return clean_text("\n".join([self.text, *(f"  {d}" for d in self.details)]))

    def _repr_markdown_(self) -> str:
        lines = [md_cell(self.text), "", *(f"- {md_cell(d)}" for d in self.details)]
        return "\n".join(lines).strip()

    def _repr_html_(self) -> str:
        items = "".join(f"<li>{escape_html(d)}</li>" for d in self.details)
        return f"<p>{escape_html(self.text)}</p>" + (f"<ul>{items}</ul>" if items else "")
