"""Per-fact use and confirmation records (issue 20), in the journal's ``fact_usage`` table.

One row per fact id, upserted: when the fact was last injected into a turn (and how often),
last *used* (injected into a turn whose message shares a content word with it, or returned
by ``Memory.search``), and last *confirmed* (the user said it again, so a fold reinforced
it, or edited it by hand). memory.json is never rewritten for this: a turn costs one
``executemany`` in one short transaction, and a failure to record is logged, never raised
into the turn. ``aging.py`` reads the rows for staleness and eviction.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from ..similarity import signature
from ..storage.db import now_iso

log = logging.getLogger(__name__)

COLUMNS = (
    "fact_id",
    "last_injected",
    "injected",
    "last_used",
    "used",
    "last_confirmed",
    "confirmed",
)

# One statement per kind of record; ``?`` are (fact_id, stamp[, used stamp]).
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


def relevant_ids(facts: Iterable[Mapping[str, Any]], message: str) -> set[str]:
    """The facts ``message`` is about: those sharing with it a *distinctive* content word,
    one found in at most max(2, 10 %) of these facts ("polars", "Apollo12"; not
    "migration" when every project fact says it). Signatures are cached, so this is a few
    set operations per injected fact."""
    words = {w.lstrip("~") for w in signature(message or "")}
    if not words:
        return set()
    facts = list(facts)
    sigs = [{w.lstrip("~") for w in signature(str(f.get("content", "")))} & words for f in facts]
    counts: dict[str, int] = {}
    for shared in sigs:
        for word in shared:
            counts[word] = counts.get(word, 0) + 1
    common = max(2, len(facts) // 10)
    return {
        str(f.get("id"))
        for f, shared in zip(facts, sigs, strict=True)
        if any(counts[w] <= common for w in shared)
    }


def record_injected(
    db: Any, facts: Iterable[Mapping[str, Any]], message: str, when: str | None = None
) -> int:
    """One turn's injection: every fact injected, those relevant to ``message`` also used.
    Inside the caller's transaction; one ``executemany``."""
    facts = list(facts)
    if not facts:
        return 0
    stamp = when or now_iso()
    relevant = relevant_ids(facts, message)
    rows = [
        (
            str(f.get("id")),
            stamp,
            stamp if str(f.get("id")) in relevant else None,
            int(str(f.get("id")) in relevant),
        )
        for f in facts
    ]
    db.conn.executemany(_INJECTED, rows)
    return len(rows)


def record_used(db: Any, fact_ids: Iterable[str], when: str | None = None) -> int:
    stamp = when or now_iso()
    rows = [(str(i), stamp) for i in dict.fromkeys(fact_ids)]
    if rows:
        db.conn.executemany(_USED, rows)
    return len(rows)


def record_confirmed(db: Any, fact_ids: Iterable[str], when: str | None = None) -> int:
    stamp = when or now_iso()
    rows = [(str(i), stamp) for i in dict.fromkeys(fact_ids)]
    if rows:
        db.conn.executemany(_CONFIRMED, rows)
    return len(rows)


def inherit(db: Any, fact_id: str, sources: list[str]) -> None:
    """A merged fact starts with its sources' records: latest times, summed counts."""
    if sources:
        marks = ", ".join("?" for _ in sources)
        db.conn.execute(_INHERIT.format(marks=marks), [fact_id, *sources])


def read(db: Any, fact_ids: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
    """``fact_id -> row`` for the given facts (all rows when None)."""
    sql = f"SELECT {', '.join(COLUMNS)} FROM fact_usage"
    if fact_ids is None:
        rows = db.conn.execute(sql).fetchall()
    else:
        ids = list(dict.fromkeys(map(str, fact_ids)))
        rows = []
        for start in range(0, len(ids), 500):  # SQLite's variable limit
            chunk = ids[start : start + 500]
            marks = ", ".join("?" for _ in chunk)
            rows += db.conn.execute(f"{sql} WHERE fact_id IN ({marks})", chunk).fetchall()
    return {row[0]: dict(zip(COLUMNS, row, strict=True)) for row in rows}
