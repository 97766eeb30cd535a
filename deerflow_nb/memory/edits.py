"""Hand edits of memory: add, edit and forget facts, each one journaled change."""

from __future__ import annotations

import copy
from typing import Any

from ..config import Settings
from ..schema.constants import ADDED_BY_USER
from ..storage.db import now_iso
from .ledger import Ledger
from .rules import Rules
from .store import CATEGORIES
from .updater import Event, UpdateResult, sanitize_text, scrub_summaries


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


class Edits:
    """What the user changes by hand (``%memory``, the panel, the inspector, the tools)."""

    def __init__(self, settings: Settings, ledger: Ledger, rules: Rules) -> None:
        self.settings = settings
        self.ledger = ledger
        self.rules = rules

    def add_fact(
        self, content: str, category: str, confidence: float, source: str
    ) -> dict[str, Any]:
        """Add a fact (no threshold); a near-duplicate reinforces the stored one."""
        _check(category, confidence)
        if not sanitize_text(content):
            raise ValueError("a fact needs some text")
        diff = {"newFacts": [{"content": content, "category": category, "confidence": confidence}]}

        def mutate(data: dict[str, Any]) -> UpdateResult:
            result = self.rules.apply(data, diff, source, threshold=0.0, added_by=ADDED_BY_USER)
            if set(result.ids("add")) & set(result.ids("evict")):  # refused before writing
                raise ValueError(
                    f"memory is full (memory.max_facts is {self.settings.memory.max_facts}) "
                    f"and every fact is more confident than {confidence:g}; raise the "
                    "confidence, forget a fact, or raise memory.max_facts"
                )
            return result

        result, _ = self.ledger.commit("add", source, mutate)
        fact_id = next(e.fact_id for e in result.events if e.kind in ("add", "reinforce"))
        return copy.deepcopy(find_fact(result.data, fact_id) or {"id": fact_id})

    def edit_fact(
        self,
        fact_id: str,
        content: str | None,
        category: str | None,
        confidence: float | None,
    ) -> dict[str, Any]:
        """Change a fact's text, category or confidence; KeyError if there is no such fact.

        A new text also drops the summary sentences that restate the old one, as forgetting
        does: otherwise the profile would go on telling the model what the user corrected.
        """
        _check(category, confidence)
        text = None if content is None else sanitize_text(content)
        if text == "":
            raise ValueError("a fact needs some text; to remove it, forget it")

        def mutate(data: dict[str, Any]) -> UpdateResult:
            fact = find_fact(data, fact_id)
            if fact is None:
                raise KeyError(fact_id)
            old_content, old_conf = fact["content"], fact.get("confidence")
            old_category = fact.get("category")
            if text is not None:
                fact["content"] = text
            if category is not None:
                fact["category"] = category
            if confidence is not None:
                fact["confidence"] = float(confidence)
            fact["updatedAt"] = now_iso()
            event = Event(
                "update",
                fact_id,
                None,
                old_content,
                fact["content"],
                old_conf,
                fact.get("confidence"),
                _category_details(old_category, fact.get("category")),
            )
            events = [event]
            if text is not None and text != old_content:  # the profile must not keep the old text
                events += scrub_summaries(data, [old_content], skip=set(), now=fact["updatedAt"])
            return UpdateResult(data, events)

        result, _ = self.ledger.commit("edit", "manual", mutate)
        return copy.deepcopy(find_fact(result.data, fact_id) or {})

    def forget_many(self, fact_ids: list[str]) -> list[dict[str, Any]]:
        """Remove several facts as one change: all of them, or none if any id is unknown."""
        removed: list[dict[str, Any]] = []

        def mutate(data: dict[str, Any]) -> UpdateResult:
            removed.clear()
            for fact_id in fact_ids:
                fact = find_fact(data, fact_id)
                if fact is None:
                    raise KeyError(fact_id)
                removed.append(copy.deepcopy(fact))
            return self.rules.apply(data, {"factsToRemove": list(fact_ids)}, "manual")

        self.ledger.commit("forget", "manual", mutate)
        return removed
