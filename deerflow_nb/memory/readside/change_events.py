"""Memory events read back: a ``memory_events`` row decoded, and what a whole-memory
replacement changed, fact by fact and section by section (a rollback, import or reset, and
``MemoryReader.diff`` between two versions).

``updates/events.py`` turns an event into the row the ledger journals.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from ...projects import fact_project
from ...storage.contract import PROJECTS_GROUP, Event

# ``memory_events.project`` of an event about the user's own fact or section (a project's
# is its name; NULL: journaled before the column, its owner told when read).
USER_OWNER = ""


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


def decode_event(row: dict[str, Any]) -> dict[str, Any]:
    """A ``memory_events`` row with its JSON details decoded."""
    return {**row, "details": json.loads(row["details"]) if row.get("details") else {}}


def event_owner(
    section: str | None,
    fact_id: str | None,
    details: Any,
    facts: Mapping[str, Mapping[str, Any]],
) -> str | None:
    """Whose an event is (None: the user's), so a project's history is walled off as its
    facts are: a ``projects.NAME`` section's project, else its fact's in ``facts`` (by id:
    where the fact is after the change), else the project a move named in its details;
    anything else (a user section, a fact no longer known) is the user's."""
    if section:
        group, _, name = section.partition(".")
        return name if group == PROJECTS_GROUP and name else None
    fact = facts.get(fact_id) if fact_id else None
    if fact is not None:
        return fact_project(fact)
    moved = details.get("project") if isinstance(details, Mapping) else None
    return moved if isinstance(moved, str) and moved else None


def details_of(event: Mapping[str, Any]) -> Any:
    """An event's ``details``, decoded when it is a row's JSON text (None if it does not
    parse)."""
    details = event.get("details")
    if isinstance(details, str):
        try:
            return json.loads(details)
        except ValueError:
            return None
    return details


def with_owner(
    row: dict[str, Any], facts: Callable[[], Mapping[str, Mapping[str, Any]]]
) -> dict[str, Any]:
    """A ``memory_events`` row (details decoded or not) with its ``project`` (None: the
    user's): as stamped when journaled, else told by ``event_owner`` from the facts now
    (``facts`` is asked only then, for a row from before the column)."""
    stamped = row.get("project")
    if stamped is not None:
        return {**row, "project": stamped or None}
    details = details_of(row)
    needs_facts = not row.get("section") and row.get("fact_id")
    known = facts() if needs_facts else {}
    return {**row, "project": event_owner(row.get("section"), row.get("fact_id"), details, known)}


def version_diff(
    old: dict[str, Any], new: dict[str, Any], v1: int, v2: int | None
) -> dict[str, Any]:
    """Facts added, removed and changed from version ``v1``'s document ``old`` to ``new``
    (version ``v2``, None: now), and the sections rewritten."""
    events = replacement_events(old, new, "diff")
    old_by_id = {f.get("id"): f for f in old.get("facts", [])}
    new_by_id = {f.get("id"): f for f in new.get("facts", [])}
    return {
        "from": v1,
        "to": v2,
        "added": [new_by_id[e.fact_id] for e in events if e.details.get("change") == "add"],
        "removed": [old_by_id[e.fact_id] for e in events if e.details.get("change") == "remove"],
        "changed": [
            {"id": e.fact_id, "old": old_by_id[e.fact_id], "new": new_by_id[e.fact_id]}
            for e in events
            if e.details.get("change") == "update"
        ],
        "sections": {
            e.section: {"old": e.old_content, "new": e.new_content} for e in events if e.section
        },
    }
