"""A sync applies the change sets it pulls for a project as ONE gate commit (issue 39's
speed): one version and one memory.json write, every change set recorded applied in that
commit's transaction, each still checked by the gate on its own (one the wipe guard holds
waits alone), and a failure mid-batch leaves none of them applied nor recorded.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from test_team_postgres import shared  # noqa: F401  (the fixture: a database per test)
from test_team_sharing import PROJECT, Pair, contents, pair, pgpass  # noqa: F401

from deerflow_nb.memory import Memory
from deerflow_nb.memory.updates.team_changes import TeamIndex, apply_team
from deerflow_nb.storage import outbox as outbox_rows

TEXTS = [f"Table number {i} holds the weekly churn labels of region {i}" for i in range(5)]


def count(memory: Memory, table: str) -> int:
    return int(memory.journal.db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])  # noqa: S608


def applied_ids(memory: Memory) -> set[str]:
    """The teammates' change sets recorded applied (a version from the server)."""
    sql = "SELECT id FROM shared_applied WHERE version IS NOT NULL"
    return {row[0] for row in memory.journal.db.execute(sql)}


def joined(two: Pair) -> tuple[Memory, Memory]:
    """alice shares the project with no facts yet, bob joins it."""
    two.alice.share(PROJECT, two.alice_url)
    two.bob.join(PROJECT, two.bob_url)
    return two.alice, two.bob


def test_a_sync_pulling_n_change_sets_commits_memory_once(pair: Pair) -> None:  # noqa: F811
    alice, bob = joined(pair)
    for text in TEXTS:
        alice.add_fact(text, project=PROJECT)
    assert alice.sync().published == len(TEXTS)
    versions, changes = count(bob, "memory_versions"), count(bob, "memory_changes")
    writes: list[Any] = []
    install = bob.store.install
    bob.store.install = lambda tmp: (writes.append(tmp), install(tmp))[1]  # type: ignore[method-assign]

    report = bob.sync()

    assert (report.pulled, report.applied, report.held) == (len(TEXTS), len(TEXTS), [])
    assert count(bob, "memory_versions") == versions + 1 and len(writes) == 1
    assert count(bob, "memory_changes") == changes + len(TEXTS)  # each journaled as its own
    assert len(applied_ids(bob)) == len(TEXTS)
    got = contents(bob)
    assert sorted(got) == sorted(TEXTS)
    assert {(f["addedBy"], f["person"]) for f in got.values()} == {
        ("user", alice.team.projects()[PROJECT]["role"])
    }  # provenance per fact
    assert bob.sync().pulled == 0  # applied once


def test_a_change_set_the_wipe_guard_holds_waits_alone_in_the_batch(pair: Pair) -> None:  # noqa: F811
    alice, bob = joined(pair)
    facts = [alice.add_fact(text, project=PROJECT) for text in TEXTS]
    alice.add_fact("The raw events live in the lake", project=PROJECT)
    alice.sync()
    bob.sync()
    alice.facts.forget_many([f["id"] for f in facts[:4]])  # 4 of 6: the guard holds it
    alice.add_fact("The model retrains every Monday", project=PROJECT)
    alice.sync()
    versions = count(bob, "memory_versions")

    report = bob.sync()

    assert (report.pulled, report.applied, len(report.held)) == (2, 1, 1)
    assert report.why_held[0].startswith("it would remove or evict 4 of 6 facts")
    assert count(bob, "memory_versions") == versions + 1
    assert len(contents(bob)) == 7 and len(applied_ids(bob)) == 8
    bob.approve(report.held)
    assert len(contents(bob)) == 3 and bob.sync().pulled == 0


