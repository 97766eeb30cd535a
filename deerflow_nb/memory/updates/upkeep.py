"""Memory over months: stale facts proposed for removal, related facts consolidated."""

from __future__ import annotations

import json
from typing import Any

from ...config import Settings
from ...projects import DEFAULT_PROJECT, fact_project
from ...schema.changes import ChangeSet
from ...storage import ledger as ledger_rows
from ..readside import activity
from ..reports import ConsolidationReport, StaleReport
from ..scopes import Scope
from .gate import Gate
from .review import Review
from .write_protocol import Ledger

PROPOSE_TRIES = 3  # stale proposals another kernel may journal meanwhile before one gives up


class Upkeep:
    """The passes that tidy memory as it ages (``aging.py`` holds their rules); their
    changes go through the gate as maintenance."""

    def __init__(self, settings: Settings, ledger: Ledger, review: Review, gate: Gate) -> None:
        self.settings = settings
        self.ledger = ledger
        self.review = review
        self.gate = gate

    def stale(self, now: Any = None, days: float | None = None) -> list[dict[str, Any]]:
        """Facts idle longer than ``days`` (``memory.staleness_days``) × their age factor as
        of ``now``, the longest idle first, then every fact of each project unused that long
        (``aging.idle_projects``: with its ``project``); the user's facts and an active
        project's are judged one by one. Nothing is removed."""
        from .aging import idle_projects, stale_facts

        limit = self.settings.memory.staleness_days if days is None else days
        data = self.ledger.shared()[1]
        ids = [str(f.get("id")) for f in data.get("facts", [])]
        used = activity.read(self.ledger.journal.db, ids)
        threads = {
            row["project"] or DEFAULT_PROJECT: row["last_used"]
            for row in self.ledger.journal.project_threads()
        }
        idle = idle_projects(data, used, threads, days=limit, now=now)
        found = [
            s.to_dict()
            for s in stale_facts(data, used, days=limit, now=now)
            if fact_project(s.fact) not in idle
        ]
        for project in sorted(idle.values(), key=lambda p: p.last_used):
            own = Scope.own(project.name)
            found += [project.fact_dict(f) for f in data["facts"] if own.sees(f)]
        return found

    def propose_stale(self, now: Any = None, days: float | None = None) -> StaleReport:
        """Propose the stale facts for removal as one pending change, and each unused
        project's facts as one change of its own (approved or rejected whole, or item by
        item); facts or projects a pending stale proposal already names are not proposed
        again. That is checked again as each proposal is journaled, in its transaction: one
        another kernel proposed meanwhile is seen, and what it names is left out (ValueError
        when that keeps happening)."""
        found = self.stale(now, days)
        waiting, named = stale_named(self.review.pending())
        report = StaleReport(stale=found)
        groups: dict[str | None, list[dict[str, Any]]] = {}
        for s in found:
            if s["id"] not in waiting and s.get("project") not in named:
                groups.setdefault(s.get("project"), []).append(s)
        for project, group in groups.items():
            for _ in range(PROPOSE_TRIES):
                fresh = [
                    s for s in group if s["id"] not in waiting and s.get("project") not in named
                ]
                if not fresh:
                    break
                try:
                    pending_id = self._propose(project, fresh)
                except _Proposed as meanwhile:  # rolled back: what it names is left out
                    waiting |= meanwhile.waiting
                    named |= meanwhile.named
                    continue
                if project is None:
                    report.pending_id = pending_id
                else:
                    report.projects.append(
                        {
                            "project": project,
                            "pending_id": pending_id,
                            "facts": len(fresh),
                            "last_used": fresh[0]["last_active"],
                            "reason": fresh[0]["reason"],
                        }
                    )
                report.proposed += [s["id"] for s in fresh]
                break
            else:
                whose = f"project {project}'s" if project else "your"
                raise ValueError(
                    f"another kernel proposed some of {whose} stale facts each of the "
                    f"{PROPOSE_TRIES} times this one was about to; those were not proposed "
                    "here: propose stale facts again"
                )
        report.already_pending = sorted(waiting & {s["id"] for s in found})
        report.already_projects = sorted(
            {str(s["project"]) for s in found if s.get("project")} & named
        )
        return report

    def _propose(self, project: str | None, fresh: list[dict[str, Any]]) -> int | None:
        """``fresh`` proposed as one stale change; its pending id. ``_Proposed`` (nothing
        proposed) when a pending stale proposal names one of them as it is journaled."""
        keys = ("id", "content", "reason", "project")
        diff = {
            "factsToRemove": [s["id"] for s in fresh],
            "stale": [{k: s[k] for k in keys if k in s} for s in fresh],
        }
        source = f"stale project {project}" if project else "stale"
        change = ChangeSet(origin="maintenance", reason="stale", source=source, diff=diff)
        with self.gate.committing(change) as committed:  # it waits: in the journal's transaction
            ours = committed.outcome.pending_id
            others = [r for r in ledger_rows.pending(committed.db) if r["id"] != ours]
            waiting, named = stale_named([{**r, "diff": json.loads(r["diff"])} for r in others])
            if waiting & set(diff["factsToRemove"]) or project in named:
                raise _Proposed(waiting, named)
        return committed.outcome.pending_id

    def consolidate(self) -> ConsolidationReport:
        """Ask the memory model which facts to merge, scope by scope (the user's facts, then
        each project's: one call each, so no merge joins two scopes); the merges wait for
        review in review mode, else apply as one version."""
        from ...llm import get_chat_model
        from ...llm.base import output_cap
        from ..model_reply import check_holdable, load_reply
        from .aging import consolidation_messages, parse_merges

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


def stale_named(pending: list[dict[str, Any]]) -> tuple[set[str], set[str]]:
    """The facts and the projects the stale proposals among ``pending`` name."""
    waiting: set[str] = set()
    named: set[str] = set()
    for change in pending:
        stale = change["diff"].get("stale") or []
        if stale:
            waiting |= {str(i) for i in change["diff"].get("factsToRemove", [])}
            named |= {str(s["project"]) for s in stale if s.get("project")}
    return waiting, named


class _Proposed(Exception):
    """Inside a stale proposal's transaction: another names some of its facts (``waiting``)
    or its project (``named``)."""

    def __init__(self, waiting: set[str], named: set[str]) -> None:
        super().__init__()
        self.waiting, self.named = waiting, named


def scope_parts(data: dict[str, Any]) -> list[dict[str, Any]]:
    """``data`` once per scope with two facts or more: the user's facts, each project's."""
    groups: dict[str | None, list[dict[str, Any]]] = {}
    for fact in data.get("facts") or []:
        if isinstance(fact, dict):
            groups.setdefault(fact_project(fact), []).append(fact)
    return [{**data, "facts": facts} for facts in groups.values() if len(facts) >= 2]
