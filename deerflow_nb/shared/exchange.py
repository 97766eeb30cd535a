"""Publishing a home's change sets to the team's PostgreSQL and pulling the team's back.

``publish`` sends what waits in the home's outbox (``storage/outbox.py``) and marks it
published only after the server has committed it; the server keys change sets by their
uuid (``ON CONFLICT DO NOTHING``), so a publish repeated after a crash between the two
steps stores nothing twice. ``pull`` reads a project's change sets after a version, as
the member's role sees them (row-level security decides which). ``incoming`` yields the
ones this home has not applied yet, in version order. ``Listener`` waits for the
server's NOTIFY on a new change set, so a kernel need not poll (a timeout is the fallback).

``team_diff`` is what a ``PostgresStore`` commit publishes to a team project: the same
shape a home's gate publishes (``memory/updates/team_changes.shared_effect``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from itertools import groupby
from typing import TYPE_CHECKING, Any

from ..storage.contract import PROJECTS_GROUP
from .connect import (
    SharedError,
    connect,
    connection_error,
    member_role,
    no_member,
    opened,
    refused,
    where,
)
from .migrations import CHANNEL, GUARD_STATE

if TYPE_CHECKING:
    import psycopg

    from ..schema.changes import ChangeSet
    from ..storage.contract import Changes
    from ..storage.outbox import Outbox

BATCH = 500  # change sets read from the outbox, or pulled, at a time


def team_diff(
    changes: Changes, found: dict[str, list[tuple[str, int]]], project: str
) -> dict[str, Any]:
    """What ``changes`` does to ``project``'s facts and summary, in the shape members
    publish (``memory/updates/team_changes.shared_effect``), its texts without NUL (a
    change set is ``jsonb``); ``found``: where each id lived before."""

    def clean(text: str) -> str:
        return text.replace("\x00", "")

    before = {fid for fid, places in found.items() if any(p == project for p, _ in places)}
    diff: dict[str, Any] = {}
    gone = sorted(before & changes.remove)
    gone += sorted(f.id for f in changes.put if f.id in before and f.project != project)
    for fact in changes.put:
        if fact.project != project:
            continue
        if fact.id in before:
            edit = {"id": fact.id, "content": clean(fact.content), "category": fact.category}
            diff.setdefault("edits", []).append({**edit, "confidence": fact.confidence})
            continue
        kept = {k: fact.extra[k] for k in ("createdAt", "addedBy", "person") if k in fact.extra}
        new = {"id": fact.id, "content": clean(fact.content), "category": fact.category}
        new |= {"confidence": fact.confidence, **kept, "scope": "project", "project": project}
        diff.setdefault("newFacts", []).append(new)
    if gone:
        diff["factsToRemove"] = gone
    summary = changes.summaries.get(f"{PROJECTS_GROUP}.{project}")
    if summary is not None:
        context = {"summary": clean(summary), "shouldUpdate": True, "project": project}
        diff["projectContext"] = context
    return diff


@dataclass(frozen=True)
class SharedChange:
    """A change set as the shared store holds it: the project's ``version`` it made, and
    who sent it (``person``, a role), from which ``origin`` and ``turn``, and when
    (``created``, by the sender's clock; ``published``, when the server stored it, by its
    own)."""

    id: str
    project: str
    version: int
    origin: str
    person: str
    turn: str | None
    created: datetime
    change: ChangeSet
    published: datetime | None = None


@contextmanager
def _using(url: str, conn: psycopg.Connection | None) -> Iterator[psycopg.Connection]:
    """``conn`` when the caller has one (a sync uses one for all its steps), else a
    connection to ``url`` of its own, closed afterwards."""
    if conn is not None:
        yield conn
        return
    with connect(url) as own:
        yield own


def publish(
    outbox: Outbox,
    url: str,
    only: Collection[str] | None = None,
    conn: psycopg.Connection | None = None,
) -> int:
    """Send every change set waiting in ``outbox`` (of the projects in ``only``, when
    given) to the shared store at ``url`` (on ``conn`` when given), one transaction per
    project; how many the store did not hold yet. A project this role may not write, or
    whose change set the server's wipe guard refuses (a day's removals bounded across all
    members; the ones before it are sent), is the one-line ``SharedError`` after the
    other projects are sent: its change sets keep waiting, in order."""
    import psycopg

    stored = 0
    refusal: SharedError | None = None
    skip: set[str] = set()  # projects refused in this publish
    with _using(url, conn) as conn:
        while waiting := outbox.waiting(BATCH, skip=skip, only=only):
            sent = []
            for project, group in groupby(waiting, key=lambda item: item.project):
                items = list(group)
                taken: list[str] = []
                try:
                    with conn.transaction():
                        for item in items:
                            try:
                                with conn.transaction():  # a savepoint: the guard stops here
                                    cursor = conn.execute(
                                        "INSERT INTO deerflow.change_sets (id, project, origin,"
                                        " turn, created, payload) VALUES (%s, %s, %s, %s, %s, %s)"
                                        " ON CONFLICT (id) DO NOTHING",
                                        [item.id, project, item.origin, item.turn,
                                         item.created_at, psycopg.types.json.Jsonb(item.payload)],
                                    )  # fmt: skip
                            except psycopg.Error as exc:
                                if getattr(exc, "sqlstate", None) != GUARD_STATE:
                                    raise
                                skip.add(project)
                                refusal = refusal or guarded(exc, project)
                                break
                            stored += cursor.rowcount
                            taken.append(item.id)
                except psycopg.errors.InsufficientPrivilege as exc:
                    skip.add(project)
                    try:
                        refused(conn, exc, project)
                    except SharedError as error:
                        refusal = refusal or error
                    continue
                sent += taken
            outbox.mark_published(sent)
    if refusal:
        raise PartlyRefused(str(refusal), stored)
    return stored


class PartlyRefused(SharedError):
    """A publish the database refused for some project: ``stored`` counts the change sets
    it did take (of the other projects, and of that one before the refused change set)."""

    def __init__(self, message: str, stored: int) -> None:
        super().__init__(message)
        self.stored = stored


def guarded(exc: Exception, project: str) -> SharedError:
    """The one line for a change set the server's wipe guard refused: it waits here."""
    diag = getattr(exc, "diag", None)
    said = getattr(diag, "message_primary", None) or str(exc).splitlines()[0]
    return SharedError(
        f"the server refused a change set of {project} ({said}): it waits in the outbox "
        f"until a day's bound allows it; its owner raises the bound with `deerflow-nb team "
        f"limit {project} N --url URL`"
    )


