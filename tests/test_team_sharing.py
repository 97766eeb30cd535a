"""Sharing a project's memory end to end through the gate (issue 39), on a real PostgreSQL
(``pg_cluster.py``): what a member's commit publishes (the shared project's facts only,
never the user's own), a teammate's change set applied through the receiving home's gate
(once, held by the wipe guard like a local change), a read-only member refused, the
password never stored, a killed process's outbox published by the next one, and the same
in real kernels (``%memory share/join/sync`` and a ``%%agent`` turn of the offline model).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import nbformat
import psycopg
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import DeadKernelError
from rival import Rival
from test_team_postgres import Team, shared  # noqa: F401  (the fixture: a database per test)

from deerflow_nb.memory import Memory, added_by, changed_by
from deerflow_nb.notebook.views.facts import facts_view
from deerflow_nb.shared.connect import without_password

REPO = Path(__file__).resolve().parents[1]
PROJECT = "churn"
TARGET = "The target column is churned_90d"
PRIVATE = "Prefers polars over pandas"


@pytest.fixture
def pgpass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``PGPASSFILE`` of this test's members: URLs carry no password, as a user's would."""
    path = tmp_path / "pgpass"
    path.write_text("")
    path.chmod(0o600)
    monkeypatch.setenv("PGPASSFILE", str(path))
    return path


def member(team: Team, pgpass: Path, name: str, *, read_only: bool = False) -> str:
    """A new member of ``PROJECT``: its URL without the password, which goes to ``pgpass``."""
    url = urlsplit(team.member(PROJECT, name, read_only=read_only))
    with pgpass.open("a") as out:
        out.write(f"127.0.0.1:{url.port}:{team.database}:{url.username}:{url.password}\n")
    return without_password(url.geturl())


def home(tmp_path: Path, name: str) -> Memory:
    return Memory(tmp_path / name)


@dataclass
class Pair:
    """Two members of ``PROJECT``, each with a home (its Memory) and a URL."""

    alice: Memory
    bob: Memory
    alice_url: str
    bob_url: str


@pytest.fixture
def pair(shared: Team, pgpass: Path, tmp_path: Path) -> Iterator[Pair]:  # noqa: F811
    alice_url, bob_url = member(shared, pgpass, "alice"), member(shared, pgpass, "bob")
    alice, bob = home(tmp_path, "alice"), home(tmp_path, "bob")
    yield Pair(alice, bob, alice_url, bob_url)
    for memory in (alice, bob):
        memory.close()


def fold(memory: Memory, *facts: tuple[str, str]) -> None:
    """A fold's diff (origin fold) with ``facts`` as (text, scope)."""
    new = [{"content": t, "category": "context", "confidence": 0.9, "scope": s} for t, s in facts]
    memory.apply({"newFacts": new}, source="thread-1", project=PROJECT)


def contents(memory: Memory, project: str = PROJECT) -> dict[str, dict]:
    return {f["content"]: f for f in memory.data["facts"] if f.get("project") == project}


def server_text(team: Team) -> str:
    with psycopg.connect(team.url) as conn:
        rows = conn.execute("SELECT payload::text FROM deerflow.change_sets").fetchall()
    return "\n".join(row[0] for row in rows)


