"""The one gate: every change to memory passes here before the ledger commits it.

A change arrives as a ``ChangeSet`` (``schema/changes.py``) naming its origin. The gate owns
what used to live on each path:

- **validation per item** (``Rules``: threshold, categories, merges' caps);
- **review**: in review mode a fold, a consolidation or a model's ``remember`` waits as a
  pending change; a staleness proposal always waits, and so does a removal an outside
  agent asks for (MCP's ``forget``) unless ``memory.review_outside_forget`` is off;
- **the wipe guard, counted across changes**: facts removed, evicted or merged away (and
  profile sections rewritten wholesale) by a fold, the model or upkeep count against
  max(3, 20 %) of the facts, per change *and* summed over the last day (``memory_changes``)
  against the facts held before the day's changes (facts those changes added do not
  count), so many small changes, or additions first, cannot do what one large one may not;
- **user-added facts**: no fold, model or upkeep change removes, merges or evicts one
  without a person's approval;
- **caps**: a turn's ``remember`` calls (``MAX_REMEMBER_PER_TURN``);
- **provenance**, from the change set's origin alone: ``addedBy: "model"`` for facts the
  model chose to store (its suggestion), ``"fold"`` for a fold's, ``"user"`` for a person's;
- **journaling**: each change set is one ``memory_changes`` row, in the same transaction
  as its version (``Ledger.recording``, entered from here only); a team sync's pulled
  change sets share one version and one memory.json write (``committing_all``).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ...config import Settings
from ...schema.changes import ChangeSet
from ...schema.constants import (
    ADDED_BY_FOLD,
    ADDED_BY_MODEL,
    ADDED_BY_USER,
    SECTION_GROUPS,
    is_user_fact,
)
from ...similarity import overlap
from ...storage import ledger as ledger_rows
from ...storage import memory_changes as change_rows
from ...storage.db import now_iso
from ...storage.journal import Journal
from ..readside.change_events import replacement_events
from ..reports import changes_anything
from ..retrieval.vectors import FactVectors
from ..scopes import pin_projects
from .edits import apply_edit
from .held_facts import HeldFacts
from .review import Review, propose
from .rules import Rules
from .team_changes import TEAM, Tap, TeamIndex, apply_team, hold_conflicts
from .updater import WIPE_MIN_FACTS, WIPE_SHARE, UpdateResult, wipe_limit
from .write_protocol import Changed, Ledger

MAX_REMEMBER_PER_TURN = 5  # the model's remember calls one turn may make
WINDOW = timedelta(days=1)  # the wipe guard's memory
GUARDED = ("model", "fold", "maintenance", "team")  # origins the wipe guard counts (and remember)
_DAY_OF = (GUARDED, ("remember",))  # the changes the day's count reads: origins, reasons
WHOLESALE = 0.5  # a section keeping less than half its words was rewritten wholesale


class Refused(ValueError):
    """The gate will not take this change; the message says why and what to do."""


@dataclass
class Passed:
    """What the gate did with a change set: applied (``result``, ``version``), held for
    review (``pending_id``, ``held``; ``held_all`` when nothing applied), and how many facts
    it lost (removed, evicted, merged away)."""

    result: UpdateResult
    version: int | None = None
    pending_id: int | None = None
    held: list[dict[str, str]] = field(default_factory=list)
    held_all: bool = False
    held_diff: dict[str, Any] | None = None
    lost: int = 0
    removed: list[dict[str, Any]] = field(default_factory=list)  # the facts, as they were
    skipped: bool = False  # an approval another kernel decided meanwhile


@dataclass
class Committed:
    """A change inside its journal transaction, for the caller's own rows (``committing``)."""

    db: Any
    outcome: Passed


