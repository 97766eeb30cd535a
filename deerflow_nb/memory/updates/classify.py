"""A fact's category read from its text, for a fact added without one (``%memory add``).

The offline extractor files what a user says in the first person ("I prefer …"); facts are
written in the third person ("Prefers …"), so the same verbs are matched here in that form.
The first pattern that matches wins; anything else is ``context``, DeerFlow's default.
"""

from __future__ import annotations

import re

_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "correction",
        re.compile(
            r"^(?:no longer|not|never|does not|doesn't|stopped|actually|is not|isn't|"
            r"has stopped|switched (?:away )?from)\b"
        ),
    ),
    (
        "preference",
        re.compile(
            r"^(?:prefers|likes|loves|enjoys|dislikes|hates|favou?rs|wants .+ rather|"
            r"would rather|always uses)\b"
        ),
    ),
    (
        "goal",
        re.compile(r"^(?:wants to|plans to|hopes to|aims to|intends to|is going to|goal)\b"),
    ),
    (
        "knowledge",
        re.compile(
            r"^(?:knows|is an expert|is experienced|specializes|specialises|studied|"
            r"is familiar|understands|has experience|is fluent|speaks)\b"
        ),
    ),
    (
        "behavior",
        re.compile(
            r"^(?:uses|usually|often|typically|tends to|normally|always|regularly|"
            r"writes|logs|runs|checks|reviews)\b"
        ),
    ),
)


def category_of(text: str) -> str:
    """The category ``text`` reads as (``context`` when none stands out)."""
    low = " ".join(text.casefold().split()).removeprefix("the user ").removeprefix("user ")
    for category, pattern in _PATTERNS:
        if pattern.search(low):
            return category
    return "context"