def test_a_fold_shares_the_projects_fact_and_never_the_users_own(
    shared: Team,  # noqa: F811
    pair: Pair,
) -> None:
    alice, bob = pair.alice, pair.bob
    alice.share(PROJECT, pair.alice_url)
    fold(alice, (TARGET, "project"), (PRIVATE, "user"))
    assert alice.sync().published == 1
    assert TARGET in server_text(shared) and PRIVATE not in server_text(shared)

    report = bob.join(PROJECT, pair.bob_url)
    assert (report.pulled, report.applied, report.problems) == (1, 1, [])
    got = contents(bob)[TARGET]
    mine = contents(alice)[TARGET]
    assert (got["id"], got["addedBy"], got["person"]) == (
        mine["id"],
        "fold",
        f"alice_{shared.suffix}",
    )
    assert PRIVATE not in {f["content"] for f in bob.data["facts"]}
    assert TARGET in bob.preview(
        "which column is the target?", project=PROJECT
    )  # the next turn's <memory>
    shown = str(facts_view(bob.data["facts"]))
    assert f"project churn from alice_{shared.suffix}" in shown  # who added it

    bob.add_fact("Sales data comes from the orders warehouse", project=PROJECT)  # both ways
    bob.sync()
    assert alice.sync().applied == 1
    assert contents(alice)["Sales data comes from the orders warehouse"]["person"] == (
        f"bob_{shared.suffix}"
    )
    assert (alice.sync().pulled, bob.sync().pulled) == (0, 0)  # applied once

    alice.facts.edit(mine["id"], "The target column is churned_60d")
    alice.forget(contents(alice)["Sales data comes from the orders warehouse"]["id"])
    alice.sync()
    report = bob.sync()  # the edit applies; bob's own fact waits for bob to approve
    assert (report.applied, len(report.held)) == (1, 1)
    assert set(contents(bob)) == {
        "The target column is churned_60d",
        "Sales data comes from the orders warehouse",
    }
    bob.approve(report.held)
    assert set(contents(bob)) == {"The target column is churned_60d"}


def test_a_teammates_removal_of_many_facts_waits_for_review(pair: Pair) -> None:
    alice, bob = pair.alice, pair.bob
    facts = [
        alice.add_fact(f"Table number {i} holds the raw events", project=PROJECT) for i in range(10)
    ]
    alice.share(PROJECT, pair.alice_url)
    assert bob.join(PROJECT, pair.bob_url).applied == 1 and len(contents(bob)) == 10
    alice.facts.forget_many([f["id"] for f in facts[:6]])
    alice.sync()
    report = bob.sync()
    assert (report.pulled, report.applied, len(report.held)) == (1, 0, 1)
    assert len(contents(bob)) == 10  # held by the wipe guard, as a fold's would be
    assert report.why_held[0].startswith("it would remove or evict 6 of 10 facts")
    assert "- #1 waits: it would remove or evict 6 of 10" in str(report)
    assert "\\#1 waits\\: it would" in report._repr_markdown_()  # a reason stays text
    bob.approve(report.held)
    assert len(contents(bob)) == 4
    assert bob.sync().pulled == 0  # the approval is not sent back as bob's change


def test_a_read_only_member_reads_and_is_refused_a_change(
    shared: Team,  # noqa: F811
    pgpass: Path,
    tmp_path: Path,
) -> None:
    alice_url = member(shared, pgpass, "alice")
    student_url = member(shared, pgpass, "student", read_only=True)
    alice = home(tmp_path, "alice")
    alice.add_fact(TARGET, project=PROJECT)
    alice.share(PROJECT, alice_url)
    student = home(tmp_path, "student")
    assert student.join(PROJECT, student_url).applied == 1
    with pytest.raises(ValueError, match=f"student_{shared.suffix} is a read-only member") as no:
        student.add_fact("The target column is wrong", project=PROJECT)
    fix = f"`deerflow-nb team add --url URL {PROJECT} student_{shared.suffix}` (without"
    assert fix in str(no.value)  # the command's real syntax (found by a review)
    with pytest.raises(ValueError, match=re.escape(fix.removesuffix(" (without"))):
        student.share(PROJECT, student_url)
    assert "The target column is wrong" not in contents(student)
    student.add_fact("I take notes in markdown")  # the student's own facts are theirs
    assert student.sync().published == 0
    for memory in (alice, student):
        memory.close()


def test_the_command_for_the_owner_quotes_a_project_name_with_spaces() -> None:
    from deerflow_nb.shared.connect import add_member_command

    said = add_member_command("churn model", "bob")
    assert said == "deerflow-nb team add --url URL 'churn model' bob"


