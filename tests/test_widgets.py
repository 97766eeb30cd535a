"""The memory panel without a browser: ipywidgets on a dummy comm, real Memory, real files."""

from __future__ import annotations

import shutil
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import comm
import pytest
from IPython.core.interactiveshell import InteractiveShell
from ipywidgets.widgets import widget as ipywidgets_widget
from journal_rows import events, journal_turn, memory_json

from deerflow_nb.memory import Memory
from deerflow_nb.notebook.memory_magic import MemoryMagics
from deerflow_nb.notebook.panel import TAB_TITLES, MemoryPanel
from deerflow_nb.notebook.session import close_session, get_session
from deerflow_nb.tokens import count_tokens

widget_registry = ipywidgets_widget._instances  # every widget not yet closed


class DummyComm:
    """Stands in for the kernel's comm (as ipywidgets' own tests do) and keeps what the
    widgets would have sent to the front-end."""

    kernel = "truthy"  # a non-None kernel makes widgets send their state updates

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.comm_id = uuid.uuid4().hex  # the widget registry's key
        self.messages: list[dict[str, Any]] = []

    def open(self, *args: Any, **kwargs: Any) -> None:
        pass

    def on_msg(self, *args: Any, **kwargs: Any) -> None:
        pass

    def send(self, data: Any = None, *args: Any, **kwargs: Any) -> None:
        self.messages.append(data)

    def close(self, *args: Any, **kwargs: Any) -> None:
        pass


@pytest.fixture(autouse=True)
def dummy_comm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(comm, "create_comm", lambda *a, **k: DummyComm())


@pytest.fixture
def memory(home: Path) -> Iterator[Memory]:
    mem = Memory(home)
    yield mem
    mem.close()


def sent_values(widget: Any, name: str) -> list[Any]:
    """Values of trait ``name`` that the widget sent to the (dummy) front-end."""
    return [
        m["state"][name]
        for m in widget.comm.messages
        if isinstance(m, dict) and name in m.get("state", {})
    ]


def new_fact_diff(content: str) -> dict[str, Any]:
    return {"newFacts": [{"content": content, "category": "preference", "confidence": 0.9}]}


def test_panel_has_the_six_tabs_and_shows_memory(memory: Memory) -> None:
    fact = memory.add_fact("Prefers polars over pandas", category="preference", confidence=0.8)
    panel = MemoryPanel(memory)
    assert (
        tuple(panel.tabs.titles)
        == TAB_TITLES
        == (
            "Profile",
            "Facts",
            "Preview",
            "Pending",
            "History",
            "Recall",
        )
    )
    assert "Work context" in panel.profile.value
    assert list(panel.fact_checks) == [fact["id"]]
    row = panel.fact_rows.children[0]
    bar = next(c for c in row.children if type(c).__name__ == "FloatProgress")
    assert bar.value == pytest.approx(0.8)  # confidence shown as a bar
    assert fact["id"] in panel.history.value and "add" in panel.history.value
    bundle = panel._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle


def test_clicking_forget_removes_the_fact_and_journals_it(memory: Memory, home: Path) -> None:
    keep = memory.add_fact("Lives in Lisbon")
    gone = memory.add_fact("Prefers tabs over spaces", category="preference")
    panel = MemoryPanel(memory)
    panel.fact_checks[gone["id"]].value = True
    panel.forget_button.click()
    panel.confirm_button.click()
    assert [f["id"] for f in memory_json(home)["facts"]] == [keep["id"]]
    last = events(home)[-1]
    assert (last["kind"], last["fact_id"]) == ("remove", gone["id"])
    assert list(panel.fact_checks) == [keep["id"]]  # the table redrew
    assert "Forgot 1 fact" in panel.message.value
    assert "remove" in panel.history.value


def test_forget_with_nothing_selected_changes_nothing(memory: Memory, home: Path) -> None:
    memory.add_fact("Lives in Lisbon")
    panel = MemoryPanel(memory)
    before = memory_json(home), events(home)
    panel.forget_button.click()
    assert "select the facts to forget first" in panel.message.value
    assert (memory_json(home), events(home)) == before


