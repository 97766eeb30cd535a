"""The update rules as a home configures them: threshold, fact limit and eviction policy."""

from __future__ import annotations

import copy
from typing import Any

from ...config import Settings
from ...storage.journal import Journal
from ..readside import activity
from .updater import UpdateResult, apply_diff


class Rules:
    """``updater.apply_diff`` with the settings read at each call (a test or the user may
    change them on a live ``Memory``)."""

    def __init__(self, settings: Settings, journal: Journal) -> None:
        self.settings = settings
        self.journal = journal

    def apply(
        self,
        data: dict[str, Any],
        diff: dict[str, Any],
        source: str,
        threshold: float | None = None,
        added_by: str | None = None,
        project: str | None = None,
        *,
        within_room: bool = False,
    ) -> UpdateResult:
        """``diff`` applied to ``data`` (changed in place); the use records are read only
        when the change may evict (data handed down, not a function). ``within_room`` (a
        person's import): as many new facts as memory has room for, none evicted, instead
        of the per-fold limit, each keeping the ``createdAt`` and ``source`` of its file."""
        memory = self.settings.memory
        limit: dict[str, Any] = {}
        if within_room:
            room = max(0, memory.max_facts - len(data.get("facts") or []))
            why = (
                f"memory is full (memory.max_facts is {memory.max_facts}: forget facts or "
                "raise it, then import again)"
            )
            limit = {"max_new": room, "over_limit": why}
        evicts = _may_evict(data, diff, memory.max_facts)
        used = activity.read(self.journal.db) if evicts else None
        return apply_diff(
            data,
            diff,
            source=source,
            threshold=memory.fact_confidence_threshold if threshold is None else threshold,
            max_facts=memory.max_facts,
            added_by=added_by,
            eviction=memory.eviction,
            usage=used,
            project=project,
            imported=within_room,
            **limit,
        )

    def capped(self, result: UpdateResult, source: str) -> UpdateResult:
        """``result`` (a teammate's change applied) within ``memory.max_facts``: rarely over
        it, then evicted as a fold's change would, on a copy."""
        if len(result.data.get("facts") or []) <= self.settings.memory.max_facts:
            return result
        capped = self.apply(copy.deepcopy(result.data), {}, source)
        return UpdateResult(capped.data, result.events + capped.events)


def _may_evict(data: dict[str, Any], diff: dict[str, Any], max_facts: int) -> bool:
    """Whether ``diff``'s new facts could take ``data`` past ``max_facts`` (eviction)."""
    return len(data.get("facts") or []) + len(diff.get("newFacts") or []) > max_facts
