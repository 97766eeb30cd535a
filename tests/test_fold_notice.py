"""Memory changes in sight (issue 30 item 7): the cell whose turn a fold learned from says
what the fold did, redrawn in place (from the fold worker, in a real kernel); and the
offline model does not quote back a fact the user asked to forget while that fold waits."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import nbformat
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from nbclient import NotebookClient

from deerflow_nb.memory import Memory
from deerflow_nb.notebook.fold_notice import FoldNotices, fold_note
from deerflow_nb.notebook.session import get_session

MLFLOW = "Tends to log experiments in MLflow"
FORGET = "Please forget that I log experiments in MLflow"


def turn_outputs(shell: InteractiveShell, cell: str) -> list:
    with capture_output() as cap:
        result = shell.run_cell(cell)
    assert result.success, result.error_in_exec
    return cap.outputs


def test_the_offline_model_does_not_quote_a_fact_asked_to_be_forgotten(
    shell: InteractiveShell,
) -> None:
    memory = get_session(shell).memory
    memory.add_fact(MLFLOW, category="behavior")
    memory.add_fact("Prefers polars over pandas", category="preference")
    first = turn_outputs(shell, f"%%agent -t notes\n{FORGET}")[-1].data["text/plain"]
    assert "From memory" not in first
    assert "memory will forget “I log experiments in MLflow”" in first
    # The fold is still queued (30 s debounce): memory still holds the fact ...
    assert MLFLOW in {f["content"] for f in memory.data["facts"]}
    later = turn_outputs(shell, "%%agent\nWhere do I log experiments? And polars or pandas?")
    reply = later[-1].data["text/plain"]
    assert "From memory: Prefers polars over pandas." in reply  # ... but is not quoted
    assert "MLflow" not in reply.split("---")[0]


def test_the_turns_cell_says_what_its_fold_did_in_place(shell: InteractiveShell) -> None:
    memory = get_session(shell).memory
    memory.add_fact("Uses DuckDB for local analytics", category="knowledge")
    turn = turn_outputs(shell, "%%agent -t notes\nI prefer polars over pandas.")
    display_id = turn[0].transient["display_id"]
    assert not any("Memory" in o.data["text/plain"] for o in turn)  # not folded yet
    flushed = turn_outputs(shell, "%memory flush")  # the kernel moved on: a later cell folds
    updates = [o for o in flushed if o.update and o.transient.get("display_id") == display_id]
    assert len(updates) == 1, [o.data for o in flushed]
    shown = updates[0].data["text/plain"]
    assert shown.endswith("Memory updated: remembered “Prefers polars over pandas”")
    assert "fact injected" in shown  # the turn's own view, its footer kept
    assert (
        "<em>Memory updated: remembered “Prefers polars over pandas”</em>"
        in (updates[0].data["text/html"])
    )
    # A later fold of the thread is another turn's news: the cell is not redrawn again.
    again = turn_outputs(shell, "%%agent\nI work on a churn model for a telecom client.")
    flushed = turn_outputs(shell, "%memory flush")
    assert get_session(shell).notices.watching == []
    redrawn = {o.transient.get("display_id") for o in flushed if o.update}
    assert redrawn == {again[0].transient["display_id"]}


def test_a_fold_that_keeps_nothing_adds_no_line_nor_takes_a_later_ones(
    shell: InteractiveShell,
) -> None:
    quiet = turn_outputs(shell, "%%agent -t chat\nWhat is the capital of France?")
    flushed = turn_outputs(shell, "%memory flush")
    quiet_id = quiet[0].transient["display_id"]
    assert not [o for o in flushed if o.transient.get("display_id") == quiet_id]
    told = turn_outputs(shell, "%%agent\nI prefer polars over pandas.")  # same thread
    assert get_session(shell).notices.watching == ["chat"]  # only the new turn waits
    flushed = turn_outputs(shell, "%memory flush")
    (update,) = [o for o in flushed if o.update]
    assert update.transient["display_id"] == told[0].transient["display_id"]
    assert "Memory updated: remembered" in update.data["text/plain"]


def test_a_held_fold_says_what_waits_and_a_terminal_hears_it_next(home: Path) -> None:
    """Without a view that redraws (terminal IPython), the line waits for the next cell;
    a fold held for review names what waits, item by item."""
    with Memory(home) as memory:
        fact = memory.add_fact(MLFLOW, category="behavior")
        notices = FoldNotices(memory)
        memory.review.enabled = True
        notices.watch("t1", notices.mark(), None)
        change = memory.apply({"factsToRemove": [fact["id"]]}, source="t1").pending_id
        assert notices.take_later() == [
            f"Memory: waiting for your review as change #{change}: forget “{MLFLOW}” "
            "(%memory pending)"
        ]
        assert notices.take_later() == []  # once
        memory.review.enabled = False
        notices.watch("t1", notices.mark(), None)
        memory.approve([change])  # not a fold of t1: nothing to say yet
        assert notices.watching == ["t1"]
        memory.apply({"newFacts": [{"content": "Uses vim", "confidence": 0.9}]}, source="t1")
        assert notices.take_later() == ["Memory updated: remembered “Uses vim”"]
        notices.close()
    assert fold_note({"removed": ["f1"], "evicted": ["f2"]}, {"f1": "A", "f2": "B"}) == (
        "Memory updated: forgot “A”; let go of “B” to stay within memory.max_facts"
    )


def test_the_fold_worker_updates_the_cell_in_a_real_kernel(home: Path, tmp_path: Path) -> None:
    """In a kernel the fold runs in the background worker after the debounce, when the
    cell has finished: the worker's update reaches that cell's output by its display id."""
    (home / "config.yaml").write_text("memory:\n  debounce_seconds: 0.2\n", encoding="utf-8")
    with Memory(home) as memory:
        memory.add_fact("Uses DuckDB for local analytics", category="knowledge")
    wait = textwrap.dedent(
        """
        import time
        from deerflow_nb.notebook.session import get_session
        notices = get_session(get_ipython()).notices
        deadline = time.monotonic() + 90
        while notices.watching and time.monotonic() < deadline:
            time.sleep(0.1)
        print("waiting for:", notices.watching)
        """
    )
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext deerflow_nb"),
        nbformat.v4.new_code_cell("%%agent -t notes\nI prefer polars over pandas."),
        nbformat.v4.new_code_cell(wait),
    ]
    NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    assert nb.cells[2].outputs[0]["text"] == "waiting for: []\n"
    (turn,) = [o for o in nb.cells[1].outputs if o.get("output_type") == "display_data"]
    assert turn["data"]["text/plain"].endswith(
        "Memory updated: remembered “Prefers polars over pandas”"
    ), json.dumps(turn["data"])


def test_a_note_for_the_next_cell_says_whose_thread_it_was(home: Path) -> None:
    """Found by a review: in a terminal, a fold of project alpha's thread was told in the
    next cell, in project beta, as if it were beta's."""
    with Memory(home) as memory:
        thread = memory.add_messages(
            "t", [{"role": "user", "content": "I use vim."}], project="alpha"
        )
        notices = FoldNotices(memory)
        notices.watch(thread, notices.mark(), None)
        memory.apply({"newFacts": [{"content": "Uses vim", "confidence": 0.9}]}, source=thread)
        assert notices.take_later() == [
            f"Memory updated: remembered “Uses vim” (thread {thread}, project alpha)"
        ]
        notices.close()
