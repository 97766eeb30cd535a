"""Storage failures stay one line and lose nothing (issue 26.10): a full disk or a lock
during a turn, numbers and nesting no parser holds in a model's reply, and imports of
devices, FIFOs and streams.

The full disk is a real tmpfs (the tests run as root and may mount; elsewhere they skip);
the lock is another process holding journal.db; the model is the loopback server over HTTP.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from loopback import ServerHandle

from deerflow_nb import Memory
from deerflow_nb.notebook.session import close_session, get_session

BIG_NUMBER = "1" + "0" * 4999
DEEP = "[" * 10_000 + "]" * 10_000


def one_line_error(shell: InteractiveShell, cell: str) -> str:
    """Run ``cell``; the one line IPython shows for its ``UsageError`` (no traceback)."""
    with capture_output() as cap:
        result = shell.run_cell(cell)
    assert isinstance(result.error_in_exec, UsageError), (cell, result.error_in_exec)
    shown = [ln for ln in (cap.stdout + cap.stderr).splitlines() if ln.strip()]
    assert len(shown) == 1 and "Traceback" not in shown[0], shown
    return shown[0]


# -- a full disk -----------------------------------------------------------------------
@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(path: Path) -> Path:
    """Fill the filesystem holding ``path``; returns the filler file."""
    filler = path / "filler"
    with filler.open("wb") as fh, contextlib.suppress(OSError):
        while True:
            fh.write(b"\0" * 65536)
            fh.flush()
    with contextlib.suppress(OSError), filler.open("ab") as fh:
        for _ in range(65536):
            fh.write(b"\0")
            fh.flush()
    return filler


def test_a_disk_full_before_the_session_starts_is_one_line_in_every_command(
    ipython: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite cannot create the journal's WAL index on a full disk and says "disk I/O
    error": that was a 14-frame traceback in every command, even ``%memory facts``."""
    with tmpfs(tmp_path / "full", "8m") as home:
        monkeypatch.setenv("DEERFLOW_NB_HOME", str(home))
        with Memory(home) as memory:
            memory.add_fact("Prefers polars over pandas")
        filler = fill(home)
        ipython.run_line_magic("load_ext", "deerflow_nb")
        try:
            for cell in ("%memory facts", '%memory add "Uses duckdb"', "%memory flush",
                         "%memory", "%%agent -t a\nI work on churn models."):  # fmt: skip
                line = one_line_error(ipython, cell)
                assert "no space left on the disk" in line and "free some space" in line, line
            filler.unlink()
            close_session(ipython)
            assert [f["content"] for f in get_session(ipython).memory.facts.list()] == [
                "Prefers polars over pandas"
            ]
        finally:
            ipython.run_line_magic("unload_ext", "deerflow_nb")
            close_session(ipython)


