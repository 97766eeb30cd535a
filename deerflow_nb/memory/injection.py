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
    03-01:
    - Prefers polars over pandas
    [context | 0.90]
    03-01:
    - Works on churn prediction for a telecom
    2025-11-20:
    - Moved to Lisbon
    Undated:
    - Wants to learn Rust
    </memory>

Every fact shows its category, confidence and date, but each is said once for the facts
that share it: facts are grouped under a ``[category | confidence]`` header, and within it
under the date they were learned; the commonest year of the block's best candidates is
stated once (the year legend) and left off the date headers in it, when that saves more
tokens than it costs. A tag on every line would cost ~8 tokens a fact, most of a short
fact's own cost (~19 tokens on LOCOMO), and a memory holds only a few distinct tags (an
extraction model writes round confidences: 0.8, 0.85, 0.9, 0.95); a full date header costs
7 tokens where ``03-01:`` costs 4. Only header lines start with ``[`` or end with ``:``
without starting with ``- ``; a fact whose text starts like a tag or a list item (``[``,
``- [goal | 0.99]``) carries its own tag on its line too, ``- [context | 0.90] [goal |
0.99] …``, so no text can pass for a tag.

The whole string, tags included, never exceeds ``max_tokens`` counted with ``cl100k_base``.
Summaries come first, as in DeerFlow; if they alone would not fit they are shortened, never
the budget broken. Facts then fill what is left in rank order (see ``ranking``), each
costing its line plus, for the first fact of a tag, the tag header, for the first of a date
within its tag, the date header, and for the first date header in the legend's year, the
legend; a fact that does not fit is skipped and the next one tried. The year legend is the
commonest year among the date headers of the best candidates, so a block about last year's
facts shortens those. The listing groups the chosen facts by tag, tags in the order of their
best-ranked fact, then by date in the same way, facts within a date in rank order (without
context: confidence order, so the most confident tag comes first); ``select_facts`` returns
them in that listing order. Every text from memory is escaped (``&``, ``<``, ``>`` and their
look-alikes such as ``＜`` and ``‹`` become entities; line breaks become spaces; control,
bidi and zero-width characters are removed), so no fact or summary can close or forge a tag
or add a line of its own.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache
from itertools import chain
from typing import TYPE_CHECKING, Any, NamedTuple

from ..tokens import count_tokens, truncate_to_tokens
from ..untrusted import clean_text
from .fact_index import FactIndex, coerce_confidence, get_index
from .ranking import Context, Scores, score

if TYPE_CHECKING:
    from .embeddings import Embedder

OPEN_TAG = "<memory>"
CLOSE_TAG = "</memory>"
FACTS_HEADER = "Facts:"
USER_FIELDS = (
    ("workContext", "Work"),
    ("personalContext", "Personal"),
    ("topOfMind", "Current Focus"),
)
HISTORY_FIELDS = (
    ("recentMonths", "Recent"),
    ("earlierContext", "Earlier"),
    ("longTermBackground", "Background"),
)
# A fact line never costs less than this ("- y\n"): below it, stop looking.
_MIN_LINE_TOKENS = 3
# The block's grouping and year legend are chosen from the best candidates whose lines
# would fill the budget, at least _HEAD_MIN and at most _HEAD_CANDIDATES of them.
_HEAD_MIN = 8
_HEAD_CANDIDATES = 40
# A search naming a date also lists facts learned within about five days of it.
_SEARCH_DATE_MATCH = 0.5
# After this many facts in a row that do not fit, the rest will not either (in practice).
_MAX_MISSES = 64
UNDATED_HEADER = "Undated:"
YEAR_LEGEND = "Dates without a year are in {year}."
_SPACE_RE = re.compile(r"\s+")
_CATEGORY_RE = re.compile(r"[^\w-]+")
_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}")
# Angle brackets NFKC leaves alone (full-width ＜ already becomes <): shown as entities too,
# so no look-alike can pass for a tag.
_LOOK_ALIKES = str.maketrans(
    dict.fromkeys("‹〈〈⟨❬❮❰⧼﹤ᐸ", "<") | dict.fromkeys("›〉〉⟩❭❯❱⧽﹥ᐳ", ">")
)
_TAG_LIKE_STARTS = ("[", "-", "*", "+", "•")

Section = tuple[str, list[tuple[str, str]]]


def escape(text: str) -> str:
    """One line of inert text: entities for ``& < >`` and their look-alikes, whitespace runs
    to one space, no control, bidi or zero-width characters (which hide what text says)."""
    text = clean_text(text)
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text).translate(_LOOK_ALIKES)
    text = _SPACE_RE.sub(" ", text).strip()
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def fact_tag(fact: dict[str, Any]) -> str:
    """``category | confidence``, as the block shows it (``context | 0.90``)."""
    category = _CATEGORY_RE.sub("", str(fact.get("category") or "context")) or "context"
    return f"{category} | {coerce_confidence(fact.get('confidence')):.2f}"


