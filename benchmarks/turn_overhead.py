"""Time a lead-agent turn spends outside the model call, with and without memory.

Usage::

    python benchmarks/turn_overhead.py [--turns N] [--quick] [--results DIR | --no-results]

Each row is one configuration of the same offline-model turns (one model call, no tools)
in a fresh home: memory off, and memory on with 100 and with 10,000 facts in
memory.json; the rows take turns, one turn each in rotation, so drift in the machine's
speed moves them alike. Turn after turn asks a different question (``MESSAGES``), as a
person does: each turn ranks memory for its own words and injects a block of its own,
whose tokens are counted anew (one question asked forty times would find every count
cached). "Overhead" is the turn's wall time minus its model call; the columns split
it by middleware (journal writes, memory injection, memory enqueue, the summarization
check). "Added" is the overhead beyond the memory-off turn; the goal is at most 2 ms at
10,000 facts. The memory queue's debounce is set far out so no fold runs during timing.
The figures also go to ``benchmarks/results/turn_overhead.json``. ``--quick``: 1,000 facts
instead of 10,000 and three turns per row (unless ``--turns`` says otherwise).
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from benchlib import Results, add_results_options, report_written, results_dir  # noqa: E402

from deerflow_nb import Agent  # noqa: E402
from deerflow_nb.config import load_settings  # noqa: E402
from deerflow_nb.memory import Memory  # noqa: E402
from deerflow_nb.memory.store import MemoryStore, empty_memory  # noqa: E402
from deerflow_nb.storage.db import now_iso  # noqa: E402

GOAL_MS = 2.0
GOAL_AT = 10_000  # facts
CATEGORIES = ("preference", "knowledge", "context", "behavior", "goal")
_TOPIC_TEXT = """
    polars pandas duckdb spark sql parquet arrow numpy scipy sklearn xgboost pytorch jax
    matplotlib seaborn plotly altair jupyter vscode git docker kubernetes airflow dbt
    snowflake bigquery postgres redis kafka churn revenue forecast cohort retention
    experiment ab-test latency dashboard report notebook pipeline feature model
