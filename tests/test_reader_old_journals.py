"""Readers on old and crashed journals (issue 36, Files): every reader path — the read door,
``deerflow-nb status`` and ``export``, the inspector — on a journal stopped at any earlier
schema step either reads or says in one line to run ``deerflow-nb migrate``, wherever the
read is made; and reading beside the ``-wal``/``-shm`` a killed writer left changes no
byte, name or time of any file in the home, while still reading what the ``-wal`` holds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from deerflow_nb.cli import main as cli_main
from deerflow_nb.config import HomeError
from deerflow_nb.memory import MemoryReader, open_reader
from deerflow_nb.storage.db import connect
from deerflow_nb.storage.migrations import MIGRATIONS

ROOT = Path(__file__).resolve().parents[1]
STEPS = range(1, len(MIGRATIONS))  # a journal made by each earlier version

READS: dict[str, Callable[[MemoryReader], Any]] = {
    "migrations": lambda r: r.migrations(),
    "facts": lambda r: r.facts(),
    "status": lambda r: r.status(),
    "review": lambda r: r.review,
    "pending": lambda r: [r.review_items(c) for c in r.pending()],
    "pending_count": lambda r: r.pending_count(),
    "events": lambda r: r.events(),
    "event_rows": lambda r: r.event_rows(),
    "history": lambda r: r.history("fact_tea"),
    "lineage": lambda r: r.lineage("fact_tea"),
    "versions": lambda r: r.versions(),
    "version_sizes": lambda r: r.version_sizes(),
    "usage": lambda r: r.usage(),
    "eviction_order": lambda r: r.eviction_order(),
    "folds": lambda r: r.folds(),
    "consecutive_failures": lambda r: r.consecutive_failures(),
    "queue": lambda r: r.queue(),
    "last_fold": lambda r: r.last_fold(),
    "last_fold_version": lambda r: r.last_fold_version(),
    "threads": lambda r: r.threads(),
    "thread": lambda r: r.thread("t1"),
    "private_turn_ids": lambda r: r.private_turn_ids("t1"),
    "is_queued": lambda r: r.is_queued("t1"),
    "turns": lambda r: r.turns(),
    "summaries": lambda r: r.summaries(),
    "message_totals": lambda r: r.message_totals(),
    "message_rows": lambda r: r.message_rows("t1"),
    "turn_texts": lambda r: r.turn_texts("t1"),
    "recall": lambda r: r.recall("green tea", 5),
}


def old_home(home: Path, steps: int) -> None:
    """A home whose journal.db stopped at migration ``steps``, with a thread, a message and
    a memory.json, as that version left them."""
    db = connect(home / "journal.db")
    db["_migrations"].create({"name": str, "applied_at": str}, pk="name")
    for name, fn in MIGRATIONS[:steps]:
        fn(db)
        db["_migrations"].insert({"name": name, "applied_at": "2025-01-01T00:00:00Z"})
    at = "2025-01-01T00:00:00Z"
    db["threads"].insert({"id": "t1", "kind": "lead", "created_at": at, "updated_at": at})
    message = {"thread_id": "t1", "seq": 1, "role": "user", "content": "I like green tea"}
    db["messages"].insert({**message, "created_at": at})
    db.conn.close()
    fact = {"id": "fact_tea", "content": "Likes green tea", "category": "preference"}
    doc = {"version": "1.0", "facts": [{**fact, "confidence": 0.9, "createdAt": at}]}
    (home / "memory.json").write_text(json.dumps(doc), encoding="utf-8")


def says_migrate(message: str) -> bool:
    return "`deerflow-nb migrate`" in message and "\n" not in message.strip()


@pytest.mark.parametrize("steps", STEPS, ids=[MIGRATIONS[s - 1][0] for s in STEPS])
def test_every_read_of_an_older_journal_reads_or_says_to_migrate(
    home: Path, steps: int, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    old_home(home, steps)
    with open_reader(home) as reader:
        for name, read in READS.items():
            try:  # caught where the read is made, as a view or a page does
                read(reader)
            except HomeError as exc:
                assert says_migrate(str(exc)), (name, str(exc))
        assert [f["id"] for f in reader.facts()] == ["fact_tea"]  # memory.json always reads
    for argv in (["status"], ["status", "--json"], ["export", str(tmp_path / "out.json")]):
        code = cli_main([*argv, "--home", str(home)])
        out, err = capsys.readouterr()
        assert code == 0 or (code == 2 and says_migrate(err)), (argv, out, err)


@pytest.mark.parametrize("steps", STEPS, ids=[MIGRATIONS[s - 1][0] for s in STEPS])
def test_the_inspector_on_an_older_journal_shows_its_pages_or_one_line(
    home: Path, steps: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    old_home(home, steps)
    monkeypatch.setenv("DEERFLOW_NB_HOME", str(home))
    at = AppTest.from_file(str(ROOT / "inspector_app.py"), default_timeout=60)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    errors = [e.value.replace("\\", "") for e in at.error]
    assert all(says_migrate(e) for e in errors), errors
    assert any("Likes green tea" in str(df.value.values) for df in at.dataframe)


# -- beside a killed writer ------------------------------------------------------------
WRITER = textwrap.dedent(
    """
    import sys, time
    from deerflow_nb.memory import Memory
    mem = Memory(sys.argv[1])
    mem.add_fact("Prefers polars over pandas", "preference")
    mem.add_fact("Works on churn models", "context")
    print("written", flush=True)
    time.sleep(600)
    """
)


def files(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every file under ``folder``: its modification time, size and bytes, by name."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            info = path.stat()
            out[str(path.relative_to(folder))] = (info.st_mtime_ns, info.st_size, path.read_bytes())
    return out


def test_reading_beside_a_killed_writers_wal_changes_no_file(home: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(home)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "written\n"
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    assert (home / "journal.db-wal").exists() and (home / "journal.db-shm").exists()
    before = files(home)
    with open_reader(home) as reader:
        assert len(reader.versions()) == 2  # the versions are in the -wal, and read
        assert len(reader.events()) == 2
        assert reader.status()["fact_count"] == 2
    assert cli_main(["status", "--home", str(home)]) == 0
    assert files(home) == before