def fact_date(fact: dict[str, Any]) -> str | None:
    """The ``YYYY-MM-DD`` a fact was learned, or None when unknown."""
    created = _DATE_RE.match(str(fact.get("createdAt") or ""))
    return created.group(0) if created else None


def date_header(date: str | None, year: str | None = None) -> str:
    """``2026-03-01:``, or ``03-01:`` when the date is in ``year`` (the legend's)."""
    if not date:
        return UNDATED_HEADER
    return f"{date[5:]}:" if _in_year(date, year) else f"{date}:"


def _in_year(date: str | None, year: str | None) -> bool:
    """Whether ``date``'s header leaves its year to the legend's ``year``."""
    return bool(date and year and date[:4] == year)


def tag_header(tag: str) -> str:
    """``[category | confidence]``: the line that heads a tag's facts."""
    return f"[{tag}]"


def fact_line(fact: dict[str, Any]) -> str:
    """``- content``: the tag and the date head the line's group.

    A text that starts like a tag or a list item (``[``, ``- [goal | 0.99]``) carries its
    own tag too, ``- [category | confidence] content``, so it cannot pass for one.
    """
    text = escape(fact["content"])
    if text.startswith(_TAG_LIKE_STARTS):
        return f"- [{fact_tag(fact)}] {text}"
    return f"- {text}"


@lru_cache(maxsize=4096)
def _cost(line: str) -> int:
    """Tokens a line adds to the block, its line break included.

    cl100k's pre-tokenizer joins a line break only to what precedes it (punctuation, or
    whitespace before it) and starts a new piece after it unless whitespace follows; no
    line here starts or ends with whitespace (``escape`` strips every Unicode space, and
    headers are ours), so a block's count is its frame's plus the sum of these, exactly
    (``tests/test_injection.py`` checks both on arbitrary text).
    """
    return count_tokens(line + "\n")


def _summaries(memory_data: dict[str, Any]) -> list[Section]:
    sections: list[Section] = []
    for key, title, fields in (
        ("user", "User Context:", USER_FIELDS),
        ("history", "History:", HISTORY_FIELDS),
    ):
        group = memory_data.get(key)
        if not isinstance(group, dict):
            continue
        items = []
        for field_name, label in fields:
            entry = group.get(field_name)
            summary = entry.get("summary") if isinstance(entry, dict) else None
            if isinstance(summary, str) and escape(summary):
                items.append((label, escape(summary)))
        if items:
            sections.append((title, items))
    return sections


def _render(sections: list[Section], fact_lines: list[str]) -> str:
    blocks = [
        title + "\n" + "\n".join(f"- {label}: {text}" for label, text in items)
        for title, items in sections
        if items
    ]
    if fact_lines:
        blocks.append(FACTS_HEADER + "\n" + "\n".join(fact_lines))
    if not blocks:
        return ""
    return f"{OPEN_TAG}\n" + "\n\n".join(blocks) + f"\n{CLOSE_TAG}"


def _summary_budget(max_tokens: int, facts: list[dict[str, Any]]) -> int:
    """What the summaries may fill: all of the budget, or half when there are facts, so
    long summaries (verbose model output, an imported memory) cannot crowd out every fact
    the turn is about."""
    return max_tokens // 2 if facts else max_tokens


