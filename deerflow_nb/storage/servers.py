"""The ``server_traits`` and ``server_leases`` rows: what a model server accepts, and who
is using it in the foreground now.

A trait (``cap_param`` → ``max_tokens``, say) is learned from a server's own 400 once and
read back by every kernel sharing the home. A lease is one row per foreground turn in
flight on an endpoint, owned by ``host:pid``; a lease whose owner died is not counted
(and is swept by the next holder). Reads find nothing on a journal from before them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .db import Connection, dict_rows, has_table, now_iso, owner_is_live, this_owner

if TYPE_CHECKING:
    import sqlite_utils


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
    ``endpoint`` until ``drop_lease``."""
    db.execute(
        "INSERT OR REPLACE INTO server_leases (id, endpoint, owner, started_at)"
        " VALUES (?, ?, ?, ?)",
        [lease_id, endpoint, this_owner(), now_iso()],
    )


def drop_lease(db: sqlite_utils.Database, lease_id: str) -> None:
    """Inside the caller's transaction: the foreground request is over."""
    db.execute("DELETE FROM server_leases WHERE id = ?", [lease_id])


def live_leases(db: Connection, endpoint: str) -> int:
    """How many foreground requests on ``endpoint`` run now in live processes."""
    if not has_table(db, "server_leases"):
        return 0
    rows = dict_rows(db, "SELECT owner FROM server_leases WHERE endpoint = ?", [endpoint])
    return sum(1 for r in rows if owner_is_live(r["owner"]))


def sweep_dead(db: sqlite_utils.Database) -> int:
    """Inside the caller's transaction: drop leases whose owner died; how many."""
    rows = dict_rows(db, "SELECT id, owner FROM server_leases")
    dead = [r["id"] for r in rows if not owner_is_live(r["owner"])]
    for lease_id in dead:
        db.execute("DELETE FROM server_leases WHERE id = ?", [lease_id])
    return len(dead)
