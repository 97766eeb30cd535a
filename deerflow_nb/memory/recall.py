"""Conversation recall: search every user message and final reply of the lead threads.

The injected ``<memory>`` block holds a budget's worth of facts; everything else the user
ever said is in the journal. ``search`` finds it, best first, over the messages a fold
could read: user messages and final assistant replies of lead threads, never tool
traffic (tool results, tool-calling steps), sub-agent threads or ``--no-memory`` turns.

The index is SQLite FTS5 inside ``journal.db`` (``recall_fts``, with ``recall_docs``
placing each message in its thread; see ``journal.RECALL_SCHEMA``). It is brought up to
date from ``messages`` at the start of every search (only the messages written since the
last one are read), and made again from scratch when any part of it is missing, say a
table dropped by hand. No trigger on ``messages``: a trigger writing into a table the user
dropped would make every later journal write fail.

Scoring, for a query:

- BM25 of the query's words (Porter stems, no stopwords) over each message.
- Named entities (capitalised words not opening a sentence) say whom the query is about:
  a message naming none of the known ones keeps ``ENTITY_GATE`` of its score, one in a
  thread that never names them ``THREAD_GATE``.
- A turn's answer often lacks the question's words ("Yes, last weekend!"): a message also
  gains ``NEIGHBOUR_WEIGHT`` of its thread neighbours' scores (``WINDOW`` indexed messages
  on each side, decaying with distance), as the fact ranking's window match does.
- A date the query names (``3 June, 2023``, ``March 2024``; ``dates.py``) favours messages
  written on or near it, and adds them as candidates; a month without a year ("in June")
  favours messages written in such a month.
- With an embedder, the cosine of the query (names left out) with each message is fused
  with the lexical score (convex combination of min-max normalised scores, as for facts).
"""

from __future__ import annotations

import logging
import math
import re
import threading
from dataclasses import dataclass, field
from datetime import date
from typing import TYPE_CHECKING, Any

import numpy as np

from ..llm.base import ModelError
from ..storage.migrations import RECALL_SCHEMA
from .dates import date_match, mentioned_dates
from .ranking import _ENTITY_RE, STOPWORDS

if TYPE_CHECKING:
    from ..storage.journal import Journal
    from .embeddings import Embedder

log = logging.getLogger(__name__)

# Lexical candidates read from FTS5 (best BM25 first), and how many of the best after
# gating bring their thread neighbours in.
POOL = 300
SPREAD = 60
# Neighbours: this many indexed messages on each side, each sharing this weight of its
# score, divided by its distance.
WINDOW = 2
NEIGHBOUR_WEIGHT = 0.3
# Which side a message's neighbour sits on: a reply follows what it answers, so the
# message before (BEFORE_SHARE) and after (AFTER_SHARE) may share differently.
BEFORE_SHARE = 1.3
AFTER_SHARE = 0.7
# Thread topic: each message gains this weight of its thread's score (the sum of its best
# THREAD_TOP messages' own relevance, relative to the best thread's).
THREAD_WEIGHT = 0.4
THREAD_TOP = 2
# Entity gates (see the module docstring).
ENTITY_GATE = 0.6
THREAD_GATE = 0.3
# A message written as "Name: text" by someone the query does not name, naming them.
MENTION_GATE = 0.6
# Dense fusion: the share of the dense score, and the dense candidates added.
DENSE_SHARE = 0.5
DENSE_POOL = 100
# A named date: the weight of its match, and at most this many candidates it adds.
DATE_WEIGHT = 0.4
DATE_POOL = 200
# Named entities' own words in the lexical query (the gate already weighs them).
NAMES_IN_QUERY = True
# A month named without a year ("camping in June"): messages written in such a month gain
# this much (in any year: the query does not say which).
MONTH_WEIGHT = 0.2
# Newer first among equals: a tie-break, not a preference.
RECENCY_WEIGHT = 1e-3

_WORD_RE = re.compile(r"[^\W_]+", re.UNICODE)
_MONTHS = "january february march april may june july august september october november december"
_BARE_MONTH = re.compile(
    rf"\b(?:in|during|since|early|late|mid-?)\s+({'|'.join(_MONTHS.split())})\b(?!,?\s+\d{{4}})",
    re.IGNORECASE,
)
# "Melanie: It was an awesome time" — a transcript's speaker (one or two capitalised words).
_SPEAKER_RE = re.compile(r"\s*([A-Z][\w'-]*)(?: [A-Z][\w'-]*)?:\s")
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
_sync_lock = threading.Lock()


# -- the index --------------------------------------------------------------------------
def _missing(db: Any) -> bool:
    names = {
        r[0]
        for r in db.execute(
            "SELECT name FROM sqlite_master WHERE name IN (?, ?, ?)", list(_TABLES)
        ).fetchall()
    }
    return len(names) < len(_TABLES)


