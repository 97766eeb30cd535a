"""Registers ``%%agent`` and ``%memory`` on a shell, and tears them down."""

from __future__ import annotations

from typing import Any

from .session import close_session, get_session


def register(shell: Any) -> None:
    """Register both magics, and open the session's memory so that folds a killed
    kernel left pending are picked up now."""
    from .agent.magic import AgentMagics
    from .memory_magic import MemoryMagics

    shell.register_magics(AgentMagics(shell))
    shell.register_magics(MemoryMagics(shell))
    get_session(shell).memory  # noqa: B018 - opening Memory schedules pending folds


def shutdown(shell: Any) -> None:
    """Flush pending memory folds and release the session."""
    close_session(shell)