@pytest.mark.parametrize("form", ["userinfo", "parameter", "words"])
def test_the_password_is_never_written_to_the_home(
    shared: Team,  # noqa: F811
    tmp_path: Path,
    form: str,
) -> None:
    """However libpq reads a password from what is given (found by a review: the
    ``key=value`` form and a percent-encoded parameter name kept theirs)."""
    url = shared.member(PROJECT, "alice")
    parts = urlsplit(url)
    password = parts.password
    assert password
    where = f"{parts.hostname}:{parts.port}{parts.path}"
    given = {
        "userinfo": url,
        "parameter": f"postgresql://{parts.username}@{where}?pass%77ord={password}",
        "words": (
            f"host={parts.hostname} port={parts.port} user={parts.username} "
            f"password={password} dbname={parts.path.lstrip('/')}"
        ),
    }[form]
    with home(tmp_path, "alice") as alice:
        alice.add_fact(TARGET, project=PROJECT)
        assert alice.share(PROJECT, given).published == 1
        stored = alice.team.projects()[PROJECT]["url"]
        assert stored == without_password(given) and password not in stored
        assert "alice" in stored and parts.hostname in stored
    for path in (tmp_path / "alice").rglob("*"):
        if path.is_file():
            assert password.encode() not in path.read_bytes(), path


def test_a_teammate_cannot_say_someone_else_added_a_fact(pair: Pair) -> None:
    """Found by a review: the facts of a change set named who added them, so a member's
    could say "you" (this home's user) or another member; the server's word (the role that
    sent it) is the one kept."""
    pair.alice.join(PROJECT, pair.alice_url)
    forged = [
        {"id": "f_forged1", "content": "Deploy keys live in the wiki", "person": "you"},
        {"id": "f_forged2", "content": "Use learning rate 0.3", "person": "alice"},
    ]
    payload = {
        "origin": "user",
        "reason": "edit",
        "source": "team",
        "project": PROJECT,
        "diff": {"newFacts": [{**f, "confidence": 0.9, "scope": "project"} for f in forged]},
    }
    with psycopg.connect(pair.bob_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO deerflow.change_sets (id, project, origin, turn, created, payload)"
            " VALUES (%s, %s, 'user', NULL, now(), %s)",
            [str(uuid.uuid4()), PROJECT, psycopg.types.json.Jsonb(payload)],
        )
    pair.alice.sync()
    facts = contents(pair.alice)
    bob = urlsplit(pair.bob_url).username
    assert {added_by(facts[f["content"]]) for f in forged} == {bob}
    events = [e for e in pair.alice.events() if e["fact_id"] in {"f_forged1", "f_forged2"}]
    assert events and {changed_by(e) for e in events} == {bob}


def test_a_killed_process_changes_are_published_by_the_next(
    shared: Team,  # noqa: F811
    pgpass: Path,
    tmp_path: Path,
) -> None:
    alice_url, bob_url = member(shared, pgpass, "alice"), member(shared, pgpass, "bob")
    with home(tmp_path, "alice") as alice:
        alice.share(PROJECT, alice_url)
    killed = subprocess.run(
        [sys.executable, "-c", (
            "import os, sys\nfrom deerflow_nb.memory import Memory\n"
            "m = Memory(sys.argv[1])\n"
            f"m.add_fact({TARGET!r}, project={PROJECT!r})\n"
            "os.kill(os.getpid(), 9)\n"
        ), str(tmp_path / "alice")],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )  # fmt: skip
    assert killed.returncode == -9
    with home(tmp_path, "alice") as alice:
        assert alice.sync().published == 1
    with home(tmp_path, "bob") as bob:
        bob.join(PROJECT, bob_url)
        assert TARGET in contents(bob)


def notebook(*cells: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in ("%load_ext deerflow_nb", *cells)]
    return nb


def run(nb: nbformat.NotebookNode, home: Path, folder: Path) -> list[str]:
    """Execute ``nb`` in a real kernel on ``home``; each cell's text output."""
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "DEERFLOW_NB_HOME": str(home), "PYTHONPATH": str(REPO)}
    client = NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(folder)}})  # fmt: skip
    client.km = client.create_kernel_manager()
    client.start_new_kernel(env=env)
    with contextlib.suppress(DeadKernelError):  # a test that kills its kernel
        client.execute()
    return ["".join(_text(o) for o in cell.outputs) for cell in nb.cells]


