"""One fact query (``FactQuery``): ``%memory facts``, the panel, the inspector's table and
``forget_matching`` select and order facts the same way, through the same code."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from deerflow_nb.inspector.view_models import fact_rows
from deerflow_nb.memory import FactQuery, Memory
from deerflow_nb.notebook.panel import MemoryPanel

FACTS = [
    {"id": "a", "content": "Prefers polars over pandas", "category": "preference",
     "confidence": 0.95, "createdAt": "2026-01-02T00:00:00Z"},
    {"id": "b", "content": "Works on churn models", "category": "context",
     "confidence": 0.75, "createdAt": "2026-01-03T00:00:00Z"},
    {"id": "c", "content": "Wants to learn Rust", "category": "goal",
     "confidence": 0.85, "createdAt": "2026-01-01T00:00:00Z"},
    {"id": "d", "content": "works in UTC+1", "category": "context",
     "confidence": 0.85, "createdAt": "2026-01-04T00:00:00Z"},
]  # fmt: skip


def ids(facts: list[dict]) -> list[str]:
    return [f["id"] for f in facts]


def test_filters_sorts_and_pages() -> None:
    assert ids(FactQuery().run(FACTS)) == ["a", "c", "d", "b"]  # ties keep stored order
    assert ids(FactQuery(descending=False).run(FACTS)) == ["b", "c", "d", "a"]
    assert ids(FactQuery(sort="created").run(FACTS)) == ["d", "b", "a", "c"]
    assert ids(FactQuery(sort="content", descending=False).run(FACTS)) == ["a", "c", "d", "b"]
    assert ids(FactQuery(sort="none").run(FACTS)) == ["a", "b", "c", "d"]
    assert ids(FactQuery(categories=("context", "goal")).run(FACTS)) == ["c", "d", "b"]
    assert ids(FactQuery(min_confidence=0.8, max_confidence=0.9).run(FACTS)) == ["c", "d"]
    assert ids(FactQuery(text="  WORKS ").run(FACTS)) == ["d", "b"]
    page, total = FactQuery(offset=1, limit=2).page(FACTS)
    assert ids(page) == ["c", "d"] and total == 4
    assert FactQuery(offset=9).run(FACTS) == []


def test_like_is_what_a_forget_request_could_mean() -> None:
    assert ids(FactQuery(like="churn   MODELS", sort="none").run(FACTS)) == ["b"]
    assert ids(FactQuery(like="learning rust", sort="none").run(FACTS)) == ["c"]  # words shared
    assert FactQuery(like="sql", sort="none").run(FACTS) == []


@pytest.fixture
def memory(home: Path) -> Iterator[Memory]:
    with Memory(home) as mem:
        for fact in FACTS:
            mem.add_fact(fact["content"], fact["category"], fact["confidence"])
        yield mem


def test_every_list_of_facts_runs_the_same_query(memory: Memory) -> None:
    by_text = {f["content"]: f["id"] for f in memory.data["facts"]}
    want = [by_text[c] for c in ("Wants to learn Rust", "works in UTC+1", "Works on churn models")]
    assert ids(memory.facts.list(min_confidence=0.7, category=None))[1:] == want
    panel = MemoryPanel(memory)
    assert list(panel.fact_checks) == ids(memory.facts.list())
    panel.text_filter.value = "works"
    assert list(panel.fact_checks) == [by_text["works in UTC+1"], by_text["Works on churn models"]]
    rows = fact_rows(memory.data, text="works", sort="confidence (high first)")
    assert [r["id"] for r in rows] == list(panel.fact_checks)
    assert ids(memory.facts.matching("churn models")) == [by_text["Works on churn models"]]


def test_memory_facts_shows_the_first_n_of_all(shell: InteractiveShell) -> None:
    for fact in FACTS:
        shell.run_line_magic("memory", f"add --category {fact['category']} {fact['content']}")
    table = str(shell.run_line_magic("memory", "facts --limit 2"))
    assert "Facts (2 of 4)" in table
    assert "Facts (4)" in str(shell.run_line_magic("memory", "facts"))
