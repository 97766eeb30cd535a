"""Time an MCP ``search_memory`` round trip over stdio, against the same search in-process.

Usage::

    python benchmarks/mcp_search.py [--facts N] [--calls N] [--quick] [--results DIR | --no-results]

A fresh home holds ``--facts`` facts (1,000 by default: a third the user's, the rest split
between two projects); ``deerflow-nb mcp --project alpha`` runs as a subprocess and the
MCP SDK's own client calls ``search_memory`` with varied queries over stdio, timing each
round trip (client to server to client). The same-run baseline is the same searches
through the agent's ``MemoryTools`` in this process, on the same home: what MCP adds is
the difference. The goal is a p50 of at most 20 ms at 1,000 facts. ``--quick`` runs tiny
sizes and writes its figures to a temporary folder (the test suite runs it); a full run
writes ``benchmarks/results/mcp_search.json``.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "benchmarks"))

from benchlib import Results, add_results_options, report_written, results_dir  # noqa: E402

from deerflow_nb.memory.store import MemoryStore, empty_memory  # noqa: E402
from deerflow_nb.storage.db import now_iso  # noqa: E402

GOAL_MS = 20.0
GOAL_FACTS = 1000
WARMUP = 5
TOPICS = [
    "polars",
    "pandas",
    "duckdb",
    "spark",
    "parquet",
    "arrow",
    "sklearn",
    "xgboost",
    "pytorch",
    "matplotlib",
    "plotly",
    "jupyter",
    "git",
    "docker",
    "airflow",
    "dbt",
    "snowflake",
    "postgres",
    "churn",
    "revenue",
    "forecast",
    "cohort",
    "retention",
    "experiment",
    "latency",
    "dashboard",
    "notebook",
    "pipeline",
    "feature",
    "holdout",
]
CATEGORIES = ("preference", "knowledge", "context", "behavior", "goal")


def seed(home: Path, count: int) -> None:
    """``count`` varied facts in memory.json: the user's, project alpha's and beta's."""
    rng = random.Random(count)
    data = empty_memory()
    stamp = now_iso()
    facts = []
    for i in range(count):
        fact = {
            "id": f"fact_{i:05d}",
            "content": f"Uses {rng.choice(TOPICS)} with {rng.choice(TOPICS)} for "
            f"{rng.choice(TOPICS)} work, note {i}",
            "category": rng.choice(CATEGORIES),
            "confidence": round(rng.uniform(0.7, 1.0), 2),
            "createdAt": stamp,
            "source": f"thread-{i % 50}",
        }
        if i % 3:
            fact.update(scope="project", project="alpha" if i % 3 == 1 else "beta")
        facts.append(fact)
    data["facts"] = facts
    store = MemoryStore(home / "memory.json")
    with store.locked():
        store.write(data)


def queries(calls: int) -> list[str]:
    rng = random.Random(calls)
    return [f"{rng.choice(TOPICS)} {rng.choice(TOPICS)}" for _ in range(calls)]


async def over_mcp(home: Path, asked: list[str]) -> list[float]:
    """Milliseconds of each ``search_memory`` round trip over stdio (after a warm-up)."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    env = dict(os.environ, DEERFLOW_NB_HOME=str(home), PYTHONPATH=str(ROOT))
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "deerflow_nb.cli", "mcp", "--project", "alpha"],
        env=env,
    )
    times = []
    async with stdio_client(server) as streams, ClientSession(*streams[:2]) as session:
        await session.initialize()
        for query in asked[:WARMUP]:
            await session.call_tool("search_memory", {"query": query})
        for query in asked:
            start = time.perf_counter()
            await session.call_tool("search_memory", {"query": query})
            times.append((time.perf_counter() - start) * 1000)
    return times


def in_process(home: Path, asked: list[str]) -> list[float]:
    """Milliseconds of the same searches through the agent's ``MemoryTools``, no MCP."""
    from deerflow_nb.agent.memory_tools import MemoryTools
    from deerflow_nb.memory import Memory

    times = []
    with Memory(home) as memory:
        tools = MemoryTools(memory, "mcp", project="alpha")
        for query in asked[:WARMUP]:
            tools.call("search_memory", {"query": query})
        for query in asked:
            start = time.perf_counter()
            tools.call("search_memory", {"query": query})
            times.append((time.perf_counter() - start) * 1000)
    return times


def p(times: list[float], share: float) -> float:
    ordered = sorted(times)
    return ordered[round(share * (len(ordered) - 1))]


def measure(facts: int, calls: int) -> dict[str, Any]:
    import anyio

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        (home / "config.yaml").write_text("memory:\n  max_facts: 100000\n")
        seed(home, facts)
        asked = queries(calls)
        mcp = anyio.run(over_mcp, home, asked)
        local = in_process(home, asked)
    return {
        "facts": facts,
        "calls": calls,
        "p50_ms": statistics.median(mcp),
        "p90_ms": p(mcp, 0.9),
        "in_process_p50_ms": statistics.median(local),
        "added_p50_ms": statistics.median(mcp) - statistics.median(local),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--facts", type=int, default=GOAL_FACTS, help="facts in memory")
    parser.add_argument("--calls", type=int, default=200, help="timed round trips")
    add_results_options(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.facts, args.calls = 30, 10
    from importlib.metadata import version

    row = measure(args.facts, args.calls)
    print(f"MCP search_memory over stdio, {row['facts']:,} facts, {row['calls']} calls")
    print(f"  round trip p50 {row['p50_ms']:.2f} ms, p90 {row['p90_ms']:.2f} ms")
    print(f"  in-process p50 {row['in_process_p50_ms']:.2f} ms (same searches, no MCP)")
    print(f"  MCP adds {row['added_p50_ms']:.2f} ms at p50; goal: p50 <= {GOAL_MS:g} ms")
    if args.facts == GOAL_FACTS:
        verdict = "met" if row["p50_ms"] <= GOAL_MS else "MISSED"
        print(f"  goal {verdict}")
    results = Results(
        "mcp_search",
        about="an MCP search_memory round trip over stdio, and the same search in-process",
        goals={"p50_max_ms": GOAL_MS, "at_facts": GOAL_FACTS},
        options={"calls": args.calls, "mcp": version("mcp")},
    )
    results.add(f"search_stdio_{row['facts']}", **row)
    report_written(results.write(results_dir(args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
