"""Sharing a project's memory with a team through its PostgreSQL (issue 39).

``Sharing`` taps the gate: each commit's effect on the facts of a shared project
(``updates/team_changes.py``; never a user's own fact) is queued in the home's outbox in
the same journal transaction as the commit, so a kernel killed after a change still
publishes it later. ``sync`` publishes the outbox and hands the teammates' change sets it
pulls for a project to this home's gate as ``team`` changes, together (one commit and one
memory.json write, however many; each validated and held by review or the wipe guard on
its own, as a fold's would be), recording them applied in the gate's own transaction:
applied once. One connection per server serves all of a sync's steps and projects.

Which projects are shared, at which URL and as which role, is kept in journal.db
(``storage/outbox.py``) without any password: libpq reads it from ``PGPASSWORD`` or
``~/.pgpass``. A password given in a URL is used by this process only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..projects import check_project_name, fact_project, project_name
from ..schema.changes import ChangeSet
from ..shared.connect import add_member_command, without_password
from ..storage import outbox as rows
from ..storage.outbox import Outbox
from ..untrusted import clean_text, escape_markdown
from .scopes import project_summary
from .updates.gate import Refused
from .updates.team_changes import CONFLICT, TEAM, public_fact, shared_effect

# How often the background sync asks the database for a project's role and members (the
# views' ``members`` column; the database itself enforces who may write, at once).
ROSTER_SECONDS = 10.0

if TYPE_CHECKING:
    from ..config import Settings
    from ..shared.connect import Connection
    from ..shared.exchange import SharedChange
    from ..storage.journal import Journal
    from .listeners import Listeners
    from .updates.gate import Gate
    from .updates.updater import UpdateResult
    from .updates.write_protocol import Ledger


@dataclass
class SyncReport:
    """What one ``sync`` did: change sets published and pulled, applied or held for
    review, and a one-line problem per server that could not be reached or refused."""

    published: int = 0
    pulled: int = 0
    applied: int = 0
    held: list[int] = field(default_factory=list)  # pending ids of teammates' changes
    why_held: list[str] = field(default_factory=list)  # the gate's reason, for each
    waiting: int = 0  # change sets still in the outbox
    problems: list[str] = field(default_factory=list)

    def _head(self) -> str:
        pending = f": %memory pending #{', #'.join(map(str, self.held))}" if self.held else ""
        return (
            f"Team sync: published {self.published}, pulled {self.pulled} (applied "
            f"{self.applied}, held for review {len(self.held)}{pending}); {self.waiting} "
            "waiting to be published"
        )

    def _notes(self) -> list[str]:
        """Why each held change waits, and each problem (a server's words among them)."""
        held = [f"#{i} waits: {why}" for i, why in zip(self.held, self.why_held, strict=True)]
        return held + self.problems

    def _repr_markdown_(self) -> str:
        notes = [f"- {escape_markdown(note)}" for note in self._notes()]
        return "\n\n".join([f"**{self._head()}**", *notes])  # the head: our words only

    def __str__(self) -> str:
        return clean_text("\n".join([self._head(), *(f"- {note}" for note in self._notes())]))


class _Commit:
    """One commit on its way to the team (``team_changes.Shares``)."""

    def __init__(self, change: ChangeSet, shared: dict[str, dict[str, Any]]) -> None:
        self.change = change
        self.shared = shared
        self.effect: dict[str, dict[str, Any]] = {}
        self._before: dict[Any, dict[str, Any]] = {}

    def before(self, data: dict[str, Any]) -> None:
        """The shared projects' facts before the change (copies: the rules change them)."""
        self._before = {
            f.get("id"): dict(f)
            for f in data.get("facts") or []
            if isinstance(f, dict) and fact_project(f) in self.shared
        }

    def after(self, result: UpdateResult) -> None:
        """What the change did to the shared projects; a person's change to a project this
        role may only read is refused now, as the database would refuse it."""
        effect = shared_effect(self._before, result, self.shared)
        for project in [p for p in effect if self.shared[p].get("read_only")]:
            if self.change.origin == "user":
                role = self.shared[project].get("role") or "this role"
                raise Refused(
                    f"{role} is a read-only member of shared project {project}: ask its "
                    f"owner to run `{add_member_command(project, role)}` (without "
                    "--read-only), or keep the fact in your own memory (--user)"
                )
            del effect[project]  # a fold's note on a course project stays here
        self.effect = effect

    def queue(self, db: Any) -> None:
        for project, diff in self.effect.items():
            change = ChangeSet(
                origin=self.change.origin, reason=self.change.reason, source="team",
                diff=diff, project=project, turn=self.change.turn,
            )  # fmt: skip
            rows.add_in(db, project, change)


class Sharing:
    """``memory.team``: this home's shared projects (``projects``), ``share``, ``join`` and
    ``sync`` (now, or in the background: ``start_sync``), and the gate's tap."""

    def __init__(
        self,
        settings: Settings,
        journal: Journal,
        gate: Gate,
        ledger: Ledger,
        changed: Listeners,
    ) -> None:
        self.settings = settings
        self.journal = journal
        self.gate = gate
        self.outbox = Outbox(journal)
        self._ledger = ledger  # memory.json as committed (``Ledger.current``)
        self._changed = changed  # Memory.on_change's listeners: the background sync's nudge
        self._team_sync: Any = None  # a team_sync.TeamSync once started
        self._urls: dict[str, str] = {}  # stored URL -> the one given (maybe with a password)
        self._roster_due: dict[str, float] = {}  # project -> when the background asks again
        gate.tap = self.tap

    def projects(self) -> dict[str, dict[str, Any]]:
        """``{project: {"url", "role", "read_only", "members"}}`` for every shared project,
        joined ones and config.yaml's (``members``: ``[{"role", "read_only"}]`` as the last
        sync or join saw them)."""
        shared = rows.shared_projects(self.journal.db)
        for project, url in self.settings.shared.items():
            shared.setdefault(project, {"url": url})
        return shared

    def tap(self, change: ChangeSet) -> _Commit | None:
        """The gate's question before each commit: is any project shared? (A teammate's
        change, applied here, is not sent back; the approval of a conflict held here is
        this home's choice, and is.)"""
        diff = change.diff or {}
        if change.origin == "team" or (diff.get(TEAM) and not diff.get(CONFLICT)):
            return None
        shared = self.projects()
        return _Commit(change, shared) if shared else None

    def _register(self, project: str, url: str) -> tuple[str, bool]:
        from ..shared.exchange import roster

        stored = without_password(url)
        self._urls[stored] = url
        role, read_only, members = roster(url, project)
        self._refresh(project, stored, role, read_only, members)
        return role, read_only

    def join(self, project: str, url: str, timeout: float | None = None) -> SyncReport:
        """Join ``project`` on the team's PostgreSQL at ``url`` and pull its facts."""
        project = check_project_name(project)
        self._register(project, url)
        return self.sync(timeout, only=[project])

    def share(self, project: str, url: str, timeout: float | None = None) -> SyncReport:
        """Share ``project``'s memory with the team at ``url`` (a ``postgresql://`` URL; the
        password in PGPASSWORD or ~/.pgpass): joined, its facts and summary as they are here
        are sent, teammates' pulled."""
        from ..shared.connect import SharedError

        project = check_project_name(project)
        role, read_only = self._register(project, url)
        if read_only:
            raise SharedError(
                f"{role} is a read-only member of project {project}: joined, but nothing is "
                f"shared; ask its owner to run `{add_member_command(project, role)}`"
            )
        data = self._ledger.current()
        facts = [public_fact(f) for f in data.get("facts") or [] if fact_project(f) == project]
        diff: dict[str, Any] = {
            "newFacts": [{**f, "scope": "project", "project": project} for f in facts]
        }
        if summary := project_summary(data, project):
            diff["projectContext"] = {"summary": summary, "shouldUpdate": True, "project": project}
        if facts or summary:
            change = ChangeSet(
                origin="user", reason="share", source="team", diff=diff, project=project
            )
            self.outbox.add(project, change)
        return self.sync(timeout, only=[project])

    def sync(
        self,
        timeout: float | None = None,
        only: list[str] | None = None,
        pool: dict[str, Connection] | None = None,
    ) -> SyncReport:
        """Publish what waits in the outbox, then pull and apply each shared project's new
        change sets through the gate, on one connection per server (``timeout`` seconds
        at most: projects not reached by then wait for the next sync). With ``pool`` (the
        background sync's) the connections stay open for the next sync."""
        from ..shared.connect import SharedError, connect, kept

        deadline = None if timeout is None else time.monotonic() + timeout
        report = SyncReport()
        by_url: dict[str, list[str]] = {}
        for project, entry in self.projects().items():
            if only is None or project in only:
                by_url.setdefault(entry["url"], []).append(project)
        for stored, projects in by_url.items():
            url = self.url_for(stored)
            try:
                with connect(url) if pool is None else kept(pool, url) as conn:
                    self._sync_on(conn, url, stored, projects, report, deadline, pool is None)
            except SharedError as exc:  # the server does not answer, or went away
                report.problems.append(str(exc))
        report.waiting = sum(self.outbox.unpublished(p) for v in by_url.values() for p in v)
        return report

    def start_sync(self, interval: float = 30.0) -> bool:
        """Sync in a background thread (``team_sync.py``) when a project is shared: at
        once, right after a change here or a teammate's NOTIFY, and every
        ``interval`` seconds; whether it runs. ``stop_sync`` before ``close``."""
        from .team_sync import TeamSync

        if self._team_sync is None:
            self._team_sync = TeamSync(self, self._changed.add)
        return self._team_sync.start(interval)

    def catch_up(self, project: str | None) -> bool:
        """Before a turn in ``project``: when it is shared and the background sync was told
        of a teammate's change it has not taken in, that sync now, waited for (a second and
        a half at most, ``team_sync.CATCH_UP``); whether memory holds what was noticed."""
        sync = self._team_sync
        if sync is None or project is None or project_name(project) not in self.projects():
            return True
        return sync.catch_up()

    def stop_sync(self) -> None:
        """Stop the background sync (a sync under way finishes first)."""
        if self._team_sync is not None:
            self._team_sync.stop()
            self._team_sync = None

    def sync_status(self) -> dict[str, Any]:
        """The background sync's ``{"running", "syncs", "applied", "last"}`` since start
        (``applied``: teammates' change sets; ``last``: the last SyncReport or None)."""
        sync = self._team_sync
        if sync is None:
            return {"running": False, "syncs": 0, "applied": 0, "last": None}
        return {
            "running": sync.running,
            "syncs": sync.syncs,
            "applied": sync.applied,
            "last": sync.last,
        }

    def _sync_on(
        self,
        conn: Connection,
        url: str,
        stored: str,
        projects: list[str],
        report: SyncReport,
        deadline: float | None,
        asked: bool = True,
    ) -> None:
        """``sync``'s steps for the projects of one server, all on ``conn``: the database's
        word on the role and members each time one is ``asked`` for (``sync()``), at most
        every ``ROSTER_SECONDS`` in the background (its syncs follow every change)."""
        from ..shared.connect import SharedError
        from ..shared.exchange import publish, roster, unapplied

        try:
            for project in projects:
                if asked or time.monotonic() >= self._roster_due.get(project, 0.0):
                    self._refresh(project, stored, *roster(url, project, conn))
                    self._roster_due[project] = time.monotonic() + ROSTER_SECONDS
            report.published += publish(self.outbox, url, only=projects, conn=conn)
        except SharedError as exc:
            report.published += getattr(exc, "stored", 0)  # the other projects' went
            report.problems.append(str(exc))
        for project in projects:
            if deadline is not None and time.monotonic() > deadline:
                return
            try:
                self._apply(project, unapplied(conn, self.outbox, project), report)
            except SharedError as exc:
                report.problems.append(str(exc))

    def url_for(self, stored: str) -> str:
        """The URL to connect with: the one given to ``share``/``join`` in this process
        (maybe with a password), else the stored one (libpq finds the password)."""
        return self._urls.get(stored, stored)

    def _refresh(
        self,
        project: str,
        stored: str,
        role: str,
        read_only: bool,
        members: list[dict[str, object]],
    ) -> None:
        """Keep the role and the member list (for the views, offline) as the server says."""
        entry = {"url": stored, "role": role, "read_only": read_only, "members": members}
        if rows.shared_projects(self.journal.db).get(project) != entry:
            with self.journal.transaction() as db:
                rows.set_shared(db, project, entry)

    def _apply(self, project: str, pulled: list[SharedChange], report: SyncReport) -> None:
        """Teammates' change sets through the gate as one commit (one memory.json write),
        every pulled one recorded applied in its transaction (this home's own, coming
        back, only recorded): applied once, or not at all. Which are applied already is
        read again inside that transaction: when another kernel on this home (a second
        notebook, woken by the same NOTIFY) applied some since they were read, the commit
        rolls back and is made again of the ones left, so each is applied or proposed once.
        """
        while True:  # ends: each retry finds more of ``pulled`` recorded than the last
            known = self.outbox.applied(change.id for change in pulled)
            new = [change for change in pulled if change.id not in known]
            if not new:
                if pulled:
                    with self.journal.transaction() as db:
                        rows.record_applied_all(db, project, [(c.id, c.version) for c in pulled])
                return
            changes = [_team_change(project, c) for c in new]
            try:
                with self.gate.committing_all(changes) as (db, passed):
                    if rows.applied_in(db, [c.id for c in new]):
                        raise _AppliedMeanwhile
                    rows.record_applied_all(db, project, [(c.id, c.version) for c in pulled])
            except _AppliedMeanwhile:
                continue
            break
        report.pulled += len(new)
        for outcome in passed:
            if outcome.pending_id is not None:
                report.held.append(outcome.pending_id)
                report.why_held.append("; ".join(h["reason"] for h in outcome.held))
            elif outcome.result.events:
                report.applied += 1


class _AppliedMeanwhile(Exception):
    """Inside a sync's commit: another kernel on this home applied some of its change sets
    since this one read which were applied; the commit rolls back."""


def _team_change(project: str, change: SharedChange) -> ChangeSet:
    """A teammate's change set as this home's gate takes it: origin ``team``, marked with
    the project, the teammate (``person``) and its id on the server."""
    diff = dict(change.change.diff or {})
    diff[TEAM] = {
        "project": project, "person": change.person, "origin": change.origin,
        "id": change.id, "at": change.created.isoformat(),
    }  # fmt: skip
    return ChangeSet(
        origin="team", reason="team", source=f"team:{change.person}", diff=diff,
        project=project, turn=change.turn,
    )  # fmt: skip
