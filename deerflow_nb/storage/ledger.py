"""The memory ledger's rows: versions, events, pending changes and memory settings.

Tables ``memory_versions``, ``memory_events``, ``pending_changes`` and ``memory_settings``,
rows only: what a version holds (snapshot or delta), what an event or a pending change
means, is ``memory/``'s. Every function takes the connection to use: the journal's, a
transaction's, or any read-only ``sqlite3`` or sqlite-utils connection for the reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .db import has_table, insert_rows

_VERSION_COLUMNS = "id, created_at, reason, source, fact_count"


# -- memory_versions -------------------------------------------------------------------------
def stored_size_sql() -> str:
    """SQL for one version row's stored size in characters (full or delta)."""
    return "length(COALESCE(snapshot, delta))"


def insert_version(db: Any, row: dict[str, Any]) -> int:
    return int(insert_rows(db, "memory_versions", [row]) or 0)


def newest_version(db: Any) -> int | None:
    value = db.execute("SELECT MAX(id) FROM memory_versions").fetchone()[0]
    return None if value is None else int(value)


def deltas_since_full(db: Any) -> int:
    """How many versions follow the newest full snapshot."""
    return int(
        db.execute(
            "SELECT COUNT(*) FROM memory_versions WHERE id > "
            "(SELECT COALESCE(MAX(id), 0) FROM memory_versions WHERE snapshot IS NOT NULL)"
        ).fetchone()[0]
    )


def version_exists(db: Any, version: int) -> bool:
    sql = "SELECT 1 FROM memory_versions WHERE id = ?"
    return db.execute(sql, [version]).fetchone() is not None


def full_snapshot_at_or_before(db: Any, version: int) -> tuple[int, str] | None:
    """The newest full snapshot at or before ``version``: its id and JSON text."""
    row = db.execute(
        "SELECT id, snapshot FROM memory_versions WHERE id <= ? AND snapshot IS NOT NULL "
        "ORDER BY id DESC LIMIT 1",
        [version],
    ).fetchone()
    return None if row is None else (int(row[0]), row[1])


def deltas_between(db: Any, after: int, through: int) -> Iterator[str | None]:
    """The delta texts of the versions after ``after`` up to ``through``, in order."""
    rows = db.execute(
        "SELECT delta FROM memory_versions WHERE id > ? AND id <= ? ORDER BY id",
        [after, through],
    )
    for (delta,) in rows:
        yield delta


def versions(db: Any) -> list[dict[str, Any]]:
    """Every version's row without its snapshot or delta, oldest first."""
    return list(db["memory_versions"].rows_where(select=_VERSION_COLUMNS, order_by="id"))


def version_sizes(db: Any) -> list[dict[str, Any]]:
    """Every version's row with its stored size in characters (``chars``) instead of its
    snapshot or delta, oldest first: sizes without loading the snapshots."""
    select = f"id, created_at, reason, fact_count, {stored_size_sql()} AS chars"
    return list(db["memory_versions"].rows_where(select=select, order_by="id"))


def last_version(db: Any, reasons: tuple[str, ...]) -> dict[str, Any] | None:
    """The newest version row made for one of ``reasons`` (without its snapshot)."""
    marks = ", ".join("?" * len(reasons))
    rows = list(
        db["memory_versions"].rows_where(
            f"reason IN ({marks})",
            list(reasons),
            select=_VERSION_COLUMNS,
            order_by="id desc",
            limit=1,
        )
    )
    return rows[0] if rows else None


def unwritten_version(db: Any) -> int | None:
    """The newest version journaled but not yet written to memory.json."""
    row = db.execute(
        "SELECT id FROM memory_versions WHERE written = 0 ORDER BY id DESC LIMIT 1"
    ).fetchone()
    return None if row is None else int(row[0])


def mark_written(db: Any) -> None:
    db.execute("UPDATE memory_versions SET written = 1 WHERE written = 0")


def last_version_at(db: Any, reasons: tuple[str, ...]) -> str | None:
    """When the newest version made for one of ``reasons`` was recorded."""
    if not has_table(db, "memory_versions"):
        return None
    marks = ", ".join("?" * len(reasons))
    sql = f"SELECT MAX(created_at) FROM memory_versions WHERE reason IN ({marks})"
    return db.execute(sql, list(reasons)).fetchone()[0]


