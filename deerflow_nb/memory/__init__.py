"""Long-term memory: the ``Memory`` API, and the injection helpers (loaded on first use)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .api import Memory
from .extraction import ExtractionError
from .reports import ApplyReport, FlushReport
from .store import MemoryFileError

if TYPE_CHECKING:
    from .injection import format_memory_for_injection, select_facts

__all__ = [
    "ApplyReport",
    "ExtractionError",
    "FlushReport",
    "Memory",
    "MemoryFileError",
    "format_memory_for_injection",
    "select_facts",
]


def __getattr__(name: str) -> Any:
    if name in ("format_memory_for_injection", "select_facts"):
        from . import injection

        return getattr(injection, name)
    raise AttributeError(f"module 'deerflow_nb.memory' has no attribute {name!r}")