def _fit_summaries(sections: list[Section], max_tokens: int) -> list[Section]:
    """Shorten summaries (the longest first) until the block without facts fits."""
    if count_tokens(_render(sections, [])) <= max_tokens:
        return sections
    texts = {
        (s, i): text for s, (_, items) in enumerate(sections) for i, (_, text) in enumerate(items)
    }
    allow = {key: count_tokens(text) for key, text in texts.items()}
    # Water-fill the room left after the frame, then trim exactly until the whole fits.
    frame = count_tokens(
        _render([(t, [(label, "x") for label, _ in items]) for t, items in sections], [])
    )
    room = max(max_tokens - frame, 0)
    for n, key in enumerate(sorted(allow, key=allow.get)):
        allow[key] = min(allow[key], room // (len(allow) - n))
        room -= allow[key]

    def shortened() -> list[Section]:
        out = []
        for s, (title, items) in enumerate(sections):
            kept = []
            for i, (label, _) in enumerate(items):
                text = truncate_to_tokens(texts[(s, i)], allow[(s, i)]) if allow[(s, i)] > 0 else ""
                if text:
                    kept.append((label, text))
            out.append((title, kept))
        return out

    current = shortened()
    while allow and (excess := count_tokens(_render(current, [])) - max_tokens) > 0:
        longest = max(allow, key=allow.get)
        if allow[longest] <= 0:
            return []
        allow[longest] = max(allow[longest] - max(excess, 1), 0)
        current = shortened()
    return current if count_tokens(_render(current, [])) <= max_tokens else []


class _Plan(NamedTuple):
    """How a block groups its facts: ``by_tag`` (tag headers, dates under them) or by date
    (date headers, tags under them), and the year its legend states (or None)."""

    by_tag: bool
    year: str | None


def _plan(index: FactIndex, facts: list[dict[str, Any]], head: list[int]) -> _Plan:
    """The grouping and year legend that cost the fewest header tokens for ``head``, the
    block's best candidates: tags outside when they are fewer than their dates (a memory's
    few round confidences over many days), dates outside otherwise.

    For each grouping the year is the commonest among the date headers it would show (the
    latest year wins a tie), stated when leaving it off those headers saves more than the
    legend costs. A tie between groupings goes to tags outside."""
    pairs = {_line(index, facts, i)[:2] for i in head}
    best: tuple[int, int, _Plan] | None = None
    for rank, by_tag in enumerate((True, False)):
        dates = [d for _, d in pairs] if by_tag else list({d for _, d in pairs})
        tags = {t for t, _ in pairs} if by_tag else [t for t, _ in pairs]
        year = _legend_year(dates)
        cost = sum(_cost(tag_header(t)) for t in tags)
        cost += sum(_cost(date_header(d, year)) for d in dates)
        cost += _cost(YEAR_LEGEND.format(year=year)) if year else 0
        if best is None or (cost, rank) < best[:2]:
            best = (cost, rank, _Plan(by_tag, year))
    return best[2] if best is not None else _Plan(True, None)


def _legend_year(dates: list[str | None]) -> str | None:
    """The year worth a legend for these date headers (one entry per header), or None."""
    years = Counter(date[:4] for date in dates if date)
    if not years:
        return None
    year, count = max(years.items(), key=lambda item: (item[1], item[0]))
    saved = _cost(date_header(f"{year}-01-01")) - _cost(date_header(f"{year}-01-01", year))
    return year if count * saved > _cost(YEAR_LEGEND.format(year=year)) else None


def _line(
    index: FactIndex, facts: list[dict[str, Any]], i: int
) -> tuple[str, str | None, str, int]:
    """Fact ``i``'s tag, date, line and line cost (cached for the revision)."""
    cached = index.line_cache.get(i)
    if cached is None:
        line = fact_line(facts[i])
        cached = index.line_cache[i] = (fact_tag(facts[i]), fact_date(facts[i]), line, _cost(line))
    return cached


@lru_cache(maxsize=8192)
def _group(plan: _Plan, tag: str, date: str | None) -> tuple[str, str, int, int, bool, bool]:
    """The outer and inner header lines of a fact's group under ``plan``, their costs, and
    whether each is a date that leaves its year to the legend."""
    if plan.by_tag:
        outer, inner = tag_header(tag), date_header(date, plan.year)
        return outer, inner, _cost(outer), _cost(inner), False, _in_year(date, plan.year)
    outer, inner = date_header(date, plan.year), tag_header(tag)
    return outer, inner, _cost(outer), _cost(inner), _in_year(date, plan.year), False


def _layout(
    index: FactIndex, facts: list[dict[str, Any]], accepted: list[int], plan: _Plan
) -> tuple[list[str], list[int]]:
    """The Facts lines (year legend, outer headers, inner headers, fact lines) and the
    listed facts, in order.

    ``accepted`` is in rank order; outer groups come in the order of their best-ranked
    fact, and so do the inner groups within each.
    """
    groups: dict[str, dict[str, list[int]]] = {}
    yearless = False
    for i in accepted:
        outer, inner, _, _, short_outer, short_inner = _group(plan, *_line(index, facts, i)[:2])
        groups.setdefault(outer, {}).setdefault(inner, []).append(i)
        yearless = yearless or short_outer or short_inner
    lines: list[str] = []
    listed: list[int] = []
    cache = index.line_cache
    for outer, inners in groups.items():
        lines.append(outer)
        for inner, members in inners.items():
            lines.append(inner)
            lines += [cache[i][2] for i in members]
            listed += members
    legends = [YEAR_LEGEND.format(year=plan.year)] if yearless else []
    return legends + lines, listed


def _pack(
    index: FactIndex,
    facts: list[dict[str, Any]],
    sections: list[Section],
    order: Iterable[int],
    max_tokens: int,
) -> tuple[str, list[int]]:
    """The block holding the facts that fit, tried in ``order``, and the listed positions.

    A fact costs its line, plus its outer header if it is the first of its outer group,
    plus its inner header if it is the first of its group within that, plus the year legend
    if that date header is the first to leave its year to the legend: the exact marginal
    cost of adding it.
    """
    # The block with an empty Facts section; each line then adds its own cost.
    used = count_tokens(_render(sections, ["\0"]).replace("\0\n", ""))  # "Facts:\n</memory>"
    order = iter(order)
    # The best candidates, about as many as the block can hold: what the plan is for.
    head: list[int] = []
    room = max_tokens - used
    for i in order:
        head.append(int(i))
        room -= _line(index, facts, int(i))[3]
        if len(head) >= _HEAD_CANDIDATES or (room <= 0 and len(head) >= _HEAD_MIN):
            break
    plan = _plan(index, facts, head)
    year_legend_cost = _cost(YEAR_LEGEND.format(year=plan.year)) if plan.year else 0
    accepted: list[tuple[int, int]] = []  # (try number, position): sorted back to rank order
    skipped: list[tuple[int, int]] = []
    outers: set[str] = set()
    pairs: set[tuple[str, str]] = set()
    year_legend = False

    placed = index.meta.get(("placed", plan))
    if placed is None:
        placed = index.meta[("placed", plan)] = {}

    def fits(i: int) -> bool:
        """Add fact ``i`` if its line and the headers it brings fit."""
        nonlocal used, year_legend
        where = placed.get(i)
        if where is None:
            tag, date, _, line_cost = _line(index, facts, i)
            where = placed[i] = (*_group(plan, tag, date), line_cost)
        outer, inner, outer_cost, inner_cost, short_outer, short_inner, cost = where
        yearless = False
        if outer not in outers:
            cost += outer_cost
            yearless = short_outer
        if (outer, inner) not in pairs:
            cost += inner_cost
            yearless = yearless or short_inner
        if yearless and not year_legend:
            cost += year_legend_cost
        if used + cost > max_tokens:
            return False
        outers.add(outer)
        pairs.add((outer, inner))
        year_legend = year_legend or yearless
        used += cost
        return True

    misses = 0
    tried: set[int] = set()
    for n, i in enumerate(chain(head, order)):
        if max_tokens - used < _MIN_LINE_TOKENS or misses > _MAX_MISSES:
            break
        i = int(i)
        if i in tried:  # an order that names a fact twice
            continue
        tried.add(i)
        if fits(i):
            accepted.append((n, i))
            misses = 0
        else:
            skipped.append((n, i))
            misses += 1
    # A skipped fact may fit now that later ones brought the headers it needed.
    while skipped and max_tokens - used >= _MIN_LINE_TOKENS:
        left = [item for item in skipped if not fits(item[1])]
        if len(left) == len(skipped):
            break
        accepted += [item for item in skipped if item not in left]
        skipped = left
    accepted = [i for _, i in sorted(accepted)]
    # Lines add up exactly (see ``_cost``): the block costs ``used``, never more than the
    # budget, with no recount of the whole string (a new block per turn would cost a few
    # tenths of a millisecond to encode again).
    lines, listed = _layout(index, facts, accepted, plan)
    return _render(sections, lines), listed


def _compose(
    memory_data: dict[str, Any] | None,
    max_tokens: int,
    context: Context,
    embedder: Embedder | None,
) -> tuple[str, list[dict[str, Any]], list[int], FactIndex, Scores]:
    """The block, the usable facts, the positions of those it lists (in order), and why."""
    data = memory_data if isinstance(memory_data, dict) else {}
    facts, index = get_index(data)
    scores = score(index, context, embedder)
    sections = _fit_summaries(_summaries(data), _summary_budget(max_tokens, facts))
    if not facts:
        return _render(sections, []), facts, [], index, scores
    text, listed = _pack(index, facts, sections, scores.ranked(), max_tokens)
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
    sections = _fit_summaries(_summaries(data), _summary_budget(max_tokens, facts))
    return [facts[i] for i in _pack(index, facts, sections, order, max_tokens)[1]]


def format_memory_for_injection(
    memory_data: dict[str, Any] | None,
    max_tokens: int = 2000,
    context: Context = None,
    *,
    embedder: Embedder | None = None,
) -> str:
    """The ``<memory>…</memory>`` block for the system prompt, tags included, within budget.

    ``context`` is the turn: a string, or a list of texts whose last item is the current
    user message (earlier items, the recent turns, count half). Without context the facts
    come in DeerFlow's confidence order. Returns "" when there is nothing to inject.
    """
    return _compose(memory_data, max_tokens, context, embedder)[0]


def inject(
    memory_data: dict[str, Any] | None,
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
    memory_data: dict[str, Any] | None,
    context: Context = None,
    max_tokens: int = 2000,
    *,
    embedder: Embedder | None = None,
) -> list[dict[str, Any]]:
    """The facts ``format_memory_for_injection`` lists for the same arguments, in its order."""
    return inject(memory_data, max_tokens, context, embedder=embedder)[1]


def explain_selection(
    memory_data: dict[str, Any] | None,
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
    memory_data: dict[str, Any] | None,
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
    memory_data: dict[str, Any] | None, query: str, *, embedder: Embedder | None = None
) -> list[tuple[dict[str, Any], float]]:
    """Facts matching ``query`` (lexically, or any fact when embeddings are on, or learned
    within a few days of a date it names), best first.

    An empty query lists every fact in confidence order, scored by its confidence.
    """
    facts, index = get_index(memory_data if isinstance(memory_data, dict) else {})
    scores = score(index, query, embedder)
    if not query or not query.strip():
        return [(facts[int(i)], float(index.confidence[int(i)])) for i in scores.order]
    if scores.dense is not None:  # every fact has a similarity (min-max puts the least at 0)
        return [(facts[int(i)], float(scores.total[int(i)])) for i in scores.order]
    matched = scores.matched.copy()
    if scores.date_match is not None:
        matched |= scores.date_match >= _SEARCH_DATE_MATCH
    return [(facts[int(i)], float(scores.total[int(i)])) for i in scores.order if matched[i]]
