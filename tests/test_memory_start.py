"""Opening memory is not starting it: a reader (the CLI, the inspector) runs no fold worker
and writes nothing; a kernel (the notebook session, ``Agent``) starts it."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from journal_rows import journal_turn, queue_rows

from deerflow_nb import Agent, Memory
from deerflow_nb.cli import main as cli_main
from deerflow_nb.inspector import actions
from deerflow_nb.memory.folding import worker
from deerflow_nb.notebook.session import close_session, get_session


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The homes whose fold worker something joined (``worker.join``), in order."""
    homes: list[Path] = []
    real = worker.join

    def join(folding: Any) -> worker.FoldWorker:
        homes.append(folding.settings.home)
        return real(folding)

    monkeypatch.setattr(worker, "join", join)
    return homes


@pytest.fixture
def queued_home(home: Path) -> Path:
    """A home with one fact and one thread queued for a fold that is due now."""
    (home / "config.yaml").write_text("memory:\n  debounce_seconds: 0\n")
    with Memory(home) as mem:
        mem.add_fact("Prefers polars over pandas", category="preference")
        journal_turn(mem, "t1", "I work on project Apollo.")
        assert mem.enqueue("t1")
    return home


def journal_dump(home: Path) -> list[str]:
    with sqlite3.connect(home / "journal.db") as conn:
        return list(conn.iterdump())


def worker_threads(home: Path) -> list[threading.Thread]:
    """The live fold workers of ``home`` (other tests' homes have their own)."""
    name = f"{worker.THREAD_NAME}:{home.resolve()}"
    return [t for t in threading.enumerate() if t.name == name]


def test_a_memory_opened_to_read_starts_no_worker_and_writes_nothing(
    queued_home: Path, started: list[Path]
) -> None:
    memory_file = queued_home / "memory.json"
    before = (memory_file.read_bytes(), memory_file.stat().st_mtime_ns, journal_dump(queued_home))
    reader = Memory(queued_home)
    assert reader.data["facts"][0]["content"] == "Prefers polars over pandas"
    assert reader.facts.list() and "polars" in reader.preview()
    status = reader.status()
    assert [row["thread_id"] for row in status["pending"]] == ["t1"]
    assert reader.versions() and reader.events() and reader.pending() == []
    assert reader.history.diff(reader.versions()[0]["id"])["added"] == []
    assert started == [] and worker_threads(queued_home) == []
    assert queue_rows(reader) and len(reader.data["facts"]) == 1  # due, yet nobody folds it
    reader.close()
    after = (memory_file.read_bytes(), memory_file.stat().st_mtime_ns, journal_dump(queued_home))
    assert after == before


def test_flush_folds_in_the_callers_thread_without_a_worker(
    queued_home: Path, started: list[Path]
) -> None:
    with Memory(queued_home) as mem:
        assert mem.flush().folded == ["t1"]
        assert "Works on project Apollo" in [f["content"] for f in mem.data["facts"]]
    assert started == [] and worker_threads(queued_home) == []


def test_the_cli_and_the_inspector_never_start_the_worker(
    queued_home: Path, started: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["status", "--json", "--home", str(queued_home)]) == 0
    assert json.loads(capsys.readouterr().out)["pending"][0]["thread_id"] == "t1"
    fact = Memory(queued_home).data["facts"][0]
    actions.edit_fact(queued_home, fact["id"], confidence=0.8)  # a write, through Memory
    assert actions.forget_fact(queued_home, fact["id"])["id"] == fact["id"]
    assert started == [] and worker_threads(queued_home) == []
    with Memory(queued_home) as mem:
        assert [r["thread_id"] for r in queue_rows(mem)] == ["t1"]  # still waiting


def test_start_joins_the_worker_once_and_close_leaves_it(
    queued_home: Path, started: list[Path]
) -> None:
    mem = Memory(queued_home)
    assert mem.start() is mem and mem.start() is mem  # idempotent
    assert started == [queued_home] and len(worker_threads(queued_home)) == 1
    mem.close()
    assert worker_threads(queued_home) == []


def test_an_agent_starts_its_memory(queued_home: Path, started: list[Path]) -> None:
    agent = Agent(queued_home, model="offline")
    assert started == []  # memory opens on first use
    agent.run("Hello there.", thread="t2")
    assert started == [queued_home] and len(worker_threads(queued_home)) == 1
    agent.close()
    assert worker_threads(queued_home) == []


def test_the_notebook_session_starts_its_memory(
    queued_home: Path, started: list[Path], ipython: InteractiveShell
) -> None:
    try:
        assert get_session(ipython).memory.threads.worker is not None
        assert started == [queued_home] and len(worker_threads(queued_home)) == 1
    finally:
        close_session(ipython)
    assert worker_threads(queued_home) == []
