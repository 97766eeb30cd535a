"""A team on one shared project: members in separate processes, each with its own home.

Usage::

    python benchmarks/team.py [--members N] [--changes N] [--pace S] [--quick]
                              [--results DIR | --no-results]

It starts a PostgreSQL in a temporary folder (``tests/pg_cluster.py``'s cluster), sets up
the shared store (``team init``, ``team add``) and starts ``--members`` processes (20),
each on a home of its own, joined to project ``churn`` through the real sharing path
(``Memory.join``, the gate's outbox) and syncing as a kernel does: in the background
(``Memory.team.start_sync``: published at once after a commit, woken by the server's
NOTIFY); a turn syncs nothing itself, but first asks that sync to take in a change it
was told of and waits for it (``catch_up``). Each makes ``--changes`` changes (50): a project fact
added through the gate (its outbox row in the same commit), then a turn of the offline
model in the project, which reads local memory only (every project fact fits its
``<memory>`` block), then ``--pace`` seconds of the user reading; after its changes it
keeps taking turns until it has seen every teammate's. Beside them, in the same run, a
single-user home makes the same changes and turns with no sharing, its memory growing at
the team's rate (the other members' facts as one fold a turn), and an outsider is a
member of another project only. It prints:

- changes lost (a change on no server or missing from a member's memory at the end): 0;
- changes applied twice (a fact twice in a memory, a teammate's change set applied more
  than once, a change stored twice on the server): 0;
- rows of one project readable by a member of the other (its change sets, versions and
  members, read through the package as a member would): 0;
- p95 time from a member's change (committed at its home) to the first turn of another
  member whose injected ``<memory>`` holds it (when that block was built): goal <= 2 s;
  beside it, the time to that member's memory holding it (the time its journal gives the
  fact's ``add``, in the commit that applied it): any turn from then on injects it, so
  the difference is the wait for the member's next turn to start;
- a member's turn overhead (its change, with the outbox row, plus the turn outside the
  model call) against the single-user home's (its change plus the turn): goal <= 2x.

The figures go to ``benchmarks/results/team.json``. ``--quick``: 3 members x 4 changes.
It needs PostgreSQL's server (Debian's ``postgresql``; ``make test`` installs it).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))  # pg_cluster.py: the tests' PostgreSQL, reused

from benchlib import (  # noqa: E402
    Results,
    add_results_options,
    report_written,
    results_dir,
)

PROJECT = "churn"
OTHER = "clinic"  # the outsider's project
GOAL_LAG_S = 2.0
GOAL_RATIO = 2.0
INJECTION_TOKENS = 100_000  # the whole project in every <memory>: a turn sees every change
# A question on a few of the facts: the offline model quotes every injected fact sharing
# a word with it, and quoting a thousand would burn the CPU a real model spends elsewhere.
QUESTION = "What should the xenon chart show next week?"
_WORD_TEXT = """
    amber basil cedar delta ember fjord garnet harbor indigo jasper kelp lumen maple nectar
    onyx pepper quartz raven sierra tundra umber violet willow xenon yarrow zephyr anchor
    bramble canyon dune falcon glacier heron iris juniper lagoon meadow nimbus orchid
    prairie quill ripple saffron thistle upland vale wren yucca zinnia acorn birch comet
