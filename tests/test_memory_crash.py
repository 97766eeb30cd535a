"""Crash and concurrency with real processes: kill -9 mid-work, two kernels writing at once."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

from deerflow_nb import Memory
from deerflow_nb.storage.journal import Journal

JOURNALING_CHILD = textwrap.dedent(
    """
    import random, sys, time
    from deerflow_nb import Memory

    round_no = sys.argv[1]
    mem = Memory().start()  # as a kernel does: folds run in the background
    print("ready", flush=True)
    i = 0
    while True:
        thread = f"r{round_no}-{i}"
        mem.journal.ensure_thread(thread)
        mem.journal.add_message(thread, {"role": "user",
                                         "content": f"I work on project P{round_no}x{i}."})
        mem.journal.add_message(thread, {"role": "assistant", "content": "Noted."})
        mem.enqueue(thread)
        i += 1
        time.sleep(random.uniform(0, 0.06))  # a turn every few tens of ms: folds interleave
    """
)

ADDING_CHILD = textwrap.dedent(
    """
    import os, sys, time
    from deerflow_nb import Memory

    name, go = sys.argv[1], sys.argv[2]
    mem = Memory()
    while not os.path.exists(go):
        time.sleep(0.01)
    for i in range(300):
        mem.add_fact(f"Knows topic {name}{i:03d}", category="knowledge", confidence=0.9)
    """
)

DYING_BEFORE_THE_WRITE_CHILD = textwrap.dedent(
    """
    import os
    from deerflow_nb import Memory
    from deerflow_nb.memory.store import MemoryStore

    mem = Memory()
    mem.journal.ensure_thread("t1")
    mem.journal.add_message("t1", {"role": "user", "content": "I work on project Heron."})
    mem.journal.add_message("t1", {"role": "assistant", "content": "Noted."})
    mem.enqueue("t1")
    # The process dies between the journal's commit and memory.json's rename (its temp
    # file written, not yet renamed), as a kill -9 can land there; the hook marks the
    # exact point.
    MemoryStore.install = lambda self, tmp: os._exit(9)
    mem.flush()
    """
)


def spawn(
    home: Path, script: str, *args: str, stdout: int | None = None
) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DEERFLOW_NB_HOME": str(home)}
    return subprocess.Popen([sys.executable, "-c", script, *args], env=env, stdout=stdout)


@pytest.mark.slow
def test_kill_9_at_random_points_loses_no_journaled_turn(home: Path) -> None:
    (home / "config.yaml").write_text("memory:\n  debounce_seconds: 0.05\n  max_facts: 100000\n")
    rng = random.Random(20240601)
    for round_no in range(10):
        child = spawn(home, JOURNALING_CHILD, str(round_no), stdout=subprocess.PIPE)
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        time.sleep(rng.uniform(0.2, 1.5))  # the kill lands while journaling or folding
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
        path = home / "memory.json"
        if path.exists():
            json.loads(path.read_text())  # always parses, whenever the kill landed

    journal = Journal(home / "journal.db")
    folded_by_children = journal.db["memory_versions"].count
    left_for_recovery = (
        journal.db["memory_queue"].count
        + len(journal.threads())
        - len(list(journal.db["memory_threads"].rows))
    )
    assert folded_by_children > 0 and left_for_recovery > 0  # kills landed mid-stream

    mem = Memory(home)
    report = mem.flush()
    assert report.failed == {} and report.pending == 0
    stored = {f["content"] for f in mem.data["facts"]}
    expected = set()
    for thread in mem.journal.threads():
        messages = mem.journal.messages(thread["id"])
        if any(m["role"] == "assistant" for m in messages):
            expected.add(messages[0]["content"].replace("I work", "Works").rstrip("."))
    assert len(expected) > 20  # the children really journaled turns before dying
    assert expected <= stored
    # Folded once each: a fold the kill cut short is rolled forward or redone, never both.
    assert all(f.get("confirmations", 1) == 1 for f in mem.data["facts"])
    added = Counter(e["fact_id"] for e in mem.events(limit=100_000) if e["kind"] == "add")
    assert all(added[f["id"]] == 1 for f in mem.data["facts"])
    ids = [f["id"] for f in mem.data["facts"]]
    assert len(ids) == len(set(ids))
    mem.close()


def files_of(home: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every file of the home: its size, modification time and bytes."""
    return {
        p.name: (p.stat().st_size, p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(home.iterdir())
        if p.is_file()
    }


def test_a_crash_between_journal_and_file_rolls_forward_and_folds_once(home: Path) -> None:
    child = spawn(home, DYING_BEFORE_THE_WRITE_CHILD)
    assert child.wait(timeout=120) == 9
    assert not (home / "memory.json").exists()  # the fold never reached the file
    assert list(home.glob("memory.json.*.tmp"))  # its temp file, written, left behind

    mem = Memory(home)  # the writer, as it opens, writes the journaled version ...
    assert (home / "memory.json").exists() and not list(home.glob("memory.json.*.tmp"))
    # ... so no read, through the read door or the facade, writes anything
    before = files_of(home)
    assert [f["content"] for f in mem.reader.facts()] == ["Works on project Heron"]
    assert [f["content"] for f in mem.data["facts"]] == ["Works on project Heron"]
    assert mem.reader.search("Heron") and "Heron" in mem.reader.preview("Heron")
    assert files_of(home) == before
    assert mem.flush().folded == []  # the fold finished in the journal: not folded again
    (fact,) = mem.data["facts"]
    assert fact.get("confirmations", 1) == 1
    assert [v["reason"] for v in mem.versions()] == ["fold"]
    assert [e["kind"] for e in mem.history.of(fact["id"])] == ["add"]
    mem.close()


@pytest.mark.slow
def test_two_processes_adding_300_facts_each_lose_nothing(home: Path, tmp_path: Path) -> None:
    (home / "config.yaml").write_text("memory:\n  max_facts: 1000\n")
    go = tmp_path / "go"
    children = [spawn(home, ADDING_CHILD, name, str(go)) for name in ("alpha", "beta")]
    time.sleep(0.5)
    go.touch()
    for child in children:
        assert child.wait(timeout=120) == 0
    mem = Memory(home)
    facts = mem.data["facts"]
    assert len(facts) == 600
    assert {f["content"] for f in facts} == {
        f"Knows topic {name}{i:03d}" for name in ("alpha", "beta") for i in range(300)
    }
    assert len(mem.versions()) == 600  # every change journaled as its own version
    assert mem.versions()[-1]["fact_count"] == 600
    mem.close()


EXITING_CHILD = textwrap.dedent(
    """
    from deerflow_nb import Memory

    mem = Memory().start()
    mem.journal.ensure_thread("t1")
    mem.journal.add_message("t1", {"role": "user", "content": "I prefer polars over pandas."})
    mem.journal.add_message("t1", {"role": "assistant", "content": "Noted."})
    assert mem.enqueue("t1")
    """
)


def test_pending_fold_is_flushed_when_the_interpreter_exits(home: Path) -> None:
    (home / "config.yaml").write_text("memory:\n  debounce_seconds: 600\n")
    assert spawn(home, EXITING_CHILD).wait(timeout=60) == 0
    journal = Journal(home / "journal.db")
    assert journal.db["memory_queue"].count == 0  # folded at exit, not left for later
    facts = json.loads((home / "memory.json").read_text())["facts"]
    assert [f["content"] for f in facts] == ["Prefers polars over pandas"]


DYING_INSIDE_THE_JOURNAL_CHILD = textwrap.dedent(
    """
    import os
    from deerflow_nb import Memory
    from deerflow_nb.memory.updates import versions

    mem = Memory()
    mem.add_fact("Prefers polars")
    # The process dies inside the journal's transaction: the new file is written aside,
    # nothing of the change is journaled.
    versions.record = lambda *args, **kwargs: os._exit(9)
    mem.add_fact("Uses scikit-learn")
    """
)


def test_a_temp_file_the_journal_never_took_is_deleted_not_installed(home: Path) -> None:
    child = spawn(home, DYING_INSIDE_THE_JOURNAL_CHILD)
    assert child.wait(timeout=120) == 9
    assert list(home.glob("memory.json.*.tmp"))  # the unjournaled change, written aside
    with Memory(home) as mem:
        assert [f["content"] for f in mem.data["facts"]] == ["Prefers polars"]
        assert not list(home.glob("memory.json.*.tmp"))
        assert [v["reason"] for v in mem.versions()] == ["add"]


def test_a_deleted_memory_json_stays_reset_after_folds(home: Path) -> None:
    """No version is ever "waiting to be written" after a change that finished: deleting
    memory.json (DeerFlow's reset) is never undone by a roll-forward."""
    with Memory(home) as mem:
        mem.add_messages("t", [{"role": "user", "content": "I work on project Heron."}])
        mem.add_messages("t", [{"role": "assistant", "content": "Noted."}])
        assert mem.flush().folded == ["t"]
    (home / "memory.json").unlink()
    with Memory(home) as mem:
        assert mem.data["facts"] == []
        mem.add_fact("Prefers polars")
        assert [f["content"] for f in mem.data["facts"]] == ["Prefers polars"]