class Gate:
    """The door every change to memory goes through (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        journal: Journal,
        ledger: Ledger,
        rules: Rules,
        review: Review,
        changed: Changed,
        vectors: FactVectors,
    ) -> None:
        self.settings = settings
        self.journal = journal
        self.ledger = ledger
        self.rules = rules
        self.review = review  # its switch (``on``): whether a model's change waits
        self._changed = changed
        self._vectors = vectors  # warmed after each change that adds facts
        self.tap: Tap | None = None  # the team's share of each commit (memory/sharing.py)

    def submit(self, change: ChangeSet) -> Passed:
        """Check ``change`` and commit what may apply now. Raises ``Refused`` (a ValueError)
        for a change that may not happen at all, ``KeyError`` for an edit of a fact that is
        gone."""
        with self.committing(change) as committed:
            pass
        return committed.outcome

    @contextlib.contextmanager
    def committing(self, change: ChangeSet) -> Iterator[Committed]:
        """``submit``, with the caller's own journaling in the body: it runs in the change's
        journal transaction (``Committed.db``), seeing what the gate did
        (``Committed.outcome``); whatever it raises leaves nothing of the change."""
        if change.origin != "user" and (change.document is not None or change.edit is not None):
            raise Refused(f"only a person may {change.reason} memory as a whole or edit a fact")
        self._check_turn(change)
        change = pinned(change)
        if why := self._waits(change):  # the whole change waits: the journal alone
            with self.journal.transaction() as db:
                committed = Committed(db, self._held(db, change, why))
                yield committed
            if committed.outcome.pending_id is not None:
                self._changed({"reason": "proposed", "pending_id": committed.outcome.pending_id})
            return
        outcome = Passed(UpdateResult({}, []))
        shares = self.tap(change) if self.tap else None
        whole = change.document is not None
        with self.ledger.reading(private=change.edit is not None, tolerant=whole) as commit:
            if shares:  # the team's share looks before and after (memory/sharing.py)
                shares.before(commit.current)
            result = self._mutate(change, outcome, commit.current)
            if shares:
                shares.after(result)
            with self.ledger.recording(
                commit, change.reason, change.source, result, whole=whole
            ) as db:
                self._journal(db, change, outcome, commit.version)
                if shares:
                    shares.queue(db)
                committed = Committed(db, outcome)
                yield committed
        outcome.result = result
        if outcome.pending_id is not None:
            self._changed({"reason": "proposed", "pending_id": outcome.pending_id})
        if result.events and not whole:
            self._vectors.warm(result.data)

    @contextlib.contextmanager
    def committing_all(self, changes: list[ChangeSet]) -> Iterator[tuple[Any, list[Passed]]]:
        """Several guarded change sets (a sync's pulled ones) as ONE commit: one version and
        one memory.json write instead of one each. Each is checked in order as if alone
        (validation, the wipe guard counting the ones before it, held on its own in review
        mode) and journaled as its own change; the body runs in the same transaction, with
        the journal and the outcomes. Whatever fails leaves none of them applied."""
        alone = [c for c in changes if c.origin not in GUARDED or c.reason == "remember"]
        if alone or any(c.document is not None or c.edit is not None for c in changes):
            raise Refused("only teammates', folds' and upkeep's change sets go together")
        changes = [pinned(change) for change in changes]
        waits = [self._waits(change) for change in changes]
        outcomes = [Passed(UpdateResult({}, [])) for _ in changes]
        waiting = zip(changes, outcomes, waits, strict=True)
        steps = [(c, o, self.tap(c) if self.tap else None) for c, o, why in waiting if not why]
        result = UpdateResult({}, [])
        day: dict[str, Any] = {}  # the day's journaled losses and growth, read once
        with contextlib.ExitStack() as stack:
            if steps:
                commit = stack.enter_context(self.ledger.reading())
                data, events = commit.current, []
                for n, (change, outcome, shares) in enumerate(steps):
                    if shares:
                        shares.before(data)
                    prior = [o for _, o, _ in steps[:n]]
                    applied = self._guarded(data, change, outcome, prior, day)
                    if shares:
                        shares.after(applied)
                    data = applied.data
                    events += outcome.result.events
                result = UpdateResult(data, events)
                sources = ", ".join(dict.fromkeys(change.source for change, _, _ in steps))
                db = stack.enter_context(
                    self.ledger.recording(commit, steps[0][0].reason, sources, result)
                )
                version = commit.version
            else:  # all wait for review: nothing to read or write but the journal
                db, version = stack.enter_context(self.journal.transaction()), None
            for n, (change, why) in enumerate(zip(changes, waits, strict=True)):
                if why:
                    outcomes[n] = self._held(db, change, why)
                else:
                    self._journal(db, change, outcomes[n], version)
            for _, _, shares in steps:
                if shares:
                    shares.queue(db)
            yield db, outcomes
        for outcome in outcomes:
            if outcome.pending_id is not None:
                self._changed({"reason": "proposed", "pending_id": outcome.pending_id})
        if result.events:
            self._vectors.warm(result.data)

    def _waits(self, change: ChangeSet) -> str:
        """Why ``change`` waits for review as a whole before anything applies ("": not)."""
        if change.reason == "stale":
            return "a staleness proposal waits for approval"
        if change.review:
            return "it was asked to wait for review"
        return "review mode is on" if change.origin != "user" and self.review.on else ""

    # -- what a change does ------------------------------------------------------------
    def _mutate(self, change: ChangeSet, outcome: Passed, data: dict[str, Any]) -> UpdateResult:
        """What ``change`` does to ``data`` (under the ledger's lock), by its kind."""
        if change.document is not None:
            new = change.document
            events = replacement_events(data, new, change.reason)
            outcome.result = UpdateResult(copy.deepcopy(new), events)
            return outcome.result
        if change.edit is not None:
            outcome.result = apply_edit(data, change.edit)
            return outcome.result
        if change.origin == "user" and change.reason != "remember":
            return self._direct(data, change, outcome)
        return self._guarded(data, change, outcome)

    def _direct(self, data: dict[str, Any], change: ChangeSet, outcome: Passed) -> UpdateResult:
        """A person's change: applied as asked (a removal of an unknown fact is a KeyError,
        an added fact memory would evict at once is refused)."""
        diff = change.diff or {}
        if change.pending_id is not None and not ledger_rows.is_pending(
            self.journal.db, change.pending_id
        ):
            outcome.skipped = True  # decided in another kernel meanwhile
            outcome.result = UpdateResult(data, [])
            return outcome.result
        by_id = {f.get("id"): f for f in data.get("facts", []) if isinstance(f, dict)}
        if change.reason == "forget":
            missing = [i for i in diff.get("factsToRemove") or [] if i not in by_id]
            if missing:
                raise KeyError(missing[0])
        result = self._apply(data, change, diff)
        if set(result.ids("add")) & set(result.ids("evict")):
            confidence = (diff.get("newFacts") or [{}])[0].get("confidence", 0)
            raise Refused(
                f"memory is full (memory.max_facts is {self.settings.memory.max_facts}) "
                f"and every fact is more confident than {confidence:g}; raise the "
                "confidence, forget a fact, or raise memory.max_facts"
            )
        gone = set(result.ids("remove"))
        asked = [i for i in diff.get("factsToRemove") or [] if i in gone]
        outcome.removed = [copy.deepcopy(by_id[i]) for i in asked]
        outcome.lost, outcome.result = lost_count(result), result
        return result

    def _apply(
        self,
        data: dict[str, Any],
        change: ChangeSet,
        diff: dict[str, Any],
        index: TeamIndex | None = None,
    ) -> Any:
        if diff.get(TEAM):  # a teammate's change: facts keep their team ids and provenance
            return self.rules.capped(apply_team(data, diff, index), change.source)
        return self.rules.apply(
            data,
            diff,
            change.source,
            threshold=change.threshold,
            added_by=added_by(change, diff),
            project=change.project,
            within_room=change.origin == "user" and change.reason == "import",
        )

    def _guarded(
        self,
        data: dict[str, Any],
        change: ChangeSet,
        outcome: Passed,
        prior: Sequence[Passed] = (),
        day: dict[str, Any] | None = None,
    ) -> UpdateResult:
        """A fold's, the model's or upkeep's change, through the wipe guard (counting the
        ``prior`` changes of the same commit as the day's journaled ones; ``day`` keeps
        what the journal says of the day for the commit's next change: none of them is
        journaled before the commit, so one read serves them all)."""
        diff = dict(change.diff or {})
        if change.reason == "remember":  # the model's tool only adds facts
            diff = {"newFacts": diff.get("newFacts") or []}
        if diff.get(TEAM):  # a teammate's edit that would undo a newer one here waits
            diff, outcome.held_diff, outcome.held = hold_conflicts(data, diff)
        # the facts as they were: the rules change ``data`` in place (a teammate's does not)
        before = HeldFacts(data.get("facts", []))
        index = None if day is None else day.setdefault("team", TeamIndex())
        result = self._apply(data, change, diff, index)
        was = before.by_id if result.ids("remove") else {}
        protected = [
            i
            for i in result.ids("remove")
            if is_user_fact(was.get(i, {})) and not (diff.get(TEAM) and was[i].get("person"))
        ]  # a teammate's removal of a teammate's fact is theirs to make
        if protected:
            keep = [i for i in diff.get("factsToRemove") or [] if i not in protected]
            merges = diff.get("merges") or []
            held_merges = [m for m in merges if set(m.get("from") or []) & set(protected)]
            removals = [i for i in protected if i in (diff.get("factsToRemove") or [])]
            held_diff: dict[str, Any] = {"factsToRemove": removals} if removals else {}
            if held_merges:
                held_diff["merges"] = held_merges
            outcome.held_diff = {**(outcome.held_diff or {}), **held_diff}
            outcome.held += [
                {
                    "item": f"remove {i}",
                    "reason": "a fact you added by hand; only you can approve removing it",
                    "value": str(before.by_id[i].get("content", ""))[:80],
                }
                for i in protected
            ]
            diff = {**diff, "factsToRemove": keep}
            diff["merges"] = [m for m in merges if m not in held_merges]
            result = self._apply(data, change, diff)
        if change.reason == "remember" and set(result.ids("add")) & set(result.ids("evict")):
            raise Refused(
                f"not stored: memory is full (memory.max_facts is "
                f"{self.settings.memory.max_facts}) of more confident facts"
            )
        lost = lost_count(result)
        rewritten = wholesale_sections(data, diff)
        day = {} if day is None else day
        if "since" not in day:  # the journal's word on the day: once per commit
            since = (datetime.now(UTC) - WINDOW).isoformat(timespec="milliseconds")
            day["since"] = since.replace("+00:00", "Z")  # as the rows' times are written
            day["window"] = change_rows.lost_since(self.journal.db, day["since"], *_DAY_OF)
        window = day["window"] + sum(p.lost for p in prior)
        # What memory held before the day's first change: facts guarded changes added since
        # (and still stored) do not count, so 40 filler facts cannot let the next fold
        # remove 10 learned ones; the user's own additions do.
        # (Counted only when the day's losses pass the floor no count lowers.)
        start = limit = 0
        if window + lost > WIPE_MIN_FACTS:
            added = {i for p in prior for i in p.result.ids("add") if i not in merged(p.result)}
            if "grown" not in day:  # read only past the floor: most changes lose too few
                day["grown"] = change_rows.added_since(self.journal.db, day["since"], *_DAY_OF)
            grown = day["grown"] | added
            start = before.count + window - len(grown & before.by_id.keys())
            limit = wipe_limit(start)
        evicted_user = [i for i in result.ids("evict") if is_user_fact(before.by_id.get(i, {}))]
        why = ""
        if evicted_user:
            why = f"it would evict {len(evicted_user)} fact(s) you added by hand"
        elif before.wiped_by(lost + len(rewritten)):
            why = (
                f"it would remove or evict {lost} of {before.count} facts"
                + (f" and rewrite {len(rewritten)} profile section(s)" if rewritten else "")
                + f" (more than max({WIPE_MIN_FACTS}, {WIPE_SHARE:.0%}) = "
                f"{wipe_limit(before.count)})"
            )
        elif window + lost > WIPE_MIN_FACTS and window + lost > limit:
            why = (
                f"with the {window} fact(s) lost in the last day it would lose {window + lost}"
                f" of the {start} held before the day's changes (more than "
                f"max({WIPE_MIN_FACTS}, {WIPE_SHARE:.0%}) = {limit} a day)"
            )
        if why and change.reason == "remember":
            raise Refused(
                f"not stored: {why}; the user can raise memory.max_facts or forget a fact"
            )
        if why:
            whole = {**(change.diff or {}), "addedBy": added_by(change, change.diff or {})}
            outcome.held_diff, outcome.held_all = whole, True
            outcome.held = [{"item": "the whole change", "reason": why, "value": ""}]
            outcome.result = UpdateResult(data, [], result.ignored_removals, result.left_out)
            return outcome.result
        outcome.lost, outcome.result = lost, result
        return result

    def _held(self, db: Any, change: ChangeSet, why: str) -> Passed:
        """Inside a journal transaction: ``change`` proposed as one pending change, and
        journaled."""
        outcome = Passed(UpdateResult({}, []))
        diff = dict(change.diff or {})
        if change.origin == "model" and change.reason == "remember":  # it only adds facts
            diff = {"newFacts": diff.get("newFacts") or []}
        if change.origin != "user":  # an approval adds the facts as whose they were
            diff["addedBy"] = added_by(change, diff)
        if changes_anything(diff) or diff.get("merges"):
            outcome.pending_id = propose(db, change.source, diff)
            outcome.held = [{"item": "the whole change", "reason": why, "value": ""}]
            outcome.held_diff, outcome.held_all = diff, True
        self._record(db, change, outcome)
        return outcome

    # -- caps and the journal ----------------------------------------------------------
    def _check_turn(self, change: ChangeSet) -> None:
        if change.turn and change.reason == "remember":
            done = change_rows.count_in_turn(self.journal.db, change.turn, "remember")
            if done >= MAX_REMEMBER_PER_TURN:
                raise Refused(
                    f"not stored: one turn may remember at most {MAX_REMEMBER_PER_TURN} facts; "
                    "tell the user which facts you would keep, they can add them"
                )

    def _journal(self, db: Any, change: ChangeSet, outcome: Passed, version: int | None) -> None:
        """Inside the commit's transaction: the version ``change`` made (``version``, the
        commit's, when it changed anything), what it left waiting, the approval it carries
        out, and its ``memory_changes`` row."""
        if outcome.result.events:  # journaled just now, in this transaction
            outcome.version = version
        if outcome.held_diff:
            outcome.pending_id = propose(db, change.source, outcome.held_diff)
        if change.pending_id is not None and not outcome.skipped:
            ledger_rows.decide(db, change.pending_id, "approved", now_iso())
        self._record(db, change, outcome)

    def _record(self, db: Any, change: ChangeSet, outcome: Passed) -> None:
        if outcome.held_all:
            result = "held"
        elif outcome.result.events:
            result = "partly held" if outcome.pending_id is not None else "applied"
        else:
            result = "nothing"
        change_rows.insert(
            db,
            {
                "at": now_iso(),
                "origin": change.origin,
                "reason": change.reason,
                "source": change.source,
                "turn": change.turn,
                "lost": outcome.lost,
                "outcome": result,
                "version_id": outcome.version,
                "pending_id": outcome.pending_id,
            },
        )


_ORIGIN_ADDED_BY = {
    "user": ADDED_BY_USER,
    "model": ADDED_BY_MODEL,
    "fold": ADDED_BY_FOLD,
    "maintenance": ADDED_BY_FOLD,
    "team": "team",
}


def added_by(change: ChangeSet, diff: dict[str, Any]) -> str:
    """Whose the facts ``change`` adds are, from its origin alone (never its source: a
    thread may be called anything): the user's command's, the model's ``remember``'s, or
    learned by a fold. An approval adds a proposal's facts as whose they were (a proposal
    recorded before this was stamped came from a fold)."""
    if change.reason == "approve":
        return str(diff.get("addedBy") or ADDED_BY_FOLD)
    return _ORIGIN_ADDED_BY[change.origin]


def pinned(change: ChangeSet) -> ChangeSet:
    """``change`` with its project items naming their project (before anything is held)."""
    if not change.diff:
        return change
    return change.model_copy(update={"diff": pin_projects(change.diff, change.project)})


def merged(result: UpdateResult) -> list[str]:
    """The facts ``result`` added by merging others (a merge's fact replaces its sources)."""
    return [e.fact_id for e in result.events if e.kind == "add" and e.details.get("merged_from")]


def lost_count(result: UpdateResult) -> int:
    """Facts a change takes away: removals, evictions, and each merge's sources but one."""
    return len(result.ids("remove")) + len(result.ids("evict")) - len(merged(result))


def wholesale_sections(data: dict[str, Any], diff: dict[str, Any]) -> list[str]:
    """The profile sections ``diff`` rewrites keeping less than half of what they said."""
    found = []
    for group, names in SECTION_GROUPS:
        for name in names:
            update = (diff.get(group) or {}).get(name) or {}
            old = ((data.get(group) or {}).get(name) or {}).get("summary") or ""
            new = update.get("summary") or ""
            rewrites = update.get("shouldUpdate") and old.strip() and new.strip()
            if rewrites and overlap(old, new) < WHOLESALE:
                found.append(f"{group}.{name}")
    return found
