"""What a memory version is: every state of memory.json, as deltas between full snapshots.

A full snapshot per change made the journal grow by the whole memory on every edit (300
edits of a 28 KB memory added 10 MB). Now a version row holds either

- ``snapshot``: the whole memory.json as JSON text (the first version, every
  ``FULL_EVERY``-th one, and whole-memory replacements: import, reset, rollback), or
- ``delta``: JSON text saying what changed since the version before it (``base_id``):
  ``{"set": {key: value}, "unset": [key], "facts": {"put": [fact], "drop": [id],
  "order": [id]}}`` — top-level keys (the ``user`` and ``history`` sections whole) that
  changed, facts added or changed (whole), facts removed, and the facts' order when it is
  not the natural one (the previous order without the dropped facts, new ones appended).

Both are plain JSON text, so the table stays browsable with any SQLite tool. Reading a
version starts from the nearest full snapshot at or before it and applies the deltas
after it in order; rows written before deltas existed are all full snapshots.
"""

from __future__ import annotations

import json
from typing import Any

from ...storage import ledger as rows

FULL_EVERY = 50  # at most this many deltas between two full snapshots
FULL_REASONS = frozenset({"import", "reset", "rollback"})

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
    put = [f for i, f in zip(new_ids, new["facts"], strict=True) if old_by_id.get(i) != f]
    drop = [i for i in old_ids if i not in new_set]
    facts: dict[str, Any] = {}
    if put:
        facts["put"] = put
    if drop:
        facts["drop"] = drop
    if new_ids != _natural_order(old_ids, drop, put):
        facts["order"] = new_ids
    if facts:
        delta["facts"] = facts
    return delta


def _natural_order(old_ids: list[str], drop: list[str], put: list[dict[str, Any]]) -> list[str]:
    dropped = set(drop)
    kept = [i for i in old_ids if i not in dropped]
    known = set(kept)
    return kept + [f["id"] for f in put if f["id"] not in known]


def apply_delta(base: dict[str, Any], delta: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``delta`` applied, as a new document (``base`` is not changed)."""
    out = {k: v for k, v in base.items() if k not in delta.get("unset", ())}
    out.update(delta.get("set", {}))
    facts = delta.get("facts", {})
    base_facts = base.get("facts", [])
    if not facts:
        out["facts"] = list(base_facts)
        return out
    by_id = {f["id"]: f for f in base_facts}
    old_ids = [f["id"] for f in base_facts]
    put = facts.get("put", [])
    drop = facts.get("drop", [])
    for fact_id in drop:
        by_id.pop(fact_id, None)
    for fact in put:
        by_id[fact["id"]] = fact
    order = facts.get("order") or _natural_order(old_ids, drop, put)
    out["facts"] = [by_id[i] for i in order]
    return out


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


def read(db: Any, version: int) -> dict[str, Any]:
    """The memory.json recorded as ``version``; KeyError when there is no such version.

    Works on any connection to the journal (``sqlite_utils.Database`` or ``sqlite3``),
    read-only ones included.
    """
    if not rows.version_exists(db, version):
        raise KeyError(f"no memory version {version}")
    full = rows.full_snapshot_at_or_before(db, version)
    if full is None:
        raise KeyError(f"memory version {version} has no full snapshot before it")
    full_id, snapshot = full
    data = json.loads(snapshot)
    if full_id == version:
        return data
    for delta in rows.deltas_between(db, full_id, version):
        if delta is not None:
            data = apply_delta(data, json.loads(delta))
    return data
