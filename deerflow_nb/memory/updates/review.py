"""Review mode: proposed changes wait as ``pending_changes`` until approved or rejected.

A change is read as numbered items (``readside/review_items.py``): each fact it adds or
removes, each merge and each section it rewrites, with the full text. Items can be decided
one by one (``Review.decide_items``): the chosen ones are split off as a decided change of their own
(applied through the same path as a whole approval, or dropped), and the rest keeps waiting
under the same id with the same numbers, so a listing read earlier still names them.

The gate (``gate.py``) proposes; an approval, whole or of some items, goes back through it
as the user's change.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ...config import Settings
from ...schema.changes import ChangeSet
from ...storage import ledger as rows
from ...storage.db import now_iso
from ...storage.journal import Journal
from ..readside.review_items import ITEM_NUMBERS, REVIEW_KEY, item_numbers, item_slots
from .write_protocol import Changed, Ledger

if TYPE_CHECKING:
    from ...schema.changes import ChangeDoor as Gate

# A change split off by a partial decision names the change it came from here.
PART_OF = "partOf"


def split(
    diff: Mapping[str, Any], numbers: Collection[int]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``diff`` cut in two: the items numbered ``numbers``, and the rest (which keeps its
    numbers in ``ITEM_NUMBERS``). A removal's staleness reason goes with it."""
    slots = item_slots(diff)
    chosen: dict[str, Any] = {}
    rest: dict[str, Any] = {}
    rest_numbers: list[int] = []
    for number, (kind, ref) in zip(item_numbers(diff, slots), slots, strict=True):
        part = chosen if number in numbers else rest
        if part is rest:
            rest_numbers.append(number)
        if kind == "add":
            part.setdefault("newFacts", []).append(diff["newFacts"][ref])
        elif kind == "remove":
            part.setdefault("factsToRemove", []).append(ref)
            part.setdefault("stale", []).extend(
                s for s in diff.get("stale") or [] if isinstance(s, Mapping) and s.get("id") == ref
            )
        elif kind == "merge":
            part.setdefault("merges", []).append(diff["merges"][ref])
        elif kind == "edit":
            part.setdefault("edits", []).append(diff["edits"][ref])
        elif kind == "forget-project":
            part.setdefault("forgetProjects", []).append(ref)
        elif ref[0] == "projectContext":
            part["projectContext"] = diff["projectContext"]
        else:
            group, name = ref
            part.setdefault(group, {})[name] = diff[group][name]
    for part in (chosen, rest):
        if not part.get("stale"):
            part.pop("stale", None)
        for key in ("addedBy", "team", "conflict"):  # whose the facts are goes with each
            if diff.get(key):
                part[key] = diff[key]
    rest[ITEM_NUMBERS] = rest_numbers
    return chosen, rest


def check_numbers(diff: Mapping[str, Any], numbers: Iterable[int], change_id: int) -> set[int]:
    """``numbers`` as a set, each an item of the change; ValueError naming them if not."""
    wanted = {int(n) for n in numbers}
    have = item_numbers(diff, item_slots(diff))
    if not wanted:
        raise ValueError(
            f"name the items of change {change_id} to decide (its items: "
            f"{', '.join(map(str, have))})"
        )
    unknown = sorted(wanted - set(have))
    if unknown:
        raise ValueError(
            f"change {change_id} has no item {', '.join(map(str, unknown))}; its items: "
            f"{', '.join(map(str, have)) or 'none'} (see %memory pending)"
        )
    return wanted


class _Decided(Exception):
    """Inside a decision's transaction: the change was decided or narrowed elsewhere since
    it was read, so this decision rolls back and does nothing."""


def still_as_read(db: Any, change: Mapping[str, Any]) -> str | None:
    """The stored diff of pending ``change`` when it is still pending and says what it said
    when read (``change["diff"]``, as ``pending()`` decodes it); None once another kernel
    decided or narrowed it."""
    row = rows.change(db, change["id"])
    if row is None or row["status"] != "pending":
        return None
    return row["diff"] if says_as_read(row, change) else None


def says_as_read(row: Mapping[str, Any], change: Mapping[str, Any]) -> bool:
    """Whether pending row ``row`` holds the diff ``change`` was read with."""
    try:
        diff = json.loads(row["diff"] or "{}")
    except ValueError:
        diff = {}
    return (diff if isinstance(diff, dict) else {}) == change["diff"]  # damaged: empty


def propose(db: Any, source: str, diff: dict[str, Any]) -> int:
    """Inside a journal transaction: store ``diff`` as a pending change; its id."""
    return rows.insert_pending(
        db, created_at=now_iso(), source=source, diff=json.dumps(diff, ensure_ascii=False)
    )


