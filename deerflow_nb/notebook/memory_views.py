"""Display objects returned by ``%memory``: one value, three readings.

Each view renders as Markdown and HTML in a notebook, and as plain text from
``str()``/``repr()`` in a terminal, a log or a test assertion. The views hold plain data
and never call the ``Memory`` API, so a view shows exactly what the handler read at that
moment.

Fact text, summaries, events, pending diffs and errors come from memory.json and the
journal, which a model or an imported file wrote: untrusted. Every reading is inert:
Markdown cells are literal (``escape_markdown``: an ``![](http://…)`` or ``<img onerror>``
in a fact is shown, not loaded), HTML is escaped (``escape_html``), code blocks are fenced
so nothing inside closes them, and plain text has no control characters (``clean_text``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ..memory.folds import summary as fold_summary
from ..untrusted import clean_text, code_block, escape_html, escape_markdown

if TYPE_CHECKING:
    from ..memory import Memory

SECTIONS: tuple[tuple[str, str, str], ...] = (
    ("user", "workContext", "Work context"),
    ("user", "personalContext", "Personal context"),
    ("user", "topOfMind", "Top of mind"),
    ("history", "recentMonths", "Recent months"),
    ("history", "earlierContext", "Earlier context"),
    ("history", "longTermBackground", "Long-term background"),
)


def count_of(n: int, noun: str) -> str:
    """``1 fact``, ``2 facts``: a count with its noun agreeing."""
    return f"{n} {noun}{'s' * (n != 1)}"


def confidence_bar(value: float | None, width: int = 10) -> str:
    """A text bar such as ``█████████░ 0.90`` that reads in any font."""
    if value is None:
        return "—"
    filled = max(0, min(width, round(float(value) * width)))
    return "█" * filled + "░" * (width - filled) + f" {float(value):.2f}"


def _html_bar(value: float | None) -> str:
    if value is None:
        return "—"
    pct = max(0.0, min(100.0, float(value) * 100))
    return (
        '<div style="display:flex;align-items:center;gap:6px">'
        '<div style="width:80px;height:8px;background:#e5e7eb;border-radius:4px">'
        f'<div style="width:{pct:.0f}%;height:8px;background:#2563eb;border-radius:4px">'
        f"</div></div><span>{float(value):.2f}</span></div>"
    )


def _md_cell(value: Any) -> str:
    """A value as literal Markdown on one line (a table cell, a list item)."""
    return "" if value is None else escape_markdown(value)


def _short(text: Any, width: int) -> str:
    value = "" if text is None else str(text).replace("\n", " ")
    return value if len(value) <= width else value[: width - 1] + "…"


def _day(stamp: Any) -> str:
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
            return "\n".join([*lines, self.empty])
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
        head = f"**{_md_cell(self.title)}**\n\n" if self.title else ""
        if not self.rows:
            return head + f"_{self.empty}_"
        lines = [
            "| " + " | ".join(self.headers) + " |",
            "|" + "|".join("---" for _ in self.headers) + "|",
        ]
        lines.extend("| " + " | ".join(_md_cell(c) for c in row) + " |" for row in self.rows)
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

    def _repr_markdown_(self) -> str:
        return self.table()._markdown()

    def _repr_html_(self) -> str:
        return self.table()._html()

    def __str__(self) -> str:
        return self.table()._text()

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
        lines = [_md_cell(self.text), "", *(f"- {_md_cell(d)}" for d in self.details)]
        return "\n".join(lines).strip()

    def _repr_html_(self) -> str:
        items = "".join(f"<li>{escape_html(d)}</li>" for d in self.details)
        return f"<p>{escape_html(self.text)}</p>" + (f"<ul>{items}</ul>" if items else "")


@dataclass(frozen=True, repr=False)
class FactsTable(View):
    """Facts with id, category, a confidence bar, content and creation time."""

    facts: tuple[Mapping[str, Any], ...]
    title: str = "Facts"

    def table(self) -> Table:
        headers = ("id", "category", "confidence", "content", "created")
        rows = [
            (
                f.get("id"),
                f.get("category"),
                confidence_bar(f.get("confidence")),
                _short(f.get("content"), 80),
                _day(f.get("createdAt")),
            )
            for f in self.facts
        ]
        html_rows = [
            [
                escape_html(str(f.get("id", ""))),
                escape_html(str(f.get("category", ""))),
                _html_bar(f.get("confidence")),
                escape_html(str(f.get("content", ""))),
                escape_html(_day(f.get("createdAt"))),
            ]
            for f in self.facts
        ]
        title = f"{self.title} ({len(self.facts)})"
        return Table(headers, rows, title, "No facts.", html_rows)


@dataclass(frozen=True, repr=False)
class SearchResults(View):
    """Facts ranked for a query, each with its score."""

    query: str
    results: tuple[tuple[Mapping[str, Any], float], ...]

    def table(self) -> Table:
        headers = ("rank", "score", "id", "category", "content")
        rows = [
            (i, f"{score:.3f}", f.get("id"), f.get("category"), _short(f.get("content"), 80))
            for i, (f, score) in enumerate(self.results, 1)
        ]
        return Table(headers, rows, f"Search: {self.query!r}", "No fact matches.")


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
                _day(r.get("created_at")),
                str(r.get("role") or ""),
                _short(" ".join(str(r.get("content") or "").split()), self.width),
                f"{float(r.get('score') or 0.0):.3f}",
            )
            for r in self.results
        ]

    def table(self) -> Table:
        from ..untrusted import clean_text

        rows = [tuple(clean_text(c) for c in row) for row in self._cells()]
        return Table(self.headers, rows, clean_text(self.title), "No message matches.")

    def _repr_markdown_(self) -> str:
        from ..untrusted import escape_markdown

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
        from ..untrusted import escape_html

        table = Table(
            self.headers,
            self._cells(),
            self.title,
            "No message matches.",
            html_rows=[[escape_html(c) for c in row] for row in self._cells()],
        )
        return table._html()


@dataclass(frozen=True, repr=False)
class PreviewView(View):
    """The exact injected block, with its token count against the budget."""

    block: str
    tokens: int
    budget: int
    fact_count: int = 0

    @property
    def header(self) -> str:
        return f"{self.tokens} / {self.budget} tokens, {count_of(self.fact_count, 'fact')}"

    @property
    def body(self) -> str:
        return self.block or "(nothing would be injected)"

    def __str__(self) -> str:
        return clean_text(f"Memory preview: {self.header}\n{self.body}")

    def _repr_markdown_(self) -> str:
        block = code_block(clean_text(self.body), "text")
        return f"**Memory preview** — {_md_cell(self.header)}\n\n{block}"

    def _repr_html_(self) -> str:
        body = self.body
        return (
            f"<p><b>Memory preview</b> — {escape_html(self.header)}</p>"
            f"<pre>{escape_html(body)}</pre>"
        )


@dataclass(frozen=True, repr=False)
class StatusView(View):
    """The queue, the last fold, the last error and where the files are."""

    status: Mapping[str, Any]

    def table(self) -> Table:
        rows = []
        for key, value in self.status.items():
            if key == "pending" and isinstance(value, list):
                queued = [
                    f"{r.get('thread_id')} ({r.get('status')}, {r.get('attempts') or 0} attempts)"
                    for r in value
                ]
                rows.append(("queued threads", "; ".join(queued) or "none"))
            elif key == "last_fold":
                at = _day((value or {}).get("at")) if isinstance(value, Mapping) else ""
                summary = fold_summary(value if isinstance(value, Mapping) else None)
                rows.append(("last fold", f"{at} {summary}".strip() if value else "never"))
                for item in (
                    (value or {}).get("left_out") or [] if isinstance(value, Mapping) else []
                ):
                    rows.append(("  left out", f"{item.get('item')}: {item.get('reason')}"))
            elif key == "consecutive_failures":
                rows.append(
                    (
                        key,
                        str(value or 0)
                        + (
                            f" ({failures_line(self.status)})" if failures_line(self.status) else ""
                        ),
                    )
                )
            else:
                rows.append((key, _format_value(value)))
        return Table(("key", "value"), rows, "Memory status", "No status.")


def flush_summary(report: Any) -> str:
    """``Memory.flush``'s report in one sentence."""
    folded = list(getattr(report, "folded", []) or [])
    proposed = list(getattr(report, "proposed", []) or [])
    failed = dict(getattr(report, "failed", {}) or {})
    parts = [f"folded {count_of(len(folded), 'thread')}"]
    if folded:
        parts[0] += f" ({', '.join(folded)})"
    if proposed:
        parts.append(f"proposed for review: {', '.join(proposed)}")
    parts.extend(f"failed {tid}: {err}" for tid, err in failed.items())
    parts.append(f"{getattr(report, 'pending', 0)} still queued")
    return "Flushed: " + "; ".join(parts)


