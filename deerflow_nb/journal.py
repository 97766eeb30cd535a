"""``deerflow_nb.journal`` stays importable (DESIGN's public names); the journal lives in
``storage/journal.py``."""

from __future__ import annotations

from .storage.journal import Journal

__all__ = ["Journal"]
