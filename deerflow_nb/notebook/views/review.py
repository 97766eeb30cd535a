"""Views of changes waiting for a decision: pending diffs, stale facts, consolidation merges."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .table import Table, View, day


@dataclass(frozen=True, repr=False)
class PendingView(View):
    """Extraction diffs waiting for review: each change, then each fact it adds, removes or
    merges and each section it rewrites, numbered and in full (never cut)."""

    pending: tuple[Mapping[str, Any], ...]
    review: bool = False
    items: Mapping[int, tuple[Any, ...]] = field(default_factory=dict)  # ReviewItem by change

    def table(self) -> Table:
        rows: list[tuple[Any, ...]] = []
        for p in self.pending:
            head = (p.get("id"), day(p.get("created_at")), p.get("source") or "")
            lines = [(i.number, i.reading()) for i in self.items.get(p.get("id"), ())]
            for number, reading in lines or [("", summarize_diff(p.get("diff")))]:
                rows.append((*head, number, reading))
                head = ("", "", "")
        mode = "on" if self.review else "off"
        return Table(
            ("id", "time", "source", "item", "proposed"),
            rows,
            f"Pending changes (review {mode})",
            "No pending changes.",
        )

    def _note(self) -> str:
        if not self.pending:
            return ""
        return (
            "%memory approve ID (or reject ID) decides a whole change; "
            "%memory approve ID --only 1,3 (or reject) decides some of its items, and the "
            "rest keeps waiting with the same numbers."
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
    # Each unused project proposed whole: ``{project, pending_id, facts, last_used}``.
    projects: tuple[Mapping[str, Any], ...] = ()

    def _note(self) -> str:
        if not self.stale:
            return ""
        notes = []
        if self.pending_id is not None:
            notes.append(
                f"Proposed for removal as pending change #{self.pending_id}: "
                f"%memory approve {self.pending_id} removes them, "
                f"%memory reject {self.pending_id} keeps them."
            )
        for p in self.projects:
            change = p.get("pending_id")
            notes.append(
                f"Project {p.get('project')} (last used {str(p.get('last_used'))[:10]}): its "
                f"{p.get('facts')} facts proposed together as pending change #{change}: "
                f"%memory approve {change} removes them all, %memory reject {change} keeps "
                f"them, --only N decides one."
            )
        if not notes:
            notes.append(
                "Nothing new to propose."
                if self.proposing
                else "Listed only (--dry-run): nothing proposed."
            )
        if self.already_pending:
            notes.append(f"Already waiting for review: {', '.join(self.already_pending)}.")
        return " ".join(notes)

    def table(self) -> Table:
        rows = [
            (
                s.get("id"),
                f"project {s['project']}" if s.get("project") else "by itself",
                s.get("category"),
                s.get("content") or "",
                f"{float(s.get('idle_days') or 0):.0f} d",
                f"{float(s.get('limit_days') or 0):.0f} d",
                day(s.get("last_active")),
            )
            for s in self.stale
        ]
        title = f"Stale facts (memory.staleness_days {self.days:g})"
        return Table(
            ("id", "stale as", "category", "content", "idle", "stale after", "last active"),
            rows,
            title,
            "No stale facts: every fact was confirmed or used recently enough.",
        )


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
            names = [f"{i} ({by_id[i].get('content', '')})" if i in by_id else i for i in sources]
            rows.append(
                (
                    new_ids.get(sources) or "(pending)",
                    merge.get("content") or "",
                    "; ".join(names),
                )
            )
        return Table(
            ("new fact", "merged text", "merged from"), rows, "Consolidation", "No merges."
        )
