"""Facts with a scope: the user's own (shared by every project) or one project's.

A project fact carries ``scope: "project"`` and ``project: NAME`` in memory.json; a fact
without them is the user's, a plain DeerFlow fact, so DeerFlow reads the user's facts as
before and a memory from before projects opens with every fact in the user scope. Each
project's short context summary lives under the extra top-level key ``projects``
(``{NAME: {"summary", "updatedAt"}}``), which DeerFlow ignores.

Every read and every change names a ``Scope``; ``Scope.sees`` is the one rule of what it
sees (``projects.fact_project`` says whose a fact is). What reads memory for a scope takes
a ``View`` (``view``) first and ranks after: the facts of another project never reach
the ranking, so they can never be injected or found.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from ..projects import DEFAULT_PROJECT, PROJECT_SCOPE, fact_project, project_name
from ..storage.contract import Scope

PROJECTS_KEY = "projects"  # memory.json's extra key: each project's context summary


USER = Scope()  # the user's own facts: a turn outside any project
ALL_PROJECTS = Scope(every=True)  # every fact: only when a user asked (``--all``)


def asked(project: str | None, everywhere: bool = False) -> Scope:
    """The scope a read's arguments name: every project (a user's ``--all``), else the
    user's facts and ``project``'s, its name normalised (None: the user's only)."""
    if everywhere:
        return ALL_PROJECTS
    return Scope.of(project_name(project)) if project else USER


@dataclass(frozen=True)
class View:
    """One revision of memory.json as a scope sees it, in the document's own shape (what
    the ranking and the block read): ``data`` holds only the facts ``scope`` sees (and its
    project's summary as ``projectContext``); never mutated. ``revision`` names the stored
    document (None: not known), so ranking caches by it. (The store contract's typed value
    of the same is ``storage.contract.Snapshot``.)"""

    data: Mapping[str, Any]
    scope: Scope
    revision: Hashable | None = None

    @property
    def facts(self) -> list[dict[str, Any]]:
        return list(self.data.get("facts") or [])

    @property
    def key(self) -> Hashable | None:
        """What names these facts for a cache: the revision and the scope, or None."""
        return None if self.revision is None else (self.revision, self.scope)


def candidate_owner(candidate: dict[str, Any], project: str | None) -> str | None:
    """The project a proposed fact goes to: its own ``project``, else the change's (a fold's
    thread's), for an item labelled ``scope: project``; None (the user's) otherwise."""
    if candidate.get("scope") != PROJECT_SCOPE:
        return None
    named = candidate.get("project")
    return named if isinstance(named, str) and named else (project or DEFAULT_PROJECT)


def stamp(fact: dict[str, Any], owner: str | None) -> dict[str, Any]:
    """``fact`` placed in ``owner``'s scope (None: the user's, the keys removed)."""
    if owner is None:
        fact.pop("scope", None)
        fact.pop("project", None)
    else:
        fact["scope"], fact["project"] = PROJECT_SCOPE, owner
    return fact


def evictable(facts: list[dict[str, Any]], grown: set[str | None]) -> list[int]:
    """The positions eviction may pick: the facts of the scopes a change added to, so a busy
    project never evicts the user's profile (nor another project's facts)."""
    scope = Scope(frozenset(p for p in grown if p), user=None in grown)
    return [i for i, f in enumerate(facts) if scope.sees(f)]


def view(data: Mapping[str, Any], scope: Scope, revision: Hashable | None = None) -> View:
    """``data`` as ``scope`` sees it (``Scope.sees``), with its project's summary as
    ``projectContext``; the input is not changed (nor copied when nothing is to filter)."""
    facts = data.get("facts") or []
    project = scope.project
    summary = project_summary(data, project) if project else ""
    plain = not any(isinstance(f, dict) and f.get("scope") == PROJECT_SCOPE for f in facts)
    if scope.every or (plain and scope.user and "projectContext" not in data and not summary):
        return View(data, scope, revision)  # every fact seen: nothing to filter
    out = dict(data)
    out["facts"] = [f for f in facts if scope.sees(f)]
    if summary:
        out["projectContext"] = {"name": project, "summary": summary}
    else:
        out.pop("projectContext", None)
    return View(out, scope, revision)


class Views:
    """One home's latest views by (revision, scope): a turn on an unchanged memory reuses
    its scope's view instead of scanning every fact again (10 ms at 10,000 facts)."""

    def __init__(self, size: int = 8) -> None:
        self._size = size
        self._kept: dict[tuple[Hashable, Scope], View] = {}
        self._lock = threading.Lock()

    def of(self, data: Mapping[str, Any], scope: Scope, revision: Hashable | None) -> View:
        """``view(data, scope, revision)``, kept while ``revision`` names ``data``."""
        if revision is None:
            return view(data, scope, revision)
        key = (revision, scope)
        with self._lock:
            found = self._kept.get(key)
        if found is not None:
            return found
        found = view(data, scope, revision)
        with self._lock:
            if len(self._kept) >= self._size:
                self._kept.pop(next(iter(self._kept)))
            self._kept[key] = found
        return found


def seen(memory: Mapping[str, Any] | View | None) -> View:
    """``memory`` as a view: a bare memory.json dict (DeerFlow's) in the user's scope."""
    if isinstance(memory, View):
        return memory
    return view(memory if isinstance(memory, Mapping) else {}, USER)


def project_summary(data: Mapping[str, Any], project: str) -> str:
    """The project's context summary ("" when it has none)."""
    entry = (data.get(PROJECTS_KEY) or {}).get(project)
    summary = entry.get("summary") if isinstance(entry, dict) else None
    return summary if isinstance(summary, str) else ""


def project_names(data: dict[str, Any]) -> set[str]:
    """Every project memory.json knows: those with facts or a summary."""
    names = {p for f in data.get("facts") or [] if isinstance(f, dict) and (p := fact_project(f))}
    return names | {str(k) for k in data.get(PROJECTS_KEY) or {}}


def pin_projects(diff: dict[str, Any] | None, project: str | None) -> dict[str, Any] | None:
    """``diff`` with the active ``project`` written into each project item (``newFacts``
    labelled ``scope: project``, ``projectContext``), so a change held for review applies
    to the project it came from, whichever notebook approves it."""
    if not diff:
        return diff
    out = dict(diff)
    facts = out.get("newFacts")
    if isinstance(facts, list):
        out["newFacts"] = [
            {**f, "project": owner}
            if isinstance(f, dict) and (owner := candidate_owner(f, project))
            else f
            for f in facts
        ]
    context = out.get("projectContext")
    if isinstance(context, dict) and not context.get("project"):
        out["projectContext"] = {**context, "project": project or DEFAULT_PROJECT}
    return out
