"""The read door's ranked reads (issue 38): ``MemoryReader.search`` finds what
``Memory.search`` finds, ``preview`` is what ``Memory.preview`` gives, and the inspector's
preview (``MemoryReader.explain``) is the block a turn injects — all on a read-only reader
that writes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from deerflow_nb import Agent
from deerflow_nb.inspector import data
from deerflow_nb.memory import Memory, Scope, open_reader

SHARED = "Prefers polars over pandas for dataframes"
ALPHA = "Project alpha predicts churn from the customer table"
BETA = "Project beta forecasts hospital readmissions"
QUERIES = ["polars", "which dataframe library do I use?", "churn", "readmissions", "", "tea"]


@pytest.fixture
def seeded(home: Path) -> Path:
    """The user's facts and two projects' facts."""
    with Memory(home) as mem:
        mem.add_fact(SHARED, "preference")
        mem.add_fact("Plots with matplotlib, dark theme", "preference")
        mem.add_fact("Works on churn models at a telecom", "context")
        mem.add_fact(ALPHA, "context", project="alpha")
        mem.add_fact("The alpha target column is churned", "knowledge", project="alpha")
        mem.add_fact(BETA, "context", project="beta")
    return home


def test_a_readers_search_finds_what_memory_search_finds(seeded: Path) -> None:
    scopes = [{}, {"project": "alpha"}, {"project": "beta"}, {"everywhere": True}]
    with open_reader(seeded) as reader, Memory(seeded) as mem:
        for query in QUERIES:
            for scope in scopes:
                for relevant_only in (True, False):
                    want = mem.search(query, 5, relevant_only=relevant_only, **scope)
                    asked = (
                        Scope.everywhere()
                        if scope.get("everywhere")
                        else Scope.of(scope.get("project"))
                    )
                    got = reader.search(query, 5, scope=asked, relevant_only=relevant_only)
                    assert got == want, (query, scope, relevant_only)
        beta, alpha = Scope.of("beta"), Scope.of("alpha")
        assert [f["content"] for f, _ in reader.search("readmissions", scope=beta)] == [BETA]
        assert reader.search("readmissions", scope=alpha) == []  # never another's


def test_a_readers_preview_is_memory_preview(seeded: Path) -> None:
    with open_reader(seeded) as reader, Memory(seeded) as mem:
        for context in (None, "polars", ["an earlier turn", "which target column?"]):
            for budget in (None, 0, 40, 120, 2000):
                for project in (None, "alpha", "beta"):
                    want = mem.injection(context, budget, project=project)
                    assert reader.preview(context, budget, project=project) == want[0]
                    block, why, seen = reader.explain(context, budget, project=project)
                    assert block == want[0] and [w["fact"] for w in why] == want[1]
                    assert seen == len(mem.view(Scope.of(project)).facts)


def test_the_inspectors_preview_is_the_block_a_turn_injects(seeded: Path) -> None:
    message = "Which target column does the dataset have, and which dataframe library?"
    agent = Agent(seeded, model="offline")
    try:
        agent.run(message, thread="t1", project="alpha", use_subagents=False)
        turn = agent.last_turn
        assert turn is not None and "<memory>" in turn.model_view[0]["content"]
        budget = agent.settings.memory.max_injection_tokens
    finally:
        agent.close()
    block, why, seen = data.injection(seeded, message, budget, project="alpha")
    assert block and block in turn.model_view[0]["content"]
    assert ALPHA in block and BETA not in block and seen == 5  # 3 of the user, 2 of alpha


def test_ranked_reads_write_nothing(seeded: Path) -> None:
    from test_memory_read_only import tree

    before = tree(seeded)
    with open_reader(seeded) as reader:
        reader.search("polars", scope=Scope.everywhere())
        reader.preview("polars", project="alpha")
        reader.explain("churn", 200, project="beta")
    assert tree(seeded) == before