def test_editing_a_selected_row(memory: Memory, home: Path) -> None:
    fact = memory.add_fact("Uses pandas 1.5", category="knowledge")
    panel = MemoryPanel(memory)
    panel.fact_checks[fact["id"]].value = True
    assert panel.edit_text.value == "Uses pandas 1.5"  # selecting one row fills the box
    panel.edit_text.value = "Uses pandas 2.2"
    panel.edit_button.click()
    assert memory_json(home)["facts"][0]["content"] == "Uses pandas 2.2"
    last = events(home)[-1]
    assert (last["kind"], last["old_content"], last["new_content"]) == (
        "update",
        "Uses pandas 1.5",
        "Uses pandas 2.2",
    )


def test_filters_narrow_the_facts_table(memory: Memory) -> None:
    pref = memory.add_fact("Prefers polars", category="preference", confidence=0.95)
    goal = memory.add_fact("Wants to learn Rust", category="goal", confidence=0.75)
    panel = MemoryPanel(memory)
    panel.category.value = "goal"
    assert list(panel.fact_checks) == [goal["id"]]
    panel.category.value = "all"
    panel.min_confidence.value = 0.9
    assert list(panel.fact_checks) == [pref["id"]]
    panel.min_confidence.value = 0.0
    panel.text_filter.value = "rust"
    assert list(panel.fact_checks) == [goal["id"]]


def test_moving_the_slider_changes_the_preview_within_budget(memory: Memory) -> None:
    for i in range(40):
        memory.add_fact(f"Project {i} keeps its features in store{i} with nightly refresh jobs")
    panel = MemoryPanel(memory)
    panel.budget.value = 100
    small = panel.last_preview
    assert small.block == memory.preview(None, max_tokens=100)
    assert 0 < count_tokens(small.block) == small.tokens <= 100
    assert f"{small.tokens} / 100 tokens" in panel.preview_count.value
    panel.budget.value = 600
    large = panel.last_preview
    assert large.block == memory.preview(None, max_tokens=600)
    assert small.tokens < large.tokens <= 600 and large.fact_count > small.fact_count
    assert f"{large.tokens} / 600 tokens" in panel.preview_count.value
    # the front-end was sent both readings, live
    assert any("/ 100 tokens" in v for v in sent_values(panel.preview_count, "value"))
    assert any("/ 600 tokens" in v for v in sent_values(panel.preview_count, "value"))


def test_the_context_box_reranks_the_preview(memory: Memory) -> None:
    for i in range(30):
        memory.add_fact(f"Project {i} keeps its features in store{i} with nightly refresh jobs")
    memory.add_fact("Prefers polars over pandas for dataframes", category="preference")
    panel = MemoryPanel(memory)
    panel.budget.value = 80
    panel.context.value = "which dataframe library, polars or pandas?"
    assert "polars" in panel.last_preview.block
    assert panel.last_preview.block == memory.preview(
        "which dataframe library, polars or pandas?", max_tokens=80
    )


def test_approving_a_pending_change_applies_it(memory: Memory, home: Path) -> None:
    panel = MemoryPanel(memory)
    panel.review.value = True  # the checkbox turns review mode on
    assert memory.review.enabled is True
    memory.apply(new_fact_diff("Prefers uv over pip"), source="thread-a")
    memory.apply(new_fact_diff("Prefers ruff over flake8"), source="thread-b")
    # the panel heard the proposals through on_change, without a manual refresh
    assert len(panel.pending_checks) == 2
    assert not (home / "memory.json").exists() or memory_json(home)["facts"] == []
    first, second = sorted(panel.pending_checks)
    panel.pending_checks[first].value = True
    panel.approve_button.click()
    assert [f["content"] for f in memory_json(home)["facts"]] == ["Prefers uv over pip"]
    assert list(panel.pending_checks) == [second]
    panel.pending_checks[second].value = True
    panel.reject_button.click()
    assert [f["content"] for f in memory_json(home)["facts"]] == ["Prefers uv over pip"]
    assert panel.pending_checks == {} and memory.pending() == []
    assert "Prefers uv over pip" in panel.fact_rows.children[0].children[-1].value


