"""A fold's record as the journal keeps it (``memory_folds``): the outcomes in words, the
report's keys, and the rows read back and said in one line.

``folding/fold_log.py`` writes the rows; these reads take any connection, read-only ones
too (the inspector, ``open_reader``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ...projects import DEFAULT_PROJECT
from ...storage import folds as fold_rows
from ...storage import ledger as ledger_rows
from ...storage import queue as queue_rows

# A fold's outcome in words (``memory_folds.outcome``, ``%memory status``).
APPLIED = "applied"
PARTLY = "partly applied"
HELD = "held for review"
NOTHING = "nothing to keep"
FAILED = "failed"
REPORT_KEYS = (
    "added",
    "reinforced",
    "removed",
    "evicted",
    "sections",
    "ignored",
    "left_out",
    "held",
)


def decode(row: dict[str, Any]) -> dict[str, Any]:
    """A ``memory_folds`` row as ``{at, source, outcome, version, pending_id, error, added,
    reinforced, removed, evicted, sections, ignored, left_out, held}``."""
    report = json.loads(row.get("report") or "{}")
    return {
        "id": row.get("id"),
        "at": row.get("ts"),
        "source": row.get("source"),
        "outcome": row.get("outcome"),
        "version": row.get("version_id"),
        "pending_id": row.get("pending_id"),
        "error": row.get("error"),
        "project": _owner(row),
        **{k: report.get(k) or [] for k in REPORT_KEYS},
    }


def _owner(row: dict[str, Any]) -> str | None:
    """Whose a fold is: its thread's project (a thread from before projects is
    ``default``'s), None (the user's) when it folded no thread."""
    project = row.get("thread_project")
    return None if project is None else project or DEFAULT_PROJECT


def recent(db: Any, limit: int = 20, before: int | None = None) -> list[dict[str, Any]]:
    """The latest folds (older than fold ``before``), newest first ([] on a journal from
    before ``memory_folds``)."""
    return [decode(r) for r in fold_rows.latest(db, limit, before)]


def consecutive_failures(db: Any) -> int:
    """Failed folds since the last one that reached the memory model and got a diff."""
    return fold_rows.trailing(db, FAILED)


def summary(fold: Mapping[str, Any] | None, *, with_head: bool = True) -> str:
    """One fold in a line: ``partly applied (t1): added 2, left out 1 (newFacts[0]: …)``."""
    if not fold:
        return "never"
    head = str(fold.get("outcome") or "")
    if fold.get("source"):
        head += f" ({fold['source']})"
    if not fold.get("outcome"):  # a fold journaled before fold reports existed
        return str(fold.get("at") or "never")
    if fold.get("outcome") == "failed":
        body = str(fold.get("error") or "unknown error")
    else:
        parts = [
            f"{key} {len(fold.get(key) or [])}"
            for key in ("added", "reinforced", "removed", "evicted", "sections")
            if fold.get(key)
        ]
        left = list(fold.get("left_out") or [])
        if left:
            reasons = "; ".join(f"{x.get('item')}: {x.get('reason')}" for x in left[:3])
            more = f"; {len(left) - 3} more" if len(left) > 3 else ""
            parts.append(f"left out {len(left)} ({reasons}{more})")
        held = list(fold.get("held") or [])
        if held:
            change = f" as change #{fold['pending_id']}" if fold.get("pending_id") else ""
            parts.append(f"held for review{change} ({held[0].get('reason')})")
        body = ", ".join(parts) or "no change"
    return f"{head}: {body}" if with_head else body


def recent_decided(db: Any, limit: int = 20, before: int | None = None) -> list[dict[str, Any]]:
    """``recent``, each fold held for review saying what became of its change (``outcome``
    "held for review, then approved")."""
    found = recent(db, limit, before)
    for fold in found:
        change = ledger_rows.change(db, fold["pending_id"]) if fold.get("pending_id") else None
        if fold.get("outcome") == HELD and change and change["status"] != "pending":
            fold["outcome"] = f"{HELD}, then {_decided(db, change)}"
    return found


def _decided(db: Any, change: dict[str, Any]) -> str:
    """What became of a held change: ``approved``, ``rejected``, or ``partly approved`` when
    some of its items were approved one by one and the rest rejected (or the reverse)."""
    statuses = {change["status"], *ledger_rows.part_statuses(db, change["id"])}
    if {"approved", "rejected"} <= statuses:
        return "partly approved"
    return str(change["status"])


def with_claim(row: dict[str, Any], now: float | None = None) -> dict[str, Any]:
    """A queue row as ``status`` shows it: ``claim`` says which kernel is folding it and
    until when ("folding in host:pid until 14:03:07"), or is None while no live claim holds
    it. A claim further ahead than a lease is shown ending a lease from now, as the fold
    queue takes it (a clock that was ahead wrote it)."""
    now = time.time() if now is None else now
    owner, until = row.get("claimed_by"), row.get("claimed_until")
    claim = None
    if owner and until is not None and until >= now:
        end = min(float(until), now + queue_rows.LEASE_SECONDS)
        claim = f"folding in {owner} until {datetime.fromtimestamp(end):%H:%M:%S}"
    return {**row, "claim": claim}
