"""Conversation recall: search every user message and final reply of the lead threads.

The injected ``<memory>`` block holds a budget's worth of facts; everything else the user
ever said is in the journal. ``search`` finds it, best first, over the messages a fold
could read: user messages and final assistant replies of lead threads, never tool
traffic (tool results, tool-calling steps), sub-agent threads or ``--no-memory`` turns.

The index is SQLite FTS5 inside ``journal.db``, kept by ``storage/recall_index.py``: it is
brought up to date from ``messages`` at the start of every search, and made again when any
part of it is missing. This module decides what a match is worth.

Scoring, for a query:

- BM25 of the query's words (Porter stems, no stopwords) over each message.
- Named entities (capitalised words not opening a sentence) say whom the query is about:
  a message naming none of the known ones keeps ``ENTITY_GATE`` of its score, one in a
  thread that never names them ``THREAD_GATE``.
- A turn's answer often lacks the question's words ("Yes, last weekend!"): a message also
  gains ``NEIGHBOUR_WEIGHT`` of its thread neighbours' scores (``WINDOW`` indexed messages
  on each side, decaying with distance), as the fact ranking's window match does.
- A date the query names (``3 June, 2023``, ``March 2024``; ``dates.py``) favours messages
  written on or near it, and adds them as candidates; a month without a year ("in June")
  favours messages written in such a month.
- With an embedder, the cosine of the query (names left out) with each message is fused
  with the lexical score (a convex combination; cosines scaled from the mean one, so a
  below-average message adds nothing: ``recall_dense.py``).
- What the user said ranks first: an assistant's restatement or a later question
  collapses into the user's statement (``echoes``); a result with echoes names them
  (``"echoes": [{"thread", "seq", "role"}]``).
- Only relevant results are listed (``relevance``): none when nothing covers the query.
"""

from __future__ import annotations

import math
import re
import threading
import unicodedata
from collections.abc import Callable
from datetime import date
from typing import TYPE_CHECKING, Any

import numpy as np

from ...storage import recall_index
from . import echoes, relevance
from .dates import MONTHS, date_match, mentioned_dates
from .recall_dense import dense_scores, scaled
from .recall_dense import warm as warm
from .terms import ENTITY_RE, STOPWORDS, WORD_RE

if TYPE_CHECKING:
    from ...storage.journal import Journal
    from .embedder import Embedder

# Lexical candidates read from FTS5 (best BM25 first), and how many of the best after
# gating bring their thread neighbours in. A name the query asks about is a common word
# (every message its speaker wrote), so the pool is wide enough for the gates to reorder.
POOL = 1000
SPREAD = 60
# Neighbours: this many indexed messages on each side, each sharing this weight of its
# score, divided by its distance.
WINDOW = 2
NEIGHBOUR_WEIGHT = 0.3
# Which side a message's neighbour sits on: a reply follows what it answers, so the
# message before (BEFORE_SHARE) and after (AFTER_SHARE) may share differently.
BEFORE_SHARE = 1.3
AFTER_SHARE = 0.7
# Thread topic: each message gains this weight of its thread's score (the sum of its best
# THREAD_TOP messages' own relevance, relative to the best thread's).
THREAD_WEIGHT = 0.5
THREAD_TOP = 2
# Entity gates (see the module docstring).
ENTITY_GATE = 0.6
THREAD_GATE = 0.3
# A message written as "Name: text" by someone the query does not name, naming them.
MENTION_GATE = 0.6
# Dense fusion: the share of the dense score, the dense candidates added, and the cosine
# the dense score counts from ("mean" over all messages, or "min": ``recall_dense.scaled``).
DENSE_SHARE = 0.5
DENSE_POOL = 100
DENSE_ZERO = "mean"
# A named date: the weight of its match, and at most this many candidates it adds.
DATE_WEIGHT = 0.4
DATE_POOL = 200
# Named entities' own words in the lexical query (the gate already weighs them).
NAMES_IN_QUERY = True
# A month named without a year ("camping in June"): messages written in such a month gain
# this much (in any year: the query does not say which).
MONTH_WEIGHT = 0.2
# Newer first among equals: a tie-break, not a preference.
RECENCY_WEIGHT = 1e-3

_BARE_MONTH = re.compile(
    rf"\b(?:in|during|since|early|late|mid-?)\s+({'|'.join(MONTHS)})\b(?!,?\s+\d{{4}})",
    re.IGNORECASE,
)
# "Melanie: It was an awesome time" — a transcript's speaker (one or two capitalised words).
_SPEAKER_RE = re.compile(r"\s*([A-Z][\w'-]*)(?: [A-Z][\w'-]*)?:\s")


