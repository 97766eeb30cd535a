"""``SQLiteHome``: the store contract (``storage/contract.py``) over today's home.

An adapter, not a second implementation: facts and summaries are memory.json
(``store.py``), committed through the ledger's journal-first protocol
(``updates/write_protocol.py``: one journal transaction for the version and its events,
then the file renamed into place); threads, messages and the fold queue are journal.db
(``storage/``). A revision is the newest ``memory_versions`` id, read under the
memory.json lock that every commit holds, so a snapshot's facts and revision are of one
state and a stale base is refused before anything is written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..home import JOURNAL_FILENAME, MEMORY_FILENAME
from ..storage import ledger as ledger_rows
from ..storage import queue as queue_rows
from ..storage.contract import (
    PROJECTS_GROUP,
    USER_GROUPS,
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
from ..storage.db import now_iso
from ..storage.journal import Journal
from .folding import schedule
from .folding.fold import unfolded
from .listeners import Listeners
from .readside.change_events import decode_event
from .store import MemoryStore, normalized
from .updates.updater import UpdateResult
from .updates.write_protocol import Ledger


class SQLiteHome:
    """A home folder (journal.db + memory.json) as a ``Store``."""

    def __init__(self, journal: Journal, ledger: Ledger) -> None:
        self.journal = journal
        self.ledger = ledger

    @classmethod
    def open(cls, home: str | Path) -> SQLiteHome:
        """The store of the home folder ``home`` (its journal migrated, as a writer)."""
        home = Path(home)
        journal = Journal(home / JOURNAL_FILENAME)
        return cls(journal, Ledger(journal, MemoryStore(home / MEMORY_FILENAME), Listeners()))

    def close(self) -> None:
        self.journal.close()

    # -- memory ------------------------------------------------------------------------
    def _revision(self) -> Revision:
        return Revision(ledger_rows.newest_version(self.journal.db) or 0)

    def snapshot(self, scope: Scope) -> Snapshot:
        self.ledger.settle()
        with self.ledger.store.locked():
            revision = self._revision()
            _, data = self.ledger.store.read_shared()
        facts = (Fact.from_json(f) for f in data.get("facts") or [])
        return Snapshot.of(scope, revision, facts, dict(_summaries(data)))

    def commit(self, changes: Changes, *, base: Revision) -> Revision:
        changes.check()
        with self.ledger.reading() as commit:
            now = self._revision()  # under the memory.json lock every commit holds
            if now != base:
                raise StaleRevision(f"base revision {base} is stale: the store is at {now}")
            result = UpdateResult(_applied(commit.current, changes), list(changes.events))
            with self.ledger.recording(commit, changes.reason, changes.source, result, always=True):
                pass
        return Revision(commit.version or 0)

    def events(self, revision: Revision) -> list[Event]:
        names = {f.name for f in dataclasses.fields(Event)}
        rows = ledger_rows.version_events(self.journal.db, revision)
        return [Event(**{k: v for k, v in decode_event(r).items() if k in names}) for r in rows]

    # -- threads and messages ----------------------------------------------------------
    def thread_for(self, name: str, project: str | None) -> str:
        return self.journal.thread_for(name, project, record=True)

    def add_messages(
        self, thread: str, messages: Sequence[dict[str, Any]], *, project: str | None = None
    ) -> int:
        return self.journal.add_messages(thread, messages, project=project)

    def messages(self, thread: str, after_seq: int = 0) -> list[dict[str, Any]]:
        return self.journal.messages(thread, after_seq)

    # -- the fold queue ----------------------------------------------------------------
    def enqueue(self, thread: str, *, after: float = 0.0) -> None:
        """What the thread has not folded yet, as ``Memory.enqueue`` queues it (private
        turns left out), read and queued in one transaction (a fold finishing meanwhile
        cannot leave the entry stale)."""
        with self.journal.transaction() as db:
            snapshot, last_seq = unfolded(self.journal, thread)
            schedule.queue_snapshot(db, thread, snapshot, last_seq, after)

    def queued(self) -> list[str]:
        return queue_rows.thread_ids(self.journal.db)

    def claim(self, owner: str, ttl: float) -> Lease | None:
        now = schedule.clock()
        with self.journal.transaction() as db:
            # a lease further ahead than any live holder writes came from a clock that
            # was ahead: it ends no later than a fresh one (``schedule.LEASE_SECONDS``)
            latest = now + max(ttl, schedule.LEASE_SECONDS)
            got = queue_rows.claim_due(db, owner, now, now + ttl, latest=latest)
        return None if got is None else Lease(got[0], owner, now + ttl, got[1])

    def renew(self, lease: Lease, ttl: float) -> Lease:
        now = schedule.clock()
        with self.journal.transaction() as db:
            if not queue_rows.extend(db, lease.thread, lease.owner, now, now + ttl):
                raise LeaseLost(f"the lease on {lease.thread!r} expired")
        return dataclasses.replace(lease, expires_at=now + ttl)

    def release(self, lease: Lease, *, done: bool = False) -> None:
        with self.journal.transaction() as db:
            if not done:
                queue_rows.unclaim(db, lease.thread, lease.owner)
                return
            if not queue_rows.held(db, lease.thread, lease.owner, schedule.clock()):
                raise LeaseLost(f"the lease on {lease.thread!r} expired")
            schedule.finish(db, {"thread_id": lease.thread, "last_seq": lease.through_seq})


def _summaries(data: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """memory.json's summaries by contract key (``user.workContext``, ``projects.NAME``)."""
    for group in (*USER_GROUPS, PROJECTS_GROUP):
        for name, section in (data.get(group) or {}).items():
            if isinstance(section, dict) and isinstance(section.get("summary"), str):
                yield f"{group}.{name}", section["summary"]


def _applied(current: dict[str, Any], changes: Changes) -> dict[str, Any]:
    """memory.json with ``changes`` applied: a put fact replaces its id in place (else is
    appended), removed ids go, each summary is set with the time it was."""
    data = normalized(current)
    put = {f.id: f.to_json() for f in changes.put}
    facts = [put.pop(f["id"], f) for f in data["facts"] if f["id"] not in changes.remove]
    data["facts"] = facts + list(put.values())
    stamp = now_iso()
    projects = dict(data.get(PROJECTS_GROUP) or {})
    for key, text in changes.summaries.items():
        group, _, name = key.partition(".")
        if group in USER_GROUPS:
            data[group][name] = {"summary": text, "updatedAt": stamp}
        elif text:
            projects[name] = {"summary": text, "updatedAt": stamp}
        else:
            projects.pop(name, None)
    if projects or PROJECTS_GROUP in data:
        data[PROJECTS_GROUP] = projects
    data["lastUpdated"] = stamp
    return data