def membership(url: str, project: str, conn: psycopg.Connection | None = None) -> tuple[str, bool]:
    """(this URL's role, whether it is a read-only member) of ``project``, as the database
    says (on ``conn`` when given); the one-line ``SharedError`` naming who can fix it when
    the role is no member."""
    import psycopg

    with _using(url, conn) as conn:
        try:
            role, read_only = member_role(conn, project)
        except psycopg.errors.UndefinedTable:
            raise SharedError(
                f"no deerflow schema in the database at {where(url)}: its owner runs "
                "`deerflow-nb team init URL` first"
            ) from None
    if read_only is None:
        raise no_member(role, project)
    return str(role), bool(read_only)


def roster(
    url: str, project: str, conn: psycopg.Connection | None = None
) -> tuple[str, bool, list[dict[str, object]]]:
    """``membership`` and the project's members (``{"role", "read_only"}`` by role, which
    row-level security lets a member read for its own projects), in one query: the views
    show them offline."""
    import psycopg

    with _using(url, conn) as conn:
        try:
            row = conn.execute(
                "SELECT current_user::text, COALESCE(json_agg(json_build_object('role',"
                " role::text, 'read_only', read_only) ORDER BY role), '[]'::json)"
                " FROM deerflow.members WHERE project = %s",
                [project],
            ).fetchone()
        except psycopg.errors.UndefinedTable:
            raise SharedError(
                f"no deerflow schema in the database at {where(url)}: its owner runs "
                "`deerflow-nb team init URL` first"
            ) from None
    role, found = (str(row[0]), list(row[1])) if row else ("this role", [])
    own = next((m for m in found if m.get("role") == role), None)
    if own is None:
        raise no_member(role, project)
    return role, bool(own.get("read_only")), found


def pull(url: str, project: str, since: int = 0, limit: int = BATCH) -> list[SharedChange]:
    """``project``'s change sets after version ``since``, in version order (at most
    ``limit``), as the URL's role may read them: none of a project it is no member of."""
    with connect(url) as conn:
        return _pull(conn, project, since, limit)


