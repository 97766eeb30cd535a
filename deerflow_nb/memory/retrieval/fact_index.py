"""The per-revision fact index, built once per memory revision and cached (``get_index``).

It holds each fact's terms, the BM25 indexes, the day groups and the priors. The cache is
keyed by the facts' contents, categories, confidences and dates, or by a view's
revision (``scopes.View.key``) so it need not fingerprint them: a turn only analyses
(and embeds) its query.
"""

from __future__ import annotations

import math
import operator
import threading
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ...untrusted import clean_text
from .bm25 import BM25
from .dates import fact_ordinals
from .terms import lexicon, vocabulary

if TYPE_CHECKING:
    from .embedder import Embedder

# Priors, added to a relevance in [0, 1].
CONFIDENCE_WEIGHT = 0.05
RECENCY_WEIGHT = 0.02
# A fact in rarer words says something specific ("Signed up for a pottery class"), one in
# common words something general ("Values family time"); a question is more often answered
# by the former. Specificity is the fact's mean IDF over the memory, min-max scaled.
SPECIFICITY_WEIGHT = 0.1
# A fact's own words often leave out what its neighbours say ("The kids loved it" after
# "Went camping at the lake"): a fact is also matched as part of a window with its
# store-order neighbours of the same day (sentence retrieval with local context,
# Fernández, Losada & Azzopardi, 2011): this many on each side (``ranking.CONTEXT_WEIGHT``).
CONTEXT_WINDOW = 1

_CACHE_SIZE = 8


