"""What a memory version is: every state of memory.json, as deltas between full snapshots.

A full snapshot per change made the journal grow by the whole memory on every edit (300
edits of a 28 KB memory added 10 MB). Now a version row holds either

- ``snapshot``: the whole memory.json as JSON text (the first version, every
  ``FULL_EVERY``-th one, whole-memory replacements: import, reset, rollback, and a hand
  edit of memory.json kept before one), or
- ``delta``: JSON text saying what changed since the version before it (``base_id``):
  ``{"set": {key: value}, "unset": [key], "facts": {"put": [fact], "drop": [id],
  "order": [id]}}`` — top-level keys (the ``user`` and ``history`` sections whole) that
  changed, facts added or changed (whole), facts removed, and the facts' order when it is
  not the natural one (the previous order without the dropped facts, new ones appended).

Both are plain JSON text, so the table stays browsable with any SQLite tool. Reading a
version starts from the nearest full snapshot at or before it and applies the deltas
after it in order (``readside/version_rebuild.py``); rows written before deltas existed are
all full snapshots.
"""

from __future__ import annotations

import json
from typing import Any

from ...storage import ledger as rows
from ..readside.version_rebuild import natural_order, read

FULL_EVERY = 50  # at most this many deltas between two full snapshots
HAND_EDIT = "hand edit"  # memory.json edited by hand, kept before a whole replacement
FULL_REASONS = frozenset({"import", "reset", "rollback", HAND_EDIT})

_dumps = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode


def dumps(data: Any) -> str:
    """Compact JSON text as stored in the journal; ValueError for NaN or infinity."""
    return _dumps(data)


def _fact_ids(data: dict[str, Any]) -> list[str] | None:
    """The facts' ids, or None when they cannot key a delta (missing or repeated)."""
    facts = data.get("facts")
    if not isinstance(facts, list):
        return None
    try:
        ids = [f["id"] for f in facts]
    except (TypeError, KeyError, IndexError):  # a fact that is no dict, or has no id
        return None
    if not set(map(type, ids)) <= {str} or len(set(ids)) != len(ids):
        return None
    return ids


def make_delta(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any] | None:
    """What turns ``old`` into ``new``; None when it cannot be said as a delta."""
    old_ids, new_ids = _fact_ids(old), _fact_ids(new)
    if old_ids is None or new_ids is None:
        return None
    delta: dict[str, Any] = {}
    changed = {k: v for k, v in new.items() if k != "facts" and (k not in old or old[k] != v)}
    if changed:
        delta["set"] = changed
    gone = [k for k in old if k != "facts" and k not in new]
    if gone:
        delta["unset"] = gone
    old_by_id = dict(zip(old_ids, old["facts"], strict=True))
    new_set = set(new_ids)
    put = [
        f
        for i, f in zip(new_ids, new["facts"], strict=True)
        if (was := old_by_id.get(i)) is not f and was != f  # a change keeps an unchanged fact
    ]
    drop = [i for i in old_ids if i not in new_set]
    facts: dict[str, Any] = {}
    if put:
        facts["put"] = put
    if drop:
        facts["drop"] = drop
    if new_ids != natural_order(old_ids, drop, put):
        facts["order"] = new_ids
    if facts:
        delta["facts"] = facts
    return delta


def record(
    db: Any,
    data: dict[str, Any],
    *,
    reason: str,
    source: str,
    created_at: str,
    previous: tuple[int, dict[str, Any]] | None = None,
) -> int:
    """Inside a journal transaction: add the version holding ``data`` and return its id
    (``written`` at once: the ledger's temp file, not this row, tells a change a crash cut
    short before its rename, ``write_protocol.py``). ``previous`` is the newest version's
    id and document when the caller knows them (it saves rebuilding that version)."""
    newest = rows.newest_version(db)
    row: dict[str, Any] = {
        "created_at": created_at,
        "reason": reason,
        "source": source,
        "fact_count": len(data.get("facts", [])),
        "written": 1,
    }
    delta = None
    if (
        newest is not None
        and reason not in FULL_REASONS
        and rows.deltas_since_full(db) < FULL_EVERY
    ):
        base = previous[1] if previous is not None and previous[0] == newest else None
        if base is None:
            base = read(db, newest)
        delta = make_delta(base, data)
    if delta is None:
        row["snapshot"] = dumps(data)
    else:
        row["delta"] = dumps(delta)
        row["base_id"] = newest
    return rows.insert_version(db, row)
