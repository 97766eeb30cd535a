"""The inspector under Streamlit's AppTest, against real homes.

Every page is checked on a home seeded through the real ``Memory`` API and ``Journal``
(``inspector_seed``); writes are checked on the files afterwards; the empty, missing and
corrupted homes are checked for a friendly message and no traceback.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from inspector_seed import (
    ALPHA_FACT,
    BETA_FACT,
    CHURN,
    MATPLOTLIB,
    POLARS,
    RUST,
    SHARED_FACT,
    quiet_memory,
    seed_home,
    seed_projects,
)
from journal_rows import memory_json
from streamlit.testing.v1 import AppTest

from deerflow_nb.inspector.tabs.frame import TAB_KEY, TABS
from deerflow_nb.storage.journal import Journal

APP = Path(__file__).resolve().parents[1] / "inspector_app.py"


def run_app(home: Path, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    monkeypatch.setenv("DEERFLOW_NB_HOME", str(home))
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


_ESCAPED = re.compile(r"\\([!-/:-@\[-`{-~])")


def shown(markdown: str) -> str:
    """Markdown source as read: backslash escapes of punctuation (how untrusted text is
    written into Markdown) removed."""
    return _ESCAPED.sub(r"\1", markdown)


def texts(at: AppTest) -> str:
    """Everything textual on the page, to search in (escapes removed)."""
    parts = [m.value for m in at.markdown]
    parts += [e.value for kind in (at.info, at.warning, at.error, at.success) for e in kind]
    parts += [c.value for c in at.caption]
    parts += [e.label for e in at.expander]
    return shown("\n".join(parts))


def table(at: AppTest, *columns: str, within=None):
    """The first table on the page (or in ``within``) that has all of ``columns``."""
    for df in (within or at).dataframe:
        if set(columns) <= set(df.value.columns):
            return df.value
    raise AssertionError(f"no table with columns {columns}")


def facts_table(at: AppTest):
    return table(at, "content", "createdAt", "updatedAt", "source")


@pytest.fixture
def seeded(home: Path) -> dict:
    return seed_home(home)


# -- Facts --------------------------------------------------------------------------------------
def test_facts_page_lists_filters_and_sorts(home, seeded, monkeypatch):
    at = run_app(home, monkeypatch)
    assert [t.label for t in at.tabs] == [
        "Facts",
        "Pending changes",
        "Confidence history",
        "Injection preview",
        "Threads",
        "Versions",
        "Status",
    ]
    table = facts_table(at)
    assert list(table["content"]) == [CHURN, POLARS, RUST]  # confidence, high first
    assert MATPLOTLIB not in set(table["content"])  # forgotten
    assert "3 of 3 facts" in texts(at)
    assert "Data scientist at a telecom company" in texts(at)

    at.multiselect(key="facts_categories").select("preference").run()
    assert list(facts_table(at)["content"]) == [POLARS]
    at.multiselect(key="facts_categories").set_value([]).run()

    at.slider(key="facts_confidence").set_range(0.7, 0.9).run()
    assert list(facts_table(at)["content"]) == [RUST]
    at.slider(key="facts_confidence").set_range(0.0, 1.0).run()

    at.text_input(key="facts_text").input("POLARS").run()
    assert list(facts_table(at)["content"]) == [POLARS]
    at.text_input(key="facts_text").input("no such words").run()
    assert "No fact matches these filters." in texts(at)
    at.text_input(key="facts_text").input("").run()

    at.selectbox(key="facts_sort").select("content").run()
    assert list(facts_table(at)["content"]) == sorted([CHURN, POLARS, RUST])
    assert not at.exception


def test_edit_fact_asks_then_writes_through_memory(home, seeded, monkeypatch):
    fid = seeded["polars"]
    at = run_app(home, monkeypatch)
    at.selectbox(key="facts_pick").select(fid).run()
    at.text_area(key=f"edit_content_{fid}").input("Prefers polars, never pandas").run()
    at.selectbox(key=f"edit_cat_{fid}").select("behavior").run()
    at.button(key="facts_save").click().run()

    assert any(f"fact `{fid}`" in w.value for w in at.warning)  # the confirmation
    before = memory_json(home)
    assert next(f for f in before["facts"] if f["id"] == fid)["content"] == POLARS

    at.button(key="confirm_yes").click().run()
    assert not at.exception
    assert any(f"Saved fact `{fid}`" in s.value for s in at.success)
    fact = next(f for f in memory_json(home)["facts"] if f["id"] == fid)
    assert fact["content"] == "Prefers polars, never pandas"
    assert fact["category"] == "behavior"
    assert "Prefers polars, never pandas" in set(facts_table(at)["content"])

    journal = Journal(home / "journal.db")
    event = journal.db.execute(
        "SELECT kind, old_content, new_content FROM memory_events ORDER BY id DESC LIMIT 1"
    ).fetchone()
    version = journal.db.execute(
        "SELECT reason FROM memory_versions ORDER BY id DESC LIMIT 1"
    ).fetchone()
    journal.close()
    assert event == ("update", POLARS, "Prefers polars, never pandas")
    assert version == ("edit",)


def test_forget_cancel_keeps_then_confirm_removes(home, seeded, monkeypatch):
    fid = seeded["rust"]
    at = run_app(home, monkeypatch)
    at.selectbox(key="facts_pick").select(fid).run()
    at.button(key="facts_forget").click().run()
    assert any("Forget fact" in w.value and RUST in w.value for w in at.warning)
    at.button(key="confirm_no").click().run()
    assert not any("Forget fact" in w.value for w in at.warning)
    assert any(f["id"] == fid for f in memory_json(home)["facts"])

    at.selectbox(key="facts_pick").select(fid).run()
    at.button(key="facts_forget").click().run()
    at.button(key="confirm_yes").click().run()
    assert not at.exception
    assert all(f["id"] != fid for f in memory_json(home)["facts"])
    assert RUST not in set(facts_table(at)["content"])
    journal = Journal(home / "journal.db")
    kinds = [r["kind"] for r in journal.db["memory_events"].rows_where("fact_id = ?", [fid])]
    journal.close()
    assert kinds == ["add", "remove"]


# -- Confidence history ---------------------------------------------------------------------------
def test_history_charts_mark_additions_changes_and_removals(home, seeded, monkeypatch):
    at = run_app(home, monkeypatch)
    charts = at.get("vega_lite_chart")
    assert len(charts) == 2  # confidence over time, memory size over time
    spec = json.loads(charts[0].proto.spec)
    layers = json.dumps(spec)
    assert '"shape"' in layers and "triangle-up" in layers and "cross" in layers
    assert "4 added (triangles) · 2 changed (circles) · 1 removed (crosses)" in texts(at)
    assert "Event log (8)" in texts(at)

    at.multiselect(key="history_facts").select(f"{seeded['matplotlib']}: {MATPLOTLIB}").run()
    assert "1 added (triangles) · 0 changed (circles) · 1 removed (crosses)" in texts(at)


# -- Injection preview ----------------------------------------------------------------------------
def test_injection_preview_shows_the_exact_block_and_why(home, seeded, monkeypatch):
    from deerflow_nb.memory.retrieval.injection import format_memory_for_injection
    from deerflow_nb.tokens import count_tokens

    at = run_app(home, monkeypatch)
    at.text_area(key="inject_context").input("which dataframe library, polars?").run()
    at.slider(key="inject_budget").set_value(400).run()
    assert not at.exception
    data = memory_json(home)
    expected = format_memory_for_injection(data, 400, "which dataframe library, polars?")
    with quiet_memory(home) as mem:
        assert mem.preview("which dataframe library, polars?", 400) == expected
    block = at.code[0].value
    assert block == expected and POLARS in block
    metric = next(m for m in at.metric if m.label == "Tokens in the block")
    assert metric.value == f"{count_tokens(expected)} / 400"
    why = table(at, "relevance", "recency", "total")
    for column in ("relevance", "confidence", "recency", "total"):
        assert column in why.columns
    assert POLARS in set(why["content"])

    at.slider(key="inject_budget").set_value(0).run()
    assert not at.exception
    tiny = format_memory_for_injection(data, 0, "which dataframe library, polars?")
    assert (at.code[0].value if at.code else "") == tiny


# -- Projects -------------------------------------------------------------------------------------
def test_project_selector_shows_one_projects_facts_with_the_users(home, monkeypatch):
    ids = seed_projects(home)
    at = run_app(home, monkeypatch)
    pick = at.selectbox(key="facts_project")
    assert pick.options == ["(all)", "(user only)", "alpha", "beta"]
    everything = facts_table(at)
    assert set(everything["content"]) == {SHARED_FACT, ALPHA_FACT, BETA_FACT}
    owner = dict(zip(everything["content"], everything["project"], strict=True))
    assert owner == {SHARED_FACT: "(user)", ALPHA_FACT: "alpha", BETA_FACT: "beta"}

    pick.select("alpha").run()
    assert not at.exception
    assert set(facts_table(at)["content"]) == {SHARED_FACT, ALPHA_FACT}
    picks = at.selectbox(key="facts_pick").options  # "id · content" labels
    assert any(o.startswith(ids["alpha"]) for o in picks)
    assert not any(o.startswith(ids["beta"]) for o in picks)
    assert "Project alpha predicts" in texts(at) and "Project beta" not in texts(at)

    at.selectbox(key="facts_project").select("(user only)").run()
    assert set(facts_table(at)["content"]) == {SHARED_FACT}


def test_injection_preview_for_a_project_holds_none_of_another(home, monkeypatch):
    seed_projects(home)
    at = run_app(home, monkeypatch)
    pick = at.selectbox(key="inject_project")
    assert pick.options == ["(user only)", "alpha", "beta"]  # never all projects at once
    pick.select("alpha").run()
    at.text_area(key="inject_context").input("which target column does the dataset have?").run()
    assert not at.exception
    block = at.code[0].value
    assert ALPHA_FACT in block and SHARED_FACT in block and "Project alpha predicts" in block
    assert BETA_FACT not in block and "beta" not in block
    with quiet_memory(home) as mem:  # exactly what a turn in project alpha injects
        assert mem.preview("which target column does the dataset have?", project="alpha") == block
    assert set(table(at, "relevance", "total")["content"]) == {SHARED_FACT, ALPHA_FACT}
    assert next(m for m in at.metric if m.label == "Facts included").value == "2 / 2"

    at.selectbox(key="inject_project").select("(user only)").run()
    block = at.code[0].value
    assert SHARED_FACT in block and "alpha" not in block and "beta" not in block


# -- Threads --------------------------------------------------------------------------------------
def thread_options(at: AppTest) -> list[str]:
    """The thread list's lines as read (its options are Markdown, escaped)."""
    return [shown(o) for o in at.radio(key="thread_pick").options]