def _format_value(value: Any) -> str:
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(value, default=str, ensure_ascii=False)
    return "" if value is None else str(value)


@dataclass(frozen=True, repr=False)
class EventsView(View):
    """Memory events, newest first (``%memory history`` and the panel's History tab)."""

    events: tuple[Mapping[str, Any], ...]
    title: str = "Memory events"
    folds: tuple[Mapping[str, Any], ...] = ()  # Memory.folds(): what each fold did

    def _tables(self) -> list[Table]:
        return [self.table(), *([folds_table(self.folds)] if self.folds else [])]

    def _repr_markdown_(self) -> str:
        return "\n\n".join(t._markdown() for t in self._tables())

    def _repr_html_(self) -> str:
        return "".join(t._html() for t in self._tables())

    def __str__(self) -> str:
        return "\n\n".join(t._text() for t in self._tables())

    def table(self) -> Table:
        headers = ("#", "time", "kind", "fact", "change", "source", "version")
        rows = [
            (
                e.get("id"),
                _day(e.get("ts")),
                _event_kind(e),
                e.get("fact_id") or e.get("section") or "",
                _short(describe_event(e), 120),
                e.get("source") or "",
                e.get("version_id") or "",
            )
            for e in self.events
        ]
        return Table(headers, rows, self.title, "No memory events yet.")


