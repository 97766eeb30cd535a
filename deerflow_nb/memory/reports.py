"""What memory operations report back: a diff applied, a flush, the aging passes.

Plain dataclasses; ``ApplyReport.to_dict`` is the fold report stored in ``memory_folds``
and shown by ``%memory status``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .readside.fold_records import HELD, NOTHING, REPORT_KEYS

if TYPE_CHECKING:
    from .updates.updater import UpdateResult


@dataclass
class ApplyReport:
    """What one diff (a fold, or ``Memory.apply``) did.

    ``left_out`` lists the items not applied, each ``{item, reason, value}`` (invalid in
    the reply, below the confidence threshold, over the per-fold limit, unknown removal);
    ``held`` what waits for review as pending change ``pending_id`` (review mode, the wipe
    guard, removals of facts the user added). ``outcome`` says it in words.
    """

    version: int | None = None
    added: list[str] = field(default_factory=list)
    reinforced: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    evicted: list[str] = field(default_factory=list)
    sections: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    pending_id: int | None = None
    left_out: list[dict[str, str]] = field(default_factory=list)
    held: list[dict[str, str]] = field(default_factory=list)
    outcome: str = NOTHING

    @classmethod
    def from_result(cls, result: UpdateResult, version: int | None) -> ApplyReport:
        return cls(
            version=version,
            added=result.ids("add"),
            reinforced=result.ids("reinforce"),
            removed=result.ids("remove"),
            evicted=result.ids("evict"),
            sections=[e.section for e in result.events if e.kind == "section" and e.section],
            ignored=result.ignored_removals,
            left_out=list(result.left_out),
        )

    @property
    def held_all(self) -> bool:
        """Nothing applied: the whole diff waits for review."""
        return self.outcome == HELD

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "version": self.version,
            "pending_id": self.pending_id,
            **{k: list(getattr(self, k)) for k in REPORT_KEYS},
        }


def changes_anything(diff: dict[str, Any]) -> bool:
    """Whether a (checked) diff would change memory: a new fact, a removal, or a section
    marked for update, a teammate's edit. One that would not is no proposal to review."""
    if diff.get("newFacts") or diff.get("factsToRemove") or diff.get("edits"):
        return True
    if (diff.get("projectContext") or {}).get("shouldUpdate"):
        return True
    return any(
        isinstance(section, dict) and section.get("shouldUpdate")
        for group in ("user", "history")
        for section in (diff.get(group) or {}).values()
    )


@dataclass
class StaleReport:
    """``Memory.propose_stale``: the stale facts found, those proposed now as pending change
    ``pending_id``, and those an earlier stale proposal already holds; each unused project
    proposed now as a change of its own (``projects``: ``{project, pending_id, facts,
    last_used, reason}``), and the projects an earlier proposal already names."""

    stale: list[dict[str, Any]] = field(default_factory=list)
    proposed: list[str] = field(default_factory=list)
    already_pending: list[str] = field(default_factory=list)
    pending_id: int | None = None
    projects: list[dict[str, Any]] = field(default_factory=list)
    already_projects: list[str] = field(default_factory=list)


@dataclass
class ConsolidationReport:
    """``Memory.consolidate``: the merges the model proposed (``{"from": [ids], "content",
    "category", "confidence"}``), what was left out, and either the version that applied
    them (``merged``: the new facts) or the pending change that holds them (``held``: why,
    when the gate held them outside review mode)."""

    merges: list[dict[str, Any]] = field(default_factory=list)
    merged: list[dict[str, Any]] = field(default_factory=list)
    left_out: list[dict[str, str]] = field(default_factory=list)
    version: int | None = None
    pending_id: int | None = None
    held: list[dict[str, str]] = field(default_factory=list)


@dataclass
class FlushReport:
    """Threads folded, proposed for review, failed (with the error), waiting for the
    user's turn to end (the fold gave way; still queued), and rows left pending."""

    folded: list[str] = field(default_factory=list)
    proposed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    pending: int = 0
    waiting: list[str] = field(default_factory=list)
