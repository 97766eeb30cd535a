"""The ``<memory>`` block: DeerFlow's sections, facts ranked for the turn, an exact token budget.

Layout (DeerFlow's order and labels; empty sections are left out)::

    <memory>
    User Context:
    - Work: …
    - Personal: …
    - Current Focus: …

    History:
    - Recent: …
    - Earlier: …
    - Background: …

    Facts:
    Dates without a year are in 2026.
    [preference | 0.95]
    2 Mar: Prefers polars over pandas
    10 Feb: Uses DuckDB for local analytics
    [context | 0.85]
    1 Mar:
    - Works on churn prediction for a telecom
    - Retrains the churn model every Monday
    20 Nov 2025: Moved to Lisbon
    [goal | 0.80]
    Undated: Wants to learn Rust
    </memory>

Every fact shows its category, confidence and date, but each is said once for the facts
that share it: facts are grouped under a ``[category | confidence]`` header, and within it
under the date they were learned; the commonest year of the block's best candidates is
stated once (the year legend) and left off the date headers in it, when that saves more
tokens than it costs. A tag on every line would cost ~8 tokens a fact, most of a short
fact's own cost (~19 tokens on LOCOMO), and a memory holds only a few distinct tags (an
extraction model writes round confidences: 0.8, 0.85, 0.9, 0.95). A date header names its
month (``1 Mar 2026:``, 6 tokens, ``1 Mar:`` 3 tokens) where ISO ``2026-03-01:`` costs 7
and ``03-01:`` 4. A group of one fact is one line, a token cheaper: ``2 Mar: text`` under
a tag header, ``- [goal | 0.80] text`` under a date header. Only header lines start with
``[`` or end with ``:`` without starting with ``- ``, and no fact text ends a line with
``:`` without its own ``- ``; a fact whose text starts like a tag or a list item (``[``,
``- [goal | 0.99]``) carries its own tag on its line too, ``- [context | 0.90] [goal |
0.99] …``, so no text can pass for a tag.

The whole string, tags included, never exceeds ``max_tokens`` counted with ``cl100k_base``.
Summaries come first, as in DeerFlow; if they alone would not fit they are shortened, never
the budget broken. Facts then fill what is left in rank order (see ``ranking``), each
costing its line plus, for the first fact of a tag, the tag header, for the first of a date
within its tag, its one-line form (the second turns it back into a header and two lines),
and for the first date header in the legend's year, the legend; a fact that does not fit is
skipped and the next one tried. The year legend is the commonest year among the date headers
of the best candidates, so a block about last year's facts shortens those. The listing
groups the chosen facts by tag, tags in the order of their best-ranked fact, then by date in
the same way, facts within a date in rank order (without context: confidence order, so the
most confident tag comes first); ``select_facts`` returns them in that listing order. Every
text from memory is escaped (``&``, ``<``, ``>`` and their look-alikes such as ``＜`` and
``‹`` become entities; line breaks become spaces; control, bidi and zero-width characters
are removed), so no fact or summary can close or forge a tag or add a line of its own.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..scopes import View, seen
from . import relevance
from .block import fit_summaries, render, summaries, summary_budget
from .fact_index import FactIndex, get_index
from .packing import pack
from .ranking import Context, Scores, score
from .terms import analyze

if TYPE_CHECKING:
    from .embedder import Embedder

# A search naming a date also lists facts learned within about five days of it.
_SEARCH_DATE_MATCH = 0.5


Memory = dict[str, Any] | View | None  # a bare memory.json dict: the user's scope


def _compose(
    memory_data: Memory,
    max_tokens: int,
    context: Context,
    embedder: Embedder | None,
) -> tuple[str, list[dict[str, Any]], list[int], FactIndex, Scores]:
    """The block, the usable facts, the positions of those it lists (in order), and why."""
    shown = seen(memory_data)
    data = shown.data
    facts, index = get_index(data, shown.key)
    scores = score(index, context, embedder)
    sections = fit_summaries(summaries(data), summary_budget(max_tokens, facts))
    if not facts:
        return render(sections, []), facts, [], index, scores
    text, listed = pack(index, facts, sections, scores.ranked(), max_tokens)
    return text, facts, listed, index, scores


def select_in_order(
    memory_data: dict[str, Any] | None, order: Iterable[int], max_tokens: int = 2000
) -> list[dict[str, Any]]:
    """The facts a block lists when ``order`` (positions among the usable facts, best
    first) replaces the ranking: how benchmarks pack other rankings exactly like ours."""
    data = memory_data if isinstance(memory_data, dict) else {}
    facts, index = get_index(data)
    if not facts:
        return []
    sections = fit_summaries(summaries(data), summary_budget(max_tokens, facts))
    return [facts[i] for i in pack(index, facts, sections, order, max_tokens)[1]]


def format_memory_for_injection(
    memory_data: Memory,
    max_tokens: int = 2000,
    context: Context = None,
    *,
    embedder: Embedder | None = None,
) -> str:
    """The ``<memory>…</memory>`` block for the system prompt, tags included, within budget.

    ``context`` is the turn: a string, or a list of texts whose last item is the current
    user message (earlier items, the recent turns, count half). Without context the facts
    come in DeerFlow's confidence order. Returns "" when there is nothing to inject.
    Project facts are left out unless ``memory_data`` is a view of their project's
    scope (``scopes.view``, as ``Memory.injection`` takes): the user's facts only.
    """
    return _compose(memory_data, max_tokens, context, embedder)[0]


def inject(
    memory_data: Memory,
    max_tokens: int = 2000,
    context: Context = None,
    *,
    embedder: Embedder | None = None,
) -> tuple[str, list[dict[str, Any]]]:
    """The block and the facts it lists, in its order, from one ranking pass: what a turn
    needs, where calling both functions below would rank and pack twice."""
    text, facts, chosen, _, _ = _compose(memory_data, max_tokens, context, embedder)
    return text, [facts[i] for i in chosen]


def select_facts(
    memory_data: Memory,
    context: Context = None,
    max_tokens: int = 2000,
    *,
    embedder: Embedder | None = None,
) -> list[dict[str, Any]]:
    """The facts ``format_memory_for_injection`` lists for the same arguments, in its order."""
    return inject(memory_data, max_tokens, context, embedder=embedder)[1]


def explain_selection(
    memory_data: Memory,
    context: Context = None,
    max_tokens: int = 2000,
    *,
    embedder: Embedder | None = None,
) -> list[dict[str, Any]]:
    """Why each injected fact is there: its rank and score parts, in injection order.

    ``relevance`` fuses ``lexical`` (BM25, normalised per query) and ``dense`` (cosine,
    min-max normalised per query, or None without embeddings), with the lifts from the
    fact's day and neighbours and, when the context names a date, its date match;
    ``score`` adds the confidence, recency and specificity priors. With no context,
    relevance is 0 and the score is the confidence.
    """
    return explain_injection(memory_data, context, max_tokens, embedder=embedder)[1]


def explain_injection(
    memory_data: Memory,
    context: Context = None,
    max_tokens: int = 2000,
    *,
    embedder: Embedder | None = None,
) -> tuple[str, list[dict[str, Any]]]:
    """The block and ``explain_selection``'s rows, from one ranking pass (the inspector)."""
    text, facts, chosen, index, scores = _compose(memory_data, max_tokens, context, embedder)
    rank_of = {int(i): r for r, i in enumerate(scores.order, start=1)}
    return text, [
        {
            "fact": facts[i],
            "rank": rank_of[i],
            "relevance": float(scores.relevance[i]),
            "lexical": float(scores.lexical[i]),
            "dense": None if scores.dense is None else float(scores.dense[i]),
            "confidence": float(index.confidence[i]),
            "recency": float(index.recency[i]),
            "specificity": float(index.specificity[i]),
            "score": float(scores.total[i]),
        }
        for i in chosen
    ]


