"""Team memory on a real PostgreSQL: members x changes, each member its own process and home.

Issue 39's benchmark. A PostgreSQL is started in a temporary folder (``tests/pg_cluster.py``,
Debian's ``postgresql``), ``team init`` and ``team add`` make one project with M members;
each member is a process with its own home that joins the project and then makes N
changes, each a project fact and, every other change, one of its own (private) facts,
syncing after each (``Memory.sync``: publish the outbox, pull and apply through the gate).
At the end each member syncs once more. Printed:

- **sync** p50 / p95 seconds per sync while every member writes (goal p95 <= 1 s);
- **seen**: p50 / p95 seconds from a member's change to its showing in the memory of a
  read-only member whose kernel syncs in the background (NOTIFY; goal p95 <= 2 s);
- **lost** and **applied twice**: project facts missing, or held twice, at the end (goal 0);
- **converged**: every member holds every member's project facts (goal 1.0);
- **private facts on the server**: change sets holding a member's own fact (goal 0);
- **throughput**: change sets published per second, all members together (the members'
  process starts included: a floor, not a server figure).

    .venv/bin/python benchmarks/team.py [--members M] [--changes N] [--results DIR | --no-results]

The figures go to ``benchmarks/results/team.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "tests"))

from benchlib import Results, add_results_options, report_written, results_dir  # noqa: E402

PROJECT = "bench"
GOALS = {
    "sync_p95_seconds": 1.0,
    "seen_p95_seconds": 2.0,
    "lost": 0,
    "applied_twice": 0,
    "converged": 1.0,
    "private_on_server": 0,
}


def member(home: str, url: str, index: int, changes: int) -> dict[str, Any]:
    """One member's run (in its own process): join, N changes each synced; its timings."""
    from deerflow_nb.memory import Memory

    with Memory(home) as memory:
        memory.join(PROJECT, url)
        took = []
        for i in range(changes):
            memory.add_fact(
                f"Table t{index}x{i} of member {index} holds the raw events written at "
                f"{time.time():.3f}",
                project=PROJECT,
            )
            if i % 2 == 0:
                memory.add_fact(f"Member {index} privately prefers colour scheme c{index}x{i}")
            started = time.perf_counter()
            report = memory.sync()
            took.append(time.perf_counter() - started)
            if report.problems:
                raise SystemExit(f"member {index}: {report.problems[0]}")
        return {"syncs": took}


def final(home: str, url: str) -> tuple[int, int]:
    """One last sync of a member: how many different project facts it holds, and how many
    it holds more than once (a change set applied twice)."""
    from deerflow_nb.memory import Memory

    with Memory(home) as memory:
        memory.join(PROJECT, url)
        texts = [f["content"] for f in memory.data["facts"] if f.get("project") == PROJECT]
        return len(set(texts)), len(texts) - len(set(texts))


class Observer:
    """A read-only member with a kernel's background sync (NOTIFY, then pull through the
    gate): when each fact first shows in its memory, against when its writer added it."""

    def __init__(self, home: Path, url: str) -> None:
        import threading

        from deerflow_nb.memory import Memory

        self.memory = Memory(home)
        self.memory.join(PROJECT, url)
        self.memory.start_team_sync()
        self.seen: dict[str, float] = {}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while not self.done.is_set():
            now = time.time()
            for fact in self.memory.data["facts"]:
                self.seen.setdefault(fact["content"], now)
            self.done.wait(0.02)

    def delays(self) -> list[float]:
        """Seconds from each fact's writing to its showing here."""
        self.done.set()
        self.thread.join()
        self.memory.stop_team_sync()
        self.memory.close()
        return sorted(seen - float(text.rsplit(" at ", 1)[1]) for text, seen in self.seen.items())