def folds_table(folds: Iterable[Mapping[str, Any]]) -> Table:
    """What the latest folds did, newest first: outcome, counts, left out and held."""
    rows = [
        (
            _day(f.get("at")),
            f.get("source") or "",
            f.get("outcome") or "",
            _short(fold_summary(f, with_head=False), 110),
        )
        for f in folds
    ]
    return Table(
        ("time", "thread", "outcome", "what it did"), rows, "Recent folds", "No folds yet."
    )


def failures_line(status: Mapping[str, Any]) -> str | None:
    """A line when the memory model failed several folds in a row, else None."""
    count = int(status.get("consecutive_failures") or 0)
    if count < 2:
        return None
    return (
        f"the memory model failed the last {count} folds in a row; check the last error, "
        "memory.model_name and the server"
    )


def _event_kind(event: Mapping[str, Any]) -> str:
    """``rollback (remove)``: whole-memory events say what they did to this fact."""
    details = event.get("details")
    change = details.get("change") if isinstance(details, Mapping) else None
    kind = str(event.get("kind") or "")
    return f"{kind} ({change})" if change and change != kind else kind


def describe_event(event: Mapping[str, Any]) -> str:
    """What changed, in a few words: old → new content, or the content touched."""
    old, new = event.get("old_content"), event.get("new_content")
    if old and new and old != new:
        return f"{old} → {new}"
    text = new or old or ""
    oc, nc = event.get("old_confidence"), event.get("new_confidence")
    if oc is not None and nc is not None and oc != nc:
        text = f"{text} ({oc:.2f} → {nc:.2f})"
    details = event.get("details")
    if isinstance(details, Mapping):  # issue 20: why it went, and where merges came from
        if details.get("merged_from"):
            text = f"{text} (merged from {', '.join(map(str, details['merged_from']))})"
        elif details.get("merged_into"):
            text = f"{old} (merged into {details['merged_into']})"
        elif details.get("reason"):
            text = f"{text} ({details['reason']})"
    return str(text)


