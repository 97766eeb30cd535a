"""Facts with a scope: the user's own (shared by every project) or one project's.

A project fact carries ``scope: "project"`` and ``project: NAME`` in memory.json; a fact
without them is the user's, a plain DeerFlow fact, so DeerFlow reads the user's facts as
before and a memory from before projects opens with every fact in the user scope. Each
project's short context summary lives under the extra top-level key ``projects``
(``{NAME: {"summary", "updatedAt"}}``), which DeerFlow ignores.

What reads memory for a project filters first (``visible``) and ranks after: the facts of
another project never reach the ranking, so they can never be injected or found.
"""

from __future__ import annotations

from typing import Any

from ..projects import DEFAULT_PROJECT, PROJECT_SCOPE, fact_project, in_scope

PROJECTS_KEY = "projects"  # memory.json's extra key: each project's context summary
EVERY_PROJECT = "*"  # ``visible``'s "no filter": search and recall with --all
SCOPED = "_scopedFor"  # set on ``visible``'s result (never written): already filtered


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
    return [i for i, f in enumerate(facts) if fact_project(f) in grown]


def visible(data: dict[str, Any], project: str | None) -> dict[str, Any]:
    """``data`` with only the facts ``project`` may see (``EVERY_PROJECT``: all of them),
    and its project summary as ``projectContext``; the input is not changed."""
    if project == EVERY_PROJECT or SCOPED in data:
        return data
    facts = data.get("facts") or []
    plain = not any(isinstance(f, dict) and f.get("scope") == PROJECT_SCOPE for f in facts)
    if plain and "projectContext" not in data and not (project and project_summary(data, project)):
        return data  # DeerFlow's memory: every fact the user's, nothing to filter
    out = dict(data)
    out[SCOPED] = project
    out["facts"] = [f for f in facts if isinstance(f, dict) and in_scope(f, project)]
    summary = project_summary(data, project) if project else ""
    if summary:
        out["projectContext"] = {"name": project, "summary": summary}
    else:
        out.pop("projectContext", None)
    return out


def project_summary(data: dict[str, Any], project: str) -> str:
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
