"""``PostgresStore`` (``deerflow_nb/shared/store.py``) as members use it, on a real
PostgreSQL: a shared project's facts on the server are what the members' homes hold after
a sync, row-level security on every table the store adds, the server's wipe guard (a day's
removals of a project's facts bounded across all members, even for direct SQL), and
concurrency between connections. The contract itself runs in ``test_store_contract.py``.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pg_cluster import PgCluster, migrated_database
from test_team_postgres import Team, shared  # noqa: F401  (a database per test)

from deerflow_nb.cli import main
from deerflow_nb.memory import Memory
from deerflow_nb.memory.scopes import project_summary
from deerflow_nb.memory.updates.team_changes import team_id
from deerflow_nb.shared import team
from deerflow_nb.shared.connect import SharedError
from deerflow_nb.shared.store import PostgresStore
from deerflow_nb.storage.contract import Changes, Event, Fact, Scope, StaleRevision

PROJECT = "churn"


def on_server(url: str, project: str = PROJECT) -> dict[str, tuple[str, str]]:
    """``{id: (content, category)}`` of ``project``'s facts, read by ``url``'s role."""
    store = PostgresStore.open(url)
    try:
        return {f.id: (f.content, f.category) for f in store.snapshot(Scope.own(project)).facts}
    finally:
        store.close()


def at_home(memory: Memory, project: str = PROJECT) -> dict[str, tuple[str, str]]:
    facts = memory.data["facts"]
    return {team_id(f): (f["content"], f["category"]) for f in facts if f.get("project") == project}


def put(store: PostgresStore, *facts: Fact, **summaries: str) -> int:
    base = store.snapshot(Scope()).revision
    events = tuple(Event("add", f.id, new_content=f.content) for f in facts)
    changes = Changes("edit", put=facts, events=events, summaries=summaries)
    return store.commit(changes, base=base, origin="user")


def test_a_shared_projects_facts_on_the_server_are_what_the_homes_hold(
    shared: Team,  # noqa: F811
    tmp_path: Path,
) -> None:
    alice_url, bob_url = shared.member(PROJECT, "alice"), shared.member(PROJECT, "bob")
    with Memory(tmp_path / "alice") as alice, Memory(tmp_path / "bob") as bob:
        kept = [
            alice.add_fact(f"Table {n} holds the raw events", project=PROJECT) for n in range(3)
        ]
        alice.add_fact("Prefers polars over pandas")  # alice's own: never on the server
        alice.share(PROJECT, alice_url)
        bob.join(PROJECT, bob_url)
        bob.add_fact("Sales data comes from the orders warehouse", project=PROJECT)
        bob.sync()
        alice.sync()
        alice.facts.edit(kept[0]["id"], "Table 0 holds the cleaned events")
        alice.forget(kept[1]["id"])
        context = {"summary": "A churn model for the third quarter", "shouldUpdate": True}
        alice.apply({"newFacts": [], "projectContext": context}, source="thread-1", project=PROJECT)
        alice.sync()
        bob.sync()
        assert at_home(alice) == at_home(bob)
        assert on_server(alice_url) == on_server(bob_url) == at_home(alice)
        assert len(at_home(alice)) == 3
        store = PostgresStore.open(bob_url)
        try:
            snap = store.snapshot(Scope.everywhere())
            summary = "A churn model for the third quarter"
            assert dict(snap.summaries) == {f"projects.{PROJECT}": summary}
            assert project_summary(alice.data, PROJECT) == project_summary(bob.data, PROJECT)
            assert project_summary(bob.data, PROJECT) == summary
            assert "Prefers polars over pandas" not in {f.content for f in snap.facts}
            by = {f.content: f.extra.get("person") for f in snap.facts}
            assert by["Sales data comes from the orders warehouse"] == f"bob_{shared.suffix}"
            assert by["Table 2 holds the raw events"] == f"alice_{shared.suffix}"
        finally:
            store.close()


def test_a_store_commit_to_a_team_project_reaches_the_members_homes(
    shared: Team,  # noqa: F811
    tmp_path: Path,
) -> None:
    alice_url, bob_url = shared.member(PROJECT, "alice"), shared.member(PROJECT, "bob")
    store = PostgresStore.open(alice_url)
    try:
        with Memory(tmp_path / "bob") as bob:
            bob.join(PROJECT, bob_url)
            target = Fact("t1", "The target column is churned_90d", "knowledge", 0.9, PROJECT)
            put(store, target, **{f"projects.{PROJECT}": "A churn model"})
            assert bob.sync().applied == 1
            assert at_home(bob) == on_server(bob_url) == {"t1": (target.content, "knowledge")}
            assert project_summary(bob.data, PROJECT) == "A churn model"
            edited = Fact("t1", "The target column is churned_60d", "knowledge", 0.8, PROJECT)
            revision = store.commit(
                Changes("edit", put=(edited,)), base=store.snapshot(Scope()).revision
            )
            assert bob.sync().applied == 1
            assert at_home(bob) == on_server(bob_url) == {"t1": (edited.content, "knowledge")}
            store.commit(Changes("forget", remove=frozenset({"t1"})), base=revision)
            bob.sync()
            assert at_home(bob) == on_server(bob_url) == {}
        with psycopg.connect(bob_url) as conn:
            rows = conn.execute(
                "SELECT v.version, c.person, c.origin FROM deerflow.versions v"
                " JOIN deerflow.change_sets c ON c.id = v.change_set ORDER BY v.version"
            ).fetchall()
        assert rows == [(n, f"alice_{shared.suffix}", "user") for n in (1, 2, 3)]
    finally:
        store.close()


def test_every_table_of_the_store_keeps_projects_and_roles_apart(shared: Team) -> None:  # noqa: F811
    carol_url, dave_url = shared.member("project_a", "carol"), shared.member("project_b", "dave")
    student_url = shared.member("project_a", "student", read_only=True)
    carol, dave = PostgresStore.open(carol_url), PostgresStore.open(dave_url)
    student = PostgresStore.open(student_url)
    try:
        put(carol, Fact("a1", "a's fact", project="project_a"), **{"projects.project_a": "a"})
        put(carol, Fact("c1", "carol's own"), **{"user.workContext": "carol works"})
        put(dave, Fact("b1", "b's fact", project="project_b"), **{"projects.project_b": "b"})
        put(dave, Fact("d1", "dave's own"))
        for store in (carol, dave):
            thread = store.thread_for("t", None)
            store.add_messages(thread, [{"role": "user", "content": "private"}])
            store.enqueue(thread)
        snap = carol.snapshot(Scope.everywhere())
        assert {f.id for f in snap.facts} == {"a1", "c1"}
        assert set(snap.summaries) == {"projects.project_a", "user.workContext"}
        assert {f.id for f in student.snapshot(Scope.everywhere()).facts} == {"a1"}
        assert carol.events(snap.revision) == []  # dave's last commit: none of it is carol's
        with psycopg.connect(carol_url) as conn:
            for table in ("facts", "summaries", "events", "revisions"):
                seen = conn.execute(
                    f"SELECT count(*) FROM deerflow.{table} WHERE project = 'project_b'"
                ).fetchone()
                assert seen == (0,), table
            for table in ("facts", "summaries", "events", "threads", "messages", "queue"):
                owners = {r[0] for r in conn.execute(f"SELECT owner FROM deerflow.{table}")}
                assert f"dave_{shared.suffix}" not in owners, table
        with psycopg.connect(carol_url, autocommit=True) as conn:  # provenance is the server's
            conn.execute(
                "INSERT INTO deerflow.facts (project, id, content, category, confidence, person)"
                " VALUES ('project_a', 'a2', 'x', 'context', 1, %s)",
                [f"dave_{shared.suffix}"],
            )
            by = conn.execute("SELECT person FROM deerflow.facts WHERE id = 'a2'").fetchone()
            assert by == (f"carol_{shared.suffix}",)
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
                conn.execute("INSERT INTO deerflow.revisions (revision) VALUES (1000000)")
        with pytest.raises(SharedError, match="is no member of project project_b"):
            put(carol, Fact("x", "into b", project="project_b"))
        fix = f"`deerflow-nb team add --url URL project_a student_{shared.suffix}`"
        with pytest.raises(SharedError, match=f"read-only member of project project_a: .*{fix}"):
            put(student, Fact("s1", "a student's change", project="project_a"))
        with psycopg.connect(student_url, autocommit=True) as conn:
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
                conn.execute(
                    "INSERT INTO deerflow.facts (project, id, content, category, confidence)"
                    " VALUES ('project_a', 's2', 'x', 'context', 1)"
                )
            for statement in (
                "DELETE FROM deerflow.facts",
                "UPDATE deerflow.facts SET content = 'changed'",
                "DELETE FROM deerflow.summaries",
                "UPDATE deerflow.projects SET max_removals = 1000",  # not its owner
            ):
                assert conn.execute(statement).rowcount == 0, statement
        assert on_server(dave_url, "project_b") == {"b1": ("b's fact", "context")}
        assert on_server(carol_url, "project_a") == {
            "a1": ("a's fact", "context"),
            "a2": ("x", "context"),
        }
    finally:
        for store in (carol, dave, student):
            store.close()


def guarded_project(shared: Team, facts: int = 30) -> tuple[str, str]:  # noqa: F811
    """``PROJECT`` with ``facts`` facts, put there by alice; (alice's URL, bob's URL)."""
    alice_url, bob_url = shared.member(PROJECT, "alice"), shared.member(PROJECT, "bob")
    store = PostgresStore.open(alice_url)
    try:
        put(store, *(Fact(f"f{n}", f"fact {n}", project=PROJECT) for n in range(facts)))
    finally:
        store.close()
    return alice_url, bob_url


def test_the_server_bounds_a_days_removals_even_by_direct_sql(shared: Team) -> None:  # noqa: F811
    alice_url, bob_url = guarded_project(shared)
    with psycopg.connect(bob_url, autocommit=True) as conn:
        with pytest.raises(psycopg.Error, match="would pass the bound of 20") as refused:
            conn.execute("DELETE FROM deerflow.facts WHERE project = %s", [PROJECT])
        assert refused.value.sqlstate == "DFW01"
        with pytest.raises(psycopg.Error, match="would pass the bound"):
            conn.execute(
                "INSERT INTO deerflow.change_sets (id, project, origin, created, payload)"
                " VALUES (gen_random_uuid(), %s, 'user', now(), %s)",
                [PROJECT, psycopg.types.json.Jsonb({"diff": {"factsToRemove": [
                    f"f{n}" for n in range(30)]}})],
            )  # fmt: skip
        assert len(on_server(bob_url)) == 30  # nothing dropped
        assert conn.execute("DELETE FROM deerflow.facts WHERE id = 'f0'").rowcount == 1
    store = PostgresStore.open(alice_url)
    try:
        snap = store.snapshot(Scope.own(PROJECT))
        removed = frozenset(f"f{n}" for n in range(1, 21))  # 1 + 20 today: past 20
        with pytest.raises(SharedError, match="wipe guard refused.*team limit PROJECT N"):
            store.commit(Changes("forget", remove=removed), base=snap.revision)
        assert len(on_server(alice_url)) == 29
        store.commit(Changes("forget", remove=frozenset({"f1"})), base=snap.revision)
        assert len(on_server(alice_url)) == 28  # a normal removal passes
        assert main(["team", "limit", PROJECT, "100", "--url", alice_url]) == 2  # not its owner
        assert main(["team", "limit", PROJECT, "100", "--share", "0.9", "--url", shared.url]) == 0
        base = store.snapshot(Scope.own(PROJECT)).revision
        store.commit(Changes("forget", remove=removed - {"f1"}), base=base)
        assert len(on_server(alice_url)) == 9
    finally:
        store.close()


def test_a_refused_publish_waits_in_the_outbox_and_other_projects_publish(
    shared: Team,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    alice_url, bob_url = shared.member(PROJECT, "alice"), shared.member(PROJECT, "bob")
    team.add_member(shared.url, "other", f"alice_{shared.suffix}")
    with Memory(tmp_path / "alice") as alice, Memory(tmp_path / "bob") as bob:
        facts = [alice.add_fact(f"Table {n} holds events", project=PROJECT) for n in range(30)]
        alice.share(PROJECT, alice_url)
        alice.share("other", alice_url)
        bob.join(PROJECT, bob_url)
        alice.facts.forget_many([f["id"] for f in facts[:25]])
        alice.add_fact("The other project uses duckdb", project="other")
        report = alice.sync()
        (problem,) = report.problems
        assert "the server refused a change set of churn" in problem
        assert "team limit churn N --url URL" in problem and "waits in the outbox" in problem
        assert report.waiting == 1 and report.published == 1  # the other project's went
        assert "The other project uses duckdb" in {
            c for c, _ in on_server(alice_url, "other").values()
        }
        assert len(on_server(bob_url)) == 30 and len(at_home(bob)) == 30
        assert main(["team", "limit", PROJECT, "30", "--url", shared.url]) == 0
        assert "at most max(30, 50% of its facts)" in capsys.readouterr().out
        report = alice.sync()
        assert (report.published, report.waiting, report.problems) == (1, 0, [])
        assert len(on_server(bob_url)) == 5
        held = bob.sync().held  # bob's home holds so large a removal for his review too
        bob.approve(held)
        assert at_home(bob) == at_home(alice) == on_server(bob_url)


def test_connections_claiming_at_once_never_share_an_entry(postgres: PgCluster) -> None:
    url = migrated_database(postgres)
    first = PostgresStore.open(url)
    threads = []
    for n in range(20):
        thread = first.thread_for(f"t{n}", "a")
        first.add_messages(thread, [{"role": "user", "content": "hi"}], project="a")
        first.enqueue(thread)
        threads.append(thread)
    stores = [first, *(PostgresStore.open(url) for _ in range(3))]
    got: list[str] = []

    def work(store: PostgresStore, owner: str) -> None:
        while (lease := store.claim(owner, 60.0)) is not None:
            got.append(lease.thread)

    workers = [threading.Thread(target=work, args=(s, f"w{i}")) for i, s in enumerate(stores)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    for store in stores:
        store.close()
    assert sorted(got) == sorted(threads)


def test_connections_committing_at_once_lose_no_commit(postgres: PgCluster) -> None:
    """Each of four connections commits five facts, retrying on a stale base: all twenty
    are there, one revision each, none twice."""
    url = migrated_database(postgres)
    stores = [PostgresStore.open(url) for _ in range(4)]
    stale: list[Any] = []

    def work(store: PostgresStore, n: int) -> None:
        for k in range(5):
            while True:
                base = store.snapshot(Scope()).revision
                try:
                    store.commit(Changes("edit", put=(Fact(f"f{n}.{k}", "x"),)), base=base)
                    break
                except StaleRevision as exc:
                    stale.append(exc)

    workers = [threading.Thread(target=work, args=(s, n)) for n, s in enumerate(stores)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    snap = stores[0].snapshot(Scope())
    assert len(snap.facts) == 20 and snap.revision == 20
    for store in stores:
        store.close()


def test_a_failure_inside_a_commit_writes_nothing(postgres: PgCluster) -> None:
    """The database refuses the commit's event row after its facts, summary and revision
    went in: none of them is kept, and the next commit takes the same revision."""
    url = migrated_database(postgres)
    store = PostgresStore.open(url)
    try:
        base = put(store, Fact("u1", "kept"), **{"user.workContext": "before"})
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS"
                " $$ BEGIN RAISE EXCEPTION 'the disk said no'; END $$"
            )
            conn.execute(
                "CREATE TRIGGER refuse BEFORE INSERT ON deerflow.events"
                " FOR EACH ROW EXECUTE FUNCTION refuse()"
            )
        changes = Changes(
            "edit",
            put=(Fact("u2", "lost"),),
            remove=frozenset({"u1"}),
            summaries={"user.workContext": "after"},
            events=(Event("add", "u2"),),
        )
        with pytest.raises(psycopg.errors.RaiseException, match="the disk said no"):
            store.commit(changes, base=base)
        snap = store.snapshot(Scope())
        assert snap.revision == base and [f.id for f in snap.facts] == ["u1"]
        assert dict(snap.summaries) == {"user.workContext": "before"}
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("DROP TRIGGER refuse ON deerflow.events")
        assert store.commit(changes, base=base) == base + 1
    finally:
        store.close()


def test_a_database_without_the_store_tables_is_one_line_naming_the_fix(
    postgres: PgCluster,
) -> None:
    database = "bare_" + migrated_database(postgres).rsplit("_", 1)[1]
    with psycopg.connect(postgres.url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {database}")
    url = postgres.url_for("deerflow_admin", postgres.password, database)
    with pytest.raises(SharedError, match="no store tables .* `deerflow-nb team init URL`"):
        PostgresStore.open(url)
