"""Hand edits of memory: add, edit and forget facts, each one change set through the gate."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from ...config import Settings
from ...projects import DEFAULT_PROJECT, PROJECT_SCOPE, fact_project
from ...schema.changes import ChangeSet, FactEdit
from ...schema.constants import ADDED_BY_USER, CATEGORIES
from ...storage.db import now_iso
from ..scopes import stamp
from .events import Event
from .summaries import refresh_summaries
from .updater import UpdateResult, sanitize_text

if TYPE_CHECKING:
    from ...schema.changes import ChangeDoor as Gate


def find_fact(data: dict[str, Any], fact_id: str) -> dict[str, Any] | None:
    return next((f for f in data.get("facts", []) if f.get("id") == fact_id), None)


def _category_details(old: str | None, new: str | None) -> dict[str, Any]:
    """An edit event's category, and the one it had when the edit changed it."""
    return {"category": new} if old == new else {"category": new, "old_category": old}


def _check(category: str | None, confidence: float | None) -> None:
    if category is not None and category not in CATEGORIES:
        raise ValueError(f"category must be one of {', '.join(CATEGORIES)}, got {category!r}")
    if confidence is not None and not 0 <= confidence <= 1:
        raise ValueError(f"confidence must be from 0 to 1, got {confidence!r}")


def apply_edit(data: dict[str, Any], edit: FactEdit) -> UpdateResult:
    """``edit`` applied to ``data`` (changed in place); KeyError if the fact is gone.

    The summaries follow in the same change (``summaries.py``), as forgetting does: a new
    text, category or scope leaves the summaries that held the old one, otherwise the profile
    would go on telling the model what the user corrected or moved. An edited fact is the
    user's own from then on (a model's suggestion they confirmed); a fact only moved to
    another scope keeps whose it was.
    """
    fact = find_fact(data, edit.fact_id)
    if fact is None:
        raise KeyError(edit.fact_id)
    before = [dict(f) for f in data.get("facts", [])]
    old_content, old_conf = fact["content"], fact.get("confidence")
    old_category = fact.get("category")
    if edit.content is not None:
        fact["content"] = edit.content
    if edit.category is not None:
        fact["category"] = edit.category
    if edit.confidence is not None:
        fact["confidence"] = float(edit.confidence)
    old_project = fact_project(fact)
    if edit.scope is not None:
        stamp(fact, (edit.project or DEFAULT_PROJECT) if edit.scope == "project" else None)
    fact["updatedAt"] = now_iso()
    if (edit.content, edit.category, edit.confidence) != (None, None, None):
        fact["addedBy"] = ADDED_BY_USER  # the user's words now; a move keeps whose it was
    event = Event(
        "update",
        edit.fact_id,
        None,
        old_content,
        fact["content"],
        old_conf,
        fact.get("confidence"),
        _category_details(old_category, fact.get("category")),
    )
    if edit.scope is not None:
        event.details.update(project=fact_project(fact), old_project=old_project)
    events = [event, *refresh_summaries(before, data, written=set(), now=fact["updatedAt"])]
    return UpdateResult(data, events)


class Edits:
    """What the user changes by hand (``%memory``, the panel, the inspector), and the
    model's ``remember``: change sets for the gate."""

    def __init__(self, settings: Settings, gate: Gate) -> None:
        self.settings = settings
        self.gate = gate

    def add(
        self,
        content: str,
        category: str | None = "context",
        confidence: float = 0.9,
        source: str = "manual",
        *,
        origin: str = "user",
        turn: str | None = None,
        project: str | None = None,
    ) -> dict[str, Any]:
        """Add a fact by hand (no threshold); a near-duplicate reinforces the stored one, and
        with ``category=None`` it is read from the text (``%memory add`` without one). With
        ``project`` the fact is that project's, else the user's (shared by every project).

        ``origin="model"`` (with the agent ``turn``) is the model's ``remember`` when no user
        message asked: stored as its suggestion (``addedBy: "model"``), capped per turn,
        never evicting a fact the user added; in review mode it waits (the returned dict
        then has ``pending_id`` and no ``id``). ``Refused`` (a ValueError) says why not."""
        if category is None:
            from .classify import category_of

            category = category_of(content)
        _check(category, confidence)
        if not sanitize_text(content):
            raise ValueError("a fact needs some text")
        item: dict[str, Any] = {"content": content, "category": category, "confidence": confidence}
        if project:
            item.update(scope=PROJECT_SCOPE, project=project)
        diff = {"newFacts": [item]}
        change = ChangeSet(
            origin=origin,  # type: ignore[arg-type]
            reason="add" if origin == "user" and turn is None else "remember",
            source=source,
            diff=diff,
            turn=turn,
            threshold=0.0 if origin == "user" else None,
            project=project,
        )
        passed = self.gate.submit(change)
        result = passed.result
        fact_id = next((e.fact_id for e in result.events if e.kind in ("add", "reinforce")), None)
        if fact_id is None:  # held for review, or left out by the rules
            reasons = [h["reason"] for h in passed.held] + [
                item["reason"] for item in result.left_out
            ]
            return {
                "content": sanitize_text(content),
                "category": category,
                "pending_id": passed.pending_id,
                "held": "; ".join(reasons) or "nothing to store",
            }
        return copy.deepcopy(find_fact(result.data, fact_id) or {"id": fact_id})

    def edit(
        self,
        fact_id: str,
        content: str | None = None,
        *,
        category: str | None = None,
        confidence: float | None = None,
        scope: str | None = None,
        project: str | None = None,
    ) -> dict[str, Any]:
        """Change a fact's text, category, confidence or scope (``"user"``, or
        ``"project"`` with ``project``: a move); KeyError if there is no such fact."""
        _check(category, confidence)
        text = None if content is None else sanitize_text(content)
        if text == "":
            raise ValueError("a fact needs some text; to remove it, forget it")
        edit = FactEdit(
            fact_id=fact_id,
            content=text,
            category=category,
            confidence=confidence,
            scope=scope,  # type: ignore[arg-type]
            project=project,
        )
        passed = self.gate.submit(ChangeSet(origin="user", reason="edit", edit=edit))
        return copy.deepcopy(find_fact(passed.result.data, fact_id) or {})

    def forget(self, fact_id: str) -> dict[str, Any]:
        """Really remove a fact (journaled); KeyError if there is no such fact."""
        return self.forget_many([fact_id])[0]

    def forget_many(self, fact_ids: list[str]) -> list[dict[str, Any]]:
        """Remove several facts as one change: all of them, or none if any id is unknown."""
        change = ChangeSet(origin="user", reason="forget", diff={"factsToRemove": list(fact_ids)})
        return self.gate.submit(change).removed

    def forget_outside(self, fact_ids: list[str], source: str = "outside") -> dict[str, Any]:
        """A removal an outside agent's model asks for (MCP's ``forget``): the model's change,
        so the gate's rules for one hold (a fact the user added waits for the user, the wipe
        guard counts it), and while ``memory.review_outside_forget`` is on (the default) all
        of it waits for approval. ``{removed: [ids], pending_id, held: [{item, reason}]}``."""
        change = ChangeSet(
            origin="model",
            reason="forget",
            source=source,
            diff={"factsToRemove": list(fact_ids)},
            review=self.settings.memory.review_outside_forget,
        )
        passed = self.gate.submit(change)
        return {
            "removed": passed.result.ids("remove"),
            "pending_id": passed.pending_id,
            "held": passed.held,
        }
