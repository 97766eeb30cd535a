"""What every fold did, journaled in ``memory_folds`` (one row per fold, failed ones too).

A row holds the outcome (``applied``, ``partly applied``, ``held for review``, ``nothing to
keep``, ``failed``) and a JSON report: the fact ids added, reinforced, removed and evicted,
the sections rewritten, the items left out with their reasons, and what waits for review.
``storage/folds.py`` writes and reads the rows; reading them back is the read side's
(``readside/fold_records.py``), so read-only views (the inspector) need nothing of this module.
"""

from __future__ import annotations

import json
from typing import Any

from ...scrub import encodable, encodable_deep
from ...storage import folds as fold_rows
from ...storage.db import now_iso
from ..readside.fold_records import APPLIED, HELD, NOTHING, PARTLY, REPORT_KEYS


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


def waiting_line(rows: list[dict[str, Any]]) -> str:
    """``status``'s line when the last fold gave way to a user's turn on its server."""
    if not rows:
        return "no"
    return (
        f"{len(rows)} queued fold(s) gave way to your turn on the model server; they run "
        "when it ends"
    )
