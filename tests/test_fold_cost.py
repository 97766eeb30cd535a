"""What one fold costs the journal and memory.json (issue 38): at most two journal
transactions (the claim, and the commit of the change, its events, version, the fold's
record and the queue row's end together) and one read of memory.json, counted on the real
files: every ``BEGIN`` SQLite sees, and every read of the file."""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deerflow_nb import Memory
from deerflow_nb.memory.store import MemoryStore

TALK = [
    {"role": "user", "content": "I prefer polars over pandas for data work."},
    {"role": "assistant", "content": "Noted."},
]


class Counted:
    """Journal transactions and memory.json reads while ``on``."""

    def __init__(self) -> None:
        self.on = False
        self.seen: Counter[str] = Counter()

    def statement(self, sql: str) -> None:
        if self.on and sql.lstrip().upper().startswith("BEGIN"):
            self.seen["transactions"] += 1


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counted]:
    count = Counted()
    connect, read = sqlite3.connect, MemoryStore.read

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(count.statement)
        return conn

    def reading(store: MemoryStore) -> dict[str, Any]:
        if count.on and store.path.name == "memory.json":
            count.seen["reads"] += 1
        return read(store)

    monkeypatch.setattr(sqlite3, "connect", traced)
    monkeypatch.setattr(MemoryStore, "read", reading)
    yield count


def fold_once(home: Path, counted: Counted, *, reopen: bool) -> tuple[Any, Counter[str]]:
    memory = Memory(home)
    for i in range(30):
        memory.add_fact(f"Knows topic number {i} about distributed systems")
    memory.add_messages("talk", TALK)
    if reopen:  # a kernel that opens the home and folds what an earlier one queued
        memory.close()
        memory = Memory(home)
    counted.on = True
    try:
        report = memory.flush()
    finally:
        counted.on = False
        memory.close()
    return report, counted.seen


@pytest.mark.parametrize("reopen", [False, True])
def test_a_fold_opens_two_transactions_and_reads_memory_json_once(
    home: Path, counted: Counted, reopen: bool
) -> None:
    report, seen = fold_once(home, counted, reopen=reopen)
    assert report.folded == ["talk"]
    assert seen["transactions"] <= 2, seen
    assert seen["reads"] <= 1, seen


def test_a_fold_held_for_review_or_failing_opens_two_transactions(
    home: Path, counted: Counted
) -> None:
    memory = Memory(home)
    memory.review.enabled = True
    memory.add_messages("talk", TALK)
    counted.on = True
    report = memory.flush()
    counted.on = False
    assert report.proposed == ["talk"] and counted.seen["transactions"] <= 2, counted.seen
    memory.review.enabled = False
    memory.close()

    (home / "config.yaml").write_text("memory:\n  model_name: no-such-model\n")
    memory = Memory(home)
    memory.add_messages("again", [{**TALK[0], "content": "I work on project Heron."}, TALK[1]])
    counted.seen.clear()
    counted.on = True
    report = memory.flush()
    counted.on = False
    memory.close()
    assert report.failed and counted.seen["transactions"] <= 2, counted.seen


def test_the_counts_see_every_transaction_and_read(home: Path, counted: Counted) -> None:
    """The check itself: a change outside a fold is counted too."""
    memory = Memory(home)
    counted.on = True
    memory.add_fact("Prefers polars")
    memory.store.read()
    counted.on = False
    memory.close()
    assert counted.seen["transactions"] >= 1 and counted.seen["reads"] >= 1
