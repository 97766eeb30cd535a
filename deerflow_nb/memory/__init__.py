"""Long-term memory: the ``Memory`` API (the write side, through its gate), the read door
(``MemoryReader``, ``open_reader``), and the injection helpers (loaded on first use).

These names are the facade: nothing outside ``memory/`` imports its other modules."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .api import RECALL_K, Memory
from .conversation import Conversation
from .fact_query import FactQuery
from .fact_query import Sort as FactSort
from .groups import ReadOnlyMemory
from .model_reply import ExtractionError
from .people import added_by, changed_by
from .reader import MemoryReader, open_reader
from .readside.fold_records import summary as fold_summary
from .reports import ApplyReport, FlushReport
from .scopes import Scope, View, project_names
from .scopes import view as scoped_view
from .sharing import SyncReport
from .store import MemoryFileError, empty_memory
from .updates.updater import MAX_FACT_CHARS

if TYPE_CHECKING:
    from .folding.extraction import build_messages as extraction_messages
    from .folding.extraction import parse as parse_extraction
    from .retrieval.block import escape as escape_for_block
    from .retrieval.embedder import get_embedder
    from .retrieval.excerpt import excerpt
    from .retrieval.injection import explain_injection, format_memory_for_injection, select_facts

# Facade names whose modules load on first use (numpy, the extraction prompt, ranking).
_LAZY = {
    "escape_for_block": ("retrieval.block", "escape"),
    "excerpt": ("retrieval.excerpt", "excerpt"),
    "explain_injection": ("retrieval.injection", "explain_injection"),
    "extraction_messages": ("folding.extraction", "build_messages"),
    "format_memory_for_injection": ("retrieval.injection", "format_memory_for_injection"),
    "get_embedder": ("retrieval.embedder", "get_embedder"),
    "parse_extraction": ("folding.extraction", "parse"),
    "select_facts": ("retrieval.injection", "select_facts"),
}

__all__ = [
    "MAX_FACT_CHARS",
    "RECALL_K",
    "ApplyReport",
    "Conversation",
    "ExtractionError",
    "FactQuery",
    "FactSort",
    "FlushReport",
    "Memory",
    "MemoryFileError",
    "MemoryReader",
    "ReadOnlyMemory",
    "Scope",
    "SyncReport",
    "View",
    "added_by",
    "changed_by",
    "empty_memory",
    "escape_for_block",
    "excerpt",
    "explain_injection",
    "extraction_messages",
    "fold_summary",
    "format_memory_for_injection",
    "get_embedder",
    "open_reader",
    "parse_extraction",
    "project_names",
    "scoped_view",
    "select_facts",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        module, attribute = _LAZY[name]
        return getattr(import_module(f"{__name__}.{module}"), attribute)
    raise AttributeError(f"module 'deerflow_nb.memory' has no attribute {name!r}")
