"""Storage edge cases (issue 17.9), each a one-line error naming the fix, nothing lost.

Numbers JSON or Python cannot hold, deep nesting, a locked journal, a read-only home and
a full disk (a real tmpfs when the tests run as root and may mount), a symlinked
memory.json, what a kill -9 leaves behind, the journal's growth per change, and the
import size limit.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deerflow_nb import Memory
from deerflow_nb.config import HomeError
from deerflow_nb.memory import MemoryFileError
from deerflow_nb.memory.readside.version_rebuild import apply_delta
from deerflow_nb.memory.store import MemoryStore, empty_memory
from deerflow_nb.memory.updates import versions
from deerflow_nb.memory.updates.transfer import MAX_IMPORT_BYTES

FACT = '{{"id": "f1", "content": "Likes tea", "category": "preference", "confidence": {}}}'


def document(confidence: str) -> str:
    return '{"version": "1.0", "facts": [' + FACT.format(confidence) + "]}"


BAD_DOCUMENTS = {
    "huge float": document("1e400"),
    "5000 digits": document("1" + "0" * 4999),
    "Infinity": document("Infinity"),
    "NaN": document("NaN"),
    "deep nesting": "[" * 100_000 + "]" * 100_000,
}


def one_line(error: BaseException) -> str:
    message = str(error)
    assert message and "\n" not in message and "Traceback" not in message
    return message


# -- numbers and nesting -----------------------------------------------------------------
@pytest.mark.parametrize("name", list(BAD_DOCUMENTS))
def test_a_memory_json_that_cannot_be_held_is_kept_aside_and_never_overwritten(
    home: Path, name: str
) -> None:
    raw = BAD_DOCUMENTS[name]
    (home / "memory.json").write_text(raw, encoding="utf-8")
    memory = Memory(home)
    with pytest.raises(MemoryFileError) as info:
        memory.data  # noqa: B018
    message = one_line(info.value)
    assert "rollback" in message and "kept as memory.json.corrupt-" in message
    (aside,) = home.glob("memory.json.corrupt-*")
    assert aside.read_text(encoding="utf-8") == raw
    with pytest.raises(MemoryFileError):
        memory.add_fact("Prefers polars")
    assert (home / "memory.json").read_text(encoding="utf-8") == raw  # not overwritten
    memory.close()


@pytest.mark.parametrize("name", list(BAD_DOCUMENTS))
def test_an_import_that_cannot_be_held_is_a_one_line_error(
    home: Path, tmp_path: Path, name: str
) -> None:
    source = tmp_path / "import.json"
    source.write_text(BAD_DOCUMENTS[name], encoding="utf-8")
    with Memory(home) as memory:
        memory.add_fact("Prefers polars")
        with pytest.raises(ValueError) as info:
            memory.import_(source)
        assert one_line(info.value).startswith(f"{source}: cannot import")
        assert [f["content"] for f in memory.facts.list()] == ["Prefers polars"]


def test_memory_json_is_never_written_with_a_number_json_cannot_hold(home: Path) -> None:
    store = MemoryStore(home / "memory.json")
    data = empty_memory()
    data["facts"] = [{"id": "f1", "content": "x", "confidence": float("inf")}]
    with store.locked(), pytest.raises(ValueError, match="NaN and infinity are not JSON"):
        store.write(data)
    assert not (home / "memory.json").exists()
    assert not list(home.glob("memory.json.*.tmp"))


def test_an_import_over_the_size_limit_is_refused_before_reading(
    home: Path, tmp_path: Path
) -> None:
    source = tmp_path / "huge.json"
    with source.open("wb") as fh:  # sparse: the size is all that is checked
        fh.truncate(MAX_IMPORT_BYTES + 1)
    with Memory(home) as memory, pytest.raises(ValueError) as info:
        memory.import_(source)
    message = one_line(info.value)
    assert "at most 20 MB" in message


# -- a locked journal ----------------------------------------------------------------------
LOCKING_CHILD = textwrap.dedent(
    """
    import sqlite3, sys, time
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    print("locked", flush=True)
    time.sleep(60)
    """
)


@contextlib.contextmanager
def journal_locked_by_another_process(path: Path) -> Iterator[None]:
    child = subprocess.Popen(
        [sys.executable, "-c", LOCKING_CHILD, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "locked"
        yield
    finally:
        child.kill()
        child.wait()


def test_a_locked_journal_is_a_one_line_error_and_changes_nothing(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import deerflow_nb.storage.db as db_module

    monkeypatch.setattr(db_module, "BUSY_SECONDS", 0.5)
    memory = Memory(home)
    memory.add_fact("Prefers polars")
    before = (home / "memory.json").read_bytes()
    with journal_locked_by_another_process(home / "journal.db"):
        started = time.monotonic()
        with pytest.raises(HomeError) as info:
            memory.add_fact("Uses scikit-learn")
        assert time.monotonic() - started < 10
        message = one_line(info.value)
        assert "journal.db is locked by another program" in message
        assert "nothing was changed" in message
        assert (home / "memory.json").read_bytes() == before
        assert not list(home.glob("memory.json.*.tmp"))
    assert [f["content"] for f in memory.facts.list()] == ["Prefers polars"]
    memory.add_fact("Uses scikit-learn")  # the lock gone, it works
    assert len(memory.facts.list()) == 2
    memory.close()


# -- real filesystems: read-only and full ---------------------------------------------------
@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_a_read_only_home_is_a_one_line_error(home: Path, tmp_path: Path) -> None:
    with Memory(home) as memory:
        memory.add_fact("Prefers polars")
    view = tmp_path / "ro"
    view.mkdir()
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root (root also ignores file modes)")
    bound = subprocess.run(["mount", "--bind", str(home), str(view)], capture_output=True)
    if bound.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {bound.stderr.decode().strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], check=True)
        started = time.monotonic()
        with pytest.raises(HomeError) as info:
            Memory(view)
        assert time.monotonic() - started < 10
        message = one_line(info.value)
        assert "read-only" in message or "cannot open" in message
        assert "DEERFLOW_NB_HOME" in message
    finally:
        subprocess.run(["umount", "-l", str(view)], check=False)


def fill(path: Path) -> Path:
    """Fill the filesystem holding ``path``; returns the filler file."""
    filler = path / "filler"
    with filler.open("wb") as fh, contextlib.suppress(OSError):
        while True:
            fh.write(b"\0" * 65536)
            fh.flush()
    with contextlib.suppress(OSError), filler.open("ab") as fh:  # the last block, bytewise
        for _ in range(65536):
            fh.write(b"\0")
            fh.flush()
    return filler


def test_a_full_disk_is_a_one_line_error_and_the_change_never_comes_back(
    tmp_path: Path,
) -> None:
    with tmpfs(tmp_path / "full", "8m") as home:
        memory = Memory(home)
        for i in range(90):  # about 40 KB of memory.json
            memory.add_fact(f"Knows topic number {i:03d} about distributed systems " * 6)
        before = memory.data
        versions_before = len(memory.versions())
        filler = fill(home)
        with pytest.raises(HomeError) as info:
            memory.add_fact("Prefers polars over pandas")
        message = one_line(info.value)
        assert "no space left" in message and "nothing was changed" in message
        assert memory.data == before
        memory.close()

        filler.unlink()  # space again: the failed change is not rolled forward
        with Memory(home) as memory:
            assert memory.data == before
            assert len(memory.versions()) == versions_before
            assert memory._ledger.unwritten() is None
            assert not list(home.glob("memory.json.*.tmp"))
            memory.add_fact("Prefers polars over pandas")
            assert len(memory.facts.list()) == 91


def test_a_file_write_that_fails_is_not_rolled_forward_later(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC at the OS boundary (fsync reports it on NFS and thin volumes) while the new
    file is written: nothing is journaled, so no later load applies the change. (Without
    root, the tmpfs test above is skipped; this one still runs.)"""
    memory = Memory(home)
    memory.add_fact("Prefers polars")

    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(os, "fsync", no_space)
        with pytest.raises(HomeError, match="no space left"):
            memory.add_fact("Uses scikit-learn")
    assert not list(home.glob("memory.json.*.tmp"))
    memory.close()
    with Memory(home) as again:
        assert [f["content"] for f in again.facts.list()] == ["Prefers polars"]
        assert [v["reason"] for v in again.versions()] == ["add"]