@dataclass(frozen=True, repr=False)
class VersionsView(View):
    """Saved snapshots of memory.json, oldest first (as ``Memory.versions`` lists them)."""

    versions: tuple[Mapping[str, Any], ...]

    def table(self) -> Table:
        rows = [
            (
                v.get("id"),
                _day(v.get("created_at")),
                v.get("reason"),
                v.get("source") or "",
                v.get("fact_count"),
            )
            for v in self.versions
        ]
        return Table(
            ("version", "time", "reason", "source", "facts"),
            rows,
            "Memory versions",
            "No versions yet.",
        )


@dataclass(frozen=True, repr=False)
class DiffView(View):
    """What differs between two versions (``Memory.diff``): facts added, removed, changed,
    and summaries rewritten."""

    title: str
    diff: Mapping[str, Any]

    def table(self) -> Table:
        rows: list[tuple[str, str, str]] = []
        for fact in self.diff.get("added") or []:
            rows.append(("added", str(fact.get("id", "")), _short(fact.get("content"), 90)))
        for fact in self.diff.get("removed") or []:
            rows.append(("removed", str(fact.get("id", "")), _short(fact.get("content"), 90)))
        for change in self.diff.get("changed") or []:
            old, new = change.get("old") or {}, change.get("new") or {}
            detail = describe_event(
                {
                    "old_content": old.get("content"),
                    "new_content": new.get("content"),
                    "old_confidence": old.get("confidence"),
                    "new_confidence": new.get("confidence"),
                }
            )
            rows.append(("changed", str(change.get("id", "")), _short(detail, 90)))
        for section, change in (self.diff.get("sections") or {}).items():
            detail = f"{change.get('old') or '—'} → {change.get('new') or '—'}"
            rows.append(("section", str(section), _short(detail, 90)))
        return Table(("change", "what", "detail"), rows, self.title, "No differences.")


@dataclass(frozen=True, repr=False)
class PendingView(View):
    """Extraction diffs waiting for review, one row per proposed change set."""

    pending: tuple[Mapping[str, Any], ...]
    review: bool = False

    def table(self) -> Table:
        rows = [
            (
                p.get("id"),
                _day(p.get("created_at")),
                p.get("source") or "",
                _short(summarize_diff(p.get("diff")), 90),
            )
            for p in self.pending
        ]
        mode = "on" if self.review else "off"
        return Table(
            ("id", "time", "source", "proposed"),
            rows,
            f"Pending changes (review {mode})",
            "No pending changes.",
        )


def summarize_diff(diff: Any) -> str:
    """A one-line reading of an extraction diff: ``+ new fact; - f3; section: …``."""
    if isinstance(diff, str):
        try:
            diff = json.loads(diff)
        except ValueError:
            return diff
    if not isinstance(diff, Mapping):
        return "" if diff is None else str(diff)
    parts: list[str] = []
    for merge in diff.get("merges") or []:
        if isinstance(merge, Mapping):
            sources = ", ".join(str(i) for i in merge.get("from") or [])
            parts.append(f"merge {sources} → {merge.get('content', '')}")
    for fact in diff.get("newFacts") or []:
        content = fact.get("content") if isinstance(fact, Mapping) else fact
        parts.append(f"+ {content}")
    stale = {str(s.get("id")): s for s in diff.get("stale") or [] if isinstance(s, Mapping)}
    for fid in diff.get("factsToRemove") or []:
        if str(fid) in stale:
            parts.append(f"- {fid} (stale: {stale[str(fid)].get('content', '')})")
        else:
            parts.append(f"- {fid}")
    for group in ("user", "history"):
        for name, section in (diff.get(group) or {}).items():
            if isinstance(section, Mapping) and section.get("shouldUpdate"):
                parts.append(f"{name}: {section.get('summary', '')}")
    return "; ".join(parts) or "(no changes)"


