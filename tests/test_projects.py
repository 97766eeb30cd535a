"""Memory per project (issue 28), through the public surface: the project a notebook is in,
facts with a scope, injection, search and recall kept to the project, managing projects,
eviction within a scope, an old home, and two kernels on two projects sharing one home."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import sqlite_utils
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from journal_rows import memory_json
from magic_lines import usage_error
from rival import Rival

from deerflow_nb.agent import Agent
from deerflow_nb.config import ConfigError, load_settings
from deerflow_nb.memory import Memory
from deerflow_nb.notebook.session import get_session
from deerflow_nb.projects import check_project_name, find_project, project_name
from deerflow_nb.storage.migrations import MIGRATIONS

ROOT = Path(__file__).resolve().parents[1]
CHURN_TARGET = "In this project, the target column churned is 1 for customers lost within 90 days."
CLINIC_TARGET = "In this project, the target column readmitted means back within 30 days."


def facts_by_text(home: Path) -> dict[str, dict]:
    return {f["content"]: f for f in memory_json(home)["facts"]}


# -- 1. the project a notebook is in ----------------------------------------------------
def test_a_project_is_found_from_the_git_root_then_the_folder_then_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "churn-model"
    (repo / ".git").mkdir(parents=True)
    (repo / "notebooks" / "eda").mkdir(parents=True)
    notebook = repo / "notebooks" / "eda" / "explore.ipynb"
    found = find_project(notebook=notebook)
    assert (found.name, found.how) == ("churn-model", "git")
    assert find_project(cwd=repo / "notebooks").name == "churn-model"

    loose = tmp_path / "clinic study"
    loose.mkdir()
    assert find_project(notebook=loose / "a.ipynb") == find_project(cwd=loose)
    assert (find_project(cwd=loose).name, find_project(cwd=loose).how) == ("clinic study", "folder")

    monkeypatch.setenv("HOME", str(tmp_path / "me"))
    (tmp_path / "me").mkdir()
    assert (find_project(cwd=tmp_path / "me").name, find_project(cwd="/").name) == (
        "default",
        "default",
    )
    assert find_project("  my project ", cwd=loose).name == "my project"  # named wins


def test_the_notebook_path_jupyter_gives_the_kernel_names_the_project(
    shell: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "sales-forecast"
    folder.mkdir()
    monkeypatch.setenv("JPY_SESSION_NAME", str(folder / "weekly.ipynb"))
    get_session(shell)._project = None
    assert get_session(shell).project.name == "sales-forecast"
    notice = shell.run_line_magic("memory", "project")
    assert "sales-forecast (folder)" in str(notice)


def test_config_yaml_and_the_environment_name_the_project(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (home / "config.yaml").write_text("project: churn\n")
    assert load_settings().project == "churn"
    monkeypatch.setenv("DEERFLOW_NB_PROJECT", "clinic")
    assert load_settings().project == "clinic"  # the environment wins over the file
    (home / "config.yaml").write_text("project: [1, 2]\n")
    with pytest.raises(ConfigError, match="'project' must be a string"):
        load_settings()


# A path, a separator, a control or hidden character: refused, never rewritten (before,
# '../../etc' silently named project 'etc' in some entries, 'a/b' named 'a-b').
PATH_NAMES = ("../../etc", "a/b", ".", "..", "...", "a\\b", "nul\x00here", "new\nline")
# What stays a name, as before: spaces, dashes, dots inside, underscores, accents.
GOOD_NAMES = ("clinic study", "churn-model", "v1.2", "a..b", "data_2024", "café")


def test_a_path_like_project_name_is_refused_by_the_one_rule() -> None:
    for bad in PATH_NAMES:
        with pytest.raises(ValueError, match="is not a project name; use letters") as caught:
            check_project_name(bad)
        assert "\n" not in str(caught.value) and "\x00" not in str(caught.value)
        with pytest.raises(ValueError, match="is not a project name"):
            find_project(bad)
    assert [check_project_name(name) for name in GOOD_NAMES] == list(GOOD_NAMES)
    assert check_project_name("  churn\n") == "churn"  # surrounding space is no part of it
    assert check_project_name("al\u200bpha") == "alpha"  # a hidden character dropped, as before
    long = check_project_name("x" * 80)  # cut with a hash, as project_name does
    assert long == project_name("x" * 80) and check_project_name(long) == long
    # what memory already holds is read as before: only new input is checked
    assert project_name("../../etc") == "etc"


def test_every_entry_refuses_a_path_like_project_name(
    shell: InteractiveShell, home: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    shell.run_line_magic("memory", "project churn")
    fact = get_session(shell).memory.add_fact("The target column is churned", project="churn")
    (home / "in.json").write_text('{"facts": []}')
    for bad in ("../../etc", "a/b", ".", ".."):
        quoted = f"'{bad}'"
        for line in (
            f"project {quoted}",
            f"project churn --rename {quoted}",
            f"move {fact['id']} --project {quoted}",
            f"export {home / 'out.json'} --project {quoted}",
            f"import {home / 'in.json'} --project {quoted}",
            f"share {quoted} --url postgresql://me@127.0.0.1:9/team",
            f"join {quoted} --url postgresql://me@127.0.0.1:9/team",
        ):
            assert "is not a project name; use letters" in usage_error(shell, line), line
        result = shell.run_cell(f"%%agent --project {quoted}\nHello.")
        assert isinstance(result.error_in_exec, UsageError)
        assert "--project: " in str(result.error_in_exec)
        assert "is not a project name" in str(result.error_in_exec)
    assert get_session(shell).project.name == "churn"  # nothing was switched or renamed
    assert {p["name"] for p in get_session(shell).memory.projects.list()} == {"churn"}
    assert not (home / "out.json").exists()

    config = home / "config.yaml"
    for yaml_text in ("project: ../../etc\n", "shared:\n  a/b: postgresql://me@h/db\n"):
        config.write_text(yaml_text)
        with pytest.raises(ConfigError, match="is not a project name") as caught:
            load_settings()
        assert "\n" not in str(caught.value)
    config.write_text("project: clinic study\n")
    assert load_settings().project == "clinic study"
    monkeypatch.setenv("DEERFLOW_NB_PROJECT", "../../etc")
    with pytest.raises(ConfigError, match="DEERFLOW_NB_PROJECT: '../../etc' is not a project"):
        load_settings()
    monkeypatch.delenv("DEERFLOW_NB_PROJECT")

    from deerflow_nb.cli import main

    capsys.readouterr()  # the shell's lines so far
    for argv, said in (
        (["share", "a/b", "--url", "postgresql://me@127.0.0.1:9/team"], "deerflow-nb: 'a/b'"),
        (["mcp", "--project", "../../etc"], "deerflow-nb: --project: '../../etc'"),
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(said), err
        assert "is not a project name" in err, err

    from deerflow_nb.mcp_server.service import MemoryService

    service = MemoryService(get_session(shell).memory, "churn")
    text, failed = service.call("list_facts", {"project": "../../etc"}, "s1")
    assert failed and "is not a project name" in text, text
    text, failed = service.call("list_facts", {"project": "churn"}, "s1")
    assert not failed and "churned" in text, text


def test_switching_projects_shows_in_the_footer_status_and_panel(shell: InteractiveShell) -> None:
    shell.run_line_magic("memory", "project churn")
    shell.run_cell_magic("agent", "", "Hello there.")
    assert get_session(shell).agent().last_turn.project == "churn"
    from deerflow_nb.notebook.agent_display import footer

    assert footer(get_session(shell).agent().last_turn).endswith("project churn")
    shell.run_cell_magic("agent", "--project clinic", "Hello again.")
    assert get_session(shell).agent().last_turn.project == "clinic"
    status = shell.run_line_magic("memory", "status")
    assert ("project", "churn") in status.table().rows  # --project was for that cell only
    panel = shell.run_line_magic("memory", "panel")
    assert "project churn" in panel.header.value
    panel.close()
    with pytest.raises(UsageError, match="not a project name"):
        shell.run_line_magic("memory", "project '///'")


def test_the_panel_header_counts_the_facts_its_project_sees(shell: InteractiveShell) -> None:
    """Issue 37: another project's facts are not counted in this notebook's header."""
    mem = get_session(shell).memory
    mem.add_fact("Prefers polars over pandas")
    mem.add_fact("The target column is churned", project="churn")
    mem.add_fact("The target column is readmitted", project="clinic")
    shell.run_line_magic("memory", "project churn")
    panel = shell.run_line_magic("memory", "panel")
    try:
        assert "2 facts · project churn" in panel.header.value
    finally:
        panel.close()


# -- 2. facts with a scope, stored from a fold ------------------------------------------
def test_project_facts_are_stored_in_the_project_and_the_users_stay_plain(home: Path) -> None:
    agent = Agent()
    agent.run(f"I prefer polars over pandas. {CHURN_TARGET}", thread="c1", project="churn")
    agent.run(f"{CLINIC_TARGET} Use 3 decimals for this plot.", thread="k1", project="clinic")
    agent.memory.flush()
    facts = facts_by_text(home)
    user = facts["Prefers polars over pandas"]
    assert "scope" not in user and "project" not in user  # a plain DeerFlow fact
    churn = next(f for c, f in facts.items() if "churned" in c)
    clinic = next(f for c, f in facts.items() if "readmitted" in c)
    assert (churn["scope"], churn["project"]) == ("project", "churn")
    assert (clinic["scope"], clinic["project"]) == ("project", "clinic")
    assert not any("decimals" in c for c in facts)  # one-time: still left out, with its reason
    (fold,) = [f for f in agent.memory.history.folds() if f["source"] == "k1"]
    assert any("one-time" in item["reason"] for item in fold["left_out"])
    summary = memory_json(home)["projects"]["churn"]["summary"]
    assert "churned" in summary and "polars" not in summary
    agent.close()


# -- 3. injection: the user's facts and the active project's, no other's ------------------
def test_injection_ranks_user_and_active_project_facts_and_never_another_project(
    home: Path,
) -> None:
    agent = Agent()
    agent.run(f"I prefer polars over pandas. {CHURN_TARGET}", thread="c1", project="churn")
    agent.run(CLINIC_TARGET, thread="k1", project="clinic")
    agent.memory.flush()
    mem = agent.memory
    churn_block = mem.preview("what is the target column?", project="churn")
    clinic_block = mem.preview("what is the target column?", project="clinic")
    assert "churned" in churn_block and "readmitted" not in churn_block
    assert "readmitted" in clinic_block and "churned" not in clinic_block
    assert "polars" in churn_block and "polars" in clinic_block
    assert "Project Context:\n- churn:" in churn_block and "- clinic:" not in churn_block
    # no project named (DESIGN's names): the user's facts only
    assert "churned" not in mem.preview() and "readmitted" not in mem.preview()
    reply = agent.run("What does the target column mean?", thread="k2", project="clinic")
    assert "readmitted" in reply and "churned" not in reply
    assert "churned" not in agent.last_turn.model_view[0]["content"]
    agent.close()


# -- 4. search and recall in the project, --all to widen ----------------------------------
def test_search_and_recall_look_in_the_active_project_unless_the_user_widens(
    shell: InteractiveShell,
) -> None:
    shell.run_line_magic("memory", "project churn")
    shell.run_cell_magic("agent", "-t c1", "Let's look at the telecom churn data in churn.csv.")
    shell.run_line_magic("memory", "add 'The churn.csv file has 7043 rows' --project")
    shell.run_line_magic("memory", "project clinic")
    shell.run_cell_magic("agent", "-t k1", "Let's look at the clinic data in visits.csv.")
    shell.run_line_magic("memory", "add 'The visits.csv file has 812 rows' --project")
    found = shell.run_line_magic("memory", "search rows")
    assert [f["content"] for f, _ in found.results] == ["The visits.csv file has 812 rows"]
    wide = shell.run_line_magic("memory", "search rows --all")
    assert {("project churn" in str(wide)), ("project clinic" in str(wide))} == {True}
    recalled = shell.run_line_magic("memory", "recall data")
    assert {r["thread"] for r in recalled.results} == {"k1"}
    every = shell.run_line_magic("memory", "recall data --all")
    assert {(r["thread"], r["project"]) for r in every.results} >= {
        ("c1", "churn"),
        ("k1", "clinic"),
    }

    from deerflow_nb.agent.memory_tools import MemoryTools

    memory = get_session(shell).memory
    tools = MemoryTools(memory, "k9", project="clinic")
    assert "812" in tools.search_memory("rows") and "7043" not in tools.search_memory("rows")
    # issue 36: only the user widens; the model's all_projects is ignored
    assert "7043" not in tools.search_memory("rows", all_projects=True)
    assert "c1" not in tools.recall("data", all_projects=True)
    assert "c1" not in tools.recall("data")
    said = tools.remember("The clinic team rejected SHAP plots", "context")
    assert "Remembered" in said
    stored = next(f for f in memory.data["facts"] if "SHAP" in f["content"])
    assert stored["project"] == "clinic"  # project-ish text goes to the turn's project
    tools.remember("Prefers dark plots", "preference")
    assert "project" not in next(f for f in memory.data["facts"] if "dark" in f["content"])
    tools.remember("Uses the 2019 cohort", "context", scope="user")
    assert "project" not in next(f for f in memory.data["facts"] if "cohort" in f["content"])


# -- 5. managing projects ---------------------------------------------------------------
def test_projects_list_move_rename_and_forget_through_the_gate(
    shell: InteractiveShell, home: Path
) -> None:
    shell.run_line_magic("memory", "project churn")
    shell.run_cell_magic("agent", "-t c1", CHURN_TARGET)
    get_session(shell).memory.flush()
    shell.run_line_magic("memory", "add 'Uses 5-fold CV with random_state=42'")
    shell.run_line_magic("memory", "add 'Prefers short answers' ")
    shell.run_line_magic("memory", "project clinic")
    shell.run_line_magic("memory", "add 'The clinical team rejected SHAP plots'")
    rows = {r[0]: r for r in shell.run_line_magic("memory", "projects").table().rows}
    assert rows["clinic (this notebook)"][1:3] == ("1", "0")
    assert rows["churn"][1:3] == ("2", "1")
    churn_facts = shell.run_line_magic("memory", "facts --project churn")
    assert len(churn_facts.facts) == 2 and all(f["project"] == "churn" for f in churn_facts.facts)
    here = shell.run_line_magic("memory", "facts")
    assert {f.get("project") for f in here.facts} == {None, "clinic"}
    assert len(shell.run_line_magic("memory", "facts --all").facts) == 4

    cv = next(f for f in churn_facts.facts if "random_state" in f["content"])
    shell.run_line_magic("memory", f"move {cv['id']} --user")
    assert "project" not in facts_by_text(home)[cv["content"]]
    shell.run_line_magic("memory", f"move {cv['id']} --project churn")
    assert facts_by_text(home)[cv["content"]]["project"] == "churn"

    shell.run_line_magic("memory", "project churn --rename telecom-churn")
    assert {f.get("project") for f in memory_json(home)["facts"]} == {
        None,
        "clinic",
        "telecom-churn",
    }
    assert "telecom-churn" in memory_json(home)["projects"]
    rows = {r[0]: r for r in shell.run_line_magic("memory", "projects").table().rows}
    assert rows["telecom-churn"][2] == "1"  # its thread moved too

    with pytest.raises(UsageError, match="add --yes"):
        shell.run_line_magic("memory", "project telecom-churn --forget")
    waiting = shell.run_line_magic("memory", "project telecom-churn --forget --review")
    assert "pending change" in str(waiting)
    assert len(shell.run_line_magic("memory", "facts --all").facts) == 4  # nothing yet
    shell.run_line_magic("memory", "approve --all")
    assert {f.get("project") for f in memory_json(home)["facts"]} == {None, "clinic"}
    assert "telecom-churn" not in memory_json(home)["projects"]
    with pytest.raises(UsageError, match="no project 'nope'"):
        shell.run_line_magic("memory", "project nope --forget --yes")


def test_forget_by_match_and_a_rename_stay_inside_the_notebooks_project(
    shell: InteractiveShell, home: Path
) -> None:
    """Found by a review: ``forget --match`` in one project removed another's facts, and a
    rename onto an existing project joined the two without a word."""
    memory = get_session(shell).memory
    for project, text in (
        ("alpha", "The key column is ZEPHYR_id"),
        ("beta", "The key column is order_id"),
    ):
        fact = {"content": text, "category": "context", "confidence": 0.9, "scope": "project"}
        memory.apply({"newFacts": [fact]}, project=project)  # fmt: skip
    shell.run_line_magic("memory", "project beta")
    with pytest.raises(UsageError, match="among yours or project beta's .--all"):
        shell.run_line_magic("memory", "forget --match ZEPHYR_id")
    with pytest.raises(UsageError, match="project alpha already exists"):
        shell.run_line_magic("memory", "project beta --rename alpha")
    assert {f.get("project") for f in memory_json(home)["facts"]} == {"alpha", "beta"}
    shell.run_line_magic("memory", "forget --match 'key column'")  # one here: beta's
    assert [f["content"] for f in memory_json(home)["facts"]] == ["The key column is ZEPHYR_id"]
    shell.run_line_magic("memory", "forget --match ZEPHYR_id --all")
    assert memory_json(home)["facts"] == []


def test_a_rollback_across_a_rename_waits_until_the_project_is_renamed_back(
    shell: InteractiveShell, home: Path
) -> None:
    """Found by a review: a rollback to before a rename brought the facts back under the old
    name while the threads (and the folder's alias) stayed with the new one."""
    memory = get_session(shell).memory
    fact = {"content": "The codename is BLUEFIN", "category": "context", "confidence": 0.9}
    memory.apply({"newFacts": [{**fact, "scope": "project"}]}, project="alpha")
    before = memory.history.versions()[-1]["id"]
    shell.run_line_magic("memory", "project alpha --rename gamma")
    back = "rename it back first .%memory project gamma --rename alpha., then roll back"
    with pytest.raises(UsageError, match=back):
        shell.run_line_magic("memory", f"rollback {before}")
    assert {f.get("project") for f in memory_json(home)["facts"]} == {"gamma"}
    shell.run_line_magic("memory", "project gamma --rename alpha")
    shell.run_line_magic("memory", f"rollback {before}")
    assert {f.get("project") for f in memory_json(home)["facts"]} == {"alpha"}


def test_a_rollback_racing_a_rename_in_another_kernel_is_refused_as_if_run_after_it(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a review: a rollback checked for renamed projects before memory.json's lock,
    so a rename another kernel committed meanwhile was rolled over: the facts came back
    under the old name while the threads and the folder's alias stayed with the new one."""
    hello = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    with Memory(home) as mem:
        mem.facts.add("The codename is BLUEFIN", project="alpha")
        mem.add_messages("nb-alpha", hello, project="alpha")
        before = mem.history.versions()[-1]["id"]
        mem.facts.add("The budget is fixed", project="alpha")
        # Another kernel (a real process) renames alpha as this one, having checked the
        # projects of version ``before``, waits for memory.json's lock to roll back.
        rival = Rival(home, 'print(m.projects.rename("alpha", "gamma"))')
        rival.before(monkeypatch, mem.store, "locked")
        with pytest.raises(ValueError, match="^version .* holds project alpha, renamed to gamma"):
            mem.history.rollback(before)
        assert rival.said == ["2"]
        rows = {r["name"]: (r["facts"], r["threads"]) for r in mem.projects.list()}
        assert rows == {"gamma": (2, 1)}  # nothing rolled back: facts and threads together
        assert mem.projects.renamed("alpha") == "gamma"
        assert mem.history.versions()[-1]["reason"] == "rename"


def test_a_rename_racing_another_kernels_is_refused_as_if_run_after_it(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a review: two kernels renaming at once both succeeded (a folder's alias
    left on an empty project; two projects joined), the check read before the lock."""
    hello = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    with Memory(home) as mem:
        for name in ("a", "x", "y"):
            mem.facts.add(f"The key of project {name} is its id", project=name)
            mem.add_messages(f"nb-{name}", hello, project=name)
        # Each time, another kernel (a real process) renames while this one, having read
        # the projects, waits for memory.json's lock.
        first = Rival(home, 'print(m.projects.rename("a", "b"))')
        first.before(monkeypatch, mem.store, "locked")
        with pytest.raises(KeyError, match="'a'"):
            mem.projects.rename("a", "c")
        second = Rival(home, 'print(m.projects.rename("y", "z"))')
        second.before(monkeypatch, mem.store, "locked")
        with pytest.raises(ValueError, match="^project z already exists; a rename would join"):
            mem.projects.rename("x", "z")
        assert first.said == second.said == ["1"]
        rows = {r["name"]: (r["facts"], r["threads"]) for r in mem.projects.list()}
        assert rows == {"b": (1, 1), "x": (1, 1), "z": (1, 1)}
        assert mem.projects.renamed("a") == "b"  # a's folder opens where its facts are


@pytest.mark.parametrize(
    ("meanwhile", "left"),
    [
        ("m.facts.forget(m.projects.facts('churn')[0]['id'])", 2),
        (
            "m.apply({'newFacts': [{'content': 'Churn is scored weekly', 'category': "
            "'knowledge', 'confidence': 0.9, 'scope': 'project'}]}, project='churn')",
            4,
        ),
    ],
    ids=["a-fact-forgotten", "a-fact-learned"],
)
def test_forgetting_a_project_removes_what_it_holds_as_the_forget_commits(
    home: Path, monkeypatch: pytest.MonkeyPatch, meanwhile: str, left: int
) -> None:
    """Found by a review: a project's facts were read before the lock, so a fact another
    kernel forgot meanwhile made the forget say "no facts to forget", and one a fold added
    meanwhile stayed in the forgotten project."""
    with Memory(home) as mem:
        for word in ("alpha", "bravo", "charlie"):
            mem.facts.add(f"Churn fact {word} about the model", project="churn")
        mem.facts.add("Sales are forecast by region", project="sales")
        rival = Rival(home, f"{meanwhile}\nprint('changed')")
        rival.before(monkeypatch, mem.store, "locked")  # as this kernel goes to forget
        done = mem.projects.forget("churn")
        assert rival.said == ["changed"]
        assert len(done["facts"]) == left and done["pending_id"] is None
        assert mem.projects.facts("churn") == []
        assert [r["name"] for r in mem.projects.list()] == ["sales"]


def test_a_forget_whose_project_keeps_changing_gives_up_in_one_line(
    shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When another kernel changes the project's facts every time this one is about to
    forget them, the forget gives up after ``FORGET_TRIES`` reads with one line to run it
    again, and nothing is forgotten."""
    from deerflow_nb.memory.updates import project_admin

    memory = get_session(shell).memory
    memory.facts.add("Churn is scored weekly", project="churn")
    reads = 0
    real = project_admin.Projects.facts

    def moving(self: project_admin.Projects, name: str) -> list[dict[str, Any]]:
        nonlocal reads
        reads += 1
        found = real(self, name)
        # Every other read finds one fact more: what a try read is never what it commits.
        return found + [{"id": f"fact_meanwhile_{reads}"}] if reads % 2 == 0 else found

    monkeypatch.setattr(project_admin.Projects, "facts", moving)
    line = usage_error(shell, "project churn --forget --yes")
    assert line.startswith("UsageError: %memory project: project churn's facts changed")
    assert line.endswith("nothing was forgotten: forget it again")
    assert reads > project_admin.FORGET_TRIES  # the handler's read, then each try's
    monkeypatch.setattr(project_admin.Projects, "facts", real)
    assert [f["content"] for f in memory.projects.facts("churn")] == ["Churn is scored weekly"]


# -- 6. eviction within the scope that grew ---------------------------------------------
def test_a_rename_keeps_the_notebooks_found_from_their_folder(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 36: a notebook whose project came from its folder stayed on the old, now empty
    name after ``--rename`` and lost its facts; it follows the rename, in a new kernel too."""
    folder = tmp_path / "work" / "alpha"
    folder.mkdir(parents=True)
    monkeypatch.chdir(folder)
    shell = InteractiveShell()
    shell.run_line_magic("load_ext", "deerflow_nb")
    try:
        assert get_session(shell).project.describe() == "alpha (folder)"
        shell.run_line_magic("memory", f"add {CHURN_TARGET}")
        shell.run_cell_magic("agent", "", "Hello there.")
        done = shell.run_line_magic("memory", "project alpha --rename churn")
        assert "named alpha open in project churn from now on" in str(done)
    finally:
        shell.run_line_magic("unload_ext", "deerflow_nb")
    with Memory(home) as mem:
        assert {t["project"] for t in mem.journal.threads()} == {"churn"}  # with the facts
    again = InteractiveShell()  # a new kernel in the same folder
    again.run_line_magic("load_ext", "deerflow_nb")
    try:
        assert get_session(again).project.describe() == "churn (folder)"
        again.run_cell_magic("agent", "", "What is the target column?")
        turn = get_session(again).agent().last_turn
        assert turn.project == "churn" and turn.facts_injected >= 1
        again.run_line_magic("memory", "project churn --rename alpha")  # back again
    finally:
        again.run_line_magic("unload_ext", "deerflow_nb")
    third = InteractiveShell()
    third.run_line_magic("load_ext", "deerflow_nb")
    try:
        assert get_session(third).project.describe() == "alpha (folder)"
    finally:
        third.run_line_magic("unload_ext", "deerflow_nb")


def test_a_busy_project_never_evicts_the_users_profile(home: Path) -> None:
    (home / "config.yaml").write_text("memory:\n  max_facts: 6\n")
    mem = Memory()
    for text in ("Prefers polars", "Works in Lisbon", "Knows SQL well"):
        mem.add_fact(text, "preference", 0.6)
    for i in range(8):
        mem.apply(
            {
                "newFacts": [
                    {
                        "content": f"Experiment {i} scored {i}0 points",
                        "confidence": 0.95,
                        "scope": "project",
                    }
                ]
            },
            source=f"thread-{i}",  # a fold's: "manual" would count as added by hand
        )
    stored = memory_json(home)["facts"]
    assert len(stored) == 6
    assert {f["content"] for f in stored if "project" not in f} == {
        "Prefers polars",
        "Works in Lisbon",
        "Knows SQL well",
    }
    evicted = [e for e in mem.events(100) if e["kind"] == "evict"]
    assert evicted and all("Experiment" in e["old_content"] for e in evicted)


# -- an old home, opened by this code ---------------------------------------------------
def test_an_old_home_opens_with_every_fact_in_the_user_scope(home: Path) -> None:
    old = {
        "version": "1.0",
        "lastUpdated": "2026-01-01T00:00:00Z",
        "user": {"workContext": {"summary": "Builds churn models.", "updatedAt": ""}},
        "history": {},
        "facts": [
            {
                "id": "fact_1",
                "content": "Prefers polars over pandas",
                "category": "preference",
                "confidence": 0.9,
                "createdAt": "2026-01-01T00:00:00Z",
                "source": "t",
            },
        ],
    }
    (home / "memory.json").write_text(json.dumps(old))
    db = sqlite_utils.Database(home / "journal.db")
    db["_migrations"].create({"name": str, "applied_at": str}, pk="name")
    for name, fn in MIGRATIONS[:-1]:  # every migration before this change's
        fn(db)
        db["_migrations"].insert({"name": name, "applied_at": "2026-01-01"})
    db.execute(
        "INSERT INTO threads (id, kind, title, created_at, updated_at) "
        "VALUES ('old', 'lead', 'old', '2026-01-01', '2026-01-01')"
    )
    db.conn.commit()
    db.close()
    mem = Memory()
    assert "Prefers polars over pandas" in mem.preview(project="churn")
    assert "Prefers polars over pandas" in mem.preview(project="anything else")
    assert mem.projects.list() == [
        {"name": "default", "facts": 0, "threads": 1, "last_used": "2026-01-01", "summary": ""}
    ]
    with sqlite3.connect(home / "journal.db") as raw:
        assert "project" in [r[1] for r in raw.execute("PRAGMA table_info(threads)")]
    assert memory_json(home)["facts"] == old["facts"]  # opened, not rewritten
    mem.close()


# -- two kernels on two projects sharing one home ---------------------------------------
KERNEL = textwrap.dedent(
    """
    import sys
    from IPython.core.interactiveshell import InteractiveShell
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "deerflow_nb")
    shell.run_line_magic("memory", "project " + sys.argv[1])
    shell.run_cell_magic("agent", "-t " + sys.argv[1], sys.argv[2])
    from deerflow_nb.notebook.session import get_session
    print("FLUSH:", get_session(shell).memory.flush(timeout=60))
    shell.run_cell_magic("agent", "-t ask-" + sys.argv[1], "What is the target column?")
    turn = get_session(shell).agent().last_turn
    print("BLOCK:", turn.model_view[0]["content"].split("<memory>")[-1])
    """
)


def test_two_kernels_on_two_projects_share_one_home(home: Path, tmp_path: Path) -> None:
    script = tmp_path / "kernel.py"
    script.write_text(KERNEL)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DEERFLOW_NB_HOME": str(home)}
    kernels = [
        subprocess.Popen(
            [sys.executable, str(script), name, said],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, said in (("churn", CHURN_TARGET), ("clinic", CLINIC_TARGET))
    ]
    outputs = [k.communicate(timeout=240) for k in kernels]
    assert [k.returncode for k in kernels] == [0, 0], outputs
    churn_block, clinic_block = (out.split("BLOCK:")[-1] for out, _ in outputs)
    assert "churned" in churn_block and "readmitted" not in churn_block, outputs[0]
    assert "readmitted" in clinic_block and "churned" not in clinic_block, outputs[1]
    owners = {f["project"] for f in memory_json(home)["facts"] if "target column" in f["content"]}
    assert owners == {"churn", "clinic"}


# -- the benchmark ----------------------------------------------------------------------
def test_the_benchmark_meets_its_goals_and_renders_its_table(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "projects.py"),
            "--sessions",
            "4",
            "--results",
            str(tmp_path),
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr  # exits 1 when a goal is missed
    sys.path.insert(0, str(ROOT / "scripts"))
    import bench_tables

    table = bench_tables.projects_table(tmp_path)
    assert "| leak rate: blocks holding another project's fact | **0.000** | 1.000 | 0 |" in table
    assert "| user facts available in every project | **1.000** |" in table


def test_designs_injection_names_without_a_project_inject_the_users_facts_only() -> None:
    from deerflow_nb.memory import format_memory_for_injection, select_facts

    data = {
        "facts": [
            {"id": "a", "content": "Prefers polars over pandas", "confidence": 0.9},
            {
                "id": "b",
                "content": "The target column is churned",
                "confidence": 0.95,
                "scope": "project",
                "project": "churn",
            },
        ],
        "projects": {"churn": {"summary": "Churn model for a telecom.", "updatedAt": ""}},
    }
    block = format_memory_for_injection(data, 2000, "target column polars")
    assert "polars" in block and "churned" not in block and "telecom" not in block
    assert [f["id"] for f in select_facts(data, "target column")] == ["a"]


def test_threads_from_before_projects_are_recalled_in_every_project(home: Path) -> None:
    agent = Agent()
    old = [
        {"role": "user", "content": "Let's look at the Berlin stores data."},
        {"role": "assistant", "content": "Berlin it is."},
    ]
    agent.journal.add_messages("old", old)  # no project: as journaled before projects
    agent.run("Let's look at the Lisbon stores data.", thread="new", project="lisbon")
    hits = agent.memory.recall("stores data", project="clinic")
    assert {(h["thread"], h["project"]) for h in hits} == {("old", None)}
    lisbon = agent.memory.recall("stores data", project="lisbon")
    assert {h["thread"] for h in lisbon} == {"old", "new"}
    agent.close()


def test_consolidation_merges_within_a_scope_never_across(home: Path) -> None:
    mem = Memory()
    mem.add_fact("Prefers polars over pandas", "preference")
    mem.add_fact("Prefers polars over pandas for data frames", "preference", project="churn")
    mem.add_fact("Uses DuckDB for analytics", "knowledge", project="churn")
    mem.add_fact("Uses DuckDB for local analytics work", "knowledge", project="churn")
    report = mem.consolidate()
    (merge,) = report.merges  # the polars pair is two scopes: never proposed
    assert "DuckDB" in merge["content"]
    mem.approve("all")  # hand-added facts merge once the user approves
    facts = {f["content"]: f for f in mem.data["facts"]}
    assert len(facts) == 3 and facts[merge["content"]]["project"] == "churn"
    assert "project" not in facts["Prefers polars over pandas"]  # not joined to churn's
    assert facts["Prefers polars over pandas for data frames"]["project"] == "churn"


def test_a_held_project_change_is_reviewed_item_by_item(home: Path) -> None:
    mem = Memory()
    mem.review.enabled = True
    mem.apply(
        {
            "newFacts": [
                {"content": "The churn table has 7043 rows", "confidence": 0.9, "scope": "project"},
                {"content": "Prefers polars over pandas", "confidence": 0.9},
            ],
            "projectContext": {"summary": "Telecom churn model.", "shouldUpdate": True},
        },
        source="t1",
        project="churn",
    )
    (change,) = mem.pending()
    lines = [item.reading() for item in mem.review.items(change)]
    assert lines[0].endswith("(context, 0.90, project churn)")
    assert "Project churn's summary: Telecom churn model." in lines[2]
    mem.review.approve_items(change["id"], [1, 3])  # the project's fact and summary, not the other
    assert [f.get("project") for f in mem.data["facts"]] == ["churn"]
    assert mem.data["projects"]["churn"]["summary"] == "Telecom churn model."
    assert [item.text for item in mem.review.items(mem.pending()[0])] == [
        "Prefers polars over pandas"
    ]
