"""Who made a change to memory: a teammate (the role the team's server wrote) or this
home's user (``you``), for the views: ``%memory history``, the facts table, the inspector.

A teammate's change is journaled here with ``person`` in its event's details
(``updates/team_changes.py``); every other change was made on this home.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .readside.change_events import details_of

YOU = "you"


def changed_by(event: Mapping[str, Any]) -> str:
    """Who made ``event`` (a ``memory_events`` row, its details decoded or not)."""
    details = details_of(event)
    person = details.get("person") if isinstance(details, Mapping) else None
    return person if isinstance(person, str) and person else YOU


def added_by(fact: Mapping[str, Any]) -> str:
    """Who added ``fact``: the teammate it came from, else this home's user."""
    person = fact.get("person")
    return person if isinstance(person, str) and person else YOU


def last_changed_by(events: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """``{fact id: who last changed it}`` from ``events`` (oldest first): its edits only
    (an addition says who added it, ``added_by``)."""
    found: dict[str, str] = {}
    for event in events:
        if event.get("kind") == "update" and event.get("fact_id"):
            found[str(event["fact_id"])] = changed_by(event)
    return found
