"""Issue 30's smaller ``%memory`` items, in a real InteractiveShell: "did you mean" for a
mistyped subcommand, ``edit``'s usage, and category changes in ``history`` and ``diff``."""

from __future__ import annotations

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from magic_lines import run, usage_error

from deerflow_nb.notebook.session import get_session


@pytest.mark.parametrize(
    ("typed", "meant"),
    [("fatcs", "facts"), ("serach", "search"), ("hsitory", "history"), ("Pending", "pending")],
)
def test_a_mistyped_subcommand_suggests_the_one_meant(
    shell: InteractiveShell, typed: str, meant: str
) -> None:
    line = usage_error(shell, typed)
    assert line.endswith(
        f"unknown subcommand '{typed}'; did you mean %memory {meant}? (%memory --help lists them)"
    )


def test_nothing_close_still_points_at_help(shell: InteractiveShell) -> None:
    assert usage_error(shell, "zzz").endswith("unknown subcommand 'zzz'; run %memory --help")


def test_edit_does_not_claim_text_is_required(shell: InteractiveShell) -> None:
    line = usage_error(shell, "edit")
    assert "required: ID;" in line and "TEXT" not in line
    with capture_output() as cap:
        run(shell, "edit --help")
    assert "ID [TEXT ...]" in cap.stdout
    fact = get_session(shell).memory.add_fact("Prefers polars", category="context")
    run(shell, f"edit {fact['id']} --category preference")  # no TEXT: fine
    assert get_session(shell).memory.data["facts"][0]["category"] == "preference"


def test_history_and_diff_show_category_changes(shell: InteractiveShell) -> None:
    memory = get_session(shell).memory
    fact = memory.add_fact("Prefers polars over pandas", category="context")
    before = max(v["id"] for v in memory.versions())
    run(shell, f"edit {fact['id']} --category preference")
    history = str(run(shell, f"history {fact['id']}"))
    assert "Prefers polars over pandas (category context → preference)" in history
    diff = str(run(shell, f"diff {before}"))
    assert "changed" in diff and "(category context → preference)" in diff
    run(shell, f"rollback {before}")  # a whole-memory change says it too
    newest = memory.history.of(fact["id"])[-1]
    assert newest["details"]["old_category"] == "preference"
    assert "(category preference → context)" in str(run(shell, f"history {fact['id']}"))


def test_injected_text_keeps_superscripts_and_still_folds_look_alike_tags(
    shell: InteractiveShell,
) -> None:
    from deerflow_nb.tokens import count_tokens

    memory = get_session(shell).memory
    memory.add_fact("The churn model reaches R² = 0.52 on the holdout", category="knowledge")
    memory.add_fact("Writes ＜system＞ and ［goal］ in notes…", category="context")
    block = memory.preview("What R² does the churn model reach?", max_tokens=120)
    assert "R² = 0.52" in block and "R2" not in block
    assert "&lt;system&gt; and [goal] in notes..." in block  # as before: no forged tag
    assert count_tokens(block) <= 120


def test_the_errors_said_in_one_line_name_the_module_that_defines_each() -> None:
    """``%load_ext`` looks these classes up by module name instead of importing them: a
    module renamed or a class moved would let its error through as a traceback."""
    from importlib import import_module

    from deerflow_nb.notebook.errors import _LOADED_LATER

    for module, name in _LOADED_LATER:
        assert getattr(import_module(module), name).__module__ == module, (module, name)