# -- memory_events ---------------------------------------------------------------------------
def insert_events(db: Any, rows: list[dict[str, Any]]) -> None:
    insert_rows(db, "memory_events", rows)


def events(
    db: Any, limit: int, fact_id: str | None = None, before: int | None = None
) -> list[dict[str, Any]]:
    """Event rows, newest first (only ``fact_id``'s, when given; only those older than
    event ``before``, for the next page of a filtered read)."""
    wheres, args = [], []
    if fact_id:
        wheres, args = ["fact_id = ?"], [fact_id]
    if before is not None:
        wheres.append("id < ?")
        args.append(before)
    where = " AND ".join(wheres) or None
    return list(
        db["memory_events"].rows_where(where, args or None, order_by="id desc", limit=limit)
    )


def version_events(db: Any, version: int) -> list[dict[str, Any]]:
    """The event rows journaled with ``version``, oldest first."""
    return list(db["memory_events"].rows_where("version_id = ?", [version], order_by="id"))


def all_events(db: Any) -> list[dict[str, Any]]:
    """Every event row, oldest first."""
    return list(db["memory_events"].rows_where(order_by="id"))


def fact_events(db: Any, fact_id: str) -> list[dict[str, Any]]:
    """One fact's event rows, oldest first."""
    return list(db["memory_events"].rows_where("fact_id = ?", [fact_id], order_by="id"))


# -- pending_changes -------------------------------------------------------------------------
def insert_pending(db: Any, *, created_at: str, source: str, diff: str) -> int:
    row = {"created_at": created_at, "source": source, "diff": diff, "status": "pending"}
    return int(insert_rows(db, "pending_changes", [row]) or 0)


def pending(db: Any) -> list[dict[str, Any]]:
    """The rows still pending, oldest first (their diffs as JSON text)."""
    return list(db["pending_changes"].rows_where("status = 'pending'", order_by="id"))


def pending_count(db: Any) -> int:
    """How many rows are still pending (0 on a journal from before review mode)."""
    if not has_table(db, "pending_changes"):
        return 0
    return int(db["pending_changes"].count_where("status = 'pending'"))


def is_pending(db: Any, change_id: int) -> bool:
    sql = "SELECT status FROM pending_changes WHERE id = ?"
    row = db.execute(sql, [change_id]).fetchone()
    return row is not None and row[0] == "pending"


def change(db: Any, change_id: int) -> dict[str, Any] | None:
    """One pending change's row, whatever its status (None if there is no such change)."""
    rows = list(db["pending_changes"].rows_where("id = ?", [change_id]))
    return rows[0] if rows else None


def part_statuses(db: Any, change_id: int) -> list[str]:
    """The statuses of the parts split off change ``change_id`` by item decisions (the
    diff's ``partOf``), oldest first: a change rejected after some items were approved."""
    sql = (
        "SELECT status FROM pending_changes WHERE json_valid(diff) "
        "AND json_extract(diff, '$.partOf') = ? ORDER BY id"
    )
    return [row[0] for row in db.execute(sql, [change_id]).fetchall()]


def narrow_pending(db: Any, change_id: int, diff: str, was: str) -> bool:
    """Replace a still pending change's diff ``was`` by what is left of it after a partial
    decision (compare-and-set); False if it was decided or narrowed meanwhile."""
    cursor = db.execute(
        "UPDATE pending_changes SET diff = ? WHERE id = ? AND status = 'pending' AND diff = ?",
        [diff, change_id, was],
    )
    return cursor.rowcount > 0


def decide(db: Any, change_id: int, status: str, at: str) -> bool:
    """Mark a still pending change ``status``; False if it was decided already."""
    cursor = db.execute(
        "UPDATE pending_changes SET status = ?, decided_at = ? WHERE id = ? AND status = 'pending'",
        [status, at, change_id],
    )
    return cursor.rowcount > 0


# -- memory_settings -------------------------------------------------------------------------
def setting(db: Any, key: str) -> str | None:
    """One setting's value, None in an older journal read as it is (no settings table).
    Read on every commit: plain SQL, not sqlite-utils' table lookup (three queries)."""
    if not has_table(db, "memory_settings"):
        return None
    row = db.execute("SELECT value FROM memory_settings WHERE key = ?", [key]).fetchone()
    return row[0] if row else None


def put_setting(db: Any, key: str, value: str) -> None:
    db["memory_settings"].upsert({"key": key, "value": value}, pk="key")
