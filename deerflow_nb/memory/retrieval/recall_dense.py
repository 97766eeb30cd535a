"""Conversation recall's dense side: message vectors, the query's cosines, their scale.

Every indexed message is embedded once per embedder (its vectors come from the journal's
cache, ``embedder.py``) and kept here by message id, grown as the index syncs, so a
search only embeds its query. ``recall.py`` fuses the cosines with its lexical score.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ...llm.base import ModelError
from ...storage import recall_index

if TYPE_CHECKING:
    from ...storage.journal import Journal
    from .embedder import Embedder

log = logging.getLogger(__name__)


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
        rows = recall_index.texts_after(journal.db, last)
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
    recall_index.sync(journal)
    dense_vectors(journal, embedder)


def without(text: str, words: list[str]) -> str:
    """``text`` without the words (and their ``'s``) in ``words``."""
    if not words:
        return text
    pattern = r"\b(?:" + "|".join(map(re.escape, words)) + r")(?:'s)?\b"
    out = re.sub(pattern, "", text, flags=re.IGNORECASE)
    return re.sub(r"\s+", " ", out).strip()


def dense_scores(
    journal: Journal, embedder: Embedder, query: str, names: list[str], thread: str | None
) -> dict[int, float]:
    """Cosine of the query (its names left out: who it is about is the gate's job) with
    every indexed message (of ``thread``, when given); {} when the embedder fails."""
    try:
        ids, matrix = dense_vectors(journal, embedder)
        if matrix.size == 0:
            return {}
        vector = embedder.embed_query(without(query, names) or query)
    except ModelError as exc:
        log.warning("recall by words only, %s is unavailable: %s", embedder.model_id, exc)
        return {}
    similarity = matrix @ vector
    if thread is not None:
        keep = recall_index.in_thread(journal.db, thread)
        mask = np.array([int(i) in keep for i in ids], dtype=bool)
        ids, similarity = ids[mask], similarity[mask]
    return {int(i): float(s) for i, s in zip(ids, similarity, strict=True)}


def scaled(ids: list[int], cosines: dict[int, float], zero: str = "mean") -> np.ndarray:
    """The cosines of ``ids`` on [0, 1]: 1 for the most similar message, 0 from ``zero``
    down, the mean cosine over every message (``"mean"``) or the lowest (``"min"``).

    From the mean, a message no closer to the query than the average one adds nothing,
    and one far-off message cannot squeeze every other cosine towards 1 as it does from
    the lowest."""
    values = np.fromiter(cosines.values(), dtype=np.float64, count=len(cosines))
    high = float(values.max())
    low = float(values.mean() if zero == "mean" else values.min())
    span = high - low if high > low else 1.0
    own = np.array([cosines.get(i, low) for i in ids], dtype=np.float64)
    return np.clip((own - low) / span, 0.0, None)