def run(members: int, changes: int, folder: Path) -> dict[str, Any]:
    from pg_cluster import PgCluster, pg_bin, server_user, temp_root

    from deerflow_nb.shared import exchange, team

    bin_dir = pg_bin()
    if bin_dir is None:
        raise SystemExit("PostgreSQL is not installed: no /usr/lib/postgresql/*/bin/initdb")
    user = server_user()
    cluster = PgCluster(
        bin_dir, Path(tempfile.mkdtemp(prefix="deerflow-pg-", dir=temp_root(user))), user
    )
    cluster.init()
    cluster.start()
    try:
        team.init(cluster.url)
        urls = []
        for i in range(members):
            password = secrets.token_hex(8)
            role = f"member{i}_{secrets.token_hex(3)}"
            team.add_member(cluster.url, PROJECT, role, password=password)
            urls.append(cluster.url_for(role, password))
        password, role = secrets.token_hex(8), f"observer_{secrets.token_hex(3)}"
        team.add_member(cluster.url, PROJECT, role, read_only=True, password=password)
        (folder / "observer").mkdir()
        (folder / "observer" / "config.yaml").write_text("memory:\n  max_facts: 100000\n")
        observer = Observer(folder / "observer", cluster.url_for(role, password))
        started = time.perf_counter()
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        for i in range(members):  # room for every member's facts: no eviction measured
            (folder / f"m{i}").mkdir()
            (folder / f"m{i}" / "config.yaml").write_text("memory:\n  max_facts: 10000\n")
        procs = [
            subprocess.Popen(
                [sys.executable, __file__, "--member", str(folder / f"m{i}"), url, str(i),
                 str(changes)],
                stdout=subprocess.PIPE, text=True, env=env,
            )
            for i, url in enumerate(urls)
        ]  # fmt: skip
        outs = [json.loads(p.communicate(timeout=600)[0].splitlines()[-1]) for p in procs]
        elapsed = time.perf_counter() - started
        deadline = time.monotonic() + 60  # the last ones still on their way
        while len(observer.seen) < members * changes and time.monotonic() < deadline:
            time.sleep(0.05)
        delays = observer.delays()
        held = [final(str(folder / f"m{i}"), urls[i]) for i in range(members)]
        payloads = json.dumps(
            [c.change.model_dump() for c in exchange.pull(cluster.url, PROJECT, 0, 10**6)]
        )
    finally:
        cluster.stop()
    syncs = sorted(t for out in outs for t in out["syncs"])
    return {
        "members": members,
        "changes": changes,
        "sync_p50": statistics.median(syncs),
        "sync_p95": percentile(syncs, 0.95),
        "seen_p50": statistics.median(delays) if delays else None,
        "seen_p95": percentile(delays, 0.95) if delays else None,
        "seen_by_observer": len(delays),
        "lost": sum(members * changes - kept for kept, _ in held),
        "applied_twice": sum(twice for _, twice in held),
        "converged": sum(kept == members * changes for kept, _ in held) / members,
        "private_on_server": payloads.count("privately prefers"),
        "published_per_second": members * changes / elapsed,
    }


def percentile(values: list[float], share: float) -> float:
    return values[min(len(values) - 1, int(share * len(values)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=20)
    parser.add_argument("--changes", type=int, default=50)
    parser.add_argument("--member", nargs=4, help=argparse.SUPPRESS)  # a member's process
    add_results_options(parser)
    args = parser.parse_args(argv)
    if args.member:
        home, url, index, changes = args.member
        parts = urlsplit(url)
        os.environ["PGPASSWORD"] = parts.password or ""  # as a user's: not in the URL
        bare = url.replace(f":{parts.password}@", "@")
        print(json.dumps(member(home, bare, int(index), int(changes))))
        return 0
    members, changes = (2, 3) if args.quick else (args.members, args.changes)
    with tempfile.TemporaryDirectory(prefix="deerflow-team-bench-") as folder:
        figures = run(members, changes, Path(folder))
    print(f"{members} members x {changes} changes, each synced (one process and home each)")
    print(
        f"sync p50 / p95: {figures['sync_p50']:.3f} / {figures['sync_p95']:.3f} s (goal p95 <= 1 s)"
    )
    print(
        f"a change seen by a read-only member's background sync, p50 / p95: "
        f"{figures['seen_p50']:.3f} / {figures['seen_p95']:.3f} s (goal p95 <= 2 s; "
        f"{figures['seen_by_observer']} of {members * changes} seen)"
    )
    print(f"changes lost: {figures['lost']}; applied twice: {figures['applied_twice']} (goal 0, 0)")
    print(f"converged: {figures['converged']:.2f} (goal 1.0)")
    print(f"private facts on the server: {figures['private_on_server']} (goal 0)")
    rate = figures["published_per_second"]
    print(f"change sets published per second, process starts included: {rate:.1f}")
    results = Results(
        "team",
        about="members x changes on a real PostgreSQL, each member a process with its own home",
        goals=GOALS,
        options={"members": members, "changes": changes, "quick": args.quick},
    )
    results.add(f"members{members}.changes{changes}", **figures)
    report_written(results.write(results_dir(args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
