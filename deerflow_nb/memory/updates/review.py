"""Review mode: proposed changes wait as ``pending_changes`` until approved or rejected.

A change is read as numbered items (``items``): each fact it adds or removes, each merge
and each section it rewrites, with the full text. Items can be decided one by one
(``Review.decide_items``): the chosen ones are split off as a decided change of their own
(applied through the same path as a whole approval, or dropped), and the rest keeps waiting
under the same id with the same numbers, so a listing read earlier still names them.

The gate (``gate.py``) proposes; an approval, whole or of some items, goes back through it
as the user's change.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ...config import Settings
from ...schema.changes import ChangeSet
from ...schema.constants import SECTION_LABELS
from ...storage import ledger as rows
from ...storage.db import now_iso
from ...storage.journal import Journal
from .write_protocol import Changed, Ledger

if TYPE_CHECKING:
    from ...schema.changes import ChangeDoor as Gate

REVIEW_KEY = "review"
# A narrowed change keeps its items' first numbers here (the updater ignores the key).
ITEM_NUMBERS = "itemNumbers"
# A change split off by a partial decision names the change it came from here.
PART_OF = "partOf"
_SIGNS = {"add": "+", "remove": "-", "merge": "~", "edit": "*", "section": "§"}


@dataclass(frozen=True)
class ReviewItem:
    """One thing a pending change would do, with its full text and its number in the
    change (``%memory approve ID --only N`` names it)."""

    number: int
    kind: str  # add | remove | merge | edit (a teammate's) | section
    text: str  # the fact added or removed, the merged text, the section's new summary
    fact_id: str | None = None  # the fact removed or edited
    detail: str = ""  # category and confidence, why removed, what merges, which section

    def reading(self) -> str:
        """The item in one plain line: ``- fact_1: Uses MLflow (stale: idle 200 days)``."""
        head = f"{self.fact_id}: " if self.fact_id else ""
        if self.kind == "section":
            head = f"{self.detail}: "
        detail = f" ({self.detail})" if self.detail and self.kind != "section" else ""
        return f"{_SIGNS.get(self.kind, '?')} {head}{self.text}{detail}"

    def line(self) -> str:
        """The reading with the item's number: ``3. - fact_1: Uses MLflow``."""
        return f"{self.number}. {self.reading()}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _slots(diff: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The items of ``diff`` in listing order, each as (kind, where it sits in the diff)."""
    slots: list[tuple[str, Any]] = [("add", i) for i, _ in enumerate(diff.get("newFacts") or [])]
    slots += [("remove", str(fid)) for fid in dict.fromkeys(diff.get("factsToRemove") or [])]
    slots += [("merge", j) for j, _ in enumerate(diff.get("merges") or [])]
    slots += [("edit", j) for j, _ in enumerate(diff.get("edits") or [])]  # a teammate's
    for group in ("user", "history"):
        for name, section in (diff.get(group) or {}).items():
            if isinstance(section, Mapping) and section.get("shouldUpdate"):
                slots.append(("section", (group, name)))
    context = diff.get("projectContext")
    if isinstance(context, Mapping) and context.get("shouldUpdate"):  # a project's summary
        slots.append(("section", ("projectContext", None)))
    slots += [("forget-project", str(name)) for name in diff.get("forgetProjects") or []]
    return slots


def _numbers(diff: Mapping[str, Any], slots: list[tuple[str, Any]]) -> list[int]:
    kept = diff.get(ITEM_NUMBERS)
    if isinstance(kept, list) and len(kept) == len(slots):
        return [int(n) for n in kept]
    return list(range(1, len(slots) + 1))


