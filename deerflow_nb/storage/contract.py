"""The store contract: what the gate and the readers need from storage, typed once.

A store holds a home's facts and summaries, the journal of conversations, and the fold
queue. ``Store`` names its operations; the values here (``Scope``, ``Fact``, ``Snapshot``,
``Changes``, ``Event``, ``Lease``) are what crosses it. The SQLite + memory.json home
(``SQLiteHome``, ``memory/sqlite_home.py``) is one implementation;
``tests/test_store_contract.py`` is the suite every implementation must pass, so a second
store (PostgreSQL) plugs in by adding one fixture param. Scope visibility is decided here,
once (``Scope.sees``), so two stores cannot disagree about what a project sees.

Not every door goes through it yet: the gate, the reader and the fold still call the
ledger, the journal and memory.json directly (docs/internals.md says where each stands);
the PostgreSQL store and the contract suite use it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NewType, Protocol, runtime_checkable

from ..projects import PROJECT_SCOPE, fact_project
from ..schema.constants import SECTION_GROUPS

Revision = NewType("Revision", int)  # 0 before the first commit; every commit adds one or more

# Summary keys: DeerFlow's sections as ``user.<name>`` / ``history.<name>`` (the user's),
# a project's context summary as ``projects.<name>`` (that project's).
SECTIONS: dict[str, tuple[str, ...]] = dict(SECTION_GROUPS)
USER_GROUPS = tuple(SECTIONS)
PROJECTS_GROUP = "projects"


class StaleRevision(RuntimeError):
    """A commit named a base revision that is no longer the store's: someone committed
    since that snapshot was read. Nothing was written; read a new snapshot and retry."""


class LeaseLost(RuntimeError):
    """The lease expired (and may have been claimed by another owner): its work must not
    be counted as done."""


@dataclass(frozen=True)
class Scope:
    """Whose facts a read or a change sees: the user's own (``user``), those of
    ``projects``, or every project's (``every``: only when a user asked, ``--all``)."""

    projects: frozenset[str] = frozenset()
    user: bool = True
    every: bool = False

    @classmethod
    def of(cls, project: str | None) -> Scope:
        """What a turn in ``project`` sees: the user's facts and that project's (None: the
        user's only)."""
        return cls(frozenset({project}) if project else frozenset())

    @classmethod
    def several(cls, projects: Iterable[str], *, user: bool = True) -> Scope:
        """The user's facts (with ``user``) and those of each of ``projects`` (a user's
        request)."""
        return cls(frozenset(projects), user)

    @classmethod
    def everywhere(cls) -> Scope:
        """Every project's facts and the user's (only when a user asked)."""
        return cls(every=True)

    @classmethod
    def own(cls, project: str | None) -> Scope:
        """Only ``project``'s own facts, not the user's (``%memory facts --project``, a
        project's export); None: only the user's own."""
        return cls(frozenset({project}), user=False) if project else cls()

    @property
    def project(self) -> str | None:
        """The one project this scope is about (its summary, its threads), else None."""
        return next(iter(self.projects)) if len(self.projects) == 1 and not self.every else None

    def sees_project(self, name: str) -> bool:
        return self.every or name in self.projects

    def sees(self, fact: Fact | Mapping[str, Any]) -> bool:
        """The one rule: a user fact is seen by a scope with ``user``, a project's fact
        only by a scope naming that project (or every project)."""
        if isinstance(fact, Fact):
            return self.sees_owner(fact.project)
        if isinstance(fact, Mapping):
            return self.sees_owner(fact_project(fact))
        return False

    def sees_owner(self, owner: str | None) -> bool:
        """What ``sees`` decides once it knows whose a fact is (None: the user's); also
        asked of a journaled event, which names its fact's project."""
        return self.user if owner is None else self.sees_project(owner)

    def sees_summary(self, key: str) -> bool:
        group, _, name = key.partition(".")
        return self.user if group in USER_GROUPS else self.sees_project(name)


@dataclass(frozen=True)
class Fact:
    """One fact: DeerFlow's fields, its project (None: the user's) and whatever else it
    carries (``extra``: createdAt, source, updatedAt, confirmations...), kept as stored."""

    id: str
    content: str
    category: str = "context"
    confidence: float = 0.5
    project: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Fact:
        """A memory.json fact (``scope: project`` and ``project`` become ``project``)."""
        known = {"id", "content", "category", "confidence", "scope", "project"}
        return cls(
            id=str(data["id"]),
            content=str(data.get("content", "")),
            category=str(data.get("category", "context")),
            confidence=float(data.get("confidence", 0.5)),
            project=fact_project(dict(data)),
            extra=MappingProxyType({k: v for k, v in data.items() if k not in known}),
        )

    def to_json(self) -> dict[str, Any]:
        """The memory.json fact (a plain DeerFlow fact when it is the user's)."""
        out = {"id": self.id, "content": self.content, "category": self.category}
        out |= {"confidence": self.confidence, **self.extra}
        if self.project is not None:
            out |= {"scope": PROJECT_SCOPE, "project": self.project}
        return out


