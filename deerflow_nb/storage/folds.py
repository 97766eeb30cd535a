"""The ``memory_folds`` rows: one per fold or failed fold, written and read back.

Reads take any connection (the journal's, or the inspector's read-only one), and find
nothing on a journal from before ``memory_folds`` existed; what a report holds is
``memory/folding/fold_log.py``'s job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .db import insert_rows

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


def latest(db: Connection, limit: int) -> list[dict[str, Any]]:
    """The ``limit`` newest rows, newest first."""
    if not _exists(db):
        return []
    sql = f"SELECT {', '.join(COLUMNS)} FROM memory_folds ORDER BY id DESC LIMIT ?"
    return [dict(zip(COLUMNS, row, strict=True)) for row in db.execute(sql, [limit])]


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
