"""An in-memory ``Store`` (``deerflow_nb/storage/contract.py``): the contract's reference,
small enough to be obviously right, run by ``test_store_contract.py`` beside the real ones.

One lock around plain dicts: every operation is atomic because it holds the lock, and a
commit builds its new state aside and swaps it in only after every check passed.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Sequence
from typing import Any

from deerflow_nb.projects import DEFAULT_PROJECT
from deerflow_nb.storage.contract import (
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


@dataclasses.dataclass
class _Entry:
    """A queued thread: due when, through which message, leased to whom until when."""

    due: float
    through_seq: int
    owner: str | None = None
    until: float = 0.0


class ReferenceStore:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._revision = 0
        self._facts: dict[str, Fact] = {}  # insertion order is the stored order
        self._summaries: dict[str, str] = {}
        self._events: dict[int, list[Event]] = {}
        self._threads: dict[str, str] = {}  # id -> project
        self._messages: dict[str, list[dict[str, Any]]] = {}
        self._queue: dict[str, _Entry] = {}

    def snapshot(self, scope: Scope) -> Snapshot:
        with self._lock:
            return Snapshot.of(scope, self._revision, self._facts.values(), self._summaries)

    def commit(self, changes: Changes, *, base: Revision) -> Revision:
        changes.check()
        with self._lock:
            if base != self._revision:
                raise StaleRevision(f"base {base} is stale: the store is at {self._revision}")
            facts = {i: f for i, f in self._facts.items() if i not in changes.remove}
            facts.update((f.id, f) for f in changes.put)
            summaries = {**self._summaries, **changes.summaries}
            self._facts, self._summaries = facts, summaries
            self._revision += 1
            self._events[self._revision] = [dataclasses.replace(e) for e in changes.events]
            return Revision(self._revision)

    def events(self, revision: Revision) -> list[Event]:
        with self._lock:
            return list(self._events.get(revision, []))

    def thread_for(self, name: str, project: str | None) -> str:
        project = project or DEFAULT_PROJECT
        with self._lock:
            candidate, n = name, 0
            while self._threads.setdefault(candidate, project) != project:
                n += 1
                candidate = f"{name} @{project}" + (f" #{n}" if n > 1 else "")
            return candidate

    def add_messages(
        self, thread: str, messages: Sequence[dict[str, Any]], *, project: str | None = None
    ) -> int:
        with self._lock:
            self._threads.setdefault(thread, project or DEFAULT_PROJECT)
            kept = self._messages.setdefault(thread, [])
            kept.extend(dict(m) for m in messages)
            return len(kept)

    def messages(self, thread: str, after_seq: int = 0) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(m) for m in self._messages.get(thread, [])[after_seq:]]

    def enqueue(self, thread: str, *, after: float = 0.0) -> None:
        with self._lock:
            through = len(self._messages.get(thread, []))
            entry = self._queue.get(thread)
            if entry is None:
                self._queue[thread] = _Entry(time.time() + after, through)
            else:
                entry.due, entry.through_seq = time.time() + after, through

    def queued(self) -> list[str]:
        with self._lock:
            return sorted(self._queue, key=lambda t: self._queue[t].due)

    def claim(self, owner: str, ttl: float) -> Lease | None:
        now = time.time()
        with self._lock:
            free = [t for t, e in self._queue.items() if e.due <= now and e.until < now]
            if not free:
                return None
            thread = min(free, key=lambda t: self._queue[t].due)
            entry = self._queue[thread]
            entry.owner, entry.until = owner, now + ttl
            return Lease(thread, owner, entry.until, entry.through_seq)

    def _held(self, lease: Lease, now: float) -> _Entry | None:
        entry = self._queue.get(lease.thread)
        held = entry is not None and entry.owner == lease.owner and entry.until >= now
        return entry if held else None

    def renew(self, lease: Lease, ttl: float) -> Lease:
        now = time.time()
        with self._lock:
            entry = self._held(lease, now)
            if entry is None:
                raise LeaseLost(f"the lease on {lease.thread!r} expired")
            entry.until = now + ttl
            return dataclasses.replace(lease, expires_at=entry.until)

    def release(self, lease: Lease, *, done: bool = False) -> None:
        with self._lock:
            entry = self._queue.get(lease.thread)
            if not done:
                if entry is not None and entry.owner == lease.owner:
                    entry.owner, entry.until = None, 0.0
                return
            if self._held(lease, time.time()) is None:
                raise LeaseLost(f"the lease on {lease.thread!r} expired")
            if entry is not None and entry.through_seq <= lease.through_seq:
                del self._queue[lease.thread]
            elif entry is not None:
                entry.owner, entry.until = None, 0.0
