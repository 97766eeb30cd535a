"""The background sync as a kernel runs it (``memory/team_sync.py``, issue 39): a teammate's
change arrives through the server's NOTIFY with no sync called and no poll due, a turn
never syncs in its own thread yet injects a change its kernel was told of (it asks the
background sync to take it in now), a teammate's change applied here wakes no further
sync, and projects on a second server are listened to as well as the first's."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
from pg_cluster import PgCluster
from test_team_postgres import Team, new_team, shared  # noqa: F401  (the fixture: a database per test)
from test_team_sharing import PROJECT, TARGET, contents, member, pgpass  # noqa: F401

from deerflow_nb import Agent
from deerflow_nb.memory import Memory, team_sync
from deerflow_nb.memory.sharing import Sharing
from deerflow_nb.shared.connect import without_password

NEVER = 3600.0  # a poll interval no test waits for: only a NOTIFY or a nudge syncs


def arrives(memory: Memory, text: str, project: str = PROJECT, within: float = 30.0) -> bool:
    """Whether ``text`` reaches ``memory``'s facts of ``project`` within ``within`` seconds,
    with nothing here calling sync."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if text in contents(memory, project):
            return True
        time.sleep(0.05)
    return False


def enrol(team_: Team, pgpass: Path, project: str, name: str) -> str:  # noqa: F811
    """A new member of ``project``: its URL without the password, which goes to ``pgpass``."""
    url = urlsplit(team_.member(project, name))
    with pgpass.open("a") as out:
        out.write(f"127.0.0.1:{url.port}:{team_.database}:{url.username}:{url.password}\n")
    return without_password(url.geturl())


@pytest.fixture
def second(postgres: PgCluster) -> Iterator[Team]:
    """Another team database on the cluster: a second shared server, as a home sees it."""
    yield new_team(postgres)


