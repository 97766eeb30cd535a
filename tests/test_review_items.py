"""Reviews a person can do (issue 30 item 4): a pending change read item by item with full
texts, and each item approved or rejected on its own, in ``Memory``, ``%memory`` and the
panel (the inspector's side is in test_inspector_apptest.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from rival import Rival
from test_widgets import dummy_comm  # noqa: F401 (autouse: widgets on a dummy comm)

from deerflow_nb.memory import Memory
from deerflow_nb.notebook.panel import MemoryPanel
from deerflow_nb.notebook.session import get_session
from deerflow_nb.storage.journal import Journal
from deerflow_nb.untrusted import escape_html

NAME = "Their name is Maya Chen"
# Longer than any column a listing used to cut at, with its last words telling.
LONG = (
    "Keeps every experiment's parameters, metrics and artifacts in a self-hosted MLflow "
    "server behind the lab VPN, and tags runs with the ticket number they belong to"
)
NOTEBOOK = "Prefers JupyterLab over VS Code notebooks"


def quiet(home: Path) -> Memory:
    from deerflow_nb.config import load_settings

    settings = load_settings(home)
    settings.memory.enabled = False  # no worker: nothing folds behind the test's back
    return Memory(home, settings=settings)


def seeded_change(mem: Memory) -> tuple[int, dict[str, str]]:
    """Three stored facts and one held change that adds one, removes two and rewrites a
    section; the change's id and the stored ids by name."""
    ids = {
        "name": mem.add_fact(NAME)["id"],
        "long": mem.add_fact(LONG, category="behavior")["id"],
        "notebook": mem.add_fact(NOTEBOOK, category="preference")["id"],
    }
    mem.review.enabled = True
    change = mem.apply(
        {
            "newFacts": [{"content": "Uses DuckDB for SQL", "category": "knowledge",
                          "confidence": 0.9}],
            "factsToRemove": [ids["name"], ids["long"]],
            "user": {"workContext": {"summary": "Data scientist at Acme", "shouldUpdate": True}},
        },
        source="thread-notes",
    ).pending_id  # fmt: skip
    assert change is not None
    return change, ids


def statuses(home: Path) -> list[tuple[str, dict]]:
    journal = Journal(home / "journal.db")
    try:
        rows = journal.db.execute("SELECT status, diff FROM pending_changes ORDER BY id")
        return [(status, json.loads(diff)) for status, diff in rows.fetchall()]
    finally:
        journal.close()


def test_items_read_every_fact_with_its_full_text(home: Path) -> None:
    with quiet(home) as mem:
        change, ids = seeded_change(mem)
        (pending,) = mem.pending()
        lines = [item.line() for item in mem.review.items(pending)]
    assert lines == [
        "1. + Uses DuckDB for SQL (knowledge, 0.90)",
        f"2. - {ids['name']}: {NAME}",
        f"3. - {ids['long']}: {LONG}",
        "4. § Work context: Data scientist at Acme",
    ]


def test_each_item_is_approved_or_rejected_on_its_own(home: Path) -> None:
    with quiet(home) as mem:
        change, ids = seeded_change(mem)
        # Keep the user's name: approve only the other removal.
        assert mem.review.approve_items(change, [3]) == 1
        contents = {f["content"] for f in mem.data["facts"]}
        assert LONG not in contents and NAME in contents
        (rest,) = mem.pending()
        assert rest["id"] == change  # the rest waits under the same id, same numbers
        assert [i.number for i in mem.review.items(rest)] == [1, 2, 4]
        assert mem.review.reject_items(change, [2]) == 1
        assert NAME in {f["content"] for f in mem.data["facts"]}
        with pytest.raises(ValueError, match=r"change \d+ has no item 3; its items: 1, 4"):
            mem.review.approve_items(change, [3])  # decided already: named, not re-applied
        assert mem.review.approve_items(change, [1, 4]) == 2  # all that is left: the whole change
        assert mem.pending() == []
        assert "Uses DuckDB for SQL" in {f["content"] for f in mem.data["facts"]}
        assert mem.data["user"]["workContext"]["summary"] == "Data scientist at Acme"
    # Every decision is journaled: each part as its own decided change naming the original.
    rows = statuses(home)
    assert [s for s, _ in rows] == ["approved", "approved", "rejected"]
    original, first, second = (d for _, d in rows)
    assert first["factsToRemove"] == [ids["long"]] and first["partOf"] == change
    assert second["factsToRemove"] == [ids["name"]] and second["partOf"] == change
    assert original["itemNumbers"] == [1, 4]


