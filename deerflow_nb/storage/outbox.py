"""The ``shared_outbox`` and ``shared_applied`` rows: a shared project's change sets on
their way to the team's PostgreSQL, and which of the team's change sets this home applied.

A change set to a shared project is committed here first, in journal.db (local and
offline-first), and waits until ``deerflow_nb/shared/exchange.py`` has published it
once; a kernel killed or a server down in between loses nothing, and publishing again
is harmless (the server keys change sets by their uuid). ``shared_applied`` holds every
change set this home has applied, with the project version the server gave it, so a
change set pulled twice is applied once and the next pull starts after the last one.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .db import now_iso

if TYPE_CHECKING:
    from ..schema.changes import ChangeSet
    from .journal import Journal


@dataclass(frozen=True)
class Outgoing:
    """A change set waiting to be published: ``payload`` is the ``ChangeSet`` as JSON."""

    id: str
    project: str
    origin: str
    turn: str | None
    created_at: str
    payload: dict[str, Any]


class Outbox:
    """The journal's outbox and applied-set for shared projects."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    def add(self, project: str, change: ChangeSet, *, change_id: str | None = None) -> str:
        """Keep ``change`` (already applied here) until it is published; its uuid. It is
        recorded as applied too, so it is not applied again when it comes back."""
        with self.journal.transaction() as db:
            return add_in(db, project, change, change_id=change_id)

    def waiting(
        self,
        limit: int = 500,
        *,
        skip: Collection[str] = (),
        only: Collection[str] | None = None,
    ) -> list[Outgoing]:
        """The oldest change sets not published yet, grouped by project, oldest first
        within each; none of the projects in ``skip``, only those in ``only`` (when given:
        projects shared on another server wait for that one)."""
        skipped = list(skip)
        wanted = "" if only is None else f" AND project IN ({', '.join('?' * len(only))})"
        rows = self.journal.db.execute(
            "SELECT id, project, origin, turn, created_at, payload FROM (SELECT * FROM"
            " shared_outbox WHERE published_at IS NULL"
            f" AND project NOT IN ({', '.join('?' * len(skipped))}){wanted}"
            " ORDER BY created_at, rowid LIMIT ?) ORDER BY project, created_at, rowid",
            [*skipped, *(only or ()), limit],
        ).fetchall()
        return [Outgoing(*row[:5], payload=json.loads(row[5])) for row in rows]

    def mark_published(self, ids: Iterable[str]) -> None:
        """Once the server holds them: they no longer wait."""
        now = now_iso()
        with self.journal.transaction() as db:
            db.conn.executemany(
                "UPDATE shared_outbox SET published_at = ? WHERE id = ? AND published_at IS NULL",
                [(now, change_id) for change_id in ids],
            )

    def applied(self, ids: Iterable[str]) -> set[str]:
        """Which of ``ids`` this home has applied already (its own change sets included)."""
        return applied_in(self.journal.db, ids)

    def record_applied(self, project: str, change_id: str, version: int) -> None:
        """``change_id`` is applied here, as the project's ``version`` on the server."""
        with self.journal.transaction() as db:
            record_applied_all(db, project, [(change_id, version)])

    def unpublished(self, project: str) -> int:
        """How many of ``project``'s change sets wait to be published."""
        row = self.journal.db.execute(
            "SELECT COUNT(*) FROM shared_outbox WHERE project = ? AND published_at IS NULL",
            [project],
        ).fetchone()
        return int(row[0])

    def applied_through(self, project: str) -> int:
        """The project's highest server version applied here (0 for none): the next pull
        starts after it. Versions are applied in order, so every lower one is applied too."""
        row = self.journal.db.execute(
            "SELECT COALESCE(MAX(version), 0) FROM shared_applied WHERE project = ?", [project]
        ).fetchone()
        return int(row[0])


def add_in(db: Any, project: str, change: ChangeSet, *, change_id: str | None = None) -> str:
    """``Outbox.add`` inside the caller's transaction ``db`` (the gate's commit: a change
    and its way to the team are journaled together, or neither is)."""
    change_id = change_id or str(uuid.uuid4())
    payload = change.model_dump_json(exclude_none=True)
    now = now_iso()
    db.execute(
        "INSERT OR IGNORE INTO shared_outbox (id, project, origin, turn, created_at,"
        " payload) VALUES (?, ?, ?, ?, ?, ?)",
        [change_id, project, change.origin, change.turn, now, payload],
    )
    db.execute(
        "INSERT OR IGNORE INTO shared_applied (id, project, version, applied_at)"
        " VALUES (?, ?, NULL, ?)",
        [change_id, project, now],
    )
    return change_id


def applied_in(db: Any, ids: Iterable[str]) -> set[str]:
    """``Outbox.applied`` on ``db``: inside the caller's transaction, what is recorded now."""
    wanted = list(ids)
    found: set[str] = set()
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        marks = ", ".join("?" * len(chunk))
        sql = f"SELECT id FROM shared_applied WHERE id IN ({marks})"
        found.update(row[0] for row in db.execute(sql, chunk))
    return found


def record_applied_all(db: Any, project: str, applied: Iterable[tuple[str, int]]) -> None:
    """``Outbox.record_applied`` for each (change set id, version) ``applied``, inside the
    caller's transaction ``db`` (the gate's commit of the pulled change sets: applied and
    recorded together, or neither)."""
    at = now_iso()
    db.conn.executemany(
        "INSERT INTO shared_applied (id, project, version, applied_at)"
        " VALUES (?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET version = excluded.version",
        [[change_id, project, version, at] for change_id, version in applied],
    )


# -- which projects this home shares: memory_settings rows ``shared:PROJECT`` -------------
SHARED_KEY = "shared:"


def shared_projects(db: Any) -> dict[str, dict[str, Any]]:
    """``{project: {"url", "role", "read_only"}}`` for every project this home shares (the
    URL without a password: libpq reads it from PGPASSWORD or ~/.pgpass)."""
    rows = db.execute(  # a range of the key, not LIKE: read before every commit, it uses
        # the key's index and is not planned again each time (a LIKE pattern bound as a value is)
        "SELECT key, value FROM memory_settings WHERE key >= ? AND key < ?",
        [SHARED_KEY, SHARED_KEY[:-1] + chr(ord(SHARED_KEY[-1]) + 1)],
    ).fetchall()
    return {key.removeprefix(SHARED_KEY): json.loads(value) for key, value in rows}


def set_shared(db: Any, project: str, entry: dict[str, Any]) -> None:
    """Remember that ``project`` is shared (``entry``: its url, role and read_only)."""
    db.execute(
        "INSERT INTO memory_settings (key, value) VALUES (?, ?)"
        " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        [SHARED_KEY + project, json.dumps(entry)],
    )
