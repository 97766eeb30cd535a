"""The first turn, warmed while the user types the next cell.

``%load_ext`` stays light (it imports neither the agent nor memory); but then the first
``%%agent`` or ``%memory`` pays for those imports (sqlite-utils alone brings pandas when it
is installed), for opening memory, for the fact index and, with embeddings, for loading the
model and the fact vectors. When the cell that ran ``%load_ext`` ends, one background
thread does all of it instead: the magics' modules are imported and, for a home already
in use (a journal or memory.json there), memory is opened and the next turn's ranking
made once, which builds the index and, with embeddings, loads the model and the vectors.
A home never used stays untouched. Anything failing here is only logged: the turn that
needs it will say it plainly.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import logging
import threading
from typing import Any

from ..config import JOURNAL_FILENAME, MEMORY_FILENAME, default_home

log = logging.getLogger(__name__)
EVENT = "post_run_cell"
_MODULES = (
    "deerflow_nb.notebook.agent_magic",
    "deerflow_nb.notebook.memory_magic",
    "deerflow_nb.agent",
    "deerflow_nb.memory.retrieval.injection",
    "deerflow_nb.memory.retrieval.recall",
    "openai",  # the model client (the offline model is served to it over HTTP too)
)
_ATTR = "_deerflow_nb_warmup"
_THREAD_ATTR = "_deerflow_nb_warmup_thread"
THREAD = "deerflow-nb-warm"
# Seconds a process leaving while the warm-up runs waits for it: a daemon thread stopped
# inside a native runtime (onnxruntime, torch) at interpreter shutdown can abort the process.
EXIT_WAIT = 10.0


def schedule(shell: Any) -> None:
    """Warm once, in the background, when the current cell ends (no-op without events)."""
    events = getattr(shell, "events", None)
    if events is None or getattr(shell, _ATTR, None) is not None:
        return

    def after_cell(*_: Any) -> None:
        cancel(shell)
        thread = threading.Thread(target=warm, args=(shell,), name=THREAD, daemon=True)
        setattr(shell, _THREAD_ATTR, thread)
        thread.start()
        atexit.register(thread.join, EXIT_WAIT)

    setattr(shell, _ATTR, after_cell)
    events.register(EVENT, after_cell)


def cancel(shell: Any) -> None:
    """Forget a warm-up not started yet."""
    callback = getattr(shell, _ATTR, None)
    if callback is None:
        return
    setattr(shell, _ATTR, None)
    with contextlib.suppress(ValueError):  # already gone
        shell.events.unregister(EVENT, callback)


def finish(shell: Any) -> None:
    """Forget a warm-up not started yet and wait for one under way (``%unload_ext``: its
    session must not be reopened behind the unload)."""
    cancel(shell)
    thread = getattr(shell, _THREAD_ATTR, None)
    if thread is not None:
        thread.join()
        setattr(shell, _THREAD_ATTR, None)


def warm(shell: Any) -> None:
    """Import what a turn needs and, for a home in use, rank once as a turn would."""
    for name in _MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # an optional one missing (openai): the turn will say so
            log.info("could not import %s ahead of the first turn", name, exc_info=True)
    try:
        home = default_home()
        if not ((home / JOURNAL_FILENAME).exists() or (home / MEMORY_FILENAME).exists()):
            return
        from .session import get_session

        session = get_session(shell)
        session.memory.injection("warm up", project=session.project.name)  # a turn's scope
    except Exception:
        log.info("could not warm the first turn", exc_info=True)
