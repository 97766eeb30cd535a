"""Dates a message names: what counts as one, and the facts learned then coming first."""

from __future__ import annotations

from datetime import date

import numpy as np
import pytest

from deerflow_nb.memory.retrieval.dates import date_match, fact_ordinals, mentioned_dates
from deerflow_nb.memory.retrieval.injection import select_facts


def days(text: str) -> list[tuple[date, date]]:
    return [(date.fromordinal(a), date.fromordinal(b)) for a, b in mentioned_dates(text)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("What did Maria share on 16 June, 2023?", [(date(2023, 6, 16), date(2023, 6, 16))]),
        ("on May 23rd 2023", [(date(2023, 5, 23), date(2023, 5, 23))]),
        ("the 3rd of Sept 2023", [(date(2023, 9, 3), date(2023, 9, 3))]),
        ("Jan. 5, 2024", [(date(2024, 1, 5), date(2024, 1, 5))]),
        # No space after the comma, as people type it (a LOCOMO question does).
        ("shared by John on December 1,2023", [(date(2023, 12, 1), date(2023, 12, 1))]),
        ("on 3 June,2023", [(date(2023, 6, 3), date(2023, 6, 3))]),
        ("since 2024-02-29", [(date(2024, 2, 29), date(2024, 2, 29))]),
        ("What happened in December 2023?", [(date(2023, 12, 1), date(2023, 12, 31))]),
        ("in february 2024", [(date(2024, 2, 1), date(2024, 2, 29))]),
        # A day the month does not have still names the month.
        ("on 31 February, 2023", [(date(2023, 2, 1), date(2023, 2, 28))]),
    ],
)
def test_absolute_days_and_months_are_read(text: str, expected: list) -> None:
    assert days(text) == expected


def test_a_full_date_is_not_also_read_as_its_month() -> None:
    assert days("June 2023 and 4 July 2023") == [
        (date(2023, 7, 4), date(2023, 7, 4)),
        (date(2023, 6, 1), date(2023, 6, 30)),
    ]


@pytest.mark.parametrize(
    "text", ["in 2023", "last Tuesday", "2023-02-31", "2023-13-01", "May I ask?", ""]
)
def test_no_date_without_a_real_day_or_month_and_a_year(text: str) -> None:
    assert mentioned_dates(text) == []


def test_the_match_is_one_inside_the_span_and_decays_outside() -> None:
    ordinals = fact_ordinals(["2023-06-16T10:00:00Z", "2023-06-18", "2023-08-01", "", "junk"])
    (span,) = mentioned_dates("on 16 June, 2023")
    match = date_match(ordinals, [span])
    assert match[0] == 1.0
    assert 0.5 < match[1] < 1.0
    assert match[2] < 0.01
    assert list(match[3:]) == [0.0, 0.0]  # undated facts gain nothing
    assert np.array_equal(date_match(ordinals, []), np.zeros(5))


def fact(content: str, created: str) -> dict:
    return {
        "id": content,
        "content": content,
        "category": "context",
        "confidence": 0.9,
        "createdAt": created,
    }


def test_facts_learned_on_the_named_day_come_first() -> None:
    facts = [
        fact("Maria shared news about the puppy", "2023-05-02T10:00:00Z"),
        fact("Maria shared news about the shelter", "2023-06-16T10:00:00Z"),
        fact("Maria shared news about the promotion", "2023-07-30T10:00:00Z"),
    ]
    data = {"facts": facts}
    question = "What news did Maria share on 16 June, 2023?"
    assert select_facts(data, question, 2000)[0] is facts[1]
    assert select_facts(data, "What news did Maria share in May 2023?", 2000)[0] is facts[0]
    # Without a date, the three match alike and the most recent wins the tie.
    assert select_facts(data, "What news did Maria share?", 2000)[0] is facts[2]


def test_a_search_naming_a_date_lists_the_facts_learned_then() -> None:
    from deerflow_nb.memory.retrieval.injection import rank_facts

    facts = [
        fact("Adopted a greyhound", "2023-06-14T10:00:00Z"),
        fact("Started a pottery class", "2023-06-16T10:00:00Z"),
        fact("Moved to Lisbon", "2023-09-01T10:00:00Z"),
    ]
    found = [f["content"] for f, _ in rank_facts({"facts": facts}, "16 June, 2023")]
    # The named day first, two days off next; a fact months away is not listed.
    assert found == ["Started a pottery class", "Adopted a greyhound"]
    # Words and a date: the words' match first, then what was learned that day.
    found = [f["content"] for f, _ in rank_facts({"facts": facts}, "greyhound or 2023-09-01")]
    assert found == ["Adopted a greyhound", "Moved to Lisbon"]
