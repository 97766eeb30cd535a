"""Fact ranking: each fact's score for the turn (BM25, dense similarity, small priors).

Relevance is BM25, optionally fused with dense similarity; confidence, recency and
specificity are small priors.

Without context the order is DeerFlow's: confidence, highest first, ties in store order.
With context, relevance dominates: confidence, recency and specificity only separate facts
that are about equally relevant (together they weigh less than a fifth of a perfect match).
Facts that name none of the message's named entities lose part of their score, and a
fact shares some of the relevance of its day's and its store neighbours' best match; it
is also matched as a window with those neighbours' words, so a question whose words are
split over facts learned together still meets them.
Dense similarity compares the message without those names to the facts: who the message
is about is the entity gate's job, what it asks about is the embedding's. The embedder
also widens the words: BM25 matches the memory's words nearest each word of the message
too. Facts learned on or near a date the message names gain a date match (see ``dates``).

Everything that depends only on the facts is built once per memory revision and cached
(``fact_index``); the words are analysed by ``terms`` and matched by ``bm25``. A turn only
analyses (and embeds) its query, here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ...llm.base import ModelError
from .bm25 import BM25, min_max
from .dates import date_match, mentioned_dates
from .fact_index import FactIndex
from .terms import analyze, entities, vocabulary, without_entities

if TYPE_CHECKING:
    from .embedder import Embedder

Context = str | Sequence[str] | None
log = logging.getLogger(__name__)
_said: set[tuple[str, str]] = set()  # (model, error) already logged: once, not every turn

# Query parts: the current message counts fully, earlier turns at half weight.
RECENT_WEIGHT = 0.5
# Lexical and dense relevance are fused by a convex combination of their per-query
# min-max normalised scores, with equal weights: the fusion Bruch et al. (2023, "An
# Analysis of Fusion Functions for Hybrid Retrieval") found more robust than RRF, and
# equal weights assume nothing about either model's scale.
DENSE_SHARE = 0.5
# Facts learned on the same day tend to be about the same episode (cluster hypothesis):
# a fact gains this share of the best relevance among its same-day siblings.
DAY_CLUSTER_WEIGHT = 0.1
# Facts stored next to each other on the same day were usually learned from the same
# exchange: a tighter cluster than the day, with the same weight, from the better of a
# fact's two store-order neighbours.
NEIGHBOUR_WEIGHT = DAY_CLUSTER_WEIGHT
# A fact also matched as part of a window with its same-day store-order neighbours (see
# ``fact_index.CONTEXT_WINDOW``): the window's BM25 adds at this weight.
CONTEXT_WEIGHT = 0.2
# Named entities (capitalised words that do not open a sentence) say whom or what the
# message is about: a fact naming none of those the memory knows keeps this share of its
# lexical score, and this share of its dense similarity (gated more gently: the embedding
# only sees the message without those names, so it says nothing about who).
ENTITY_GATE = 0.5
DENSE_ENTITY_GATE = 0.7
# A message naming a date ("on 3 June, 2023", "in March 2024") asks about what was learned
# then: a fact learned that day (or in that month) gains this much, less for nearby days.
DATE_WEIGHT = 0.4
# Pseudo-relevance feedback: terms from the top facts widen a short lexical query.
PRF_DOCS = 4
PRF_TERMS = 8
PRF_WEIGHT = 0.3
# Embedding-based query expansion (Kuzi, Shtok & Kurland, 2016): with an embedder, each
# word of the message also matches the memory's words whose vectors lie near its own
# ("kids": kid, child; "camped": camping, campfire), a lexical bridge over paraphrase
# that BM25 lacks and a whole-sentence embedding blurs. A neighbour needs this cosine,
# a word brings at most this many, and their BM25 adds at this weight (tuned on the LOCOMO
# dev halves with MiniLM: against 0.5, 0.6 is as good or better on both halves merged and
# on the first per conversation, 0.0005 lower on the second; 0.4-0.8 all lie well inside
# each figure's interval).
EXPANSION_SIMILARITY = 0.6
EXPANSION_PER_WORD = 3
EXPANSION_WEIGHT = 0.6
# Distinct words with the same vector (cosine 1) are ones the embedder cannot tell apart,
# as in a hashed bag of words where two words share a bucket: no sign of shared meaning.
_INDISTINCT = 0.9999


def query_parts(context: Context) -> list[tuple[str, float]]:
    """The turn as weighted texts: the current message (last) at 1, earlier turns at 0.5."""
    if context is None:
        return []
    texts = [context] if isinstance(context, str) else [t for t in context if isinstance(t, str)]
    texts = [t for t in texts if t.strip()]
    if not texts:
        return []
    parts = [(texts[-1], 1.0)]
    if len(texts) > 1:
        parts.append(("\n".join(texts[:-1]), RECENT_WEIGHT))
    return parts


@dataclass
class Scores:
    """Per-fact score parts, aligned with the usable facts."""

    lexical: np.ndarray
    dense: np.ndarray | None
    relevance: np.ndarray
    total: np.ndarray
    # Facts whose own words match the turn (its words or feedback terms): what a search
    # lists; a match in a fact's window alone does not count.
    matched: np.ndarray
    date_match: np.ndarray | None = None  # when the message names a date (see ``dates``)
    similarity: np.ndarray | None = None  # raw cosine with the message (with an embedder)
    _order: np.ndarray | None = None

    @property
    def order(self) -> np.ndarray:
        """Every fact, best first (ties in store order)."""
        if self._order is None:
            self._order = np.argsort(-self.total, kind="stable")
        return self._order

    def ranked(self, first: int = 256) -> Iterator[int]:
        """``order``, lazily: the best ``first`` (and any tied with the last of them) are
        sorted alone, the rest only if the caller reads past them (a block seldom does)."""
        if self._order is not None or len(self.total) <= first:
            yield from self.order.tolist()
            return
        top = top_stable(self.total, first)
        yield from top.tolist()
        yield from self.order[len(top) :].tolist()


def top_stable(values: np.ndarray, k: int) -> np.ndarray:
    """The first entries of ``np.argsort(-values, kind="stable")``: the ``k`` largest
    values and every value tied with the ``k``-th, in that order, without sorting all."""
    if len(values) <= k:
        return np.argsort(-values, kind="stable")
    threshold = np.partition(values, len(values) - k)[len(values) - k]
    top = np.flatnonzero(values >= threshold)
    return top[np.argsort(-values[top], kind="stable")]


def _bm25(index: FactIndex, terms: list[str], bm25: BM25 | None = None) -> np.ndarray:
    """BM25 of ``terms`` against the facts (or against ``bm25``, an index with a row per fact)."""
    bm25 = index.bm25 if bm25 is None else bm25
    if not terms or bm25 is None:
        return np.zeros(len(index.contents))
    return bm25.get_scores(terms)


def _lexical(
    index: FactIndex, parts: list[tuple[str, float]], named: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """BM25 of the weighted query parts, widened by feedback terms, normalised to [0, 1],
    gated by ``named`` (see ``_known_entities``), plus the gated BM25 of each fact's
    window (see ``CONTEXT_WEIGHT``); and which facts match by their own words."""
    asked = [(analyze(text), weight) for text, weight in parts]
    query_terms = {term for terms, _ in asked for term in terms}
    scores = sum(
        (weight * _bm25(index, terms) for terms, weight in asked), np.zeros(len(index.contents))
    )
    top = float(scores.max(initial=0.0))
    if top <= 0:  # no fact matches, so no window does either
        return scores, scores > 0
    feedback: dict[str, float] = {}
    for i in top_stable(scores, PRF_DOCS)[:PRF_DOCS]:
        if scores[i] <= 0:
            break
        for term in set(index.terms[i]) - query_terms:
            feedback[term] = feedback.get(term, 0.0) + scores[i] / top
    if feedback:
        terms = sorted(feedback, key=lambda t: (-feedback[t], t))[:PRF_TERMS]
        extra = _bm25(index, terms)
        if extra.max(initial=0.0) > 0:
            scores = scores + PRF_WEIGHT * top * extra / extra.max()
    windows = sum(weight * _bm25(index, terms, index.window_bm25) for terms, weight in asked)
    lexical = _gate(scores / scores.max(), named, ENTITY_GATE)
    lexical = lexical + CONTEXT_WEIGHT * _gate(windows / windows.max(), named, ENTITY_GATE)
    return lexical / lexical.max(), scores > 0


def _expanded(
    index: FactIndex,
    text: str,
    lexical: np.ndarray,
    embedder: Embedder,
    named: np.ndarray | None,
) -> np.ndarray:
    """``lexical`` plus the gated BM25 of ``text``'s words' nearest memory words (see
    ``EXPANSION_SIMILARITY``), weighted by their cosine; named entities are not expanded."""
    query_terms = set(analyze(text))
    asked = _asked_words(text)
    vocab_terms, matrix = index.word_vectors(embedder)
    if not asked or matrix.size == 0:
        return lexical
    rows = index.word_rows(embedder)
    new = [w for w in asked if w not in rows]
    fresh = dict(zip(new, embedder.embed_queries(new), strict=True)) if new else {}
    weights: dict[str, float] = {}
    for vector in (matrix[rows[w]] if w in rows else fresh[w] for w in asked):
        similarity = matrix @ vector
        near = np.flatnonzero((similarity >= EXPANSION_SIMILARITY) & (similarity < _INDISTINCT))
        found: set[str] = set()
        for j in near[np.argsort(-similarity[near], kind="stable")]:
            term = vocab_terms[j]
            if term not in query_terms and term not in found:
                found.add(term)
                weights[term] = max(weights.get(term, 0.0), float(similarity[j]))
                if len(found) == EXPANSION_PER_WORD:
                    break
    extra = np.zeros(len(index.contents))
    for term, weight in weights.items():
        extra += weight * _bm25(index, [term])
    if extra.max(initial=0.0) <= 0:
        return lexical
    combined = lexical + EXPANSION_WEIGHT * _gate(extra / extra.max(), named, ENTITY_GATE)
    return combined / combined.max()


def _asked_words(text: str) -> list[str]:
    """The words of ``text`` query expansion widens: one index term each, not a name."""
    skip = set(analyze(text)) & set(entities(text))
    words, terms = vocabulary([text])
    return [w for w, t in zip(words, terms, strict=True) if t not in skip]


def _embed_turn(
    index: FactIndex, parts: list[tuple[str, float]], embedder: Embedder, known: set[str]
) -> None:
    """Embed what this turn needs in one model call: its texts (names left out) and those
    of its words the memory does not hold (memory words have vectors from the fold). The
    ranking's later asks are then memoised."""
    rows = index.word_rows(embedder)
    texts = [without_entities(text, known) or text for text, _ in parts]
    embedder.embed_queries([*texts, *(w for w in _asked_words(parts[0][0]) if w not in rows)])


