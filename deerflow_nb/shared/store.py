"""The store contract on PostgreSQL (``storage/contract.py``): ``PostgresStore``.

A shared project's facts and summary live in the server's tables (``migrations.py``, m002),
kept current two ways, both under the same policies: a commit through this store (which is
also the project's change set, so members' homes pull it), and every change set a member
publishes (a trigger applies its effect to the project's facts in the publishing
transaction, so what members' homes hold after a sync is what a snapshot reads). A role's
own facts, summaries, threads, messages and fold queue are its own rows (``owner``): no
other member reads them. ``Memory``'s sharing puts none of those on the server; they are
here so that a whole home can live on the server (JupyterHub) and so that the contract's
suite runs unchanged.

**Revision.** One counter per database (``deerflow.revisions``): every commit here and every
published change set, of any project, takes the next one under one advisory lock. So a
``base`` read from any scope is stale after anyone's commit (a busy server means more
retries, never a lost update), and a revision names one state of everything a role may see
(a publish of several change sets, or a commit with its change sets, is one). A project's
own order is its ``version`` (``projects.version``), which members' pulls follow. A revision
row keeps the provenance: the role (``person``, the server's ``current_user``), the origin,
reason and source, and the server's time.

psycopg is imported inside functions; one connection serves a store, one call at a time.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ..projects import DEFAULT_PROJECT
from ..storage.contract import (
    PROJECTS_GROUP,
    Changes,
    Event,
    Fact,
    Lease,
    LeaseLost,
    Revision,
    Scope,
    Snapshot,
    StaleRevision,
)
from .connect import (
    SharedError,
    add_member_command,
    member_role,
    no_member,
    opened,
    where,
)
from .exchange import team_diff
from .migrations import GUARD_STATE, REVISION_LOCK

if TYPE_CHECKING:
    import psycopg

ME = "current_user"  # the owner of a role's own rows, as the server knows it


def _place(project: str | None) -> str:
    """The ``project`` column of a fact of ``project`` ('' for a role's own)."""
    return project or ""


def _text(text: str) -> tuple[str, Any]:
    """(the text as a ``text`` column holds it, and as ``raw`` when it differs: NUL)."""
    from psycopg.types.json import Json

    return (text.replace("\x00", ""), Json(text)) if "\x00" in text else (text, None)


def _summary_place(key: str) -> str:
    group, _, name = key.partition(".")
    return name if group == PROJECTS_GROUP else ""


class PostgresStore:
    """A ``Store`` on a PostgreSQL database set up by ``deerflow-nb team init``, read and
    written as the URL's role: row-level security decides which projects it sees, and a
    write to a project it may not change is the one-line ``SharedError``."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn
        self._lock = threading.Lock()  # one connection: one operation at a time
        row = conn.execute(
            "SELECT r.rolsuper OR r.rolbypassrls OR pg_has_role(c.relowner, 'MEMBER')"
            " FROM pg_roles r, pg_class c WHERE r.rolname = current_user"
            " AND c.oid = 'deerflow.facts'::regclass"
        ).fetchone()
        self._unbound = bool(row and row[0])  # the policies do not apply to this role

    @classmethod
    def open(cls, url: str) -> PostgresStore:
        """A store on the database at ``url`` (``SharedError`` when it cannot connect)."""
        import psycopg

        conn = opened(url)
        try:
            return cls(conn)
        except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
            conn.close()
            raise SharedError(
                f"no store tables in the database at {where(url)}: its owner runs "
                "`deerflow-nb team init URL` (again, after an upgrade) first"
            ) from None

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Connection]:
        with self._lock, self.conn.transaction():
            yield self.conn

    # -- memory ------------------------------------------------------------------------------
    def snapshot(self, scope: Scope) -> Snapshot:
        """What ``scope`` sees, read in one repeatable-read transaction."""
        projects = sorted(scope.projects)
        with self._lock, self.conn.transaction():
            conn = self.conn
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            revision = conn.execute("SELECT deerflow.revision()").fetchone()[0]  # type: ignore[index]
            wanted = (
                f"(project = '' AND owner = {ME} AND %(user)s) OR (project <> ''"
                " AND (%(every)s OR project = ANY(%(projects)s)))"
            )
            args = {"user": scope.user, "every": scope.every, "projects": projects}
            rows = conn.execute(
                "SELECT id, content, raw, category, confidence, project, extra"
                " FROM deerflow.facts"
                f" WHERE {wanted} ORDER BY position",
                args,
            ).fetchall()
            summaries = conn.execute(
                f"SELECT key, text, raw FROM deerflow.summaries WHERE {wanted}", args
            ).fetchall()
        facts = [
            Fact(i, c if raw is None else raw, cat, conf, p or None, MappingProxyType(extra))
            for i, c, raw, cat, conf, p, extra in rows
        ]
        texts = {key: text if raw is None else raw for key, text, raw in summaries}
        return Snapshot.of(scope, revision, facts, texts)

    def commit(self, changes: Changes, *, base: Revision, origin: str | None = None) -> Revision:
        """``changes`` as one transaction with its events and the next revision, if
        ``base`` is still the database's revision; ``origin`` (user, model, fold,
        maintenance) is kept with the role and the time as the revision's provenance. A
        removal past the server's wipe guard is the one-line ``SharedError``, nothing
        written."""
        import psycopg

        changes.check()
        try:
            return self._commit(changes, base, origin)
        except psycopg.Error as exc:
            if getattr(exc, "sqlstate", None) != GUARD_STATE:
                raise
            diag = getattr(exc, "diag", None)
            said = getattr(diag, "message_primary", None) or str(exc).splitlines()[0]
            raise SharedError(
                f"the server's wipe guard refused the commit ({said}): a project's owner "
                "raises the bound with `deerflow-nb team limit PROJECT N --url URL`"
            ) from None

    def _commit(self, changes: Changes, base: Revision, origin: str | None) -> Revision:
        from psycopg.types.json import Json

        with self._transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", [REVISION_LOCK])
            current = conn.execute("SELECT deerflow.revision()").fetchone()[0]  # type: ignore[index]
            if current != base:
                raise StaleRevision(f"base {base} is stale: the store is at {current}")
            revision = current + 1
            ids = sorted({f.id for f in changes.put} | changes.remove)
            found: dict[str, list[tuple[str, int]]] = {}
            for fid, project, position in conn.execute(
                "SELECT id, project, position FROM deerflow.facts WHERE id = ANY(%s)"
                f" AND (project <> '' OR owner = {ME}) ORDER BY position",
                [ids],
            ):
                found.setdefault(fid, []).append((project, position))
            touched = {_place(f.project) for f in changes.put}
            touched |= {p for fid in changes.remove for p, _ in found.get(fid, [])}
            touched |= {p for f in changes.put for p, _ in found.get(f.id, [])}
            touched |= {_summary_place(key) for key in changes.summaries}
            self._may_write(conn, touched - {""})
            projects = sorted(touched - {""})
            conn.execute(
                "INSERT INTO deerflow.revisions (revision, project, origin, reason, source)"
                " VALUES (%s, %s, %s, %s, %s)",
                [revision, projects[0] if len(projects) == 1 else None, origin,
                 changes.reason, changes.source],
            )  # fmt: skip
            if changes.remove:
                conn.execute(
                    "DELETE FROM deerflow.facts WHERE id = ANY(%s)"
                    f" AND (project <> '' OR owner = {ME})",
                    [sorted(changes.remove)],
                )
            for fact in changes.put:
                self._put(conn, fact, found.get(fact.id, []), origin)
            for key, text in changes.summaries.items():
                self._summary(conn, key, text)
            where = {f.id: _place(f.project) for f in changes.put}
            for fid, places in found.items():
                where.setdefault(fid, places[0][0])
            for seq, event in enumerate(changes.events):
                place = (
                    _summary_place(event.section)
                    if event.section
                    else where.get(event.fact_id or "", "")
                )
                conn.execute(
                    "INSERT INTO deerflow.events (revision, seq, project, owner, event)"
                    f" VALUES (%s, %s, %s, CASE WHEN %s = '' THEN {ME} ELSE '' END, %s)",
                    [revision, seq, place, place, Json(dataclasses.asdict(event))],
                )
            self._publish(conn, changes, found, projects, origin)
        return Revision(revision)

    @staticmethod
    def _publish(
        conn: psycopg.Connection,
        changes: Changes,
        found: dict[str, list[tuple[str, int]]],
        projects: list[str],
        origin: str | None,
    ) -> None:
        """The commit's effect on each team project (one in ``deerflow.projects``) as a
        change set, in the commit's transaction: the project's next version, which the
        members' homes pull as a teammate's change (its trigger re-applies it: a no-op)."""
        from psycopg.types.json import Jsonb

        from ..schema.changes import ChangeSet

        team = conn.execute(
            "SELECT name FROM deerflow.projects WHERE name = ANY(%s)", [projects]
        ).fetchall()
        for (project,) in team:
            diff = team_diff(changes, found, project)
            if not diff:
                continue
            change = ChangeSet(
                origin=origin or "user", reason=changes.reason, source="team", diff=diff,
                project=project,
            )  # fmt: skip
            conn.execute(
                "INSERT INTO deerflow.change_sets (id, project, origin, created, payload)"
                " VALUES (gen_random_uuid(), %s, %s, now(), %s)",
                [project, change.origin, Jsonb(change.model_dump(mode="json", exclude_none=True))],
            )

    def _may_write(self, conn: psycopg.Connection, projects: set[str]) -> None:
        """Refuse, before anything is written, a change to a project this role may not
        change (the policies would skip its rows silently)."""
        if self._unbound:
            return
        for project in sorted(projects):
            if not conn.execute("SELECT deerflow.writes(%s, '')", [project]).fetchone()[0]:  # type: ignore[index]
                role, read_only = member_role(conn, project)
                if read_only:
                    raise SharedError(
                        f"{role} is a read-only member of project {project}: ask its owner to "
                        f"run `{add_member_command(project, role)}` (without --read-only)"
                    )
                raise no_member(role, project)

    @staticmethod
    def _put(
        conn: psycopg.Connection, fact: Fact, found: list[tuple[str, int]], origin: str | None
    ) -> None:
        """Add ``fact``, or replace the one with its id in place (its position kept); one
        that lived in another project moves here."""
        from psycopg.types.json import Json

        place = _place(fact.project)
        values = [place, place, fact.id, *_text(fact.content), fact.category, fact.confidence,
                  Json(dict(fact.extra)), origin]  # fmt: skip
        if any(p == place for p, _ in found):
            conn.execute(
                "UPDATE deerflow.facts SET content = %s, raw = %s, category = %s, confidence = %s,"
                f" extra = %s, origin = %s, person = {ME}, updated = now() WHERE project = %s"
                f" AND owner = CASE WHEN %s = '' THEN {ME} ELSE '' END AND id = %s",
                [*values[3:], place, place, fact.id],
            )
            return
        position = found[0][1] if found else None
        if found:  # it moves: out of where it was (a removal there), in here
            conn.execute(
                "DELETE FROM deerflow.facts WHERE id = %s AND project = %s"
                f" AND (project <> '' OR owner = {ME})",
                [fact.id, found[0][0]],
            )
        conn.execute(
            "INSERT INTO deerflow.facts (project, owner, id, content, raw, category, confidence,"
            f" extra, origin, position) VALUES (%s, CASE WHEN %s = '' THEN {ME} ELSE '' END,"
            " %s, %s, %s, %s, %s, %s, %s, coalesce(%s, nextval('deerflow.fact_position')))",
            [*values, position],
        )

    @staticmethod
    def _summary(conn: psycopg.Connection, key: str, text: str) -> None:
        place = _summary_place(key)
        owner = f"CASE WHEN %s = '' THEN {ME} ELSE '' END"
        conn.execute(
            f"DELETE FROM deerflow.summaries WHERE project = %s AND owner = {owner} AND key = %s",
            [place, place, key],
        )
        if text:
            conn.execute(
                "INSERT INTO deerflow.summaries (project, owner, key, text, raw)"
                f" VALUES (%s, {owner}, %s, %s, %s)",
                [place, place, key, *_text(text)],
            )

    def events(self, revision: Revision) -> list[Event]:
        """The events of ``revision`` this role may read, in order."""
        with self._transaction() as conn:
            rows = conn.execute(
                "SELECT event FROM deerflow.events WHERE revision = %s"
                f" AND (project <> '' OR owner = {ME}) ORDER BY seq",
                [revision],
            ).fetchall()
        return [Event(**row[0]) for row in rows]

    # -- threads and messages: the role's own ----------------------------------------------------
    def thread_for(self, name: str, project: str | None) -> str:
        project = project or DEFAULT_PROJECT
        with self._transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(current_user || '/threads'))")
            candidate, n = name, 0
            while True:
                conn.execute(
                    "INSERT INTO deerflow.threads (id, project) VALUES (%s, %s)"
                    " ON CONFLICT DO NOTHING",
                    [candidate, project],
                )
                row = conn.execute(
                    f"SELECT project FROM deerflow.threads WHERE owner = {ME} AND id = %s",
                    [candidate],
                ).fetchone()
                if row and row[0] == project:
                    return candidate
                n += 1
                candidate = f"{name} @{project}" + (f" #{n}" if n > 1 else "")

    def add_messages(
        self, thread: str, messages: Sequence[dict[str, Any]], *, project: str | None = None
    ) -> int:
        from psycopg.types.json import Json

        with self._transaction() as conn:
            conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext(current_user || '/' || %s))", [thread]
            )
            conn.execute(
                "INSERT INTO deerflow.threads (id, project) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                [thread, project or DEFAULT_PROJECT],
            )
            last = self._last_seq(conn, thread)
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO deerflow.messages (thread, seq, message) VALUES (%s, %s, %s)",
                    [(thread, last + i, Json(dict(m))) for i, m in enumerate(messages, 1)],
                )
            return last + len(messages)

    @staticmethod
    def _last_seq(conn: psycopg.Connection, thread: str) -> int:
        row = conn.execute(
            f"SELECT coalesce(max(seq), 0) FROM deerflow.messages WHERE owner = {ME}"
            " AND thread = %s",
            [thread],
        ).fetchone()
        return int(row[0]) if row else 0

    def messages(self, thread: str, after_seq: int = 0) -> list[dict[str, Any]]:
        with self._transaction() as conn:
            rows = conn.execute(
                f"SELECT message FROM deerflow.messages WHERE owner = {ME} AND thread = %s"
                " AND seq > %s ORDER BY seq",
                [thread, after_seq],
            ).fetchall()
        return [dict(row[0]) for row in rows]

    # -- the fold queue: leases on the server's clock -----------------------------------------
    def enqueue(self, thread: str, *, after: float = 0.0) -> None:
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO deerflow.queue (thread, due, through_seq) VALUES (%s,"
                " clock_timestamp() + make_interval(secs => %s), %s) ON CONFLICT (owner, thread)"
                " DO UPDATE SET due = excluded.due, through_seq = excluded.through_seq",
                [thread, after, self._last_seq(conn, thread)],
            )

    def queued(self) -> list[str]:
        with self._transaction() as conn:
            rows = conn.execute(
                f"SELECT thread FROM deerflow.queue WHERE owner = {ME} ORDER BY due, thread"
            ).fetchall()
        return [row[0] for row in rows]

    def claim(self, owner: str, ttl: float) -> Lease | None:
        """A due entry whose lease is absent or expired (by the server's clock); entries
        another connection is claiming are skipped, never waited for."""
        with self._transaction() as conn:
            row = conn.execute(
                "UPDATE deerflow.queue q SET lease_owner = %s,"
                " lease_until = clock_timestamp() + make_interval(secs => %s)"
                " WHERE (q.owner, q.thread) = (SELECT owner, thread FROM deerflow.queue"
                f" WHERE owner = {ME} AND due <= clock_timestamp() AND (lease_until IS NULL"
                " OR lease_until < clock_timestamp()) ORDER BY due LIMIT 1"
                " FOR UPDATE SKIP LOCKED)"
                " RETURNING thread, extract(epoch FROM lease_until)::float8, through_seq",
                [owner, ttl],
            ).fetchone()
        return Lease(row[0], owner, row[1], row[2]) if row else None

    def renew(self, lease: Lease, ttl: float) -> Lease:
        with self._transaction() as conn:
            row = conn.execute(
                "UPDATE deerflow.queue SET lease_until = clock_timestamp()"
                f" + make_interval(secs => %s) WHERE owner = {ME} AND thread = %s"
                " AND lease_owner = %s AND lease_until >= clock_timestamp()"
                " RETURNING extract(epoch FROM lease_until)::float8",
                [ttl, lease.thread, lease.owner],
            ).fetchone()
        if row is None:
            raise LeaseLost(f"the lease on {lease.thread!r} expired")
        return dataclasses.replace(lease, expires_at=row[0])

    def release(self, lease: Lease, *, done: bool = False) -> None:
        free = "UPDATE deerflow.queue SET lease_owner = NULL, lease_until = NULL"
        mine = f" WHERE owner = {ME} AND thread = %s AND lease_owner = %s"
        with self._transaction() as conn:
            if not done:
                conn.execute(free + mine, [lease.thread, lease.owner])
                return
            row = conn.execute(
                "SELECT through_seq FROM deerflow.queue" + mine
                + " AND lease_until >= clock_timestamp() FOR UPDATE",
                [lease.thread, lease.owner],
            ).fetchone()  # fmt: skip
            if row is None:
                raise LeaseLost(f"the lease on {lease.thread!r} expired")
            if row[0] <= lease.through_seq:
                conn.execute(
                    f"DELETE FROM deerflow.queue WHERE owner = {ME} AND thread = %s",
                    [lease.thread],
                )
            else:
                conn.execute(free + mine, [lease.thread, lease.owner])