# -- the query --------------------------------------------------------------------------
def query_words(text: str) -> list[str]:
    """The query's distinct words FTS5 should match (no stopwords), in order."""
    words = [w for w in WORD_RE.findall(text.lower()) if w not in STOPWORDS]
    return list(dict.fromkeys(words))


def entity_words(text: str) -> list[str]:
    """The query's names: capitalised words that do not open a sentence, lowercased."""
    return list(dict.fromkeys(w.lower() for w in ENTITY_RE.findall(text)))


def _entity_threads(db: Any, names: list[str]) -> tuple[list[str], set[str]]:
    """The names some indexed message contains, and the threads that contain one."""
    known: list[str] = []
    threads: set[str] = set()
    for name in names:
        found = recall_index.threads_naming(db, name)
        if found:
            known.append(name)
            threads |= found
    return known, threads


def _ordinal(stamp: str | None) -> float:
    try:
        return float(date.fromisoformat(str(stamp)[:10]).toordinal())
    except ValueError:
        return math.nan


def _month(stamp: str | None) -> int:
    text = str(stamp or "")
    return int(text[5:7]) if len(text) >= 7 and text[5:7].isdigit() else 0


def search(
    journal: Journal,
    query: str,
    k: int = 10,
    *,
    thread: str | None = None,
    embedder: Embedder | None = None,
    relevant_only: bool = True,
    within: Callable[[str], bool] | None = None,
) -> list[dict[str, Any]]:
    """The ``k`` indexed messages best matching ``query``, best first, each
    ``{"thread", "seq", "role", "content", "created_at", "score"}``; only ``thread``'s when
    given, only threads ``within`` keeps when given (a project's: kept before echoes
    collapse, so a restatement here never folds into a statement it may not show).
    ``embedder`` (``Memory.embedder``) fuses in dense similarity.

    Only relevant ones (``relevance``): none when no message covers the query well enough
    (or is similar enough), else those holding a query word, similar enough, written on a
    date it names, or next to a message that covers it. ``relevant_only=False`` lists the
    best matches whatever they are worth, as a "nearest miss" needs."""
    if k <= 0 or not isinstance(query, str) or not query.strip():
        return []
    recall_index.sync(journal)
    db = journal.db
    words = query_words(query)
    names = entity_words(query)
    known, named_threads = _entity_threads(db, names) if names else ([], set())
    if not NAMES_IN_QUERY and known:
        words = [w for w in words if w not in known] or words
    lexical = recall_index.match(db, words, thread, POOL)
    spans = mentioned_dates(query)
    months = {MONTHS.index(m.lower()) + 1 for m in _BARE_MONTH.findall(query)}

    # Candidates: lexical matches, messages of a named date, the best dense matches.
    candidates: set[int] = set(lexical)
    dated: list[int] = []
    if spans:
        first = date.fromordinal(int(min(s[0] for s in spans)) - 7).isoformat()
        last = date.fromordinal(int(max(s[1] for s in spans)) + 8).isoformat()
        dated = recall_index.written_between(db, first, last, thread, DATE_POOL)
        candidates.update(dated)
    dense_all: dict[int, float] = {}
    if embedder is not None:
        dense_all = dense_scores(journal, embedder, query, names, thread)
        best = sorted(dense_all, key=dense_all.__getitem__, reverse=True)[:DENSE_POOL]
        candidates.update(best)
    if not candidates:
        return []

    ids = sorted(candidates)
    meta = recall_index.rows(db, ids)
    signals = (lexical, dense_all, known, named_threads, spans, months)
    base = _relevance(ids, meta, *signals)

    # Neighbours: the best candidates bring in their thread neighbours, and every message
    # gains a share of its neighbours' relevance.
    top = sorted(base, key=base.__getitem__, reverse=True)[:SPREAD]
    places = [(meta[i]["thread"], meta[i]["pos"]) for i in top]
    extra = [i for i in recall_index.near(db, places, WINDOW) if i not in base]
    if extra:
        meta.update(recall_index.rows(db, extra))
        base.update(_relevance(extra, meta, *signals))
    by_place = {(meta[i]["thread"], meta[i]["pos"]): i for i in base}
    topic = _thread_scores(base, meta)
    total: dict[int, float] = {}
    for i, own in base.items():
        thread_id, pos = meta[i]["thread"], meta[i]["pos"]
        shared = 0.0
        for distance in range(1, WINDOW + 1):
            for other, side in ((pos - distance, BEFORE_SHARE), (pos + distance, AFTER_SHARE)):
                j = by_place.get((thread_id, other))
                if j is not None:
                    shared += side * base[j] / distance
        total[i] = (
            own
            + NEIGHBOUR_WEIGHT * shared
            + THREAD_WEIGHT * topic.get(thread_id, 0.0)
            + RECENCY_WEIGHT * (i / max(ids[-1], 1))
        )

    def order(i: int) -> tuple[float, int]:
        return -total[i], -i

    ranked = sorted(total, key=order)
    if relevant_only:
        named = (known, named_threads)
        relevant = _relevant(db, words, ranked, meta, dense_all, embedder, dated, named)
        ranked = [i for i in ranked if i in relevant]
    if within is not None:
        ranked = [i for i in ranked if within(meta[i]["thread"])]
    ranked, echoed = echoes.collapse(ranked, total, meta, k, order)
    best_ids = ranked[:k]
    top_score = max((total[i] for i in best_ids), default=0.0)
    if top_score <= 0:
        return []
    results = []
    for i in best_ids:
        if total[i] <= 0:
            break
        row = meta[i]
        results.append(
            {
                "thread": row["thread"],
                "seq": row["seq"],
                "role": row["role"],
                "content": row["content"],
                "created_at": row["created_at"],
                "score": round(total[i], 4),
            }
        )
        if i in echoed:
            results[-1]["echoes"] = [
                {"thread": meta[e]["thread"], "seq": meta[e]["seq"], "role": meta[e]["role"]}
                for e in echoed[i]
            ]
    return results


