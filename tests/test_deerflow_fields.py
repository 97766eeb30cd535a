"""DeerFlow's unknown fields survive every write path (issue 36, Files): keys memory.json
holds that deerflow_nb does not know — at the top, in the ``user`` group, inside a section
such as ``user.workContext``, on a fact — are still there after a fold, an edit, a
forget, a consolidation, a rollback and an export."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from deerflow_nb.memory import Memory

AT = "2026-01-05T10:00:00Z"


def deerflow_document() -> dict[str, Any]:
    """A DeerFlow memory.json carrying fields of a newer DeerFlow at every level."""

    def section(summary: str, **extra: Any) -> dict[str, Any]:
        return {"summary": summary, "updatedAt": AT, **extra}

    def fact(fact_id: str, content: str, category: str, **extra: Any) -> dict[str, Any]:
        return {
            "id": fact_id,
            "content": content,
            "category": category,
            "confidence": 0.9,
            "createdAt": AT,
            "source": "thread-1",
            **extra,
        }

    return {
        "version": "1.0",
        "lastUpdated": AT,
        "deerflowExtra": {"schema": 2},
        "user": {
            "workContext": section("Works at Acme Hospital.", sources=["thread-1"]),
            "personalContext": section("Prefers polars over pandas.", sources=["thread-2"]),
            "topOfMind": section(""),
            "userExtra": {"pinned": True},
        },
        "history": {
            "recentMonths": section("Moved the team to polars.", weight=2),
            "earlierContext": section(""),
            "longTermBackground": section(""),
        },
        "facts": [
            fact("fact_work", "Works at Acme Hospital", "context", tags=["job"]),
            fact("fact_polars", "Prefers polars over pandas", "preference", embedding_ref="e1"),
            fact(
                "fact_polars2",
                "Prefers polars over pandas for dataframes",
                "preference",
                tags=["tools"],
            ),  # fmt: skip
        ],
    }


EXTRAS = {"fact_work": {"tags": ["job"]}, "fact_polars": {"embedding_ref": "e1"}}


def assert_kept(doc: dict[str, Any]) -> None:
    """Every unknown field of ``deerflow_document`` is in ``doc``, with its value."""
    assert doc["deerflowExtra"] == {"schema": 2}
    assert doc["user"]["userExtra"] == {"pinned": True}
    assert doc["user"]["workContext"]["sources"] == ["thread-1"]
    assert doc["user"]["personalContext"]["sources"] == ["thread-2"]
    assert doc["history"]["recentMonths"]["weight"] == 2
    facts = {f["id"]: f for f in doc["facts"]}
    for fact_id, extra in EXTRAS.items():
        if fact_id in facts:
            assert {k: facts[fact_id].get(k) for k in extra} == extra, fact_id


@pytest.fixture
def mem(home: Path) -> Memory:
    (home / "memory.json").write_text(json.dumps(deerflow_document()), encoding="utf-8")
    memory = Memory()
    yield memory
    memory.close()


def stored(home: Path) -> dict[str, Any]:
    return json.loads((home / "memory.json").read_text(encoding="utf-8"))


def test_a_fold_that_rewrites_sections_keeps_their_unknown_keys(mem: Memory, home: Path) -> None:
    mem.apply(
        {
            "user": {
                "workContext": {"summary": "Now leads data science at Acme.", "shouldUpdate": True},
                "personalContext": {"summary": "Prefers polars.", "shouldUpdate": True},
            },
            "history": {"recentMonths": {"summary": "Moved to polars.", "shouldUpdate": True}},
            "newFacts": [{"content": "Leads data science at Acme", "confidence": 0.9}],
            "factsToRemove": ["fact_polars2"],
        },
        source="thread-9",
    )
    doc = stored(home)
    assert doc["user"]["workContext"]["summary"] == "Now leads data science at Acme."
    assert_kept(doc)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda m: m.facts.edit("fact_polars", "Prefers polars"), id="edit-text"),
        pytest.param(lambda m: m.forget("fact_polars"), id="forget"),
        pytest.param(lambda m: m.forget("fact_work"), id="forget-work"),
    ],
)
def test_edits_and_forgets_keep_unknown_keys(mem: Memory, home: Path, change: Any) -> None:
    change(mem)
    assert_kept(stored(home))


def test_a_consolidated_fact_keeps_its_sources_unknown_keys(mem: Memory, home: Path) -> None:
    report = mem.consolidate()
    (merged,) = report.merged
    assert set(merged["from"]) == {"fact_polars", "fact_polars2"}
    fact = next(f for f in stored(home)["facts"] if f["id"] not in EXTRAS)
    assert fact["embedding_ref"] == "e1" and fact["tags"] == ["tools"]
    assert_kept(stored(home))


def test_rollback_and_export_keep_unknown_keys_after_a_fold(
    mem: Memory, home: Path, tmp_path: Path
) -> None:
    mem.apply(
        {"user": {"workContext": {"summary": "Leads data science.", "shouldUpdate": True}}},
        source="thread-9",
    )
    folded = mem.versions()[-1]["id"]
    mem.export(tmp_path / "after-fold.json")
    assert_kept(json.loads((tmp_path / "after-fold.json").read_text(encoding="utf-8")))
    mem.forget("fact_work")
    mem.rollback(folded)
    assert_kept(stored(home))
    assert "fact_work" in {f["id"] for f in stored(home)["facts"]}
    mem.export(tmp_path / "after-rollback.json")
    assert_kept(json.loads((tmp_path / "after-rollback.json").read_text(encoding="utf-8")))
