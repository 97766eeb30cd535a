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
from collections.abc import Iterable, Sequence
from typing import Any

from ...projects import DEFAULT_PROJECT, fact_project
from ...schema.constants import HISTORY_SECTIONS, USER_SECTIONS
from ...schema.sections import compose, section_of, words
from ...similarity import signature
from ..scopes import PROJECTS_KEY, candidate_owner
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
    sections = [s for s in _sections(out) if str(s[1].get("summary") or "").strip()]
    if not sections:
        return []
    went, came = _unmatched(before, out.get("facts") or [])
    old = {f.get("id"): f for f in went if isinstance(f, dict)}
    new = {f.get("id"): f for f in came if isinstance(f, dict)}
    changed, touched, new_texts = _differences(old, new)
    texts: list[str] | None = None  # built once, and only when a summary may be recomposed
    now_facts: dict[str, list[Fact]] | None = None

    events: list[Event] = []
    for key, entry, composed, owner in sections:
        summary = str(entry["summary"])
        gone = [
            str(f.get("content", ""))
            for f in changed
            if fact_project(f) == owner or f.get("id") not in new
        ]
        text = summary if key in written else _scrubbed(summary, gone)
        if composed and (key in touched or key in written):
            if texts is None:  # every text before and after the change, each once
                texts = [*(str(f.get("content", "")) for f in before), *new_texts, *proposed]
            if _composed_of(summary, texts):
                if now_facts is None:
                    now_facts = _by_section(f for f in out["facts"] if isinstance(f, dict))
                facts = now_facts.get(key, [])
                ranks = [_confidence(f) for f in facts]
                text = compose([str(f.get("content", "")) for f in facts], ranks)
        if text != summary:
            entry["summary"], entry["updatedAt"] = text, now
            events.append(Event("section", section=key, old_content=summary, new_content=text))
    return events


def _unmatched(before: Sequence[Any], after: Sequence[Any]) -> tuple[list[Any], list[Any]]:
    """The facts of ``before`` that ``after`` does not hold as the very same object, and
    those of ``after`` that ``before`` did not; where the lists disagree on order, more
    (never fewer: a fact in both is in both lists, and ``_differences`` finds it the same).

    A change keeps every fact it leaves alone as the very object, in order, adding facts
    at the end or in a merged fact's place: one walk of both lists finds the few it
    changed, where keying every fact by id would cost two dicts of the whole memory. Where
    a look one step ahead does not find the walk's place again, ``after``'s positions are
    read once."""
    went: list[Any] = []
    came: list[Any] = []
    where: dict[int, int] | None = None
    i = j = 0
    while i < len(before) and j < len(after):
        was, now = before[i], after[j]
        if was is now:
            i, j = i + 1, j + 1
        elif i + 1 < len(before) and before[i + 1] is now:  # ``was`` went
            went.append(was)
            i += 1
        elif j + 1 < len(after) and after[j + 1] is was:  # ``now`` came
            came.append(now)
            j += 1
        elif i + 1 == len(before) or (j + 1 < len(after) and after[j + 1] is before[i + 1]):
            went.append(was)  # ``now`` in its place (a changed copy)
            came.append(now)
            i, j = i + 1, j + 1
        else:
            if where is None:
                where = {id(f): k for k, f in enumerate(after)}
            k = where.get(id(was), -1)
            if k < j:  # not in ``after`` from here on
                went.append(was)
                i += 1
            else:  # the facts up to it came
                came += after[j:k]
                j = k
    return went + list(before[i:]), came + list(after[j:])


def _differences(
    old: dict[Any, Fact], new: dict[Any, Fact]
) -> tuple[list[Fact], set[str], list[str]]:
    """Of the facts ``_unmatched`` found (by id): those a change removed or changed (their
    text or project), as they were; the summaries whose facts it changed (one came or went,
    or its text changed); and the texts it brought (new facts', changed ones'), so a change
    of a few facts in a large memory recomposes only the summaries it touched."""
    changed: list[Fact] = []
    touched: set[str] = set()
    texts = [str(f.get("content", "")) for i, f in new.items() if i not in old]
    for fact_id, fact in old.items():
        now = new.get(fact_id)
        if now is fact or now == fact:  # untouched (the very fact, as a change keeps it)
            continue
        if now is None:
            changed.append(fact)
            touched.add(_key(fact))
        elif now.get("content") != fact.get("content") or (
            (now.get("scope"), now.get("project")) != (fact.get("scope"), fact.get("project"))
            and fact_project(now) != fact_project(fact)
        ):
            changed.append(fact)
            touched |= {_key(fact), _key(now)}
            texts.append(str(now.get("content", "")))
        elif now.get("category") != fact.get("category") and _key(now) != _key(fact):
            touched |= {_key(fact), _key(now)}
    touched |= {_key(f) for fact_id, f in new.items() if fact_id not in old}
    return changed, touched, texts


