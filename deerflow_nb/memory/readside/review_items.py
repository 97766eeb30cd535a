"""A pending change read item by item: each fact it adds or removes, each merge, edit and
section it rewrites, with the full text and its number in the change (what
``%memory pending``, the panel and ``MemoryReader.review_items`` show).

``updates/review.py`` decides them (approve, reject, item by item) through the gate.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from ...schema.constants import SECTION_LABELS

# The journal setting that holds ``%memory review on|off``.
REVIEW_KEY = "review"
# A narrowed change keeps its items' first numbers here (the updater ignores the key).
ITEM_NUMBERS = "itemNumbers"
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


def item_slots(diff: Mapping[str, Any]) -> list[tuple[str, Any]]:
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


def item_numbers(diff: Mapping[str, Any], slots: list[tuple[str, Any]]) -> list[int]:
    kept = diff.get(ITEM_NUMBERS)
    if isinstance(kept, list) and len(kept) == len(slots):
        return [int(n) for n in kept]
    return list(range(1, len(slots) + 1))


def items(diff: Mapping[str, Any], facts: Iterable[Mapping[str, Any]] = ()) -> list[ReviewItem]:
    """What ``diff`` would do, item by item with the full text; a removal's text is the
    stored fact's (``facts``), else the one its proposal kept."""
    known = {str(f.get("id")): f for f in facts}
    stale = {str(s.get("id")): s for s in diff.get("stale") or [] if isinstance(s, Mapping)}
    slots = item_slots(diff)
    out = []
    for number, (kind, ref) in zip(item_numbers(diff, slots), slots, strict=True):
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