def transcript(at: AppTest) -> list[tuple[str, str]]:
    """The shown transcript: (role, text) of each chat message."""
    return [(m.name, shown("\n".join(x.value for x in m.markdown))) for m in at.chat_message]


def test_threads_list_beside_the_picked_thread_with_turns_in_words(home, seeded, monkeypatch):
    at = run_app(home, monkeypatch)
    lines = thread_options(at)
    # Named as `%%agent -t NAME` named it, then its first message; "1 turn", not "1 turns";
    # the sub-agent right under its parent, not a thread of its own.
    assert lines == [
        "**thread-notes** · “Reading notes” · 1 turn",
        "**thread-sales** · “Sales analysis” · 2 turns · 1 sub-agent · summarized",
        "↳ sub-agent · Research: plotting libraries (of thread-sales) · 1 turn",
    ]
    # The newest thread is shown at once: its transcript beside the list, not in a dropdown.
    assert transcript(at) == [("user", "I want to learn Rust."), ("assistant", "Good plan.")]

    at.radio(key="thread_pick").set_value("thread-sales").run()
    assert not at.exception
    shown_text = texts(at)
    assert "**thread-sales** · “Sales analysis”" in shown_text
    assert "1030 in / 246 out tokens" in shown_text
    assert any("**Summary** of messages 1–2" in i.value for i in at.info)
    assert "**sub-agent** · Research: plotting libraries · 1 turn · 200 in / 40 out" in shown_text
    turns = table(at, "started", "message", "reply")
    # Each turn by what was said, not by its id.
    assert list(turns["message"]) == ["I prefer polars over pandas.", "Plot monthly sales."]
    assert list(turns["reply"]) == ["Noted.", "Here is the plot."]
    assert list(turns["input_tokens"]) == [420, 610]
    assert "turn" not in turns.columns
    assert [text for _, text in transcript(at)] == [
        "I prefer polars over pandas.", "Noted.", "Plot monthly sales.", "Here is the plot.",
    ]  # fmt: skip

    at.radio(key="thread_pick").set_value("thread-sales-sub").run()
    assert transcript(at) == [
        ("user", "Compare plotting libraries."),
        ("assistant", "Altair."),
    ]