def rank_facts(
    memory_data: Memory,
    query: str,
    *,
    embedder: Embedder | None = None,
    relevant_only: bool = True,
) -> list[tuple[dict[str, Any], float]]:
    """Facts relevant to ``query``, best first: none when nothing stored is (the
    ``relevance`` floor), else those holding one of its words themselves, as similar as the
    embedder's listing floor asks (or the most similar, when its similarity alone found
    something), or learned within a few days of a date it names.

    ``relevant_only=False`` drops the floor: every fact that matches at all (any fact with
    embeddings), best first, as a "nearest miss" needs. An empty query lists every fact in
    confidence order, scored by its confidence.
    """
    shown = seen(memory_data)
    facts, index = get_index(shown.data, shown.key)
    scores = score(index, query, embedder)
    if not query or not query.strip():
        return [(facts[int(i)], float(index.confidence[int(i)])) for i in scores.order]
    on_date = (
        scores.date_match >= _SEARCH_DATE_MATCH
        if scores.date_match is not None
        else np.zeros(len(facts), dtype=bool)
    )
    if not relevant_only:
        keep = scores.matched | on_date if scores.dense is None else np.ones(len(facts), bool)
        return [(facts[int(i)], float(scores.total[int(i)])) for i in scores.order if keep[i]]
    terms = query_terms(query)
    shares = fact_coverage(index, terms)
    enough = relevance.coverage_floor(len(terms), recall=False)
    floor = relevance.similarity_floor(embedder, recall=False)
    listing = relevance.similarity_floor(embedder, recall=False, listing=True)
    similar = (
        scores.similarity >= listing
        if listing is not None and scores.similarity is not None
        else np.zeros(len(facts), dtype=bool)
    )
    sims = scores.similarity
    best_similarity = float(sims.max()) if sims is not None and sims.size else None
    if not (
        relevance.found(float(shares.max(initial=0.0)), enough, best_similarity, floor)
        or on_date.any()
    ):
        return []
    keep = (shares > 0) | similar | on_date
    if sims is not None and best_similarity is not None and floor is not None:
        keep[int(np.argmax(sims))] |= (
            best_similarity >= floor
        )  # the fact that made the search find something
    return [(facts[int(i)], float(scores.total[int(i)])) for i in scores.order if keep[i]]