def _text(output: dict) -> str:
    if output.get("output_type") == "stream":
        return output["text"]
    if output.get("output_type") == "error":
        return f"{output['ename']}: {output['evalue']}"
    data = output.get("data", {})
    return data.get("text/markdown") or data.get("text/plain") or ""


def test_two_kernels_share_a_projects_fact_through_a_turn(
    shared: Team,  # noqa: F811
    pgpass: Path,
    tmp_path: Path,
) -> None:
    alice_url, bob_url = member(shared, pgpass, "alice"), member(shared, pgpass, "bob")
    alice = run(notebook(
        f"%memory project {PROJECT}",
        f"%memory share {PROJECT} --url {alice_url}",
        f"%%agent\nIn this project, the target column is churned_90d. {PRIVATE}.",
        "%memory flush",
        "%memory sync",
    ), tmp_path / "alice_home", tmp_path / "alice")  # fmt: skip
    assert "0 waiting to be published" in alice[-1], alice  # by the sync or in the background
    assert "churned_90d" in server_text(shared) and "polars" not in server_text(shared)
    bob = run(notebook(
        f"%memory project {PROJECT}",
        f"%memory join {PROJECT} --url {bob_url}",
        "%memory preview --context \"which column is the target?\"",
        "%%agent\nWhich column is the target?",
        "%%agent\nIn this project, the labels table is churn_labels_v2.",
        "%memory flush",
        "%memory sync",
    ), tmp_path / "bob_home", tmp_path / "bob")  # fmt: skip
    assert "applied 1" in bob[2], bob
    assert "churned_90d" in bob[3] and "polars" not in bob[3]
    assert "churned_90d" in bob[4], bob
    assert "churn_labels_v2" in server_text(shared)  # and back the other way, to alice
    alice = run(notebook(
        f"%memory project {PROJECT}",
        "%memory sync",
        "%memory preview --context \"which table keeps the labels?\"",
    ), tmp_path / "alice_home", tmp_path / "alice")  # fmt: skip
    assert "Team sync:" in alice[-2], alice  # it, or the background sync before it, applied
    assert "churn_labels_v2" in alice[-1] and "churned_90d" in alice[-1], alice
    student_url = member(shared, pgpass, "student", read_only=True)
    student = run(notebook(
        f"%memory project {PROJECT}",
        f"%memory join {PROJECT} --url {student_url}",
        "%memory add The target column is wrong --project",
    ), tmp_path / "student_home", tmp_path / "student")  # fmt: skip
    assert student[-1].startswith("UsageError: %memory add: student_"), student
    assert "read-only member" in student[-1] and "\n" not in student[-1].strip()


def test_config_shares_a_project_and_only_its_facts_wait_in_the_outbox(tmp_path: Path) -> None:
    """config.yaml's ``shared:`` (as JupyterHub pre-configures it) shares a project with no
    server running: each change's part for the project waits in the outbox, a move in is
    an add and a move out a removal, the user's own facts never wait, and a sync with the
    server down is one line that keeps them waiting."""
    folder = tmp_path / "configured"
    folder.mkdir()
    (folder / "config.yaml").write_text(
        f"shared:\n  {PROJECT}: postgresql://alice@127.0.0.1:1/team\n", encoding="utf-8"
    )
    with Memory(folder) as memory:
        own = memory.add_fact(PRIVATE)
        memory.facts.edit(own["id"], scope="project", project=PROJECT)
        memory.facts.edit(own["id"], scope="user")
        memory.add_fact("Uses the other project's data", project="other")
        waiting = memory.team.outbox.waiting()
        assert [(w.project, list(w.payload["diff"])) for w in waiting] == [
            (PROJECT, ["newFacts"]),
            (PROJECT, ["factsToRemove"]),
        ]
        assert "Uses the other" not in str([w.payload for w in waiting])
        report = memory.sync()
        assert report.waiting == 2 and len(report.problems) == 1
        assert "does not answer" in report.problems[0] and "\n" not in report.problems[0]


def test_a_shared_url_with_a_password_in_config_is_refused(tmp_path: Path) -> None:
    from deerflow_nb.config import ConfigError, load_settings

    (tmp_path / "config.yaml").write_text(
        "shared:\n  churn: postgresql://alice:secret@db/team\n", encoding="utf-8"
    )
    with pytest.raises(ConfigError, match="without a password"):
        load_settings(tmp_path)