def test_panel_refreshes_after_a_fold(memory: Memory, home: Path) -> None:
    panel = MemoryPanel(memory)
    assert panel.fact_checks == {}
    journal_turn(memory, "t-fold", "I prefer vim over emacs.")
    memory.enqueue("t-fold")
    report = memory.flush(timeout=60)  # folds on the queue's worker thread
    assert report.folded == ["t-fold"]
    assert len(panel.fact_checks) == 1
    assert "vim" in panel.fact_rows.children[0].children[-1].value.lower()
    assert "1 fact" in panel.header.value and "1 facts" not in panel.header.value
    assert "t-fold" in panel.history.value


def test_redraws_close_the_rows_they_replace(memory: Memory) -> None:
    for n in range(3):
        memory.add_fact(f"Fact number {n}", category="context", confidence=0.8)
    panel = MemoryPanel(memory)
    live = len(widget_registry)
    for _ in range(5):
        panel.refresh()
    assert len(widget_registry) == live  # each redraw closed the rows it replaced
    memory.add_fact("One more fact", category="context", confidence=0.8)
    assert len(panel.fact_checks) == 4
    assert len(widget_registry) > live


def test_a_closed_panel_unsubscribes_and_closes_its_widgets(memory: Memory) -> None:
    before = len(memory._callbacks)
    panel = MemoryPanel(memory)
    assert len(memory._callbacks) == before + 1
    row_box, tabs_id = panel.fact_rows.children[0], panel.tabs.model_id
    panel.close()
    assert panel.closed and len(memory._callbacks) == before
    assert panel.widget.comm is None and row_box.comm is None
    assert tabs_id not in widget_registry
    draws = panel._draws
    memory.add_fact("Added after closing", category="context", confidence=0.8)
    panel.refresh()
    assert panel._draws == draws
    panel.close()  # closing twice is harmless


def test_memory_magic_shows_the_panel(ipython: InteractiveShell) -> None:
    shell = ipython
    shell.register_magics(MemoryMagics(shell))
    try:
        assert isinstance(shell.run_line_magic("memory", "panel"), MemoryPanel)
        assert not isinstance(shell.run_line_magic("memory", ""), MemoryPanel)  # terminal
        shell.kernel = object()  # what a Jupyter kernel's shell carries
        panel = shell.run_line_magic("memory", "")
        assert isinstance(panel, MemoryPanel)
        assert panel.memory is get_session(shell).memory
        # A re-run cell: the new panel replaces the old one, which stops following memory.
        subscribers = len(panel.memory._callbacks)
        again = shell.run_line_magic("memory", "panel")
        assert panel.closed and not again.closed
        assert len(again.memory._callbacks) == subscribers
    finally:
        if "kernel" in vars(shell):
            del shell.kernel
        close_session(shell)


def test_a_damaged_memory_json_is_said_in_the_panel_not_raised(memory: Memory, home: Path) -> None:
    memory.add_fact("Lives in Lisbon")
    panel = MemoryPanel(memory)
    panel.message.value = "Forgot 1 fact: fact_old"  # what the last click said
    (home / "memory.json").write_text("{broken", encoding="utf-8")
    panel.refresh_button.click()
    assert "cannot be read" in panel.header.value
    assert "memory.json" in panel.message.value and "rollback" in panel.message.value
    panel.message.value = ""
    panel.context.value = "where do I live?"  # an observer: nothing would show a raise
    assert "rollback" in panel.message.value
    panel.add_text.value = "Uses vim"
    panel.add_button.click()
    assert "rollback" in panel.message.value
    assert (home / "memory.json").read_text(encoding="utf-8") == "{broken"


def test_a_home_removed_under_the_panel_is_said_not_raised_in_its_watcher(
    memory: Memory, home: Path
) -> None:
    """The watcher thread opens its own journal connection: with the home gone, its redraw
    says so in the panel instead of dying with a traceback in the kernel's log."""
    memory.add_fact("Lives in Lisbon")
    panel = MemoryPanel(memory)
    shutil.rmtree(home)
    failures: list[BaseException] = []

    def redraw() -> None:  # as the watcher does, on a thread with no connection yet
        try:
            panel.refresh_if_changed()
        except BaseException as exc:
            failures.append(exc)

    watcher = threading.Thread(target=redraw)
    watcher.start()
    watcher.join()
    assert failures == []
    assert "journal.db cannot be read" in panel.header.value
    assert "DEERFLOW_NB_HOME" in panel.message.value  # the one-line fix
    panel.close()


