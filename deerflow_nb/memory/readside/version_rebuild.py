"""A memory version read back: its document rebuilt from the nearest full snapshot at or
before it and the deltas after it, in order (``updates/versions.py`` says how versions are
stored and writes them).
"""

from __future__ import annotations

import json
from typing import Any

from ...storage import ledger as rows


def natural_order(old_ids: list[str], drop: list[str], put: list[dict[str, Any]]) -> list[str]:
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
    order = facts.get("order") or natural_order(old_ids, drop, put)
    out["facts"] = [by_id[i] for i in order]
    return out


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