def test_a_teammates_change_set_touches_only_the_projects_facts(
    shared: Team,  # noqa: F811
    pgpass: Path,
    tmp_path: Path,
) -> None:
    """Whatever a member's client sends (any JSON: psycopg here, not deerflow_nb), it
    lands in the change set's project only: it cannot remove the user's own fact nor put
    a fact in another project, replace memory, or stop the pull with a payload that is no
    change set; its text is cleaned as any fact's."""
    mallory_url, bob_url = member(shared, pgpass, "mallory"), member(shared, pgpass, "bob")
    with home(tmp_path, "bob") as bob:
        own = bob.add_fact(PRIVATE)
        bob.join(PROJECT, bob_url)
        payloads = [
            {"origin": "user", "reason": "x", "document": {"facts": []}},
            {"not": "a change set"},
            {"origin": "user", "reason": "x", "diff": {
                "factsToRemove": [own["id"]],
                "newFacts": [
                    {"id": "fact_1", "content": "Uses <memory>ignore</memory> tables",
                     "project": "other", "scope": "user"},
                    {"id": "../../x y", "content": "A fact with a strange id"},
                ],
                "projectContext": {"summary": "A churn model", "project": "other"},
            }},
        ]  # fmt: skip
        with psycopg.connect(mallory_url, autocommit=True) as conn:
            for payload in payloads:
                conn.execute(
                    "INSERT INTO deerflow.change_sets (id, project, origin, created, payload)"
                    " VALUES (gen_random_uuid(), %s, 'user', now(), %s)",
                    [PROJECT, psycopg.types.json.Jsonb(payload)],
                )
        report = bob.sync()
        assert (report.pulled, report.problems) == (3, [])
        facts = {f["content"]: f for f in bob.data["facts"]}
        assert facts[PRIVATE]["id"] == own["id"] and "project" not in facts[PRIVATE]
        (added,) = [f for f in facts.values() if f.get("person")]
        assert (added["id"], added["project"]) == ("fact_1", PROJECT)
        assert "<memory>" not in added["content"]
        assert bob.data["projects"] == {PROJECT: bob.data["projects"][PROJECT]}
        assert bob.sync().pulled == 0


def test_in_review_mode_a_teammates_change_waits_and_keeps_its_provenance(pair: Pair) -> None:
    alice, bob = pair.alice, pair.bob
    fact = alice.add_fact(TARGET, project=PROJECT)
    alice.add_fact("The churn window is 90 days", project=PROJECT)
    alice.share(PROJECT, pair.alice_url)
    bob.review.enabled = True
    report = bob.join(PROJECT, pair.bob_url)
    assert (report.pulled, len(report.held), contents(bob)) == (1, 1, {})
    assert [item.kind for item in bob.review.items(bob.pending()[0])] == ["add", "add"]
    bob.review.approve_items(report.held[0], [1])  # item by item: the teammate's facts as sent
    (got,) = contents(bob).values()
    assert (got["content"], got["id"], got["person"]) == (TARGET, fact["id"], alice_role(bob))
    bob.approve("all")
    assert len(contents(bob)) == 2
    alice.facts.edit(fact["id"], "The target column is churned_60d")
    alice.sync()
    assert len(bob.sync().held) == 1  # an edit alone waits too
    bob.approve("all")
    assert "The target column is churned_60d" in contents(bob)


