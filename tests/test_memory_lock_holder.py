"""A kernel stopped (SIGSTOP: a paused VM, a debugger, a suspended laptop) while it holds
memory.json's lock mid-commit: every other writer says so in one line naming the lock file
and the fix within ``store.LOCK_SECONDS`` (lowered here), instead of waiting forever. The
holder is a real second process; the fold worker logs that line and keeps the row queued.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell
from journal_rows import journal_turn
from magic_lines import usage_error

from deerflow_nb.cli import main as cli
from deerflow_nb.config import HomeError
from deerflow_nb.memory import Memory
from deerflow_nb.memory import store as memory_store

ROOT = Path(__file__).resolve().parents[1]
LOCK = 0.5  # seconds: the test's lock wait (10 s in use)
BOUND = 30.0  # generous: a write beside a stopped holder ends well within this

pytestmark = pytest.mark.timeout(120)  # without the fix each write here waits forever

HOLDER = """
import os, signal
from deerflow_nb import Memory
mem = Memory()
with mem.store.locked():  # mid-commit: the lock is held ...
    print("holding", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)  # ... and the process is stopped
"""


@pytest.fixture
def stopped_holder(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[subprocess.Popen[str]]:
    """A home with one fact, whose memory.json lock a stopped second process holds."""
    (home / "config.yaml").write_text("memory:\n  debounce_seconds: 0\n", encoding="utf-8")
    seed = Memory(home)
    seed.facts.add("Seed fact about polars")
    seed.close()
    monkeypatch.setattr(memory_store, "LOCK_SECONDS", LOCK)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "holding"
        yield holder
    finally:
        release(holder)


def release(holder: subprocess.Popen[str]) -> None:
    """Wake the holder and kill it (its lock goes with it)."""
    if holder.poll() is None:
        holder.send_signal(signal.SIGCONT)
        holder.kill()
    holder.wait()


def said_in_one_line(error: BaseException | str, home: Path) -> None:
    text = str(error)
    assert "\n" not in text
    assert str(home / "memory.json.lock") in text
    assert "restart the kernel or command that holds it" in text
    assert "nothing was changed" in text


def test_writes_beside_a_stopped_lock_holder_are_one_line_and_change_nothing(
    home: Path, stopped_holder: subprocess.Popen[str], tmp_path: Path
) -> None:
    mem = Memory(home)
    try:
        exported = mem.reader.export(tmp_path / "export.json")
        writes = {
            "facts.add": lambda: mem.facts.add("A second fact"),
            "rollback": lambda: mem.rollback(1),
            "import": lambda: mem.import_(exported),
        }
        for name, write in writes.items():
            started = time.monotonic()
            with pytest.raises(HomeError) as caught:
                write()
            assert time.monotonic() - started < BOUND, name
            said_in_one_line(caught.value, home)
        release(stopped_holder)  # the holder gone, its lock is free: writes go through
        assert [f["content"] for f in mem.data["facts"]] == ["Seed fact about polars"]
        mem.facts.add("A second fact")
        assert len(mem.data["facts"]) == 2
    finally:
        release(stopped_holder)  # first: a writer still waiting on the lock then ends
        mem.close()


def test_the_notebook_says_a_stopped_lock_holder_in_one_line(
    home: Path, stopped_holder: subprocess.Popen[str], shell: InteractiveShell
) -> None:
    started = time.monotonic()
    line = usage_error(shell, "add I prefer polars over pandas")
    assert time.monotonic() - started < BOUND
    said_in_one_line(line, home)


def test_the_cli_says_a_stopped_lock_holder_in_one_line(
    home: Path, stopped_holder: subprocess.Popen[str], capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    assert cli(["fold", "--rebuild"]) == 2
    assert time.monotonic() - started < BOUND
    err = capsys.readouterr().err.strip()
    assert err.startswith("deerflow-nb: ")
    said_in_one_line(err, home)


def test_the_worker_beside_a_stopped_lock_holder_logs_one_line_and_keeps_the_row(
    home: Path,
    stopped_holder: subprocess.Popen[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    mem = Memory(home)
    try:
        journal_turn(mem, "t", "I prefer polars over pandas.")
        mem.enqueue("t")
        mem.start()  # the background worker folds it now (no debounce)
        started = time.monotonic()
        while not (rows := mem.status()["pending"]) or not rows[0].get("last_error"):
            assert time.monotonic() - started < BOUND, "the worker never gave up the lock"
            time.sleep(0.1)
        (row,) = rows
        # still queued, as due as before, no attempt spent: the fold did not fail
        assert row["thread_id"] == "t" and row["status"] == "pending" and row["attempts"] == 0
        said_in_one_line(row["last_error"], home)
        (warning,) = [r for r in caplog.records if "memory.json.lock" in r.getMessage()]
        assert warning.levelno == logging.WARNING and warning.exc_info is None
        said_in_one_line(warning.getMessage(), home)

        release(stopped_holder)
        assert mem.flush().folded == ["t"]  # the kept row folds once the lock is free
        assert "Prefers polars over pandas" in [f["content"] for f in mem.data["facts"]]
    finally:
        release(stopped_holder)  # first: a writer still waiting on the lock then ends
        mem.close()
