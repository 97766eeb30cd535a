"""The ``memory_changes`` rows: one per change set the gate let through or held.

What the wipe guard counts across changes (facts lost in the last day, per origin) and
the per-turn cap on ``remember`` read; ``memory/updates/gate.py`` writes them.
"""

from __future__ import annotations

from typing import Any

from .db import insert_rows


def insert(db: Any, row: dict[str, Any]) -> int:
    """Inside the caller's transaction: one change set's row; its id."""
    return int(insert_rows(db, "memory_changes", [row]) or 0)


def lost_since(db: Any, since: str, origins: tuple[str, ...], reasons: tuple[str, ...]) -> int:
    """Facts removed, evicted or merged away at or after ``since`` by changes of ``origins``
    or of ``reasons`` (whatever their origin)."""
    marks = ", ".join("?" * len(origins))
    kinds = ", ".join("?" * len(reasons))
    sql = (
        "SELECT COALESCE(SUM(lost), 0) FROM memory_changes WHERE at >= ? AND "
        f"(origin IN ({marks}) OR reason IN ({kinds}))"
    )
    return int(db.execute(sql, [since, *origins, *reasons]).fetchone()[0])


def count_in_turn(db: Any, turn: str, reason: str) -> int:
    """How many ``reason`` changes (held, refused or applied) a turn made."""
    sql = "SELECT COUNT(*) FROM memory_changes WHERE turn = ? AND reason = ?"
    return int(db.execute(sql, [turn, reason]).fetchone()[0])


def added_since(
    db: Any, since: str, origins: tuple[str, ...], reasons: tuple[str, ...]
) -> set[str]:
    """The facts added (not merged: a merge's fact replaces its sources) at or after
    ``since`` by changes of ``origins`` or of ``reasons``: what such changes grew memory by."""
    marks = ", ".join("?" * len(origins))
    kinds = ", ".join("?" * len(reasons))
    # Each version once: a batch commit (a sync's) is one version of many change rows,
    # and a join would read its events once per row (n x n for a batch of n).
    sql = (
        "SELECT e.fact_id FROM memory_events e WHERE e.kind = 'add' "
        "AND COALESCE(e.details, '') NOT LIKE '%merged_from%' "
        "AND e.version_id IN (SELECT c.version_id FROM memory_changes c WHERE c.at >= ? "
        f"AND (c.origin IN ({marks}) OR c.reason IN ({kinds})))"
    )
    return {row[0] for row in db.execute(sql, [since, *origins, *reasons])}
