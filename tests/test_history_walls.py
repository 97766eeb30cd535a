"""Projects are walls for memory's history too: ``%memory history`` in a project lists the
events of your facts and that project's, ``--all`` every project's with each one named; a
fact of another project is refused by id; every event is journaled with its project, and
one from before that column is told from its section, its details or its fact."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from journal_rows import events

from deerflow_nb.inspector import data, view_models
from deerflow_nb.memory import Memory, Scope, open_reader
from deerflow_nb.notebook.session import get_session

ALPHA = "The key column is ZEPHYR_id"
BETA = "The key column is order_id"
MINE = "Prefers polars over pandas"


@pytest.fixture
def memory(home: Path) -> Iterator[Memory]:
    mem = Memory(home)
    yield mem
    mem.close()


def two_projects(memory: Memory) -> dict[str, str]:
    """A fact in alpha and in beta (each with its project's summary) and one of the user's;
    their ids by text."""
    for project, text in (("alpha", ALPHA), ("beta", BETA)):
        fact = {"content": text, "category": "context", "confidence": 0.9, "scope": "project"}
        context = {"shouldUpdate": True, "summary": f"{project.upper()}_SUMMARY work"}
        memory.apply({"newFacts": [fact], "projectContext": context}, project=project)
    memory.add_fact(MINE, category="preference")
    return {f["content"]: f["id"] for f in memory.data["facts"]}


def history(shell: InteractiveShell, line: str = "") -> str:
    return str(shell.run_line_magic("memory", f"history {line}".strip()))


def test_history_in_a_project_shows_yours_and_its_events_and_all_names_each_project(
    shell: InteractiveShell,
) -> None:
    two_projects(get_session(shell).memory)
    shell.run_line_magic("memory", "project beta")
    view = shell.run_line_magic("memory", "history")
    here = str(view)
    assert BETA in here and MINE in here and "BETA_SUMMARY" in here
    assert "ZEPHYR" not in here and "ALPHA_SUMMARY" not in here
    assert "project" not in view.table().headers  # one project's: no column to tell them

    every = shell.run_line_magic("memory", "history --all")
    table = every.table()
    assert table.headers[4] == "project" and "every project" in table.title
    whose = {row[6]: row[4] for row in table.rows}
    assert (whose[ALPHA], whose[BETA], whose[MINE]) == ("alpha", "beta", "user")
    assert "ALPHA_SUMMARY" in str(every)


def test_history_of_another_projects_fact_asks_for_all(shell: InteractiveShell) -> None:
    memory = get_session(shell).memory
    ids = two_projects(memory)
    shell.run_line_magic("memory", "project beta")
    assert BETA in history(shell, ids[BETA]) and MINE in history(shell, ids[MINE])
    with pytest.raises(UsageError, match=f"another project's; .* history {ids[ALPHA]} --all"):
        history(shell, ids[ALPHA])
    assert ALPHA in history(shell, f"{ids[ALPHA]} --all")

    memory.forget(ids[ALPHA])  # gone from memory: its events still say whose it was
    with pytest.raises(UsageError, match="--all"):
        history(shell, ids[ALPHA])
    assert "remove" in history(shell, f"{ids[ALPHA]} --all")
    with pytest.raises(UsageError, match="no fact 'fact_nope'"):
        history(shell, "fact_nope")


def test_every_event_is_journaled_with_its_project(memory: Memory, home: Path) -> None:
    ids = two_projects(memory)
    memory.forget(ids[ALPHA])  # a removal: the fact is found in the document before
    memory.facts.edit(ids[MINE], scope="project", project="beta")  # moved: where it went
    owners = [(e["kind"], e["fact_id"] or e["section"], e["project"]) for e in events(home)]
    assert owners == [
        ("section", "projects.alpha", "alpha"),
        ("add", ids[ALPHA], "alpha"),
        ("section", "projects.beta", "beta"),
        ("add", ids[BETA], "beta"),
        ("add", ids[MINE], ""),  # the user's
        ("remove", ids[ALPHA], "alpha"),
        ("update", ids[MINE], "beta"),
    ]


def test_events_from_before_the_column_are_told_from_their_section_or_fact(
    memory: Memory, home: Path
) -> None:
    ids = two_projects(memory)
    memory.forget(ids[ALPHA])
    with sqlite3.connect(home / "journal.db") as conn:  # as an older version journaled them
        conn.execute("UPDATE memory_events SET project = NULL")
    beta = memory.events(scope=Scope.of("beta"))
    assert {e["fact_id"] or e["section"] for e in beta} == {
        "projects.beta",
        ids[BETA],
        ids[MINE],
        ids[ALPHA],  # its removal: a fact no longer in memory reads as the user's
    }
    assert {e["project"] for e in beta} == {"beta", None}
    assert [e["kind"] for e in memory.history.of(ids[BETA], scope=Scope.of("alpha"))] == []


def test_the_inspector_names_each_events_project_and_narrows_to_one(
    memory: Memory, home: Path
) -> None:
    ids = two_projects(memory)
    with open_reader(home) as reader:
        log = view_models.event_rows(data.events(reader))
        assert {(r["fact"], r["project"]) for r in log} >= {
            (ids[ALPHA], "alpha"),
            (ids[BETA], "beta"),
            (ids[MINE], view_models.USER_SCOPE),
        }
        beta = data.events(reader, view_models.chosen_scope("beta"))
    assert ids[ALPHA] not in {e["fact_id"] for e in beta}
    assert {ids[BETA], ids[MINE]} <= {e["fact_id"] for e in beta}


def test_recent_folds_are_walled_as_events_are(shell: InteractiveShell) -> None:
    memory = get_session(shell).memory
    for project, thread in (("alpha", "zephyr-secret-plan"), ("beta", "beta-chat")):
        said = f"I always use polars for {project.upper()[::-1]} data frames."
        messages = [{"role": "user", "content": said}, {"role": "assistant", "content": "Noted."}]
        memory.add_messages(thread, messages, project=project)
    memory.flush(timeout=60)
    fact = {"content": "Likes dark plots", "category": "preference", "confidence": 0.9}
    memory.apply({"newFacts": [fact]}, source="manual")  # a fold of no thread: yours

    shell.run_line_magic("memory", "project beta")
    here = shell.run_line_magic("memory", "history")
    assert [f["source"] for f in here.folds] == ["manual", "beta-chat"]
    # the profile alpha's fold wrote is yours; the thread it came from is alpha's
    assert "zephyr" not in str(here) and "(a thread of another project)" in str(here)
    every = shell.run_line_magic("memory", "history --all")
    assert [f["source"] for f in every.folds] == ["manual", "beta-chat", "zephyr-secret-plan"]
    assert [f["project"] for f in every.folds] == [None, "beta", "alpha"]
    assert "zephyr-secret-plan" in str(every.table())


def test_a_fold_of_a_thread_from_before_projects_is_defaults(home: Path) -> None:
    with Memory(home) as memory:
        said = [{"role": "user", "content": "I always use polars."}]
        memory.add_messages("old-chat", [*said, {"role": "assistant", "content": "Noted."}])
        memory.flush(timeout=60)
    with sqlite3.connect(home / "journal.db") as db:  # as a journal before m017 left it
        db.execute("UPDATE threads SET project = NULL WHERE id = 'old-chat'")
    with Memory(home) as memory:
        assert [f["project"] for f in memory.history.folds()] == ["default"]
        assert memory.history.folds(scope=Scope.of("beta")) == []
        assert len(memory.history.folds(scope=Scope.of("default"))) == 1
