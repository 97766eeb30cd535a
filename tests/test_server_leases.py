"""A server lease is held by a heartbeat with an expiry (issue 36): while its holder lives
it keeps folds off however long the turn, and once the holder is gone without dropping it
(killed on another host, or dead with its pid reused here) folds start again within
``DEERFLOW_NB_LEASE_SECONDS``; status says who holds it. The holder is a real second
process taking the lease as a kernel's turn does, killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from journal_rows import journal_turn
from loopback import ServerHandle

from deerflow_nb.cli import main as cli
from deerflow_nb.memory import Memory
from deerflow_nb.storage.servers import LEASE_ENV, MAX_LEASE_SECONDS, lease_seconds

ROOT = Path(__file__).resolve().parents[1]
LEASE = 2.5  # seconds: the test's lease life, through the real setting

HOLDER = """
import os, socket, sys, time
from pathlib import Path
from deerflow_nb.storage import servers
if sys.argv[2] == "another host":
    socket.gethostname = lambda: "another-host"
else:  # a pid this host reused: the owner names a live process that is not the holder
    servers.this_owner = lambda: f"{socket.gethostname()}:{os.getppid()}"
from deerflow_nb.llm.server_sharing import server_for
server = server_for(sys.argv[1], Path(os.environ["DEERFLOW_NB_HOME"]) / "journal.db")
with server.foreground():
    print(servers.this_owner(), flush=True)
    time.sleep(120)
"""


def hold_the_server(base_url: str, how: str) -> tuple[subprocess.Popen[str], str]:
    """A second process holding ``base_url``'s lease, and the owner it wrote."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, base_url, how], stdout=subprocess.PIPE, text=True, env=env
    )
    assert holder.stdout is not None
    owner = holder.stdout.readline().strip()
    assert owner, "the holder did not start"
    return holder, owner


@pytest.mark.parametrize("how", ["another host", "a reused pid"])
def test_a_dead_holders_lease_stops_holding_folds_off_within_its_expiry(
    model_server: ServerHandle,
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    how: str,
) -> None:
    monkeypatch.setenv(LEASE_ENV, str(LEASE))
    (home / "config.yaml").write_text("model:\n  max_retries: 0\n")
    memory = Memory(home)
    holder = None
    try:
        journal_turn(memory, "t", "I prefer polars over pandas.")
        memory.enqueue("t")
        holder, owner = hold_the_server(model_server.base_url, how)
        assert owner.startswith("another-host:" if how == "another host" else f"{os.uname()[1]}:")

        # Alive, its heartbeat keeps the lease past two lease lives: every fold waits.
        until = time.monotonic() + 2 * LEASE
        while time.monotonic() < until:
            assert memory.flush(timeout=30).waiting == ["t"]
            time.sleep(0.3)
        (lease,) = memory.status()["server_leases"]
        assert lease["owner"] == owner and lease["holds_folds"]
        assert lease["endpoint"] == model_server.base_url
        cli(["status"])
        assert owner in capsys.readouterr().out

        holder.send_signal(signal.SIGKILL)  # no chance to drop the lease
        holder.wait()
        killed = time.monotonic()
        while (report := memory.flush(timeout=30)).folded != ["t"]:
            assert report.waiting == ["t"] and time.monotonic() - killed < LEASE + 5
            time.sleep(0.2)
        (lapsed,) = memory.status()["server_leases"]  # still there, said to hold nothing
        assert lapsed["owner"] == owner and not lapsed["holds_folds"]
    finally:
        if holder is not None and holder.poll() is None:
            holder.kill()
        memory.close()


def test_the_lease_life_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LEASE_ENV, "3600")
    assert lease_seconds() == MAX_LEASE_SECONDS == 60
    monkeypatch.setenv(LEASE_ENV, "not a number")
    assert 0 < lease_seconds() <= MAX_LEASE_SECONDS