def _porter_stems(words: list[str]) -> list[str]:
    """Porter stems, as FTS5's ``porter`` tokenizer stems (PyStemmer: one per thread)."""
    stemmer = getattr(_PORTER, "stemmer", None)
    if stemmer is None:
        import Stemmer

        stemmer = _PORTER.stemmer = Stemmer.Stemmer("porter")
    return stemmer.stemWords(words)


_PORTER = threading.local()
# Each message's stems, by its text (ids repeat across journals): a search stems only new
# ones.
_STEMS_LIMIT = 50_000
_stems: dict[str, frozenset[str]] = {}


def _message_stems(content: str) -> frozenset[str]:
    stems = _stems.get(content)
    if stems is None:
        text = content.lower()
        if not text.isascii():  # FTS5's remove_diacritics
            text = "".join(
                c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c)
            )
        stems = frozenset(_porter_stems(WORD_RE.findall(text)))
        if len(_stems) >= _STEMS_LIMIT:
            _stems.clear()
        _stems[content] = stems
    return stems


def _coverage(
    db: Any,
    words: list[str],
    ids: list[int],
    meta: dict[int, dict[str, Any]],
    named: tuple[list[str], set[str]] = ([], set()),
) -> dict[int, float]:
    """Each of the messages ``ids`` holding a query word: its coverage of the query
    (``relevance``; how many messages hold each word is counted over the whole index,
    inside SQLite). A name the journal knows (``named``: the names, the threads naming
    one) counts as held by every message of a thread naming it: a conversation's messages
    rarely repeat the name of whom it is with."""
    shares = relevance.term_shares(
        recall_index.size(db), {w: recall_index.holders(db, w) for w in words}
    )
    by_stem: dict[str, float] = {}
    for word, stem in zip(words, _porter_stems(words), strict=True):
        by_stem[stem] = by_stem.get(stem, 0.0) + shares.get(word, 0.0)
    known, threads = named
    names = frozenset(_porter_stems(known))
    covered: dict[int, float] = {}
    asked = list(by_stem.items())
    for i in ids:
        stems = _message_stems(str(meta[i]["content"]))
        if meta[i]["thread"] in threads:
            stems |= names
        share = sum(weight for stem, weight in asked if stem in stems)
        if share > 0:
            covered[i] = share
    return covered


def evidence(
    journal: Journal, query: str, embedder: Embedder | None = None
) -> tuple[float, float | None]:
    """The best coverage of ``query`` by one message among those a search considers, and
    the best cosine (None without an embedder): what the floor is calibrated on
    (``benchmarks/relevance.py``)."""
    recall_index.sync(journal)
    words = query_words(query)
    names = entity_words(query)
    named = _entity_threads(journal.db, names) if names else ([], set())
    ids = list(recall_index.match(journal.db, words, None, POOL))
    covered = _coverage(journal.db, words, ids, recall_index.rows(journal.db, ids), named)
    dense = dense_scores(journal, embedder, query, names, None) if embedder else {}
    return max(covered.values(), default=0.0), max(dense.values(), default=None)


