"""The ``<memory>`` block's lines and what each costs in tokens.

Inert text, fact, tag and date lines, and the summary sections.

Every text from memory goes through ``escape`` (the prompt boundary's characters, then
entities for ``& < >`` and their look-alikes, one line), so no fact or summary
can close or forge a tag or add a line of its own. Line costs add up exactly to the
block's (see ``line_cost``), which is what lets ``packing`` fill a budget without recounting.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from ...tokens import count_tokens, truncate_to_tokens
from ...untrusted import prompt_chars
from .dates import MONTHS
from .fact_index import coerce_confidence

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
UNDATED_HEADER = "Undated:"
YEAR_LEGEND = "Dates without a year are in {year}."
_SPACE_RE = re.compile(r"\s+")
_CATEGORY_RE = re.compile(r"[^\w-]+")
_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}")
_TAG_LIKE_STARTS = ("[", "-", "*", "+", "•")

Section = tuple[str, list[tuple[str, str]]]


def escape(text: str) -> str:
    """One line of inert text through the prompt boundary (``untrusted.prompt_chars``: no
    control, bidi, zero-width, tag or invisible characters, look-alike brackets as ``<>``),
    then entities for ``& < >`` and whitespace runs to one space."""
    text = _SPACE_RE.sub(" ", prompt_chars(text)).strip()
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def fact_tag(fact: dict[str, Any]) -> str:
    """``category | confidence``, as the block shows it (``context | 0.90``)."""
    category = _CATEGORY_RE.sub("", str(fact.get("category") or "context")) or "context"
    return f"{category} | {coerce_confidence(fact.get('confidence')):.2f}"


def fact_date(fact: dict[str, Any]) -> str | None:
    """The ``YYYY-MM-DD`` a fact was learned, or None when unknown."""
    created = _DATE_RE.match(str(fact.get("createdAt") or ""))
    return created.group(0) if created else None


@lru_cache(maxsize=4096)
def date_header(date: str | None, year: str | None = None) -> str:
    """``1 Mar 2026:``, or ``1 Mar:`` when the date is in ``year`` (the legend's).

    A day and a month's name cost cl100k three tokens where ``03-01:`` costs four, and
    read the same to a model and a person; a month out of range stays as written."""
    if not date:
        return UNDATED_HEADER
    month = int(date[5:7])
    if not 1 <= month <= 12:
        return f"{date[5:]}:" if in_year(date, year) else f"{date}:"
    day = f"{int(date[8:10])} {MONTHS[month - 1][:3].title()}"
    return f"{day}:" if in_year(date, year) else f"{day} {date[:4]}:"


def in_year(date: str | None, year: str | None) -> bool:
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


def single_line(header: str, line: str) -> str | None:
    """A group of one fact as one line, a token cheaper than its header over its line, or
    None when the fact keeps its own line under the header.

    Under a tag header a date group of one reads ``1 Mar: text``, unless the text ends with
    ``:`` (the line would end like a header); under a date header a tag group of one is the
    fact line with its own tag, ``- [context | 0.90] text`` (a line that carries its tag
    already needs nothing more).
    """
    if header.startswith("["):
        return line if line.startswith("- [") else f"- {header} {line[2:]}"
    return None if line.endswith(":") else f"{header} {line[2:]}"


@lru_cache(maxsize=4096)
def line_cost(line: str) -> int:
    """Tokens a line adds to the block, its line break included.

    cl100k's pre-tokenizer joins a line break only to what precedes it (punctuation, or
    whitespace before it) and starts a new piece after it unless whitespace follows; no
    line here starts or ends with whitespace (``escape`` strips every Unicode space, and
    headers are ours), so a block's count is its frame's plus the sum of these, exactly
    (``tests/test_injection.py`` checks both on arbitrary text).
    """
    return count_tokens(line + "\n")


def summaries(memory_data: dict[str, Any]) -> list[Section]:
    """The user and history summaries that have text, escaped, with their labels, then the
    active project's (``projectContext``, set by ``scopes.visible``) as ``Project Context:``."""
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
    project = memory_data.get("projectContext")
    if isinstance(project, dict) and isinstance(project.get("summary"), str):
        name, text = escape(str(project.get("name") or "")), escape(project["summary"])
        if name and text:
            sections.append(("Project Context:", [(name, text)]))
    return sections


def render(sections: list[Section], fact_lines: list[str]) -> str:
    """The whole block from its sections and Facts lines; "" when both are empty."""
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


def summary_budget(max_tokens: int, facts: list[dict[str, Any]]) -> int:
    """What the summaries may fill: all of the budget, or half when there are facts, so
    long summaries (verbose model output, an imported memory) cannot crowd out every fact
    the turn is about."""
    return max_tokens // 2 if facts else max_tokens


def fit_summaries(sections: list[Section], max_tokens: int) -> list[Section]:
    """Shorten summaries (the longest first) until the block without facts fits."""
    if count_tokens(render(sections, [])) <= max_tokens:
        return sections
    texts = {
        (s, i): text for s, (_, items) in enumerate(sections) for i, (_, text) in enumerate(items)
    }
    allow = {key: count_tokens(text) for key, text in texts.items()}
    # Water-fill the room left after the frame, then trim exactly until the whole fits.
    frame = count_tokens(
        render([(t, [(label, "x") for label, _ in items]) for t, items in sections], [])
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
    while allow and (excess := count_tokens(render(current, [])) - max_tokens) > 0:
        longest = max(allow, key=allow.get)
        if allow[longest] <= 0:
            return []
        allow[longest] = max(allow[longest] - max(excess, 1), 0)
        current = shortened()
    return current if count_tokens(render(current, [])) <= max_tokens else []
