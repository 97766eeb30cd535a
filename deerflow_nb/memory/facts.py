"""``memory.facts``: the facts, listed (``list``), selected (``query``,
``page``, ``matching``), ranked (``search``), their use (``usage``) and hand edits
(``add``, ``edit``, ``forget``: ``updates/edits.py``), one group of ``Memory``'s facade."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .fact_query import FactQuery
from .scopes import Scope, View, asked
from .updates import fact_use as usage
from .updates.edits import Edits

if TYPE_CHECKING:
    from ..config import Settings
    from ..storage.journal import Journal
    from .reader import MemoryReader
    from .updates.gate import Gate

log = logging.getLogger(__name__)


class FactReads:
    """The facts of one home as the reader reads them (``memory.facts``' reads; a
    read-only home's, ``ReadOnlyMemory``)."""

    def __init__(self, reader: MemoryReader) -> None:
        self._reader = reader
        # the reader's own methods: listed, selected (a page of), how much each is used
        self.list, self.query, self.page, self.usage = (
            reader.facts, reader.query, reader.query_page, reader.usage
        )  # fmt: skip

    def matching(
        self, text: str, *, project: str | None = None, everywhere: bool = False
    ) -> list[dict[str, Any]]:
        """Facts a "forget …" request could mean (substring or most content words shared):
        the user's and ``project``'s (or ``everywhere``), as ``search`` looks."""
        return self._reader.query(
            FactQuery(like=text, sort="none", scope=asked(project, everywhere))
        )


class Facts(FactReads, Edits):
    """The facts of one home: read through the reader, changed through the gate."""

    def __init__(
        self,
        settings: Settings,
        gate: Gate,
        journal: Journal,
        reader: MemoryReader,
        view: Callable[[Scope], View],
        embedder: Callable[[], Any],
    ) -> None:
        FactReads.__init__(self, reader)
        Edits.__init__(self, settings, gate)
        self._journal = journal
        self._view = view
        self._embedder = embedder

    def search(
        self,
        query: str,
        k: int = 10,
        *,
        project: str | None = None,
        everywhere: bool = False,
        relevant_only: bool = True,
    ) -> list[tuple[dict[str, Any], float]]:
        """Facts relevant to ``query`` (``relevance``), best first, scored: the user's and
        ``project``'s (or ``everywhere``); ``relevant_only=False``: the nearest anyway."""
        from .retrieval.injection import rank_facts

        shared = self._view(asked(project, everywhere))
        results = rank_facts(shared, query, embedder=self._embedder(), relevant_only=relevant_only)
        results = results[:k]
        if relevant_only and query and query.strip():  # a fact found by a search is in use
            self._record_use(lambda db: usage.record_used(db, [f.get("id") for f, _ in results]))
        return results

    def record_injection(self, facts: list[dict[str, Any]], message: str) -> None:
        """Note one turn's injected facts (those sharing a word with ``message`` as used):
        one upsert in the journal, never a memory.json write; a failure is only logged."""
        if facts:
            self._record_use(lambda db: usage.record_injected(db, facts, message))

    def _record_use(self, write: Callable[[Any], Any]) -> None:
        try:
            with self._journal.transaction() as db:
                write(db)
        except Exception as exc:  # a busy or read-only journal must not break a turn
            log.warning("could not record fact use: %s", exc)
