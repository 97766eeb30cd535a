"""Memory events: one change as journaled, what a whole-memory replacement changed, and how
an event is encoded as a row.

A rollback, import or reset replaces memory wholesale; the history should still say,
fact by fact, what that replacement added, removed or changed.
"""

from __future__ import annotations

import json
from typing import Any

from ...storage.contract import Event

__all__ = ["Event", "decode_event", "event_row", "replacement_events"]


def _fact_event(kind: str, change: str, before: dict | None, after: dict | None) -> Event:
    fact = after or before or {}
    details = {"change": change}
    if before and after and before.get("category") != after.get("category"):
        details |= {"old_category": before.get("category"), "category": after.get("category")}
    return Event(
        kind,
        fact.get("id"),
        None,
        (before or {}).get("content"),
        (after or {}).get("content"),
        (before or {}).get("confidence"),
        (after or {}).get("confidence"),
        details,
    )


def replacement_events(old: dict[str, Any], new: dict[str, Any], kind: str) -> list[Event]:
    """One event per fact added, removed or changed, and per section changed."""
    old_by_id = {f.get("id"): f for f in old.get("facts", [])}
    new_by_id = {f.get("id"): f for f in new.get("facts", [])}
    events = [
        _fact_event(kind, "remove", fact, None)
        for fact_id, fact in old_by_id.items()
        if fact_id not in new_by_id
    ]
    for fact_id, fact in new_by_id.items():
        before = old_by_id.get(fact_id)
        if before is None:
            events.append(_fact_event(kind, "add", None, fact))
        elif before != fact:
            events.append(_fact_event(kind, "update", before, fact))
    for group in ("user", "history"):
        old_group, new_group = old.get(group) or {}, new.get(group) or {}
        for name in sorted(set(old_group) | set(new_group)):
            before_text = (old_group.get(name) or {}).get("summary", "")
            after_text = (new_group.get(name) or {}).get("summary", "")
            if before_text != after_text:
                events.append(
                    Event(
                        kind,
                        None,
                        f"{group}.{name}",
                        before_text,
                        after_text,
                        details={"change": "section"},
                    )
                )
    return events


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


def decode_event(row: dict[str, Any]) -> dict[str, Any]:
    """A ``memory_events`` row with its JSON details decoded."""
    return {**row, "details": json.loads(row["details"]) if row.get("details") else {}}