def coerce_confidence(value: Any) -> float:
    """A confidence in [0, 1]; junk counts as 0 (as in DeerFlow)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    if math.isnan(number):
        return 0.0
    return min(max(number, 0.0), 1.0)


def _raw_facts(memory_data: Mapping[str, Any] | None) -> list[Any]:
    facts = (memory_data or {}).get("facts") or []
    return facts if isinstance(facts, list) else []


_SIGNATURE_FIELDS = ("content", "category", "confidence", "createdAt")
_COLUMN_GETTERS = tuple(operator.itemgetter(name) for name in _SIGNATURE_FIELDS)
Columns = tuple[list[Any], ...]


def _columns(raw: list[Any]) -> Columns | None:
    """The stored facts' contents, categories, confidences and dates, a list each: four
    passes in C that allocate four lists and no object per fact (a per-fact tuple would
    set off the garbage collector over a big heap every call), or None when some fact is
    not a dict holding all four."""
    try:
        return tuple(list(map(getter, raw)) for getter in _COLUMN_GETTERS)
    except (KeyError, TypeError, IndexError):
        return None


def _signature(raw: list[Any], columns: Columns | None = None) -> tuple:
    """What a revision's index depends on, hashable: an entry per stored fact, its content,
    category, confidence and date (ids do not matter: facts are addressed by position).
    None for a fact that cannot be injected, and values stringified if unhashable, when
    some fact is not a plain one."""
    if columns is not None:
        key = tuple(zip(*columns, strict=True))
        try:
            hash(key)
            return key
        except TypeError:
            pass
    return _careful_signature(raw)


def _careful_signature(raw: list[Any]) -> tuple:
    """``_signature`` for any list: hashable, None for a fact that cannot be injected."""
    key = tuple(
        [
            (c, f.get("category"), f.get("confidence"), f.get("createdAt"))
            if isinstance(f, dict) and isinstance(c := f.get("content"), str) and c.strip()
            else None
            for f in raw
        ]
    )
    try:
        hash(key)
    except TypeError:
        key = tuple(None if item is None else tuple(map(repr, item)) for item in key)
    return key


def _usable(fact: Any) -> bool:
    """Whether a stored fact can be injected: a dict whose text content shows something once
    escaped (not blank, nor only control, bidi or zero-width characters, which the block
    drops). Printable text, nearly every fact, needs no cleaning to tell."""
    if not (isinstance(fact, dict) and isinstance(c := fact.get("content"), str)):
        return False
    return bool(c.strip()) and (c.isprintable() or bool(clean_text(c).strip()))


@dataclass
class _Days:
    """The dated facts grouped by day, for per-day maxima with ``np.maximum.reduceat``."""

    perm: np.ndarray  # positions, grouped by day (undated ones in a group of their own)
    starts: np.ndarray  # where each group starts in ``perm``
    group: np.ndarray  # each fact's group number
    dated: np.ndarray  # whether a fact has a day
    same_as_previous: np.ndarray  # fact i + 1 is dated and of fact i's day (length n - 1)

    @classmethod
    def of(cls, day: np.ndarray) -> _Days | None:
        dated = day >= 0
        if not dated.any():
            return None
        perm = np.argsort(day, kind="stable")
        sorted_days = day[perm]
        starts = np.flatnonzero(np.r_[True, sorted_days[1:] != sorted_days[:-1]])
        group = np.empty(len(day), dtype=np.int64)
        group[perm] = np.cumsum(np.r_[False, sorted_days[1:] != sorted_days[:-1]])
        same = (day[1:] == day[:-1]) & dated[1:]
        return cls(perm, starts, group, dated, same)


@dataclass
class FactIndex:
    """Everything about one memory revision that a turn should not recompute."""

    positions: list[int]  # where each usable fact sits among the stored ones
    contents: list[str]
    confidence: np.ndarray
    recency: np.ndarray
    specificity: np.ndarray
    day: np.ndarray
    ordinal: np.ndarray  # each fact's date as a day number (NaN when unknown)
    confidence_order: np.ndarray
    bm25: BM25 | None
    window_bm25: BM25 | None  # each fact with its same-day store-order neighbours (CONTEXT_WINDOW)
    terms: list[list[str]] = field(default_factory=list)  # each fact's analysed words
    days: _Days | None = None  # the facts grouped by day (None when none is dated)
    prior: np.ndarray = field(default_factory=lambda: np.zeros(0))  # the score's priors
    line_cache: dict[int, tuple[str, str | None, str, int]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)  # per-revision values of other modules
    dense: dict[str, np.ndarray] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def dense_matrix(self, embedder: Embedder) -> np.ndarray:
        """Fact vectors for ``embedder`` (from its cache; computed only if a fold missed them)."""
        with self.lock:
            matrix = self.dense.get(embedder.model_id)
            if matrix is None:
                matrix = embedder.embed_many(self.contents)
                self.dense[embedder.model_id] = matrix
            return matrix

    def word_vectors(self, embedder: Embedder) -> tuple[list[str], np.ndarray]:
        """The memory's words as index terms, and their vectors for ``embedder`` (built on
        first use: a memory ranked by words alone never pays for them)."""
        terms, matrix, _ = self._words(embedder)
        return terms, matrix

    def word_rows(self, embedder: Embedder) -> dict[str, int]:
        """Each memory word's row in ``word_vectors``: a query word the memory holds needs
        no model call."""
        return self._words(embedder)[2]

    def _words(self, embedder: Embedder) -> tuple[list[str], np.ndarray, dict[str, int]]:
        with self.lock:
            key = f"words:{embedder.model_id}"
            hit = self.meta.get(key)
            if hit is None:
                words, terms = vocabulary(self.contents)
                rows = {word: row for row, word in enumerate(words)}
                hit = self.meta[key] = (terms, embedder.embed_many(words), rows)
            return hit


def _build(raw: list[Any]) -> FactIndex:
    positions = [p for p, fact in enumerate(raw) if _usable(fact)]
    facts = [raw[p] for p in positions]
    n = len(facts)
    confidence = np.array([coerce_confidence(f.get("confidence")) for f in facts], dtype=float)
    dates = [str(f.get("createdAt") or "") for f in facts]
    # Recency as a rank in [0, 1]: robust to odd date spellings, needs no clock.
    recency = np.zeros(n)
    if n > 1:
        order = sorted(range(n), key=dates.__getitem__)
        recency[order] = np.arange(n) / (n - 1)
    days: dict[str, int] = {}
    day = np.array([days.setdefault(d[:10], len(days)) if d else -1 for d in dates], dtype=int)
    # Stable sort on -confidence: DeerFlow's sorted(..., reverse=True) keeps store order on ties.
    confidence_order = np.argsort(-confidence, kind="stable")
    contents = [f["content"] for f in facts]
    words = lexicon()
    terms, numbers = words.analyze_many(contents)
    bm25, window_bm25 = BM25.with_windows(words.ids, numbers, day, CONTEXT_WINDOW)
    ordinal = fact_ordinals(dates)
    specificity = bm25.specificity() if bm25 is not None else np.zeros(0)
    prior = (
        CONFIDENCE_WEIGHT * confidence + RECENCY_WEIGHT * recency + SPECIFICITY_WEIGHT * specificity
    )
    return FactIndex(
        positions,
        contents,
        confidence,
        recency,
        specificity,
        day,
        ordinal,
        confidence_order,
        bm25,
        window_bm25,
        terms,
        _Days.of(day),
        prior,
    )


# hash(signature) → (signature, index): tuples do not cache their hash, so it is taken once
# per call and the full signature is compared only on a hit.
_cache: OrderedDict[int, tuple[tuple, FactIndex]] = OrderedDict()
_cache_lock = threading.Lock()
builds = 0  # how many indexes were built: tests check the per-revision cache with it


# The last facts seen without a revision, as columns, and their index: a caller passing the same
# facts again (a benchmark, a notebook loop, a fresh copy of the same file) is checked by
# comparing columns, with no per-fact allocation and no hashing.
_last: tuple[Columns, FactIndex] | None = None


def get_index(
    memory_data: Mapping[str, Any] | None, revision: Hashable | None = None
) -> tuple[list[dict[str, Any]], FactIndex]:
    """This revision's usable facts, in store order, and its cached index (built once).

    ``revision`` (a ``View.key``) names an immutable document, so the cache is keyed by
    it instead of fingerprinting every fact on every call, the bulk of a turn's injection
    cost at 10,000 facts. The index addresses facts by position in that list: equal
    signatures (or an equal revision) mean equal contents, categories, confidences and
    dates at every position.
    """
    global builds, _last
    raw = _raw_facts(memory_data)
    columns = None
    if revision is not None:
        key: tuple = ("revision", revision)
    else:
        columns = _columns(raw)
        last = _last
        if columns is not None and last is not None and last[0] == columns:
            index = last[1]
            return _usable_facts(raw, index), index
        key = _signature(raw, columns)
    digest = hash(key)
    with _cache_lock:
        hit = _cache.get(digest)
        index = hit[1] if hit is not None and hit[0] == key else None
        if index is not None:
            _cache.move_to_end(digest)
    if index is None:
        index = _build(raw)
        with _cache_lock:
            builds += 1
            _cache[digest] = (key, index)
            _cache.move_to_end(digest)
            while len(_cache) > _CACHE_SIZE:
                _cache.popitem(last=False)
    if columns is not None:
        _last = (columns, index)
    return _usable_facts(raw, index), index


def _usable_facts(raw: list[Any], index: FactIndex) -> list[dict[str, Any]]:
    """The usable facts of ``raw``, in store order: one list per revision's document (a
    turn reads it and never changes it), not a copy of 10,000 references per turn."""
    kept = index.meta.get("usable")
    if kept is not None and kept[0] is raw:
        return kept[1]
    usable = list(raw) if len(index.positions) == len(raw) else [raw[p] for p in index.positions]
    index.meta["usable"] = (raw, usable)
    return usable
