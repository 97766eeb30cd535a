"""deerflow_nb: DeerFlow-style long-term memory and a lightweight lead agent for Jupyter.

``%load_ext deerflow_nb`` registers ``%%agent`` and ``%memory``. Importing the package
stays light: ``Memory`` and ``Agent`` are resolved on first use, and streamlit, openai
and pandas are only imported by the calls that need them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["Agent", "Memory", "__version__", "load_ipython_extension", "unload_ipython_extension"]

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from .agent import Agent
    from .memory import Memory


def __getattr__(name: str) -> Any:
    if name == "Memory":
        from .memory import Memory

        return Memory
    if name == "Agent":
        from .agent import Agent

        return Agent
    raise AttributeError(f"module 'deerflow_nb' has no attribute {name!r}")


def load_ipython_extension(ipython: InteractiveShell) -> None:
    """Register the ``%%agent`` and ``%memory`` magics."""
    from .notebook.magics import register

    register(ipython)


def unload_ipython_extension(ipython: InteractiveShell) -> None:
    """Stop background work started by the magics; pending folds stay queued in the
    journal and are folded the next time memory opens on this home."""
    from .notebook.magics import shutdown

    shutdown(ipython)