@dataclass(frozen=True, repr=False)
class StaleView(View):
    """``%memory stale``: facts idle past their limit, and the pending change proposing
    their removal (if one was made)."""

    stale: tuple[Mapping[str, Any], ...]
    days: float = 180.0
    pending_id: int | None = None
    already_pending: tuple[str, ...] = ()
    proposing: bool = False

    def _note(self) -> str:
        if not self.stale:
            return ""
        if self.pending_id is not None:
            note = (
                f"Proposed for removal as pending change #{self.pending_id}: "
                f"%memory approve {self.pending_id} removes them, "
                f"%memory reject {self.pending_id} keeps them."
            )
        elif self.proposing:
            note = "Nothing new to propose."
        else:
            note = "Listed only (--dry-run): nothing proposed."
        if self.already_pending:
            note += f" Already waiting for review: {', '.join(self.already_pending)}."
        return note

    def table(self) -> Table:
        rows = [
            (
                s.get("id"),
                s.get("category"),
                _short(s.get("content"), 70),
                f"{float(s.get('idle_days') or 0):.0f} d",
                f"{float(s.get('limit_days') or 0):.0f} d",
                _day(s.get("last_active")),
            )
            for s in self.stale
        ]
        title = f"Stale facts (memory.staleness_days {self.days:g})"
        return Table(
            ("id", "category", "content", "idle", "stale after", "last confirmed or used"),
            rows,
            title,
            "No stale facts: every fact was confirmed or used recently enough.",
        )

    def _repr_markdown_(self) -> str:
        note = self._note()
        return self.table()._markdown() + (f"\n\n{_md_cell(note)}" if note else "")

    def _repr_html_(self) -> str:
        note = self._note()
        return self.table()._html() + (f"<p>{escape_html(note)}</p>" if note else "")

    def __str__(self) -> str:
        note = self._note()
        return self.table()._text() + (f"\n{clean_text(note)}" if note else "")


@dataclass(frozen=True, repr=False)
class ConsolidationView(View):
    """``%memory consolidate``: each merge (the facts it joins, the text it keeps), and
    whether it applied (a version, undone by rollback) or waits for review."""

    merges: tuple[Mapping[str, Any], ...]
    merged: tuple[Mapping[str, Any], ...] = ()
    left_out: tuple[Mapping[str, Any], ...] = ()
    version: int | None = None
    pending_id: int | None = None
    facts: tuple[Mapping[str, Any], ...] = ()  # to show the sources' text while pending
    undo_version: int | None = None  # the version before the merge, for rollback

    def _note(self) -> str:
        if not self.merges:
            note = "Nothing to merge."
        elif self.pending_id is not None:
            note = (
                f"Waiting for review as pending change #{self.pending_id} "
                f"(%memory approve {self.pending_id})."
            )
        else:
            undo = (
                f"%memory rollback {self.undo_version}"
                if self.undo_version is not None
                else "%memory rollback to the version before"
            )
            note = (
                f"Applied as version {self.version}; {undo} undoes it, and %memory history ID "
                "shows each merged fact's lineage."
            )
        if self.left_out:
            reasons = "; ".join(f"{x.get('item')}: {x.get('reason')}" for x in self.left_out[:3])
            note += f" Left out: {reasons}."
        return note

    def table(self) -> Table:
        by_id = {str(f.get("id")): f for f in self.facts}
        new_ids = {tuple(m.get("from") or ()): m.get("id") for m in self.merged}
        rows = []
        for merge in self.merges:
            sources = tuple(str(i) for i in merge.get("from") or ())
            names = [
                f"{i} ({_short(by_id[i].get('content'), 40)})" if i in by_id else i for i in sources
            ]
            rows.append(
                (
                    new_ids.get(sources) or "(pending)",
                    _short(merge.get("content"), 80),
                    "; ".join(names),
                )
            )
        return Table(
            ("new fact", "merged text", "merged from"), rows, "Consolidation", "No merges."
        )

    def _repr_markdown_(self) -> str:
        return self.table()._markdown() + f"\n\n{_md_cell(self._note())}"

    def _repr_html_(self) -> str:
        return self.table()._html() + f"<p>{escape_html(self._note())}</p>"

    def __str__(self) -> str:
        return self.table()._text() + f"\n{clean_text(self._note())}"