"""
WORDS = _WORD_TEXT.split()


@contextmanager
def cluster() -> Iterator[Any]:
    """A running PostgreSQL in a temporary folder (``pg_cluster.PgCluster``), removed after."""
    from pg_cluster import PgCluster, pg_bin, server_user, temp_root

    bin_dir = pg_bin()
    if bin_dir is None:
        raise SystemExit("error: PostgreSQL is not installed (apt-get install postgresql)")
    user = server_user()
    folder = Path(tempfile.mkdtemp(prefix="deerflow-bench-pg-", dir=temp_root(user)))
    server = PgCluster(bin_dir, folder, user)
    try:
        server.init()
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


def fact_text(member: int, change: int) -> str:
    """A fact no other change repeats, nor nearly (the gate would merge near-duplicates)."""
    pick = [WORDS[(member * 7 + change * 13 + i * 5) % len(WORDS)] for i in range(3)]
    return (
        f"Table {pick[0]}_{member:02d}_{change:02d} keeps the {pick[1]} labels "
        f"of cohort {member * 1000 + change} from the {pick[2]} source"
    )


def prepare(home: Path) -> Any:
    """A home whose worker never folds during the run and keeps every fact."""
    from deerflow_nb.memory import Memory

    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(
        "memory:\n  debounce_seconds: 3600\n  max_facts: 5000\n"
        f"  max_injection_tokens: {INJECTION_TOKENS}\n"
    )
    memory = Memory(home)
    return memory


def wait_for(path: Path, deadline: float) -> None:
    while not path.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"error: {path.name} never appeared")
        time.sleep(0.02)


def run_member(run: Path, index: int, members: int, changes: int, pace: float) -> None:
    """One member's process (``--member``): join, start the background sync as a kernel
    does, wait for the start, then change and turn; a turn syncs nothing itself (it may
    wait for the background sync to take in a noticed change: ``catch_up``)."""
    from deerflow_nb import Agent

    url = os.environ["TEAM_MEMBER_URL"]
    memory = prepare(run / f"home-{index}")
    applied = memory.join(PROJECT, url).applied
    agent = Agent(settings=memory.settings, model="offline", memory=memory)
    agent.run(QUESTION, thread="warmup", project=PROJECT)
    own = {fact_text(index, k) for k in range(changes)}
    expected = {fact_text(m, k) for m in range(members) for k in range(changes)} - own
    made: dict[str, float] = {}
    seen: dict[str, float] = {}
    memory.team.start_sync()
    (run / f"ready-{index}").touch()
    wait_for(run / "go", time.monotonic() + 300)
    cpu_at_go = time.process_time()
    turns: list[dict[str, float]] = []

    injection = memory.injection
    built: list[float] = []

    def timed(*args: Any, **kwargs: Any) -> Any:
        """The turn's own injection, noting when its <memory> block was built."""
        block = injection(*args, **kwargs)
        built.append(time.time())
        return block

    memory.injection = timed  # type: ignore[method-assign]

    def turn(thread: str) -> float:
        """A turn in the project: what its injected <memory> held (``last_turn.injected``)
        is seen at the moment that block was built."""
        built.clear()
        agent.run(QUESTION, thread=thread, project=PROJECT)
        for text in expected.intersection(agent.last_turn.injected):
            seen.setdefault(text, built[0])
        return agent.last_turn.overhead_seconds

    for k in range(changes):
        started = time.perf_counter()
        memory.add_fact(fact_text(index, k), project=PROJECT)  # its outbox row, same commit
        added = time.perf_counter() - started
        made[fact_text(index, k)] = time.time()
        turns.append({"add": added, "turn": turn(f"turn-{k}")})
        time.sleep(pace)
    deadline = time.monotonic() + 120
    k = changes
    while set(seen) != expected and time.monotonic() < deadline:
        time.sleep(pace or 0.05)  # more turns of reading: the last changes still arrive
        turn(f"turn-{k}")
        k += 1
    status = memory.team.sync_status()
    memory.team.stop_sync()
    applied += status["applied"]
    contents = [f["content"] for f in memory.data["facts"] if f.get("project") == PROJECT]
    held = arrivals(memory, expected)
    memory.close()
    out = {
        "made": made, "seen": seen, "held": held, "turns": turns, "facts": contents,
        "applied": applied, "syncs": status["syncs"], "extra_turns": k - changes,
        "cpu_s": time.process_time() - cpu_at_go,
    }  # fmt: skip
    (run / f"member-{index}.json").write_text(json.dumps(out))


def arrivals(memory: Any, expected: set[str]) -> dict[str, float]:
    """When this memory first held each teammate's change: its ``add`` event's time, which
    the commit that applied it journaled (read after the run, so measuring costs the run
    nothing)."""
    held: dict[str, float] = {}
    for event in reversed(memory.events(limit=1_000_000)):
        text = event.get("new_content")
        if event.get("kind") == "add" and text in expected and text not in held:
            held[text] = datetime.fromisoformat(event["ts"].replace("Z", "+00:00")).timestamp()
    return held