def test_recall_search_lists_results_and_opens_their_thread(home, seeded, monkeypatch):
    at = run_app(home, monkeypatch)
    assert at.radio(key="thread_pick").value == "thread-notes"
    at.text_input(key="recall_query").input("monthly sales plot").run()
    assert not at.exception
    results = [shown(m.value) for m in at.markdown if " · score " in m.value]
    assert results, texts(at)
    # thread, date, role, excerpt, score; best first
    first = results[0]
    assert first.startswith("**thread-sales** · 20") and " · user · score " in first
    assert first.endswith("Plot monthly sales.")
    with quiet_memory(home) as mem:
        expected = mem.recall("monthly sales plot", 10)
    assert len(results) == len(expected)
    assert [r.split(" · ")[0].strip("*") for r in results] == [e["thread"] for e in expected]
    # The sub-agent's "Compare plotting libraries." is not recalled (lead threads only).
    assert not any("Compare plotting" in r for r in results)

    at.button(key="recall_open_0").click().run()
    assert not at.exception
    assert at.radio(key="thread_pick").value == "thread-sales"
    assert ("user", "Plot monthly sales.") in transcript(at)

    at.text_input(key="recall_query").input("zeppelin quaternion").run()
    assert "No message matches this search." in texts(at)


def test_a_long_thread_list_shows_the_newest_and_recall_opens_older_ones(home, monkeypatch):
    journal = Journal(home / "journal.db")
    try:
        for i in range(53):
            thread = f"thread-{i:02d}"
            journal.ensure_thread(thread, model="offline")
            words = "the quarterly zeppelin budget" if i == 0 else f"routine note {i}"
            journal.add_message(thread, {"role": "user", "content": f"Remember {words}."})
            journal.add_message(thread, {"role": "assistant", "content": "Noted."})
    finally:
        journal.close()
    at = run_app(home, monkeypatch)
    radio = at.radio(key="thread_pick")
    assert len(radio.options) == 50 and radio.value == "thread-52"
    assert "The 50 most recent are listed; search above to open any of the 3 older" in texts(at)
    at.text_input(key="recall_query").input("zeppelin budget").run()
    at.button(key="recall_open_0").click().run()
    assert not at.exception
    assert at.radio(key="thread_pick").value == "thread-00"
    assert ("user", "Remember the quarterly zeppelin budget.") in transcript(at)