# -- issue 22 item 6: the Facts tab's rough edges; item 3: pending changes in sight ------
def test_the_category_dropdown_reads_all_on_load_and_after_choosing_it(memory: Memory) -> None:
    pref = memory.add_fact("Prefers polars", category="preference")
    goal = memory.add_fact("Wants to learn Rust", category="goal")
    panel = MemoryPanel(memory)
    # ipywidgets 8 shows a None value as no selection (a blank dropdown): "all" is a value
    assert (panel.category.value, panel.category.index, panel.category.label) == ("all", 0, "all")
    assert sorted(panel.fact_checks) == sorted([pref["id"], goal["id"]])
    panel.category.value = "goal"
    assert list(panel.fact_checks) == [goal["id"]]
    panel.category.value = "all"
    assert panel.category.index == 0 and sent_values(panel.category, "index")[-1] == 0
    assert sorted(panel.fact_checks) == sorted([pref["id"], goal["id"]])


def test_forget_selected_asks_first_and_cancel_keeps_the_fact(memory: Memory, home: Path) -> None:
    fact = memory.add_fact("Prefers tabs over spaces", category="preference")
    panel = MemoryPanel(memory)
    assert panel.confirm_row.layout.display == "none"
    panel.fact_checks[fact["id"]].value = True
    before = memory_json(home), events(home)
    panel.forget_button.click()
    assert (memory_json(home), events(home)) == before  # one click removes nothing
    assert panel.confirm_row.layout.display != "none"
    assert "Forget 1 fact?" in panel.confirm_text.value and fact["id"] in panel.confirm_text.value
    panel.cancel_button.click()
    assert panel.confirm_row.layout.display == "none"
    assert (memory_json(home), events(home)) == before
    assert "Nothing forgotten" in panel.message.value
    # a question about one selection is withdrawn when the selection changes
    panel.forget_button.click()
    panel.fact_checks[fact["id"]].value = False
    assert panel.confirm_row.layout.display == "none"
    panel.confirm_button.click()
    assert memory_json(home) == before[0]
    panel.fact_checks[fact["id"]].value = True
    panel.forget_button.click()
    panel.confirm_button.click()
    assert memory_json(home)["facts"] == []
    assert panel.confirm_row.layout.display == "none"


def test_the_edit_box_lets_go_of_a_forgotten_facts_text(memory: Memory) -> None:
    fact = memory.add_fact("Uses pandas 1.5", category="knowledge")
    other = memory.add_fact("Lives in Lisbon")
    panel = MemoryPanel(memory)
    panel.fact_checks[fact["id"]].value = True
    assert panel.edit_text.value == "Uses pandas 1.5"
    panel.forget_button.click()
    panel.confirm_button.click()
    assert panel.edit_text.value == ""
    # forgotten elsewhere (%memory forget, another kernel): the box empties on the redraw
    panel.fact_checks[other["id"]].value = True
    assert panel.edit_text.value == "Lives in Lisbon"
    memory.forget(other["id"])
    assert panel.edit_text.value == ""
    # and unselecting the row empties it too
    third = memory.add_fact("Works in Porto")
    panel.fact_checks[third["id"]].value = True
    panel.fact_checks[third["id"]].value = False
    assert panel.edit_text.value == ""


def test_the_status_line_does_not_follow_into_another_tab(memory: Memory) -> None:
    panel = MemoryPanel(memory)
    panel.add_text.value = "Uses vim"
    panel.add_button.click()
    assert "Added" in panel.message.value
    panel.tabs.selected_index = TAB_TITLES.index("History")
    assert panel.message.value == ""


def test_the_text_boxes_take_the_rows_width(memory: Memory) -> None:
    panel = MemoryPanel(memory)
    assert panel.edit_text.layout.flex == "1 1 auto" and panel.edit_text.layout.width == "auto"
    assert panel.add_text.layout.flex == "1 1 auto"
    assert panel.context.layout.width == "100%"


