"""Team memory on a real PostgreSQL (issue 39): the schema, who may read and write what
(enforced by the database itself), publishing from a durable outbox, pulling once.

Each test gets its own database in the session's cluster (``pg_cluster.py``) and its own
member roles (roles are the cluster's, so their names carry the test's suffix).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from pg_cluster import PgCluster, free_port

from deerflow_nb.cli import main
from deerflow_nb.schema.changes import ChangeSet
from deerflow_nb.shared import exchange, migrations, team
from deerflow_nb.shared.connect import SharedError
from deerflow_nb.storage.journal import Journal
from deerflow_nb.storage.outbox import Outbox

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Team:
    """A database with the schema, and a way to add members with their own URLs."""

    cluster: PgCluster
    database: str
    url: str  # the superuser's, on this database
    suffix: str

    def member(self, project: str, name: str, *, read_only: bool = False) -> str:
        """The URL of a new role ``name`` (suffixed) in ``project``."""
        role, password = f"{name}_{self.suffix}", secrets.token_hex(8)
        team.add_member(self.url, project, role, read_only=read_only, password=password)
        return self.cluster.url_for(role, password, self.database)


def new_team(postgres: PgCluster) -> Team:
    """A new team database on the cluster, its schema set up by ``team init``."""
    suffix = secrets.token_hex(4)
    database = f"team_{suffix}"
    with psycopg.connect(postgres.url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {database}")
    url = postgres.url_for("deerflow_admin", postgres.password, database)
    team.init(url)
    return Team(postgres, database, url, suffix)


@pytest.fixture
def shared(postgres: PgCluster) -> Iterator[Team]:
    yield new_team(postgres)


def outbox_at(folder: Path) -> Outbox:
    return Outbox(Journal(folder / "journal.db"))


def fact(text: str) -> ChangeSet:
    fact_id = "f" + hashlib.sha256(text.encode()).hexdigest()[:12]  # the team's id of it
    return ChangeSet(
        origin="user",
        reason="add",
        source="manual",
        diff={"newFacts": [{"id": fact_id, "content": text, "category": "context"}]},
        project="churn",
    )


def texts(changes: list[exchange.SharedChange]) -> list[str]:
    return [c.change.diff["newFacts"][0]["content"] for c in changes if c.change.diff]


def take(outbox: Outbox, url: str, project: str) -> list[exchange.SharedChange]:
    """Apply (here: only record) every change set ``project`` has for this home."""
    taken = []
    for change in exchange.incoming(outbox, url, project):
        taken.append(change)
        outbox.record_applied(project, change.id, change.version)
    return taken


def test_init_runs_each_migration_once(shared: Team) -> None:
    assert team.init(shared.url) == []
    with psycopg.connect(shared.url) as conn:
        assert migrations.applied(conn) == sorted(name for name, _ in migrations.MIGRATIONS)


def test_two_inits_at_once_run_each_migration_once(postgres: PgCluster) -> None:
    database = f"team_{secrets.token_hex(4)}"
    with psycopg.connect(postgres.url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {database}")
    url = postgres.url_for("deerflow_admin", postgres.password, database)
    ran: list[list[str]] = []
    inits = [threading.Thread(target=lambda: ran.append(team.init(url))) for _ in range(2)]
    for init in inits:
        init.start()
    for init in inits:
        init.join(30)
    assert sorted(ran, key=len) == [[], [name for name, _ in migrations.MIGRATIONS]]


def test_two_members_see_each_others_change_sets(shared: Team, tmp_path: Path) -> None:
    alice_url, bob_url = shared.member("churn", "alice"), shared.member("churn", "bob")
    alice, bob = outbox_at(tmp_path / "alice"), outbox_at(tmp_path / "bob")
    alice.add("churn", fact("the target column is churned_90d"))
    assert exchange.publish(alice, alice_url) == 1
    got = take(bob, bob_url, "churn")
    assert texts(got) == ["the target column is churned_90d"]
    assert got[0].person == f"alice_{shared.suffix}" and got[0].version == 1

    bob.add("churn", fact("sales data comes from the orders warehouse"))
    exchange.publish(bob, bob_url)
    assert texts(take(alice, alice_url, "churn")) == ["sales data comes from the orders warehouse"]
    assert take(alice, alice_url, "churn") == take(bob, bob_url, "churn") == []  # applied once
    assert alice.applied_through("churn") == bob.applied_through("churn") == 2


def test_a_member_of_one_project_reads_no_row_of_another(shared: Team, tmp_path: Path) -> None:
    carol_url = shared.member("project_a", "carol")
    dave_url = shared.member("project_b", "dave")
    for url, project in ((carol_url, "project_a"), (dave_url, "project_b")):
        outbox = outbox_at(tmp_path / project)
        outbox.add(project, fact(f"a fact of {project}"))
        exchange.publish(outbox, url)
    assert exchange.pull(carol_url, "project_b") == []
    with psycopg.connect(carol_url) as conn:
        for table, column in (
            ("change_sets", "project"),
            ("versions", "project"),
            ("members", "project"),
            ("projects", "name"),
            ("facts", "project"),  # m002: the projects' current facts, from the change sets
            ("revisions", "project"),
        ):
            seen = {row[0] for row in conn.execute(f"SELECT {column} FROM deerflow.{table}")}
            assert seen == {"project_a"}, table
        for query in (
            "SELECT count(*) FROM deerflow.change_sets WHERE project = 'project_b'",
            "SELECT count(*) FROM deerflow.change_sets WHERE payload::text LIKE '%project_b%'",
            "SELECT count(*) FROM deerflow.versions v JOIN deerflow.projects p"
            " ON p.name = v.project WHERE p.name <> 'project_a'",
        ):
            assert conn.execute(query).fetchone() == (0,), query
        conn.rollback()
        conn.execute("SET row_security = off")  # asking to bypass the policies is an error
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
            conn.execute("SELECT * FROM deerflow.change_sets")


def test_a_read_only_member_is_refused_by_the_database(shared: Team, tmp_path: Path) -> None:
    teacher_url = shared.member("course", "teacher")
    student_url = shared.member("course", "student", read_only=True)
    teacher = outbox_at(tmp_path / "teacher")
    teacher.add("course", fact("the dataset is the 2019 taxi trips"))
    exchange.publish(teacher, teacher_url)
    student = outbox_at(tmp_path / "student")
    assert texts(take(student, student_url, "course")) == ["the dataset is the 2019 taxi trips"]

    with psycopg.connect(student_url, autocommit=True) as conn:
        for statement, refusal in (
            (
                "INSERT INTO deerflow.change_sets (id, project, origin, created, payload)"
                " VALUES (gen_random_uuid(), 'course', 'user', now(), '{}')",
                "violates row-level security policy",
            ),
            ("UPDATE deerflow.change_sets SET payload = '{}'", "permission denied"),
            ("DELETE FROM deerflow.change_sets", "permission denied"),
            ("UPDATE deerflow.projects SET version = 0", "permission denied"),
            ("DELETE FROM deerflow.members", "permission denied"),
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match=refusal):
                conn.execute(statement)

    student.add("course", fact("the dataset is something else"))
    with pytest.raises(
        SharedError, match="read-only member of project course: ask its owner"
    ) as no:
        exchange.publish(student, student_url)
    assert len(student.waiting()) == 1  # kept, not lost: an owner may make it a writer
    assert len(exchange.pull(teacher_url, "course")) == 1
    # the command the message names works as written (found by a review: it did not)
    command = shlex.split(str(no.value).split("`")[1])
    assert command[:2] == ["deerflow-nb", "team"] and "URL" in command
    assert main([shared.url if word == "URL" else word for word in command[1:]]) == 0
    exchange.publish(student, student_url)
    assert len(student.waiting()) == 0


def test_a_member_cannot_publish_as_someone_else(shared: Team) -> None:
    shared.member("churn", "alice")
    bob_url = shared.member("churn", "bob")
    with psycopg.connect(bob_url, autocommit=True) as conn:
        for column, value in (("person", f"alice_{shared.suffix}"), ("published", "2020-01-01")):
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"):
                conn.execute(
                    f"INSERT INTO deerflow.change_sets (id, project, origin, {column}, created,"
                    " payload) VALUES (gen_random_uuid(), 'churn', 'user', %s, now(), '{}')",
                    [value],
                )


def test_a_refused_project_does_not_hold_back_the_others(shared: Team, tmp_path: Path) -> None:
    url = shared.member("churn", "alice")
    team.add_member(shared.url, "course", f"alice_{shared.suffix}", read_only=True)
    outbox = outbox_at(tmp_path)
    outbox.add("course", fact("a course fact"))
    outbox.add("churn", fact("a churn fact"))
    with pytest.raises(SharedError, match="read-only member of project course"):
        exchange.publish(outbox, url)
    assert [item.project for item in outbox.waiting()] == ["course"]
    assert texts(exchange.pull(url, "churn")) == ["a churn fact"]


def test_publishing_twice_stores_once(shared: Team, tmp_path: Path) -> None:
    url = shared.member("churn", "alice")
    outbox = outbox_at(tmp_path)
    change_id = outbox.add("churn", fact("churn is measured over 90 days"))
    assert exchange.publish(outbox, url) == 1
    assert exchange.publish(outbox, url) == 0  # nothing waits
    # A crash after the server committed and before the outbox said so: sent again.
    with outbox.journal.transaction() as db:
        db.execute("UPDATE shared_outbox SET published_at = NULL")
    assert exchange.publish(outbox, url) == 0
    with psycopg.connect(shared.url) as conn:
        rows = conn.execute("SELECT id::text FROM deerflow.change_sets").fetchall()
        versions = conn.execute("SELECT version FROM deerflow.versions").fetchall()
    assert rows == [(change_id,)] and versions == [(1,)]


def test_a_listener_hears_a_published_change_set(shared: Team, tmp_path: Path) -> None:
    alice_url, bob_url = shared.member("churn", "alice"), shared.member("churn", "bob")
    alice = outbox_at(tmp_path)
    with exchange.listen(bob_url) as listener:
        assert not listener.wait(0.1)
        alice.add("churn", fact("the holdout is March"))
        exchange.publish(alice, alice_url)
        started = time.monotonic()
        assert listener.wait(5)
        assert time.monotonic() - started < 1


def test_a_listener_wakes_for_a_teammates_change_set_not_its_own(
    shared: Team, tmp_path: Path
) -> None:
    """The notice names the publisher only as md5 of its role: drain() is True for a
    teammate's change set and False for this role's own (it pulls nothing new)."""
    alice_url, bob_url = shared.member("churn", "alice"), shared.member("churn", "bob")
    alice, bob = outbox_at(tmp_path / "alice"), outbox_at(tmp_path / "bob")
    listener = exchange.Listener.open(bob_url)
    try:
        bob.add("churn", fact("bob's own note on the holdout"))
        exchange.publish(bob, bob_url)
        time.sleep(0.3)  # the notice has arrived
        assert listener.drain() is False
        alice.add("churn", fact("alice says the holdout is March"))
        exchange.publish(alice, alice_url)
        deadline = time.monotonic() + 5
        while not (heard := listener.drain()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert heard
    finally:
        listener.close()


def test_a_change_reaches_a_listening_member_within_seconds(shared: Team, tmp_path: Path) -> None:
    """Issue 39's goal is p95 <= 2 s from one member's change to another's seeing it; here
    from the publish call to the change set pulled by a member woken by NOTIFY."""
    alice_url, bob_url = shared.member("churn", "alice"), shared.member("churn", "bob")
    alice, bob = outbox_at(tmp_path / "alice"), outbox_at(tmp_path / "bob")
    sent: dict[str, float] = {}
    seen: dict[str, float] = {}
    total = 30

    def follow() -> None:
        with exchange.listen(bob_url) as listener:
            deadline = time.monotonic() + 60
            while len(seen) < total and time.monotonic() < deadline:
                listener.wait(1.0)  # a timeout polls anyway
                for change in exchange.incoming(bob, bob_url, "churn"):
                    seen[change.id] = time.monotonic()
                    bob.record_applied("churn", change.id, change.version)

    follower = threading.Thread(target=follow)
    follower.start()
    time.sleep(0.3)  # listening
    for n in range(total):
        change_id = alice.add("churn", fact(f"fact {n}"))
        sent[change_id] = time.monotonic()
        exchange.publish(alice, alice_url)
        time.sleep(0.01)
    follower.join(90)
    assert set(seen) == set(sent)
    delays = sorted(seen[i] - sent[i] for i in sent)
    p95 = delays[int(0.95 * (len(delays) - 1))]
    print(f"publish to a listening member: p50 {delays[len(delays) // 2]:.3f} s, p95 {p95:.3f} s")
    assert p95 <= 2.0


def test_changes_wait_while_the_server_is_down(shared: Team, tmp_path: Path) -> None:
    url = shared.member("churn", "alice")
    dead = url.replace(f":{shared.cluster.port}/", f":{free_port()}/")
    outbox = outbox_at(tmp_path)
    outbox.add("churn", fact("the holdout is March"))
    with pytest.raises(SharedError, match="does not answer: start the server"):
        exchange.publish(outbox, dead)
    assert len(outbox.waiting()) == 1
    assert exchange.publish(outbox, url) == 1 and outbox.waiting() == []


def test_each_pulled_change_set_must_be_recorded(shared: Team, tmp_path: Path) -> None:
    """A change set handed out and not recorded would be passed over by the next pull once
    a later one is recorded: ``incoming`` refuses to go on instead."""
    alice_url, bob_url = shared.member("churn", "alice"), shared.member("churn", "bob")
    alice = outbox_at(tmp_path / "alice")
    for text in ("one", "two"):
        alice.add("churn", fact(text))
    exchange.publish(alice, alice_url)
    with pytest.raises(RuntimeError, match="was not recorded applied"):
        list(exchange.incoming(outbox_at(tmp_path / "bob"), bob_url, "churn"))


def test_errors_are_one_line_naming_the_fix(
    shared: Team, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = "s3cret-pw"
    dead = f"postgresql://alice:{secret}@127.0.0.1:{free_port()}/postgres"
    wrong = shared.cluster.url_for("deerflow_admin", secret, shared.database)
    for argv, said in (
        (["team", "init", "postgresql://alice@[bad"], "not a PostgreSQL URL"),
        (["team", "init", dead], "does not answer: start the server or check the URL"),
        (["team", "init", wrong], "refused the password of deerflow_admin@127.0.0.1"),
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert said in err and len(err.strip().splitlines()) == 1 and secret not in err, err


def test_team_commands(shared: Team, capsys: pytest.CaptureFixture[str]) -> None:
    role = f"eve_{shared.suffix}"
    assert main(["team", "init", shared.url]) == 0
    assert "up to date" in capsys.readouterr().out
    assert main(["team", "add", "course", role, "--read-only", "--url", shared.url]) == 0
    out = capsys.readouterr().out
    assert f"created role {role}" in out and "read-only member of course" in out
    assert main(["team", "add", shared.url, "course", role]) == 0  # DESIGN.md's order
    assert capsys.readouterr().out.strip() == f"{role} is a member of course"
    for wrong in (["course", role], [shared.url, "course", role, "--url", shared.url]):
        assert main(["team", "add", *wrong]) == 2
        err = capsys.readouterr().err.strip()
        assert err == "deerflow-nb: team add needs URL PROJECT ROLE (or PROJECT ROLE --url URL)"


# A kernel that queued change sets for a shared project and was killed before publishing.
QUEUE_AND_HANG = """
import sys, time
from deerflow_nb.schema.changes import ChangeSet
from deerflow_nb.storage.journal import Journal
from deerflow_nb.storage.outbox import Outbox
outbox = Outbox(Journal(sys.argv[1]))
for n in range(3):
    outbox.add("churn", ChangeSet(origin="fold", reason="fold", diff={"newFacts": [
        {"content": f"fact {n}", "category": "context", "confidence": 0.9}]}))