# -- Versions -------------------------------------------------------------------------------------
def test_versions_diff_and_rollback_with_confirmation(home, seeded, monkeypatch):
    at = run_app(home, monkeypatch)
    # Default: the newest two versions (the forget).
    assert f":material/remove: removed `{seeded['matplotlib']}` {MATPLOTLIB}" in texts(at)
    at.selectbox(key="ver_from").select(2).run()
    at.selectbox(key="ver_to").select(5).run()
    shown = texts(at)
    assert f":material/add: added `{seeded['rust']}` {RUST}" in shown
    assert f":material/edit: `{seeded['churn']}` confidence: 0.85 → 0.95" in shown
    assert ":material/notes: Work context" in shown

    at.selectbox(key="ver_rollback").select(3).run()
    at.button(key="ver_rollback_go").click().run()
    assert any("version v3" in w.value for w in at.warning)
    assert len(memory_json(home)["facts"]) == 3  # nothing written yet
    at.button(key="confirm_yes").click().run()
    assert not at.exception
    assert any("Rolled memory back to version 3" in s.value for s in at.success)
    restored = {f["content"] for f in memory_json(home)["facts"]}
    assert restored == {POLARS, CHURN, MATPLOTLIB, RUST}
    journal = Journal(home / "journal.db")
    newest = journal.db.execute(
        "SELECT reason, source FROM memory_versions ORDER BY id DESC LIMIT 1"
    ).fetchone()
    journal.close()
    assert newest == ("rollback", "version 3")


# -- Status ---------------------------------------------------------------------------------------
def test_status_shows_queue_last_fold_error_and_files(home, seeded, monkeypatch):
    at = run_app(home, monkeypatch)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Pending folds"] == "1"
    assert metrics["Failed folds"] == "0"
    assert metrics["Folding now"] == "0"
    shown = texts(at)
    assert "**Last fold**: applied → v4 · 20" in shown and "thread `thread-sales`" in shown
    assert "1 reinforced · 0 left out" in shown
    assert "ModelError: the model server did not answer" in shown
    files = table(at, "file", "path", "exists")
    assert str(home / "memory.json") in set(files["path"])
    assert str(home / "journal.db") in set(files["path"])


def test_status_shows_the_last_fold_report_and_failures_in_a_row(home, seeded, monkeypatch):
    from deerflow_nb.memory.folding import fold_log as folds
    from deerflow_nb.memory.readside.fold_records import FAILED

    with quiet_memory(home) as mem:
        mem.apply(
            {
                "newFacts": [
                    {"content": "Uses VS Code", "category": "context", "confidence": 0.9},
                    {"content": "", "category": "context", "confidence": 0.9},
                    {"content": "Likes tea", "category": "context", "confidence": 7},
                ]
            },
            source="thread-notes",
        )
    at = run_app(home, monkeypatch)
    shown = texts(at)
    assert "**Last fold**: partly applied → v7 · 20" in shown
    assert "thread `thread-notes`" in shown and "1 added · 2 left out" in shown
    left_out = table(at, "item", "reason", "value")
    assert list(left_out["reason"]) == [
        "content is empty",
        "confidence 7 is not a number from 0 to 1",
    ]
    assert {m.label: m.value for m in at.metric}["Failures in a row"] == "0"
    assert {m.label: m.value for m in at.metric}["Last fold"] == "partly applied"

    journal = Journal(home / "journal.db")  # what the fold queue journals when the model fails
    try:
        for _ in range(2):
            with journal.transaction() as db:
                folds.record(
                    db, source="thread-notes", outcome=FAILED, error="ModelError: timed out"
                )
    finally:
        journal.close()
    at.button(key="refresh").click().run()
    assert {m.label: m.value for m in at.metric}["Failures in a row"] == "2"
    assert any("failed the last 2 folds in a row" in w.value for w in at.warning)
    shown = texts(at)
    assert "**Last fold**: failed · 20" in shown and "Error: ModelError: timed out" in shown
    recent = table(at, "time", "thread", "outcome", "what it did")
    assert list(recent["outcome"])[:3] == ["failed", "failed", "partly applied"]
    assert "left out 2 (newFacts[1]: content is empty" in recent["what it did"].iloc[2]