def test_a_teammates_change_arrives_by_notify_with_no_sync_called(
    shared: Team,  # noqa: F811
    pgpass: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    alice_url, bob_url = member(shared, pgpass, "alice"), member(shared, pgpass, "bob")
    with Memory(tmp_path / "alice") as alice, Memory(tmp_path / "bob") as bob:
        alice.share(PROJECT, alice_url)
        bob.join(PROJECT, bob_url)
        assert alice.team.start_sync(NEVER) and bob.team.start_sync(NEVER)
        try:
            time.sleep(0.5)  # both past their first sync: only a wake brings the next
            alice.add_fact(TARGET, project=PROJECT)  # the nudge publishes, NOTIFY wakes bob
            assert arrives(bob, TARGET)
            assert bob.team.sync_status()["applied"] == 1
        finally:
            alice.team.stop_sync()
            bob.team.stop_sync()


def test_a_turn_reads_local_memory_and_never_syncs(
    shared: Team,  # noqa: F811
    pgpass: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    alice_url, bob_url = member(shared, pgpass, "alice"), member(shared, pgpass, "bob")
    with Memory(tmp_path / "alice") as alice, Memory(tmp_path / "bob") as bob:
        alice.share(PROJECT, alice_url)
        bob.join(PROJECT, bob_url)
        calls: list[tuple[str, str]] = []  # (the kind of sync, the thread that called it)
        real = Sharing.sync

        def counted(self: Sharing, *args: object, **kwargs: object) -> object:
            kind = "background" if kwargs.get("pool") is not None else "explicit"
            calls.append((kind, threading.current_thread().name))
            return real(self, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(Sharing, "sync", counted)
        bob.team.start_sync(NEVER)
        try:
            alice.add_fact(TARGET, project=PROJECT)
            alice.sync()
            assert arrives(bob, TARGET)
            agent = Agent(settings=bob.settings, model="offline", memory=bob)
            before = len(calls)
            agent.run("Which column is the target?", thread="t", project=PROJECT)
            assert TARGET in agent.last_turn.injected
            turn = threading.current_thread().name
            assert [c for c in calls[before:] if c[1] == turn] == []  # the turn synced nothing
        finally:
            bob.team.stop_sync()
    assert {kind for kind, _ in calls} == {"explicit", "background"}
    assert {who for kind, who in calls if kind == "background"} == {"deerflow-team-sync"}


@contextmanager
def alice_and_bob(team_: Team, pgpass: Path, tmp_path: Path) -> Iterator[tuple[Memory, Memory]]:  # noqa: F811
    """Alice shares the project; Bob joins it and syncs in the background, past its first
    sync (only a NOTIFY or a nudge brings the next)."""
    alice_url, bob_url = member(team_, pgpass, "alice"), member(team_, pgpass, "bob")
    with Memory(tmp_path / "alice") as alice, Memory(tmp_path / "bob") as bob:
        alice.share(PROJECT, alice_url)
        bob.join(PROJECT, bob_url)
        assert bob.team.start_sync(NEVER)
        try:
            time.sleep(0.5)
            yield alice, bob
        finally:
            bob.team.stop_sync()


def test_a_turn_takes_in_a_noticed_change_before_the_background_would(
    shared: Team,  # noqa: F811
    pgpass: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The background sync, once noticed, would wait a minute for more notices: only the
    # turn's catch-up can bring the change in time.
    monkeypatch.setattr(team_sync, "GATHER", 60.0)
    with alice_and_bob(shared, pgpass, tmp_path) as (alice, bob):
        background = bob.team._team_sync
        alice.add_fact(TARGET, project=PROJECT)
        alice.sync()  # on the server; bob's listener is told
        deadline = time.monotonic() + 30
        while not (background._noticed or background._waiting_notice()):
            assert time.monotonic() < deadline, "bob was never told of the change"
            time.sleep(0.02)
        assert TARGET not in contents(bob, PROJECT)  # the background gathers on
        agent = Agent(settings=bob.settings, model="offline", memory=bob)
        started = time.monotonic()
        agent.run("Which column is the target?", thread="t", project=PROJECT)
        assert TARGET in agent.last_turn.injected
        assert time.monotonic() - started < team_sync.CATCH_UP + 5
        assert bob.team.sync_status()["applied"] == 1


def test_a_teammates_change_applied_here_wakes_no_further_sync(
    shared: Team,  # noqa: F811
    pgpass: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    with alice_and_bob(shared, pgpass, tmp_path) as (alice, bob):
        before = bob.team.sync_status()["syncs"]
        alice.add_fact(TARGET, project=PROJECT)
        alice.sync()
        assert arrives(bob, TARGET)
        time.sleep(1.0)  # a sync woken by bob's own commit of it would have run by now
        assert bob.team.sync_status()["syncs"] == before + 1


def test_the_background_sync_listens_on_every_shared_server(
    shared: Team,  # noqa: F811
    second: Team,
    pgpass: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Bob takes part in a project on each of two databases; a NOTIFY from either brings
    its change with no poll due (each awaited on its own: both servers are listened to)."""
    other, late = "clinic", "Readmissions are counted within 30 days"
    alice_url, bob_url = member(shared, pgpass, "alice"), member(shared, pgpass, "bob")
    carol_url, bob2_url = enrol(second, pgpass, other, "carol"), enrol(second, pgpass, other, "bob")
    with (
        Memory(tmp_path / "alice") as alice,
        Memory(tmp_path / "bob") as bob,
        Memory(tmp_path / "carol") as carol,
    ):
        alice.share(PROJECT, alice_url)
        bob.join(PROJECT, bob_url)
        carol.add_fact("Cohort starts in 2024", project=other)
        carol.share(other, carol_url)
        bob.join(other, bob2_url)
        assert {e["url"] for e in bob.team.projects().values()} == {bob_url, bob2_url}
        assert bob.team.start_sync(NEVER)
        try:
            time.sleep(0.5)
            carol.add_fact(late, project=other)
            carol.sync()  # published: only the second server's NOTIFY tells bob
            assert arrives(bob, late, project=other)
            alice.add_fact(TARGET, project=PROJECT)
            alice.sync()
            assert arrives(bob, TARGET)
        finally:
            bob.team.stop_sync()


def test_the_background_sync_connects_again_after_its_connections_are_cut(
    shared: Team,  # noqa: F811
    pgpass: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The server ends the sync's kept connection and its listener (a restart, an admin):
    the next sync connects again, and the next NOTIFY still brings a change."""
    alice_url, bob_url = member(shared, pgpass, "alice"), member(shared, pgpass, "bob")
    with Memory(tmp_path / "alice") as alice, Memory(tmp_path / "bob") as bob:
        alice.share(PROJECT, alice_url)
        bob.join(PROJECT, bob_url)
        role = bob.team.projects()[PROJECT]["role"]
        assert bob.team.start_sync(NEVER)
        try:
            time.sleep(0.5)
            with psycopg.connect(shared.url, autocommit=True) as admin:
                cut = admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                    [role],
                ).fetchall()
            assert len(cut) == 2  # the kept connection and the listener
            time.sleep(1.0)  # the listener's end wakes the thread, which listens again
            alice.add_fact(TARGET, project=PROJECT)
            alice.sync()
            assert arrives(bob, TARGET)
        finally:
            bob.team.stop_sync()


def test_a_turn_asking_while_a_listener_closes_is_not_broken(
    shared: Team,  # noqa: F811
    pgpass: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    from deerflow_nb.shared.exchange import Listener

    bob_url = member(shared, pgpass, "bob")
    with Memory(tmp_path / "bob") as bob:
        bob.join(PROJECT, bob_url)
        background = team_sync.TeamSync(bob.team, bob.on_change)
        closed = Listener.open(bob_url)
        closed.close()  # as the sync thread closes one that lost its server
        background._listeners["gone"] = closed
        try:
            assert background._waiting_notice() is False
        finally:
            background.stop()
