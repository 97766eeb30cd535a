"""Review mode: proposed changes wait as ``pending_changes`` until approved or rejected."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..config import Settings
from ..storage import ledger as rows
from ..storage.db import now_iso
from ..storage.journal import Journal
from .ledger import Changed, Ledger
from .rules import Rules
from .updater import UpdateResult

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

    def __init__(
        self,
        settings: Settings,
        journal: Journal,
        ledger: Ledger,
        rules: Rules,
        changed: Changed,
        warm: Callable[[dict[str, Any]], None],
    ) -> None:
        self.settings = settings
        self.journal = journal
        self.ledger = ledger
        self.rules = rules
        self._changed = changed
        self._warm = warm

    @property
    def on(self) -> bool:
        """The persisted choice (``%memory review on``), else ``memory.review``."""
        value = rows.setting(self.journal.db, _REVIEW_KEY)
        return value == "1" if value is not None else self.settings.memory.review

    @on.setter
    def on(self, value: bool) -> None:
        with self.journal.transaction() as db:
            rows.put_setting(db, _REVIEW_KEY, "1" if value else "0")

    def propose(self, source: str, diff: dict[str, Any]) -> int:
        """Store ``diff`` as a pending change in its own transaction, and say so."""
        with self.journal.transaction() as db:
            pending_id = propose(db, source, diff)
        self._changed({"reason": "proposed", "pending_id": pending_id})
        return pending_id

    def count(self) -> int:
        return rows.pending_count(self.journal.db)

    def pending(self) -> list[dict[str, Any]]:
        return [{**r, "diff": json.loads(r["diff"])} for r in rows.pending(self.journal.db)]

    def approve(self, chosen: list[dict[str, Any]]) -> int:
        """Apply the chosen proposals (oldest first) as folds; how many were applied."""
        return sum(self._approve_one(change) for change in chosen)

    def _approve_one(self, change: dict[str, Any]) -> bool:
        """Checked again under the memory lock: a proposal another kernel decided meanwhile
        is skipped, not applied twice."""
        change_id, diff, source = change["id"], change["diff"], change["source"]
        still: list[bool] = []

        def apply(data: dict[str, Any]) -> UpdateResult:
            still.append(rows.is_pending(self.journal.db, change_id))  # decided nowhere else
            return self.rules.apply(data, diff, source) if still[0] else UpdateResult(data, [])

        def mark(db: Any) -> None:
            if still[0]:
                rows.decide(db, change_id, "approved", now_iso())

        result, _ = self.ledger.commit("approve", source, apply, mark)
        if still[0]:
            self._warm(result.data)
        return still[0]

    def reject(self, chosen: list[dict[str, Any]]) -> int:
        """Drop the chosen proposals; how many (one another kernel decided is not counted)."""
        with self.ledger.store.locked(), self.journal.transaction() as db:
            count = sum(rows.decide(db, change["id"], "rejected", now_iso()) for change in chosen)
        if count:
            self._changed({"reason": "reject"})
        return count
