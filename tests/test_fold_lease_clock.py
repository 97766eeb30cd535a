"""A fold lease written by a kernel whose clock was an hour ahead (a host NTP later steps
back), which is then killed with kill -9: no kernel trusts a claim ending more than
``schedule.LEASE_SECONDS`` from its now (a live holder renews every third of the lease),
so the row is folded within about a lease, by a flush with no timeout, by the background
worker and through the store contract's ``claim``; status says who holds the claim and
until when. The claimant is a real second process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from journal_rows import journal_turn

from deerflow_nb.memory import Memory
from deerflow_nb.memory.folding import schedule
from deerflow_nb.memory.sqlite_home import SQLiteHome
from deerflow_nb.notebook.views.status import StatusView

ROOT = Path(__file__).resolve().parents[1]
LEASE = 1.0  # seconds: the test's fold lease (15 s in use)
BOUND = 30.0  # generous: the row is taken over well within this (without the fix: 1 h)

pytestmark = pytest.mark.timeout(120)

CLAIMER = """
import time
from deerflow_nb import Memory
from deerflow_nb.memory.folding import schedule
schedule.clock = lambda: time.time() + 3600  # this host's clock is an hour ahead
mem = Memory()
assert schedule.claim(mem.journal, "t", force=True) is not None
print(schedule._me(), flush=True)
time.sleep(600)  # folding ... until kill -9
"""


@pytest.fixture
def far_lease(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A queued thread ``t`` whose row a killed kernel leased an hour ahead; its owner."""
    (home / "config.yaml").write_text("memory:\n  debounce_seconds: 0\n", encoding="utf-8")
    mem = Memory(home)
    journal_turn(mem, "t", "I prefer polars over pandas.")
    mem.enqueue("t")
    mem.close()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    claimant = subprocess.Popen(
        [sys.executable, "-c", CLAIMER], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert claimant.stdout is not None
        owner = claimant.stdout.readline().strip()
        assert owner.endswith(f":{claimant.pid}")
    finally:
        claimant.send_signal(signal.SIGKILL)  # no chance to hand the row back
        claimant.wait()
    monkeypatch.setattr(schedule, "LEASE_SECONDS", LEASE)
    yield owner


def claim_of(mem: Memory) -> dict[str, object]:
    (row,) = mem.status()["pending"]
    return row


def test_a_flush_folds_a_row_leased_an_hour_ahead_within_a_lease(
    home: Path, far_lease: str
) -> None:
    mem = Memory(home)
    try:
        row = claim_of(mem)
        assert row["claimed_by"] == far_lease
        assert float(row["claimed_until"]) > time.time() + 3000  # as the killed kernel wrote it
        # status says who holds it and until when: at most a lease from now, not an hour
        now = time.time()
        ends = {f"{datetime.fromtimestamp(now + s):%H:%M:%S}" for s in range(0, 18)}
        assert row["claim"] in {f"folding in {far_lease} until {end}" for end in ends}
        assert f"folding in {far_lease}" in repr(StatusView(mem.status()))

        started = time.monotonic()
        report = mem.flush()  # no timeout, as %memory flush: it must not wait the hour
        assert time.monotonic() - started < BOUND
        assert report.folded == ["t"] and report.pending == 0
        assert "Prefers polars over pandas" in [f["content"] for f in mem.data["facts"]]
    finally:
        mem.close()


def test_the_worker_folds_a_row_leased_an_hour_ahead_within_a_lease(
    home: Path, far_lease: str
) -> None:
    mem = Memory(home)
    try:
        due = schedule.next_due(mem.journal)
        assert due is not None and due <= schedule.clock() + LEASE + 1  # not in an hour
        mem.start()  # nothing but the background worker folds here
        started = time.monotonic()
        while mem.status()["pending"]:
            assert time.monotonic() - started < BOUND, "the worker waits out the offset"
            time.sleep(0.1)
        assert "Prefers polars over pandas" in [f["content"] for f in mem.data["facts"]]
    finally:
        mem.close()


def test_the_store_contract_claims_a_row_leased_an_hour_ahead_within_a_lease(
    home: Path, far_lease: str
) -> None:
    store = SQLiteHome.open(home)
    started = time.monotonic()
    while (lease := store.claim("w2", LEASE)) is None:
        assert time.monotonic() - started < BOUND, "the claim waits out the offset"
        time.sleep(0.1)
    assert lease.thread == "t" and lease.owner == "w2"
