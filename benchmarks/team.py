"""Team memory on a real PostgreSQL: members x changes, each member its own process and home.

Issue 39's benchmark. A PostgreSQL is started in a temporary folder (``tests/pg_cluster.py``,
Debian's ``postgresql``), ``team init`` and ``team add`` make one project with M members;
each member is a process with its own home that joins the project and then makes N
changes, each a project fact and, every other change, one of its own (private) facts,
syncing after each (``Memory.sync``: publish the outbox, pull and apply through the gate).
At the end each member syncs once more. Printed:

- **sync** p50 / p95 seconds per sync while every member writes (goal p95 <= 1 s);
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
GOALS = {"sync_p95_seconds": 1.0, "converged": 1.0, "private_on_server": 0}


def member(home: str, url: str, index: int, changes: int) -> dict[str, Any]:
    """One member's run (in its own process): join, N changes each synced; its timings."""
    from deerflow_nb.memory import Memory

    with Memory(home) as memory:
        memory.project = PROJECT
        memory.join(PROJECT, url)
        took = []
        for i in range(changes):
            memory.add_fact(
                f"Table t{index}x{i} of member {index} holds the raw events", project=PROJECT
            )
            if i % 2 == 0:
                memory.add_fact(f"Member {index} privately prefers colour scheme c{index}x{i}")
            started = time.perf_counter()
            report = memory.sync()
            took.append(time.perf_counter() - started)
            if report.problems:
                raise SystemExit(f"member {index}: {report.problems[0]}")
        return {"syncs": took}


def final(home: str, url: str) -> int:
    """One last sync of a member; how many project facts it holds."""
    from deerflow_nb.memory import Memory

    with Memory(home) as memory:
        memory.join(PROJECT, url)
        return sum(1 for f in memory.data["facts"] if f.get("project") == PROJECT)


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
        "sync_p95": syncs[min(len(syncs) - 1, int(0.95 * len(syncs)))],
        "converged": sum(h == members * changes for h in held) / members,
        "private_on_server": payloads.count("privately prefers"),
        "published_per_second": members * changes / elapsed,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--changes", type=int, default=30)
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
