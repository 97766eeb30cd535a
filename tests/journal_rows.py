"""Reading a test home's files the way an outside tool would: plain json and sqlite3."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any


def memory_json(home: Path) -> dict[str, Any]:
    return json.loads((home / "memory.json").read_text(encoding="utf-8"))


def events(home: Path) -> list[dict[str, Any]]:
    """Every memory_events row, oldest first."""
    with sqlite3.connect(home / "journal.db") as conn:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute("SELECT * FROM memory_events ORDER BY id")]
