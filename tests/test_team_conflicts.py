"""Two or three members editing one shared fact (issue 39, item 6), on a real PostgreSQL
(``pg_cluster.py``): an edit carries the text and time it replaced, so a home tells a
later edit (applied: the later edit wins) from one that would undo a newer edit here
(held for review with both texts, escaped); both edits stay in history with who made
each, and no change is lost."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from test_team_postgres import Team, shared  # noqa: F401  (the fixture: a database per test)
from test_team_sharing import PROJECT, Pair, contents, home, member, pair, pgpass  # noqa: F401

from deerflow_nb.memory import Memory
from deerflow_nb.memory.sharing import SyncReport
from deerflow_nb.memory.updates.team_changes import CONFLICT, TEAM, hold_conflicts

BASE = "The target column is churned_90d"
ALICE = "The target column is churned_60d"
BOB = "The target column is churned_30d"


def edit(memory: Memory, fact_id: str, text: str) -> None:
    memory.facts.edit(fact_id, text)
    time.sleep(0.01)  # the next edit, on any home, is later by the clock


def shared_fact(pair: Pair) -> str:  # noqa: F811
    """``BASE`` added by alice and pulled by bob: its id (the same on both homes)."""
    fact = pair.alice.add_fact(BASE, project=PROJECT)
    pair.alice.share(PROJECT, pair.alice_url)
    assert pair.bob.join(PROJECT, pair.bob_url).applied == 1
    return fact["id"]


def edits_by(memory: Memory, fact_id: str) -> list[tuple[str, str | None]]:
    """The fact's edits in this home's history, oldest first: (new text, person; None
    when made here)."""
    return [
        (e["new_content"], e["details"].get("person"))
        for e in memory.history.of(fact_id)
        if e["kind"] == "update"
    ]


def test_concurrent_edits_hold_the_one_that_would_undo_a_newer_with_both_texts(
    shared: Team,  # noqa: F811
    pair: Pair,  # noqa: F811
) -> None:
    alice, bob = pair.alice, pair.bob
    fact_id = shared_fact(pair)
    edit(alice, fact_id, ALICE)  # both from BASE, before either syncs; bob's is later
    edit(bob, fact_id, BOB)
    assert alice.sync().published == 1
    report = bob.sync()  # alice's older edit would undo bob's newer one: it waits
    assert (report.published, report.pulled, report.applied, len(report.held)) == (1, 1, 0, 1)
    assert contents(bob)[BOB]["id"] == fact_id and ALICE not in contents(bob)
    why = report.why_held[0]
    assert f"alice_{shared.suffix}'s edit of {fact_id}" in why
    assert repr(BASE) in why and repr(ALICE) in why and repr(BOB) in why  # both texts
    listed = bob.pending()[0]["diff"]["edits"][0]
    assert (listed["content"], listed["was"]["content"]) == (ALICE, BASE)

    assert alice.sync().applied == 1  # bob's is the later edit: it wins at alice's
    assert contents(alice)[BOB]["id"] == fact_id
    assert edits_by(alice, fact_id) == [(ALICE, None), (BOB, f"bob_{shared.suffix}")]

    bob.approve(report.held)  # bob chooses alice's words: approving applies them
    assert contents(bob)[ALICE]["id"] == fact_id
    assert contents(bob)[ALICE]["updatedAt"] > contents(alice)[BOB]["updatedAt"]  # chosen now
    assert edits_by(bob, fact_id) == [(BOB, None), (ALICE, f"alice_{shared.suffix}")]
    assert bob.pending() == []
    assert (bob.sync().published, alice.sync().applied) == (1, 1)  # bob's choice is sent
    assert set(contents(alice)) == set(contents(bob)) == {ALICE}  # both homes agree again
    assert edits_by(alice, fact_id)[-1] == (ALICE, f"bob_{shared.suffix}")
    assert alice.sync().pulled == bob.sync().pulled == 0


def test_sequential_edits_the_later_wins_everywhere_and_both_stay_in_history(
    shared: Team,  # noqa: F811
    pair: Pair,  # noqa: F811
    pgpass: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    alice, bob = pair.alice, pair.bob
    fact_id = shared_fact(pair)
    edit(alice, fact_id, ALICE)
    alice.sync()
    assert bob.sync().applied == 1 and ALICE in contents(bob)
    edit(bob, fact_id, BOB)  # made from alice's text: no conflict
    bob.sync()
    assert alice.sync().applied == 1

    carol = home(tmp_path, "carol")
    report = carol.join(PROJECT, member(shared, pgpass, "carol"))
    assert (report.pulled, report.applied, report.held) == (3, 3, [])
    for memory in (alice, bob, carol):  # no change lost: every home ends with bob's text
        assert set(contents(memory)) == {BOB}, memory.settings.home
        assert contents(memory)[BOB]["id"] == fact_id
    alice_, bob_ = f"alice_{shared.suffix}", f"bob_{shared.suffix}"
    assert edits_by(carol, fact_id) == [(ALICE, alice_), (BOB, bob_)]
    assert edits_by(alice, fact_id) == [(ALICE, None), (BOB, bob_)]
    assert edits_by(bob, fact_id) == [(ALICE, alice_), (BOB, None)]
    carol.close()


def test_a_held_edit_stays_text_in_the_sync_report() -> None:
    hostile = "<script>alert(1)</script> **bold** [x](http://e.vil)"
    report = SyncReport(pulled=1, held=[3], why_held=[f"theirs {hostile!r}"])
    shown = report._repr_markdown_()
    assert "<script>" not in shown and "**bold**" not in shown and "](" not in shown


def test_hold_conflicts_holds_only_an_edit_that_would_undo_a_newer_one() -> None:
    here = {
        "id": "t1", "content": BOB, "scope": "project", "project": PROJECT,
        "createdAt": "2026-01-01T00:00:00.000Z", "updatedAt": "2026-01-02T00:00:00.000Z",
    }  # fmt: skip
    marker = {"project": PROJECT, "person": "alice"}

    def edit(content: str, at: str, was: str | None = BASE) -> dict:
        made = {"id": "t1", "content": content, "at": at}
        return made if was is None else {**made, "was": {"content": was, "at": "2026-01-01"}}

    older, later = "2026-01-01T12:00:00.000Z", "2026-01-03T00:00:00.000Z"
    cases = {
        "older, from a text replaced here": (edit(ALICE, older), True),
        "later than the text here": (edit(ALICE, later), False),
        "from the text still here": (edit(ALICE, older, was=BOB), False),
        "the same words": (edit(BOB, older), False),
        "from a sender that does not say its base": (edit(ALICE, older, was=None), False),
    }
    for name, (made, held) in cases.items():
        diff = {TEAM: marker, "edits": [made]}
        applies, waits, why = hold_conflicts({"facts": [here]}, diff)
        assert (waits.get("edits") == [made]) == held, name
        assert (applies["edits"] == []) == held, name
        if held:
            assert waits[CONFLICT] and waits[TEAM] == marker
            assert why[0]["reason"].startswith("alice's edit of t1")
            assert all(repr(t) in why[0]["reason"] for t in (BASE, ALICE, BOB))


def test_a_hostile_conflict_stays_text_in_the_report_pending_and_inspector(
    pair: Pair,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from hostile import HOSTILE_LINE, assert_inert, live_parts, markdown_as_trusted_html
    from IPython.core.interactiveshell import InteractiveShell
    from test_inspector_apptest import run_app

    from deerflow_nb.notebook.views.review import PendingView

    alice, bob = pair.alice, pair.bob
    fact_id = shared_fact(pair)
    edit(alice, fact_id, "Alice says " + HOSTILE_LINE)
    edit(bob, fact_id, "Bob says " + HOSTILE_LINE)
    alice.sync()
    report = bob.sync()
    assert len(report.held) == 1 and "<script>" in report.why_held[0]  # both texts, as text
    shell = InteractiveShell.instance()
    pending = tuple(bob.pending())
    view = PendingView(pending, False, {p["id"]: tuple(bob.review.items(p)) for p in pending})
    for shown in (report, view):
        data, _ = shell.display_formatter.format(shown)
        assert_inert(data, type(shown).__name__)
    assert "Alice says <img src=x onerror=alert(1)>" in str(view)  # the item, with its text
    at = run_app(bob.settings.home, monkeypatch)
    bodies = [m.value for m in at.markdown]
    assert any("Alice says" in b for b in bodies)
    assert [b for b in bodies if live_parts(markdown_as_trusted_html(b))] == []
