"""The ``server_traits`` and ``server_leases`` rows: what a model server accepts, and who
is using it in the foreground now.

A server is named by its address without user info (``scrub.public_url``): no password
rests in these rows. A trait (``cap_param`` → ``max_tokens``, say) is learned from a
server's own 400 once and read back by every kernel sharing the home. A lease is one row
per foreground turn in flight on an endpoint, owned by ``host:pid`` and kept alive by its
holder's heartbeat (``renew_lease``): it counts only until ``expires_at``, so a holder that
died (on another host, or whose pid was reused) stops blocking folds within
``lease_seconds()``; a local owner that is gone stops at once. Reads find nothing on a
journal from before them.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from ..scrub import public_url
from .db import Connection, dict_rows, has_table, now_iso, owner_is_live, this_owner

if TYPE_CHECKING:
    import sqlite_utils

LEASE_SECONDS = 30.0  # a lease lapses this long after its holder's last heartbeat
MAX_LEASE_SECONDS = 60.0  # the most a dead holder can hold folds off
LEASE_ENV = "DEERFLOW_NB_LEASE_SECONDS"  # sets it (bounded by MAX_LEASE_SECONDS)


def lease_seconds() -> float:
    """How long a lease counts after a heartbeat: ``DEERFLOW_NB_LEASE_SECONDS`` when it is
    a positive number, else ``LEASE_SECONDS``; never more than ``MAX_LEASE_SECONDS``."""
    try:
        value = float(os.environ.get(LEASE_ENV) or LEASE_SECONDS)
    except ValueError:
        value = LEASE_SECONDS
    return min(value if value > 0 else LEASE_SECONDS, MAX_LEASE_SECONDS)


def traits(db: Connection, endpoint: str) -> dict[str, str]:
    """Every trait learned for ``endpoint``, by name."""
    if not has_table(db, "server_traits"):
        return {}
    sql = "SELECT trait, value FROM server_traits WHERE endpoint = ?"
    return {r["trait"]: r["value"] for r in dict_rows(db, sql, [endpoint])}


def remember(db: sqlite_utils.Database, endpoint: str, trait: str, value: str) -> None:
    """Inside the caller's transaction: ``trait`` of ``endpoint`` is ``value`` from now on."""
    db.execute(
        "INSERT INTO server_traits (endpoint, trait, value, learned_at) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (endpoint, trait) DO UPDATE SET value = excluded.value,"
        " learned_at = excluded.learned_at",
        [endpoint, trait, value, now_iso()],
    )


def take_lease(db: sqlite_utils.Database, lease_id: str, endpoint: str) -> None:
    """Inside the caller's transaction: this process runs a foreground request on
    ``endpoint`` until ``drop_lease``, renewing it (``renew_lease``) while it does."""
    db.execute(
        "INSERT OR REPLACE INTO server_leases (id, endpoint, owner, started_at, expires_at)"
        " VALUES (?, ?, ?, ?, ?)",
        [lease_id, endpoint, this_owner(), now_iso(), time.time() + lease_seconds()],
    )


def renew_lease(db: sqlite_utils.Database, lease_id: str) -> bool:
    """Inside the caller's transaction: the holder's heartbeat; False when the lease is
    gone (swept after it lapsed), so the holder takes a new one."""
    cursor = db.execute(
        "UPDATE server_leases SET expires_at = ? WHERE id = ?",
        [time.time() + lease_seconds(), lease_id],
    )
    return cursor.rowcount > 0


def drop_lease(db: sqlite_utils.Database, lease_id: str) -> None:
    """Inside the caller's transaction: the foreground request is over."""
    db.execute("DELETE FROM server_leases WHERE id = ?", [lease_id])


def _counts(row: dict[str, Any], now: float) -> bool:
    """A lease holds folds off while its heartbeat is fresh and its owner may be alive."""
    return (row.get("expires_at") or 0) > now and owner_is_live(row["owner"])


def live_leases(db: Connection, endpoint: str) -> int:
    """How many foreground requests on ``endpoint`` run now in live processes."""
    if not has_table(db, "server_leases"):
        return 0
    sql = "SELECT * FROM server_leases WHERE endpoint = ?"
    now = time.time()
    return sum(1 for r in dict_rows(db, sql, [endpoint]) if _counts(r, now))


def holders(db: Connection) -> list[dict[str, Any]]:
    """Every lease row, for status: endpoint, owner (``host:pid``), since when, seconds
    left before it lapses without a heartbeat, and whether it holds folds off now."""
    if not has_table(db, "server_leases"):
        return []
    now = time.time()
    return [
        {
            "endpoint": r["endpoint"],
            "owner": r["owner"],
            "since": r["started_at"],
            "expires_in": round((r.get("expires_at") or now) - now, 1),
            "holds_folds": _counts(r, now),
        }
        for r in dict_rows(db, "SELECT * FROM server_leases ORDER BY started_at")
    ]


def sweep_dead(db: sqlite_utils.Database) -> int:
    """Inside the caller's transaction: drop leases that lapsed or whose owner died; how
    many."""
    now = time.time()
    dead = [r["id"] for r in dict_rows(db, "SELECT * FROM server_leases") if not _counts(r, now)]
    for lease_id in dead:
        db.execute("DELETE FROM server_leases WHERE id = ?", [lease_id])
    return len(dead)


def forget_user_info(db: sqlite_utils.Database) -> None:
    """Inside the caller's transaction (a migration's): every server row named by an
    address with user info is named by its ``public_url`` instead, and every embeddings
    cache key holding one is rekeyed, with ``secure_delete`` on so the old text is zeroed
    in the file rather than left in a free page."""
    db.execute("PRAGMA secure_delete = ON")
    try:
        for (endpoint,) in db.execute("SELECT DISTINCT endpoint FROM server_traits").fetchall():
            if public_url(endpoint) != endpoint:
                db.execute(
                    "UPDATE OR REPLACE server_traits SET endpoint = ? WHERE endpoint = ?",
                    [public_url(endpoint), endpoint],
                )
        db.execute("DELETE FROM server_leases")  # none has a heartbeat; live ones retake
        if has_table(db, "embeddings"):
            for (model,) in db.execute("SELECT DISTINCT model FROM embeddings").fetchall():
                spec, at, where = model.partition("@")
                if at and public_url(where) != where:
                    db.execute(
                        "UPDATE OR REPLACE embeddings SET model = ? WHERE model = ?",
                        [f"{spec}@{public_url(where)}", model],
                    )
    finally:
        db.execute("PRAGMA secure_delete = OFF")
