"""Cost of one memory fold, model call excluded, on stores of 100, 1,000 and 10,000 facts.

A fold here is ``Memory.apply``: take the memory.json lock, re-read the file, apply one
diff (three new facts, one removal, one section), write the file atomically with fsync,
and journal the version snapshot and its events. Two baselines, measured in the same run
on the same file: what DeerFlow's ``FileMemoryStorage`` does to load and save,
``json.load`` + ``json.dump(indent=2)`` to a temp file renamed over the target, with no
lock and no fsync; and the floor of any durable write, the same bytes written to a temp
file, fsynced, renamed over the file and the folder fsynced (what every fold must pay on
this disk, whatever its serializer). A fold, a JSON save and a durable write take turns,
one of each in rotation, so drift in the machine's speed moves them alike.
Goals at 1,000 facts: 5 ms, and at most half the JSON load + dump.

    python benchmarks/fold.py [--quick] [--results DIR | --no-results]

``--quick``: 100 and 1,000 facts, three folds each (checks that it runs).

The figures also go to ``benchmarks/results/fold.json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import Results, add_results_options, report_written, results_dir  # noqa: E402

from deerflow_nb.config import load_settings  # noqa: E402
from deerflow_nb.memory import Memory  # noqa: E402
from deerflow_nb.memory.store import MemoryStore, empty_memory  # noqa: E402

GOAL_MS = 5.0
GOAL_AT = 1_000
GOAL_SHARE = 0.5  # and at most this share of the JSON load + dump, measured alongside
RUNS = {100: 40, 1_000: 40, 10_000: 10}
QUICK_RUNS = {100: 3, 1_000: 3}
TOPICS = ["polars", "pandas", "spark", "duckdb", "rust", "julia", "sql", "dbt", "airflow"]


def build_store(home: Path, size: int) -> Memory:
    settings = load_settings(home)
    settings.memory.max_facts = size * 2
    data = empty_memory()
    data["facts"] = [
        {
            "id": f"fact_{i:08x}",
            "content": f"Works with {TOPICS[i % len(TOPICS)]} on project P{i} for team T{i % 37}",
            "category": "context",
            "confidence": 0.7 + (i % 30) / 100,
            "createdAt": "2025-01-01T00:00:00.000Z",
            "source": f"thread-{i % 97}",
        }
        for i in range(size)
    ]
    store = MemoryStore(settings.memory_path)
    with store.locked():
        store.write(data)
    return Memory(settings=settings)


def diff_for(run: int, remove_id: str) -> dict:
    return {
        "user": {"topOfMind": {"summary": f"Benchmark run {run}", "shouldUpdate": True}},
        "newFacts": [
            {
                "content": f"Benchmarks fold number {run} variant {v}",
                "category": "goal",
                "confidence": 0.9,
            }
            for v in ("alpha", "beta", "gamma")
        ],
        "factsToRemove": [remove_id],
    }


def fold_once(mem: Memory, run: int) -> float:
    """One fold (ms): three new facts, one removal, one section."""
    diff = diff_for(run, mem.data["facts"][0]["id"])
    start = time.perf_counter()
    mem.apply(diff, source=f"bench-{run}")
    return (time.perf_counter() - start) * 1000


def json_once(path: Path) -> float:
    """DeerFlow's load and save (ms), as its ``FileMemoryStorage`` does them: ``json.load``
    the file; ``json.dump(indent=2, ensure_ascii=False)`` to a temp file replaced over the
    target; no lock, no fsync."""
    start = time.perf_counter()
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    target = path.with_name("baseline.json")
    temp = target.with_suffix(".tmp")
    with open(temp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, ensure_ascii=False)
    temp.replace(target)
    return (time.perf_counter() - start) * 1000


def durable_once(path: Path) -> float:
    """The file's bytes written durably (ms): temp file, fsync, rename, folder fsync."""
    payload = path.read_bytes()
    start = time.perf_counter()
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "wb") as fh:
        fh.write(payload)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path.with_name("durable.json"))
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
    return (time.perf_counter() - start) * 1000


def time_rotation(mem: Memory, runs: int) -> tuple[list[float], list[float], list[float]]:
    """``runs`` folds, JSON saves and durable writes of the same file, one of each in turn,
    so drift in the machine's speed moves the fold and its baselines alike."""
    folds, saves, durable = [], [], []
    for run in range(runs):
        gc.collect()  # each starts with none of the others' garbage left to collect
        folds.append(fold_once(mem, run))
        gc.collect()
        saves.append(json_once(mem.path))
        gc.collect()
        durable.append(durable_once(mem.path))
    return folds, saves, durable


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_results_options(parser)
    args = parser.parse_args(argv)
    runs = QUICK_RUNS if args.quick else RUNS
    results = Results(
        "fold",
        about="One memory fold (Memory.apply, model call excluded) against DeerFlow's "
        "json load + dump and a durable write of the same file",
        goals={"fold_p50_max_ms": GOAL_MS, "fold_over_json_max": GOAL_SHARE, "at_facts": GOAL_AT},
        options={"sizes": list(runs), "runs": {str(k): v for k, v in runs.items()}},
    )
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size, count in runs.items():
            home = Path(tmp) / f"home-{size}"
            mem = build_store(home, size)
            mem.apply(diff_for(-1, mem.data["facts"][0]["id"]), source="warm-up")
            folds, base, durable = time_rotation(mem, count)
            kib = mem.path.stat().st_size / 1024
            rows.append((size, kib, folds, base, durable))
            mem.close()
    print(
        f"{'facts':>7} {'file KiB':>9} {'fold p50':>9} {'fold p95':>9} "
        f"{'json p50':>9} {'json p95':>9} {'fsync p50':>10}  (ms; json = DeerFlow-style "
        "load + dump(indent=2), no fsync; fsync = a durable write of the same bytes alone)"
    )
    for size, kib, folds, base, durable in rows:
        print(
            f"{size:>7,} {kib:>9.0f} {statistics.median(folds):>9.2f} {pct(folds, 0.95):>9.2f} "
            f"{statistics.median(base):>9.2f} {pct(base, 0.95):>9.2f} "
            f"{statistics.median(durable):>10.2f}"
        )
        results.add(
            f"facts.{size}",
            facts=size,
            folds=len(folds),
            file_kib=kib,
            fold_p50_ms=statistics.median(folds),
            fold_p95_ms=pct(folds, 0.95),
            json_p50_ms=statistics.median(base),
            json_p95_ms=pct(base, 0.95),
            fold_over_json=statistics.median(folds) / statistics.median(base),
            durable_p50_ms=statistics.median(durable),
        )
    row = next(r for r in rows if r[0] == GOAL_AT)
    at_1000 = statistics.median(row[2])
    floor = statistics.median(row[4])
    verdict = "meets" if at_1000 <= GOAL_MS else "misses"
    print(
        f"goal: fold at most {GOAL_MS:g} ms at 1,000 facts -> p50 {at_1000:.1f} ms ({verdict} it; "
        f"{at_1000 - floor:.1f} ms of it beyond the durable write's {floor:.1f} ms)"
    )
    share = at_1000 / statistics.median(row[3])
    verdict = "meets" if share <= GOAL_SHARE else "misses"
    print(
        f"goal: fold at most {GOAL_SHARE:g}x the JSON load + dump at 1,000 facts -> "
        f"{share:.2f}x ({verdict} it)"
    )
    report_written(results.write(results_dir(args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