def test_a_failure_mid_batch_applies_and_records_none_of_it(
    pair: Pair,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    alice, bob = joined(pair)
    for text in TEXTS:
        alice.add_fact(text, project=PROJECT)
    alice.sync()
    versions, before = count(bob, "memory_versions"), applied_ids(bob)
    record = outbox_rows.record_applied_all

    def crash_at_the_third(db: Any, project: str, applied: Any) -> None:
        record(db, project, list(applied)[:2])  # two recorded, then the process dies
        raise RuntimeError("killed mid-batch")

    monkeypatch.setattr(outbox_rows, "record_applied_all", crash_at_the_third)
    with pytest.raises(RuntimeError, match="killed mid-batch"):
        bob.sync()
    assert (contents(bob), applied_ids(bob)) == ({}, before)  # records and facts agree
    assert count(bob, "memory_versions") == versions
    assert not [f for f in bob.store.read()["facts"] if f.get("project")]  # nor on disk

    monkeypatch.setattr(outbox_rows, "record_applied_all", record)
    report = bob.sync()
    assert (report.pulled, report.applied) == (len(TEXTS), len(TEXTS))
    assert sorted(contents(bob)) == sorted(TEXTS) and len(applied_ids(bob)) == len(TEXTS)


def test_a_teammates_change_leaves_the_memory_it_was_applied_to_as_it_was() -> None:
    """``apply_team`` copies only what it changes (a batch applies many in a row): the
    memory before the change, a step of the same commit, stays as it was."""
    facts = [
        {"id": f"t{i}", "content": text, "category": "context", "confidence": 0.9,
         "scope": "project", "project": PROJECT}
        for i, text in enumerate(TEXTS)
    ]  # fmt: skip
    data = {"facts": facts, "projects": {PROJECT: {"summary": "Churn"}}}
    before = copy.deepcopy(data)
    diff = {
        "team": {"project": PROJECT, "person": "alice"},
        "factsToRemove": ["t0"],
        "edits": [{"id": "t1", "content": "Table one moved to the lake", "confidence": 0.5}],
        "newFacts": [{"id": "t9", "content": "The model retrains every Monday"}],
        "projectContext": {"summary": "Churn, weekly", "shouldUpdate": True},
    }
    result = apply_team(data, diff)
    assert data == before
    assert [e.kind for e in result.events] == ["remove", "update", "add", "section"]
    got = {f["id"]: f for f in result.data["facts"]}
    assert (got["t1"]["content"], got["t9"]["person"]) == ("Table one moved to the lake", "alice")


def test_a_batch_sharing_one_index_ends_as_change_sets_applied_one_by_one() -> None:
    """``TeamIndex`` (one pass over memory per commit) changes nothing a fresh pass per
    change set would decide: a fact sent again, a text said twice, a removal, a re-add
    and a step that returned the memory unchanged."""
    mine = {"id": "t0", "content": "Prefers polars", "category": "preference", "confidence": 0.9}
    diffs: list[dict[str, Any]] = [
        {"newFacts": [{"id": "t0", "content": TEXTS[0]}, {"id": "t1", "content": TEXTS[1]}]},
        {"newFacts": [{"id": "t1", "content": TEXTS[1]}]},  # sent again
        {"newFacts": [{"id": "t2", "content": TEXTS[1]}]},  # the same text, another id
        {"factsToRemove": ["t1"]},
        {"newFacts": [{"id": "t1", "content": TEXTS[1]}, {"id": "t3", "content": TEXTS[3]}]},
        {"newFacts": [{"id": "t4", "content": TEXTS[4]}]},
    ]
    start = {"facts": [mine]}

    def run(index: TeamIndex | None) -> list[dict[str, Any]]:
        data = start
        for diff in diffs:
            marked = {**diff, "team": {"project": PROJECT, "person": "alice"}}
            data = apply_team(data, marked, index).data
        local = {"createdAt", "id"}  # a clash's new local id is random: its sharedId stays
        return [
            {k: v for k, v in f.items() if k not in local or "sharedId" not in f and k == "id"}
            for f in data["facts"]
        ]

    assert run(TeamIndex()) == run(None)
    got = run(TeamIndex())
    assert [f["content"] for f in got].count(TEXTS[1]) == 1 and len(got) == 5
    assert [f.get("id") for f in got][0] == "t0" and any(f.get("sharedId") == "t0" for f in got)


def test_teammates_facts_past_max_facts_are_left_out_as_a_folds_would(pair: Pair) -> None:  # noqa: F811
    alice, bob = joined(pair)
    for text in TEXTS:
        alice.add_fact(text, project=PROJECT)
    alice.sync()
    bob.settings.memory.max_facts = 3  # read at each commit

    report = bob.sync()

    assert report.pulled == len(TEXTS) and len(applied_ids(bob)) == len(TEXTS)
    assert len(bob.data["facts"]) == 3  # within the limit: the newest left out, as a fold's
    assert [event["kind"] for event in bob.events(limit=50)] == ["add"] * 3
