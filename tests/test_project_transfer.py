"""Exporting and importing one project through ``%memory``: only that project's facts and
summary leave, and an import adds facts to one project through the gate, replacing nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from journal_rows import deerflow_memory, memory_json
from magic_lines import run, usage_error
from rival import Rival

from deerflow_nb.memory import Memory
from deerflow_nb.notebook.session import get_session

USER = "The user prefers polars for every dataset"
ALPHA = "The alpha table has 7043 rows and a churned column"
BETA = "The beta target column is revenue_q3"


def seed(shell: InteractiveShell) -> Memory:
    """The user's fact, one fact and a summary in project alpha, one fact in beta."""
    run(shell, f'add "{USER}" --user')
    run(shell, "project alpha")
    run(shell, f'add "{ALPHA}" --project')
    memory = get_session(shell).memory
    memory.apply(
        {"newFacts": [], "projectContext": {"summary": "Telecom churn.", "shouldUpdate": True}},
        source="thread-alpha",
        project="alpha",  # the notebook's project, named as every call names it
    )
    run(shell, "project beta")
    run(shell, f'add "{BETA}" --project')
    return memory


def by_text(home: Path) -> dict[str, dict[str, Any]]:
    return {f["content"]: f for f in memory_json(home)["facts"]}


def test_export_of_one_project_writes_only_its_facts_and_summary(
    shell: InteractiveShell, home: Path, tmp_path: Path
) -> None:
    memory = seed(shell)
    out = tmp_path / "alpha.json"
    note = str(run(shell, f"export {out} --project alpha"))
    assert "project alpha's 1 fact" in note and str(out) in note
    doc = json.loads(out.read_text())
    assert [f["content"] for f in doc["facts"]] == [ALPHA]
    assert doc["facts"][0]["project"] == "alpha"
    assert list(doc["projects"]) == ["alpha"] and doc["projects"]["alpha"]["summary"]
    assert not any(s["summary"] for s in doc["user"].values())  # memory.json-shaped, no user
    assert memory.transfer.read_import(out) == doc  # a document an import accepts

    assert "no project 'gamma'" in usage_error(
        shell, f"export {tmp_path / 'g.json'} --project gamma"
    )
    assert not (tmp_path / "g.json").exists()
    assert "exists; choose another path" in usage_error(shell, f"export {out} --project beta")
    assert json.loads(out.read_text()) == doc  # nothing overwritten by accident


def test_import_into_a_project_adds_its_facts_through_the_gate_and_replaces_nothing(
    shell: InteractiveShell, home: Path, tmp_path: Path
) -> None:
    memory = seed(shell)
    out = tmp_path / "alpha.json"
    run(shell, f"export {out} --project alpha")
    before = {f["id"]: f for f in memory_json(home)["facts"]}
    versions = len(memory.versions())

    note = str(run(shell, f"import {out} --project gamma"))  # no --yes: nothing is replaced
    assert "Imported 1 fact into project gamma" in note
    after = {f["id"]: f for f in memory_json(home)["facts"]}
    assert {i: f for i, f in after.items() if i in before} == before  # every fact kept as is
    copied = [f for f in memory_json(home)["facts"] if f.get("project") == "gamma"]
    assert [f["content"] for f in copied] == [ALPHA] and copied[0]["scope"] == "project"
    assert memory_json(home)["projects"]["gamma"]["summary"] == "Telecom churn."
    assert len(memory.versions()) == versions + 1  # one change, in the versions
    assert memory.versions()[-1]["reason"] == "import"
    assert memory.preview(ALPHA, project="gamma").count("7043 rows") == 1
    assert "7043" not in memory.preview(ALPHA, project="beta")  # still kept out of beta

    again = str(run(shell, f"import {out} --project gamma"))
    assert "Imported 0 facts into project gamma" in again and "1 already known" in again
    assert len([f for f in memory_json(home)["facts"] if f.get("project") == "gamma"]) == 1


def test_a_deerflow_memory_json_imports_into_one_project(
    shell: InteractiveShell, home: Path, tmp_path: Path
) -> None:
    seed(shell)
    plain = deerflow_memory(
        [
            {
                "id": "fact_deer0001",
                "content": "The sales table is partitioned by month",
                "category": "knowledge",
                "confidence": 0.3,  # low, but a person's import drops nothing for it
                "createdAt": "2025-01-01T00:00:00Z",
                "source": "thread-1",
            }
        ],
        "2025-01-01T00:00:00Z",
    )
    path = tmp_path / "deerflow.json"
    path.write_text(json.dumps(plain))
    assert "Imported 1 fact into project sales" in str(run(shell, f"import {path} --project sales"))
    fact = by_text(home)["The sales table is partitioned by month"]
    assert (fact["scope"], fact["project"], fact["category"]) == ("project", "sales", "knowledge")
    # Nothing of the file lost: when the fact was made, and from where, come with it.
    assert (fact["createdAt"], fact["source"]) == ("2025-01-01T00:00:00Z", "thread-1")
    assert USER in by_text(home)  # the user's facts were not replaced

    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert "cannot import" in usage_error(shell, f"import {broken} --project sales")
    assert "not a project name" in usage_error(shell, f"import {path} --project '///'")


def test_a_project_import_racing_another_kernels_copy_adds_each_fact_once(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a project import adds is decided by the gate under memory.json's lock: the same
    file imported by another kernel as this one waits for the lock is known, not doubled."""
    with Memory(home) as mem:
        mem.facts.add(ALPHA, project="alpha")
        out = tmp_path / "alpha.json"
        mem.transfer.export(out, project="alpha")
        rival = Rival(home, f"print(int(m.import_({str(out)!r}, project='gamma')))")
        rival.before(monkeypatch, mem.store, "locked")  # as this kernel goes to import
        report = mem.import_(out, project="gamma")
        assert rival.said == ["1"]
        assert (int(report), report.known) == (0, 1)
        assert [f["content"] for f in mem.projects.facts("gamma")] == [ALPHA]
