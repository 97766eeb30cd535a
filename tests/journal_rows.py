"""A test home's files: read the way an outside tool would (plain json and sqlite3),
DeerFlow-written memory.json documents to import, and journaled turns to fold."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from deerflow_nb import Memory


def journal_turn(
    mem: Memory, thread: str, user: str, reply: str = "Noted.", kind: str = "lead"
) -> None:
    """A user message and its reply in ``thread``'s journal, as a finished turn leaves them."""
    mem.journal.ensure_thread(thread, kind=kind)
    mem.journal.add_message(thread, {"role": "user", "content": user})
    mem.journal.add_message(thread, {"role": "assistant", "content": reply})


def queue_rows(mem: Memory) -> list[dict[str, Any]]:
    """The pending folds, snapshots included, soonest due first."""
    return list(mem.journal.db["memory_queue"].rows_where(order_by="due_at"))


def memory_json(home: Path) -> dict[str, Any]:
    return json.loads((home / "memory.json").read_text(encoding="utf-8"))


def events(home: Path) -> list[dict[str, Any]]:
    """Every memory_events row, oldest first."""
    with sqlite3.connect(home / "journal.db") as conn:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute("SELECT * FROM memory_events ORDER BY id")]


USER_SECTIONS = ("workContext", "personalContext", "topOfMind")
HISTORY_SECTIONS = ("recentMonths", "earlierContext", "longTermBackground")


def deerflow_memory(
    facts: list[dict[str, Any]], last_updated: str, **summaries: tuple[str, str]
) -> dict[str, Any]:
    """A memory.json exactly as DeerFlow writes it; ``summaries`` maps a section name to
    its ``(summary, updatedAt)``, every other section is empty."""

    def section(name: str) -> dict[str, str]:
        summary, updated = summaries.get(name, ("", ""))
        return {"summary": summary, "updatedAt": updated}

    return {
        "version": "1.0",
        "lastUpdated": last_updated,
        "user": {name: section(name) for name in USER_SECTIONS},
        "history": {name: section(name) for name in HISTORY_SECTIONS},
        "facts": facts,
    }