print("queued", flush=True)
time.sleep(600)
"""
PUBLISH = """
import os, sys
from deerflow_nb.shared.exchange import publish
from deerflow_nb.storage.journal import Journal
from deerflow_nb.storage.outbox import Outbox
print(publish(Outbox(Journal(sys.argv[1])), os.environ["TEAM_URL"]))
"""


@pytest.mark.slow
def test_the_outbox_survives_a_killed_kernel(shared: Team, tmp_path: Path) -> None:
    url = shared.member("churn", "alice")
    journal = str(tmp_path / "journal.db")
    env = dict(os.environ, PYTHONPATH=str(REPO), TEAM_URL=url)
    kernel = subprocess.Popen(
        [sys.executable, "-c", QUEUE_AND_HANG, journal], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert kernel.stdout is not None and kernel.stdout.readline().strip() == "queued"
    finally:
        kernel.send_signal(signal.SIGKILL)
        kernel.wait()
    assert kernel.returncode == -signal.SIGKILL
    for expected in ("3", "0"):  # the next start publishes them, once
        run = subprocess.run(
            [sys.executable, "-c", PUBLISH, journal], env=env, capture_output=True, text=True
        )
        assert run.returncode == 0 and run.stdout.strip() == expected, run.stderr
    assert texts(exchange.pull(url, "churn")) == ["fact 0", "fact 1", "fact 2"]


# A kernel that keeps working while the server is away: each change set queued, then a
# publish tried (a failure leaves it queued for the next).
KEEP_PUBLISHING = """
import os, sys, time
from deerflow_nb.schema.changes import ChangeSet
from deerflow_nb.shared.connect import SharedError
from deerflow_nb.shared.exchange import publish
from deerflow_nb.storage.journal import Journal
from deerflow_nb.storage.outbox import Outbox
outbox = Outbox(Journal(sys.argv[1]))
failed = 0
for n in range(int(sys.argv[2])):
    outbox.add("churn", ChangeSet(origin="fold", reason="fold", diff={"newFacts": [
        {"content": f"fact {n}", "category": "context", "confidence": 0.9}]}))
    try:
        publish(outbox, os.environ["TEAM_URL"])
    except SharedError:
        failed += 1
        time.sleep(0.02)