def run_single(run: Path, members: int, changes: int, pace: float) -> None:
    """The single-user home (``--single``): the same turns, no sharing; its memory grows as
    a member's does (its change, and the others' as one fold, each turn)."""
    from deerflow_nb import Agent

    memory = prepare(run / "home-single")
    agent = Agent(settings=memory.settings, model="offline", memory=memory)
    agent.run(QUESTION, thread="warmup", project=PROJECT)
    (run / "ready-single").touch()
    wait_for(run / "go", time.monotonic() + 300)
    cpu_at_go = time.process_time()
    turns = []
    for k in range(changes):
        started = time.perf_counter()
        memory.add_fact(fact_text(0, k), project=PROJECT)
        added = time.perf_counter() - started
        others = [
            {"content": fact_text(m, k), "category": "context", "confidence": 0.9,
             "scope": "project"}
            for m in range(1, members)
        ]  # fmt: skip
        memory.apply({"newFacts": others}, source=f"fold-{k}", project=PROJECT)
        agent.run(QUESTION, thread=f"turn-{k}", project=PROJECT)
        turns.append({"add": added, "turn": agent.last_turn.overhead_seconds})
        time.sleep(pace)
    count = sum(1 for f in memory.data["facts"] if f.get("project") == PROJECT)
    memory.close()
    out = {"turns": turns, "facts": count, "cpu_s": time.process_time() - cpu_at_go}
    (run / "single.json").write_text(json.dumps(out))


def start(run: Path, role: str, args: argparse.Namespace, env: dict[str, str]) -> Any:
    argv = [sys.executable, __file__, f"--{role.split('-')[0]}", *role.split("-")[1:]]
    argv += ["--run", str(run), "--members", str(args.members)]
    argv += ["--changes", str(args.changes), "--pace", str(args.pace)]
    log = (run / f"{role}.log").open("wb")
    return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)


def everything(url: str, project: str) -> list[Any]:
    """Every change set of ``project`` that ``url``'s role can read, in version order."""
    from deerflow_nb.shared.exchange import pull

    got: list[Any] = []
    while batch := pull(url, project, since=got[-1].version if got else 0):
        got += batch
    return got


def readable_elsewhere(url: str, project: str) -> int:
    """Rows of ``project`` (its change sets and versions, its members) that ``url``'s role,
    a member of another project, can read; tests/test_team_postgres.py asks every table."""
    from deerflow_nb.shared.connect import SharedError
    from deerflow_nb.shared.exchange import membership

    try:
        membership(url, project)
    except SharedError:
        return len(everything(url, project))
    return 1 + len(everything(url, project))


def simulate(args: argparse.Namespace, server: Any, run: Path) -> dict[str, Any]:
    """Set up the store, run the processes, and gather what they wrote."""
    from deerflow_nb.memory import Memory
    from deerflow_nb.shared import team

    admin = server.url  # the run's own cluster: its default database is the team's
    team.init(admin)

    def enrol(project: str, role: str) -> str:
        password = secrets.token_hex(12)
        team.add_member(admin, project, role, password=password)
        return server.url_for(role, password)

    urls = [enrol(PROJECT, f"member_{i:02d}") for i in range(args.members)]
    outsider = enrol(OTHER, "outsider")
    with Memory(run / "home-outsider") as other:  # the other project has rows of its own
        other.add_fact("Readmissions are counted within 30 days", project=OTHER)
        other.share(OTHER, outsider)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("DEERFLOW_NB_HOME", None)
    procs = {
        f"member-{i}": start(run, f"member-{i}", args, {**env, "TEAM_MEMBER_URL": url})
        for i, url in enumerate(urls)
    }
    procs["single"] = start(run, "single", args, env)
    deadline = time.monotonic() + 600
    while not all((run / f"ready-{role.removeprefix('member-')}").exists() for role in procs):
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs.values()):
            break
        time.sleep(0.1)
    began = time.monotonic()
    (run / "go").touch()
    for role, proc in procs.items():
        if proc.wait(timeout=1800) != 0:
            log = (run / f"{role}.log").read_text(errors="replace")[-3000:]
            raise SystemExit(f"error: {role} failed:\n{log}")
    elapsed = time.monotonic() - began
    stored = [
        (fact["content"], change.published.timestamp())  # the server's clock: this machine's
        for change in everything(admin, PROJECT)
        for fact in (change.change.diff or {}).get("newFacts") or []
    ]
    leaks = sum(readable_elsewhere(url, OTHER) for url in urls)
    leaks += readable_elsewhere(outsider, PROJECT)
    members = [json.loads((run / f"member-{i}.json").read_text()) for i in range(args.members)]
    single = json.loads((run / "single.json").read_text())
    return {
        "members": members, "single": single, "stored": [text for text, _ in stored],
        "published": dict(stored), "leaks": leaks, "elapsed": elapsed,
    }  # fmt: skip


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))] if ordered else float("nan")


