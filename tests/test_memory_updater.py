"""The update rules, one test each, and property tests of diff application."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from deerflow_nb.memory.folding.extraction import validate_diff
from deerflow_nb.memory.store import empty_memory
from deerflow_nb.memory.updates.updater import apply_diff, sanitize_text
from deerflow_nb.similarity import signature


def is_near_duplicate(a: str, b: str) -> bool:
    """Whether ``apply_diff`` takes ``b`` for a restatement of ``a``: equal, non-empty
    signatures."""
    return bool(signature(a)) and signature(a) == signature(b)


def fact(fid: str, content: str, confidence: float = 0.9, created: str = "2025-01-01Z") -> dict:
    return {
        "id": fid,
        "content": content,
        "category": "context",
        "confidence": confidence,
        "createdAt": created,
        "source": "t0",
    }


def memory(*facts: dict) -> dict[str, Any]:
    return {**empty_memory(), "facts": list(facts)}


def new(content: str, confidence: float = 0.9, category: str = "context") -> dict:
    return {"content": content, "category": category, "confidence": confidence}


def run(data: dict, diff: dict, max_facts: int = 100, threshold: float = 0.7):
    return apply_diff(
        data, validate_diff(diff), source="t1", threshold=threshold, max_facts=max_facts
    )


def test_threshold_drops_facts_below_it() -> None:
    result = run(memory(), {"newFacts": [new("Might try Julia", 0.5), new("Knows SQL", 0.7)]})
    assert [f["content"] for f in result.data["facts"]] == ["Knows SQL"]


def test_exact_duplicate_after_case_and_whitespace_folding_reinforces() -> None:
    data = memory(fact("fact_00000001", "Works on project Apollo", 0.8))
    result = run(data, {"newFacts": [new("  works ON   project apollo. ", 0.75)]})
    (only,) = result.data["facts"]
    assert only["id"] == "fact_00000001" and only["confirmations"] == 2
    assert only["confidence"] == 0.82  # a small bump when the new one is not higher
    assert [e.kind for e in result.events] == ["reinforce"]


def test_near_duplicate_in_other_words_reinforces_instead_of_adding() -> None:
    data = memory(fact("fact_00000001", "Prefers polars over pandas", 0.85))
    result = run(data, {"newFacts": [new("The user prefers using polars instead of pandas", 0.95)]})
    (only,) = result.data["facts"]
    assert only["content"] == "Prefers polars over pandas" and only["confidence"] == 0.95
    assert result.ids("reinforce") == ["fact_00000001"] and not result.ids("add")


def test_facts_sharing_a_template_stay_distinct() -> None:
    data = memory(fact("fact_00000001", "Works on project Apollo"))
    result = run(
        data, {"newFacts": [new("Works on project Zephyr"), new("Prefers pandas over polars")]}
    )
    assert len(result.data["facts"]) == 3
    assert not is_near_duplicate("Prefers polars over pandas", "Prefers pandas over polars")
    assert not is_near_duplicate("No longer uses pandas", "Uses pandas")
    assert is_near_duplicate("Likes polars", "Prefers polars")


def test_duplicates_within_one_diff_are_added_once() -> None:
    result = run(memory(), {"newFacts": [new("Uses R"), new("uses r"), new("The user uses R")]})
    assert len(result.data["facts"]) == 1 and result.data["facts"][0]["confirmations"] == 3


def test_removals_touch_only_named_facts_and_unknown_ids_are_ignored() -> None:
    data = memory(fact("fact_00000001", "Uses pandas"), fact("fact_00000002", "Works at Acme"))
    result = run(data, {"factsToRemove": ["fact_00000001", "fact_ffffffff"]})
    assert [f["id"] for f in result.data["facts"]] == ["fact_00000002"]
    assert result.ignored_removals == ["fact_ffffffff"]
    assert [(e.kind, e.fact_id, e.old_content) for e in result.events] == [
        ("remove", "fact_00000001", "Uses pandas")
    ]


def test_eviction_drops_lowest_confidence_then_oldest() -> None:
    data = memory(
        fact("fact_00000001", "A old low", 0.75, "2025-01-01Z"),
        fact("fact_00000002", "B new low", 0.75, "2025-02-01Z"),
        fact("fact_00000003", "C high", 0.95),
    )
    result = run(data, {"newFacts": [new("D mid", 0.8)]}, max_facts=2)
    assert [f["content"] for f in result.data["facts"]] == ["C high", "D mid"]
    assert result.ids("evict") == ["fact_00000001", "fact_00000002"]


def test_sections_update_only_when_asked_and_non_empty() -> None:
    diff = {
        "user": {
            "workContext": {"summary": "Data scientist at Acme", "shouldUpdate": True},
            "topOfMind": {"summary": "ignored", "shouldUpdate": False},
        },
        "history": {"recentMonths": {"summary": "", "shouldUpdate": True}},
    }
    result = run(memory(), diff)
    assert result.data["user"]["workContext"]["summary"] == "Data scientist at Acme"
    assert result.data["user"]["workContext"]["updatedAt"].endswith("Z")
    assert result.data["user"]["topOfMind"]["summary"] == ""
    assert result.data["history"]["recentMonths"]["summary"] == ""
    assert [(e.kind, e.section) for e in result.events] == [("section", "user.workContext")]


def test_input_document_is_not_mutated() -> None:
    data = memory(fact("fact_00000001", "Uses pandas"))
    before = repr(data)
    run(data, {"newFacts": [new("Uses pandas")], "factsToRemove": ["fact_00000001"]})
    assert repr(data) == before


def test_a_change_copies_only_the_facts_it_changes_and_never_the_document_read() -> None:
    """The document a fold reads is shared with every reader: a reinforcement (twice in one
    diff), a project rename, a merge and an eviction change copies, and every fact the
    change leaves alone is the very object it read (which the version delta relies on)."""
    moved = {**fact("fact_00000003", "The target is churned"), "scope": "project"}
    data = memory(
        fact("fact_00000001", "Uses pandas daily", 0.8),
        fact("fact_00000002", "Likes dark plots", 0.9),
        {**moved, "project": "churn"},
        fact("fact_00000004", "Works with spark", 0.95),
        fact("fact_00000005", "Works with spark clusters", 0.95),
        fact("fact_00000006", "Reads papers on rust", 0.96),
    )
    before = repr(data)
    diff = {
        "newFacts": [new("Uses pandas daily", 0.7), new("uses pandas daily.", 0.7)],
        "renameProject": {"from": "churn", "to": "retention"},
        "merges": [{"from": ["fact_00000004", "fact_00000005"], "content": "Works with spark"}],
    }
    result = apply_diff(data, diff, source="t1", threshold=0.7, max_facts=3)
    assert repr(data) == before  # the document read is unchanged
    out = {f["id"]: f for f in result.data["facts"]}
    stored = {f["id"]: f for f in data["facts"]}
    assert out["fact_00000001"] is not stored["fact_00000001"]
    assert out["fact_00000001"]["confirmations"] == 3  # both restatements on one copy
    assert out["fact_00000003"]["project"] == "retention"
    assert out["fact_00000006"] is stored["fact_00000006"]  # untouched: the very object
    assert "fact_00000002" not in out  # evicted (the least confident left)


def test_sanitize_collapses_caps_and_neutralises_memory_tags() -> None:
    text = sanitize_text("  a\n\tb </memory> <MEMORY> < /memory> </ memory > " + "x" * 900)
    assert text.startswith("a b [/memory] [MEMORY] [/memory] [/memory] ") and len(text) == 500
    assert "<" not in text


# -- properties -------------------------------------------------------------------------
words = st.sampled_from(
    ["apollo", "zephyr", "polars", "pandas", "spark", "rust", "julia", "duckdb", "acme", "plots"]
)
contents = st.lists(words, min_size=1, max_size=4).map(lambda ws: "Works with " + " ".join(ws))
existing_facts = st.lists(st.tuples(contents, st.floats(0.0, 1.0)), max_size=12).map(
    lambda items: [fact(f"fact_{i:08x}", c, conf) for i, (c, conf) in enumerate(items)]
)
new_facts = st.lists(
    st.builds(new, contents, st.floats(0.0, 1.0), st.sampled_from(["goal", "context", "x"])),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(
    existing=existing_facts,
    added=new_facts,
    remove_mask=st.lists(st.booleans(), min_size=12, max_size=12),
    bogus=st.lists(st.sampled_from(["fact_zzzzzzzz", "f1", ""]), max_size=2),
    threshold=st.floats(0.0, 1.0),
    max_facts=st.integers(0, 15),
)
def test_diff_application_invariants(
    existing: list[dict],
    added: list[dict],
    remove_mask: list[bool],
    bogus: list[str],
    threshold: float,
    max_facts: int,
) -> None:
    named = [f["id"] for f, drop in zip(existing, remove_mask, strict=False) if drop]
    diff = {"newFacts": added, "factsToRemove": named + bogus}
    result = run(memory(*existing), diff, max_facts=max_facts, threshold=threshold)
    facts = result.data["facts"]
    ids = [f["id"] for f in facts]

    assert len(ids) == len(set(ids))  # no duplicate ids
    assert len(facts) <= max_facts  # the cap always holds
    old_ids = {f["id"] for f in existing}
    for f in facts:
        if f["id"] not in old_ids:  # every added fact passed the threshold
            assert f["confidence"] >= threshold
            assert f["category"] in {"goal", "context"}
        assert 0.0 <= f["confidence"] <= 1.0
    # Removals only touch named facts: anything else that disappeared was evicted.
    gone = old_ids - set(ids)
    evicted = set(result.ids("evict"))
    assert set(result.ids("remove")) == set(named)
    assert gone <= set(named) | evicted
    assert not set(named) & set(ids)
    # No two stored facts are exact duplicates of each other unless they already were.
    new_texts = [f["content"].casefold() for f in facts if f["id"] not in old_ids]
    assert len(new_texts) == len(set(new_texts))
    # ... nor near-duplicates: a restated fact reinforced the stored one instead.
    for f in facts:
        if f["id"] not in old_ids:
            others = [g for g in facts if g is not f]
            assert not any(is_near_duplicate(f["content"], g["content"]) for g in others)
    # Every event names a fact that existed before or exists now.
    for event in result.events:
        assert event.fact_id in old_ids | set(ids) | evicted


def test_a_removed_fact_leaves_the_summaries_that_restate_it() -> None:
    """Forgetting works through the profile too: the summaries are injected every turn."""
    data = memory(
        fact("fact_00000001", "Prefers polars over pandas"),
        fact("fact_00000002", "Works on project Apollo"),
    )
    data["user"]["personalContext"]["summary"] = (
        "Prefers polars over pandas. Works on project Apollo. Once preferred pandas over polars."
    )
    data["history"]["recentMonths"]["summary"] = "Likes polars more than pandas for dataframes."
    result = run(data, {"factsToRemove": ["fact_00000001"]})
    user = result.data["user"]["personalContext"]["summary"]
    assert user == "Works on project Apollo. Once preferred pandas over polars."
    assert result.data["history"]["recentMonths"]["summary"] == ""
    sections = [e.section for e in result.events if e.kind == "section"]
    assert sections == ["user.personalContext", "history.recentMonths"]


def test_a_summary_the_same_diff_rewrites_is_kept_as_given() -> None:
    data = memory(fact("fact_00000001", "Prefers polars over pandas"))
    data["user"]["personalContext"]["summary"] = "Prefers polars over pandas."
    update = {"summary": "Prefers polars over pandas, still.", "shouldUpdate": True}
    diff = {"user": {"personalContext": update}, "factsToRemove": ["fact_00000001"]}
    result = run(data, diff)
    assert result.data["user"]["personalContext"]["summary"] == update["summary"]


def test_only_an_import_keeps_a_new_facts_own_time_and_source() -> None:
    given = {**new("Knows Rust"), "createdAt": "2020-05-05T00:00:00Z", "source": "forged"}
    now = "2026-01-01T00:00:00Z"
    folded = apply_diff(
        memory(), {"newFacts": [given]}, source="t1", threshold=0.7, max_facts=100, now=now
    )
    (made,) = folded.data["facts"]
    assert (made["createdAt"], made["source"]) == (now, "t1")  # a model's claim is not kept
    imported = apply_diff(
        memory(), {"newFacts": [given]}, source="f.json", threshold=0.7, max_facts=100,
        now=now, imported=True,
    )  # fmt: skip
    (kept,) = imported.data["facts"]
    assert (kept["createdAt"], kept["source"]) == ("2020-05-05T00:00:00Z", "forged")
