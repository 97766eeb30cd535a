"""Forgetting through chat works: a fact stated in one cell and "please forget that…" in
the next is gone after a flush (offline model), and ``%memory history`` shows both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from journal_rows import events, memory_json

from deerflow_nb.notebook.session import get_session


def facts(home: Path) -> list[dict[str, Any]]:
    return memory_json(home)["facts"]


def agent_cell(shell: InteractiveShell, message: str) -> str:
    """Run one ``%%agent`` cell; return what it printed."""
    with capture_output() as cap:
        result = shell.run_cell(f"%%agent\n{message}")
    assert result.success, result.error_in_exec or result.error_before_exec
    return cap.stdout


def test_a_fact_forgotten_in_chat_is_gone_after_flush(shell: InteractiveShell, home: Path) -> None:
    assert get_session(shell).settings.is_offline

    agent_cell(shell, "I prefer polars over pandas for dataframes.")
    shell.run_line_magic("memory", "flush")
    (fact,) = [f for f in facts(home) if "polars" in f["content"].lower()]

    agent_cell(shell, "Please forget that I prefer polars.")
    note = shell.run_line_magic("memory", "flush")
    assert "folded 1 thread" in str(note)
    assert [f for f in facts(home) if "polars" in f["content"].lower()] == []

    kinds = [(e["kind"], e["fact_id"]) for e in events(home)]
    assert ("add", fact["id"]) in kinds and ("remove", fact["id"]) in kinds
    history = shell.run_line_magic("memory", "history")
    text = str(history)
    assert text.index("remove") < text.index("add")  # newest first: the forget, then the add
    assert fact["id"] in text and "polars" in text.lower()
    story = shell.run_line_magic("memory", f"history {fact['id']}")
    assert [e["kind"] for e in story.events] == ["add", "remove"]


def test_an_edited_fact_does_not_live_on_in_the_profile(
    shell: InteractiveShell, home: Path
) -> None:
    """The issue's path: a fact and the profile sentence folded from the same turn, then
    ``%memory edit``: the preview must not tell the model the old text any more."""
    agent_cell(shell, "I work at Orange on churn models.")
    shell.run_line_magic("memory", "flush")
    (fact,) = [f for f in facts(home) if "Orange" in f["content"]]
    assert "Orange" in str(shell.run_line_magic("memory", "preview")).split("Facts:")[0]

    shell.run_line_magic("memory", f'edit {fact["id"]} "Works at SFR on churn models"')
    preview = str(shell.run_line_magic("memory", "preview"))
    assert "Orange" not in preview
    assert "Works at SFR on churn models" in preview
    sections = [e for e in events(home) if e["kind"] == "section" and e["source"] == "manual"]
    assert sections and "Orange" in sections[0]["old_content"]
