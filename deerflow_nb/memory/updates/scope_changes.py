"""Changes of scope, as diff keys the gate passes to the updater like any other change.

``renameProject`` (``{"from", "to"}``) moves a project's facts and summary to a new name
(into an existing project, the facts join it and its own summary is kept);
``forgetProjects`` (``[name]``) drops the projects' summaries (their facts go through
``factsToRemove`` in the same change). Facts moved by hand between scopes are edits
(``FactEdit.scope``, ``edits.apply_edit``).
"""

from __future__ import annotations

from typing import Any

from ...projects import fact_project
from ..scopes import PROJECTS_KEY, stamp
from .events import Event


def apply_scope_changes(out: dict[str, Any], diff: dict[str, Any], now: str) -> list[Event]:
    """The renames and project forgets of ``diff`` applied to ``out`` (changed in place)."""
    events: list[Event] = []
    projects = dict(out.get(PROJECTS_KEY) or {})
    rename = diff.get("renameProject")
    if isinstance(rename, dict) and rename.get("from") and rename.get("to"):
        old, new = str(rename["from"]), str(rename["to"])
        for i, fact in enumerate(out["facts"]):
            if fact_project(fact) == old:
                fact = out["facts"][i] = dict(fact)  # the document read is never changed
                stamp(fact, new)
                fact["updatedAt"] = now
                events.append(
                    Event(
                        "update",
                        fact.get("id"),
                        old_content=fact.get("content"),
                        new_content=fact.get("content"),
                        details={
                            "category": fact.get("category"),
                            "project": new,
                            "old_project": old,
                        },
                    )
                )
        if old in projects:
            entry = projects.pop(old)
            if not (projects.get(new) or {}).get("summary"):
                projects[new] = entry
            events.append(
                Event(
                    "section",
                    section=f"projects.{old}",
                    old_content=str(entry.get("summary", "")),
                    new_content="",
                )
            )
    for name in diff.get("forgetProjects") or []:
        entry = projects.pop(str(name), None)
        if entry:
            events.append(
                Event(
                    "section",
                    section=f"projects.{name}",
                    old_content=str(entry.get("summary", "")),
                    new_content="",
                )
            )
    if PROJECTS_KEY in out or projects:
        out[PROJECTS_KEY] = projects
    return events
