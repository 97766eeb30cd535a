"""Running ``%memory`` lines in a test shell: the value, or the one line of a UsageError."""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output


def run(shell: InteractiveShell, line: str) -> Any:
    return shell.run_line_magic("memory", line)


def usage_error(shell: InteractiveShell, line: str) -> str:
    """Run ``%memory line`` as a cell; the one line IPython shows for its UsageError."""
    with capture_output() as cap:
        result = shell.run_cell(f"%memory {line}")
    assert isinstance(result.error_in_exec, UsageError), (line, result.error_in_exec)
    lines = [ln for ln in cap.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, cap.stderr
    return lines[0]
