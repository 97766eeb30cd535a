"""Memory events: one change as journaled, and how an event is encoded as a row.

What a whole-memory replacement (a rollback, import or reset) changed, fact by fact, and a
row decoded back are the read side's (``readside/change_events.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ...storage.contract import Event
from ..readside.change_events import USER_OWNER, event_owner

__all__ = ["Event", "event_row", "event_rows"]


def event_rows(
    events: Iterable[Event],
    ts: str,
    source: str,
    version: int | None,
    before: Mapping[str, Any],
    after: Mapping[str, Any],
) -> list[dict[str, Any]]:
    """The rows of one change's events, each stamped with whose it is (``project``), told
    from the documents before and after the change: a removed fact is found in ``before``."""
    events = list(events)
    missing = {e.fact_id for e in events if e.fact_id and not e.section}
    facts: dict[str, Mapping[str, Any]] = {}
    for document in (after, before):  # after first: where a fact went; a removed one before
        # From the end, until each is found: a fold's new facts are the last ones.
        for fact in reversed(document.get("facts") or [] if missing else []):
            if fact.get("id") in missing:
                facts[fact["id"]] = fact
                missing.discard(fact["id"])
                if not missing:
                    break
    return [
        event_row(e, ts, source, version, event_owner(e.section, e.fact_id, e.details, facts))
        for e in events
    ]


def event_row(
    event: Event, ts: str, source: str, version: int | None, project: str | None = None
) -> dict[str, Any]:
    """The ``memory_events`` row for ``event``, about ``project``'s fact (None: the user's)."""
    return {
        "ts": ts,
        "kind": event.kind,
        "fact_id": event.fact_id,
        "section": event.section,
        "old_content": event.old_content,
        "new_content": event.new_content,
        "old_confidence": event.old_confidence,
        "new_confidence": event.new_confidence,
        "source": source,
        "version_id": version,
        "details": json.dumps(event.details) if event.details else None,
        "project": USER_OWNER if project is None else project,
    }