def test_the_pending_count_shows_in_the_header_and_the_tab_title(memory: Memory) -> None:
    panel = MemoryPanel(memory)
    assert "await" not in panel.header.value and panel.tabs.titles[3] == "Pending"
    memory.review.enabled = True
    memory.apply(new_fact_diff("Prefers uv over pip"), source="thread-a")
    memory.apply(new_fact_diff("Prefers ruff over flake8"), source="thread-b")
    assert "2 changes await review" in panel.header.value
    assert panel.tabs.titles[3] == "Pending (2)"
    assert any("Pending (2)" in t for t in sent_values(panel.tabs, "titles"))  # live
    first = min(panel.pending_checks)
    panel.pending_checks[first].value = True
    panel.approve_button.click()
    assert "1 change awaits review" in panel.header.value
    assert panel.tabs.titles[3] == "Pending (1)"
    panel.approve_all_button.click()
    assert "await" not in panel.header.value and panel.tabs.titles[3] == "Pending"


def test_the_recall_box_lists_past_messages_escaped(memory: Memory) -> None:
    journal_turn(
        memory,
        "berlin-data",
        "The Berlin dataset has <b>bold</b> <script>alert(1)</script> quirks in its dates.",
        reply="Noted about Berlin.",
    )
    journal_turn(memory, "other", "I like rivers and lakes.")
    panel = MemoryPanel(memory)
    assert panel.tabs.children[TAB_TITLES.index("Recall")].children[0].children == (
        panel.recall.query,
        panel.recall.button,
    )
    panel.recall.button.click()
    assert "type words to look for" in panel.message.value  # nothing typed yet
    panel.recall.query.value = "what did I say about the Berlin dataset?"
    panel.recall.button.click()
    html = panel.recall.results.value
    assert "berlin-data" in html and ">role</th>" in html and ">score</th>" in html
    assert "user" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>" not in html
    assert "<b>bold</b>" not in html
    assert "rivers" not in html
    assert "found" in panel.message.value
    panel.recall.query.value = "zzzqqq"
    panel.recall.button.click()
    assert "Nothing said matches" in panel.recall.results.value


def test_a_recall_result_opens_its_thread_with_the_match_marked(memory: Memory) -> None:
    """Issue 19: each result's button shows its thread in the panel: the user messages and
    final replies in order (no tool traffic, no --no-memory turn), escaped, the match marked."""
    thread = "berlin-data"
    memory.journal.ensure_thread(thread)
    say = memory.journal.add_message
    say(thread, {"role": "user", "content": "Load the <b>Berlin</b> file, please."})
    say(thread, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "list_variables", "arguments": "{}"}}]})  # fmt: skip
    say(thread, {"role": "tool", "content": "TOOL-RESULT df", "tool_call_id": "c1"})
    say(thread, {"role": "assistant", "content": "Loaded; df has 12 rows."})
    matched = say(
        thread,
        {"role": "user", "content": "The Berlin dataset has <script>alert(1)</script> dates."},
    )
    say(thread, {"role": "assistant", "content": "Noted: the Berlin dates are odd."})
    private = memory.journal.start_turn(thread, "offline", private=True)
    memory.journal.add_message(thread, {"role": "user", "content": "PRIVATE note"}, turn_id=private)
    journal_turn(memory, "other", "I like rivers and lakes.")
    panel = MemoryPanel(memory)
    tab = panel.recall
    assert tab.thread_box.layout.display == "none" and tab.open_buttons == []
    tab.query.value = "what did I say about the Berlin dataset dates?"
    tab.button.click()
    assert ">#</th>" in tab.results.value  # rows numbered, as the buttons name them
    (button,) = [b for b in tab.open_buttons if b.description == "1. berlin-data"]
    assert "#5" in button.tooltip
    button.click()
    assert tab.thread_box.layout.display != "none"
    html = tab.transcript.value
    said = [
        "Load the &lt;b&gt;Berlin&lt;/b&gt; file, please.",
        "Loaded; df has 12 rows.",
        "The Berlin dataset has &lt;script&gt;alert(1)&lt;/script&gt; dates.",
        "Noted: the Berlin dates are odd.",
    ]
    positions = [html.index(text) for text in said]
    assert positions == sorted(positions)  # in order
    assert "<script>" not in html and "<b>Berlin" not in html
    assert "TOOL-RESULT" not in html and "PRIVATE" not in html and "list_variables" not in html
    assert "4 messages" in html and "berlin-data" in panel.message.value
    marked = html[html.index(f"#{matched} (found by recall)") :]
    assert marked.index("&lt;script&gt;") < marked.index("Noted: the Berlin")  # this one
    assert html.count("found by recall") == 1
    tab.close_button.click()
    assert tab.thread_box.layout.display == "none" and tab.transcript.value == ""
    live = len(widget_registry)
    tab.button.click()  # a new search closes the buttons it replaces
    assert len(widget_registry) == live


