"""A shared project's part of a committed change, and a teammate's part applied here.

What leaves the home is never a fold's change set as it came (it may hold the user's own
facts beside the project's) but its effect, fact by fact, on the facts of the shared
projects only (``shared_effect``): facts added (with their id, text, category,
confidence, time and who added them), removed, edited, and the project's summary. A
user's own facts have no project, so nothing here can ever select one.

``apply_team`` is that effect applied to this home's memory, called by the gate for a
diff marked ``team`` (so validation, review and the wipe guard see it as any change):
facts keep the ids they have on the team (a later removal or edit names them), their
``addedBy`` and the teammate (``person``) who sent them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from typing import Any, Protocol

from ...projects import PROJECT_SCOPE, fact_project
from ...schema.changes import ChangeSet
from ...schema.sections import MAX_SUMMARY_CHARS
from ...storage.db import now_iso
from ..store import CATEGORIES
from .events import Event
from .updater import UpdateResult, _project_context, new_fact_id, sanitize_text

TEAM = "team"  # the diff key of a teammate's change: {"project", "person", "origin", "id", "at"}
FACT_ID = re.compile(r"[\w.\-]{1,64}")  # a team id or a role: one plain word
KINDS = ("add", "remove", "update", "section")
CONFLICT = "conflict"  # a held diff's mark: its approval is this home's choice, sent to the team
FACT_KEYS = ("content", "category", "confidence", "createdAt", "addedBy", "person")


class Shares(Protocol):
    """One commit's way to the team: ``before`` and ``after`` see the facts on each side of
    the change, ``queue`` puts the shared projects' part in the outbox in the commit's
    transaction."""

    def before(self, data: dict[str, Any]) -> None: ...

    def after(self, result: UpdateResult) -> None: ...

    def queue(self, db: Any) -> None: ...


Tap = Callable[[ChangeSet], Shares | None]  # None: nothing of this change is shared


def team_id(fact: dict[str, Any]) -> str:
    """The id the team knows ``fact`` by (its own, unless that id was taken here)."""
    return str(fact.get("sharedId") or fact.get("id"))


def public_fact(fact: dict[str, Any]) -> dict[str, Any]:
    """What the team sees of a project fact: no local bookkeeping (source, use)."""
    out = {key: fact[key] for key in FACT_KEYS if fact.get(key) is not None}
    return {"id": team_id(fact), **out}


def shared_effect(
    before: dict[str, dict[str, Any]], result: UpdateResult, shared: Collection[str]
) -> dict[str, dict[str, Any]]:
    """``{project: diff}``: what ``result`` did to the facts of the ``shared`` projects,
    ``before`` being the facts it started from (by id). Evictions stay local (each home
    has its own ``max_facts``); a fact moved in or out of a project is added or removed."""
    after = {f.get("id"): f for f in result.data.get("facts") or [] if isinstance(f, dict)}
    effect: dict[str, dict[str, Any]] = {}

    def part(project: str | None) -> dict[str, Any] | None:
        return effect.setdefault(project, {}) if project in shared else None

    for event in result.events:
        kind = event.kind if event.kind in KINDS else event.details.get("change")
        old, new = before.get(event.fact_id), after.get(event.fact_id)
        if kind == "section" and event.section and event.section.startswith("projects."):
            name = event.section.removeprefix("projects.")
            if (diff := part(name)) is not None:
                diff["projectContext"] = {
                    "summary": event.new_content or "",
                    "shouldUpdate": True,
                    "project": name,
                }
            continue
        was = fact_project(old) if old else None
        now = fact_project(new) if new else None
        moved_out = kind in ("remove", "update") and old and (was != now or new is None)
        if moved_out and (diff := part(was)) is not None:
            diff.setdefault("factsToRemove", []).append(team_id(old))
        if kind in ("add", "update") and new and (was != now or kind == "add"):
            if (diff := part(now)) is not None:
                fact = {**public_fact(new), "scope": PROJECT_SCOPE, "project": now}
                diff.setdefault("newFacts", []).append(fact)
        elif kind == "update" and new and old and (diff := part(now)) is not None:
            edit = {
                k: new[k] for k in ("content", "category", "confidence") if old.get(k) != new.get(k)
            }
            if edit:  # with what it replaced: a receiver tells a later edit from an undo
                was = {"content": old.get("content"), "at": edited_at(old)}
                at = edited_at(new) if new.get("updatedAt") else now_iso()
                diff.setdefault("edits", []).append(
                    {"id": team_id(new), **edit, "at": at, "was": was}
                )
    return {name: diff for name, diff in effect.items() if diff}


def edited_at(fact: dict[str, Any]) -> str:
    """When ``fact``'s text last changed here (its creation when it never did)."""
    return str(fact.get("updatedAt") or fact.get("createdAt") or "")