# -- symlinks and what a kill -9 leaves ------------------------------------------------------
def test_a_symlinked_memory_json_is_written_through(home: Path, tmp_path: Path) -> None:
    real = tmp_path / "dotfiles" / "memory.json"
    real.parent.mkdir()
    real.write_text(json.dumps(empty_memory()), encoding="utf-8")
    (home / "memory.json").symlink_to(real)
    with Memory(home) as memory:
        memory.add_fact("Prefers polars")
        memory.add_fact("Uses scikit-learn")
    assert (home / "memory.json").is_symlink()
    assert os.readlink(home / "memory.json") == str(real)
    facts = json.loads(real.read_text(encoding="utf-8"))["facts"]
    assert [f["content"] for f in facts] == ["Prefers polars", "Uses scikit-learn"]
    assert not list(real.parent.glob("*.tmp")) and not list(home.glob("*.tmp"))


DYING_MID_TURN_CHILD = textwrap.dedent(
    """
    import sys, time
    from deerflow_nb import Memory

    mem = Memory()
    mem.journal.ensure_thread("t")
    mem.journal.start_turn("t", "offline")
    if sys.argv[1:] == ["dying"]:
        with mem.store.locked():
            mem.store.prepare({"facts": []})  # a temp file a killed writer leaves
    print("ready", flush=True)
    time.sleep(60)
    """
)


