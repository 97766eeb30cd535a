"""Recall within a project: the journal search (``recall.py``) kept to one project's threads.

Each hit says which project its thread belongs to (``project``). Threads journaled before
projects have none: like the facts of that time, they are shared by every project. A
``thread`` named within a project is that project's thread of the name
(``Journal.thread_for``), and its hits are kept to the project as well: another project's
thread is never read from here. The
search itself is ``recall.search``'s, told which threads are in scope before it collapses
restatements into statements.
"""

from __future__ import annotations

from typing import Any

from ...storage.journal import Journal
from ..scopes import Scope


def recall_in(
    journal: Journal,
    query: str,
    k: int,
    thread: str | None,
    scope: Scope,
    embedder: Any = None,
    *,
    relevant_only: bool = True,
) -> list[dict[str, Any]]:
    """The ``k`` best hits for ``query`` in the threads of ``scope``'s projects and those
    from before projects (every thread for every project's scope, or the user's alone, a
    memory no notebook opened), each with its ``project``; only in the project's thread
    named ``thread`` when given (a scope of one project)."""
    from ...projects import thread_name
    from ...scrub import encodable
    from .recall import search

    project = scope.project
    whole = scope.every or not scope.projects
    if thread is not None and project is None:
        thread = encodable(thread)  # an id as it is, but one SQLite can bind
    elif thread is not None:  # a thread from before projects is everyone's
        name = thread_name(thread)
        row = journal.thread(name)
        thread = name if row and row.get("project") is None else journal.thread_for(name, project)
    owners: dict[str, str | None] = {}  # thread -> project, read once each

    def owner(name: str) -> str | None:
        if name not in owners:
            owners[name] = journal.thread_project(name)
        return owners[name]

    hits = search(
        journal,
        query,
        k,
        thread=thread,
        embedder=embedder,
        relevant_only=relevant_only,
        within=None if whole else (lambda name: owner(name) in (None, *scope.projects)),
    )
    return [{**hit, "project": owner(hit["thread"])} for hit in hits]