def hold_conflicts(
    data: dict[str, Any], diff: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, str]]]:
    """A teammate's ``diff`` split for the gate: what applies, what waits for review (its
    edits that would undo a newer edit of the same fact here, with the team marker) and
    why, both texts quoted. An edit made from the text this home still has, or later than
    the text that replaced it here, applies (the later edit wins). The held part is marked
    ``CONFLICT``: approving it is this home's choice between two texts, so it is sent to
    the team (which then converges on it) where a teammate's change applied here is not."""
    if not diff.get("edits"):  # only an edit can undo one
        return diff, {}, []
    marker = diff.get(TEAM) or {}
    project = marker.get("project")
    by_team = {team_id(f): f for f in data.get("facts") or [] if fact_project(f) == project}
    keep, held, why = [], [], []
    for edit in diff.get("edits") or []:
        here = by_team.get(str(edit.get("id"))) if isinstance(edit, dict) else None
        was = edit.get("was") if isinstance(edit, dict) else None
        if here is not None and isinstance(was, dict) and _newer_here(here, edit, was):
            held.append(edit)
        else:
            keep.append(edit)
    for edit in held:
        here = by_team[str(edit["id"])]
        why.append({
            "item": f"edit {here.get('id')}",
            "reason": (
                f"{marker.get('person') or 'a teammate'}'s edit of {here.get('id')} (made "
                f"{edit.get('at') or '?'} from {str(edit['was'].get('content'))!r}) would undo "
                f"a newer one here: theirs {str(edit.get('content'))!r}, yours "
                f"{str(here.get('content'))!r} (edited {edited_at(here)})"
            ),
            "value": str(edit.get("content") or "")[:80],
        })  # fmt: skip
    if not held:
        return diff, {}, []
    return {**diff, "edits": keep}, {TEAM: marker, "edits": held, CONFLICT: True}, why


def _newer_here(here: dict[str, Any], edit: dict[str, Any], was: dict[str, Any]) -> bool:
    """Whether ``here``'s text changed after ``edit``'s base, and after ``edit`` itself."""
    text = here.get("content")
    if text == was.get("content") or text == edit.get("content"):
        return False  # nothing concurrent here, or the same words either way
    return edited_at(here) > str(edit.get("at") or "")


class TeamIndex:
    """``apply_team``'s lookups, kept for the next change set of the same commit while it
    applies to the very list the last one returned (a sync's batch of additions): one
    pass over memory per commit instead of one per change set."""

    def __init__(self) -> None:
        # {project: (the facts list described, its facts by team id, ids, its texts)}
        self.kept: dict[Any, tuple[list[dict[str, Any]], dict[str, Any], set[Any], set[Any]]]
        self.kept = {}

    def lookups(
        self, facts: Any, project: Any
    ) -> tuple[dict[str, dict[str, Any]], set[Any], set[Any]] | None:
        """The kept lookups when they describe this very ``facts`` list, else None."""
        kept = self.kept.get(project)
        return kept[1:] if kept is not None and kept[0] is facts else None


