"""The ``embeddings`` rows: cached vectors by text hash and model id.

Vectors are stored as raw float32 bytes with their dimension; turning them into arrays,
and what the key of a text is, is ``memory/retrieval/embedder.py``'s job.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlite_utils

    from .db import Connection

_CHUNK = 500  # keys per ``IN (...)``: below SQLite's variable limit


def load(db: Connection, model: str, keys: Sequence[str]) -> list[tuple[str, int, bytes]]:
    """(content_hash, dim, vector bytes) of the keys cached for ``model``."""
    found: list[tuple[str, int, bytes]] = []
    for start in range(0, len(keys), _CHUNK):
        chunk = list(keys[start : start + _CHUNK])
        marks = ",".join("?" * len(chunk))
        found += db.execute(
            f"SELECT content_hash, dim, vector FROM embeddings "
            f"WHERE model = ? AND content_hash IN ({marks})",
            [model, *chunk],
        ).fetchall()
    return found


def save(
    db: sqlite_utils.Database,
    model: str,
    vectors: Sequence[tuple[str, int, bytes]],
    stamp: str,
) -> None:
    """Inside the caller's transaction: each (content_hash, dim, vector bytes) for
    ``model``, replacing what was cached."""
    rows = [
        {"content_hash": key, "model": model, "dim": dim, "vector": blob, "created_at": stamp}
        for key, dim, blob in vectors
    ]
    db["embeddings"].upsert_all(rows, pk=("content_hash", "model"))
