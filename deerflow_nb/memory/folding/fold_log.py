"""What every fold did, journaled in ``memory_folds`` (one row per fold, failed ones too).

A row holds the outcome (``applied``, ``partly applied``, ``held for review``, ``nothing to
keep``, ``failed``) and a JSON report: the fact ids added, reinforced, removed and evicted,
the sections rewritten, the items left out with their reasons, and what waits for review.
``storage/folds.py`` writes and reads the rows; the read helpers take any connection, so
read-only views (the inspector) can use them on their own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ...scrub import encodable, encodable_deep
from ...storage import folds as fold_rows
from ...storage import ledger as ledger_rows
from ...storage import queue as queue_rows
from ...storage.db import now_iso
from ..reports import APPLIED, FAILED, HELD, NOTHING, PARTLY, REPORT_KEYS


def record(
    db: Any,
    *,
    source: str,
    outcome: str,
    report: dict[str, Any] | None = None,
    version: int | None = None,
    pending_id: int | None = None,
    error: str | None = None,
    ts: str | None = None,
) -> int:
    """Journal one fold (inside the caller's transaction); its row id."""
    body = encodable_deep({k: (report or {}).get(k) or [] for k in REPORT_KEYS})
    return fold_rows.insert(
        db,
        {
            "ts": ts or now_iso(),
            "source": source,
            "outcome": outcome,
            "version_id": version,
            "pending_id": pending_id,
            "report": json.dumps(body, ensure_ascii=False),
            "error": None if error is None else encodable(error[:2000]),
        },
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
        **{k: report.get(k) or [] for k in REPORT_KEYS},
    }


def recent(db: Any, limit: int = 20) -> list[dict[str, Any]]:
    """The latest folds, newest first ([] on a journal from before ``memory_folds``)."""
    return [decode(r) for r in fold_rows.latest(db, limit)]


def consecutive_failures(db: Any) -> int:
    """Failed folds since the last one that reached the memory model and got a diff."""
    return fold_rows.trailing(db, FAILED)


def outcome_of(report: dict[str, Any], *, version: int | None, held_all: bool) -> str:
    """The one-word outcome of a fold from its report."""
    if held_all:
        return HELD
    if version is None:
        return HELD if report.get("held") else NOTHING
    return PARTLY if report.get("left_out") or report.get("held") else APPLIED


MAX_LEFT_OUT = 50


def bounded(left_out: list[dict[str, str]], limit: int = MAX_LEFT_OUT) -> list[dict[str, str]]:
    """The first ``limit`` left-out items and one line for the rest, so a flood of bad
    items (10,000 facts in one reply) does not flood the journal too."""
    if len(left_out) <= limit:
        return left_out
    rest = left_out[limit:]
    reasons = sorted({x.get("reason", "") for x in rest})
    return [
        *left_out[:limit],
        {
            "item": f"{len(rest)} more",
            "reason": f"{len(rest)} more of {len(left_out)} left out: " + "; ".join(reasons[:3]),
            "value": "",
        },
    ]


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


def last(db: Any) -> dict[str, Any] | None:
    """The newest fold's record; for folds journaled before ``memory_folds`` existed, only
    when the last one ran (a fold that changed nothing counts too)."""
    found = recent(db, 1)
    if found:
        return found[0]
    marks = [queue_rows.last_folded_at(db), ledger_rows.last_version_at(db, ("fold", "approve"))]
    at = max((m for m in marks if m), default=None)
    return {"at": at} if at else None


def waiting_line(rows: list[dict[str, Any]]) -> str:
    """``status``'s line when the last fold gave way to a user's turn on its server."""
    if not rows:
        return "no"
    return (
        f"{len(rows)} queued fold(s) gave way to your turn on the model server; they run "
        "when it ends"
    )
