"""A home's fact vectors: the embedder made on first use, and warmed after every change.

Kept apart from ``embedder.py`` so that opening ``Memory`` imports no numpy: the embedder
module loads only when ``memory.embeddings`` is set and a turn, a search or a fold needs it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ...config import Settings
from ...llm.base import SAID_IN_ONE_LINE
from ...storage.journal import Journal

if TYPE_CHECKING:
    from .embedder import Embedder

log = logging.getLogger(__name__)
_UNSET: Any = object()


class FactVectors:
    """The embedder of one ``Memory`` (None when ``memory.embeddings`` is off)."""

    def __init__(self, settings: Settings, journal: Journal) -> None:
        self.settings = settings
        self.journal = journal
        self._embedder: Embedder | None = _UNSET

    @property
    def embedder(self) -> Embedder | None:
        if self._embedder is _UNSET:
            if self.settings.memory.embeddings:
                from .embedder import get_embedder

                self._embedder = get_embedder(self.settings, self.journal)
            else:
                self._embedder = None
        return self._embedder

    def warm(self, data: dict[str, Any]) -> None:
        """Embed the facts (and their words, for query expansion) at fold time, so the next
        turn's ranking is fast; a failure is logged, never raised into the change."""
        try:
            embedder = self.embedder
            if embedder is not None:
                from .terms import texts_to_embed

                embedder.warm(texts_to_embed([f["content"] for f in data.get("facts", [])]))
        except SAID_IN_ONE_LINE as exc:
            log.warning("could not compute fact embeddings: %s", exc)
        except Exception:
            log.warning("could not compute fact embeddings", exc_info=True)
