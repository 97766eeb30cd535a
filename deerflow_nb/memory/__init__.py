"""Long-term memory: the ``Memory`` API (the write side, through its gate), the read door
(``MemoryReader``, ``open_reader``), and the injection helpers (loaded on first use).

These names are the facade: nothing outside ``memory/`` imports its other modules."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .api import Memory
from .extraction import ExtractionError
from .folds import summary as fold_summary
from .reader import MemoryReader, open_reader
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
    "MemoryReader",
    "fold_summary",
    "format_memory_for_injection",
    "open_reader",
    "select_facts",
]


def __getattr__(name: str) -> Any:
    if name in ("format_memory_for_injection", "select_facts"):
        from . import injection

        return getattr(injection, name)
    raise AttributeError(f"module 'deerflow_nb.memory' has no attribute {name!r}")