class FullDisk:
    """A file the disk fills up under: half of a write lands, then ENOSPC."""

    def __init__(self, fh: Any) -> None:
        self.fh = fh

    def write(self, data: Any) -> int:
        self.fh.write(data[: len(data) // 2])
        self.fh.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fh, name)

    def __enter__(self) -> FullDisk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.fh.close()


def test_an_export_on_a_full_disk_keeps_the_earlier_one(
    shell: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An export was written in place: a disk filling midway left a truncated file where
    the earlier export was (``--force``), or a part-file the next run called "exists"."""
    exports = tmp_path / "exports"
    exports.mkdir()
    earlier = exports / "memory.json"
    shell.run_cell('%memory add "Prefers polars over pandas"')
    shell.run_cell(f"%memory export {earlier}")
    kept = earlier.read_bytes()
    shell.run_cell('%memory add "Uses duckdb"')
    opened = Path.open

    def filling(path: Path, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        fh = opened(path, mode, *args, **kwargs)
        return FullDisk(fh) if path.parent == exports and "r" not in mode else fh

    with monkeypatch.context() as patched:
        patched.setattr(Path, "open", filling)
        for cell in (f"%memory export {earlier} --force", f"%memory export {exports / 'new.json'}"):
            line = one_line_error(shell, cell)
            assert "free some space on that disk, or export elsewhere" in line, line
    assert earlier.read_bytes() == kept
    assert [p.name for p in exports.iterdir()] == ["memory.json"]  # no part-file, no temp
    shell.run_cell(f"%memory export {exports / 'new.json'}")
    assert "Uses duckdb" in (exports / "new.json").read_text()


# -- a lock taken in the middle of a turn ----------------------------------------------------
LOCKING_CHILD = textwrap.dedent(
    """
    import sqlite3, sys, time
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    print("locked", flush=True)
    sys.stdin.readline()
    """
)


def test_a_lock_taken_mid_turn_keeps_the_reply_and_says_what_was_not_saved(
    shell: InteractiveShell, home: Path, model_server: ServerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    import deerflow_nb.storage.db as db_module

    monkeypatch.setattr(db_module, "BUSY_SECONDS", 0.5)
    reply = "Here is the churn summary you asked for."
    model_server.reply_next(reply)
    hold = model_server.hold_next()
    children: list[subprocess.Popen[str]] = []

    def lock_while_the_model_answers() -> None:
        hold.arrived.wait(30)
        child = subprocess.Popen(
            [sys.executable, "-c", LOCKING_CHILD, str(home / "journal.db")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        children.append(child)
        assert child.stdout is not None and child.stdout.readline().strip() == "locked"
        hold.release.set()

    locker = threading.Thread(target=lock_while_the_model_answers, daemon=True)
    locker.start()
    try:
        line = one_line_error(shell, "%%agent -t t --no-memory\nSummarize the churn table.")
    finally:
        locker.join(30)
        for child in children:
            child.communicate("done\n", timeout=30)
    assert "journal.db is locked by another program" in line
    assert "nothing was changed" not in line
    assert "the reply was not saved to the journal (your message was)" in line
    assert shell.user_ns["_agent"] == reply  # kept where the message says
    journal = get_session(shell).memory.journal
    assert [m["role"] for m in journal.messages("t")] == ["user"]  # exactly as said


# -- numbers and nesting no parser holds, in any model reply ---------------------------------
@pytest.mark.parametrize("bad", [f'{{"newFacts": [], "x": {BIG_NUMBER}}}', "{" + DEEP[:-1] + "}"])
def test_an_unholdable_fold_reply_is_one_line_on_every_retry(
    home: Path, model_server: ServerHandle, bad: str, caplog: pytest.LogCaptureFixture
) -> None:
    memory = Memory(home)
    memory.journal.ensure_thread("t")
    memory.journal.add_message("t", {"role": "user", "content": "I prefer polars."})
    memory.journal.add_message("t", {"role": "assistant", "content": "Noted."})
    for _ in range(2):
        model_server.reply_next(bad)
        memory.enqueue("t")
        with caplog.at_level(logging.WARNING):
            report = memory.flush()
        (error,) = report.failed.values()
        assert error.startswith("ExtractionError:") and "\n" not in error, error[:300]
        assert len(error) < 300
        assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
        caplog.clear()
    assert memory.facts.list() == []
    memory.close()


@pytest.mark.parametrize("bad", [f'{{"merges": [{BIG_NUMBER}]}}', "{" + DEEP[:-1] + "}"])
def test_an_unholdable_consolidation_reply_is_one_line(
    shell: InteractiveShell, model_server: ServerHandle, bad: str
) -> None:
    memory = get_session(shell).memory
    memory.add_fact("Prefers polars")
    memory.add_fact("Likes polars a lot")
    model_server.reply_next(bad)
    line = one_line_error(shell, "%memory consolidate")
    assert "the reply" in line and len(line) < 300, line[:300]
    assert len(memory.facts.list()) == 2


# -- imports of what is not a file ---------------------------------------------------------
IMPORTING_CHILD = textwrap.dedent(
    """
    import resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))  # a runaway read fails
    from deerflow_nb import Memory
    with Memory(sys.argv[1]) as memory:
        try:
            memory.import_(sys.argv[2])
        except ValueError as exc:
            print(exc)
    """
)


@pytest.mark.parametrize("kind", ["device", "fifo", "folder"])
def test_an_import_of_a_device_fifo_or_folder_is_refused_before_reading(
    home: Path, tmp_path: Path, kind: str
) -> None:
    """``/dev/zero`` reports size 0 and never ends (it passed the 20 MB check and was read
    until memory ran out); opening a FIFO waited for a writer forever. Each is refused in
    a child process whose memory and time are bounded, so a regression fails, not hangs."""
    source = {"device": Path("/dev/zero"), "fifo": tmp_path / "memory.json", "folder": tmp_path}
    if kind == "fifo":
        os.mkfifo(source[kind])
    done = subprocess.run(
        [sys.executable, "-c", IMPORTING_CHILD, str(home), str(source[kind])],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    shown = done.stdout.strip()
    assert done.returncode == 0 and "\n" not in shown, done.stderr[-2000:]
    assert shown.startswith(f"{source[kind]}: cannot import, it is "), shown
    assert ("a folder" if kind == "folder" else "not a regular file") in shown
