"""One fact query: the filter, sort and paging that every list of facts uses.

``%memory facts`` (``Memory.facts``), the panel's Facts tab, the inspector's facts table and
``forget_matching`` all describe what they want as a ``FactQuery`` and run it over the same
facts, so a fact listed in one is listed, in the same order, in the others. The query names
its ``scope``, and ``Scope.sees`` alone decides which facts that is: no view filters by
project itself. Ranking facts by
relevance to a message is another job (``retrieval/ranking.py``); this one only selects and orders.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..similarity import overlap
from .scopes import ALL_PROJECTS, Scope

Sort = Literal["confidence", "created", "updated", "category", "content", "none"]
_FIELDS = {"created": "createdAt", "updated": "updatedAt", "category": "category"}
LIKE_SHARE = 0.6  # a "forget …" request means a fact sharing this share of its content words


def confidence(fact: Mapping[str, Any]) -> float:
    """A fact's confidence as a number (0 when missing or empty)."""
    return float(fact.get("confidence") or 0.0)


@dataclass(frozen=True)
class FactQuery:
    """Which facts, in what order, which page. Empty fields select everything.

    ``scope`` is whose facts (``scopes.Scope``; default every project's, a whole-memory
    listing such as ``%memory facts --all`` or the review's).
    ``text`` keeps facts whose content holds it (case-insensitive); ``like`` keeps those a
    "forget …" request could mean: the text within, or most of the content words shared.
    ``sort`` orders by confidence (highest first unless ``descending=False``), by date,
    category or content (case-insensitive), or leaves the stored order (``"none"``)."""

    categories: tuple[str, ...] = ()
    min_confidence: float | None = None
    max_confidence: float | None = None
    text: str = ""
    like: str = ""
    sort: Sort = "confidence"
    descending: bool = True
    offset: int = 0
    limit: int | None = None
    scope: Scope = ALL_PROJECTS

    def matches(self, fact: Mapping[str, Any]) -> bool:
        """Whether ``fact`` passes every filter."""
        conf = confidence(fact)
        content = str(fact.get("content", ""))
        needle = self.text.strip().casefold()
        return (
            self.scope.sees(fact)
            and (not self.categories or fact.get("category") in self.categories)
            and (self.min_confidence is None or conf >= self.min_confidence)
            and (self.max_confidence is None or conf <= self.max_confidence)
            and (not needle or needle in content.casefold())
            and (not self.like or _could_mean(self.like, content))
        )

    def run(self, facts: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """The facts that match, sorted (stable: ties keep the stored order), then paged."""
        return self.page(facts)[0]

    def page(self, facts: Iterable[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
        """``run``'s page and how many facts matched in all (to say "10 of 35")."""
        found = [f for f in facts if self.matches(f)]
        if self.sort == "confidence":
            found.sort(key=confidence, reverse=self.descending)
        elif self.sort != "none":
            field = _FIELDS.get(self.sort, self.sort)
            found.sort(key=lambda f: str(f.get(field) or "").casefold(), reverse=self.descending)
        end = None if self.limit is None else self.offset + self.limit
        return found[self.offset : end], len(found)


def _could_mean(request: str, content: str) -> bool:
    """The request's text within the content, or most of its content words shared."""
    needle = " ".join(request.casefold().split())
    return needle in content.casefold() or overlap(request, content) >= LIKE_SHARE
