"""Issue 28, item 6: the facts of a project nobody opened for ``memory.staleness_days`` are
proposed for review together, one pending change per project, never with the user's own
facts; an active project's facts follow the per-fact staleness of issue 20."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from rival import Rival

from deerflow_nb import Memory
from deerflow_nb.notebook.views.review import StaleView

NOW = datetime.now(UTC)


def ago(days: float) -> str:
    return (NOW - timedelta(days=days)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def fact(fid: str, content: str, days: float, project: str | None = None, **kw: Any):
    scope = {"scope": "project", "project": project} if project else {}
    return {
        "id": fid,
        "content": content,
        "category": kw.get("category", "context"),
        "confidence": 0.9,
        "createdAt": ago(days),
        "source": "t",
        **scope,
    }


FACTS = [
    fact("u_old", "Prefers tabs over spaces", 400),  # the user's: stale by itself
    fact("u_new", "Prefers dark mode", 20),
    fact("c_data", "Training data is churn.parquet", 300, "churn"),
    fact("c_target", "churned is 1 for customers lost within 90 days", 250, "churn"),
    # A correction ages twice as slow: by itself not stale yet, but its project is unused.
    fact("c_cv", "Uses 5-fold CV, not 10-fold", 250, "churn", category="correction"),
    fact("f_old", "Fraud labels come from chargebacks", 300, "fraud"),  # active project
    fact("f_fix", "Amounts are in cents, not dollars", 300, "fraud", category="correction"),
]


def write_seed(home: Path) -> Path:
    path = home.parent / "seed.json"
    doc = {"version": "1.0", "lastUpdated": "", "user": {}, "history": {}, "facts": FACTS}
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def backdate_threads(mem: Memory) -> None:
    """A churn thread last used 200 days ago, a fraud thread 5 days ago."""
    for thread, project, days in (("t-churn", "churn", 200), ("t-fraud", "fraud", 5)):
        mem.journal.ensure_thread(thread, project=project)
        with mem.journal.transaction() as db:
            db.execute("UPDATE threads SET updated_at = ? WHERE id = ?", [ago(days), thread])


def seeded(home: Path) -> Memory:
    mem = Memory()
    mem.import_(write_seed(home))
    backdate_threads(mem)
    return mem


def ids(mem: Memory) -> set[str]:
    return {f["id"] for f in mem.data["facts"]}


def test_an_unused_project_is_proposed_whole_apart_from_the_users_facts(home: Path) -> None:
    mem = seeded(home)
    report = mem.propose_stale()
    # The user's stale fact and the active project's stale fact: one change, as before.
    loose = next(c for c in mem.pending() if c["id"] == report.pending_id)
    assert loose["diff"]["factsToRemove"] == ["u_old", "f_old"]
    (churn,) = report.projects
    assert churn["project"] == "churn" and churn["facts"] == 3
    assert churn["last_used"][:10] == ago(200)[:10]  # the thread's last turn
    change = next(c for c in mem.pending() if c["id"] == churn["pending_id"])
    assert change["diff"]["factsToRemove"] == ["c_data", "c_target", "c_cv"]
    for item in mem.review.items(change):
        assert f"project churn unused for 200 days, last used {ago(200)[:10]}" in item.detail
    assert ids(mem) == {f["id"] for f in FACTS}  # proposed, nothing removed
    # Proposed once: asked again, nothing new waits.
    again = mem.propose_stale()
    assert again.projects == [] and again.pending_id is None
    assert again.already_projects == ["churn"] and len(mem.pending()) == 2
    assert mem.approve([churn["pending_id"]]) == 1
    assert ids(mem) == {"u_old", "u_new", "f_old", "f_fix"}
    mem.close()


def test_item_by_item_and_a_turn_in_the_project_keeps_it(home: Path) -> None:
    mem = seeded(home)
    (churn,) = mem.propose_stale().projects
    assert mem.review.approve_items(churn["pending_id"], [1]) == 1
    assert "c_data" not in ids(mem)
    # What is left still names the project: not proposed a second time.
    assert mem.propose_stale().projects == []
    mem.review.reject([churn["pending_id"]])
    mem.journal.ensure_thread("t-churn", project="churn")  # a turn in it today
    assert all(s.get("project") is None for s in mem.stale())
    assert mem.propose_stale().projects == []
    assert {"c_target", "c_cv"} <= ids(mem)
    mem.close()


def test_staleness_days_sets_when_a_project_counts_as_unused(home: Path) -> None:
    (home / "config.yaml").write_text("memory:\n  staleness_days: 365\n", encoding="utf-8")
    mem = seeded(home)
    assert [s["id"] for s in mem.stale()] == ["u_old"]
    assert {s["project"] for s in mem.stale(days=100) if s.get("project")} == {"churn"}
    mem.close()


def test_memory_stale_magic_names_the_project_and_its_change(
    shell: InteractiveShell, home: Path
) -> None:
    from deerflow_nb.notebook.session import get_session

    shell.run_line_magic("memory", f"import {write_seed(home)} --yes")
    backdate_threads(get_session(shell).memory)
    listed = shell.run_line_magic("memory", "stale --dry-run")
    assert isinstance(listed, StaleView) and "project churn" in str(listed)
    view = shell.run_line_magic("memory", "stale")
    (churn,) = view.projects
    change = churn["pending_id"]
    text = str(view)
    assert f"Project churn (last used {ago(200)[:10]}): its 3 facts" in text
    assert f"pending change #{change}" in text and f"%memory approve {change}" in text
    shell.run_line_magic("memory", f"approve {change} --only 2")
    facts = {f["id"] for f in get_session(shell).memory.data["facts"]}
    assert "c_target" not in facts and {"c_data", "c_cv", "u_old"} <= facts


def test_a_project_another_kernel_proposes_meanwhile_is_not_proposed_twice(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pending stale proposals were read before each proposal was journaled: two
    kernels proposing at once each proposed the unused project (and the user's stale
    facts), two pending changes removing the same facts."""
    mem = seeded(home)
    rival = Rival(home, "r = m.propose_stale()\nprint(r.pending_id, len(r.projects))")
    rival.before(monkeypatch, mem.journal, "transaction")  # as this kernel goes to propose
    report = mem.propose_stale()
    assert rival.said is not None and rival.said[0].endswith(" 1")
    assert (report.pending_id, report.projects, report.proposed) == (None, [], [])
    assert report.already_pending == ["c_cv", "c_data", "c_target", "f_old", "u_old"]
    assert report.already_projects == ["churn"]
    assert len(mem.pending()) == 2