# -- Pending changes ---------------------------------------------------------------------------
def test_pending_changes_are_listed_and_approved_or_rejected(home, seeded, monkeypatch):
    with quiet_memory(home) as mem:
        mem.review.enabled = True
        duckdb = mem.apply(
            {"newFacts": [{"content": "Uses DuckDB for SQL", "category": "knowledge",
                           "confidence": 0.9}]},
            source="thread-sales",
        ).pending_id  # fmt: skip
        drop_rust = mem.apply(
            {
                "factsToRemove": [seeded["rust"]],
                "user": {
                    "topOfMind": {"summary": "Shipping the churn model", "shouldUpdate": True}
                },
            },
            source="thread-notes",
        ).pending_id
        vscode = mem.apply(
            {"newFacts": [{"content": "Uses VS Code", "category": "context", "confidence": 0.8}]},
            source="thread-notes",
        ).pending_id
    at = run_app(home, monkeypatch)
    assert {m.label: m.value for m in at.metric}["Pending changes"] == "3"
    shown = texts(at)
    assert "Review mode is **on**" in shown
    assert "**3 changes waiting for review**" in shown
    assert f"**Change #{duckdb}** · from thread `thread-sales` · 20" in shown
    # What each would do, in words: a removal names the fact's text, not just its id.
    assert ":material/add: add Uses DuckDB for SQL (knowledge, 0.90)" in shown
    assert f":material/remove: remove {seeded['rust']}: {RUST}" in shown
    assert ":material/notes: section Top of mind: Shipping the churn model" in shown

    at.button(key=f"pending_approve_{duckdb}").click().run()
    assert not at.exception
    assert any(f"Approved 1 change (change #{duckdb})" in x.value for x in at.success)
    assert "Uses DuckDB for SQL" in {f["content"] for f in memory_json(home)["facts"]}
    assert "Uses DuckDB for SQL" in set(facts_table(at)["content"])

    at.button(key=f"pending_reject_{drop_rust}").click().run()
    assert any(f"Rejected 1 change (change #{drop_rust})" in x.value for x in at.success)
    assert RUST in {f["content"] for f in memory_json(home)["facts"]}  # not removed
    with quiet_memory(home) as mem:
        assert [p["id"] for p in mem.pending()] == [vscode]
    assert {m.label: m.value for m in at.metric}["Pending changes"] == "1"

    # Rejecting all asks first; Cancel keeps them.
    at.button(key="pending_reject_all").click().run()
    assert any("Reject all 1 pending change?" in w.value for w in at.warning)
    at.button(key="confirm_no").click().run()
    with quiet_memory(home) as mem:
        assert [p["id"] for p in mem.pending()] == [vscode]
    at.button(key="pending_reject_all").click().run()
    at.button(key="confirm_yes").click().run()
    assert any("Rejected 1 change (all pending changes)" in x.value for x in at.success)
    assert "No pending changes" in texts(at)
    journal = Journal(home / "journal.db")
    statuses = dict(journal.db.execute("SELECT id, status FROM pending_changes").fetchall())
    journal.close()
    assert statuses == {duckdb: "approved", drop_rust: "rejected", vscode: "rejected"}
    assert "Uses VS Code" not in {f["content"] for f in memory_json(home)["facts"]}


def test_approve_all_asks_then_applies_every_pending_change(home, seeded, monkeypatch):
    with quiet_memory(home) as mem:
        mem.review.enabled = True
        for content in ("Uses DuckDB for SQL", "Uses VS Code"):
            mem.apply(
                {"newFacts": [{"content": content, "category": "context", "confidence": 0.9}]},
                source="thread-notes",
            )
    at = run_app(home, monkeypatch)
    at.button(key="pending_approve_all").click().run()
    assert any("Apply all 2 pending changes" in w.value for w in at.warning)
    assert len(memory_json(home)["facts"]) == 3  # nothing written yet
    at.button(key="confirm_yes").click().run()
    assert any("Approved 2 changes" in x.value for x in at.success)
    contents = {f["content"] for f in memory_json(home)["facts"]}
    assert {"Uses DuckDB for SQL", "Uses VS Code"} <= contents
    with quiet_memory(home) as mem:
        assert mem.pending() == []


def test_a_change_decided_elsewhere_is_reported_not_applied_twice(home, seeded, monkeypatch):
    with quiet_memory(home) as mem:
        mem.review.enabled = True
        change = mem.apply(
            {"newFacts": [{"content": "Uses VS Code", "category": "context", "confidence": 0.9}]},
            source="thread-notes",
        ).pending_id
    at = run_app(home, monkeypatch)
    with quiet_memory(home) as mem:  # another kernel rejects it meanwhile
        assert mem.review.reject([change]) == 1
    at.button(key=f"pending_approve_{change}").click().run()
    assert not at.exception
    assert any(f"change #{change} was decided meanwhile" in e.value for e in at.error)
    assert "Uses VS Code" not in {f["content"] for f in memory_json(home)["facts"]}


def selected_tab(at: AppTest) -> str:
    """The tab the page tells the browser to show (the tab container's default index)."""
    stack = [at.main]
    while stack:
        node = stack.pop()
        proto = getattr(node, "proto", None)
        kind = proto.WhichOneof("type") if hasattr(proto, "WhichOneof") else None
        if kind == "tab_container":
            return TABS[proto.tab_container.default_tab_index]
        stack.extend(getattr(node, "children", {}).values())
    raise AssertionError("no tabs on the page")


def test_each_item_is_decided_on_its_own_and_the_tab_stays(home, seeded, monkeypatch):
    """Issue 30 item 4: every fact a change would remove is listed in full with its own
    buttons; the Pending tab stays in use after each click, and the headline follows."""
    with quiet_memory(home) as mem:
        mem.review.enabled = True
        change = mem.apply(
            {
                "newFacts": [{"content": "Uses DuckDB for SQL", "category": "knowledge",
                              "confidence": 0.9}],
                "factsToRemove": [seeded["rust"], seeded["polars"]],
            },
            source="thread-notes",
        ).pending_id  # fmt: skip
    at = run_app(home, monkeypatch)
    assert {m.label: m.value for m in at.metric}["Last fold"] == "held for review"
    at.session_state[TAB_KEY] = "Pending changes"  # the user opens the Pending tab
    at.run()
    page = texts(at)
    assert f"2. :material/remove: remove {seeded['rust']}: {RUST}" in page
    assert f"3. :material/remove: remove {seeded['polars']}: {POLARS}" in page

    at.button(key=f"pending_item_approve_{change}_2").click().run()  # let the goal go
    assert not at.exception
    assert any(f"Approved item 2 of change #{change}." in x.value for x in at.success)
    contents = {f["content"] for f in memory_json(home)["facts"]}
    assert RUST not in contents and POLARS in contents and "Uses DuckDB for SQL" not in contents
    assert selected_tab(at) == "Pending changes"  # not back on Facts
    assert f"3. :material/remove: remove {seeded['polars']}: {POLARS}" in texts(at)
    with pytest.raises(KeyError):
        at.button(key=f"pending_item_approve_{change}_2")  # decided: its row is gone

    at.button(key=f"pending_item_reject_{change}_3").click().run()  # keep the preference
    assert any(f"Rejected item 3 of change #{change}." in x.value for x in at.success)
    assert POLARS in {f["content"] for f in memory_json(home)["facts"]}
    assert selected_tab(at) == "Pending changes"
    assert {m.label: m.value for m in at.metric}["Last fold"] == "held for review"  # 1 waits

    at.button(key=f"pending_approve_{change}").click().run()  # the rest: the new fact
    assert "Uses DuckDB for SQL" in {f["content"] for f in memory_json(home)["facts"]}
    assert selected_tab(at) == "Pending changes"
    assert shown({m.label: m.value for m in at.metric}["Last fold"]) == (
        "held for review, then partly approved"
    )
    assert "No pending changes" in texts(at)


