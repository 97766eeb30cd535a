"""The conversation-recall index (``recall_*`` tables): catching it up, rebuilding it, querying it.

One row per user message and final assistant reply of a lead thread, outside
``--no-memory`` turns (see ``migrations.RECALL_SCHEMA``). ``sync`` brings it up to date
from ``messages`` before every search (only the messages written since the last one are
read), and makes it again from scratch when any part of it is missing, say a table dropped
by hand. No trigger on ``messages``: a trigger writing into a table the user dropped would
make every later journal write fail. What a match is worth is ``memory/retrieval/recall.py``'s job;
the queries here only find rows.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from .migrations import RECALL_SCHEMA

if TYPE_CHECKING:
    import sqlite_utils

    from .db import Connection
    from .journal import Journal

log = logging.getLogger(__name__)

_TABLES = ("recall_docs", "recall_fts", "recall_state")
# Which messages are indexed: text of a user message or a reply without tool calls, in a
# thread that is not a sub-agent's, outside private (--no-memory) turns.
_INDEXABLE = """
    m.content IS NOT NULL AND TRIM(m.content) != ''
    AND (m.role = 'user' OR (m.role = 'assistant'
         AND (m.tool_calls IS NULL OR m.tool_calls IN ('', '[]', 'null'))))
    AND COALESCE((SELECT t.kind FROM threads t WHERE t.id = m.thread_id), 'lead') != 'subagent'
    AND NOT EXISTS (SELECT 1 FROM turns u WHERE u.id = m.turn_id AND u.private = 1)
