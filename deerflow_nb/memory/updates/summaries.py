"""Summaries kept true to the facts, in the change that changes the facts.

The summaries are injected on every turn, so a fact forgotten, moved to another scope or
corrected must leave them in the same change, or the model goes on reading it. A user
section summarises the user's own facts of its categories (``schema/sections.py``), a
project's summary (memory.json's ``projects``) that project's facts. After every change:

- a summary **composed** from facts — every word of it is a word of the facts before or
  after the change, or of what the change proposed: the offline model's, and ours — is
  composed again from the facts it summarises now, all of them (so a fact that left its
  scope leaves its summary, and an older one is never dropped for a newer one);
- a summary a model **wrote** says more than its facts: its sentences restating a fact the
  change removed, moved out of its scope or corrected are dropped, unless the same change
  wrote that section (the model's new text is its own account). The history sections
  summarise no facts and are only edited this way.

An empty summary is never started here (a DeerFlow memory with facts and no summaries keeps
none): a summary is written by a fold, then kept true.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from ...projects import fact_project
from ...schema.constants import HISTORY_SECTIONS, USER_SECTIONS
from ...schema.sections import compose, section_of, words
from ...similarity import signature
from ..scopes import PROJECTS_KEY
from .events import Event

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
Fact = dict[str, Any]


def refresh_summaries(
    before: Sequence[Fact],
    out: dict[str, Any],
    *,
    written: set[str],
    proposed: Sequence[str] = (),
    now: str,
) -> list[Event]:
    """Bring ``out``'s summaries in line with its facts (``out`` changed in place; see the
    module's doc). ``before`` are the facts before the change, ``written`` the sections the
    change set itself (``user.workContext``, ``projects.NAME``), ``proposed`` the texts it
    proposed; one ``section`` event per summary changed."""
    after = [f for f in out.get("facts") or [] if isinstance(f, dict)]
    old = {f.get("id"): f for f in before if isinstance(f, dict)}
    new = {f.get("id"): f for f in after}
    changed = [
        f
        for i, f in old.items()
        if i not in new
        or new[i].get("content") != f.get("content")
        or fact_project(new[i]) != fact_project(f)
    ]
    pool: set[str] | None = None

    def vocabulary() -> set[str]:
        nonlocal pool
        if pool is None:
            pool = set()
            for text in [*(str(f.get("content", "")) for f in [*before, *after]), *proposed]:
                pool |= words(text)
        return pool

    events: list[Event] = []
    for key, entry, covers, scope in _sections(out):
        summary = entry.get("summary")
        if not isinstance(summary, str) or not summary.strip():
            continue
        gone = [str(f.get("content", "")) for f in changed if scope(f) or f.get("id") not in new]
        text = summary if key in written else _scrubbed(summary, gone)
        if covers is not None:
            then = [(f.get("id"), f.get("content")) for f in before if covers(f)]
            now_facts = [f for f in after if covers(f)]
            different = then != [(f.get("id"), f.get("content")) for f in now_facts]
            if (different or key in written) and words(summary) <= vocabulary():
                ranks = [_confidence(f) for f in now_facts]
                text = compose([str(f.get("content", "")) for f in now_facts], ranks)
        if text != summary:
            entry["summary"], entry["updatedAt"] = text, now
            events.append(Event("section", section=key, old_content=summary, new_content=text))
    return events


Section = tuple[str, dict[str, Any], Callable[[Fact], bool] | None, Callable[[Fact], bool]]


def _sections(out: dict[str, Any]) -> list[Section]:
    """Each summary section of ``out`` (its entry made a copy ``out`` holds, so it may be
    edited in place), the test for the facts it is composed from (None: it is not), and the
    test for the facts of its scope."""
    found: list[Section] = []
    for group, names in (("user", USER_SECTIONS), ("history", HISTORY_SECTIONS)):
        sections = out.get(group)
        if not isinstance(sections, dict):
            continue
        for name in names:
            entry = sections.get(name)
            if not isinstance(entry, dict):
                continue
            sections[name] = entry = dict(entry)
            covers = _user_section(name) if group == "user" else None
            found.append((f"{group}.{name}", entry, covers, _users))
    projects = out.get(PROJECTS_KEY)
    if isinstance(projects, dict):
        projects = out[PROJECTS_KEY] = dict(projects)
        for name, entry in projects.items():
            if isinstance(entry, dict):
                projects[name] = entry = dict(entry)
                mine = _project(str(name))
                found.append((f"{PROJECTS_KEY}.{name}", entry, mine, mine))
    return found


def _users(fact: Fact) -> bool:
    return fact_project(fact) is None


def _user_section(name: str) -> Callable[[Fact], bool]:
    return lambda f: fact_project(f) is None and section_of(f.get("category")) == name


def _project(name: str) -> Callable[[Fact], bool]:
    return lambda f: fact_project(f) == name


def _confidence(fact: Fact) -> float:
    value = fact.get("confidence")
    return float(value) if isinstance(value, int | float) else 0.0


def _scrubbed(summary: str, gone: list[str]) -> str:
    """``summary`` without the sentences that restate one of the ``gone`` texts."""
    if not gone:
        return summary
    sentences = _SENTENCE_END.split(summary)
    kept = [s for s in sentences if not any(restates(text, s) for text in gone)]
    return summary if len(kept) == len(sentences) else " ".join(kept)


def restates(fact: str, sentence: str) -> bool:
    """Whether ``sentence`` says what ``fact`` says: nearly all the fact's content words (on
    the same side of any comparison) are in it; all of them for a fact of two or fewer."""
    fact_words = signature(fact)
    if not fact_words:
        return False
    hits = len(fact_words & signature(sentence))
    return hits == len(fact_words) if len(fact_words) <= 2 else hits >= 0.8 * len(fact_words)
