"""The store contract's suite (``deerflow_nb/storage/contract.py``), written once and run on
every implementation: the SQLite + memory.json home and the in-memory reference store.

A new store joins by adding one entry to ``STORES`` (a generator yielding the ``Handles``
that open it, whose files, if any, live under ``tmp_path``) and must pass every test here
unchanged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pg_cluster import PgCluster, drop_database, migrated_database
from reference_store import ReferenceStore

from deerflow_nb import Memory
from deerflow_nb.memory.sqlite_home import SQLiteHome
from deerflow_nb.shared import team
from deerflow_nb.shared.store import PostgresStore
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
    Store,
)


@dataclasses.dataclass
class Handles:
    """Opens handles on one store, each with a connection of its own (the reference
    store's handles are one object), and closes them all at the end. ``where`` is what
    another process opens the same store with (the class's dotted name, and the home's
    folder or the database's URL); None for a store that lives in this process only."""

    open_one: Callable[[], Store]
    where: tuple[str, str] | None = None
    opened: list[Store] = dataclasses.field(default_factory=list)

    def __call__(self) -> Store:
        store = self.open_one()
        self.opened.append(store)
        return store

    def close(self) -> None:
        for store in self.opened:
            getattr(store, "close", lambda: None)()


def _sqlite(tmp_path: Path) -> Iterator[Handles]:
    home = tmp_path / "home"
    handles = Handles(
        lambda: SQLiteHome.open(home), ("deerflow_nb.memory.sqlite_home.SQLiteHome", str(home))
    )
    try:
        yield handles
    finally:
        handles.close()


def _reference(tmp_path: Path) -> Iterator[Handles]:
    store = ReferenceStore()
    yield Handles(lambda: store)


_CLUSTER: dict[str, Callable[[], PgCluster]] = {}
PG_STORE = "deerflow_nb.shared.store.PostgresStore"


@pytest.fixture(scope="session", autouse=True)
def _lazy_postgres(request: pytest.FixtureRequest) -> None:
    """The session's PostgreSQL, started only when a ``postgres`` store is first opened."""
    _CLUSTER["get"] = lambda: request.getfixturevalue("postgres")


def _postgres(tmp_path: Path) -> Iterator[Handles]:
    """A ``PostgresStore`` on a database of its own, as the superuser (the owner of the
    schema: the policies are tested apart, in ``test_pg_store.py``)."""
    cluster = _CLUSTER["get"]()
    url = migrated_database(cluster)
    handles = Handles(lambda: PostgresStore.open(url), (PG_STORE, url))
    try:
        yield handles
    finally:
        handles.close()
        drop_database(cluster, url)


def _postgres_member(tmp_path: Path) -> Iterator[Handles]:
    """A ``PostgresStore`` as a login role that is a writer member of the suite's projects
    (a, b, c, default), on a database of its own: every read and write under the policies,
    the wipe guard, and each commit's change sets to those team projects."""
    cluster = _CLUSTER["get"]()
    url = migrated_database(cluster)
    role, password = f"member_{secrets.token_hex(4)}", secrets.token_hex(8)
    for project in ("a", "b", "c", "default"):
        team.add_member(url, project, role, password=password)
    login = cluster.url_for(role, password, url.rsplit("/", 1)[1])
    handles = Handles(lambda: PostgresStore.open(login), (PG_STORE, login))
    try:
        yield handles
    finally:
        handles.close()
        drop_database(cluster, url)
        with psycopg.connect(cluster.url, autocommit=True) as conn:
            conn.execute(f"DROP ROLE {role}")


STORES: dict[str, Callable[[Path], Iterator[Handles]]] = {
    "sqlite": _sqlite,
    "reference": _reference,
    "postgres": _postgres,
    "postgres_member": _postgres_member,
}
IN_PROCESS_ONLY = {"reference"}  # no other process can open it


@pytest.fixture(params=sorted(STORES))
def handles(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Handles]:
    yield from STORES[request.param](tmp_path)


@pytest.fixture
def store(handles: Handles) -> Store:
    return handles()


def fact(fact_id: str, project: str | None = None, content: str | None = None) -> Fact:
    text = content or f"fact {fact_id}"
    return Fact(fact_id, text, "knowledge", 0.9, project, {"source": "test"})


def ids(store: Store, scope: Scope) -> set[str]:
    return {f.id for f in store.snapshot(scope).facts}


def seeded(store: Store) -> Revision:
    """A user fact, one fact in each of projects a and b, and a summary for each."""
    changes = Changes(
        "edit",
        put=(fact("u1"), fact("a1", "a"), fact("b1", "b")),
        summaries={
            "user.workContext": "works on trials",
            "projects.a": "project a's context",
            "projects.b": "project b's context",
        },
        events=(Event("add", "u1"), Event("add", "a1"), Event("add", "b1")),
    )
    return store.commit(changes, base=store.snapshot(Scope()).revision)


# -- memory: snapshots and commits -------------------------------------------------------------
def test_is_a_store_and_starts_empty(store: Store) -> None:
    assert isinstance(store, Store)
    snap = store.snapshot(Scope.everywhere())
    assert (snap.revision, snap.facts, dict(snap.summaries)) == (0, (), {})


def test_a_scope_sees_only_its_facts_and_summaries(store: Store) -> None:
    seeded(store)
    assert ids(store, Scope()) == {"u1"}
    assert ids(store, Scope.of("a")) == {"u1", "a1"}
    assert ids(store, Scope.of("b")) == {"u1", "b1"}
    assert ids(store, Scope.own("a")) == {"a1"}
    assert ids(store, Scope.of("c")) == {"u1"}
    assert ids(store, Scope.several(["a", "b"])) == {"u1", "a1", "b1"}
    assert ids(store, Scope.everywhere()) == {"u1", "a1", "b1"}
    assert set(store.snapshot(Scope()).summaries) == {"user.workContext"}
    assert dict(store.snapshot(Scope.of("a")).summaries) == {
        "user.workContext": "works on trials",
        "projects.a": "project a's context",
    }


def test_facts_come_back_as_committed(store: Store) -> None:
    put = (fact("u1"), fact("a1", "a", 'ünïcode ✓ and "quotes"'))
    store.commit(Changes("edit", put=put), base=Revision(0))
    assert store.snapshot(Scope.everywhere()).facts == put


def test_a_snapshot_is_a_frozen_value(store: Store) -> None:
    seeded(store)
    snap = store.snapshot(Scope.of("a"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.revision = Revision(99)  # type: ignore[misc]
    with pytest.raises(TypeError):
        snap.summaries["projects.b"] = "leak"  # type: ignore[index]
    store.commit(Changes("edit", remove=frozenset({"a1"})), base=snap.revision)
    assert snap.fact("a1") is not None  # the value kept what it was read as


def test_every_commit_moves_the_revision_forward(store: Store) -> None:
    first = seeded(store)
    assert first > 0
    second = store.commit(
        Changes("edit", put=(fact("a1", "a", "changed"),), events=(Event("update", "a1"),)),
        base=first,
    )
    assert second > first
    snap = store.snapshot(Scope.of("a"))
    assert snap.revision == second
    assert snap.fact("a1") is not None and snap.fact("a1").content == "changed"  # type: ignore[union-attr]
    third = store.commit(Changes("forget", remove=frozenset({"u1"})), base=second)
    assert third > second and ids(store, Scope.everywhere()) == {"a1", "b1"}


def test_events_are_kept_with_their_revision(store: Store) -> None:
    first = seeded(store)
    second = store.commit(
        Changes(
            "edit",
            remove=frozenset({"b1"}),
            events=(Event("remove", "b1", old_content="fact b1", details={"why": "test"}),),
        ),
        base=first,
    )
    assert [(e.kind, e.fact_id) for e in store.events(first)] == [
        ("add", "u1"),
        ("add", "a1"),
        ("add", "b1"),
    ]
    (removed,) = store.events(second)
    assert (removed.kind, removed.old_content, removed.details) == (
        "remove",
        "fact b1",
        {"why": "test"},
    )


def test_a_stale_base_is_refused_and_nothing_is_written(store: Store) -> None:
    base = seeded(store)
    mine = store.commit(Changes("edit", put=(fact("u2"),)), base=base)
    with pytest.raises(StaleRevision):
        store.commit(Changes("edit", put=(fact("u3"),), events=(Event("add", "u3"),)), base=base)
    snap = store.snapshot(Scope.everywhere())
    assert snap.revision == mine and {f.id for f in snap.facts} == {"u1", "a1", "b1", "u2"}
    after = store.commit(
        Changes("edit", put=(fact("u4"),), events=(Event("add", "u4"),)), base=mine
    )
    assert [e.fact_id for e in store.events(after)] == ["u4"]  # no event of the refused one


def test_a_commit_that_fails_writes_nothing(store: Store) -> None:
    base = seeded(store)
    broken = Changes(
        "edit",
        put=(fact("u2"),),
        remove=frozenset({"a1"}),
        summaries={"user.topOfMind": "half a change"},
        events=(Event("add", "u2"), Event("remove", "a1", details={"not json": object()})),
    )
    with pytest.raises((TypeError, ValueError)):
        store.commit(broken, base=base)
    snap = store.snapshot(Scope.everywhere())
    assert snap.revision == base
    assert {f.id for f in snap.facts} == {"u1", "a1", "b1"}
    assert "user.topOfMind" not in snap.summaries
    after = store.commit(
        Changes("edit", put=(fact("u5"),), events=(Event("add", "u5"),)), base=base
    )
    assert [e.fact_id for e in store.events(after)] == ["u5"]


@pytest.mark.parametrize(
    "changes",
    [
        Changes("edit", put=(fact("x"),), remove=frozenset({"x"})),
        Changes("edit", summaries={"user.noSuchSection": "x"}),
        Changes("edit", summaries={"elsewhere.x": "x"}),
    ],
)
def test_a_change_no_store_can_keep_is_refused(store: Store, changes: Changes) -> None:
    with pytest.raises(ValueError):
        store.commit(changes, base=Revision(0))
    assert store.snapshot(Scope.everywhere()).revision == 0


PROJECTS = st.sampled_from([None, "a", "b"])
FACT_IDS = st.sampled_from(["f1", "f2", "f3", "f4"])
SUMMARY_KEYS = st.sampled_from(
    ["user.workContext", "history.recentMonths", "projects.a", "projects.b"]
)
CHANGES = st.builds(
    lambda put, remove, summaries: Changes(
        "edit",
        put=tuple({f.id: f for f in put}.values()),
        remove=frozenset(remove) - {f.id for f in put},
        summaries=summaries,
        events=tuple(Event("add", f.id, new_content=f.content) for f in put),
    ),
    st.lists(st.builds(fact, FACT_IDS, PROJECTS, st.text(min_size=1, max_size=20)), max_size=3),
    st.sets(FACT_IDS, max_size=2),
    st.dictionaries(SUMMARY_KEYS, st.text(max_size=20), max_size=2),
)
SCOPES = [
    Scope(),
    Scope.of("a"),
    Scope.own("b"),
    Scope.several(["a", "b"]),
    Scope.everywhere(),
]


@pytest.mark.parametrize("kind", sorted(STORES))
@settings(max_examples=20, deadline=None)
@given(steps=st.lists(CHANGES, min_size=1, max_size=4))
def test_any_commits_read_back_as_the_reference_reads_them(
    kind: str, steps: list[Changes], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Whatever sequence of commits: every scope sees what the reference store sees."""
    opened = STORES[kind](tmp_path_factory.mktemp(kind))
    store, reference = next(opened)(), ReferenceStore()
    try:
        for changes in steps:
            mine = store.commit(changes, base=store.snapshot(Scope.everywhere()).revision)
            theirs = reference.commit(changes, base=reference.snapshot(Scope.everywhere()).revision)
            assert store.events(mine) == reference.events(theirs)
        for scope in SCOPES:
            got, want = store.snapshot(scope), reference.snapshot(scope)
            assert (got.facts, dict(got.summaries)) == (want.facts, dict(want.summaries))
    finally:
        opened.close()


# -- threads and messages ----------------------------------------------------------------------
def test_one_name_in_two_projects_is_two_threads(store: Store) -> None:
    in_a = store.thread_for("analysis", "a")
    in_b = store.thread_for("analysis", "b")
    assert in_a != in_b
    assert store.thread_for("analysis", "a") == in_a
    assert store.thread_for("analysis", "b") == in_b
    store.add_messages(in_a, [{"role": "user", "content": "about a"}], project="a")
    store.add_messages(in_b, [{"role": "user", "content": "about b"}], project="b")
    assert [m["content"] for m in store.messages(in_a)] == ["about a"]
    assert [m["content"] for m in store.messages(in_b)] == ["about b"]
    assert store.thread_for("notes", None) == store.thread_for("notes", "default")


def test_messages_round_trip(store: Store) -> None:
    thread = store.thread_for("t", "a")
    messages = [
        {"role": "user", "content": "plot the ünïcode ✓ column"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "content": "done", "tool_call_id": "c1", "name": "f"},
        {"role": "assistant", "content": "here it is"},
    ]
    assert store.add_messages(thread, messages[:2], project="a") == 2
    assert store.add_messages(thread, messages[2:], project="a") == 4
    assert store.messages(thread) == messages
    assert store.messages(thread, after_seq=2) == messages[2:]


# -- the fold queue and its leases -------------------------------------------------------------
def until_expired(lease: Lease) -> None:
    time.sleep(max(0.0, lease.expires_at - time.time()) + 0.05)


def queued_thread(store: Store, name: str = "t", *, after: float = 0.0) -> str:
    thread = store.thread_for(name, "a")
    store.add_messages(thread, [{"role": "user", "content": f"in {name}"}], project="a")
    store.enqueue(thread, after=after)
    return thread


def test_enqueue_is_idempotent(store: Store) -> None:
    thread = queued_thread(store)
    store.enqueue(thread)
    store.enqueue(thread)
    assert store.queued() == [thread]
    lease = store.claim("w1", 5.0)
    assert lease is not None and lease.thread == thread
    assert store.claim("w2", 5.0) is None  # one entry, already leased


def test_an_entry_is_not_claimed_before_it_is_due(store: Store) -> None:
    queued_thread(store, after=60.0)
    assert store.claim("w1", 5.0) is None


def test_a_lease_holds_until_it_expires_then_another_owner_claims(store: Store) -> None:
    thread = queued_thread(store)
    first = store.claim("w1", 0.2)
    assert first is not None and (first.thread, first.owner, first.through_seq) == (thread, "w1", 1)
    assert store.claim("w2", 5.0) is None
    until_expired(first)
    second = store.claim("w2", 5.0)
    assert second is not None and (second.thread, second.owner) == (thread, "w2")
    with pytest.raises(LeaseLost):
        store.renew(first, 5.0)
    with pytest.raises(LeaseLost):
        store.release(first, done=True)
    store.release(first)  # giving back a lost lease takes nothing from its new owner
    assert store.claim("w3", 5.0) is None
    assert store.queued() == [thread]


def test_an_expired_lease_is_lost_even_when_nobody_took_it(store: Store) -> None:
    thread = queued_thread(store)
    lease = store.claim("w1", 0.2)
    assert lease is not None
    until_expired(lease)
    with pytest.raises(LeaseLost):
        store.renew(lease, 5.0)
    with pytest.raises(LeaseLost):
        store.release(lease, done=True)
    assert store.queued() == [thread]


def test_a_renewed_lease_is_not_claimed(store: Store) -> None:
    queued_thread(store)
    lease = store.claim("w1", 0.3)
    assert lease is not None
    renewed = store.renew(lease, 5.0)
    assert renewed.expires_at > lease.expires_at
    until_expired(lease)
    assert store.claim("w2", 5.0) is None
    store.release(renewed, done=True)
    assert store.queued() == []


def test_a_released_entry_is_claimed_at_once(store: Store) -> None:
    thread = queued_thread(store)
    lease = store.claim("w1", 60.0)
    assert lease is not None
    store.release(lease)
    again = store.claim("w2", 60.0)
    assert again is not None and again.thread == thread


def test_enqueue_during_a_lease_keeps_it_and_the_newer_messages(store: Store) -> None:
    thread = queued_thread(store)
    lease = store.claim("w1", 60.0)
    assert lease is not None and lease.through_seq == 1
    store.add_messages(thread, [{"role": "user", "content": "more"}], project="a")
    store.enqueue(thread)
    assert store.claim("w2", 60.0) is None  # still w1's
    store.release(lease, done=True)
    assert store.queued() == [thread]  # the newer message still waits for a fold
    later = store.claim("w2", 60.0)
    assert later is not None and later.through_seq == 2


def test_each_due_entry_goes_to_one_owner(store: Store) -> None:
    threads = {queued_thread(store, name) for name in ("t1", "t2", "t3")}
    leases = [store.claim(f"w{i}", 60.0) for i in range(4)]
    assert sorted(lease.thread for lease in leases if lease) == sorted(threads)
    assert leases[3] is None


def test_concurrent_claims_hand_each_entry_to_one_owner(store: Store) -> None:
    threads = [queued_thread(store, f"t{i}") for i in range(12)]
    got: list[str] = []

    def work(owner: str) -> None:
        while (lease := store.claim(owner, 60.0)) is not None:
            got.append(lease.thread)

    workers = [threading.Thread(target=work, args=(f"w{i}",)) for i in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert sorted(got) == sorted(threads)


# -- at once: committers and claimers racing on one store ---------------------------------------
RACERS = 8  # threads at once
ROUNDS = 20  # races per test: a race in one process is won by chance, so run it again
PROCESS_ROUNDS = 10


def racing(ready: Callable[[int], Any], act: Callable[[int, Any], Any]) -> list[tuple[Any, Any]]:
    """``RACERS`` threads, each doing ``ready(i)`` (reading its snapshot, say), then waiting
    at one barrier until all are ready, then ``act(i, what ready gave)`` at once; with the
    interpreter switching threads as often as it can, so that they interleave. For each:
    what ``ready`` gave, and what ``act`` returned or raised."""
    barrier = threading.Barrier(RACERS, timeout=60)
    got: list[tuple[Any, Any]] = [(None, None)] * RACERS

    def run(i: int) -> None:
        mine = None
        try:
            mine = ready(i)
            barrier.wait()
            got[i] = (mine, act(i, mine))
        except Exception as exc:  # noqa: BLE001 (each outcome is the test's to judge)
            got[i] = (mine, exc)

    workers = [threading.Thread(target=run, args=(i,)) for i in range(RACERS)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(120)
    finally:
        sys.setswitchinterval(interval)
    assert not any(worker.is_alive() for worker in workers)
    return got


def racer_fact(n: int) -> Fact:
    """Racer ``n``'s own fact: the user's, project a's or project b's."""
    return fact(f"r{n}", [None, "a", "b"][n % 3])


def racer_changes(one: Fact) -> Changes:
    """A racer's change set: its fact put, the user's work context said its way, one event."""
    return Changes(
        "edit",
        source=one.id,
        put=(one,),
        summaries={"user.workContext": f"as {one.id} says"},
        events=(Event("add", one.id),),
    )


def only_the_winner_is_in(store: Store, before: Snapshot, outcomes: dict[str, Any]) -> None:
    """Of racers that all committed on ``before``'s revision (by its fact's id: the new
    revision, or what it raised), exactly one was accepted and every other was told
    ``StaleRevision``; the store holds what it held and the winner's change, at the
    winner's revision, and no loser's fact, summary or event."""
    base = before.revision
    won = {who: got for who, got in outcomes.items() if not isinstance(got, StaleRevision)}
    assert len(won) == 1, f"not exactly one commit accepted on base {base}: {outcomes}"
    ((winner, revision),) = won.items()
    assert isinstance(revision, int) and revision > base, outcomes
    snap = store.snapshot(Scope.everywhere())
    assert snap.revision == revision
    assert {f.id for f in snap.facts} == {f.id for f in before.facts} | {winner}
    assert snap.summaries["user.workContext"] == f"as {winner} says"
    assert [e.fact_id for e in store.events(revision)] == [winner]
    assert all(store.events(Revision(r)) == [] for r in range(base + 1, revision))


def committing(racers: list[Store], changes: list[Changes]) -> list[tuple[Any, Any]]:
    """Racer ``i`` reads a snapshot, then commits ``changes[i]`` on its revision, at once."""
    return racing(
        lambda i: racers[i].snapshot(Scope.of("a")).revision,
        lambda i, base: racers[i].commit(changes[i], base=base),
    )


@pytest.mark.parametrize("own_handles", [True, False], ids=["own-handles", "one-handle"])
def test_commits_racing_on_one_base_let_exactly_one_in(
    handles: Handles, store: Store, own_handles: bool
) -> None:
    """Eight threads read the same revision, then commit different change sets at once
    (each on a connection of its own, or all through one handle): one is accepted, seven
    are told ``StaleRevision``, and no loser's change gets into the store (a revision
    checked outside the commit's lock or transaction lets several in: lost updates)."""
    seeded(store)
    racers = [handles() if own_handles else store for _ in range(RACERS)]
    for n in range(0, ROUNDS * RACERS, RACERS):
        before = store.snapshot(Scope.everywhere())
        changes = [racer_changes(racer_fact(n + i)) for i in range(RACERS)]
        got = committing(racers, changes)
        assert [read for read, _ in got] == [before.revision] * RACERS, got
        outcomes = {c.source: out for c, (_, out) in zip(changes, got, strict=True)}
        only_the_winner_is_in(store, before, outcomes)


@pytest.mark.parametrize("expired", [False, True], ids=["fresh", "expired"])
def test_claimers_racing_for_one_entry_let_exactly_one_have_it(
    handles: Handles, store: Store, expired: bool
) -> None:
    """Eight threads, each on a connection of its own, claim the one due entry at once (a
    fresh entry, or one whose lease just expired): exactly one gets the lease, the others
    get None, and the entry stays leased to the winner alone."""
    claimers = [handles() for _ in range(RACERS)]
    for n in range(ROUNDS):
        thread = queued_thread(store, f"t{n}")
        old = store.claim("w-old", 0.02) if expired else None
        if old is not None:
            until_expired(old)
        got = [
            out
            for _, out in racing(lambda i: claimers[i], lambda i, mine: mine.claim(f"w{i}", 60.0))
        ]
        leases = [out for out in got if out is not None]
        assert len(leases) == 1 and isinstance(leases[0], Lease), got
        assert (leases[0].thread, leases[0].through_seq) == (thread, 1)
        assert store.claim("late", 60.0) is None
        assert store.renew(leases[0], 60.0).owner == leases[0].owner
        if old is not None:
            with pytest.raises(LeaseLost):
                store.renew(old, 60.0)


RACER = """
import importlib, json, sys, time
from deerflow_nb.storage.contract import Changes, Event, Fact, Scope, StaleRevision
module, _, name = sys.argv[1].rpartition(".")
store = getattr(importlib.import_module(module), name).open(sys.argv[2])
while line := sys.stdin.readline():  # a round: who this racer is, and its fact (None: claim)
    me, task = json.loads(line)
    base = store.snapshot(Scope()).revision
    print(base, flush=True)  # ready
    start = float(sys.stdin.readline())  # every racer is ready: go, all at this instant
    while time.time() < start:
        pass
    if task is None:
        lease = store.claim(me, 60.0)
        print(json.dumps(lease and lease.thread), flush=True)
        continue
    one = Fact.from_json(task)  # racer_changes(one):
    said = {"user.workContext": f"as {one.id} says"}
    changes = Changes("edit", one.id, (one,), summaries=said, events=(Event("add", one.id),))
    try:
        print(json.dumps(store.commit(changes, base=base)), flush=True)
    except StaleRevision:
        print(json.dumps("stale"), flush=True)
    except Exception as exc:  # not the contract's outcome: the test shows it
        print(json.dumps(repr(exc)), flush=True)
store.close()
"""
PROCESS_STORES = sorted(set(STORES) - IN_PROCESS_ONLY)
PROCESSES = 3


@contextlib.contextmanager
def racing_processes(handles: Handles) -> Iterator[Callable[[list[Any]], list[tuple[int, Any]]]]:
    """``PROCESSES`` processes on this store (other kernels on the home, other sessions on
    the server), each opened once; yields ``race(tasks)``: each process is given its task
    (its fact to commit, as JSON, or None: claim), reads a snapshot and says it is ready;
    once all are, all are told to go at once. For each: the revision it read, and what it
    got (the new revision or "stale"; the thread leased or None)."""
    assert handles.where is not None
    kind, where = handles.where
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "text": True, "env": env}
    children = [
        subprocess.Popen([sys.executable, "-c", RACER, kind, where], **pipes)  # type: ignore[call-overload]
        for _ in range(PROCESSES)
    ]

    def tell(child: subprocess.Popen[str], what: str) -> None:
        child.stdin.write(what + "\n")  # type: ignore[union-attr]
        child.stdin.flush()  # type: ignore[union-attr]

    def hear(child: subprocess.Popen[str]) -> Any:
        line = child.stdout.readline()  # type: ignore[union-attr]
        assert line, f"a racer died (exit {child.wait(60)})"
        return json.loads(line)

    def race(tasks: list[Any]) -> list[tuple[int, Any]]:
        for i, (child, task) in enumerate(zip(children, tasks, strict=True)):
            tell(child, json.dumps([f"p{i}", task]))
        read = [hear(child) for child in children]
        start = time.time() + 0.02  # each is told before then, and spins until then
        for child in children:
            tell(child, repr(start))
        return list(zip(read, [hear(child) for child in children], strict=True))

    try:
        yield race
        for child in children:
            child.stdin.close()  # type: ignore[union-attr]
        assert [child.wait(60) for child in children] == [0] * PROCESSES
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()


@pytest.mark.parametrize("handles", PROCESS_STORES, indirect=True)
def test_processes_committing_on_one_base_let_exactly_one_in(
    handles: Handles, store: Store
) -> None:
    """Three processes (kernels on one home, sessions on one server) read the same
    revision, then commit different change sets at once: one is accepted, the others are
    told ``StaleRevision``, and the store holds the winner's change alone; ten times."""
    seeded(store)
    with racing_processes(handles) as race:
        for n in range(0, PROCESS_ROUNDS * PROCESSES, PROCESSES):
            before = store.snapshot(Scope.everywhere())
            facts = [racer_fact(n + i) for i in range(PROCESSES)]
            got = race([one.to_json() for one in facts])
            assert [read for read, _ in got] == [before.revision] * PROCESSES, got
            outcomes = {
                one.id: StaleRevision() if out == "stale" else out
                for one, (_, out) in zip(facts, got, strict=True)
            }
            only_the_winner_is_in(store, before, outcomes)


@pytest.mark.parametrize("handles", PROCESS_STORES, indirect=True)
def test_processes_claiming_one_entry_let_exactly_one_have_it(
    handles: Handles, store: Store
) -> None:
    """Three processes claim the one due entry at once: exactly one gets it; ten times."""
    with racing_processes(handles) as race:
        for n in range(PROCESS_ROUNDS):
            thread = queued_thread(store, f"t{n}")
            got = [out for _, out in race([None] * PROCESSES)]
            assert sorted(got, key=str) == sorted([thread, None, None], key=str), got
            assert store.claim("late", 60.0) is None


# -- the SQLite home: the same files Memory uses ---------------------------------------------------
def test_the_sqlite_home_is_the_memory_home(home: Path) -> None:
    mem = Memory(home)
    added = mem.add_fact("prefers polars", category="preference")
    store = SQLiteHome.open(home)
    try:
        snap = store.snapshot(Scope())
        assert [f.content for f in snap.facts] == ["prefers polars"]
        assert snap.revision == mem.versions()[-1]["id"]
        store.commit(
            Changes("edit", put=(fact("p1", "a", "uses the trials table"),)), base=snap.revision
        )
        assert {f["content"] for f in mem.data["facts"]} == {
            "prefers polars",
            "uses the trials table",
        }
        assert added is not None
    finally:
        store.close()
        mem.close()


def test_two_sqlite_handles_refuse_each_others_stale_base(home: Path) -> None:
    one, two = SQLiteHome.open(home), SQLiteHome.open(home)
    try:
        base = two.snapshot(Scope()).revision
        one.commit(Changes("edit", put=(fact("u1"),)), base=base)
        with pytest.raises(StaleRevision):
            two.commit(Changes("edit", put=(fact("u2"),)), base=base)
        assert ids(two, Scope()) == {"u1"}
    finally:
        one.close()
        two.close()


def test_a_journal_failure_mid_commit_leaves_memory_json_alone(home: Path) -> None:
    """A real failure inside the commit's transaction (the database refuses the event
    row, after the version row went in): no version, no event, memory.json unchanged."""
    store = SQLiteHome.open(home)
    try:
        base = seeded(store)
        before = (home / "memory.json").read_bytes()
        with sqlite3.connect(home / "journal.db") as conn:
            conn.execute(
                "CREATE TRIGGER refuse BEFORE INSERT ON memory_events "
                "BEGIN SELECT RAISE(ABORT, 'the disk said no'); END"
            )
        with pytest.raises(sqlite3.DatabaseError, match="the disk said no"):
            store.commit(
                Changes("edit", put=(fact("u2"),), events=(Event("add", "u2"),)), base=base
            )
        assert (home / "memory.json").read_bytes() == before
        assert not list(home.glob("memory.json.*.tmp"))
        assert store.snapshot(Scope.everywhere()).revision == base
        assert store.events(Revision(base + 1)) == []
    finally:
        store.close()


CLAIMER = """
import sys
from deerflow_nb.memory.sqlite_home import SQLiteHome
from deerflow_nb.shared.store import PostgresStore
store = SQLiteHome.open(sys.argv[1])
while (lease := store.claim(sys.argv[2], 60.0)) is not None:
    print(lease.thread, flush=True)
"""


def test_processes_claiming_at_once_never_share_an_entry(home: Path) -> None:
    """Real processes on one home: every queued thread is leased once, to one of them."""
    store = SQLiteHome.open(home)
    try:
        threads = [queued_thread(store, f"t{i}") for i in range(30)]
    finally:
        store.close()
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CLAIMER, str(home), f"p{i}"], stdout=subprocess.PIPE, text=True
        )
        for i in range(3)
    ]
    claimed = [
        line for child in children for line in child.communicate(timeout=120)[0].splitlines()
    ]
    assert all(child.returncode == 0 for child in children)
    assert sorted(claimed) == sorted(threads)


def test_what_the_sqlite_home_queues_memory_folds_without_private_turns(home: Path) -> None:
    """The contract's queue is the fold's queue: ``Memory.flush`` folds an entry the store
    queued, and a turn run without memory stays out of it."""
    store = SQLiteHome.open(home)
    try:
        thread = store.thread_for("t", None)
        turn = store.journal.begin_turn(
            thread, {"role": "user", "content": "I prefer R."}, model="m", private=True
        )
        store.journal.end_turn(
            turn, status="ok", messages=[{"role": "assistant", "content": "Ok."}]
        )
        said = [
            {"role": "user", "content": "I prefer polars over pandas."},
            {"role": "assistant", "content": "Noted."},
        ]
        store.add_messages(thread, said)
        store.enqueue(thread)
    finally:
        store.close()
    mem = Memory(home)
    try:
        assert mem.flush().folded == [thread]
        assert [f["content"] for f in mem.data["facts"]] == ["Prefers polars over pandas"]
    finally:
        mem.close()