def select(pending: list[dict[str, Any]], ids: list[int] | str) -> list[dict[str, Any]]:
    """The proposals in ``pending`` named by ``ids`` (or ``"all"``), in their order."""
    if ids == "all":
        return pending
    wanted = {int(i) for i in ids}
    return [p for p in pending if p["id"] in wanted]


class Review:
    """Whether folds wait for approval, what waits, and the decisions on it."""

    def __init__(self, settings: Settings, journal: Journal, ledger: Ledger, changed: Changed):
        self.settings = settings
        self.journal = journal
        self.ledger = ledger
        self._changed = changed

    @property
    def on(self) -> bool:
        """The persisted choice (``%memory review on``), else ``memory.review``."""
        value = rows.setting(self.journal.db, REVIEW_KEY)
        return value == "1" if value is not None else self.settings.memory.review

    @on.setter
    def on(self, value: bool) -> None:
        with self.journal.transaction() as db:
            rows.put_setting(db, REVIEW_KEY, "1" if value else "0")

    def count(self) -> int:
        return rows.pending_count(self.journal.db)

    def pending(self) -> list[dict[str, Any]]:
        return [{**r, "diff": json.loads(r["diff"])} for r in rows.pending(self.journal.db)]

    def approve(self, chosen: list[dict[str, Any]], gate: Gate) -> int:
        """Apply the chosen proposals (oldest first) through the gate, as the user's
        changes; how many were applied. Each is checked again under the memory lock: one
        another kernel decided meanwhile is skipped, not applied twice, and so is one whose
        items another kernel decided in part (what is left of it is not what was read)."""
        applied = 0
        for change in chosen:
            approval = ChangeSet(
                origin="user",
                reason="approve",
                source=change["source"],
                diff=change["diff"],
                pending_id=change["id"],
            )
            try:
                with gate.committing(approval) as committed:
                    row = rows.change(committed.db, change["id"])
                    narrowed = row is None or not says_as_read(row, change)
                    if narrowed and not committed.outcome.skipped:
                        raise _Decided  # narrowed meanwhile: the approval rolls back
            except _Decided:
                continue
            applied += not committed.outcome.skipped
        return applied

    def decide_items(self, change_id: int, numbers: Iterable[int], verdict: str, gate: Gate) -> int:
        """Approve or reject the items ``numbers`` of pending change ``change_id``; how many
        items were decided (0 when it is not pending). ValueError names the change's items
        when a number is not one of them. All of them decide the whole change as
        ``approve``/``reject`` do. Otherwise the chosen items are split off as a change of
        their own, applied through the gate as the user's (like a whole approval) or
        dropped, and journaled with its status; the rest waits under the same id. A change
        decided or narrowed elsewhere since it was read is left alone (0).
        """
        found = select(self.pending(), [change_id])
        if not found:
            return 0
        change = found[0]
        wanted = check_numbers(change["diff"], numbers, change_id)
        if wanted >= set(item_numbers(change["diff"], item_slots(change["diff"]))):
            if verdict == "approve":
                decided = self.approve([change], gate)
            else:
                decided = self.reject([change])
            return len(wanted) if decided else 0
        chosen, rest = split(change["diff"], wanted)
        status = "approved" if verdict == "approve" else "rejected"

        def mark(db: Any) -> None:
            """In the decision's transaction, under memory.json's lock: the change is
            checked again (another kernel may have decided or narrowed it since it was
            read), the chosen items journaled as a decided part, the rest left waiting."""
            read = still_as_read(db, change)
            if read is None:
                raise _Decided
            part = rows.insert_pending(
                db,
                created_at=change["created_at"],
                source=change["source"],
                diff=json.dumps({**chosen, PART_OF: change["id"]}, ensure_ascii=False),
            )
            rows.decide(db, part, status, now_iso())
            if not rows.narrow_pending(
                db, change["id"], json.dumps(rest, ensure_ascii=False), read
            ):
                raise _Decided

        if still_as_read(self.journal.db, change) is None:
            return 0
        try:
            if verdict == "approve":
                approval = ChangeSet(
                    origin="user", reason="approve", source=change["source"], diff=chosen
                )
                with gate.committing(approval) as committed:
                    mark(committed.db)  # a raise here rolls the approval back
            else:
                with self.ledger.store.locked(), self.journal.transaction() as db:
                    mark(db)
        except _Decided:
            return 0
        self._changed({"reason": f"{verdict} items", "pending_id": change["id"]})
        return len(wanted)

    def reject(self, chosen: list[dict[str, Any]]) -> int:
        """Drop the chosen proposals; how many (one another kernel decided is not counted)."""
        with self.ledger.store.locked(), self.journal.transaction() as db:
            count = sum(rows.decide(db, change["id"], "rejected", now_iso()) for change in chosen)
        if count:
            self._changed({"reason": "reject"})
        return count