def _relevant(
    db: Any,
    words: list[str],
    ranked: list[int],
    meta: dict[int, dict[str, Any]],
    dense_all: dict[int, float],
    embedder: Embedder | None,
    dated: list[int],
    named: tuple[list[str], set[str]],
) -> set[int]:
    """The ranked messages the relevance floor keeps (see ``search``); none when no
    message clears it and the query names no date with messages written on it."""
    covered = _coverage(db, words, ranked, meta, named)
    floor = relevance.similarity_floor(embedder, recall=True)
    listing = relevance.similarity_floor(embedder, recall=True, listing=True)
    similar = {i for i, s in dense_all.items() if listing is not None and s >= listing}
    best_cover = max((covered.get(i, 0.0) for i in ranked), default=0.0)
    best_similar = max(dense_all.values(), default=None)
    need = relevance.similar_coverage(embedder)
    enough = relevance.coverage_floor(len(words), recall=True)
    if not (relevance.found(best_cover, enough, best_similar, floor, need) or dated):
        return set()
    strong = {
        (meta[i]["thread"], meta[i]["pos"])
        for i in ranked
        if covered.get(i, 0.0) >= enough or i in similar
    }

    def beside_strong(i: int) -> bool:
        thread, pos = meta[i]["thread"], meta[i]["pos"]
        return any((thread, pos + d) in strong for d in range(-WINDOW, WINDOW + 1) if d)

    plain = set(dated) | similar
    return {i for i in ranked if i in covered or i in plain or beside_strong(i)}


def _thread_scores(base: dict[int, float], meta: dict[int, dict[str, Any]]) -> dict[str, float]:
    """Each thread's topic score in [0, 1]: the sum of its best ``THREAD_TOP`` messages'
    own relevance, relative to the best thread's."""
    if THREAD_WEIGHT <= 0:
        return {}
    by_thread: dict[str, list[float]] = {}
    for i, own in base.items():
        by_thread.setdefault(meta[i]["thread"], []).append(own)
    sums = {t: sum(sorted(v, reverse=True)[:THREAD_TOP]) for t, v in by_thread.items()}
    best = max(sums.values(), default=0.0)
    return {t: v / best for t, v in sums.items()} if best > 0 else {}


def _relevance(
    ids: list[int],
    meta: dict[int, dict[str, Any]],
    lexical: dict[int, float],
    dense_all: dict[int, float],
    known: list[str],
    named_threads: set[str],
    spans: list[tuple[int, int]],
    months: set[int],
) -> dict[int, float]:
    """Each message's own relevance in [0, ~1.4]: fused, gated, date-matched."""
    ids = [i for i in ids if i in meta]
    top = max(lexical.values(), default=0.0)
    lex = np.array([lexical.get(i, 0.0) / top if top > 0 else 0.0 for i in ids])
    if dense_all:
        rel = (1 - DENSE_SHARE) * lex + DENSE_SHARE * scaled(ids, dense_all, DENSE_ZERO)
    else:
        rel = lex
    if known:
        pattern = re.compile(r"\b(?:" + "|".join(map(re.escape, known)) + r")\b", re.IGNORECASE)
        gate = np.array([_gate(meta[i], pattern, known, named_threads) for i in ids])
        rel = rel * gate
    if spans:
        ordinals = np.array([_ordinal(meta[i]["created_at"]) for i in ids])
        rel = rel + DATE_WEIGHT * date_match(ordinals, spans)
    if months:
        rel = rel + MONTH_WEIGHT * np.array([_month(meta[i]["created_at"]) in months for i in ids])
    return {i: float(r) for i, r in zip(ids, rel, strict=True)}


def _gate(
    row: dict[str, Any], pattern: re.Pattern[str], known: list[str], named_threads: set[str]
) -> float:
    """How much of its relevance a message keeps, given the names the query is about.

    A message written as ``Name: text`` (a transcript, a chat export) says who speaks: one
    spoken by a named person keeps all of it, one only mentioning them ``MENTION_GATE``.
    Otherwise naming them is enough. Then the thread gates (``ENTITY_GATE``,
    ``THREAD_GATE``)."""
    content = row["content"]
    speaker = _SPEAKER_RE.match(content)
    if speaker is not None:
        if speaker.group(1).lower() in known:
            return 1.0
        if pattern.search(content, speaker.end()):
            return MENTION_GATE
    elif pattern.search(content):
        return 1.0
    return ENTITY_GATE if row["thread"] in named_threads else THREAD_GATE
