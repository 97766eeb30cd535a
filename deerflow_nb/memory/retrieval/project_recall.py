"""Recall within a project: the journal search (``recall.py``) kept to one project's threads.

Each hit says which project its thread belongs to (``project``). Threads journaled before
projects have none: like the facts of that time, they are shared by every project. The
search itself is ``recall.search``'s, asked for a deeper pool so a project with few hits
among many still fills ``k``.
"""

from __future__ import annotations

from typing import Any

from ...storage.journal import Journal
from ..scopes import EVERY_PROJECT

POOL_FACTOR = 8  # hits asked of the whole journal for each one kept in the project


def recall_in(
    journal: Journal,
    query: str,
    k: int,
    thread: str | None,
    project: str | None,
    embedder: Any = None,
    *,
    relevant_only: bool = True,
) -> list[dict[str, Any]]:
    """The ``k`` best hits for ``query`` in ``project``'s threads and those from before
    projects (``EVERY_PROJECT`` or None, a memory no notebook opened: every thread), each
    with its ``project``."""
    from .recall import search

    whole = project in (EVERY_PROJECT, None) or thread is not None
    pool = k if whole else max(k * POOL_FACTOR, 50)
    hits = search(
        journal, query, pool, thread=thread, embedder=embedder, relevant_only=relevant_only
    )
    owners: dict[str, str | None] = {}  # thread -> project, read once each
    kept = []
    for hit in hits:
        name = hit["thread"]
        if name not in owners:
            owners[name] = journal.thread_project(name)
        hit = {**hit, "project": owners[name]}
        if whole or hit["project"] in (None, project):
            kept.append(hit)
        if len(kept) == k:
            break
    return kept