def summarise(args: argparse.Namespace, got: dict[str, Any]) -> dict[str, Any]:
    """The figures: losses, doubles, leaks, lags and the turn overheads."""
    every = {fact_text(m, k) for m in range(args.members) for k in range(args.changes)}
    members = got["members"]
    on_server = set(got["stored"])
    lost = {t for t in every if t not in on_server or any(t not in m["facts"] for m in members)}
    twice = sum(len(m["facts"]) - len(set(m["facts"])) for m in members)
    others = (args.members - 1) * args.changes  # change sets each member applies once
    twice += sum(max(0, m["applied"] - others) for m in members)
    twice += max(0, len(got["stored"]) - len(every))
    made = {t: at for m in members for t, at in m["made"].items()}
    lags = [at - made[t] for m in members for t, at in m["seen"].items()]
    arrivals = [at - made[t] for m in members for t, at in m["held"].items() if t in made]
    sent = [at - made[t] for t, at in got["published"].items() if t in made]
    member_turns = [t["turn"] * 1000 for m in members for t in m["turns"]]
    member_total = [(t["turn"] + t["add"]) * 1000 for m in members for t in m["turns"]]
    adds = [t["add"] * 1000 for m in members for t in m["turns"]]
    single = [(t["turn"] + t["add"]) * 1000 for t in got["single"]["turns"]]
    single_adds = [t["add"] * 1000 for t in got["single"]["turns"]]
    single_turns = [t["turn"] * 1000 for t in got["single"]["turns"]]
    base = statistics.median(single)
    return {
        "lost": len(lost), "applied_twice": twice, "cross_project_rows": got["leaks"],
        "lag_p50_s": pct(lags, 0.5), "lag_p95_s": pct(lags, 0.95), "lag_max_s": max(lags),
        "lags": len(lags), "sent_p50_s": pct(sent, 0.5), "sent_p95_s": pct(sent, 0.95),
        "held_p50_s": pct(arrivals, 0.5),
        "held_p95_s": pct(arrivals, 0.95), "held_max_s": max(arrivals, default=float("nan")),
        "single_ms": base, "single_p95_ms": pct(single, 0.95),
        "member_turn_ms": statistics.median(member_turns),
        "member_ms": statistics.median(member_total), "member_p95_ms": pct(member_total, 0.95),
        "add_ms": statistics.median(adds), "single_add_ms": statistics.median(single_adds),
        "single_turn_ms": statistics.median(single_turns),
        "syncs_per_member": statistics.mean(m["syncs"] for m in members),
        "member_cpu_s": statistics.median(m["cpu_s"] for m in members),
        "single_cpu_s": got["single"]["cpu_s"],
        "ratio": statistics.median(member_total) / base,
        "turn_ratio": statistics.median(member_turns) / statistics.median(single_turns),
        "changes": len(every), "elapsed_s": got["elapsed"],
        "single_facts": got["single"]["facts"],
    }  # fmt: skip