def test_the_project_selector_starts_on_the_notebooks_project_and_narrows_facts_and_preview(
    memory: Memory,
) -> None:
    user = memory.add_fact("Prefers polars for every dataset", category="preference")
    alpha = memory.add_fact("The alpha dataset's target column is churned_90d", project="alpha")
    beta = memory.add_fact("The beta dataset's target column is revenue_q3", project="beta")
    panel = MemoryPanel(memory, project=lambda: "alpha")  # the notebook's project
    picker = panel.project.widget
    assert list(picker.options) == ["(all projects)", "(user only)", "alpha", "beta"]
    assert picker.value == "alpha"  # the notebook's project
    assert set(panel.fact_checks) == {user["id"], alpha["id"]}
    rows = dict(zip(panel.fact_checks, panel.fact_rows.children, strict=True))
    assert rows[alpha["id"]].children[4].value == "<small>alpha</small>"  # each says its project
    assert rows[user["id"]].children[4].value == "<small>user</small>"
    panel.context.value = "which target column does the dataset have?"
    block = panel.last_preview.block
    assert "churned_90d" in block and "polars" in block and "revenue_q3" not in block
    assert block == memory.preview("which target column does the dataset have?", project="alpha")

    picker.value = "beta"
    assert set(panel.fact_checks) == {user["id"], beta["id"]}
    block = panel.last_preview.block
    assert "revenue_q3" in block and "churned_90d" not in block
    assert any("revenue_q3" in v for v in sent_values(panel.preview_block, "value"))

    picker.value = "(user only)"
    assert set(panel.fact_checks) == {user["id"]}
    assert "polars" in panel.last_preview.block and "_90d" not in panel.last_preview.block
    assert "revenue" not in panel.last_preview.block

    picker.value = "(all projects)"
    assert set(panel.fact_checks) == {user["id"], alpha["id"], beta["id"]}
    assert "revenue_q3" not in panel.last_preview.block  # a turn never sees every project
    panel.close()


def test_the_history_tab_follows_the_project_selector(memory: Memory) -> None:
    """Found by a review: the History tab listed every project's events, so a notebook in
    beta showed alpha's fact texts; now it shows the selector's, each named under all."""
    memory.add_fact("Prefers polars for every dataset", category="preference")
    memory.add_fact("The alpha dataset's target column is churned_90d", project="alpha")
    memory.add_fact("The beta dataset's <b>target</b> column is revenue_q3", project="beta")
    panel = MemoryPanel(memory, project=lambda: "beta")
    shown = panel.history.value
    assert "revenue_q3" in shown and "polars" in shown and "churned_90d" not in shown
    assert "&lt;b&gt;target&lt;/b&gt;" in shown and "<b>target" not in shown  # escaped
    assert ">project</th>" not in shown
    panel.project.widget.value = "alpha"
    assert "churned_90d" in panel.history.value and "revenue_q3" not in panel.history.value
    panel.project.widget.value = "(all projects)"
    shown = panel.history.value
    assert "churned_90d" in shown and "revenue_q3" in shown and ">project</th>" in shown
    panel.close()


def test_the_project_selector_follows_a_project_switch_until_the_user_picks(
    memory: Memory,
) -> None:
    memory.add_fact("The alpha table has 7043 rows", project="alpha")
    here = ["alpha"]  # the session's project, as the notebook switches it
    panel = MemoryPanel(memory, project=lambda: here[0])
    here[0] = "gamma"  # %memory project gamma: a project with no facts yet
    panel.refresh()
    assert panel.project.widget.value == "gamma" and "gamma" in panel.project.widget.options
    panel.project.widget.value = "alpha"  # the user's own choice stays
    here[0] = "delta"
    panel.refresh()
    assert panel.project.widget.value == "alpha"
    panel.close()