def _pull(conn: psycopg.Connection, project: str, since: int, limit: int) -> list[SharedChange]:
    rows = conn.execute(
        "SELECT c.id::text, v.project, v.version, c.origin, c.person, c.turn, c.created,"
        " c.payload, c.published FROM deerflow.versions v"
        " JOIN deerflow.change_sets c ON c.id = v.change_set"
        " WHERE v.project = %s AND v.version > %s ORDER BY v.version LIMIT %s",
        [project, since, limit],
    ).fetchall()
    return [SharedChange(*row[:7], _change_set(row[7]), row[8]) for row in rows]


def _change_set(payload: object) -> ChangeSet:
    """A pulled payload as a ``ChangeSet``; one that is not (a member's client may send
    anything) is an empty diff, applied as nothing and recorded, so it blocks no pull."""
    from pydantic import ValidationError

    from ..schema.changes import ChangeSet

    try:
        return ChangeSet.model_validate(payload)
    except (ValidationError, ValueError):
        return ChangeSet(origin="user", reason="unreadable", source="team", diff={})


def unapplied(conn: psycopg.Connection, outbox: Outbox, project: str) -> list[SharedChange]:
    """Every change set of ``project`` after the last one applied here, in version order,
    this home's own coming back among them: the caller applies the others and records
    all of them at once (``outbox.applied`` tells which are which)."""
    changes: list[SharedChange] = []
    since = outbox.applied_through(project)
    while page := _pull(conn, project, since, BATCH):
        changes += page
        since = page[-1].version
        if len(page) < BATCH:
            break
    return changes


def incoming(outbox: Outbox, url: str, project: str) -> Iterator[SharedChange]:
    """The change sets of ``project`` this home has not applied, in version order.

    The caller hands each to the gate and then calls ``outbox.record_applied`` for it
    (whatever the gate decided) before taking the next: the versions recorded are what the
    next pull starts after, so none is passed over, and one already applied (this home's
    own, coming back) is recorded here without being yielded."""
    with connect(url) as conn:
        while changes := _pull(conn, project, outbox.applied_through(project), BATCH):
            known = outbox.applied(change.id for change in changes)
            for change in changes:
                if change.id in known:
                    outbox.record_applied(project, change.id, change.version)
                    continue
                yield change
                if not outbox.applied([change.id]):
                    raise RuntimeError(
                        f"change set {change.id} was not recorded applied: call "
                        "outbox.record_applied for each change set before the next"
                    )
            if len(changes) < BATCH:
                return


class Listener:
    """A connection LISTENing for published change sets (any project: the notice carries
    only ``md5`` of the publisher's role, and the member pulls what its role may read).
    Its ``fileno`` lets a background sync wait on several servers and a wake-up at once
    (``select``)."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn
        # A notice of this role's own publish: its change sets are recorded already.
        self.own = hashlib.md5(str(conn.info.user).encode(), usedforsecurity=False).hexdigest()

    @classmethod
    def open(cls, url: str) -> Listener:
        """A new ``Listener`` on ``url`` (``close`` it); ``SharedError`` when unreachable."""
        import psycopg

        conn = opened(url)
        try:
            conn.execute(f"LISTEN {CHANNEL}")
        except psycopg.Error as exc:
            conn.close()
            raise connection_error(url, exc) from None
        return cls(conn)

    def fileno(self) -> int:
        return self.conn.pgconn.socket

    def wait(self, timeout: float) -> bool:
        """Whether a change set was published since the last wait, waiting up to
        ``timeout`` seconds for one; False after the timeout (then poll anyway)."""
        return any(True for _ in self.conn.notifies(timeout=timeout, stop_after=1))

    def drain(self) -> bool:
        """Whether a notice of another role's change set arrived, reading all of them
        without waiting; an ``OperationalError`` when the server went away."""
        return any([n.payload != self.own for n in self.conn.notifies(timeout=0.0)])

    def close(self) -> None:
        self.conn.close()


@contextmanager
def listen(url: str) -> Iterator[Listener]:
    """A ``Listener`` on ``url``, closed afterwards."""
    listener = Listener.open(url)
    try:
        yield listener
    finally:
        listener.close()
