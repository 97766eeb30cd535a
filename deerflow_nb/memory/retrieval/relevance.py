"""The relevance floor: whether a search found anything, and which of its results count.

A ranking orders everything it is given; a search must also say when nothing stored is
about the query, or a user (and the agent) cannot tell a real hit from filler. Scores
normalised per query (BM25 over its best match, min-max cosines) cannot say that: the best
result of an off-topic query scores as high as the best of an on-topic one. Two signals
that mean the same for every query can:

- **coverage**: the IDF-weighted share of the query's terms a text holds itself (its own
  words: not feedback terms, not its neighbours'). A term nothing stored holds weighs as
  the rarest (see ``BACKGROUND``), so a query about something absent ("dataframe
  library") is not covered by a fact holding only its common word ("library").
  In conversation recall a name the journal knows counts as held by every message of the
  threads naming it (``recall._coverage``).
- **similarity**: the raw cosine of the query with the text, with a floor per embedder
  measured (``SIMILARITY_FLOORS``), a high one (``UNMEASURED_FLOOR``) for the others.

A search found something when its best result's coverage reaches its floor
(``RECALL_FLOOR``, ``SEARCH_FLOOR``), or its similarity reaches the embedder's floor (in
conversation recall, only when its best coverage also reaches ``Floors.recall_coverage``:
a question sharing almost none of its words with anything stored is not found on
similarity alone); then it lists the results that hold a query term themselves, or are as
similar as the listing floor asks (a fact sharing no word with the query is listed only
when it is truly close).

How the floors were chosen: ``python benchmarks/relevance.py --calibrate`` prints both
signals' distributions for on-topic queries (LOCOMO questions against their conversations
and facts, the notebook journal's paraphrases) and off-topic ones
(``benchmarks/data/off_topic.json``: technical questions against personal conversations,
personal ones against a data-science notebook). The goal lets 5 % of off-topic queries
find something; the floors that decide it are fitted to let through at most half that
(2.5 %) of each fitting set, a margin for queries they never saw (a floor read at exactly
the goal's share of one sample is exceeded on about half of new ones):

- each coverage floor: the smallest value letting at most 2.5 % of each set through, for
  queries of more than ``SHORT_QUERY`` terms and, apart, for the shorter ones (a two-word
  query is half covered by either word, in whatever sense it is stored); recall's floor
  for the longer queries keeps no margin (5 %): at 2.5 % it would cost LOCOMO
  conversation recall@10 0.009, below its figure before the floor;
- fact search's cosine floor: for the combined rule (coverage reaches its floor OR cosine
  reaches this one), the smallest letting at most 2.5 % of each set through together, so
  that a paraphrase sharing no word with a fact is still found when it is close; recall's:
  the cosine no off-topic query reached among those whose coverage reaches
  ``recall_coverage`` (itself the value, in steps of 0.05, keeping the most on-topic
  queries), so that similarity lets through no off-topic query coverage did not;
- the listing floors (what is listed once a search found something): a fact's, the cosine
  no off-topic query's best fact reached; a message's, the cosine alone letting at most
  5 % of each set through.

The ``calibration`` figures in ``benchmarks/results/relevance.json`` and docs/benchmarks.md's
table hold the distributions. The floors are fitted on ``off_topic.json`` only;
``off_topic_heldout.json``, written apart and committed before anything was measured on
it, reports them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from .embedder import Embedder

# The best result must hold this IDF-weighted share of the query's terms (calibrated):
# a message in conversation recall, a fact in fact search.
RECALL_FLOOR = 0.34
SEARCH_FLOOR = 0.32
# A short query (at most SHORT_QUERY distinct terms) is covered by half when one of its two
# words is held in another sense ("race condition" by a charity race, "B-tree" by a
# Christmas tree): its best result must cover this much instead (calibrated apart, on the
# short off-topic queries).
SHORT_QUERY = 2
SHORT_RECALL_FLOOR = 0.58
SHORT_SEARCH_FLOOR = 0.47
# IDF is taken as if the texts were at least BACKGROUND, the others holding none of the
# query's terms: in a memory of a few facts every present term would otherwise weigh next
# to nothing against a missing one (log(1 + n) bounds IDF), whatever the query.
BACKGROUND = 1000


class Floors(NamedTuple):
    """The cosines an embedder's results need on similarity alone (calibrated jointly with
    the coverage floors): to say conversation recall or fact search found anything, and,
    once it did, to list a message or a fact sharing no word with the query."""

    recall: float
    search: float
    listing: float  # a fact: as close as no off-topic query's best fact came
    recall_listing: float  # a message: as close as 5 % of off-topic queries' best came
    # Recall found something on similarity alone only when its best coverage reaches this.
    recall_coverage: float = 0.0


# Per embedder (its model id before any "@runtime": the ONNX export shares MiniLM's).
SIMILARITY_FLOORS: dict[str, Floors] = {
    "local:all-MiniLM-L6-v2": Floors(
        recall=0.43, search=0.32, listing=0.42, recall_listing=0.34, recall_coverage=0.2
    )
}
# Any other embedder: only a near-identical meaning counts on similarity alone, until its
# floor is measured with ``benchmarks/relevance.py --calibrate``.
UNMEASURED_FLOOR = 0.8


def idf(n: int, df: np.ndarray) -> np.ndarray:
    """BM25's IDF (Lucene's) of terms held by ``df`` of ``n`` texts; ``df`` 0 weighs most."""
    return np.log1p((n - df + 0.5) / (df + 0.5))


def term_shares(n: int, counts: Mapping[str, int]) -> dict[str, float]:
    """Each distinct query term's share of the query (IDF-weighted, summing to 1), given
    how many of the ``n`` stored texts hold it: a text's coverage is the sum of the shares
    of the terms it holds."""
    size = max(n, BACKGROUND)
    weights = {term: float(idf(size, np.array(df))) for term, df in counts.items()}
    total = sum(weights.values())
    return {term: w / total for term, w in weights.items()} if total > 0 else {}


def coverage(n: int, holders: Mapping[str, np.ndarray]) -> np.ndarray:
    """Per text (0..n-1), its coverage of the query, given each distinct query term and
    the texts holding it."""
    shares = np.zeros(n)
    for term, share in term_shares(n, {t: len(rows) for t, rows in holders.items()}).items():
        shares[holders[term]] += share
    return shares


def coverage_floor(terms: int, *, recall: bool) -> float:
    """The coverage a query of ``terms`` distinct terms needs of its best result, in
    conversation recall or in fact search."""
    if terms <= SHORT_QUERY:
        return SHORT_RECALL_FLOOR if recall else SHORT_SEARCH_FLOOR
    return RECALL_FLOOR if recall else SEARCH_FLOOR


def similarity_floor(
    embedder: Embedder | None, *, recall: bool, listing: bool = False
) -> float | None:
    """The cosine that counts as relevant for ``embedder`` (None without one), in
    conversation recall or in fact search (``listing``: to list a result on similarity
    alone once the search found something, rather than to say it did)."""
    if embedder is None:
        return None
    floors = _measured(embedder)
    if floors is None:
        return UNMEASURED_FLOOR
    if recall:
        return floors.recall_listing if listing else floors.recall
    return floors.listing if listing else floors.search


def similar_coverage(embedder: Embedder | None) -> float:
    """The coverage conversation recall's best result needs for similarity to say it found
    something (``Floors.recall_coverage``; 0 for an embedder not measured)."""
    floors = _measured(embedder) if embedder is not None else None
    return 0.0 if floors is None else floors.recall_coverage


def _measured(embedder: Embedder) -> Floors | None:
    """The floors measured for ``embedder``'s model (any runtime), if any."""
    return SIMILARITY_FLOORS.get(embedder.model_id.split("@", 1)[0])


def found(
    coverage_best: float,
    coverage_floor: float,
    similarity_best: float | None,
    floor: float | None,
    similar_coverage: float = 0.0,
) -> bool:
    """Whether a search found anything: its best coverage clears its floor, or its best
    similarity clears its own while its best coverage reaches ``similar_coverage``."""
    if coverage_best >= coverage_floor:
        return True
    if floor is None or similarity_best is None or coverage_best < similar_coverage:
        return False
    return similarity_best >= floor
