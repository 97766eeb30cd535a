"""Review mode: proposed changes wait as ``pending_changes`` until approved or rejected.

The gate (``gate.py``) proposes; an approval goes back through it as the user's change."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..config import Settings
from ..schema.changes import ChangeSet
from ..storage import ledger as rows
from ..storage.db import now_iso
from ..storage.journal import Journal
from .ledger import Changed, Ledger

if TYPE_CHECKING:
    from .gate import Gate

_REVIEW_KEY = "review"


def propose(db: Any, source: str, diff: dict[str, Any]) -> int:
    """Inside a journal transaction: store ``diff`` as a pending change; its id."""
    return rows.insert_pending(
        db, created_at=now_iso(), source=source, diff=json.dumps(diff, ensure_ascii=False)
    )


def select(pending: list[dict[str, Any]], ids: list[int] | str) -> list[dict[str, Any]]:
    """The proposals in ``pending`` named by ``ids`` (or ``"all"``), in their order."""
    if ids == "all":
        return pending
    wanted = {int(i) for i in ids}
    return [p for p in pending if p["id"] in wanted]


class Review:
    """Whether folds wait for approval, what waits, and the decisions on it."""

    def __init__(self, settings: Settings, journal: Journal, ledger: Ledger, changed: Changed):
        self.settings = settings
        self.journal = journal
        self.ledger = ledger
        self._changed = changed

    @property
    def on(self) -> bool:
        """The persisted choice (``%memory review on``), else ``memory.review``."""
        value = rows.setting(self.journal.db, _REVIEW_KEY)
        return value == "1" if value is not None else self.settings.memory.review

    @on.setter
    def on(self, value: bool) -> None:
        with self.journal.transaction() as db:
            rows.put_setting(db, _REVIEW_KEY, "1" if value else "0")

    def count(self) -> int:
        return rows.pending_count(self.journal.db)

    def pending(self) -> list[dict[str, Any]]:
        return [{**r, "diff": json.loads(r["diff"])} for r in rows.pending(self.journal.db)]

    def approve(self, chosen: list[dict[str, Any]], gate: Gate) -> int:
        """Apply the chosen proposals (oldest first) through the gate, as the user's
        changes; how many were applied. Each is checked again under the memory lock: one
        another kernel decided meanwhile is skipped, not applied twice."""
        applied = 0
        for change in chosen:
            passed = gate.submit(
                ChangeSet(
                    origin="user",
                    reason="approve",
                    source=change["source"],
                    diff=change["diff"],
                    pending_id=change["id"],
                )
            )
            applied += not passed.skipped
        return applied

    def reject(self, chosen: list[dict[str, Any]]) -> int:
        """Drop the chosen proposals; how many (one another kernel decided is not counted)."""
        with self.ledger.store.locked(), self.journal.transaction() as db:
            count = sum(rows.decide(db, change["id"], "rejected", now_iso()) for change in chosen)
        if count:
            self._changed({"reason": "reject"})
        return count