@dataclass
class Event:
    """One change to memory as journaled beside its version (``memory_events``)."""

    kind: str  # add | reinforce | update | remove | evict | section | rollback | import | reset
    fact_id: str | None = None
    section: str | None = None
    old_content: str | None = None
    new_content: str | None = None
    old_confidence: float | None = None
    new_confidence: float | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Snapshot:
    """What ``scope`` sees of memory at ``revision``: its facts in stored order and its
    summaries by key (``USER_GROUPS``/``PROJECTS_GROUP``); read-only."""

    scope: Scope
    revision: Revision
    facts: tuple[Fact, ...]
    summaries: Mapping[str, str]

    @classmethod
    def of(
        cls, scope: Scope, revision: int, facts: Iterable[Fact], summaries: Mapping[str, str]
    ) -> Snapshot:
        """The snapshot ``scope`` sees of all of ``facts`` and ``summaries``."""
        seen = {k: v for k, v in summaries.items() if v and scope.sees_summary(k)}
        return cls(
            scope,
            Revision(revision),
            tuple(f for f in facts if scope.sees(f)),
            MappingProxyType(seen),
        )

    def fact(self, fact_id: str) -> Fact | None:
        return next((f for f in self.facts if f.id == fact_id), None)


@dataclass(frozen=True)
class Changes:
    """One unit to commit: facts put (added, or replaced by id), fact ids removed,
    summaries set (by key, "" clears one), and the events that explain them. ``reason``
    and ``source`` label the new revision (``fold``/thread id, ``edit``/``manual``...)."""

    reason: str
    source: str = "manual"
    put: tuple[Fact, ...] = ()
    remove: frozenset[str] = frozenset()
    summaries: Mapping[str, str] = field(default_factory=dict, hash=False)
    events: tuple[Event, ...] = ()

    def check(self) -> None:
        """Refuse what no store can keep, before anything is written: a fact both put and
        removed, a summary key that names no section, or event details JSON cannot hold
        (ValueError/TypeError)."""
        both = self.remove & {f.id for f in self.put}
        if both:
            raise ValueError(f"facts both put and removed: {sorted(both)}")
        for key in self.summaries:
            group, _, name = key.partition(".")
            if not name or (group in SECTIONS and name not in SECTIONS[group]):
                raise ValueError(f"no summary section {key!r}")
            if group not in SECTIONS and group != PROJECTS_GROUP:
                raise ValueError(f"no summary group for {key!r}")
        for event in self.events:
            json.dumps(event.details, allow_nan=False)


@dataclass(frozen=True)
class Lease:
    """A claim on one queued thread until ``expires_at`` (the store's clock, epoch
    seconds), covering its messages through ``through_seq``."""

    thread: str
    owner: str
    expires_at: float
    through_seq: int


@runtime_checkable
class Store(Protocol):
    """What the gate, the readers, the fold and the agent need from storage (not yet
    what they call: see the module's docstring).

    Guarantees (each checked by ``tests/test_store_contract.py``):

    - ``snapshot`` is consistent: its facts, summaries and revision are of one state.
    - ``commit`` writes ``changes`` (facts, summaries, events, a new revision) as one unit
      or not at all, and only if ``base`` is still the current revision (``StaleRevision``
      otherwise); it returns the new revision, greater than ``base``.
    - ``thread_for`` walls projects: one name in two projects is two threads.
    - the queue holds one entry per thread (``enqueue`` is idempotent); ``claim`` hands a
      due entry to one owner at a time until its lease expires; an expired lease may be
      claimed by another owner and can no longer be renewed or finished.
    """

    def snapshot(self, scope: Scope) -> Snapshot: ...

    def commit(self, changes: Changes, *, base: Revision) -> Revision: ...

    def events(self, revision: Revision) -> list[Event]:
        """The events committed with ``revision``, in order."""
        ...

    def thread_for(self, name: str, project: str | None) -> str:
        """The thread id of ``name`` in ``project`` (None: the default project), recorded
        for that project so the next call for another project gets another id."""
        ...

    def add_messages(
        self, thread: str, messages: Sequence[dict[str, Any]], *, project: str | None = None
    ) -> int:
        """Append OpenAI-shaped messages as one unit; the last message's seq."""
        ...

    def messages(self, thread: str, after_seq: int = 0) -> list[dict[str, Any]]: ...

    def enqueue(self, thread: str, *, after: float = 0.0) -> None:
        """Queue the thread's messages for a fold, due in ``after`` seconds; a thread
        already queued keeps one entry (and its lease, if claimed)."""
        ...

    def queued(self) -> list[str]: ...

    def claim(self, owner: str, ttl: float) -> Lease | None:
        """A due, unleased (or expired) entry, leased to ``owner`` for ``ttl`` seconds."""
        ...

    def renew(self, lease: Lease, ttl: float) -> Lease:
        """The lease extended by ``ttl`` from now; ``LeaseLost`` once it has expired."""
        ...

    def release(self, lease: Lease, *, done: bool = False) -> None:
        """Give the entry back (``done``: drop it, unless the thread was queued again with
        newer messages, which stay queued; ``LeaseLost`` if the lease expired)."""
        ...
