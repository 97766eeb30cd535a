"""The reader's ranked reads: facts found for a query (``search``, as ``Memory.search``
ranks them) and the block a turn injects (``preview``, and why: ``explain``), over a view
of the scope asked, with the home's embedder read-only.

``MemoryReader`` inherits them: it gives ``settings``, ``shared`` (memory.json's revision and
document) and ``embedder`` (a new read-only embedder). The ranking itself is
``retrieval/injection.py``'s, the one a turn and ``Memory`` use, so a preview is exactly what a
turn injects.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Any, NamedTuple

from ...config import Settings
from ..scopes import USER, Scope, View, Views, asked

if TYPE_CHECKING:
    from ..retrieval.ranking import Context

#: ``embedder``'s default in the ranked reads: the home's own (``memory.embeddings``), made
#: once per reader, reading the vector cache read-only.
HOME_EMBEDDER: Any = object()


class Explained(NamedTuple):
    """A turn's block and why: ``why`` holds ``explain_injection``'s rows (the fact and its
    score parts, in the block's order), ``seen`` how many facts the turn's scope holds."""

    block: str
    why: list[dict[str, Any]]
    seen: int


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

    def view(self, scope: Scope) -> View:
        """The current revision as ``scope`` sees it (filtered before any ranking), kept
        while the revision lasts."""
        revision, data = self.shared()
        return self._views.of(data, scope, revision)

    def search(
        self,
        query: str,
        k: int = 10,
        *,
        scope: Scope = USER,
        relevant_only: bool = True,
        embedder: Any = HOME_EMBEDDER,
    ) -> list[tuple[dict[str, Any], float]]:
        """The facts ``Memory.search`` finds for ``query`` in ``scope`` (its ``project`` and
        ``everywhere`` name one: ``scopes.asked``), best first, scored by the same ranking
        (``retrieval.injection.rank_facts``), without recording their use."""
        from ..retrieval.injection import rank_facts

        ranker = self._ranker(embedder)
        found = rank_facts(self.view(scope), query, embedder=ranker, relevant_only=relevant_only)
        return found[:k]

    def preview(
        self,
        context: Context = None,
        max_tokens: int | None = None,
        *,
        project: str | None = None,
        embedder: Any = HOME_EMBEDDER,
    ) -> str:
        """Exactly the ``<memory>`` text the next turn in ``project`` would inject (None:
        outside any project, the user's facts only), as ``Memory.preview`` gives it."""
        return self.explain(context, max_tokens, project=project, embedder=embedder).block

    def explain(
        self,
        context: Context = None,
        max_tokens: int | None = None,
        *,
        project: str | None = None,
        embedder: Any = HOME_EMBEDDER,
    ) -> Explained:
        """``preview``'s block with why each fact is in it and how many facts the turn's
        scope holds (the inspector's injection page), from one ranking pass."""
        from ..retrieval.injection import explain_injection

        shown = self.view(asked(project))
        ranker = self._ranker(embedder)
        block, why = explain_injection(shown, context, self._budget(max_tokens), embedder=ranker)
        return Explained(block, why, len(shown.facts))

    def _budget(self, max_tokens: int | None) -> int:
        return self.settings.memory.max_injection_tokens if max_tokens is None else max_tokens

    def _ranker(self, embedder: Any) -> Any:
        """``embedder``, or for ``HOME_EMBEDDER`` this reader's own, made once."""
        if embedder is not HOME_EMBEDDER:
            return embedder
        if self._home_embedder is HOME_EMBEDDER:
            self._home_embedder = self.embedder()
        return self._home_embedder
