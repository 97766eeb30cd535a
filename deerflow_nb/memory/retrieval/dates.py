"""Dates a message names, and how close each fact's date is to them.

"What did I decide on 3 June, 2023?" or "…in March 2024?" asks about what was learned then,
and every fact carries the date it was learned (``createdAt``). Only absolute dates with a
year are read (``3 June, 2023``, ``June 3rd 2023``, ``2023-06-03``, ``March 2024``): a
relative one ("last week") would need the message's own date, which a turn does not have.
"""

from __future__ import annotations

import re
from datetime import date

import numpy as np

# A fact learned this many days from a named day keeps 1/e of the match: sessions are
# dated by when they happened, and people name a day within a week or so of it.
DAY_SCALE = 7.0

# The month names, lower case, in order: the one list memory reads and writes dates with.
MONTHS = (
    "january", "february", "march", "april", "may", "june",
    "july", "august", "september", "october", "november", "december",
)  # fmt: skip
# Full names and their usual abbreviations, longest first so "Sept" is not read as "Sep".
_MONTH_NAMES = sorted({*MONTHS, *(m[:3] for m in MONTHS), "sept"}, key=lambda m: (-len(m), m))
_MONTH = r"(?P<month>" + "|".join(_MONTH_NAMES) + r")\.?"
_DAY = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>\d{4})"
# Before the year: a space, a comma and a space, or a comma alone ("December 1,2023").
_TO_YEAR = r"(?:,\s*|\s+)"
_PATTERNS = [
    re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH}{_TO_YEAR}{_YEAR}\b", re.IGNORECASE),
    re.compile(rf"\b{_MONTH}\s+{_DAY}{_TO_YEAR}{_YEAR}\b", re.IGNORECASE),
    re.compile(r"\b(?P<year>\d{4})-(?P<mon>\d{2})-(?P<day>\d{2})\b"),
]
_MONTH_YEAR = re.compile(rf"\b{_MONTH},?\s+{_YEAR}\b", re.IGNORECASE)

_FOUR_DIGITS = re.compile(r"\d{4}")

Span = tuple[int, int]  # first and last day, as proleptic Gregorian ordinals


def _month_number(name: str) -> int:
    return next(n for n, m in enumerate(MONTHS, start=1) if m.startswith(name[:3].lower()))


def mentioned_dates(text: str) -> list[Span]:
    """The days (or whole months) ``text`` names, as ordinal spans; [] when none."""
    if not _FOUR_DIGITS.search(text):  # every form names a year: most messages name none
        return []
    spans: list[Span] = []
    taken: list[tuple[int, int]] = []
    for pattern in _PATTERNS:
        for match in pattern.finditer(text):
            month = match.groupdict().get("mon")
            try:
                day = date(
                    int(match["year"]),
                    int(month) if month else _month_number(match["month"]),
                    int(match["day"]),
                )
            except ValueError:  # 31 February and the like
                continue
            spans.append((day.toordinal(), day.toordinal()))
            taken.append(match.span())
    for match in _MONTH_YEAR.finditer(text):
        if any(start <= match.start() < end for start, end in taken):
            continue  # the month of a full date already read
        year, month = int(match["year"]), _month_number(match["month"])
        first = date(year, month, 1)
        after = date(year + month // 12, month % 12 + 1, 1)
        spans.append((first.toordinal(), after.toordinal() - 1))
    return spans


def fact_ordinals(dates: list[str]) -> np.ndarray:
    """Each ``YYYY-MM-DD…`` as a day ordinal; NaN where the date is missing or unreadable."""
    seen: dict[str, float] = {}  # a memory holds far fewer days than facts
    for text in dates:
        day = text[:10]
        if day not in seen:
            try:
                seen[day] = date.fromisoformat(day).toordinal()
            except ValueError:
                seen[day] = np.nan
    return np.fromiter((seen[text[:10]] for text in dates), dtype=float, count=len(dates))


def date_match(ordinals: np.ndarray, spans: list[Span]) -> np.ndarray:
    """Per fact, in [0, 1]: 1 inside a named span, decaying with the days outside it."""
    match = np.zeros(len(ordinals))
    dated = ~np.isnan(ordinals)
    for first, last in spans:
        outside = np.maximum(np.maximum(first - ordinals, ordinals - last), 0.0)
        match = np.maximum(match, np.where(dated, np.exp(-np.nan_to_num(outside) / DAY_SCALE), 0))
    return match
