"""Registers ``%%agent`` and ``%memory`` on a shell, and tears them down.

Loading stays light: the magic classes import the agent and memory machinery (and
through sqlite-utils, pandas) on first use, not at ``%load_ext``. The one exception
is a journal with folds that a killed kernel left pending: a cheap stdlib check finds
them, and only then is memory opened, in the background, to fold them.
"""

from __future__ import annotations

import sqlite3
import threading
from contextlib import closing
from typing import Any

from .config import JOURNAL_FILENAME, default_home
from .session import close_session, get_session


def register(shell: Any) -> None:
    """Register both magics and pick up folds a killed kernel left pending."""
    from .agent.magic import AgentMagics
    from .memory_magic import MemoryMagics

    shell.register_magics(AgentMagics(shell))
    shell.register_magics(MemoryMagics(shell))
    if has_pending_folds():
        threading.Thread(
            target=lambda: get_session(shell).memory, name="deerflow-nb-recover", daemon=True
        ).start()


def has_pending_folds() -> bool:
    """Whether the home's journal holds queued folds, read with the stdlib only."""
    path = default_home() / JOURNAL_FILENAME
    if not path.exists():
        return False
    try:
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1)) as conn:
            return bool(conn.execute("SELECT 1 FROM memory_queue LIMIT 1").fetchone())
    except sqlite3.Error:
        return False


def shutdown(shell: Any) -> None:
    """Release the session: its memory worker stops, and its pending folds stay durable
    in the journal (folded on the next load) rather than holding up the unload."""
    close_session(shell)
