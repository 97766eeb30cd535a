"""Scope as an argument: one rule (``Scope.sees``) decides what a scope sees, and every
listing (``%memory facts``, the panel, the inspector, injection, search) asks memory with
a scope instead of filtering facts itself, so they agree, even on a project fact that names
no project (``projects.fact_project``: ``default``'s), where ``%memory facts`` once
disagreed with injection."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from IPython.core.interactiveshell import InteractiveShell

from deerflow_nb.inspector.view_models import USER_ONLY, fact_rows, injection_preview
from deerflow_nb.memory import FactQuery, Memory, Scope, View, empty_memory, scoped_view
from deerflow_nb.notebook.panel import MemoryPanel

USER_FACT = {"id": "fact_user", "content": "Prefers polars for every dataset"}
NAMED = {"id": "fact_churn", "content": "The churn table target is churned_90d"}
NAMELESS = {"id": "fact_nameless", "content": "The default table target is revenue_q3"}


def fact(base: dict[str, Any], **scope: str) -> dict[str, Any]:
    return {
        **base,
        "category": "context",
        "confidence": 0.9,
        "createdAt": "2026-03-01T00:00:00Z",
        "source": "manual",
        **scope,
    }


def seed(home: Path) -> None:
    """A memory.json with the user's fact, churn's, and a project fact naming no project
    (hand-edited, or written by an older version)."""
    data = empty_memory()
    data["facts"] = [
        fact(USER_FACT),
        fact(NAMED, scope="project", project="churn"),
        fact(NAMELESS, scope="project"),
    ]
    (home / "memory.json").write_text(json.dumps(data), encoding="utf-8")


def ids(facts: Any) -> set[str]:
    return {f["id"] for f in facts}


def test_the_one_rule() -> None:
    user, named, nameless = (
        fact(USER_FACT),
        fact(NAMED, scope="project", project="churn"),
        fact(NAMELESS, scope="project"),
    )
    assert Scope.of(None).sees(user) and not Scope.of(None).sees(named)
    assert Scope.of("churn").sees(named) and not Scope.of("churn").sees(nameless)
    assert Scope.of("default").sees(nameless)  # a nameless project fact is default's
    assert not Scope.own("churn").sees(user) and Scope.own("churn").sees(named)
    assert Scope.several(["churn", "default"]).sees(nameless)
    assert all(Scope.everywhere().sees(f) for f in (user, named, nameless))
    assert Scope.of("churn").project == "churn" and Scope.everywhere().project is None


def test_a_snapshot_is_a_typed_value_not_a_marked_dict() -> None:
    data = {
        **empty_memory(),
        "facts": [fact(USER_FACT), fact(NAMED, scope="project", project="churn")],
    }
    snap = scoped_view(data, Scope.of(None), revision=("r", 1))
    assert isinstance(snap, View) and ids(snap.facts) == {"fact_user"}
    assert snap.key == (("r", 1), Scope.of(None))
    assert not any(k.startswith("_") for k in snap.data)  # no hidden marker in the document
    assert ids(data["facts"]) == {"fact_user", "fact_churn"}  # the input is not changed


def test_every_listing_agrees_on_a_project_fact_without_a_name(
    shell: InteractiveShell, home: Path
) -> None:
    seed(home)
    shell.run_line_magic("memory", "project default")
    here = shell.run_line_magic("memory", "facts")
    assert ids(here.facts) == {"fact_user", "fact_nameless"}  # once: the nameless one left out
    mine = shell.run_line_magic("memory", "facts --user")
    assert ids(mine.facts) == {"fact_user"}  # once: the nameless project fact counted as yours
    churn = shell.run_line_magic("memory", "facts --project churn")
    assert ids(churn.facts) == {"fact_churn"}

    mem = Memory()
    try:
        injected = mem.injection(max_tokens=2000, project="default")[1]
        assert ids(injected) == ids(here.facts)  # what the notebook lists is what a turn sees
        found = mem.search("", k=100, project="default", relevant_only=False)
        assert ids(f for f, _ in found) == ids(here.facts)
        assert ids(mem.facts.query(FactQuery(scope=Scope.of("default")))) == ids(here.facts)

        panel = MemoryPanel(mem, project=lambda: "default")
        try:
            assert set(panel.fact_checks) == ids(here.facts)
            assert "2 facts" in panel.header.value
            panel.project.widget.value = USER_ONLY
            assert set(panel.fact_checks) == ids(mine.facts)
        finally:
            panel.close()

        data = mem.data
        assert ids(fact_rows(data, project="default")) == ids(here.facts)
        assert ids(fact_rows(data, project=USER_ONLY)) == ids(mine.facts)
        preview = injection_preview(*mem.reader.explain(None, 2000, project="default"))
        assert {f["id"] for f in preview["facts"]} == ids(injected)
    finally:
        mem.close()


def test_no_read_falls_back_to_a_project_set_on_memory(home: Path) -> None:
    seed(home)
    mem = Memory()
    try:
        assert not hasattr(mem, "project")  # the scope is an argument, never ambient state
        assert ids(mem.injection(max_tokens=2000)[1]) == {"fact_user"}
        assert ids(mem.injection(max_tokens=2000, project="churn")[1]) == {
            "fact_user",
            "fact_churn",
        }
    finally:
        mem.close()


def test_a_turn_on_unchanged_memory_reuses_its_scopes_view(tmp_path: Path) -> None:
    """The snapshot a scope sees is filtered once per revision (a scan of every fact), and
    filtered again once memory changes."""
    mem = Memory(tmp_path)
    mem.add_fact("Prefers polars over pandas")
    mem.add_fact("The target column is churned_90d", project="churn")
    first = mem.view(Scope.of("churn"))
    assert mem.view(Scope.of("churn")) is first
    assert mem.view(Scope.of("clinic")) is not first
    mem.add_fact("The labels table is churn_labels_v2", project="churn")
    again = mem.view(Scope.of("churn"))
    assert again is not first and again.revision != first.revision
    assert "The labels table is churn_labels_v2" in [f["content"] for f in again.facts]
    assert "The labels table is churn_labels_v2" not in [
        f["content"] for f in mem.view(Scope.of("clinic")).facts
    ]
    mem.close()
