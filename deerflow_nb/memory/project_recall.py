"""Recall within a project: the journal search (``recall.py``) kept to one project's threads.

Each hit says which project its thread belongs to (``project``: threads journaled before
projects belong to ``default``). The search itself is ``recall.search``'s, asked for a
deeper pool so a project with few hits among many still fills ``k``.
"""

from __future__ import annotations

from typing import Any

from ..projects import DEFAULT_PROJECT
from ..storage.journal import Journal
from .scopes import EVERY_PROJECT

POOL_FACTOR = 8  # hits asked of the whole journal for each one kept in the project


def recall_in(
    journal: Journal,
    query: str,
    k: int,
    thread: str | None,
    project: str | None,
    embedder: Any = None,
) -> list[dict[str, Any]]:
    """The ``k`` best hits for ``query`` in ``project``'s threads (``EVERY_PROJECT``: all;
    None: ``default``'s), each with its ``project``."""
    from .recall import search

    whole = project == EVERY_PROJECT or thread is not None
    pool = k if whole else max(k * POOL_FACTOR, 50)
    hits = search(journal, query, pool, thread=thread, embedder=embedder)
    owners: dict[str, str] = {}  # thread -> project, read once each
    kept = []
    for hit in hits:
        name = hit["thread"]
        if name not in owners:
            owners[name] = journal.thread_project(name) or DEFAULT_PROJECT
        hit = {**hit, "project": owners[name]}
        if whole or hit["project"] == (project or DEFAULT_PROJECT):
            kept.append(hit)
        if len(kept) == k:
            break
    return kept
