"""``Memory``'s facade by job (issue 38): DESIGN.md's names are the groups' methods, the
groups cannot be replaced by mistake, and the review switch is ``review.enabled``."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from deerflow_nb.memory import Memory
from deerflow_nb.memory.api import DESIGN_ALIASES, GROUPS


def test_each_design_alias_is_its_groups_method(tmp_path: Path) -> None:
    with Memory(tmp_path / "home") as mem:
        for name, target in DESIGN_ALIASES.items():
            group, method = target.split(".")
            assert group in GROUPS
            bound = getattr(getattr(mem, group), method)
            assert getattr(mem, name) == bound, name
            assert inspect.signature(getattr(mem, name)) == inspect.signature(bound), name
            assert getattr(Memory, name).__doc__ == bound.__doc__, name


def test_the_aliases_behave_as_the_groups_do(tmp_path: Path) -> None:
    with Memory(tmp_path / "home") as mem:
        fact = mem.add_fact("Prefers polars over pandas", "preference")
        assert mem.facts.list() == [fact]
        assert mem.search("polars") == mem.facts.search("polars")
        assert mem.versions() == mem.history.versions()
        assert mem.events() == mem.history.events()
        assert mem.lineage(fact["id"]) == mem.history.lineage(fact["id"])
        mem.review.enabled = True
        mem.apply({"newFacts": [{"content": "Uses DuckDB", "category": "knowledge"}]}, "t1")
        assert mem.pending() == mem.review.pending() and mem.pending_count() == 1
        assert mem.approve("all") == 1 and mem.review.pending() == []
        mem.review.enabled = False
        assert mem.forget(fact["id"])["id"] == fact["id"]
        assert fact["id"] not in {f["id"] for f in mem.facts.list()}
        mem.rollback(mem.versions()[-2]["id"])
        assert fact["id"] in {f["id"] for f in mem.facts.list()}
        assert mem.stale() == mem.upkeep.stale() == []
        assert mem.recall("polars") == mem.threads.recall("polars")


def test_a_group_is_not_a_value(tmp_path: Path) -> None:
    with Memory(tmp_path / "home") as mem:
        with pytest.raises(AttributeError, match="review.enabled"):
            mem.review = True  # type: ignore[assignment,misc]
        with pytest.raises(TypeError, match="review.enabled"):
            bool(mem.review)
        with pytest.raises(AttributeError, match="group"):
            mem.facts = []  # type: ignore[assignment,misc]
        mem.review.enabled = True
        assert Memory(tmp_path / "home").review.enabled is True  # persisted in the journal
