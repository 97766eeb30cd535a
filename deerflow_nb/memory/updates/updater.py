"""Pure diff application: the memory update rules, with no I/O.

Given the current memory document and one validated extraction diff, returns the new
document and the list of events that explain every change. DeerFlow's order is kept
(sections, removals, new facts, cap); on top of it: text is sanitised, exact and
near-duplicate facts (or ones restating a stored fact with a detail more) reinforce the
fact already stored instead of adding a second one,
merges (``%memory consolidate``) replace related facts by one with their lineage in the
events, and eviction over ``max_facts`` follows ``memory.eviction``: the blend of
confidence, confirmation freshness and use (``aging.py``; corrections last), or DeerFlow's
lowest confidence first (oldest first among equals). What a diff
proposed but the rules did not take (below the confidence threshold, over the per-fold
limit of new facts) is listed in ``left_out`` with the reason. Last, the summaries are
brought in line with the facts the diff left (``summaries.py``).

``wipe_limit(n)`` = max(3, 20 % of the n facts stored) is the wipe guard's bound, which
``gate.py`` applies per change and over a day of changes.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...projects import fact_project
from ...schema.constants import ADDED_BY_USER, is_user_fact
from ...schema.sections import MAX_SUMMARY_CHARS
from ...similarity import normalize_text, signature
from ...storage.db import now_iso
from ..readside.activity import eviction_order
from ..scopes import PROJECTS_KEY, candidate_owner, evictable, stamp
from ..store import CATEGORIES, HISTORY_SECTIONS, MEMORY_TAG, USER_SECTIONS, normalized
from .aging import MAX_MERGE_SOURCES
from .events import Event
from .repeats import Repeats
from .scope_changes import apply_scope_changes
from .summaries import ProjectWalls, refresh_summaries

log = logging.getLogger(__name__)

MAX_FACT_CHARS = 500
REINFORCE_BUMP = 0.02
REINFORCE_CAP = 0.99
# One fold adds at most this many facts; the rest are left out with a reason.
MAX_NEW_FACTS_PER_FOLD = 50
# A fold may remove or evict at most max(WIPE_MIN_FACTS, WIPE_SHARE × stored facts) facts
# before it is held for review instead of applied.
WIPE_MIN_FACTS = 3
WIPE_SHARE = 0.20


@dataclass
class UpdateResult:
    data: dict[str, Any]
    events: list[Event]
    ignored_removals: list[str] = field(default_factory=list)
    left_out: list[dict[str, str]] = field(default_factory=list)  # {item, reason, value}

    def ids(self, kind: str) -> list[str]:
        return [e.fact_id for e in self.events if e.kind == kind and e.fact_id]


def sanitize_text(text: str, limit: int = MAX_FACT_CHARS) -> str:
    """One clean line: whitespace collapsed, length capped, ``<memory>`` tags neutralised."""
    text = " ".join(str(text).split())
    text = MEMORY_TAG.sub(lambda m: f"[{m.group(1)}{m.group(2)}]", text)
    return text[:limit].rstrip()


def new_fact_id(taken: set[str]) -> str:
    """A ``fact_<8 hex>`` id not in ``taken``."""
    while True:
        fact_id = f"fact_{uuid.uuid4().hex[:8]}"
        if fact_id not in taken:
            return fact_id


def apply_diff(
    data: dict[str, Any],
    diff: dict[str, Any],
    *,
    source: str,
    threshold: float,
    max_facts: int,
    now: str | None = None,
    id_factory: Callable[[set[str]], str] = new_fact_id,
    max_new: int | None = MAX_NEW_FACTS_PER_FOLD,
    added_by: str | None = None,
    eviction: str = "blend",
    usage: Mapping[str, Mapping[str, Any]] | None = None,
    project: str | None = None,
    over_limit: str | None = None,
    imported: bool = False,
) -> UpdateResult:
    """Apply one validated diff (see ``extraction.validate_diff``) to ``data`` (not mutated).

    ``imported`` (a person's import of a memory file): a new fact keeps the ``createdAt``
    and ``source`` the file gave it, which a model's proposal never sets.

    ``max_new`` bounds the facts one diff adds (None: no bound), ``over_limit`` says why
    the rest are left out (else: the per-fold limit); ``added_by`` marks the facts
    it adds or reinforces (``"user"`` for facts stated by hand, which folds do not drop
    without review). ``eviction`` is the policy over ``max_facts`` (``"blend"`` or
    ``"confidence"``), ``usage`` the facts' use records (``readside.activity.read``; None:
    none, as the caller passes when nothing can be evicted).

    Besides DeerFlow's keys the diff may hold ``merges`` (``[{"from": [ids], "content",
    "category", "confidence"}]``, applied after removals) and ``stale`` (``[{"id", "reason"}]``:
    why its removals were proposed, kept in their events).

    Scopes (``scopes.py``): a ``newFacts`` item labelled ``scope: "project"`` is stored in
    its ``project`` or else ``project`` (the active one), dedupes only against that scope's
    facts, and ``projectContext`` (``{summary, shouldUpdate}``) sets ``project``'s summary.
    Over ``max_facts``, eviction picks among the scopes the diff added to."""
    now = now or now_iso()
    # The facts are copied where changed only (``_own``): the document read is shared with
    # its readers, and an unchanged fact stays the very object the version before held.
    out = normalized(data)
    copies: dict[int, dict[str, Any]] = {}
    events: list[Event] = []
    left_out: list[dict[str, str]] = []
    walls = ProjectWalls(out["facts"], diff)

    for group, names in (("user", USER_SECTIONS), ("history", HISTORY_SECTIONS)):
        for name in names:
            update = (diff.get(group) or {}).get(name) or {}
            summary = sanitize_text(update.get("summary") or "", MAX_SUMMARY_CHARS)
            if project is not None and summary and update.get("shouldUpdate"):
                summary = walls.kept(project, f"{group}.{name}", summary, left_out)
            old = out[group][name].get("summary", "")
            if update.get("shouldUpdate") and summary and summary != old:
                out[group][name] = {**out[group][name], "summary": summary, "updatedAt": now}
                events.append(
                    Event(
                        "section", section=f"{group}.{name}", old_content=old, new_content=summary
                    )
                )

    events += _project_context(out, diff.get("projectContext"), project, now)
    if diff.get("renameProject") or diff.get("forgetProjects"):
        events += apply_scope_changes(out, diff, now)
    ignored: list[str] = []
    to_remove = set(diff.get("factsToRemove") or [])
    if to_remove:
        why = {
            str(s.get("id")): str(s.get("reason") or "stale")
            for s in diff.get("stale") or []
            if isinstance(s, dict)
        }
        kept, found = [], set()
        for fact in out["facts"]:
            fact_id = fact.get("id")
            if fact_id in to_remove:
                found.add(fact_id)
                event = _fact_event("remove", fact)
                if fact_id in why:
                    event.details["reason"] = f"stale: {why[fact_id]}"
                events.append(event)
            else:
                kept.append(fact)
        out["facts"] = kept
        ignored = sorted(to_remove - found)
        for fact_id in ignored:
            log.warning("factsToRemove names unknown fact %r; ignored", fact_id)

    taken = {f.get("id") for f in out["facts"]}
    for j, merge in enumerate(diff.get("merges") or []):
        problem = _apply_merge(out, merge, now, id_factory, taken, events, threshold)
        if problem:
            left_out.append(
                {"item": f"merges[{j}]", "reason": problem, "value": str(merge.get("content"))[:80]}
            )

    statements = []  # each new fact's number, item, text, confidence and dedupe keys
    for i, candidate in enumerate(diff.get("newFacts") or []):
        content = sanitize_text(candidate.get("content", ""))
        if content:
            keys = (
                candidate_owner(candidate, project),
                normalize_text(content),
                signature(content),
            )
            statements.append(
                (i, candidate, content, float(candidate.get("confidence", 0.5)), keys)
            )
    repeats = Repeats(out["facts"], (keys for *_, keys in statements))
    added = 0
    grown: set[str | None] = set()
    for i, candidate, content, confidence, keys in statements:
        if confidence < threshold:
            left_out.append(
                _left(
                    i,
                    content,
                    f"confidence {confidence:g} is below memory.fact_confidence_threshold "
                    f"{threshold:g}",
                )
            )
            continue
        owner = keys[0]
        match = repeats.match(*keys)
        if match is not None:
            match = _own(out, match, copies)
            old_conf = float(match.get("confidence", 0.0))
            bumped = round(min(REINFORCE_CAP, old_conf + REINFORCE_BUMP), 4)
            new_conf = max(old_conf, confidence, bumped)
            match["confidence"] = new_conf
            match["confirmations"] = int(match.get("confirmations", 1)) + 1
            match["updatedAt"] = now
            if added_by == ADDED_BY_USER:  # the user said it: now theirs, never the model's
                match["addedBy"] = added_by
            events.append(
                Event(
                    "reinforce",
                    fact_id=match.get("id"),
                    old_content=match["content"],
                    new_content=content,
                    old_confidence=old_conf,
                    new_confidence=match["confidence"],
                    details={"source": source},
                )
            )
            continue
        if max_new is not None and added >= max_new:
            why = over_limit or f"over the limit of {max_new} new facts per fold"
            left_out.append(_left(i, content, why))
            continue
        added += 1
        category = candidate.get("category")
        fact = {
            "id": id_factory(taken),
            "content": content,
            "category": category if category in CATEGORIES else "context",
            "confidence": confidence,
            "createdAt": _given(candidate, "createdAt", now) if imported else now,
            "source": _given(candidate, "source", source) if imported else source,
        }
        if added_by:
            fact["addedBy"] = added_by
        stamp(fact, owner)
        copies[id(fact)] = fact  # this change's own: changed in place if restated
        grown.add(owner)
        taken.add(fact["id"])
        out["facts"].append(fact)
        repeats.add(*keys, fact)
        events.append(_fact_event("add", fact, new=True))

    if len(out["facts"]) > max_facts:
        records = usage
        places = evictable(out["facts"], grown) if grown else list(range(len(out["facts"])))
        pool = [out["facts"][i] for i in places]
        order = eviction_order(pool, records or {}, policy=eviction, now=now)
        chosen = order[: len(out["facts"]) - max(max_facts, 0)]
        for pick in sorted(chosen, key=lambda e: e.index):
            event = _fact_event("evict", pool[pick.index])
            event.details.update(policy=eviction, score=pick.score, reason=pick.reason)
            events.append(event)
        drop = {places[pick.index] for pick in chosen}
        out["facts"] = [f for i, f in enumerate(out["facts"]) if i not in drop]

    written = {e.section for e in events if e.kind == "section" and e.section}
    proposed = [str(f.get("content", "")) for f in diff.get("newFacts") or [] if f]
    events += refresh_summaries(
        data.get("facts") or [], out, written=written, proposed=proposed, now=now
    )
    if events:
        out["lastUpdated"] = now
    return UpdateResult(out, events, ignored, left_out)


def _apply_merge(
    out: dict[str, Any],
    merge: Any,
    now: str,
    id_factory: Callable[[set[str]], str],
    taken: set[str],
    events: list[Event],
    threshold: float,
) -> str | None:
    """Replace the merge's facts by one (in the first one's place); why not, or None.

    As DeerFlow: at most ``MAX_MERGE_SOURCES`` sources, the merged confidence at most the
    highest source's, and a merge below ``threshold`` refused.

    The merged fact keeps the earliest ``createdAt``, the latest ``updatedAt``, the summed
    confirmations, ``addedBy: "user"`` when any source had it, and the sources' fields
    deerflow_nb does not know (the first source's value first). Its ``add`` event names
    the sources (``merged_from``); each source's ``remove`` event names it (``merged_into``).
    """
    if not isinstance(merge, dict):
        return "a merge must be an object"
    ids = [str(i) for i in dict.fromkeys(merge.get("from") or [])]
    content = sanitize_text(merge.get("content") or "")
    by_id = {f.get("id"): f for f in out["facts"]}
    if len(ids) < 2 or not content:
        return "a merge needs two facts and a text"
    if len(ids) > MAX_MERGE_SOURCES:
        return f"a merge joins at most {MAX_MERGE_SOURCES} facts, this one {len(ids)}"
    missing = [i for i in ids if i not in by_id]
    if missing:
        return f"names facts no longer stored ({', '.join(missing)})"
    sources = [by_id[i] for i in ids]
    owners = {fact_project(f) for f in sources}
    if len(owners) > 1:
        return "joins facts of different scopes (the user's and a project's, or two projects')"
    highest = max(_confidence(f.get("confidence")) for f in sources)
    asked = merge.get("confidence")
    confidence = highest if asked is None else min(_confidence(asked), highest)
    if confidence < threshold:
        return f"confidence {confidence:g} is below memory.fact_confidence_threshold {threshold:g}"
    category = merge.get("category")
    created = min(str(f.get("createdAt") or now) for f in sources)
    updated = max(str(f.get("updatedAt") or f.get("createdAt") or now) for f in sources)
    fact = {k: v for f in reversed(sources) for k, v in f.items() if k != "addedBy"}
    fact.update(
        id=id_factory(taken),
        content=content,
        category=category if category in CATEGORIES else sources[0].get("category", "context"),
        confidence=confidence,
        createdAt=created,
        source="consolidate",
        updatedAt=updated,
        confirmations=sum(int(f.get("confirmations", 1)) for f in sources),
    )
    if any(is_user_fact(f) for f in sources):
        fact["addedBy"] = "user"
    stamp(fact, owners.pop())
    taken.add(fact["id"])
    first = out["facts"].index(sources[0])
    gone = set(ids)
    facts = [f for f in out["facts"] if f.get("id") not in gone]
    facts.insert(min(first, len(facts)), fact)
    out["facts"] = facts
    add = _fact_event("add", fact, new=True)
    add.details["merged_from"] = ids
    events.append(add)
    for source in sources:
        event = _fact_event("remove", source)
        event.new_content = content
        event.details.update(merged_into=fact["id"], reason="consolidated")
        events.append(event)
    return None


def _own(
    out: dict[str, Any], fact: dict[str, Any], copies: dict[int, dict[str, Any]]
) -> dict[str, Any]:
    """``fact`` as this change's own, to change in place: a copy put in its place in
    ``out["facts"]`` (once; ``copies`` keeps it by the original's id), or the fact itself
    when the change made it. The facts of the document read are never changed."""
    mine = copies.get(id(fact))
    if mine is None:
        mine = dict(fact)
        copies[id(fact)] = copies[id(mine)] = mine
        facts = out["facts"]
        for i, stored in enumerate(facts):
            if stored is fact:
                facts[i] = mine
                break
    return mine


def _project_context(out: dict[str, Any], update: Any, project: str | None, now: str) -> list:
    """Set the active project's context summary from ``projectContext`` (an extra key
    beside DeerFlow's sections); its ``section`` event is ``projects.NAME``."""
    if not isinstance(update, dict) or not update.get("shouldUpdate"):
        return []
    project = update.get("project") or project
    if not isinstance(project, str) or not project:
        return []
    summary = sanitize_text(update.get("summary") or "", MAX_SUMMARY_CHARS)
    projects = out.get(PROJECTS_KEY)
    projects = dict(projects) if isinstance(projects, dict) else {}
    entry = projects.get(project) if isinstance(projects.get(project), dict) else {}
    old = entry.get("summary", "")
    if not summary or summary == old:
        return []
    projects[project] = {**entry, "summary": summary, "updatedAt": now}
    out[PROJECTS_KEY] = projects
    return [Event("section", section=f"projects.{project}", old_content=old, new_content=summary)]


def _confidence(value: Any) -> float:
    """A confidence as a number from 0 to 1 (0 when it is none)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return min(max(number, 0.0), 1.0) if number == number else 0.0


def _given(candidate: Mapping[str, Any], key: str, default: str) -> str:
    """An imported fact's own ``key`` (text, at most 200 characters), else ``default``."""
    value = candidate.get(key)
    return value[:200] if isinstance(value, str) and value.strip() else default


def _left(i: int, content: str, reason: str) -> dict[str, str]:
    return {"item": f"newFacts[{i}]", "reason": reason, "value": content[:80]}


def wipe_limit(stored: int) -> int:
    """How many facts changes may take away without review: max(3, 20 %)."""
    return max(WIPE_MIN_FACTS, int(stored * WIPE_SHARE))


def _fact_event(kind: str, fact: dict[str, Any], *, new: bool = False) -> Event:
    confidence = fact.get("confidence")
    return Event(
        kind,
        fact_id=fact.get("id"),
        old_content=None if new else fact.get("content"),
        new_content=fact.get("content") if new else None,
        old_confidence=None if new else confidence,
        new_confidence=confidence if new else None,
        details={"category": fact.get("category")},
    )