def query_terms(query: str) -> list[str]:
    """The query's distinct index terms, in order: what coverage weighs, and how many
    decide whether it is a short query (``relevance.coverage_floor``).

    A which/what question names the kind of answer it wants in the noun its phrase ends
    on ("which dataframe *library* do I like", "what cross-validation *setup* do I use"),
    and the fact that answers it rarely says that word ("Prefers polars over pandas for
    dataframes"): when the phrase holds other terms, that noun is left out."""
    terms = list(dict.fromkeys(analyze(query)))
    phrase = _ANSWER_KIND.match(query)
    if phrase is not None:
        named = list(dict.fromkeys(analyze(phrase.group(1))))
        if len(named) >= 2 and len(terms) > 1:
            terms.remove(named[-1])
    return terms


# "which dataframe library do …", "what kind of cross-validation setup is …": the words
# between the question word and the auxiliary that follows them (at most three).
_AUXILIARY = r"(?:do|does|did|is|are|was|were|am|should|would|could|can|will|have|has|had)"
_ANSWER_KIND = re.compile(
    r"^\W*(?:which|what)\s+(?:(?:kind|sort|type)s?\s+of\s+)?"
    rf"(?!{_AUXILIARY}\b)((?:[\w'-]+\s+){{1,3}}?){_AUXILIARY}\b",
    re.IGNORECASE,
)


def fact_coverage(index: FactIndex, terms: list[str]) -> np.ndarray:
    """Per usable fact, the IDF-weighted share of the query's ``terms`` (``query_terms``)
    it holds (``relevance``)."""
    n = len(index.contents)
    if index.bm25 is None:
        return np.zeros(n)
    holders = {term: index.bm25.containing(term) for term in terms}
    return relevance.coverage(n, holders)