def _recreate(db: Any) -> None:
    """Inside a transaction: the index made again, empty (filled by ``_catch_up``)."""
    for name in _TABLES:
        db.execute(f"DROP TABLE IF EXISTS {name}")
    for statement in RECALL_SCHEMA:
        db.execute(statement)


def sync(journal: Journal) -> int:
    """Index the messages written since the last call (all of them when the index was
    missing); returns how many were indexed. Cheap when nothing changed."""
    db = journal.db
    if not _missing(db):
        row = db.execute("SELECT value FROM recall_state WHERE key = 'scanned'").fetchone()
        scanned = int(row[0]) if row else 0
        newest = db.execute("SELECT COALESCE(MAX(id), 0) FROM messages").fetchone()[0]
        if newest <= scanned:
            return 0
    with _sync_lock, journal.transaction() as db:  # re-read: another writer may have caught up
        if _missing(db):
            log.info("recall index missing from %s: rebuilding it", journal.path)
            _recreate(db)
        return _catch_up(db)


def _catch_up(db: Any) -> int:
    row = db.execute("SELECT value FROM recall_state WHERE key = 'scanned'").fetchone()
    scanned = int(row[0]) if row else 0
    newest = db.execute("SELECT COALESCE(MAX(id), 0) FROM messages").fetchone()[0]
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


# -- the query --------------------------------------------------------------------------
def query_words(text: str) -> list[str]:
    """The query's distinct words FTS5 should match (no stopwords), in order."""
    words = [w for w in _WORD_RE.findall(text.lower()) if w not in STOPWORDS]
    return list(dict.fromkeys(words))


def entity_words(text: str) -> list[str]:
    """The query's names: capitalised words that do not open a sentence, lowercased."""
    return list(dict.fromkeys(w.lower() for w in _ENTITY_RE.findall(text)))


def _match_expression(words: list[str]) -> str:
    return " OR ".join(f'"{w}"' for w in words)


def _without(text: str, words: list[str]) -> str:
    """``text`` without the words (and their ``'s``) in ``words``."""
    if not words:
        return text
    pattern = r"\b(?:" + "|".join(map(re.escape, words)) + r")(?:'s)?\b"
    out = re.sub(pattern, "", text, flags=re.IGNORECASE)
    return re.sub(r"\s+", " ", out).strip()


@dataclass
class _Dense:
    """One embedder's vectors for the indexed messages, by message id (grown as it syncs)."""

    ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    matrix: np.ndarray | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


_dense_cache: dict[tuple[str, str], _Dense] = {}
_dense_cache_lock = threading.Lock()


def dense_vectors(journal: Journal, embedder: Embedder) -> tuple[np.ndarray, np.ndarray]:
    """Message ids and their unit vectors (journal-cached, so computed once per text)."""
    key = (str(journal.path), embedder.model_id)
    with _dense_cache_lock:
        entry = _dense_cache.setdefault(key, _Dense())
    with entry.lock:
        last = int(entry.ids[-1]) if len(entry.ids) else 0
        rows = journal.db.execute(
            "SELECT d.id, m.content FROM recall_docs d JOIN messages m ON m.id = d.id "
            "WHERE d.id > ? ORDER BY d.id",
            [last],
        ).fetchall()
        if rows:
            vectors = embedder.embed_many([r[1] for r in rows])
            ids = np.array([r[0] for r in rows], dtype=np.int64)
            entry.ids = np.concatenate([entry.ids, ids])
            entry.matrix = vectors if entry.matrix is None else np.vstack([entry.matrix, vectors])
        if entry.matrix is None:
            return entry.ids, np.zeros((0, 0), dtype=np.float32)
        return entry.ids, entry.matrix


def warm(journal: Journal, embedder: Embedder) -> None:
    """Index and embed every message now, so the next search only embeds its query."""
    sync(journal)
    dense_vectors(journal, embedder)


def _lexical(db: Any, words: list[str], thread: str | None, limit: int = POOL) -> dict[int, float]:
    """BM25 (positive, higher is better) of the best ``limit`` messages matching a word."""
    if not words:
        return {}
    sql = "SELECT rowid, -bm25(recall_fts) FROM recall_fts WHERE recall_fts MATCH ?"
    params: list[Any] = [_match_expression(words)]
    if thread is not None:
        sql += " AND rowid IN (SELECT id FROM recall_docs WHERE thread_id = ?)"
        params.append(thread)
    sql += " ORDER BY rank LIMIT ?"
    params.append(limit)
    return {int(i): float(s) for i, s in db.execute(sql, params).fetchall()}


