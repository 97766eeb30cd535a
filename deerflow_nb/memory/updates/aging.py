"""Memory over months (issue 20): staleness, the eviction blend, and consolidation.

Pure functions over the memory document and the use records of ``fact_use.py``; no I/O.
Activity, the keep score and the eviction order are the read side's
(``readside/activity.py``, as the reader shows them); staleness and consolidation are here.

**Activity.** A fact was *confirmed* when it was created, reinforced (the user said it
again) or edited by hand (``createdAt``, ``updatedAt``, ``fact_usage.last_confirmed``), and
*used* when it was injected into a turn whose message shares a content word with it, or
returned by a search (``fact_usage.last_used``). A plain injection does not count as use:
with a 2,000-token budget most of a 100-fact memory is injected every turn, so it says
nothing about whether the fact still matters.

**Staleness.** A fact neither confirmed nor used for ``memory.staleness_days`` (180 by
default) × its age factor is stale. Goals and current activities ("Is preparing the Q3
report", "Wants to …": what DeerFlow keeps in topOfMind) age three times as fast (factor
1/3: 60 days); corrections twice as slow (factor 2), since forgetting one lets the old
belief back in; everything else has factor 1. Stale facts are *proposed* for removal as
a pending change, never removed silently. A project with no turn in its threads (nor a fact
of it confirmed or used) for ``memory.staleness_days`` is stale as a whole: all its facts
are proposed together, one pending change per project (``idle_projects``); the user's
facts and an active project's are judged one by one.

**Eviction blend** (``memory.eviction: blend``, the default). Over ``max_facts`` the facts
with the lowest keep score go first::

    keep = 0.65 × confidence + 0.25 × confirmation freshness + 0.10 × use heat
    confirmation freshness = 2 ^ (−days since last confirmed / (90 d × age factor))
    use heat = 2 ^ (−days since last used / 30 d) × min(1, log2(1 + uses) / log2(9))

(DeerFlow's hybrid-v1 weights, with half-lives). Corrections are evicted only when nothing
else is left to evict. Ties go to the older fact first. ``memory.eviction: confidence`` is
DeerFlow's rule: least confident first, oldest first among equals. Every eviction is
journaled with the policy, its score and a reason.

**Consolidation** (``%memory consolidate``). The memory model gets the facts as
``<consolidate_facts>`` handle lines and answers ``{"merges": [{"facts": ["f1", "f3"],
"content": "...", "category": "...", "confidence": 0.9}]}`` (see docs/internals.md); each
merge replaces its facts by one, whose ``add`` event names them (``merged_from``) and
whose sources' ``remove`` events name it (``merged_into``): the lineage.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ...projects import fact_project
from ...schema.constants import CONSOLIDATE_TAG, PROMPT_TAG
from ...untrusted import prompt_text
from ..readside.activity import (
    age_factor,
    as_time,
    days_since,
    is_topical,
    iso,
    last_active,
    latest,
    unit,
)

MAX_MERGE_SOURCES = 8  # DeerFlow's limit on the facts one merge joins


@dataclass(frozen=True)
class Stale:
    """A fact idle past its limit: ``idle_days`` since it was last confirmed or used."""

    fact: dict[str, Any]
    idle_days: float
    limit_days: float
    last_active: str | None

    @property
    def reason(self) -> str:
        kind = "a goal or current activity" if is_topical(self.fact) else "a fact"
        return (
            f"neither confirmed nor used for {self.idle_days:.0f} days "
            f"({kind}: stale after {self.limit_days:.0f})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.fact.get("id"),
            "content": self.fact.get("content"),
            "category": self.fact.get("category"),
            "idle_days": round(self.idle_days, 1),
            "limit_days": round(self.limit_days, 1),
            "last_active": self.last_active,
            "reason": self.reason,
        }


def stale_facts(
    data: Mapping[str, Any],
    usage: Mapping[str, Mapping[str, Any]],
    *,
    days: float,
    now: datetime | str | None = None,
) -> list[Stale]:
    """Facts idle longer than ``days`` × their age factor, the longest idle first."""
    moment = as_time(now)
    out = []
    for fact in data.get("facts") or []:
        active = last_active(fact, usage.get(str(fact.get("id"))))
        idle = days_since(active, moment)
        if idle is None:  # no date at all (an odd import): nothing to judge by
            continue
        limit = days * age_factor(fact)
        if idle > limit:
            out.append(Stale(dict(fact), idle, limit, None if active is None else iso(active)))
    out.sort(key=lambda s: s.idle_days / s.limit_days, reverse=True)
    return out


@dataclass(frozen=True)
class IdleProject:
    """A project with no turn in its threads (nor a fact confirmed or used) for ``limit_days``:
    all its facts are proposed for review together."""

    name: str
    idle_days: float
    limit_days: float
    last_used: str

    @property
    def reason(self) -> str:
        return (
            f"project {self.name} unused for {self.idle_days:.0f} days, last used "
            f"{self.last_used[:10]} (a project is stale after {self.limit_days:.0f} days "
            "without a turn)"
        )

    def fact_dict(self, fact: Mapping[str, Any]) -> dict[str, Any]:
        """``fact`` as a stale entry of this project (``Stale.to_dict``'s keys, ``project``)."""
        return {
            "id": fact.get("id"),
            "content": fact.get("content"),
            "category": fact.get("category"),
            "idle_days": round(self.idle_days, 1),
            "limit_days": round(self.limit_days, 1),
            "last_active": self.last_used,
            "reason": self.reason,
            "project": self.name,
        }


def idle_projects(
    data: Mapping[str, Any],
    usage: Mapping[str, Mapping[str, Any]],
    threads: Mapping[str, Any],
    *,
    days: float,
    now: datetime | str | None = None,
) -> dict[str, IdleProject]:
    """The projects with facts whose last use (the latest turn in their ``threads``, a
    ``project -> stamp`` map, or the latest confirmation or use of one of their facts) is
    more than ``days`` before ``now``; a project with no date at all is not judged."""
    moment = as_time(now)
    last_used: dict[str, datetime | None] = {}
    for fact in data.get("facts") or []:
        name = fact_project(fact) if isinstance(fact, Mapping) else None
        if name is not None:
            active = last_active(fact, usage.get(str(fact.get("id"))))
            last_used[name] = latest(last_used.get(name), active, threads.get(name))
    out = {}
    for name, last in last_used.items():
        idle = days_since(last, moment)
        if last is not None and idle is not None and idle > days:
            out[name] = IdleProject(name, idle, days, iso(last))
    return out


# -- consolidation --------------------------------------------------------------------------

CONSOLIDATE_PROMPT = """You are a memory management system. Below are the facts stored about \
the user, one per line as "- [handle] (category, confidence) content". Find facts that say \
the same thing, or closely related things about one subject, and merge each such group into \
ONE fact that keeps every detail (names, versions, numbers). Reply with ONE JSON object and \
nothing else:

{"merges": [{"facts": ["f1", "f3"], "content": "Prefers polars over pandas; switched \
team notebooks to polars", "category": "preference", "confidence": 0.9}]}

Rules: every merge names at least two handles; a handle appears in at most one merge; never \
merge corrections (category correction); do not merge facts about different subjects; \
confidence is the highest of the merged facts unless the merge is less certain. Reply \
{"merges": []} when nothing should be merged."""


def consolidation_messages(data: Mapping[str, Any]) -> tuple[list[dict[str, str]], dict[str, str]]:
    """The consolidation prompt and the ``handle -> fact id`` map used in it."""
    handles: dict[str, str] = {}
    lines = []
    for i, fact in enumerate(data.get("facts") or [], start=1):
        handle = f"f{i}"
        handles[handle] = str(fact.get("id"))
        content = prompt_text(fact.get("content", ""), one_line=True)
        category = prompt_text(fact.get("category", "context"), one_line=True)
        confidence = unit(fact.get("confidence"))
        lines.append(f"- [{handle}] ({category}, {confidence:.2f}) {content}")
    user = f"<{CONSOLIDATE_TAG}>\n" + "\n".join(lines) + f"\n</{CONSOLIDATE_TAG}>"
    return [
        {"role": "system", "content": CONSOLIDATE_PROMPT},
        {"role": "user", "content": user},
    ], handles


def parse_merges(
    raw: Any, handles: Mapping[str, str], data: Mapping[str, Any]
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """The model's merges as ``{"from": [ids], "content", "category", "confidence"}``, each
    checked; what could not be used is left out with its reason."""
    from ...schema.constants import CATEGORIES

    by_id = {str(f.get("id")): f for f in data.get("facts") or []}
    merges: list[dict[str, Any]] = []
    left: list[dict[str, str]] = []
    items = raw.get("merges") if isinstance(raw, dict) else None
    if not isinstance(items, list):
        return [], [{"item": "merges", "reason": "the reply has no 'merges' list", "value": ""}]
    used: set[str] = set()
    for n, item in enumerate(items):
        where = f"merges[{n}]"

        def skip(reason: str, value: Any = "", where: str = where) -> None:
            left.append({"item": where, "reason": reason, "value": str(value)[:80]})

        if not isinstance(item, dict):
            skip("a merge must be an object", item)
            continue
        content = item.get("content")
        names = item.get("facts")
        if not isinstance(content, str) or not content.strip():
            skip("it has no content", content)
            continue
        if PROMPT_TAG.search(content):
            skip("it holds a prompt tag such as <memory> (an injection attempt)", content)
            continue
        if not isinstance(names, list) or not all(isinstance(h, str) for h in names):
            skip("'facts' must be a list of handles", names)
            continue
        ids = list(dict.fromkeys(handles.get(h.strip(), "") for h in names))
        if "" in ids:
            skip("names no stored fact (unknown handle)", names)
            continue
        if len(ids) < 2:
            skip("a merge needs at least two facts", names)
            continue
        if len(ids) > MAX_MERGE_SOURCES:
            skip(f"a merge joins at most {MAX_MERGE_SOURCES} facts, this one {len(ids)}", names)
            continue
        if used & set(ids):
            skip("a fact appears in two merges", names)
            continue
        if any(by_id[i].get("category") == "correction" for i in ids):
            skip("corrections are kept as they are", names)
            continue
        sources = [by_id[i] for i in ids]
        highest = max(unit(f.get("confidence")) for f in sources)
        confidence = item.get("confidence")
        try:
            confidence = min(float(confidence), highest)  # never surer than its sources
            if not 0 <= confidence <= 1:
                raise ValueError
        except (TypeError, ValueError, OverflowError):
            confidence = highest
        category = str(item.get("category") or "").strip().lower()
        if category not in CATEGORIES:
            category = str(sources[0].get("category") or "context")
        used |= set(ids)
        merges.append(
            {"from": ids, "content": content, "category": category, "confidence": confidence}
        )
    return merges, left
