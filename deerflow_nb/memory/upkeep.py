"""Memory over months: stale facts proposed for removal, related facts consolidated."""

from __future__ import annotations

from typing import Any

from ..config import Settings
from ..projects import fact_project
from ..schema.changes import ChangeSet
from . import usage
from .gate import Gate
from .ledger import Ledger
from .reports import ConsolidationReport, StaleReport
from .review import Review


class Upkeep:
    """The passes that tidy memory as it ages (``aging.py`` holds their rules); their
    changes go through the gate as maintenance."""

    def __init__(self, settings: Settings, ledger: Ledger, review: Review, gate: Gate) -> None:
        self.settings = settings
        self.ledger = ledger
        self.review = review
        self.gate = gate

    def stale(self, now: Any, days: float | None) -> list[dict[str, Any]]:
        """Facts idle longer than ``days`` (``memory.staleness_days``) × their age factor as
        of ``now``, the longest idle first; nothing is removed."""
        from .aging import stale_facts

        limit = self.settings.memory.staleness_days if days is None else days
        data = self.ledger.shared()[1]
        ids = [str(f.get("id")) for f in data.get("facts", [])]
        used = usage.read(self.ledger.journal.db, ids)
        return [s.to_dict() for s in stale_facts(data, used, days=limit, now=now)]

    def propose_stale(self, now: Any, days: float | None) -> StaleReport:
        """Propose the stale facts for removal as one pending change; facts some pending
        stale proposal already names are not proposed again."""
        found = self.stale(now, days)
        waiting = {
            str(i)
            for change in self.review.pending()
            if change["diff"].get("stale")
            for i in change["diff"].get("factsToRemove", [])
        }
        fresh = [s for s in found if s["id"] not in waiting]
        report = StaleReport(
            stale=found, already_pending=sorted(waiting & {s["id"] for s in found})
        )
        if fresh:
            diff = {
                "factsToRemove": [s["id"] for s in fresh],
                "stale": [
                    {"id": s["id"], "content": s["content"], "reason": s["reason"]} for s in fresh
                ],
            }
            change = ChangeSet(origin="maintenance", reason="stale", source="stale", diff=diff)
            report.pending_id = self.gate.submit(change).pending_id
            report.proposed = [s["id"] for s in fresh]
        return report

    def consolidate(self) -> ConsolidationReport:
        """Ask the memory model which facts to merge, scope by scope (the user's facts, then
        each project's: one call each, so no merge joins two scopes); the merges wait for
        review in review mode, else apply as one version."""
        from ..llm import get_chat_model
        from ..llm.base import output_cap
        from .aging import consolidation_messages, parse_merges
        from .extraction import load_reply
        from .reply_limits import check_holdable

        data = self.ledger.shared()[1]
        report = ConsolidationReport()
        if len(data.get("facts") or []) < 2:
            return report
        model = get_chat_model(self.settings, self.settings.memory_model_name)
        merges: list[dict[str, Any]] = []
        for part in scope_parts(data):
            messages, handles = consolidation_messages(part)
            limit = self.settings.model.max_output_tokens
            cap = output_cap(limit, model.max_input_tokens, messages)
            # Asked for by the user's own command: the foreground, nothing to give way to.
            reply = model.bounded(messages, max_output_tokens=cap, json_mode=True, background=False)
            check_holdable(reply.content)
            raw, _ = load_reply(reply.content)
            found, left_out = parse_merges(raw, handles, part)
            merges += found
            report.left_out += left_out
        if not merges:
            return report
        diff = {"merges": merges}
        report.merges = merges
        change = ChangeSet(
            origin="maintenance", reason="consolidate", source="consolidate", diff=diff
        )
        passed = self.gate.submit(change)
        report.pending_id, report.version = passed.pending_id, passed.version
        report.held = passed.held
        result = passed.result
        report.left_out += result.left_out
        report.merged = [
            {"id": e.fact_id, "content": e.new_content, "from": e.details["merged_from"]}
            for e in result.events
            if e.kind == "add" and e.details.get("merged_from")
        ]
        return report


def scope_parts(data: dict[str, Any]) -> list[dict[str, Any]]:
    """``data`` once per scope with two facts or more: the user's facts, each project's."""
    groups: dict[str | None, list[dict[str, Any]]] = {}
    for fact in data.get("facts") or []:
        if isinstance(fact, dict):
            groups.setdefault(fact_project(fact), []).append(fact)
    return [{**data, "facts": facts} for facts in groups.values() if len(facts) >= 2]
