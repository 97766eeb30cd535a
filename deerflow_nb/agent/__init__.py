"""The lead agent: its turn loop, middleware, tools, sub-agents and summarization (the
``%%agent`` magic that drives it is in ``notebook/agent_magic.py``)."""

from __future__ import annotations

from .core import Agent, TurnResult

__all__ = ["Agent", "TurnResult"]