"""
_CHUNK = 500  # ids per ``IN (...)``: below SQLite's variable limit
_sync_lock = threading.Lock()


# -- keeping it up to date --------------------------------------------------------------
def _missing(db: Connection) -> bool:
    names = {
        r[0]
        for r in db.execute(
            "SELECT name FROM sqlite_master WHERE name IN (?, ?, ?)", list(_TABLES)
        ).fetchall()
    }
    return len(names) < len(_TABLES)


def _recreate(db: sqlite_utils.Database) -> None:
    """Inside a transaction: the index made again, empty (filled by ``_catch_up``)."""
    for name in _TABLES:
        db.execute(f"DROP TABLE IF EXISTS {name}")
    for statement in RECALL_SCHEMA:
        db.execute(statement)


def _behind(db: Connection) -> tuple[int, int]:
    """(the highest message id indexed, the highest message id)."""
    row = db.execute("SELECT value FROM recall_state WHERE key = 'scanned'").fetchone()
    scanned = int(row[0]) if row else 0
    newest = db.execute("SELECT COALESCE(MAX(id), 0) FROM messages").fetchone()[0]
    return scanned, newest


def is_current(db: Connection) -> bool:
    """Whether the index holds every message (a search then needs no write)."""
    if _missing(db):
        return False
    scanned, newest = _behind(db)
    return newest <= scanned


def sync(journal: Journal) -> int:
    """Index the messages written since the last call (all of them when the index was
    missing); returns how many were indexed. Cheap when nothing changed."""
    if is_current(journal.db):
        return 0
    with _sync_lock, journal.transaction() as db:  # re-read: another writer may have caught up
        if _missing(db):
            log.info("recall index missing from %s: rebuilding it", journal.path)
            _recreate(db)
        return _catch_up(db)


def _catch_up(db: sqlite_utils.Database) -> int:
    scanned, newest = _behind(db)
    if newest <= scanned:
        return 0
    rows = db.execute(
        f"SELECT m.id, m.thread_id, m.content, m.created_at FROM messages m "
        f"WHERE m.id > ? AND {_INDEXABLE} ORDER BY m.thread_id, m.seq",
        [scanned],
    ).fetchall()
    next_pos: dict[str, int] = {}
    docs = []
    for message_id, thread_id, content, created_at in rows:
        if thread_id not in next_pos:
            last = db.execute(
                "SELECT COALESCE(MAX(pos), 0) FROM recall_docs WHERE thread_id = ?", [thread_id]
            ).fetchone()[0]
            next_pos[thread_id] = int(last) + 1
        docs.append((message_id, thread_id, next_pos[thread_id], created_at, content))
        next_pos[thread_id] += 1
    db.conn.executemany(
        "INSERT OR REPLACE INTO recall_docs (id, thread_id, pos, created_at) VALUES (?, ?, ?, ?)",
        [d[:4] for d in docs],
    )
    db.conn.executemany(
        "INSERT INTO recall_fts (rowid, content) VALUES (?, ?)", [(d[0], d[4]) for d in docs]
    )
    db.execute("INSERT OR REPLACE INTO recall_state (key, value) VALUES ('scanned', ?)", [newest])
    return len(docs)


# -- queries ----------------------------------------------------------------------------
def _phrases(words: list[str]) -> str:
    """An FTS5 query matching any of ``words``, each quoted (no operators)."""
    return " OR ".join(f'"{w}"' for w in words)


def match(db: Connection, words: list[str], thread: str | None, limit: int) -> dict[int, float]:
    """BM25 (positive, higher is better) of the best ``limit`` messages holding any of
    ``words`` (only ``thread``'s when given), by message id."""
    if not words:
        return {}
    sql = "SELECT rowid, -bm25(recall_fts) FROM recall_fts WHERE recall_fts MATCH ?"
    params: list[Any] = [_phrases(words)]
    if thread is not None:
        sql += " AND rowid IN (SELECT id FROM recall_docs WHERE thread_id = ?)"
        params.append(thread)
    sql += " ORDER BY rank LIMIT ?"
    params.append(limit)
    return {int(i): float(s) for i, s in db.execute(sql, params).fetchall()}


def threads_naming(db: Connection, word: str) -> set[str]:
    """The threads with an indexed message holding ``word``."""
    rows = db.execute(
        "SELECT DISTINCT d.thread_id FROM recall_fts f JOIN recall_docs d ON d.id = f.rowid "
        "WHERE recall_fts MATCH ?",
        [_phrases([word])],
    ).fetchall()
    return {r[0] for r in rows}


def written_between(
    db: Connection, first: str, last: str, thread: str | None, limit: int
) -> list[int]:
    """Ids of at most ``limit`` indexed messages written in [first, last) (ISO dates)."""
    sql = "SELECT id FROM recall_docs WHERE created_at >= ? AND created_at < ?"
    params: list[Any] = [first, last]
    if thread is not None:
        sql += " AND thread_id = ?"
        params.append(thread)
    return [r[0] for r in db.execute(sql + f" LIMIT {int(limit)}", params)]


def holders(db: Connection, word: str) -> int:
    """How many indexed messages hold ``word`` (as FTS5 stems it): counted inside SQLite."""
    sql = "SELECT COUNT(*) FROM recall_fts WHERE recall_fts MATCH ?"
    return int(db.execute(sql, [_phrases([word])]).fetchone()[0])


def size(db: Connection) -> int:
    """How many messages are indexed."""
    return int(db.execute("SELECT COUNT(*) FROM recall_docs").fetchone()[0])


def in_thread(db: Connection, thread: str) -> set[int]:
    """Ids of the thread's indexed messages."""
    return {r[0] for r in db.execute("SELECT id FROM recall_docs WHERE thread_id = ?", [thread])}


def texts_after(db: Connection, last_id: int) -> list[tuple[int, str]]:
    """(id, text) of the indexed messages after ``last_id``, in id order."""
    return db.execute(
        "SELECT d.id, m.content FROM recall_docs d JOIN messages m ON m.id = d.id "
        "WHERE d.id > ? ORDER BY d.id",
        [last_id],
    ).fetchall()


def rows(db: Connection, ids: list[int]) -> dict[int, dict[str, Any]]:
    """Indexed messages by id: ``{thread, pos, created_at, seq, role, content}``."""
    out: dict[int, dict[str, Any]] = {}
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start : start + _CHUNK]
        marks = ",".join("?" * len(chunk))
        for row in db.execute(
            "SELECT d.id, d.thread_id, d.pos, d.created_at, m.seq, m.role, m.content "
            f"FROM recall_docs d JOIN messages m ON m.id = d.id WHERE d.id IN ({marks})",
            chunk,
        ):
            out[row[0]] = {
                "thread": row[1],
                "pos": row[2],
                "created_at": row[3],
                "seq": row[4],
                "role": row[5],
                "content": row[6] or "",
            }
    return out


def near(db: Connection, places: list[tuple[str, int]], window: int) -> list[int]:
    """Ids of the indexed messages within ``window`` positions of each (thread, pos)."""
    if not places:
        return []
    values = ",".join("(?, ?, ?)" for _ in places)
    params: list[Any] = []
    for thread, pos in places:
        params += [thread, pos - window, pos + window]
    sql = (
        f"WITH c(t, lo, hi) AS (VALUES {values}) SELECT DISTINCT d.id FROM c "
        "JOIN recall_docs d ON d.thread_id = c.t AND d.pos BETWEEN c.lo AND c.hi"
    )
    return [r[0] for r in db.execute(sql, params)]
