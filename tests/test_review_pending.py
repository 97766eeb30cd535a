"""Review mode without surprises (issue 22 item 3): a fold with nothing to change waits
for nobody, and the ``%%agent`` footer says when folds wait for review."""

from __future__ import annotations

from pathlib import Path

from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from journal_rows import journal_turn

from deerflow_nb.memory import Memory
from deerflow_nb.notebook.session import get_session


def test_a_fold_with_no_changes_creates_no_pending_entry(home: Path) -> None:
    mem = Memory(home)
    try:
        mem.review.enabled = True
        # a turn the extractor finds nothing in: no "(no changes)" proposal to approve
        journal_turn(mem, "fresh", "What is the capital of France?", reply="Paris.")
        mem.enqueue("fresh")
        report = mem.flush(timeout=60)
        assert report.failed == {} and report.proposed == []
        assert report.folded == ["fresh"] and report.pending == 0
        assert mem.pending() == [] and mem.pending_count() == 0
        (fold,) = mem.history.folds(limit=5)
        assert fold["source"] == "fresh" and fold["outcome"] == "nothing to keep"
        assert mem.data["facts"] == []
        # the same through apply: an empty diff, and one whose sections all say "no update"
        empty = mem.apply({"newFacts": [], "factsToRemove": []}, source="t-empty")
        assert empty.outcome == "nothing to keep" and empty.pending_id is None
        quiet = mem.apply(
            {"user": {"workContext": {"summary": "x", "shouldUpdate": False}}}, source="t-q"
        )
        assert quiet.pending_id is None and mem.pending() == []
        # a diff that changes something still waits for review
        held = mem.apply(
            {"newFacts": [{"content": "Prefers vim", "category": "preference", "confidence": 0.9}]},
            source="t-vim",
        )
        assert held.pending_id is not None and mem.pending_count() == 1
        assert mem.data["facts"] == []
    finally:
        mem.close()


def agent_footer(shell: InteractiveShell, cell: str) -> tuple[str, str]:
    """The last ``text/plain`` line of the turn's display (its footer) and its HTML."""
    with capture_output() as cap:
        result = shell.run_cell(cell)
    assert result.success, result.error_in_exec
    final = [o for o in cap.outputs if "text/html" in o.data][-1]
    return final.data["text/plain"].splitlines()[-1], final.data["text/html"]


def test_the_agent_footer_says_when_folds_wait_for_review(shell: InteractiveShell) -> None:
    footer, _ = agent_footer(shell, "%%agent -t notes\nI prefer vim over emacs.")
    assert "review" not in footer  # review mode off: no note
    memory = get_session(shell).memory
    memory.review.enabled = True
    project = get_session(shell).project.name
    footer, html = agent_footer(shell, "%%agent -t notes\nI use ruff for linting.")
    assert footer.endswith(
        f"facts injected · project {project} · memory: review mode — this turn's fold "
        "will wait for review "
        "(%memory pending)"
    ), footer
    assert "memory: review mode" in html
    report = memory.flush(timeout=60)
    assert report.proposed == ["notes"] and memory.pending_count() == 1
    # --no-memory: this turn is never folded, but what already waits is still said
    footer, _ = agent_footer(shell, "%%agent -t other --no-memory\nHello there.")
    assert footer.endswith(
        f"injected · project {project} · memory: review mode — 1 change awaits review "
        "(%memory pending)"
    ), footer
    footer, _ = agent_footer(shell, "%%agent -t notes\nI also use mypy.")
    assert "this turn's fold will wait for review; 1 change awaits review" in footer
    memory.approve("all")
    memory.flush(timeout=60)
    memory.review.reject("all")
    memory.review.enabled = False
    footer, _ = agent_footer(shell, "%%agent -t notes\nThanks.")
    assert "review" not in footer