def _gate(scores: np.ndarray, named: np.ndarray | None, keep: float) -> np.ndarray:
    """``scores``, of which facts not ``named`` keep only the share ``keep``."""
    return scores if named is None else scores * (keep + (1 - keep) * named)


def _known_entities(index: FactIndex, text: str) -> tuple[set[str], np.ndarray | None]:
    """The entity terms of ``text`` that some fact contains, and per fact 1 if it names
    one of them, else 0 (None when the text names no such entity)."""
    known: set[str] = set()
    named = np.zeros(len(index.contents))
    for term in set(entities(text)):
        holding = index.bm25.containing(term) if index.bm25 is not None else []
        if len(holding):
            known.add(term)
            named[holding] = 1.0
    return known, (named if known else None)


def _dense(
    index: FactIndex,
    parts: list[tuple[str, float]],
    embedder: Embedder,
    known: set[str],
    named: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Cosine of the facts with the weighted query parts, the known names left out,
    min-max normalised, then gated by ``named``; and the raw cosines (the search's floor
    reads them)."""
    matrix = index.dense_matrix(embedder)
    query = sum(
        weight * embedder.embed_query(without_entities(text, known) or text)
        for text, weight in parts
    )
    norm = float(np.linalg.norm(query))
    if norm == 0 or matrix.size == 0:
        zeros = np.zeros(len(index.contents))
        return zeros, zeros
    cosine = matrix @ (query / norm)
    return _gate(min_max(cosine), named, DENSE_ENTITY_GATE), cosine


def score(index: FactIndex, context: Context, embedder: Embedder | None = None) -> Scores:
    """Score every fact for this turn; ``order`` is best first."""
    n = len(index.contents)
    parts = query_parts(context)
    if not parts or n == 0:
        zeros = np.zeros(n)
        unmatched = np.zeros(n, dtype=bool)
        return Scores(
            zeros, None, zeros, index.confidence.copy(), unmatched, None, index.confidence_order
        )
    known, named = _known_entities(index, parts[0][0])
    lexical, matched = _lexical(index, parts, named)
    dense = similarity = None
    if embedder is not None:
        try:
            _embed_turn(index, parts, embedder, known)
            dense, similarity = _dense(index, parts, embedder, known, named)
            lexical = _expanded(index, parts[0][0], lexical, embedder, named)
        except ModelError as exc:  # an embeddings server down, or without /embeddings
            if (embedder.model_id, str(exc)) not in _said:
                _said.add((embedder.model_id, str(exc)))
                log.warning("ranking by words only, %s is unavailable: %s", embedder.model_id, exc)
    relevance = lexical if dense is None else (1 - DENSE_SHARE) * lexical + DENSE_SHARE * dense
    if index.days is not None:
        base = relevance
        # Each fact's day's best (facts grouped by day once per revision, see ``_Days``).
        days = index.days
        best = np.maximum.reduceat(base[days.perm], days.starts)
        relevance = base + DAY_CLUSTER_WEIGHT * np.where(days.dated, best[days.group], 0.0)
        # Store-order neighbours of the same day.
        neighbour = np.zeros(n)
        neighbour[1:] = np.where(days.same_as_previous, base[:-1], 0.0)
        neighbour[:-1] = np.maximum(neighbour[:-1], np.where(days.same_as_previous, base[1:], 0.0))
        relevance = relevance + NEIGHBOUR_WEIGHT * neighbour
        relevance = relevance / max(float(relevance.max()), 1e-12)
    spans = mentioned_dates(parts[0][0])
    on_date = date_match(index.ordinal, spans) if spans else None
    if on_date is not None:
        relevance = relevance + DATE_WEIGHT * on_date
    total = relevance + index.prior
    return Scores(lexical, dense, relevance, total, matched, on_date, similarity)