def test_numbers_survive_another_kernels_decision_and_a_race_is_left_alone(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with quiet(home) as mem, quiet(home) as other:
        change, ids = seeded_change(mem)
        seen = mem.pending()  # what this kernel listed
        assert other.review.reject_items(change, [1]) == 1  # another kernel decides item 1
        assert mem.review.approve_items(change, [2]) == 1  # number 2 still names the name fact
        assert NAME not in {f["content"] for f in mem.data["facts"]}
        # A decision racing another (the change narrowed between reading and the lock)
        # is left alone, not applied to a diff the user did not see.
        monkeypatch.setattr(mem.review._review, "pending", lambda: seen)
        assert mem.review.approve_items(change, [3]) == 0
        assert LONG in {f["content"] for f in mem.data["facts"]}
        assert mem.review.approve_items(change + 1, [1]) == 0  # no such pending change


def test_an_item_approval_loses_to_another_kernels_rejection_made_meanwhile(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with quiet(home) as mem:
        change, _ = seeded_change(mem)
        # This kernel has read the change and waits for memory.json's lock to approve item
        # 1; meanwhile another kernel (a real process) rejects the whole change.
        rival = Rival(home, f"print(m.review.reject([{change}]))")
        rival.before(monkeypatch, mem.store, "locked")
        assert mem.review.approve_items(change, [1]) == 0
        assert rival.said == ["1"]
        assert "Uses DuckDB for SQL" not in {f["content"] for f in mem.data["facts"]}
    assert [status for status, _ in statuses(home)] == ["rejected"]  # no approved part


def test_two_kernels_approving_items_of_one_change_at_once_lose_neither_decision(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with quiet(home) as mem:
        change, ids = seeded_change(mem)
        # Another kernel approves item 3 while this one waits for the lock to approve 1.
        rival = Rival(home, f"print(m.review.approve_items({change}, [3]))")
        rival.before(monkeypatch, mem.store, "locked")
        assert mem.review.approve_items(change, [1]) == 0  # read before item 3 went
        assert rival.said == ["1"]
        (rest,) = mem.pending()  # item 3, decided, is not pending again
        assert [i.number for i in mem.review.items(rest)] == [1, 2, 4]
        assert mem.review.approve_items(change, [1]) == 1  # asked again, on what is there
        contents = {f["content"] for f in mem.data["facts"]}
        assert LONG not in contents and "Uses DuckDB for SQL" in contents
    assert [status for status, _ in statuses(home)] == ["pending", "approved", "approved"]
    assert statuses(home)[0][1]["itemNumbers"] == [2, 4]


def test_a_whole_approval_loses_to_an_item_rejection_made_meanwhile(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with quiet(home) as mem:
        change, _ = seeded_change(mem)
        # This kernel approves the change as it listed it; another kernel rejects item 1
        # (the added fact) while this one waits for memory.json's lock.
        rival = Rival(home, f"print(m.review.reject_items({change}, [1]))")
        rival.before(monkeypatch, mem.store, "locked")
        assert mem.review.approve([change]) == 0  # what it read is no longer what waits
        assert rival.said == ["1"]
        assert "Uses DuckDB for SQL" not in {f["content"] for f in mem.data["facts"]}
        (rest,) = mem.pending()
        assert [i.number for i in mem.review.items(rest)] == [2, 3, 4]


# -- %memory ------------------------------------------------------------------------------------
def magic_error(shell: InteractiveShell, line: str) -> str:
    """The one line IPython shows for ``%memory line``'s UsageError."""
    with capture_output() as cap:
        result = shell.run_cell(f"%memory {line}")
    assert isinstance(result.error_in_exec, UsageError), (line, result.error_in_exec)
    (shown,) = [ln for ln in cap.stderr.splitlines() if ln.strip()]
    return shown


def test_memory_pending_lists_items_in_full_and_decides_some(
    shell: InteractiveShell, home: Path
) -> None:
    mem = get_session(shell).memory
    change, ids = seeded_change(mem)
    view = shell.run_line_magic("memory", "pending")
    for reading in (str(view), view._repr_markdown_(), view._repr_html_()):
        assert "tags runs with the ticket number they belong to" in reading  # not cut
        assert "…" not in reading
        assert NAME in reading  # a removal names the fact, not only its id
    assert f"{change}  " in str(view) and "--only 1,3" in str(view)
    text = str(view)
    assert f"2     - {ids['name']}: {NAME}" in text

    done = shell.run_line_magic("memory", f"approve {change} --only 3")
    assert str(done).startswith(f"Approved 1 item of change {change}; 3 items of it still")
    assert f"2. - {ids['name']}: {NAME}" in str(done)  # what still waits, with its numbers
    assert LONG not in {f["content"] for f in mem.data["facts"]}
    done = shell.run_line_magic("memory", f"reject {change} --only 1-2")
    assert (
        str(done).splitlines()[0]
        == f"Rejected 2 items of change {change}; 1 item of it still waiting"
    )
    assert NAME in {f["content"] for f in mem.data["facts"]}
    assert [i.number for i in mem.review.items(mem.pending()[0])] == [4]

    assert magic_error(shell, f"approve {change} --only 2") == (
        f"UsageError: change {change} has no item 2; its items: 4 (see %memory pending)"
    )
    assert "give one ID, e.g. %memory approve 3 --only 1,2" in magic_error(
        shell, "approve --all --only 1"
    )
    assert "must be item numbers such as 2, 1,3 or 2-5" in magic_error(
        shell, f"reject {change} --only 3-1"
    )
    assert "no pending change 99" in magic_error(shell, "approve 99 --only 1")
    assert mem.pending()[0]["id"] == change  # no error wrote anything


# -- the panel ----------------------------------------------------------------------------------
def test_the_panel_lists_items_in_full_each_with_its_own_buttons(home: Path) -> None:
    with quiet(home) as mem:
        change, ids = seeded_change(mem)
        panel = MemoryPanel(mem)
        try:
            shown = [row.children[-1].value for row in panel.pending_rows.children]
            assert shown[0] == f"<b>#{change}</b> from thread-notes"
            assert shown[1:] == [
                "1. + Uses DuckDB for SQL (knowledge, 0.90)",
                f"2. - {ids['name']}: {NAME}",
                f"3. - {ids['long']}: {escape_html(LONG)}",  # in full, escaped
                "4. § Work context: Data scientist at Acme",
            ]
            for button in panel.item_buttons[(change, 3)]:  # never squeezed to "Ap…"
                assert button.layout.flex == "0 0 auto" and button.layout.min_width == "80px"
            assert panel.pending_rows.children[3].children[-1].layout.min_width == "0"
            approve, _ = panel.item_buttons[(change, 3)]
            approve.click()
            assert LONG not in {f["content"] for f in mem.data["facts"]}
            assert panel.message.value == f"Approved item 3 of change #{change}"
            assert sorted(panel.item_buttons) == [(change, 1), (change, 2), (change, 4)]
            _, reject = panel.item_buttons[(change, 2)]
            reject.click()
            assert NAME in {f["content"] for f in mem.data["facts"]}
            assert panel.message.value == f"Rejected item 2 of change #{change}"
            assert [n for _, n in panel.item_buttons] == [1, 4]
            assert panel.tabs.titles[3] == "Pending (1)"
            # Another kernel decides the rest meanwhile: the stale button says so.
            with quiet(home) as other:
                assert other.review.reject([change]) == 1
            panel.item_buttons[(change, 1)][0].click()
            assert "change #" + str(change) + " was decided meanwhile" in panel.message.value
            assert "Uses DuckDB for SQL" not in {f["content"] for f in mem.data["facts"]}
        finally:
            panel.close()


def test_stale_and_consolidation_proposals_show_facts_in_full() -> None:
    from deerflow_nb.notebook.views.review import ConsolidationView, StaleView

    stale = StaleView(({"id": "f1", "category": "behavior", "content": LONG},), pending_id=4)
    merge = ConsolidationView(
        ({"from": ["f1", "f2"], "content": LONG + " (merged)"},),
        pending_id=5,
        facts=({"id": "f1", "content": LONG}, {"id": "f2", "content": NOTEBOOK}),
    )
    for view in (stale, merge):
        for reading in (str(view), view._repr_markdown_(), view._repr_html_()):
            assert "belong to" in reading and "…" not in reading
    assert f"f2 ({NOTEBOOK})" in str(merge)


def test_a_change_approved_in_part_reads_partly_approved_in_history(home: Path) -> None:
    """Issue 37: some items approved one by one and the rest rejected is not "rejected"."""
    with quiet(home) as mem:
        change, ids = seeded_change(mem)
        mem.review.approve_items(change, [1, 3])
        assert "Uses DuckDB for SQL" in {f["content"] for f in mem.data["facts"]}
        mem.review.reject_items(change, [2, 4])
        assert mem.history.folds(1)[0]["outcome"] == "held for review, then partly approved"
        other, _ = seeded_change(mem)
        mem.review.reject_items(other, [1, 2, 3, 4])
        assert mem.history.folds(1)[0]["outcome"] == "held for review, then rejected"
