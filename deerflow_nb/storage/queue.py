"""The fold queue's rows: ``memory_queue`` (pending snapshots, leases) and ``memory_threads``.

Rows only: what a due time, a claim or a retry means is ``memory/folding/schedule.py``'s. Every
function takes the connection to use (the journal's, or a transaction's) and imports
nothing beyond the standard library, so ``%load_ext`` can probe the queue cheaply
(``has_pending_folds``) without loading sqlite-utils.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

_NO_CLAIM = "claimed_by = NULL, claimed_until = NULL"
# A fold's lease, in seconds (``memory/folding/schedule.py`` renews it every third of it,
# and says what it means); kept here so a reader can say when a claim really ends.
LEASE_SECONDS = 15.0


def has_pending_folds(path: Path) -> bool:
    """Whether the journal at ``path`` holds queued folds, read with the stdlib only."""
    if not path.exists():
        return False
    try:
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1)) as conn:
            return bool(conn.execute("SELECT 1 FROM memory_queue LIMIT 1").fetchone())
    except sqlite3.Error:
        return False


def put(db: Any, row: dict[str, Any], *, due_at_least: float) -> None:
    """Replace the thread's row with ``row``, and push every pending row's due time back to
    ``due_at_least`` (one debounce for the whole queue)."""
    db.execute(
        "UPDATE memory_queue SET due_at = ? WHERE status = 'pending' AND due_at < ?",
        [due_at_least, due_at_least],
    )
    columns = list(row)  # plain SQL: this runs after every turn (sqlite-utils introspects)
    updates = ", ".join(f"{c} = excluded.{c}" for c in columns if c != "thread_id")
    db.execute(
        f"INSERT INTO memory_queue ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
        f" ON CONFLICT(thread_id) DO UPDATE SET {updates}",
        list(row.values()),
    )


def get(db: Any, thread_id: str) -> dict[str, Any] | None:
    rows = list(db["memory_queue"].rows_where("thread_id = ?", [thread_id]))
    return rows[0] if rows else None


def claim(db: Any, thread_id: str, owner: str, until: float) -> None:
    db["memory_queue"].update(thread_id, {"claimed_by": owner, "claimed_until": until})


def cut_claims(db: Any, latest: float) -> None:
    """End every claim that ends after ``latest`` at ``latest``: no live holder writes one
    further ahead, so it was written by a clock that was ahead (then stepped back), and
    would otherwise hold the row for the whole step. Call inside a transaction."""
    db.execute(
        "UPDATE memory_queue SET claimed_until = ? WHERE claimed_until > ?", [latest, latest]
    )


def claims_after(db: Any, latest: float) -> bool:
    """Whether a claim ends after ``latest`` (one ``cut_claims`` would cut)."""
    sql = "SELECT 1 FROM memory_queue WHERE claimed_until > ? LIMIT 1"
    return db.execute(sql, [latest]).fetchone() is not None


def claim_due(
    db: Any, owner: str, now: float, until: float, *, latest: float | None = None
) -> tuple[str, int] | None:
    """Lease the soonest due pending row with no live claim to ``owner`` until ``until``:
    its thread id and ``last_seq`` (None when no row is free). A claim ending after
    ``latest`` is first cut to end then (``cut_claims``). Call inside a transaction."""
    if latest is not None:
        cut_claims(db, latest)
    row = db.execute(
        "SELECT thread_id, COALESCE(last_seq, 0) FROM memory_queue WHERE status = 'pending'"
        " AND due_at <= ? AND COALESCE(claimed_until, 0) < ? ORDER BY due_at LIMIT 1",
        [now, now],
    ).fetchone()
    if row is None:
        return None
    claim(db, row[0], owner, until)
    return row[0], int(row[1])


def extend(db: Any, thread_id: str, owner: str, now: float, until: float) -> bool:
    """Move ``owner``'s unexpired claim's end to ``until``; False when it has none."""
    cursor = db.execute(
        "UPDATE memory_queue SET claimed_until = ? WHERE thread_id = ? AND claimed_by = ?"
        " AND claimed_until >= ?",
        [until, thread_id, owner, now],
    )
    return cursor.rowcount > 0


def held(db: Any, thread_id: str, owner: str, now: float) -> bool:
    """Whether ``owner`` holds an unexpired claim on the thread's row."""
    sql = "SELECT 1 FROM memory_queue WHERE thread_id = ? AND claimed_by = ? AND claimed_until >= ?"
    return db.execute(sql, [thread_id, owner, now]).fetchone() is not None


def unclaim(db: Any, thread_id: str, owner: str | None = None) -> None:
    """Clear the row's claim (only ``owner``'s, when given)."""
    if owner is None:
        db.execute(f"UPDATE memory_queue SET {_NO_CLAIM} WHERE thread_id = ?", [thread_id])
    else:
        db.execute(
            f"UPDATE memory_queue SET {_NO_CLAIM} WHERE thread_id = ? AND claimed_by = ?",
            [thread_id, owner],
        )