"""
TOPICS = _TOPIC_TEXT.split()
MESSAGE = "Which dataframe library should I use for the churn forecast notebook?"
MESSAGES = (
    MESSAGE,
    "Plot the weekly retention cohort with altair, please.",
    "Tune xgboost for the revenue model with a small grid.",
    "Load the parquet files from bigquery into duckdb for the dashboard.",
    "Why is the airflow pipeline latency so high on kubernetes?",
    "Which metric fits the ab-test in the experiment notebook?",
    "Which sklearn feature pipeline did I use with pytorch?",
    "Set up a docker image with jupyter and polars for the team.",
    "Compare spark and snowflake for the cohort report.",
    "Should redis cache the kafka consumer offsets?",
    "Fit a scipy forecast on the postgres revenue table.",
    "Where is the dbt model for churn features in git?",
)
COLUMNS = {
    "JournalMiddleware": "journal",
    "MemoryInjectionMiddleware": "inject",
    "MemoryEnqueueMiddleware": "enqueue",
    "SummarizationMiddleware": "summ.chk",
}
# The same columns' names in the results file (``<name>_ms``).
FIGURE_NAMES = {
    "JournalMiddleware": "journal",
    "MemoryInjectionMiddleware": "inject",
    "MemoryEnqueueMiddleware": "enqueue",
    "SummarizationMiddleware": "summarization_check",
}


def seed_facts(home: Path, count: int) -> None:
    """Write ``count`` varied facts straight into memory.json (DeerFlow's schema)."""
    rng = random.Random(count)
    data = empty_memory()
    stamp = now_iso()
    data["facts"] = [
        {
            "id": f"fact_{i:05d}",
            "content": f"Uses {rng.choice(TOPICS)} with {rng.choice(TOPICS)} for "
            f"{rng.choice(TOPICS)} work in project {i % 97}",
            "category": rng.choice(CATEGORIES),
            "confidence": round(rng.uniform(0.7, 1.0), 2),
            "createdAt": stamp,
            "source": f"thread-{i % 50}",
        }
        for i in range(count)
    ]
    store = MemoryStore(home / "memory.json")
    with store.locked():
        store.write(data)


def measure(configs: list[tuple[str, int | None]], turns: int) -> dict[str, dict[str, Any]]:
    """Overheads (ms) of ``turns`` turns per configuration (``None`` facts: memory off for
    the turn), each in its own home. The configurations take turns, one turn each in
    rotation, so a machine that speeds up or slows down during the run moves every row
    alike and the added figures compare like with like."""
    with contextlib.ExitStack() as stack:
        agents = {}
        for label, facts in configs:
            home = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            settings = load_settings(home)
            settings.memory.debounce_seconds = 3600
            settings.memory.max_facts = 20_000
            if facts:
                seed_facts(home, facts)
            memory = stack.enter_context(Memory(home, settings=settings))
            agent = Agent(settings=settings, model="offline", memory=memory)
            for _ in range(3):  # warm caches: tokenizer, ranking index, sqlite pages
                agent.run(MESSAGE, thread="warmup", use_memory=facts is not None)
            agents[label] = (agent, facts is not None)
        rows: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in configs}
        for i in range(turns):
            for label, (agent, use_memory) in agents.items():
                message = MESSAGES[i % len(MESSAGES)]
                agent.run(message, thread=f"bench-{i}", use_memory=use_memory)
                turn = agent.last_turn
                if turn.tool_calls:  # a tool's work is not memory's overhead
                    raise SystemExit(f"{message!r} made the offline model call a tool")
                rows[label].append(
                    {
                        "overhead": turn.overhead_seconds * 1000,
                        **{k: v * 1000 for k, v in turn.timings.items()},
                        "facts_injected": turn.facts_injected,
                    }
                )
    return {label: _summary(found) for label, found in rows.items()}


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One configuration's medians (and p90) over its turns."""
    return {
        "overhead": statistics.median(r["overhead"] for r in rows),
        "p90": sorted(r["overhead"] for r in rows)[int(0.9 * (len(rows) - 1))],
        **{c: statistics.median(r.get(c, 0.0) for r in rows) for c in COLUMNS},
        "facts_injected": rows[-1]["facts_injected"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, help="timed turns per row (40; --quick: 3)")
    add_results_options(parser)
    args = parser.parse_args(argv)
    args.turns = args.turns or (3 if args.quick else 40)
    most = 1_000 if args.quick else GOAL_AT
    figures = Results(
        "turn_overhead",
        about="Time a lead-agent turn spends outside the model call, memory on against off",
        goals={"added_max_ms": GOAL_MS, "at_facts": GOAL_AT},
        options={"turns": args.turns, "model": "offline"},
    )
    configs = [("memory off", None), ("100 facts", 100), (f"{most:,} facts", most)]
    results = measure(configs, args.turns)
    base = results["memory off"]["overhead"]
    print(f"Turn overhead outside the model call (median of {args.turns} turns, ms)\n")
    header = f"{'memory':<14}{'overhead':>9}{'p90':>8}"
    header += "".join(f"{name:>9}" for name in COLUMNS.values())
    print(header + f"{'facts in':>9}{'added':>8}")
    for label, r in results.items():
        added = "" if label == "memory off" else f"{r['overhead'] - base:8.2f}"
        parts = "".join(f"{r[key]:9.2f}" for key in COLUMNS)
        print(
            f"{label:<14}{r['overhead']:9.2f}{r['p90']:8.2f}{parts}{r['facts_injected']:9d}{added}"
        )
    added = results[f"{most:,} facts"]["overhead"] - base
    verdict = "meets" if added <= GOAL_MS else "misses"
    goal = f"the {GOAL_MS:g} ms goal" + ("" if most == GOAL_AT else f" at {GOAL_AT:,}")
    print(f"\nAdded at {most:,} facts: {added:.2f} ms ({verdict} {goal})")
    for label, facts in configs:
        r = results[label]
        figures.add(
            "memory_off" if facts is None else f"facts.{facts}",
            label=label,
            facts=facts or 0,
            turns=args.turns,
            overhead_ms=r["overhead"],
            p90_ms=r["p90"],
            **{f"{name}_ms": r[key] for key, name in FIGURE_NAMES.items()},
            facts_injected=r["facts_injected"],
            memory_off_ms=base,
            added_ms=r["overhead"] - base,
        )
    report_written(figures.write(results_dir(args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