# -- Live reading ---------------------------------------------------------------------------------
def test_refresh_reads_changes_made_by_another_process(home, seeded, monkeypatch):
    at = run_app(home, monkeypatch)
    assert "3 of 3 facts" in texts(at)
    script = textwrap.dedent(
        f"""
        from deerflow_nb.config import load_settings
        from deerflow_nb.memory import Memory
        s = load_settings({str(home)!r}); s.memory.enabled = False
        with Memory({str(home)!r}, settings=s) as mem:
            mem.add_fact("Lives in Lisbon", category="context", confidence=0.8)
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    at.button(key="refresh").click().run()
    assert "4 of 4 facts" in texts(at)
    assert "Lives in Lisbon" in set(facts_table(at)["content"])


def test_turning_auto_refresh_on_keeps_the_page_rendering(home, seeded, monkeypatch):
    at = run_app(home, monkeypatch)
    at.toggle(key="auto_refresh").set_value(True).run()
    assert not at.exception
    assert "3 of 3 facts" in texts(at)


def test_pages_stay_correct_while_another_process_folds(home, seeded, monkeypatch):
    """A writer process applies diffs non-stop; every rerun reads a whole, valid memory."""
    script = textwrap.dedent(
        f"""
        import time
        from deerflow_nb.config import load_settings
        from deerflow_nb.memory import Memory
        s = load_settings({str(home)!r}); s.memory.enabled = False
        with Memory({str(home)!r}, settings=s) as mem:
            end = time.time() + 8
            i = 0
            while time.time() < end:
                report = mem.apply(
                    {{"newFacts": [{{"content": f"Read paper number {{i}}",
                                     "category": "knowledge", "confidence": 0.8}}]}},
                    source="thread-writer",
                )
                mem.forget(report.added[0])
                i += 1
            print(i)
        """
    )
    writer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        at = run_app(home, monkeypatch)
        runs = 0
        while writer.poll() is None and runs < 40:
            at.button(key="refresh").click().run()
            runs += 1
            assert not at.exception, [e.message for e in at.exception]
            assert not at.error, [e.value for e in at.error]
            assert POLARS in set(facts_table(at)["content"])
            time.sleep(0.05)
        out, _ = writer.communicate(timeout=60)
    finally:
        if writer.poll() is None:
            writer.kill()
    assert writer.returncode == 0
    assert int(out) > 0 and runs > 0


# -- Empty, missing, corrupted ---------------------------------------------------------------------
def test_missing_home_shows_a_friendly_empty_state(tmp_path, monkeypatch):
    missing = tmp_path / "never-created"
    at = run_app(missing, monkeypatch)
    assert "Nothing remembered yet" in texts(at)
    assert "does not exist yet" in texts(at)
    assert not at.error and not at.tabs
    assert not missing.exists()  # the inspector does not create the home


def test_a_home_that_is_a_file_is_named_not_offered_an_import(tmp_path, monkeypatch):
    not_a_folder = tmp_path / "notes.txt"
    not_a_folder.write_text("x")
    at = run_app(not_a_folder, monkeypatch)
    assert "is a file, not a folder" in at.error[0].value
    assert not at.tabs and "deerflow-nb import" not in texts(at)


def test_empty_home_shows_a_friendly_empty_state(home, monkeypatch):
    at = run_app(home, monkeypatch)
    assert "Nothing remembered yet" in texts(at)
    assert "%load_ext deerflow_nb" in texts(at)
    assert list(home.iterdir()) == []


def test_a_damaged_journal_is_named_and_the_facts_still_show(home, seeded, monkeypatch):
    (home / "journal.db").unlink()
    (home / "journal.db").write_bytes(b"this was never a SQLite database " * 8)
    at = run_app(home, monkeypatch)
    error = at.error[0].value
    assert "journal.db cannot be read" in error and "move it aside" in error
    assert list(facts_table(at)["content"]) == [CHURN, POLARS, RUST]  # from memory.json


def test_corrupted_memory_json_shows_error_and_recovery_not_a_traceback(home, seeded, monkeypatch):
    bad = b'{"version": "1.0", "facts": [ {"id": "f1", "content": "trunc'
    (home / "memory.json").write_bytes(bad)
    at = run_app(home, monkeypatch)
    assert not at.exception
    error = at.error[0].value
    assert "memory.json cannot be read" in error
    assert str(home / "memory.json") in error
    # Reading writes nothing, not even a copy of the damaged bytes (a kernel keeps one).
    assert not list(home.glob("memory.json.corrupt-*")) and "nothing was written" in error
    assert "%memory rollback" in error and "deerflow-nb fold --rebuild" in error
    # It offers a rollback that writes memory.json, so it does not claim it never does.
    assert "never writes" not in error and "roll back from the Versions tab" in error
    assert (home / "memory.json").read_bytes() == bad  # never overwritten by the inspector
    # The journal-backed pages still work.
    assert any("Sales analysis" in line for line in thread_options(at))
    assert {m.label: m.value for m in at.metric}["Pending folds"] == "1"

    at.selectbox(key="ver_rollback").select(6).run()
    at.button(key="ver_rollback_go").click().run()
    at.button(key="confirm_yes").click().run()
    assert not at.exception and not at.error
    assert {f["content"] for f in memory_json(home)["facts"]} == {POLARS, CHURN, RUST}
    assert list(facts_table(at)["content"]) == [CHURN, POLARS, RUST]


def test_importing_the_package_does_not_import_streamlit():
    code = (
        "import sys, deerflow_nb, deerflow_nb.memory, deerflow_nb.inspector.data;"
        "print('streamlit' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_launch_command_binds_locally_headless_without_stats():
    from deerflow_nb.inspector.launch import SERVED_PATH, build_parser, streamlit_args

    args = build_parser().parse_args([])
    assert (args.host, args.port) == ("127.0.0.1", 8501)
    argv = streamlit_args(args.host, 9999)
    # The page behind the loopback Host check (test_inspector_hosts.py serves it for real).
    assert argv[:2] == ["run", str(SERVED_PATH)] and SERVED_PATH.is_file()
    assert "LoopbackHostMiddleware" in SERVED_PATH.read_text()
    assert "DNS" in build_parser().format_help()
    pairs = dict(zip(argv[2::2], argv[3::2], strict=True))
    assert pairs == {
        "--server.address": "127.0.0.1",
        "--server.port": "9999",
        "--server.headless": "true",
        "--browser.gatherUsageStats": "false",
        "--client.toolbarMode": "viewer",
    }


def test_fact_rows_and_diff_view_models():
    from deerflow_nb.inspector import view_models

    memory = {
        "facts": [
            {"id": "a", "content": "zero", "category": "context", "confidence": 0},
            {"id": "b", "content": "Alpha", "category": "goal", "confidence": 0.8},
            {"id": "c", "content": "beta", "category": "goal", "confidence": None},
        ]
    }
    by_conf = view_models.fact_rows(memory)
    assert [r["id"] for r in by_conf] == ["b", "a", "c"]
    assert [r["id"] for r in view_models.fact_rows(memory, sort="content")] == ["b", "c", "a"]
    assert [r["id"] for r in view_models.fact_rows(memory, categories=["goal"], text="ALP")] == [
        "b"
    ]
    memory["facts"][0]["person"] = "alice"  # a teammate's fact, edited by bob and by you
    by = {
        r["id"]: r["by"] for r in view_models.fact_rows(memory, changers={"a": "bob", "b": "you"})
    }
    assert by == {"a": "alice → bob", "b": "you", "c": "you"}
    new = {"facts": [{"id": "b", "content": "Alpha", "category": "goal", "confidence": 0.9}]}
    diff = view_models.diff_snapshots(memory, new)
    assert [f["id"] for f in diff["removed"]] == ["a", "c"] and diff["added"] == []
    assert diff["changed"] == [{"id": "b", "field": "confidence", "old": 0.8, "new": 0.9}]


# -- Hostile text ---------------------------------------------------------------------------------
#: Elements whose ``value`` Streamlit renders as Markdown; every element's ``label`` and
#: ``help`` are Markdown too, and a metric's value.
MARKDOWN_VALUES = {
    "markdown", "caption", "info", "warning", "error", "success", "toast",
    "title", "header", "subheader",
}  # fmt: skip
_COMMONMARK = None


def markdown_bodies(at: AppTest) -> list[tuple[str, str]]:
    """(element type and field, text) for everything on the page Streamlit reads as Markdown."""
    bodies: list[tuple[str, str]] = []

    def walk(node) -> None:
        kind = str(getattr(node, "type", ""))
        fields = ["label", "help"]
        if kind in MARKDOWN_VALUES or kind == "metric":
            fields.append("value")
        if kind == "radio":  # its options are Markdown too
            bodies.extend((f"{kind}.option", o) for o in node.options)
        for field in fields:
            text = getattr(node, field, None)
            if isinstance(text, str) and text:
                bodies.append((f"{kind}.{field}", text))
        children = getattr(node, "children", None)
        if isinstance(children, dict):
            for child in children.values():
                walk(child)

    walk(at._tree)
    return bodies


def live_markup(body: str) -> tuple[list[str], str]:
    """What CommonMark (raw HTML on, as a permissive renderer would) makes of ``body``: the
    images, links and HTML it holds, and its text as shown."""
    global _COMMONMARK
    if _COMMONMARK is None:
        from markdown_it import MarkdownIt

        _COMMONMARK = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
    live, shown = [], []

    def walk(tokens) -> None:
        for token in tokens:
            if token.type in ("image", "link_open", "html_inline", "html_block"):
                live.append(f"{token.type} {token.attrs or token.content!r}")
            elif token.type in ("text", "code_inline"):
                shown.append(token.content)
            walk(token.children or [])

    walk(_COMMONMARK.parse(body))
    return live, " ".join(shown)


#: Where hostile text is planted (``seed_hostile_home``) and must be shown, as text.
TAGS = (
    "fact", "edited", "user", "history", "title", "subtitle", "summary", "error", "pending",
    "user-msg", "reply", "sub-reply",
)  # fmt: skip


def test_hostile_text_is_shown_literally_on_every_page(home, monkeypatch):
    """A fact, the summaries, thread titles, a thread summary, journal messages, last_error
    and a pending change holding HTML, a script, a frame, a javascript: link and remote
    images: every Markdown body and label that shows them shows them as text."""
    from inspector_seed import seed_hostile_home

    seeded = seed_hostile_home(home)
    fid = seeded["fact"]
    at = run_app(home, monkeypatch)
    seen = markdown_bodies(at)
    # Every page is drawn on each run (tabs are all rendered); walk the states that show more.
    at.selectbox(key="facts_pick").select(fid).run()
    at.button(key="facts_forget").click().run()
    seen += markdown_bodies(at)  # the confirmation quotes the fact
    at.button(key="confirm_no").click().run()
    at.selectbox(key="facts_pick").select(fid).run()
    at.text_area(key=f"edit_content_{fid}").input("Edited ![x](http://127.0.0.1:9/e)").run()
    at.button(key="facts_save").click().run()
    seen += markdown_bodies(at)
    at.button(key="confirm_yes").click().run()
    seen += markdown_bodies(at)  # the flash message, the new diff
    at.radio(key="thread_pick").set_value("thread-evil").run()
    seen += markdown_bodies(at)  # the thread, its turns and transcript
    at.radio(key="thread_pick").set_value("thread-evil-sub").run()
    seen += markdown_bodies(at)
    at.text_input(key="recall_query").input("img onerror alert").run()
    assert any(" · score " in m.value for m in at.markdown)  # hostile messages recalled
    seen += markdown_bodies(at)
    at.button(key="recall_open_0").click().run()
    at.button(key="pending_reject_all").click().run()
    seen += markdown_bodies(at)  # the confirmation
    at.button(key="confirm_no").click().run()
    oldest = len(at.selectbox(key="ver_from").options) - 1
    at.selectbox(key="ver_from").select_index(oldest).run()  # against the newest version
    seen += markdown_bodies(at)
    at.button(key="ver_rollback_go").click().run()
    seen += markdown_bodies(at)
    assert not at.exception, [e.message for e in at.exception]

    leaks = []
    shown_tags = set()
    for where, body in seen:
        live, shown = live_markup(body)
        if live:
            leaks.append(f"{where}: {live} in {body[:120]!r}")
        for tag in TAGS:
            if f"?{tag}-img onerror=alert(1)>" in shown:  # the raw tag, as text
                shown_tags.add(tag)
    assert not leaks, "\n".join(dict.fromkeys(leaks))
    # ...and the hostile text is there, as text, in each place that shows it.
    assert shown_tags == set(TAGS)


def test_status_counts_the_journal_with_its_write_ahead_log(home, seeded, monkeypatch):
    """A kernel holding the journal open keeps recent writes in journal.db-wal: the size shown
    is the journal's data, not the 4096 bytes of a main file not checkpointed yet."""
    journal = Journal(home / "journal.db")  # open, like a running kernel's
    try:
        journal.ensure_thread("thread-live", title="Live")
        journal.add_message("thread-live", {"role": "user", "content": "x" * 20_000})
        wal = home / "journal.db-wal"
        assert wal.is_file() and wal.stat().st_size > 0
        at = run_app(home, monkeypatch)
        files = table(at, "file", "path", "bytes")
        shown_bytes = int(files.loc[files["file"] == "journal", "bytes"].iloc[0])
        on_disk = (home / "journal.db").stat().st_size, wal.stat().st_size
        assert shown_bytes == sum(on_disk) > on_disk[0]
    finally:
        journal.close()


def test_a_hostile_project_name_stays_text(home, monkeypatch):
    name = "**loud** <img src=http://127.0.0.1:9/x> :red[x]"
    with quiet_memory(home) as mem:
        mem.add_fact("The odd table has 12 rows", project=name)
        mem.apply(
            {"newFacts": [], "projectContext": {"summary": "Odd.", "shouldUpdate": True}},
            source="thread-odd",
            project=name,
        )
    stored = {f.get("project") for f in memory_json(home)["facts"]} - {None}
    at = run_app(home, monkeypatch)
    at.selectbox(key="facts_project").select(next(iter(stored))).run()
    assert not at.exception
    assert set(facts_table(at)["project"]) == stored  # a table cell: text
    raw = "\n".join(m.value for m in at.markdown)
    assert not re.search(r"(?<!\\)<img", raw) and "**loud**" not in raw  # escaped Markdown
    assert f"project {next(iter(stored))}" in texts(at)  # and read back literally
