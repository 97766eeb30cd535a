"""Views of what changed: memory events, recent folds, saved versions and version diffs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ...memory import changed_by, fold_summary
from ...schema.constants import section_label
from .table import Table, View, day, short


@dataclass(frozen=True, repr=False)
class EventsView(View):
    """Memory events, newest first (``%memory history`` and the panel's History tab)."""

    events: tuple[Mapping[str, Any], ...]
    title: str = "Memory events"
    folds: tuple[Mapping[str, Any], ...] = ()  # Memory.history.folds(): what each fold did
    projects: bool = False  # events of every project: say whose fact each is about

    def _tables(self) -> list[Table]:
        return [self.table(), *([folds_table(self.folds)] if self.folds else [])]

    def _repr_markdown_(self) -> str:
        return "\n\n".join(t._markdown() for t in self._tables())

    def _repr_html_(self) -> str:
        return "".join(t._html() for t in self._tables())

    def __str__(self) -> str:
        return "\n\n".join(t._text() for t in self._tables())

    def table(self) -> Table:
        headers = ("#", "time", "kind", "fact", "by", "change", "source", "version")
        rows = [
            (
                e.get("id"),
                day(e.get("ts")),
                event_kind(e),
                e.get("fact_id") or e.get("section") or "",
                changed_by(e),  # a teammate's role, or you
                short(describe_event(e), 120),
                e.get("source") or "",
                e.get("version_id") or "",
            )
            for e in self.events
        ]
        if self.projects:  # MemoryReader.events names each event's project (None: yours)
            headers = (*headers[:4], "project", *headers[4:])
            rows = [
                (*row[:4], e.get("project") or "user", *row[4:])
                for row, e in zip(rows, self.events, strict=True)
            ]
        return Table(headers, rows, self.title, "No memory events yet.")


def folds_table(folds: Iterable[Mapping[str, Any]]) -> Table:
    """What the latest folds did, newest first: outcome, counts, left out and held."""
    rows = [
        (
            day(f.get("at")),
            f.get("source") or "",
            f.get("outcome") or "",
            short(fold_summary(f, with_head=False), 110),
        )
        for f in folds
    ]
    return Table(
        ("time", "thread", "outcome", "what it did"), rows, "Recent folds", "No folds yet."
    )


def event_kind(event: Mapping[str, Any]) -> str:
    """``rollback (remove)``: whole-memory events say what they did to this fact."""
    details = event.get("details")
    change = details.get("change") if isinstance(details, Mapping) else None
    kind = str(event.get("kind") or "")
    return f"{kind} ({change})" if change and change != kind else kind


def describe_event(event: Mapping[str, Any]) -> str:
    """What changed, in a few words: old → new content, or the content touched."""
    old, new = event.get("old_content"), event.get("new_content")
    details = event.get("details")
    details = details if isinstance(details, Mapping) else {}
    moved = ""
    if "old_category" in details and details["old_category"] != details.get("category"):
        moved = f" (category {details['old_category']} → {details.get('category')})"
    if old and new and old != new:
        return f"{old} → {new}{moved}"
    text = new or old or ""
    oc, nc = event.get("old_confidence"), event.get("new_confidence")
    if oc is not None and nc is not None and oc != nc:
        text = f"{text} ({oc:.2f} → {nc:.2f})"
    text += moved
    # issue 20: why it went, and where merges came from
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
                day(v.get("created_at")),
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
    """What differs between two versions (``Memory.history.diff``): facts added, removed, changed,
    and summaries rewritten."""

    title: str
    diff: Mapping[str, Any]

    def table(self) -> Table:
        rows: list[tuple[str, str, str]] = []
        for fact in self.diff.get("added") or []:
            rows.append(("added", str(fact.get("id", "")), short(fact.get("content"), 90)))
        for fact in self.diff.get("removed") or []:
            rows.append(("removed", str(fact.get("id", "")), short(fact.get("content"), 90)))
        for change in self.diff.get("changed") or []:
            old, new = change.get("old") or {}, change.get("new") or {}
            detail = describe_event(
                {
                    "old_content": old.get("content"),
                    "new_content": new.get("content"),
                    "old_confidence": old.get("confidence"),
                    "new_confidence": new.get("confidence"),
                    "details": {
                        "old_category": old.get("category"),
                        "category": new.get("category"),
                    },
                }
            )
            rows.append(("changed", str(change.get("id", "")), short(detail, 90)))
        for section, change in (self.diff.get("sections") or {}).items():
            detail = f"{change.get('old') or '—'} → {change.get('new') or '—'}"
            rows.append(("section", section_label(str(section)), short(detail, 90)))
        return Table(("change", "what", "detail"), rows, self.title, "No differences.")