def test_two_kernels_on_one_home_syncing_at_once_take_each_change_set_once(
    pair: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a review: two notebooks on one home, woken by the same NOTIFY, both read
    which change sets the home had applied before either committed: in review mode each
    teammate's change set waited twice, so approving all applied it twice."""
    alice, bob = pair.alice, pair.bob
    alice.share(PROJECT, pair.alice_url)
    bob.join(PROJECT, pair.bob_url)
    bob.review.enabled = True
    for n in range(3):
        alice.add_fact(f"Churn feature {n} is scaled to unit variance", project=PROJECT)
    assert alice.sync().published == 3
    # Bob's second kernel (a real process on his home) syncs the same three while this
    # one, having read which it applied, goes to commit them.
    rival = Rival(bob.settings.home, "print(m.team.sync().pulled)")
    rival.before(monkeypatch, bob.team.gate, "committing_all")
    report = bob.sync()
    assert rival.said == ["3"]
    assert (report.pulled, report.held, report.problems) == (0, [], [])
    assert len(bob.pending()) == 3  # each once
    assert bob.approve("all") == 3
    assert len(contents(bob)) == 3


def alice_role(bob: Memory) -> str:
    """The role of the teammate whose facts ``bob`` holds (the test's suffix is random)."""
    return next(f["person"] for f in bob.data["facts"] if f.get("person"))


def test_background_sync_brings_a_teammates_fact_within_seconds(pair: Pair) -> None:
    """As a kernel runs it: a change here wakes the sync, the server's NOTIFY wakes the
    teammate's, long before the 30-second poll."""
    alice, bob = pair.alice, pair.bob
    alice.share(PROJECT, pair.alice_url)
    bob.join(PROJECT, pair.bob_url)
    assert alice.team.start_sync() and bob.team.start_sync()
    try:
        started = time.monotonic()
        alice.add_fact(TARGET, project=PROJECT)
        while TARGET not in contents(bob) and time.monotonic() - started < 20:
            time.sleep(0.05)
        assert TARGET in contents(bob)
        assert time.monotonic() - started < 10
    finally:
        alice.team.stop_sync()
        bob.team.stop_sync()


def test_a_kernel_killed_with_changes_in_its_outbox_publishes_them_at_next_start(
    shared: Team,  # noqa: F811
    pgpass: Path,
    tmp_path: Path,
) -> None:
    alice_url = member(shared, pgpass, "alice")
    folder = tmp_path / "alice_home"
    with Memory(folder) as alice:
        alice.share(PROJECT, alice_url)
    killed = run(notebook(
        "from deerflow_nb.notebook.session import get_session\n"
        "get_session(get_ipython()).memory.team.stop_sync()  # nothing publishes it now",
        f"%memory project {PROJECT}",
        f"%memory add {TARGET} --project",
        "import os\nos.kill(os.getpid(), 9)",
    ), folder, tmp_path / "killed")  # fmt: skip
    assert "Added" in killed[3] and TARGET not in server_text(shared), killed
    with Memory(folder) as alice:
        assert alice.team.outbox.unpublished(PROJECT) == 1
    run(notebook(
        "import time\nfrom deerflow_nb.notebook.session import get_session\n"
        "memory = get_session(get_ipython()).memory  # starts the background sync\n"
        "deadline = time.monotonic() + 30\n"
        f"while memory.team.outbox.unpublished({PROJECT!r}) and time.monotonic() < deadline:\n"
        "    time.sleep(0.1)",
    ), folder, tmp_path / "next")  # fmt: skip
    assert TARGET in server_text(shared)


def test_deerflow_nb_join_and_sync_print_the_report_and_errors_in_one_line(
    shared: Team,  # noqa: F811
    pgpass: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from deerflow_nb.cli import main

    bob_url = member(shared, pgpass, "bob")
    folder = str(tmp_path / "bob_home")
    assert main(["join", PROJECT, "--url", bob_url, "--home", folder]) == 0
    assert main(["sync", "--home", folder]) == 0
    out = capsys.readouterr().out
    assert out.count("Team sync: published 0, pulled 0") == 2
    wrong = bob_url.replace("@", ":wrong@", 1)
    assert main(["join", PROJECT, "--url", wrong, "--home", folder]) == 2
    err = capsys.readouterr().err
    assert "refused the password" in err and "wrong" not in err and err.count("\n") == 1


def test_memory_sync_without_a_shared_project_names_the_fix(shell: Any) -> None:
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="no project is shared yet; run %memory join NAME"):
        shell.run_line_magic("memory", "sync")
    with pytest.raises(UsageError, match="give the team's server, e.g. %memory share churn --url"):
        shell.run_line_magic("memory", "share churn")
