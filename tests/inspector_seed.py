"""A home with something in every corner, written the way the package writes it.

Facts, events and versions come from the real ``Memory`` API (add, fold diffs, a
reinforcement, an edit, a forget); threads, a sub-agent, turns and a summary from the
real ``Journal``; the failed fold from the queue's own ``upsert``/``fail``. Shared by
the AppTest and browser tests of the inspector.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deerflow_nb.config import load_settings
from deerflow_nb.journal import Journal
from deerflow_nb.memory import Memory
from deerflow_nb.memory import queue as memory_queue

POLARS = "Prefers polars over pandas for dataframes"
CHURN = "Works on a churn model for a telecom client"
MATPLOTLIB = "Uses matplotlib for every plot"
RUST = "Wants to learn Rust this year"


def _turn(journal: Journal, thread: str, user: str, reply: str, tokens: tuple[int, int]) -> None:
    turn = journal.start_turn(thread, "offline")
    journal.add_message(thread, {"role": "user", "content": user}, turn_id=turn)
    journal.add_message(thread, {"role": "assistant", "content": reply}, turn_id=turn)
    journal.end_turn(
        turn, status="ok", input_tokens=tokens[0], output_tokens=tokens[1], facts_injected=2
    )


def quiet_memory(home: Path) -> Memory:
    """The home's Memory without a queue worker: nothing folds behind the test's back."""
    settings = load_settings(home)
    settings.memory.enabled = False
    return Memory(home, settings=settings)


def seed_home(home: Path) -> dict[str, Any]:
    """Fill ``home``; returns the ids the tests look for."""
    mem = quiet_memory(home)
    try:
        polars = mem.add_fact(POLARS, category="preference", confidence=0.9)
        churn = mem.add_fact(CHURN, category="context", confidence=0.85)
        report = mem.apply(
            {
                "user": {
                    "workContext": {
                        "summary": "Data scientist at a telecom company",
                        "shouldUpdate": True,
                    }
                },
                "newFacts": [
                    {"content": MATPLOTLIB, "category": "knowledge", "confidence": 0.8},
                    {"content": RUST, "category": "goal", "confidence": 0.75},
                ],
            },
            source="thread-sales",
        )
        matplotlib, rust = report.added
        mem.apply(
            {"newFacts": [{"content": POLARS, "category": "preference", "confidence": 0.9}]},
            source="thread-sales",
        )
        mem.edit_fact(churn["id"], confidence=0.95)
        mem.forget(matplotlib)
        versions = [v["id"] for v in mem.versions()]
    finally:
        mem.close()

    journal = Journal(home / "journal.db")
    try:
        journal.ensure_thread("thread-sales", title="Sales analysis", model="offline")
        _turn(journal, "thread-sales", "I prefer polars over pandas.", "Noted.", (420, 96))
        _turn(journal, "thread-sales", "Plot monthly sales.", "Here is the plot.", (610, 150))
        journal.ensure_thread(
            "thread-sales-sub",
            kind="subagent",
            parent_id="thread-sales",
            title="Research: plotting libraries",
            model="offline",
        )
        _turn(journal, "thread-sales-sub", "Compare plotting libraries.", "Altair.", (200, 40))
        journal.add_summary(
            "thread-sales", 2, "The user analyses sales data with polars.", model="offline"
        )
        journal.ensure_thread("thread-notes", title="Reading notes", model="offline")
        _turn(journal, "thread-notes", "I want to learn Rust.", "Good plan.", (300, 50))
        snapshot = journal.messages("thread-notes")
        with journal.transaction() as db:
            memory_queue.upsert(db, "thread-notes", snapshot, len(snapshot), 3600.0)
        row = journal.db["memory_queue"].get("thread-notes")
        memory_queue.fail(journal, row, "ModelError: the model server did not answer")
    finally:
        journal.close()
    return {
        "polars": polars["id"],
        "churn": churn["id"],
        "matplotlib": matplotlib,
        "rust": rust,
        "versions": versions,
    }
