"""Registers ``%%agent`` and ``%memory`` on a shell, and tears them down.

Loading stays light: the magic classes import the agent and memory machinery (and
through sqlite-utils, pandas) on first use, or in the background once the cell that
loaded the extension ends (``warmup``), not at ``%load_ext``. The one exception
is a journal with folds that a killed kernel left pending: a cheap stdlib check finds
them, and only then is memory opened, in the background, to fold them.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import Any

from IPython.core.magic import MAGIC_NO_VAR_EXPAND_ATTR

from ..config import JOURNAL_FILENAME, default_home
from ..storage.queue import has_pending_folds
from .cell_refs import start_recording, stop_recording
from .session import close_session, get_session
from .warmup import finish, schedule

# name -> (kind, module, class): what each magic's first use imports and registers.
_MAGICS = {
    "agent": ("line_cell", "deerflow_nb.notebook.agent_magic", "AgentMagics"),
    "memory": ("line", "deerflow_nb.notebook.memory_magic", "MemoryMagics"),
}


def _lazy_magic(shell: Any, name: str) -> Callable[..., Any]:
    """A stand-in registered under ``name`` that imports the real magics class on first use,
    registers it in its own place, and passes the call on; ``%load_ext`` imports neither
    the agent nor the ``%memory`` grammar (about 45 ms together)."""
    _, module_name, class_name = _MAGICS[name]

    def magic(line: str = "", cell: str | None = None) -> Any:
        magics_class = getattr(importlib.import_module(module_name), class_name)
        instance = magics_class(shell)
        shell.register_magics(instance)
        method = getattr(instance, name)
        return method(line) if cell is None else method(line, cell)

    magic.__doc__ = f"%{name}: loaded on first use; run %{name} --help"
    setattr(magic, MAGIC_NO_VAR_EXPAND_ATTR, True)  # as the real ones: they expand their own
    return magic


def register(shell: Any) -> None:
    """Register both magics (their code loads on first use), record failed cells'
    errors (``{Err[n]}``, ``--error``), warm the first turn once the cell ends (``warmup``)
    and pick up folds a killed kernel left pending."""
    start_recording(shell)
    for name, (kind, _, _) in _MAGICS.items():
        shell.register_magic_function(_lazy_magic(shell, name), magic_kind=kind, magic_name=name)
    schedule(shell)
    if has_pending_folds(default_home() / JOURNAL_FILENAME):
        threading.Thread(
            target=lambda: get_session(shell).memory, name="deerflow-nb-recover", daemon=True
        ).start()


def shutdown(shell: Any) -> None:
    """Release the session: its memory worker stops, and its pending folds stay durable
    in the journal (folded on the next load) rather than holding up the unload."""
    stop_recording(shell)
    finish(shell)
    close_session(shell)
