"""Setting up a team's PostgreSQL: ``deerflow-nb team init URL``, ``team add`` and
``team limit`` (the bound of the server's wipe guard).

``init`` creates the ``deerflow`` schema, its tables and policies (``migrations.py``);
``add_member`` makes a role a member of a project, creating the project and the login
role when missing. Both run as a role that may create roles (the server's superuser, or
the owner of the schema with CREATEROLE). A new role's password is sent to the server
already hashed (SCRAM), so it appears in no server log, and is never stored by us.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from .connect import SharedError, connect
from .migrations import MEMBER_GROUP, migrate

if TYPE_CHECKING:
    import psycopg

# A role or project name: what a person can type unquoted in psql, within PostgreSQL's
# 63-byte identifier limit.
T = TypeVar("T")
NAME = re.compile(r"[a-z_][a-z0-9_\-.]{0,62}")


def init(url: str) -> list[str]:
    """Bring the shared store at ``url`` to this version's schema; the migrations run."""
    with connect(url) as conn:
        return _as_admin(lambda: migrate(conn))


def add_member(
    url: str, project: str, role: str, *, read_only: bool = False, password: str | None = None
) -> str:
    """Make ``role`` a member of ``project`` (read-only or not), creating either when
    missing, with ``password`` for a new login role; what was done, in one line."""
    for what, name in (("project", project), ("role", role)):
        if not NAME.fullmatch(name):
            raise SharedError(
                f"{what} name {name!r}: use lower-case letters, digits, '_', '-' or '.' "
                "(at most 63, not starting with a digit)"
            )
    with connect(url) as conn:
        return _as_admin(lambda: _add(conn, project, role, read_only, password))


def set_bound(url: str, project: str, removals: int, share: float | None = None) -> str:
    """Let ``project``'s members remove at most max(``removals``, ``share`` of its facts)
    of its facts in one UTC day, all together (the server's wipe guard); as the project's
    owner or the schema's; what the bound now is, in one line."""
    if removals < 0 or (share is not None and not 0 <= share <= 1):
        raise SharedError("the bound: a count of facts (0 or more) and a share from 0 to 1")
    with connect(url) as conn:
        return _as_admin(lambda: _bound(conn, project, removals, share))


def _bound(conn: psycopg.Connection, project: str, removals: int, share: float | None) -> str:
    with conn.transaction():
        row = conn.execute(
            "UPDATE deerflow.projects SET max_removals = %s,"
            " max_removal_share = coalesce(%s, max_removal_share) WHERE name = %s"
            " RETURNING max_removals, max_removal_share",
            [removals, share, project],
        ).fetchone()
    if row is None:
        raise SharedError(
            f"no project {project} that this role owns: its owner, or the role that ran "
            "`deerflow-nb team init`, sets its bound"
        )
    return (
        f"project {project}: its members may remove at most max({row[0]}, {row[1]:.0%} of its "
        "facts) of its facts in one UTC day, all together"
    )


def _add(
    conn: psycopg.Connection, project: str, role: str, read_only: bool, password: str | None
) -> str:
    from psycopg import sql

    done = []
    with conn.transaction():
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role]).fetchone()
        if not exists:
            create = sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role))
            if password:
                hashed = conn.pgconn.encrypt_password(
                    password.encode(), role.encode(), b"scram-sha-256"
                )
                create += sql.SQL(" PASSWORD {}").format(sql.Literal(hashed.decode()))
            conn.execute(create)
            done.append(f"created role {role}" + ("" if password else " (no password set)"))
        conn.execute(
            sql.SQL("GRANT {} TO {}").format(sql.Identifier(MEMBER_GROUP), sql.Identifier(role))
        )
        made = conn.execute(
            "INSERT INTO deerflow.projects (name) VALUES (%s) ON CONFLICT DO NOTHING", [project]
        )
        if made.rowcount:
            done.append(f"created project {project}")
        conn.execute(
            "INSERT INTO deerflow.members (project, role, read_only) VALUES (%s, %s, %s)"
            " ON CONFLICT (project, role) DO UPDATE SET read_only = excluded.read_only",
            [project, role, read_only],
        )
    done.append(f"{role} is a {'read-only ' if read_only else ''}member of {project}")
    return "; ".join(done)


def _as_admin(action: Callable[[], T]) -> T:
    """``action``'s result; a refusal for want of rights as the one line naming who can."""
    import psycopg

    try:
        return action()
    except psycopg.errors.InsufficientPrivilege as exc:
        raise SharedError(
            f"this role may not set up the shared store ({str(exc).splitlines()[0]}): run it "
            "as the server's superuser or as a role with CREATEROLE that owns the schema"
        ) from None
    except psycopg.errors.UndefinedTable:
        raise SharedError(
            "no deerflow schema in this database: run `deerflow-nb team init URL` first"
        ) from None