def _entity_threads(db: Any, names: list[str]) -> tuple[list[str], set[str]]:
    """The names some indexed message contains, and the threads that contain one."""
    known: list[str] = []
    threads: set[str] = set()
    for name in names:
        rows = db.execute(
            "SELECT DISTINCT d.thread_id FROM recall_fts f JOIN recall_docs d ON d.id = f.rowid "
            "WHERE recall_fts MATCH ?",
            [f'"{name}"'],
        ).fetchall()
        if rows:
            known.append(name)
            threads.update(r[0] for r in rows)
    return known, threads


def _ordinal(stamp: str | None) -> float:
    try:
        return float(date.fromisoformat(str(stamp)[:10]).toordinal())
    except ValueError:
        return math.nan


def _month(stamp: str | None) -> int:
    text = str(stamp or "")
    return int(text[5:7]) if len(text) >= 7 and text[5:7].isdigit() else 0


def search(
    journal: Journal,
    query: str,
    k: int = 10,
    *,
    thread: str | None = None,
    embedder: Embedder | None = None,
) -> list[dict[str, Any]]:
    """The ``k`` indexed messages best matching ``query``, best first, each
    ``{"thread", "seq", "role", "content", "created_at", "score"}``; only ``thread``'s when
    given. ``embedder`` (``Memory.embedder``) fuses in dense similarity."""
    if k <= 0 or not isinstance(query, str) or not query.strip():
        return []
    sync(journal)
    db = journal.db
    words = query_words(query)
    names = entity_words(query)
    known, named_threads = _entity_threads(db, names) if names else ([], set())
    if not NAMES_IN_QUERY and known:
        words = [w for w in words if w not in known] or words
    lexical = _lexical(db, words, thread)
    spans = mentioned_dates(query)
    months = {_MONTHS.split().index(m.lower()) + 1 for m in _BARE_MONTH.findall(query)}

    # Candidates: lexical matches, messages of a named date, the best dense matches.
    candidates: set[int] = set(lexical)
    if spans:
        first = date.fromordinal(int(min(s[0] for s in spans)) - 7).isoformat()
        last = date.fromordinal(int(max(s[1] for s in spans)) + 8).isoformat()
        sql = "SELECT id FROM recall_docs WHERE created_at >= ? AND created_at < ?"
        params: list[Any] = [first, last]
        if thread is not None:
            sql += " AND thread_id = ?"
            params.append(thread)
        candidates.update(r[0] for r in db.execute(sql + f" LIMIT {DATE_POOL}", params))
    dense_all: dict[int, float] = {}
    if embedder is not None:
        dense_all = _dense_scores(journal, embedder, query, names, thread)
        best = sorted(dense_all, key=dense_all.__getitem__, reverse=True)[:DENSE_POOL]
        candidates.update(best)
    if not candidates:
        return []

    ids = sorted(candidates)
    meta = _rows(db, ids)
    signals = (lexical, dense_all, known, named_threads, spans, months)
    base = _relevance(ids, meta, *signals)

    # Neighbours: the best candidates bring in their thread neighbours, and every message
    # gains a share of its neighbours' relevance.
    top = sorted(base, key=base.__getitem__, reverse=True)[:SPREAD]
    extra = _neighbour_ids(db, [meta[i] for i in top], set(base))
    if extra:
        meta.update(_rows(db, extra))
        base.update(_relevance(extra, meta, *signals))
    by_place = {(meta[i]["thread"], meta[i]["pos"]): i for i in base}
    topic = _thread_scores(base, meta)
    total: dict[int, float] = {}
    for i, own in base.items():
        thread_id, pos = meta[i]["thread"], meta[i]["pos"]
        shared = 0.0
        for distance in range(1, WINDOW + 1):
            for other, side in ((pos - distance, BEFORE_SHARE), (pos + distance, AFTER_SHARE)):
                j = by_place.get((thread_id, other))
                if j is not None:
                    shared += side * base[j] / distance
        total[i] = (
            own
            + NEIGHBOUR_WEIGHT * shared
            + THREAD_WEIGHT * topic.get(thread_id, 0.0)
            + RECENCY_WEIGHT * (i / max(ids[-1], 1))
        )
    best_ids = sorted(total, key=lambda i: (-total[i], -i))[:k]
    top_score = max((total[i] for i in best_ids), default=0.0)
    if top_score <= 0:
        return []
    results = []
    for i in best_ids:
        if total[i] <= 0:
            break
        row = meta[i]
        results.append(
            {
                "thread": row["thread"],
                "seq": row["seq"],
                "role": row["role"],
                "content": row["content"],
                "created_at": row["created_at"],
                "score": round(total[i], 4),
            }
        )
    return results


