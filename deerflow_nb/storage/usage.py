"""The ``fact_usage`` rows: one upserted row of use and confirmation records per fact id.

Writes run inside the caller's transaction, one ``executemany`` per kind of record, so a
turn costs one statement; what counts as a use is ``memory/usage.py``'s job.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

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
_INJECTED = """
INSERT INTO fact_usage (fact_id, last_injected, injected, last_used, used)
VALUES (?, ?, 1, ?, ?)
ON CONFLICT(fact_id) DO UPDATE SET
  last_injected = excluded.last_injected,
  injected = injected + 1,
  last_used = COALESCE(excluded.last_used, last_used),
  used = used + excluded.used
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


def add_injected(
    db: sqlite_utils.Database, rows: Sequence[tuple[str, str, str | None, int]]
) -> None:
    """Each (fact_id, stamp, used stamp or None, 1 if used else 0): injected once more."""
    db.conn.executemany(_INJECTED, rows)


def add_used(db: sqlite_utils.Database, rows: Sequence[tuple[str, str]]) -> None:
    """Each (fact_id, stamp): used once more."""
    db.conn.executemany(_USED, rows)


def add_confirmed(db: sqlite_utils.Database, rows: Sequence[tuple[str, str]]) -> None:
    """Each (fact_id, stamp): confirmed once more."""
    db.conn.executemany(_CONFIRMED, rows)


def merge_into(db: sqlite_utils.Database, fact_id: str, sources: Sequence[str]) -> None:
    """A row for ``fact_id`` from the ``sources``' rows: latest times, summed counts (none
    when it has one already)."""
    marks = ", ".join("?" for _ in sources)
    db.conn.execute(_INHERIT.format(marks=marks), [fact_id, *sources])


def rows(db: Connection, fact_ids: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
    """``fact_id -> row`` for the given (distinct) ids, all rows when None."""
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
