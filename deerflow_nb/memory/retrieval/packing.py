"""Packing ranked facts into the block's token budget, each at its exact marginal cost.

The grouping plan (tags or dates outside, the year legend), the costs, and the layout.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from functools import lru_cache
from itertools import chain
from typing import Any, NamedTuple

from ...tokens import count_tokens
from .block import (
    YEAR_LEGEND,
    Section,
    date_header,
    fact_date,
    fact_line,
    fact_tag,
    in_year,
    line_cost,
    render,
    single_line,
    tag_header,
)
from .fact_index import FactIndex

# A fact line never costs less than this ("- y\n"): below it, stop looking.
_MIN_LINE_TOKENS = 3
# The block's grouping and year legend are chosen from the best candidates whose lines
# would fill the budget, at least _HEAD_MIN and at most _HEAD_CANDIDATES of them.
_HEAD_MIN = 8
_HEAD_CANDIDATES = 40
# A search naming a date also lists facts learned within about five days of it.
# After this many facts in a row that do not fit, the rest will not either (in practice).
_MAX_MISSES = 64


# A fact's place under a plan: its outer and inner header lines, their costs, whether each
# leaves its year to the legend, its own line's cost, its one-line form's, and that form
# (None when the fact keeps its own line under the header).
_Placed = tuple[str, str, int, int, bool, bool, int, int, str | None]


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
        cost = sum(line_cost(tag_header(t)) for t in tags)
        cost += sum(line_cost(date_header(d, year)) for d in dates)
        cost += line_cost(YEAR_LEGEND.format(year=year)) if year else 0
        if best is None or (cost, rank) < best[:2]:
            best = (cost, rank, _Plan(by_tag, year))
    return best[2] if best is not None else _Plan(True, None)


def _legend_year(dates: list[str | None]) -> str | None:
    """The year worth a legend for these date headers (one entry per header), or None."""
    years = Counter(date[:4] for date in dates if date)
    if not years:
        return None
    year, count = max(years.items(), key=lambda item: (item[1], item[0]))
    saved = line_cost(date_header(f"{year}-01-01")) - line_cost(date_header(f"{year}-01-01", year))
    return year if count * saved > line_cost(YEAR_LEGEND.format(year=year)) else None


def _line(
    index: FactIndex, facts: list[dict[str, Any]], i: int
) -> tuple[str, str | None, str, int]:
    """Fact ``i``'s tag, date, line and line cost (cached for the revision, and across
    revisions for the same text: a teammate's or a fold's commit changes a few facts)."""
    cached = index.line_cache.get(i)
    if cached is None:
        fact = facts[i]
        key = tuple(fact.get(name) for name in _LINE_FIELDS)
        try:
            cached = _parts(*key)
        except TypeError:  # a value no cache can key (a list): worked out each time
            cached = _worked_out(dict(zip(_LINE_FIELDS, key, strict=True)))
        index.line_cache[i] = cached
    return cached


_LINE_FIELDS = ("content", "category", "confidence", "createdAt")  # all a line shows


@lru_cache(maxsize=32768, typed=True)
def _parts(*values: Any) -> tuple[str, str | None, str, int]:
    return _worked_out(dict(zip(_LINE_FIELDS, values, strict=True)))


def _worked_out(fact: dict[str, Any]) -> tuple[str, str | None, str, int]:
    line = fact_line(fact)
    return fact_tag(fact), fact_date(fact), line, line_cost(line)


@lru_cache(maxsize=8192)
def _group(plan: _Plan, tag: str, date: str | None) -> tuple[str, str, int, int, bool, bool]:
    """The outer and inner header lines of a fact's group under ``plan``, their costs, and
    whether each is a date that leaves its year to the legend."""
    if plan.by_tag:
        outer, inner = tag_header(tag), date_header(date, plan.year)
        return outer, inner, line_cost(outer), line_cost(inner), False, in_year(date, plan.year)
    outer, inner = date_header(date, plan.year), tag_header(tag)
    return outer, inner, line_cost(outer), line_cost(inner), in_year(date, plan.year), False


def _layout(
    index: FactIndex, accepted: list[int], plan: _Plan, placed: dict[int, _Placed]
) -> tuple[list[str], list[int]]:
    """The Facts lines (year legend, outer headers, inner headers, fact lines) and the
    listed facts, in order; ``placed`` holds each accepted fact's group under ``plan``
    (``pack`` worked it out when it took the fact).

    ``accepted`` is in rank order; outer groups come in the order of their best-ranked
    fact, and so do the inner groups within each. An inner group of one fact is one line
    (``single_line``).
    """
    groups: dict[str, dict[str, list[int]]] = {}
    yearless = False
    for i in accepted:
        outer, inner, _, _, short_outer, short_inner, _, _, _ = placed[i]
        groups.setdefault(outer, {}).setdefault(inner, []).append(i)
        yearless = yearless or short_outer or short_inner
    lines: list[str] = []
    listed: list[int] = []
    cache = index.line_cache
    for outer, inners in groups.items():
        lines.append(outer)
        for inner, members in inners.items():
            single = placed[members[0]][8] if len(members) == 1 else None
            if single is not None:
                lines.append(single)
            else:
                lines.append(inner)
                lines += [cache[i][2] for i in members]
            listed += members
    legends = [YEAR_LEGEND.format(year=plan.year)] if yearless else []
    return legends + lines, listed


def pack(
    index: FactIndex,
    facts: list[dict[str, Any]],
    sections: list[Section],
    order: Iterable[int],
    max_tokens: int,
) -> tuple[str, list[int]]:
    """The block holding the facts that fit, tried in ``order``, and the listed positions.

    A fact costs its line, plus its outer header if it is the first of its outer group,
    plus the year legend if its date header is the first to leave its year to the legend.
    The first fact of an inner group costs its one-line form (header and text, see
    ``single_line``); the second turns that line back into a header and two fact lines.
    Each is the exact marginal cost of adding the fact.
    """
    # The block with an empty Facts section; each line then adds its own cost.
    used = count_tokens(render(sections, ["\0"]).replace("\0\n", ""))  # "Facts:\n</memory>"
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
    year_legend_cost = line_cost(YEAR_LEGEND.format(year=plan.year)) if plan.year else 0
    accepted: list[tuple[int, int]] = []  # (try number, position): sorted back to rank order
    skipped: list[tuple[int, int]] = []
    outers: set[str] = set()
    # Each inner group's size, and what its first fact's one-line form costs to undo (its
    # header and own line, less the one line) when a second fact joins it.
    pairs: dict[tuple[str, str], tuple[int, int]] = {}
    year_legend = False

    placed = index.meta.get(("placed", plan))
    if placed is None:
        placed = index.meta[("placed", plan)] = {}

    def fits(i: int) -> bool:
        """Add fact ``i`` if its line and the headers it brings fit."""
        nonlocal used, year_legend
        where = placed.get(i)
        if where is None:
            tag, date, line, own = _line(index, facts, i)
            group = _group(plan, tag, date)
            one_line = single_line(group[1], line)
            single = group[3] + own if one_line is None else line_cost(one_line)
            where = placed[i] = (*group, own, single, one_line)
        outer, inner, outer_cost, inner_cost, short_outer, short_inner, own, single, _ = where
        size, unfold = pairs.get((outer, inner), (0, 0))
        yearless = False
        if size == 0:
            cost = single
            unfold = inner_cost + own - single
            yearless = short_inner
        else:
            cost = own + (unfold if size == 1 else 0)
        if outer not in outers:
            cost += outer_cost
            yearless = yearless or short_outer
        if yearless and not year_legend:
            cost += year_legend_cost
        if used + cost > max_tokens:
            return False
        outers.add(outer)
        pairs[(outer, inner)] = (size + 1, unfold)
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
    # A skipped fact may fit now that later ones brought the headers it needed; one costing
    # more than the room left even at its cheapest (its own line, or its one-line form as
    # the first of its group) cannot, whatever headers came: it is not tried again.
    while skipped and max_tokens - used >= _MIN_LINE_TOKENS:
        room = max_tokens - used
        left = [item for item in skipped if min(placed[item[1]][6:8]) > room or not fits(item[1])]
        if len(left) == len(skipped):
            break
        accepted += [item for item in skipped if item not in left]
        skipped = left
    accepted = [i for _, i in sorted(accepted)]
    # Lines add up exactly (see ``line_cost``): the block costs ``used``, never more than the
    # budget, with no recount of the whole string (a new block per turn would cost a few
    # tenths of a millisecond to encode again).
    lines, listed = _layout(index, accepted, plan, placed)
    return render(sections, lines), listed
