"""The ``fact_usage`` rows: one upserted row of use and confirmation records per fact id,
and ``fact_injections``, the log of turns' injected ids not yet counted in them.

Writes run inside the caller's transaction, one statement per kind of record. A turn's
injection is one logged row (``log_injected``), settled into ``fact_usage`` by the next
ledger commit (``settle``); ``rows`` adds the unsettled ones, so every reader, read-only
ones included, sees the same counts. What counts as a use is ``memory/updates/fact_use.py``'s job.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .db import has_table

if TYPE_CHECKING:
    import sqlite_utils

    from .db import Connection

COLUMNS = (
    "fact_id",
    "last_injected",
    "injected",
    "last_used",
    "used",
    "last_confirmed",
    "confirmed",
)
_CHUNK = 500  # ids per ``IN (...)``: below SQLite's variable limit

# One statement per kind of record; ``?`` are (fact_id, stamp[, used stamp, used]).
_LOGGED = "INSERT INTO fact_injections (at, fact_ids) VALUES (?, ?)"
_SETTLE = """
INSERT INTO fact_usage (fact_id, last_injected, injected) VALUES (?, ?, ?)
ON CONFLICT(fact_id) DO UPDATE SET
  last_injected = MAX(COALESCE(last_injected, ''), excluded.last_injected),
  injected = injected + excluded.injected
"""
_USED = """
INSERT INTO fact_usage (fact_id, last_used, used) VALUES (?, ?, 1)
ON CONFLICT(fact_id) DO UPDATE SET last_used = excluded.last_used, used = used + 1
"""
_CONFIRMED = """
INSERT INTO fact_usage (fact_id, last_confirmed, confirmed) VALUES (?, ?, 1)
ON CONFLICT(fact_id) DO UPDATE SET
  last_confirmed = excluded.last_confirmed, confirmed = confirmed + 1
"""
_INHERIT = """
INSERT INTO fact_usage (fact_id, last_injected, injected, last_used, used, last_confirmed,
                        confirmed)
SELECT ?, MAX(last_injected), COALESCE(SUM(injected), 0), MAX(last_used),
       COALESCE(SUM(used), 0), MAX(last_confirmed), COALESCE(SUM(confirmed), 0)
FROM fact_usage WHERE fact_id IN ({marks})
ON CONFLICT(fact_id) DO NOTHING
"""


def log_injected(db: sqlite_utils.Database, stamp: str, fact_ids: Sequence[str]) -> None:
    """One turn's injected fact ids, one row (``settle`` counts them in ``fact_usage``)."""
    db.conn.execute(_LOGGED, (stamp, json.dumps(list(fact_ids))))


def _pending(db: Connection) -> tuple[int, dict[str, tuple[str, int]]]:
    """The log's last row id, and per fact id its latest logged injection and how many.
    A row that is not a JSON list of ids (a hand-edited journal) is left out."""
    if not has_table(db, "fact_injections"):
        return 0, {}
    last, found = 0, {}
    for row_id, stamp, text in db.execute(
        "SELECT id, at, fact_ids FROM fact_injections ORDER BY id"
    ).fetchall():
        last = row_id
        try:
            ids = json.loads(text)
        except (TypeError, ValueError):
            continue
        if not isinstance(ids, list) or not isinstance(stamp, str):
            continue
        for fact_id in ids:
            if isinstance(fact_id, str):
                before = found.get(fact_id)
                found[fact_id] = (max(before[0], stamp), before[1] + 1) if before else (stamp, 1)
    return last, found


def settle(db: sqlite_utils.Database) -> None:
    """Count the logged injections in ``fact_usage`` and empty the log (the caller's
    transaction: both or neither)."""
    last, pending = _pending(db)
    if pending:
        db.conn.executemany(_SETTLE, [(i, stamp, n) for i, (stamp, n) in pending.items()])
    if last:
        db.conn.execute("DELETE FROM fact_injections WHERE id <= ?", (last,))


def add_used(db: sqlite_utils.Database, rows: Sequence[tuple[str, str]]) -> None:
    """Each (fact_id, stamp): used once more."""
    db.conn.executemany(_USED, rows)


def add_confirmed(db: sqlite_utils.Database, rows: Sequence[tuple[str, str]]) -> None:
    """Each (fact_id, stamp): confirmed once more."""
    db.conn.executemany(_CONFIRMED, rows)


def merge_into(db: sqlite_utils.Database, fact_id: str, sources: Sequence[str]) -> None:
    """A row for ``fact_id`` from the ``sources``' rows: latest times, summed counts (none
    when it has one already). Injections still in the log are not counted: the ledger
    settles it first, in the same commit."""
    marks = ", ".join("?" for _ in sources)
    db.conn.execute(_INHERIT.format(marks=marks), [fact_id, *sources])


def rows(db: Connection, fact_ids: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
    """``fact_id -> row`` for the given (distinct) ids, all rows when None; injections
    still in the log are counted in."""
    found = _settled_rows(db, fact_ids)
    wanted = None if fact_ids is None else set(fact_ids)
    for fact_id, (stamp, count) in _pending(db)[1].items():
        if wanted is not None and fact_id not in wanted:
            continue
        row = found.get(fact_id) or {
            **dict.fromkeys(COLUMNS),
            **{"fact_id": fact_id, "injected": 0, "used": 0, "confirmed": 0},
        }
        row["last_injected"] = max(row["last_injected"] or "", stamp)
        row["injected"] += count
        found[fact_id] = row
    return found


def _settled_rows(
    db: Connection, fact_ids: Sequence[str] | None = None
) -> dict[str, dict[str, Any]]:
    """``fact_usage``'s own rows for the given (distinct) ids, all rows when None."""
    sql = f"SELECT {', '.join(COLUMNS)} FROM fact_usage"
    if fact_ids is None:
        found = db.execute(sql).fetchall()
    else:
        found = []
        for start in range(0, len(fact_ids), _CHUNK):
            chunk = list(fact_ids[start : start + _CHUNK])
            marks = ", ".join("?" for _ in chunk)
            found += db.execute(f"{sql} WHERE fact_id IN ({marks})", chunk).fetchall()
    return {row[0]: dict(zip(COLUMNS, row, strict=True)) for row in found}
