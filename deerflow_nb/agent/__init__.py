"""The lead agent, its tools and sub-agents, and the ``%%agent`` magic (in ``agent.magic``)."""

from __future__ import annotations

from .core import Agent, TurnResult

__all__ = ["Agent", "TurnResult"]
