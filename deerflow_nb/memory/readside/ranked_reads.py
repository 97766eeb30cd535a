"""The reader's ranked reads: facts found for a query (``search``, as ``Memory.search``
ranks them) and the block a turn injects (``injection``, ``preview``, ``explain``), over a
snapshot of the scope asked, with the home's embedder read-only.

``MemoryReader`` inherits them: it gives ``settings``, ``shared`` (memory.json's revision and
document) and ``embedder`` (a new read-only embedder). The ranking itself is
``retrieval/injection.py``'s, the one a turn and ``Memory`` use, so a preview is exactly what a
turn injects.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from ...config import Settings
from ..scopes import Scope, Snapshot, Views, asked

if TYPE_CHECKING:
    from ..retrieval.ranking import Context

#: ``embedder``'s default in the ranked reads: the home's own (``memory.embeddings``), made
#: once per reader, reading the vector cache read-only.
HOME_EMBEDDER: Any = object()


class RankedReads:
    """Search and injection over one home's memory.json, read-only."""

    settings: Settings

    def __init__(self) -> None:
        self._views = Views()
        self._home_embedder: Any = HOME_EMBEDDER  # made on first use

    def shared(self) -> tuple[Hashable | None, dict[str, Any]]:
        raise NotImplementedError  # MemoryReader's

    def embedder(self) -> Any:
        raise NotImplementedError  # MemoryReader's

    def snapshot(self, scope: Scope) -> Snapshot:
        """The current revision as ``scope`` sees it (filtered before any ranking), kept
        while the revision lasts."""
        revision, data = self.shared()
        return self._views.of(data, scope, revision)

    def search(
        self,
        query: str,
        k: int = 10,
        *,
        project: str | None = None,
        everywhere: bool = False,
        relevant_only: bool = True,
        embedder: Any = HOME_EMBEDDER,
    ) -> list[tuple[dict[str, Any], float]]:
        """``Memory.search``'s facts, best first, scored (``retrieval.injection.rank_facts``
        over this read's snapshot), without recording their use: a reader writes nothing."""
        from ..retrieval.injection import rank_facts

        snapshot = self.snapshot(asked(project, everywhere))
        found = rank_facts(
            snapshot, query, embedder=self._ranker(embedder), relevant_only=relevant_only
        )
        return found[:k]

    def injection(
        self,
        context: Context = None,
        max_tokens: int | None = None,
        *,
        project: str | None = None,
        embedder: Any = HOME_EMBEDDER,
    ) -> tuple[str, list[dict[str, Any]]]:
        """The block a turn in ``project`` injects (None: outside any project, the user's
        facts only) and the facts it lists, as ``Memory.injection`` gives them."""
        from ..retrieval.injection import inject

        snapshot = self.snapshot(asked(project))
        return inject(snapshot, self._budget(max_tokens), context, embedder=self._ranker(embedder))

    def preview(
        self,
        context: Context = None,
        max_tokens: int | None = None,
        *,
        project: str | None = None,
        embedder: Any = HOME_EMBEDDER,
    ) -> str:
        """Exactly the ``<memory>`` text the next turn in ``project`` would inject."""
        return self.injection(context, max_tokens, project=project, embedder=embedder)[0]

    def explain(
        self,
        context: Context = None,
        max_tokens: int | None = None,
        *,
        project: str | None = None,
        embedder: Any = HOME_EMBEDDER,
    ) -> tuple[str, list[dict[str, Any]], int]:
        """``preview``'s block, why each fact is in it (``explain_injection``'s rows, in the
        block's order) and how many facts the scope sees: the inspector's injection page."""
        from ..retrieval.injection import explain_injection

        snapshot = self.snapshot(asked(project))
        ranker = self._ranker(embedder)
        block, why = explain_injection(snapshot, context, self._budget(max_tokens), embedder=ranker)
        return block, why, len(snapshot.facts)

    def _budget(self, max_tokens: int | None) -> int:
        return self.settings.memory.max_injection_tokens if max_tokens is None else max_tokens

    def _ranker(self, embedder: Any) -> Any:
        """``embedder``, or for ``HOME_EMBEDDER`` this reader's own, made once."""
        if embedder is not HOME_EMBEDDER:
            return embedder
        if self._home_embedder is HOME_EMBEDDER:
            self._home_embedder = self.embedder()
        return self._home_embedder