@dataclass(frozen=True, repr=False)
class SummaryView(View):
    """``%memory`` in a terminal: the six summaries, fact counts and the queue."""

    data: Mapping[str, Any]
    status: Mapping[str, Any] = field(default_factory=dict)

    def _profile(self) -> list[tuple[str, str]]:
        out = []
        for group, key, label in SECTIONS:
            section = (self.data.get(group) or {}).get(key) or {}
            out.append((label, section.get("summary") or ""))
        return out

    def _counts(self) -> str:
        facts = self.data.get("facts") or []
        by_cat: dict[str, int] = {}
        for fact in facts:
            by_cat[fact.get("category", "?")] = by_cat.get(fact.get("category", "?"), 0) + 1
        detail = ", ".join(f"{c} {n}" for c, n in sorted(by_cat.items()))
        return count_of(len(facts), "fact") + (f" ({detail})" if detail else "")

    def __str__(self) -> str:
        lines = [f"Memory — {self._counts()}, updated {self.data.get('lastUpdated') or 'never'}"]
        lines.extend(f"  {label}: {text or '—'}" for label, text in self._profile())
        if self.status:
            lines.append("  " + _status_line(self.status))
        lines.append("Run %memory --help for commands.")
        return clean_text("\n".join(lines))

    def _repr_markdown_(self) -> str:
        lines = [f"**Memory** — {_md_cell(self._counts())}", ""]
        lines.extend(f"- **{label}:** {_md_cell(text) or '—'}" for label, text in self._profile())
        if self.status:
            lines += ["", _md_cell(_status_line(self.status))]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        items = "".join(
            f"<li><b>{escape_html(label)}:</b> {escape_html(text) or '—'}</li>"
            for label, text in self._profile()
        )
        extra = f"<p>{escape_html(_status_line(self.status))}</p>" if self.status else ""
        return f"<p><b>Memory</b> — {escape_html(self._counts())}</p><ul>{items}</ul>{extra}"


def _status_line(status: Mapping[str, Any]) -> str:
    parts = [f"queued threads: {len(status.get('pending') or [])}"]
    if status.get("pending_changes"):
        parts.append(f"changes awaiting review: {status['pending_changes']}")
    last = status.get("last_fold")
    parts.append(f"last fold: {fold_summary(last if isinstance(last, Mapping) else None)}")
    if failures_line(status):
        parts.append(str(failures_line(status)))
    if status.get("last_error"):
        parts.append(f"last error: {status['last_error']}")
    return ", ".join(parts)


def facts_view(facts: Iterable[Mapping[str, Any]], title: str = "Facts") -> FactsTable:
    """Build a :class:`FactsTable` from any iterable of fact dicts."""
    return FactsTable(tuple(facts), title)


def preview_view(memory: Memory, context: str | None, tokens: int | None) -> PreviewView:
    """The injected block and its exact token count; shared by ``%memory preview`` and the panel."""
    from ..tokens import count_tokens

    budget = memory.settings.memory.max_injection_tokens if tokens is None else tokens
    block, chosen = memory.injection(context, max_tokens=budget)
    return PreviewView(block, count_tokens(block), budget, len(chosen))
