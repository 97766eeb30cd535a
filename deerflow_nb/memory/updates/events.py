"""Memory events: one change as journaled, and how an event is encoded as a row.

What a whole-memory replacement (a rollback, import or reset) changed, fact by fact, and a
row decoded back are the read side's (``readside/change_events.py``).
"""

from __future__ import annotations

import json
from typing import Any

from ...storage.contract import Event

__all__ = ["Event", "event_row"]


def event_row(event: Event, ts: str, source: str, version: int | None) -> dict[str, Any]:
    """The ``memory_events`` row for ``event``."""
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
    }