def items(diff: Mapping[str, Any], facts: Iterable[Mapping[str, Any]] = ()) -> list[ReviewItem]:
    """What ``diff`` would do, item by item with the full text; a removal's text is the
    stored fact's (``facts``), else the one its proposal kept."""
    known = {str(f.get("id")): f for f in facts}
    stale = {str(s.get("id")): s for s in diff.get("stale") or [] if isinstance(s, Mapping)}
    slots = _slots(diff)
    out = []
    for number, (kind, ref) in zip(_numbers(diff, slots), slots, strict=True):
        if kind == "add":
            fact = diff["newFacts"][ref]
            fact = fact if isinstance(fact, Mapping) else {"content": fact}
            conf = fact.get("confidence", 0.5)
            conf = f"{float(conf):.2f}" if isinstance(conf, int | float) else "?"
            detail = f"{fact.get('category') or 'context'}, {conf}"
            if fact.get("scope") == "project":
                detail += f", project {fact.get('project')}"
            out.append(ReviewItem(number, kind, str(fact.get("content", "")), None, detail))
        elif kind == "remove":
            stored, why = known.get(ref), stale.get(ref, {})
            text = str((stored or why).get("content") or "")
            detail = f"stale: {why['reason']}" if why.get("reason") else ""
            if stored is None:
                detail = "; ".join(filter(None, [detail, "no longer in memory"]))
            out.append(ReviewItem(number, kind, text, ref, detail))
        elif kind == "merge":
            merge = diff["merges"][ref]
            merge = merge if isinstance(merge, Mapping) else {}
            sources = [str(i) for i in merge.get("from") or []]
            named = [f"{i}: {known[i].get('content', '')}" if i in known else i for i in sources]
            text = str(merge.get("content", ""))
            out.append(ReviewItem(number, kind, text, None, "merges " + "; ".join(named)))
        elif kind == "edit":
            edit = diff["edits"][ref]
            edit = edit if isinstance(edit, Mapping) else {}
            fid = str(edit.get("id"))
            was = edit.get("was") if isinstance(edit.get("was"), Mapping) else {}
            now = str((known.get(fid) or {}).get("content") or "")
            detail = f"edits {was.get('content')!r}" + (f"; here now {now!r}" if now else "")
            out.append(ReviewItem(number, kind, str(edit.get("content", "")), fid, detail))
        elif kind == "forget-project":
            out.append(ReviewItem(number, "remove", f"project {ref}'s summary", None, "forget"))
        elif ref[0] == "projectContext":
            context = diff["projectContext"]
            where = f"Project {context.get('project')}'s summary"
            out.append(ReviewItem(number, kind, str(context.get("summary", "")), None, where))
        else:
            group, name = ref
            summary = str(diff[group][name].get("summary", ""))
            label = SECTION_LABELS.get((group, name), f"{group} {name}")
            out.append(ReviewItem(number, kind, summary, None, label))
    return out


def split(
    diff: Mapping[str, Any], numbers: Collection[int]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``diff`` cut in two: the items numbered ``numbers``, and the rest (which keeps its
    numbers in ``ITEM_NUMBERS``). A removal's staleness reason goes with it."""
    slots = _slots(diff)
    chosen: dict[str, Any] = {}
    rest: dict[str, Any] = {}
    rest_numbers: list[int] = []
    for number, (kind, ref) in zip(_numbers(diff, slots), slots, strict=True):
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
    have = _numbers(diff, _slots(diff))
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
        another kernel decided meanwhile is skipped, not applied twice."""
        applied = 0
        for change in chosen:
            passed = gate.submit(
                ChangeSet(
                    origin="user",
                    reason="approve",
                    source=change["source"],
                    diff=change["diff"],
                    pending_id=change["id"],
                )
            )
            applied += not passed.skipped
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
        if wanted >= set(_numbers(change["diff"], _slots(change["diff"]))):
            if verdict == "approve":
                decided = self.approve([change], gate)
            else:
                decided = self.reject([change])
            return len(wanted) if decided else 0
        chosen, rest = split(change["diff"], wanted)
        status = "approved" if verdict == "approve" else "rejected"

        def unchanged() -> bool:
            row = rows.change(self.journal.db, change["id"])
            same = row is not None and row["status"] == "pending"
            return same and json.loads(row["diff"]) == change["diff"]

        def mark(db: Any) -> None:
            part = rows.insert_pending(
                db,
                created_at=change["created_at"],
                source=change["source"],
                diff=json.dumps({**chosen, PART_OF: change["id"]}, ensure_ascii=False),
            )
            rows.decide(db, part, status, now_iso())
            rows.narrow_pending(db, change["id"], json.dumps(rest, ensure_ascii=False))

        if not unchanged():
            return 0
        if verdict == "approve":
            approval = ChangeSet(
                origin="user", reason="approve", source=change["source"], diff=chosen
            )
            with gate.committing(approval) as committed:
                mark(committed.db)
        else:
            with self.ledger.store.locked(), self.journal.transaction() as db:
                if not unchanged():
                    return 0
                mark(db)
        self._changed({"reason": f"{verdict} items", "pending_id": change["id"]})
        return len(wanted)

    def reject(self, chosen: list[dict[str, Any]]) -> int:
        """Drop the chosen proposals; how many (one another kernel decided is not counted)."""
        with self.ledger.store.locked(), self.journal.transaction() as db:
            count = sum(rows.decide(db, change["id"], "rejected", now_iso()) for change in chosen)
        if count:
            self._changed({"reason": "reject"})
        return count
