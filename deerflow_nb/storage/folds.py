"""The ``memory_folds`` rows: one per fold or failed fold, written and read back.

Reads take any connection (the journal's, or the inspector's read-only one), and find
nothing on a journal from before ``memory_folds`` existed; what a report holds is
``memory/folding/fold_log.py``'s job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .db import has_table, insert_rows

if TYPE_CHECKING:
    import sqlite_utils

    from .db import Connection

COLUMNS = ("id", "ts", "source", "outcome", "version_id", "pending_id", "report", "error")


def insert(db: sqlite_utils.Database, row: dict[str, Any]) -> int:
    """Inside the caller's transaction: one fold's row; its id."""
    return int(insert_rows(db, "memory_folds", [row]) or 0)


def _exists(db: Connection) -> bool:
    sql = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'memory_folds'"
    return db.execute(sql).fetchone() is not None


def latest(db: Connection, limit: int, before: int | None = None) -> list[dict[str, Any]]:
    """The ``limit`` newest rows (older than fold ``before``, for the next page of a read
    a scope narrows), newest first, each with ``thread_project``: the project of the thread
    it folded (``''`` for a thread from before projects), None when its source names no
    thread (``Memory.apply``'s)."""
    if not _exists(db):
        return []
    threads = has_table(db, "threads")
    project = "COALESCE(t.project, '')" if threads and _threads_have_projects(db) else "''"
    joined = "LEFT JOIN threads t ON t.id = f.source" if threads else ""
    known = "t.id IS NOT NULL" if threads else "0"
    sql = (
        f"SELECT {', '.join('f.' + c for c in COLUMNS)},"
        f" CASE WHEN {known} THEN {project} END FROM memory_folds f {joined}"
        f" {'WHERE f.id < ?' if before is not None else ''} ORDER BY f.id DESC LIMIT ?"
    )
    names = (*COLUMNS, "thread_project")
    args = [limit] if before is None else [before, limit]
    return [dict(zip(names, row, strict=True)) for row in db.execute(sql, args)]


def _threads_have_projects(db: Connection) -> bool:
    """Whether ``threads`` has its ``project`` column (a journal from before may not)."""
    return any(row[1] == "project" for row in db.execute("PRAGMA table_info(threads)"))


def trailing(db: Connection, outcome: str) -> int:
    """How many rows with ``outcome`` follow the newest row with another outcome."""
    if not _exists(db):
        return 0
    row = db.execute(
        "SELECT COUNT(*) FROM memory_folds WHERE outcome = ? AND id > "
        "(SELECT COALESCE(MAX(id), 0) FROM memory_folds WHERE outcome != ?)",
        [outcome, outcome],
    ).fetchone()
    return int(row[0])