def _key(fact: Fact) -> str:
    """The summary composed from ``fact``: its project's, else its user section."""
    owner = fact_project(fact)
    return f"{PROJECTS_KEY}.{owner}" if owner else f"user.{section_of(fact.get('category'))}"


def _composed_of(summary: str, texts: list[str]) -> bool:
    """Whether every word of ``summary`` is a word of one of ``texts``."""
    needed = set(words(summary))
    # A word found in no text even as a part of a word says no at once: one search of the
    # texts joined (case folding is per character), not a word set per text (a model's
    # summary of a large memory, checked on every change, is mostly such a no).
    joined = "\n".join(texts).casefold()
    if any(word not in joined for word in needed):
        return False
    for text in texts:
        found = needed & words(text)
        if found:
            needed -= found
            if not needed:
                return True
    return not needed


def _by_section(facts: Iterable[Fact]) -> dict[str, list[Fact]]:
    """``facts`` by the summary composed from them: a user fact's user section (by its
    category), a project fact's project (``projects.NAME``); in order, in one pass."""
    out: dict[str, list[Fact]] = {}
    for fact in facts:
        out.setdefault(_key(fact), []).append(fact)
    return out


def _sections(out: dict[str, Any]) -> list[tuple[str, dict[str, Any], bool, str | None]]:
    """Each summary section of ``out`` (its entry made a copy ``out`` holds, so it may be
    edited in place), whether it may be composed from facts (the history sections are not),
    and its scope (None: the user's)."""
    found: list[tuple[str, dict[str, Any], bool, str | None]] = []
    for group, names in (("user", USER_SECTIONS), ("history", HISTORY_SECTIONS)):
        sections = out.get(group)
        if not isinstance(sections, dict):
            continue
        for name in names:
            entry = sections.get(name)
            if isinstance(entry, dict):
                sections[name] = entry = dict(entry)
                found.append((f"{group}.{name}", entry, group == "user", None))
    projects = out.get(PROJECTS_KEY)
    if isinstance(projects, dict):
        projects = out[PROJECTS_KEY] = dict(projects)
        for name, entry in projects.items():
            if isinstance(entry, dict):
                projects[name] = entry = dict(entry)
                found.append((f"{PROJECTS_KEY}.{name}", entry, True, str(name)))
    return found


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


class ProjectWalls:
    """What a change in a project may write into the user and history sections, which
    every project shows: no sentence that restates one of the project's facts (stored, or
    the change's new ones) or names the project (except ``default``, a common word),
    unless it restates one of the user's own facts. A model asked not to may still write
    them; each sentence dropped is listed with the reason, as a left-out item of the fold.
    The facts' texts are read once, at the first summary a change writes."""

    def __init__(self, facts: Sequence[Fact], diff: dict[str, Any]) -> None:
        self._facts = facts
        self._new = [c for c in diff.get("newFacts") or [] if isinstance(c, dict)]
        self._texts: dict[str, tuple[list[str], list[str]]] = {}

    def kept(self, project: str, section: str, summary: str, left_out: list[dict[str, str]]) -> str:
        """``summary`` without ``project``'s sentences, each added to ``left_out``."""
        sentences = _SENTENCE_END.split(summary)
        kept = []
        for sentence in sentences:
            if self._belongs(project, sentence):
                reason = (
                    f"tells of project {project}, and {section} is shown in every project "
                    "(the project's facts stay in the project)"
                )
                left_out.append({"item": section, "reason": reason, "value": sentence[:80]})
            else:
                kept.append(sentence)
        return summary if len(kept) == len(sentences) else " ".join(kept)

    def _belongs(self, project: str, sentence: str) -> bool:
        projects, users = self._read(project)
        named = project != DEFAULT_PROJECT and _names(project, sentence)
        if not named and not any(restates(t, sentence) for t in projects):
            return False
        return not any(restates(t, sentence) for t in users)  # unless the user's fact says it

    def _read(self, project: str) -> tuple[list[str], list[str]]:
        """The texts of ``project``'s facts and of the user's."""
        if project not in self._texts:
            mine: list[str] = []
            users: list[str] = []
            for fact in self._facts:
                owner = fact_project(fact) if "scope" in fact else None  # most are the user's
                if owner is None or owner == project:
                    (users if owner is None else mine).append(str(fact.get("content", "")))
            for item in self._new:
                owner = candidate_owner(item, project)
                if owner is None or owner == project:
                    (users if owner is None else mine).append(str(item.get("content", "")))
            self._texts[project] = (mine, users)
        return self._texts[project]


def _names(project: str, sentence: str) -> bool:
    """Whether ``sentence`` names ``project`` (as a whole word or words, any case)."""
    return re.search(rf"(?<!\w){re.escape(project)}(?!\w)", sentence, re.IGNORECASE) is not None