def report(args: argparse.Namespace, f: dict[str, Any]) -> None:
    def verdict(ok: bool) -> str:
        return "meets" if ok else "misses"

    print(
        f"Team of {args.members} members x {args.changes} changes on one project "
        f"({f['changes']} changes; a turn every {args.pace:g} s of reading), "
        f"{f['elapsed_s']:.1f} s\n"
    )
    print(f"changes lost                              {f['lost']:>8d}   (must be 0)")
    print(f"changes applied twice                     {f['applied_twice']:>8d}   (must be 0)")
    print(f"other project's rows readable             {f['cross_project_rows']:>8d}   (must be 0)")
    print(
        f"change -> a teammate's next turn sees it  p50 {f['lag_p50_s']:.2f} s, "
        f"p95 {f['lag_p95_s']:.2f} s, max {f['lag_max_s']:.2f} s over {f['lags']} "
        f"({verdict(f['lag_p95_s'] <= GOAL_LAG_S)} the {GOAL_LAG_S:g} s goal at p95)"
    )
    print(
        f"change -> on the server                   p50 {f['sent_p50_s']:.2f} s, "
        f"p95 {f['sent_p95_s']:.2f} s (published by the member's background sync)"
    )
    print(
        f"change -> in a teammate's memory          p50 {f['held_p50_s']:.2f} s, "
        f"p95 {f['held_p95_s']:.2f} s, max {f['held_max_s']:.2f} s (any turn from then on "
        "injects it; the line above adds the wait for that member's next turn to start)"
    )
    print(
        f"turn overhead, single-user home           {f['single_ms']:8.2f} ms median "
        f"(p95 {f['single_p95_ms']:.2f}; its change {f['single_add_ms']:.2f} ms + turn "
        f"{f['single_turn_ms']:.2f} ms; {f['single_facts']} facts at the end)"
    )
    print(
        f"turn overhead, member: change + turn      {f['member_ms']:8.2f} ms median "
        f"(p95 {f['member_p95_ms']:.2f}; its change with the outbox row {f['add_ms']:.2f} "
        f"ms + turn {f['member_turn_ms']:.2f} ms, with its catch-up; "
        f"{f['syncs_per_member']:.0f} background syncs a member)"
    )
    print(
        f"CPU a process used from the start         member {f['member_cpu_s']:.1f} s "
        f"(median), single-user {f['single_cpu_s']:.1f} s"
    )
    print(
        f"member / single-user                      {f['ratio']:8.2f}x   "
        f"({verdict(f['ratio'] <= GOAL_RATIO)} the {GOAL_RATIO:g}x goal; the turn alone "
        f"{f['turn_ratio']:.2f}x)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, help="member processes (20; --quick: 3)")
    parser.add_argument("--changes", type=int, help="changes per member (50; --quick: 4)")
    parser.add_argument("--pace", type=float, help="seconds between turns (0.5; --quick: 0.1)")
    parser.add_argument("--member", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--single", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--run", type=Path, help=argparse.SUPPRESS)
    add_results_options(parser)
    args = parser.parse_args(argv)
    args.members = args.members or (3 if args.quick else 20)
    args.changes = args.changes or (4 if args.quick else 50)
    args.pace = args.pace if args.pace is not None else (0.1 if args.quick else 0.5)
    if args.member is not None:
        run_member(args.run, args.member, args.members, args.changes, args.pace)
        return 0
    if args.single:
        run_single(args.run, args.members, args.changes, args.pace)
        return 0
    with cluster() as server, tempfile.TemporaryDirectory(prefix="deerflow-team-") as tmp:
        figures = summarise(args, simulate(args, server, Path(tmp)))
    report(args, figures)
    results = Results(
        "team",
        about="A team on one shared PostgreSQL project: losses, leaks, lag, turn overhead",
        goals={"lag_p95_max_s": GOAL_LAG_S, "overhead_ratio_max": GOAL_RATIO},
        options={"members": args.members, "changes": args.changes, "pace_s": args.pace},
    )
    results.add("team", **figures)
    report_written(results.write(results_dir(args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