def defer(db: Any, thread_id: str, owner: str, due_at: float) -> None:
    """Clear ``owner``'s claim and make the row due no sooner than ``due_at``; its
    attempts are not counted (nothing failed)."""
    db.execute(
        f"UPDATE memory_queue SET {_NO_CLAIM}, due_at = MAX(due_at, ?)"
        " WHERE thread_id = ? AND claimed_by = ?",
        [due_at, thread_id, owner],
    )


def drop_through(db: Any, thread_id: str, last_seq: int) -> None:
    """Drop the thread's row unless it holds messages after ``last_seq``."""
    db.execute(
        "DELETE FROM memory_queue WHERE thread_id = ? AND COALESCE(last_seq, 0) <= ?",
        [thread_id, last_seq],
    )


def drop(db: Any, thread_id: str) -> None:
    db.execute("DELETE FROM memory_queue WHERE thread_id = ?", [thread_id])


def set_snapshot(db: Any, thread_id: str, snapshot: str, last_seq: int) -> None:
    db.execute(
        "UPDATE memory_queue SET snapshot = ?, last_seq = ? WHERE thread_id = ?",
        [snapshot, last_seq, thread_id],
    )


def record_failure(
    db: Any, row: dict[str, Any], *, attempts: int, error: str, status: str, due_at: float
) -> None:
    """Note a failed fold on ``row`` (if no newer snapshot replaced it) and clear its claim."""
    db.execute(
        "UPDATE memory_queue SET attempts = ?, last_error = ?, status = ?, due_at = ? "
        "WHERE thread_id = ? AND enqueued_at = ?",
        [attempts, error, status, due_at, row["thread_id"], row["enqueued_at"]],
    )
    unclaim(db, row["thread_id"])


def is_queued(db: Any, thread_id: str) -> bool:
    return bool(db["memory_queue"].count_where("thread_id = ?", [thread_id]))


def count(db: Any) -> int:
    return int(db["memory_queue"].count)


def thread_ids(db: Any) -> list[str]:
    """Queued thread ids, soonest due first (without their snapshots)."""
    return [r[0] for r in db.execute("SELECT thread_id FROM memory_queue ORDER BY due_at")]


def status_rows(db: Any) -> list[dict[str, Any]]:
    """Every row but its snapshot, claims included (when the journal has them), soonest due
    first."""
    wanted = ("thread_id", "status", "attempts", "last_error", "due_at", "enqueued_at")
    wanted += ("claimed_by", "claimed_until")  # a journal from before claims has none
    have = db["memory_queue"].columns_dict
    columns = ", ".join(c for c in wanted if c in have)
    return list(db["memory_queue"].rows_where(select=columns, order_by="due_at"))


def queued_rows(db: Any) -> list[dict[str, Any]]:
    """Every row but its snapshot, claims included, in the order the threads were queued
    (for readers such as the inspector; any connection)."""
    columns = "thread_id, status, attempts, last_error, enqueued_at, claimed_by, claimed_until"
    return list(db["memory_queue"].rows_where(select=columns, order_by="enqueued_at"))


def next_due(db: Any, latest_claim: float | None = None) -> float | None:
    """The earliest pending due time, a claimed row counted at its lease's end (a lease
    ending after ``latest_claim`` counted as ending then: see ``cut_claims``)."""
    value = db.execute(
        "SELECT MIN(MAX(due_at, MIN(COALESCE(claimed_until, 0), COALESCE(?, claimed_until, 0))))"
        " FROM memory_queue WHERE status = 'pending'",
        [latest_claim],
    ).fetchone()[0]
    return None if value is None else float(value)


def mark_folded(db: Any, thread_id: str, seq: int, at: str) -> None:
    """The thread is folded (or passed over) up to ``seq``; it never goes back."""
    db.execute(
        """
        INSERT INTO memory_threads (thread_id, folded_seq, folded_at) VALUES (?, ?, ?)
        ON CONFLICT(thread_id) DO UPDATE SET
          folded_seq = MAX(folded_seq, excluded.folded_seq), folded_at = excluded.folded_at
        """,
        [thread_id, seq, at],
    )


def folded_seq(db: Any, thread_id: str) -> int:
    row = db.execute(
        "SELECT folded_seq FROM memory_threads WHERE thread_id = ?", [thread_id]
    ).fetchone()
    return int(row[0]) if row and row[0] else 0


def last_folded_at(db: Any) -> str | None:
    """When a thread was last folded or passed over (None before ``memory_threads``)."""
    from .db import has_table

    if not has_table(db, "memory_threads"):
        return None
    return db.execute("SELECT MAX(folded_at) FROM memory_threads").fetchone()[0]


def orphan_threads(db: Any) -> list[str]:
    """Lead threads journaled past their last fold but not queued."""
    rows = db.execute(
        """
        SELECT t.id FROM threads t JOIN messages m ON m.thread_id = t.id
        LEFT JOIN memory_threads f ON f.thread_id = t.id
        WHERE COALESCE(t.kind, 'lead') != 'subagent'
          AND t.id NOT IN (SELECT thread_id FROM memory_queue)
        GROUP BY t.id HAVING MAX(m.seq) > COALESCE(MAX(f.folded_seq), 0)
        """
    ).fetchall()
    return [thread_id for (thread_id,) in rows]