def apply_team(
    data: dict[str, Any],
    diff: dict[str, Any],
    index: TeamIndex | None = None,
) -> UpdateResult:
    """A teammate's change (``diff``, marked ``team``) applied to ``data`` (not changed):
    removals and edits by team id, new facts with their ids (a fact already here is not
    added twice), the project's summary (the gate then keeps memory within ``max_facts``,
    ``Rules.capped``). Only the facts of the change set's project (``diff["team"]["project"]``)
    are touched, whatever its items name: a teammate never reaches the user's own facts
    nor another project's. ``index``: the commit's lookups (``TeamIndex``), if any."""
    out = dict(data)  # copied where changed only: a sync's batch applies many in a row
    given_facts = data.get("facts") or []
    marker = diff.get(TEAM) or {}
    project, person = marker.get("project"), marker.get("person")
    events: list[Event] = []
    adds_only = not diff.get("factsToRemove") and not diff.get("edits")
    kept = index.lookups(given_facts, project) if index is not None and adds_only else None
    # a kept index describes a list of facts only (the last change set's): copied as it is
    facts: list[dict[str, Any]] = (
        list(given_facts) if kept else [f for f in given_facts if isinstance(f, dict)]
    )
    by_team, taken, said = kept if kept is not None else _index(facts, project)
    gone = {str(i) for i in diff.get("factsToRemove") or []}
    for fact in [f for i, f in by_team.items() if i in gone] if gone else []:
        facts.remove(fact)
        events.append(_event("remove", fact, fact.get("content"), None, person))
    for edit in diff.get("edits") or []:
        found = by_team.get(str(edit.get("id"))) if isinstance(edit, dict) else None
        if found is None or not any(f is found for f in facts):
            continue
        fact = by_team[str(edit["id"])] = dict(found)
        facts[next(i for i, f in enumerate(facts) if f is found)] = fact
        old = fact.get("content")
        if isinstance(edit.get("content"), str) and edit["content"].strip():
            fact["content"] = sanitize_text(edit["content"])
        if edit.get("category") in CATEGORIES:
            fact["category"] = edit["category"]
        if isinstance(edit.get("confidence"), (int, float)):
            fact["confidence"] = min(max(float(edit["confidence"]), 0.0), 1.0)
        if fact == found:
            continue  # the same words here already
        if fact["content"] != old:  # when its text changed: the teammate's edit time, or
            made = None if diff.get(CONFLICT) else edit.get("at")  # now: a choice made here
            fact["updatedAt"] = str(made or now_iso())[:40]
        events.append(_event("update", fact, old, fact["content"], person))
    if events:  # removed or edited: the ids and texts left
        _, taken, said = _index(facts, project)
    fresh: list[dict[str, Any]] = []
    for given in diff.get("newFacts") or []:
        fact = _incoming(given, project, person)
        if fact is None or fact["id"] in by_team or fact["content"] in said:
            continue  # a fact already here, or this very text said here too: kept once
        if fact["id"] in taken:  # a fact of this home has that id: the team's is sharedId
            fact["sharedId"], fact["id"] = fact["id"], new_fact_id(taken)
        taken.add(fact["id"])
        said.add(fact["content"])
        facts.append(fact)
        events.append(_event("add", fact, None, fact["content"]))
        fresh.append(fact)
    by_team.update((team_id(f), f) for f in fresh)  # as the next change set's pass finds them
    out["facts"] = facts
    context = diff.get("projectContext")
    if isinstance(context, dict) and project:
        summary = str(context.get("summary") or "")[:MAX_SUMMARY_CHARS]
        context = {"summary": summary, "shouldUpdate": True, "project": project}
    else:
        context = None
    events += _project_context(out, context, None, now_iso())
    if index is not None:  # what the next change set of the commit may start from
        described = facts if events else given_facts
        clean = bool(events) or len(facts) == len(given_facts)  # facts only, nothing else
        index.kept = {project: (described, by_team, taken, said)} if adds_only and clean else {}
    return UpdateResult(out, events) if events else UpdateResult(data, [])


def _incoming(given: Any, project: Any, person: Any) -> dict[str, Any] | None:
    """A teammate's fact as stored here, in ``project``, its text cleaned; None when it
    is not one (no text, or an id that is not a plain word)."""
    if not isinstance(given, dict) or not FACT_ID.fullmatch(str(given.get("id"))):
        return None
    content = sanitize_text(str(given.get("content") or ""))
    if not content or not isinstance(project, str) or not project:
        return None
    confidence = given.get("confidence")
    fact = {
        "id": given["id"][:64],
        "content": content,
        "category": given.get("category") if given.get("category") in CATEGORIES else "context",
        "confidence": min(max(float(confidence), 0.0), 1.0)
        if isinstance(confidence, (int, float))
        else 0.9,
        "createdAt": str(given.get("createdAt") or now_iso()),
        "source": "team",
        "scope": PROJECT_SCOPE,
        "project": project,
    }
    if isinstance(given.get("addedBy"), str):
        fact["addedBy"] = given["addedBy"]
    # who sent it, as the team's server wrote it (``change_sets.person``), never what the
    # change set says of itself: a teammate could name this home's user or another member
    if isinstance(person, str) and FACT_ID.fullmatch(person):
        fact["person"] = person
    return fact


def _index(
    facts: list[dict[str, Any]], project: Any
) -> tuple[dict[str, dict[str, Any]], set[Any], set[Any]]:
    """(``project``'s facts by team id, every fact's id, ``project``'s texts) in one pass."""
    by_team: dict[str, dict[str, Any]] = {}
    taken: set[Any] = set()
    said: set[Any] = set()
    for fact in facts:
        taken.add(fact.get("id"))
        if fact_project(fact) == project:
            by_team[team_id(fact)] = fact
            said.add(fact.get("content"))
    return by_team, taken, said


def _event(kind: str, fact: dict[str, Any], old: Any, new: Any, person: Any = None) -> Event:
    """A teammate's change as journaled here, naming who made it (an addition: the fact's
    ``person``, who sent it)."""
    who = person if isinstance(person, str) and FACT_ID.fullmatch(person) else fact.get("person")
    return Event(
        kind,
        fact_id=fact.get("id"),
        old_content=old,
        new_content=new,
        details={"category": fact.get("category"), "source": "team", "person": who},
    )