print(failed)
"""


def stored(url: str) -> tuple[int, int, int]:
    """(change sets, distinct versions, highest version) in the shared store."""
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT (SELECT count(*) FROM deerflow.change_sets),"
            " count(DISTINCT version), COALESCE(max(version), 0) FROM deerflow.versions"
        ).fetchone()


@pytest.mark.slow
def test_a_server_killed_mid_publishing_loses_nothing(shared: Team, tmp_path: Path) -> None:
    """PostgreSQL SIGKILLed while a kernel publishes, then restarted: every change set is
    stored once, the versions have no gap, and a member pulls each once."""
    total = 120
    url, bob_url = shared.member("churn", "alice"), shared.member("churn", "bob")
    journal = tmp_path / "journal.db"
    env = dict(os.environ, PYTHONPATH=str(REPO), TEAM_URL=url)
    kernel = subprocess.Popen(
        [sys.executable, "-c", KEEP_PUBLISHING, str(journal), str(total)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while stored(shared.url)[0] < 20:
            assert kernel.poll() is None and time.monotonic() < deadline, kernel.stderr
            time.sleep(0.02)
        shared.cluster.kill()
        time.sleep(0.3)  # the kernel meets a dead server for a while
        shared.cluster.start()
        out, err = kernel.communicate(timeout=120)
        assert kernel.returncode == 0, err
        assert int(out) > 0  # publishes failed while the server was dead
    finally:
        if kernel.poll() is None:
            kernel.kill()
            kernel.wait()
    outbox = outbox_at(tmp_path)
    exchange.publish(outbox, url)  # what the kernel had not sent when it finished
    assert outbox.waiting() == []
    assert stored(shared.url) == (total, total, total)
    bob = outbox_at(tmp_path / "bob")
    assert sorted(texts(take(bob, bob_url, "churn"))) == sorted(f"fact {n}" for n in range(total))
    assert take(bob, bob_url, "churn") == []