def _thread_scores(base: dict[int, float], meta: dict[int, dict[str, Any]]) -> dict[str, float]:
    """Each thread's topic score in [0, 1]: the sum of its best ``THREAD_TOP`` messages'
    own relevance, relative to the best thread's."""
    if THREAD_WEIGHT <= 0:
        return {}
    by_thread: dict[str, list[float]] = {}
    for i, own in base.items():
        by_thread.setdefault(meta[i]["thread"], []).append(own)
    sums = {t: sum(sorted(v, reverse=True)[:THREAD_TOP]) for t, v in by_thread.items()}
    best = max(sums.values(), default=0.0)
    return {t: v / best for t, v in sums.items()} if best > 0 else {}


def _rows(db: Any, ids: list[int]) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
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


def _relevance(
    ids: list[int],
    meta: dict[int, dict[str, Any]],
    lexical: dict[int, float],
    dense_all: dict[int, float],
    known: list[str],
    named_threads: set[str],
    spans: list[tuple[int, int]],
    months: set[int],
) -> dict[int, float]:
    """Each message's own relevance in [0, ~1.4]: fused, gated, date-matched."""
    ids = [i for i in ids if i in meta]
    top = max(lexical.values(), default=0.0)
    lex = np.array([lexical.get(i, 0.0) / top if top > 0 else 0.0 for i in ids])
    if dense_all:
        values = np.array(list(dense_all.values()))
        low, high = float(values.min()), float(values.max())
        span = high - low if high > low else 1.0
        dense = np.array([(dense_all.get(i, low) - low) / span for i in ids])
        rel = (1 - DENSE_SHARE) * lex + DENSE_SHARE * dense
    else:
        rel = lex
    if known:
        pattern = re.compile(r"\b(?:" + "|".join(map(re.escape, known)) + r")\b", re.IGNORECASE)
        gate = np.array([_gate(meta[i], pattern, known, named_threads) for i in ids])
        rel = rel * gate
    if spans:
        ordinals = np.array([_ordinal(meta[i]["created_at"]) for i in ids])
        rel = rel + DATE_WEIGHT * date_match(ordinals, spans)
    if months:
        rel = rel + MONTH_WEIGHT * np.array([_month(meta[i]["created_at"]) in months for i in ids])
    return {i: float(r) for i, r in zip(ids, rel, strict=True)}


def _gate(
    row: dict[str, Any], pattern: re.Pattern[str], known: list[str], named_threads: set[str]
) -> float:
    """How much of its relevance a message keeps, given the names the query is about.

    A message written as ``Name: text`` (a transcript, a chat export) says who speaks: one
    spoken by a named person keeps all of it, one only mentioning them ``MENTION_GATE``.
    Otherwise naming them is enough. Then the thread gates (``ENTITY_GATE``,
    ``THREAD_GATE``)."""
    content = row["content"]
    speaker = _SPEAKER_RE.match(content)
    if speaker is not None:
        if speaker.group(1).lower() in known:
            return 1.0
        if pattern.search(content, speaker.end()):
            return MENTION_GATE
    elif pattern.search(content):
        return 1.0
    return ENTITY_GATE if row["thread"] in named_threads else THREAD_GATE


def _dense_scores(
    journal: Journal, embedder: Embedder, query: str, names: list[str], thread: str | None
) -> dict[int, float]:
    """Cosine of the query (its names left out: who it is about is the gate's job) with
    every indexed message (of ``thread``, when given); {} when the embedder fails."""
    try:
        ids, matrix = dense_vectors(journal, embedder)
        if matrix.size == 0:
            return {}
        vector = embedder.embed_query(_without(query, names) or query)
    except ModelError as exc:
        log.warning("recall by words only, %s is unavailable: %s", embedder.model_id, exc)
        return {}
    similarity = matrix @ vector
    if thread is not None:
        keep = {
            r[0]
            for r in journal.db.execute("SELECT id FROM recall_docs WHERE thread_id = ?", [thread])
        }
        mask = np.array([int(i) in keep for i in ids], dtype=bool)
        ids, similarity = ids[mask], similarity[mask]
    return {int(i): float(s) for i, s in zip(ids, similarity, strict=True)}


def _neighbour_ids(db: Any, rows: list[dict[str, Any]], known: set[int]) -> list[int]:
    """Ids of the indexed messages within ``WINDOW`` of ``rows`` in their threads, not in
    ``known``."""
    if not rows:
        return []
    values = ",".join("(?, ?, ?)" for _ in rows)
    params: list[Any] = []
    for row in rows:
        params += [row["thread"], row["pos"] - WINDOW, row["pos"] + WINDOW]
    sql = (
        f"WITH c(t, lo, hi) AS (VALUES {values}) SELECT DISTINCT d.id FROM c "
        "JOIN recall_docs d ON d.thread_id = c.t AND d.pos BETWEEN c.lo AND c.hi"
    )
    return [r[0] for r in db.execute(sql, params) if r[0] not in known]