def test_what_a_kill_9_leaves_is_cleaned_up_on_load(home: Path) -> None:
    env = {**os.environ, "DEERFLOW_NB_HOME": str(home)}
    live = subprocess.Popen(
        [sys.executable, "-c", DYING_MID_TURN_CHILD], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert live.stdout is not None and live.stdout.readline().strip() == "ready"
        dead = subprocess.Popen(
            [sys.executable, "-c", DYING_MID_TURN_CHILD, "dying"],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert dead.stdout is not None and dead.stdout.readline().strip() == "ready"
        dead.kill()
        dead.wait()
        assert len(list(home.glob("memory.json.*.tmp"))) == 1
        with Memory(home).start() as memory:  # loaded as a kernel loads it
            statuses = sorted(t["status"] for t in memory.journal.turns("t"))
            assert statuses == ["interrupted", "running"]  # the live kernel's is left alone
            (gone,) = [t for t in memory.journal.turns("t") if t["status"] == "interrupted"]
            assert gone["ended_at"] and "stopped" in gone["error"]
            assert not list(home.glob("memory.json.*.tmp"))
    finally:
        live.kill()
        live.wait()
    with Memory(home).start() as memory:  # once that kernel is gone too
        assert {t["status"] for t in memory.journal.turns("t")} == {"interrupted"}


# -- the journal's growth ------------------------------------------------------------------------
def journal_bytes(home: Path) -> int:
    """The journal's size with its write-ahead log checkpointed into it."""
    with sqlite3.connect(home / "journal.db") as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return (home / "journal.db").stat().st_size


def test_300_edits_of_a_28_kb_memory_grow_the_journal_little_and_every_version_reads_back(
    home: Path,
) -> None:
    memory = Memory(home)
    words = [
        "tea",
        "polars",
        "pandas",
        "churn",
        "telecom",
        "model",
        "sklearn",
        "notebook",
        "python",
        "data",
    ]
    rng = random.Random(7)
    facts = [
        {
            "id": f"fact_{i:04d}",
            "content": " ".join(rng.choice(words) for _ in range(20)) + f" #{i}",
            "category": "knowledge",
            "confidence": 0.8,
            "createdAt": "2026-01-01T00:00:00Z",
            "source": "seed",
        }
        for i in range(100)
    ]
    seed = tmp = home.parent / "seed.json"
    tmp.write_text(json.dumps({**empty_memory(), "facts": facts}), encoding="utf-8")
    memory.import_(seed)
    assert 25_000 < (home / "memory.json").stat().st_size < 40_000
    start = journal_bytes(home)
    expected = {memory.versions()[-1]["id"]: memory.data}
    for i in range(300):
        fact = rng.choice(memory.facts.list(sort="none"))
        memory.facts.edit(fact["id"], f"Edited fact {i} " + fact["content"][:60])
        if i % 37 == 0:
            memory.forget(memory.facts.list()[0]["id"])
        expected[memory.versions()[-1]["id"]] = memory.data
    grown = journal_bytes(home) - start
    assert grown < 1_500_000, grown  # a full snapshot per change was over 10 MB
    for version, data in expected.items():
        assert memory.history.version(version) == data
    middle = sorted(expected)[len(expected) // 2]
    memory.rollback(middle)
    assert memory.data == expected[middle]
    # Readable with plain sqlite3: full snapshots and deltas are JSON text.
    with sqlite3.connect(home / "journal.db") as conn:
        rows = conn.execute("SELECT snapshot, delta FROM memory_versions").fetchall()
    assert all((s is None) != (d is None) for s, d in rows)
    assert sum(s is not None for s, _ in rows) <= len(rows) // versions.FULL_EVERY + 3
    for s, d in rows:
        json.loads(s or d)
    memory.close()


fact_st = st.fixed_dictionaries(
    {
        "content": st.text(max_size=8),
        "confidence": st.floats(0, 1),
        "category": st.sampled_from(["context", "goal"]),
    }
)
doc_st = st.builds(
    lambda facts, summary, extra: {
        "version": "1.0",
        "user": {"workContext": {"summary": summary, "updatedAt": ""}},
        "facts": [{"id": f"f{k}", **v} for k, v in facts.items()],
        **extra,
    },
    st.dictionaries(st.integers(0, 12), fact_st, max_size=10),
    st.text(max_size=5),
    st.dictionaries(st.sampled_from(["a", "b"]), st.integers(), max_size=2),
)


@settings(max_examples=300, deadline=None)
@given(doc_st, doc_st, st.randoms())
def test_a_delta_always_rebuilds_the_new_document(
    old: dict[str, Any], new: dict[str, Any], rnd: random.Random
) -> None:
    rnd.shuffle(new["facts"])
    delta = versions.make_delta(old, new)
    assert delta is not None
    rebuilt = apply_delta(old, json.loads(versions.dumps(delta)))
    assert rebuilt == new
    assert [f["id"] for f in rebuilt["facts"]] == [f["id"] for f in new["facts"]]
