"""Honest figures: leave-one-conversation-out tuning of the ranking weights on LOCOMO dev.

Usage::

    python benchmarks/cv.py [DATA_DIR] [--only recall|injection] [--minilm] [--quick]
                           [--results DIR | --no-results]

Every weight of ``memory/retrieval/recall.py`` and ``memory/retrieval/ranking.py`` was chosen
on the dev conversations, and the figures were measured on the same ones: in-sample figures, which a
conversation nobody tuned on need not reach. Here a small grid of the weights that matter most (and
of simplifications: a parameter set to the value that removes it) is scored on every question once;
then, for each conversation, the grid point best on the *other*
conversations is the one its questions are scored with. The pooled held-out scores are the
cross-validated figure, next to the in-sample figure of the shipped weights and the grid
point each fold chose. ``--minilm`` does the same with local MiniLM over smaller grids
(each point costs minutes on a shared two-core machine). Conversation recall@10 as
``benchmarks/recall.py`` measures it, injection evidence recall per conversation @2000 and
merged @500 as ``benchmarks/locomo_injection.py`` does.

Figures go to ``benchmarks/results/cv.json``. ``--quick`` checks that it runs: the first
``QUICK_POINTS`` points of each grid (the shipped weights first).
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchlib import (  # noqa: E402
    Results,
    add_results_options,
    default_data_dir,
    has_conversations,
    report_written,
)
from benchlib import results_dir as results_dir_of  # noqa: E402
from locomo_injection import (  # noqa: E402
    _cell,
    evidence_recall,
    interval,
    load_conversation,
    local_embedder,
    memory_of,
)
from recall import K, Recall, journal_sessions, load, memory_at  # noqa: E402

from deerflow_nb.memory.retrieval import embedder as embedder_module  # noqa: E402
from deerflow_nb.memory.retrieval import ranking  # noqa: E402
from deerflow_nb.memory.retrieval import recall as recall_module  # noqa: E402
from deerflow_nb.memory.retrieval.injection import select_facts  # noqa: E402

DEFAULT_DATA = default_data_dir("locomo-dev")
# name -> the module attributes it sets, per value. The shipped value comes first.
RECALL_GRID: dict[str, tuple[dict[str, Any], ...]] = {
    "neighbour": tuple({"NEIGHBOUR_WEIGHT": v} for v in (0.3, 0.2, 0.4)),
    "thread": tuple({"THREAD_WEIGHT": v} for v in (0.5, 0.0, 0.3, 0.4)),
    "sides": ({"BEFORE_SHARE": 1.3, "AFTER_SHARE": 0.7}, {"BEFORE_SHARE": 1.0, "AFTER_SHARE": 1.0}),
    "pool": tuple({"POOL": v} for v in (1000, 300)),
}
INJECTION_GRID: dict[str, tuple[dict[str, Any], ...]] = {
    "day": tuple({"DAY_CLUSTER_WEIGHT": v, "NEIGHBOUR_WEIGHT": v} for v in (0.1, 0.0, 0.05, 0.15)),
    "context": tuple({"CONTEXT_WEIGHT": v} for v in (0.2, 0.0, 0.1, 0.3)),
    "feedback": tuple({"PRF_WEIGHT": v} for v in (0.3, 0.0)),
}
# With MiniLM each point costs minutes on two shared cores: the weights that matter most.
MINILM = "local:all-MiniLM-L6-v2"
MINILM_RECALL_GRID = {
    "thread": RECALL_GRID["thread"][:1] + RECALL_GRID["thread"][3:],
    "dense": tuple({"DENSE_SHARE": v} for v in (0.5, 0.4)),
    "zero": ({"DENSE_ZERO": "mean"}, {"DENSE_ZERO": "min"}),
    "pool": RECALL_GRID["pool"],
}
MINILM_INJECTION_GRID = {
    "context": INJECTION_GRID["context"][:1] + INJECTION_GRID["context"][3:],
    "expansion": tuple({"EXPANSION_WEIGHT": v} for v in (0.6, 0.4)),
}
QUICK_POINTS = 3
ABOUT = (
    "Leave-one-conversation-out figures of conversation recall and injection on LOCOMO dev: "
    "weights chosen on the other conversations, beside the shipped weights' in-sample figures"
)


@contextmanager
def patched(module: ModuleType, values: dict[str, Any]) -> Iterator[None]:
    before = {name: getattr(module, name) for name in values}
    for name, value in values.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for name, value in before.items():
            setattr(module, name, value)


def grid_points(grid: dict[str, tuple[dict[str, Any], ...]]) -> list[dict[str, Any]]:
    """Every combination, the shipped one (all first values) first."""
    points = []
    for combo in itertools.product(*grid.values()):
        point: dict[str, Any] = {}
        for part in combo:
            point.update(part)
        points.append(point)
    return points


def leave_one_out(
    scores: list[list[float]], owners: list[str]
) -> tuple[list[float], dict[str, int]]:
    """Each question's score under the grid point best on the other conversations (the
    first of equals: the shipped weights win ties), and the point each fold chose."""
    held_out = [0.0] * len(owners)
    chosen: dict[str, int] = {}
    for conversation in sorted(set(owners)):
        train = [i for i, o in enumerate(owners) if o != conversation]
        means = [statistics.fmean(s[i] for i in train) for s in scores]
        best = max(range(len(scores)), key=lambda p: (round(means[p], 9), -p))
        chosen[conversation] = best
        for i, o in enumerate(owners):
            if o == conversation:
                held_out[i] = scores[best][i]
    return held_out, chosen


def recall_scores(
    data_dir: Path, points: list[dict[str, Any]], embeddings: str | None = None
) -> tuple[list[list[float]], list[str]]:
    files = sorted(data_dir.glob("*.json"))
    sessions: list[dict] = []
    questions: list[dict] = []
    for path in files:
        s, q = load(path)
        sessions += s
        questions += q
    scores = []
    # Every point asks the same questions: their vectors are computed once, not per point.
    memo = patched(embedder_module, {"_QUERY_CACHE_SIZE": len(questions)})
    with tempfile.TemporaryDirectory() as tmp, memo:
        memory = memory_at(Path(tmp), embeddings)
        rank = Recall(memory, journal_sessions(memory, sessions))
        if memory.embedder is not None:
            recall_module.warm(memory.journal, memory.embedder)
        for point in points:
            with patched(recall_module, point):
                scores.append(
                    [
                        len(q["evidence"] & set(rank(q["question"])[:K])) / len(q["evidence"])
                        for q in questions
                    ]
                )
        memory.close()
    return scores, [q["file"] for q in questions]


def injection_scores(
    data_dir: Path, points: list[dict[str, Any]], embedder: Any = None
) -> dict[str, tuple[list[list[float]], list[str]]]:
    files = sorted(data_dir.glob("*.json"))
    per = [(p.stem, *load_conversation(p)) for p in files]
    merged_facts: list[dict] = []
    merged_questions: list[tuple[str, dict]] = []
    for p in files:
        facts, questions = load_conversation(p, prefix=f"{p.stem}:")
        merged_facts += facts
        merged_questions += [(p.stem, q) for q in questions]
    merged = memory_of(merged_facts)
    out: dict[str, tuple[list[list[float]], list[str]]] = {
        "per_conversation_2000": ([], []),
        "merged_500": ([], []),
    }
    for point in points:
        with patched(ranking, point):
            row = []
            for _, facts, questions in per:
                memory = memory_of(facts)
                row += [_recall(memory, q, 2000, embedder) for q in questions]
            out["per_conversation_2000"][0].append(row)
            out["merged_500"][0].append(
                [_recall(merged, q, 500, embedder) for _, q in merged_questions]
            )
    out["per_conversation_2000"][1].extend(name for name, _, qs in per for _ in qs)
    out["merged_500"][1].extend(name for name, _ in merged_questions)
    return out


def _recall(memory: dict[str, Any], question: dict, budget: int, embedder: Any) -> float:
    chosen = select_facts(memory, question["question"], budget, embedder=embedder)
    return evidence_recall(chosen, question["evidence"])


def report(
    key: str,
    name: str,
    points: list[dict[str, Any]],
    scores: list[list[float]],
    owners: list[str],
    results: Results | None,
) -> str:
    held_out, chosen = leave_one_out(scores, owners)
    shipped = scores[0]
    if results is not None:
        results.add(
            key,
            name=name,
            in_sample=interval(shipped),
            cross_validated=interval(held_out),
            grid_points=len(points),
            chosen={c: points[p] for c, p in chosen.items()},
            questions=len(owners),
        )
    picks = ", ".join(f"{c}: #{p}" for c, p in chosen.items())
    return f"| {name} | {_cell(shipped)} | {_cell(held_out)} | {len(points)} | {picks} |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", nargs="?", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--only", choices=("recall", "injection"))
    parser.add_argument(
        "--minilm", action="store_true", help="with local MiniLM, over the smaller MINILM grids"
    )
    add_results_options(parser)
    args = parser.parse_args(argv)
    if not has_conversations(args.data_dir):
        return 2
    results = Results(
        "cv", about=ABOUT, goals={}, options={"data_dir": args.data_dir.name, "quick": args.quick}
    )
    keep = QUICK_POINTS if args.quick else None
    lines = [
        "| figure | in-sample (shipped weights) | leave-one-conversation-out | grid points "
        "| point chosen per held-out conversation (#0: shipped) |",
        "|---|---|---|---|---|",
    ]
    suffix, label = ("_minilm", " + MiniLM") if args.minilm else ("", "")
    if args.only in (None, "recall"):
        points = grid_points(MINILM_RECALL_GRID if args.minilm else RECALL_GRID)[:keep]
        scores, owners = recall_scores(args.data_dir, points, MINILM if args.minilm else None)
        name = f"conversation recall@{K}{label}"
        lines.append(report(f"recall{suffix}", name, points, scores, owners, results))
        print(lines[-1], flush=True)
    if args.only in (None, "injection"):
        points = grid_points(MINILM_INJECTION_GRID if args.minilm else INJECTION_GRID)[:keep]
        with tempfile.TemporaryDirectory() as tmp:
            embedder = local_embedder(Path(tmp)) if args.minilm else None
            for key, (scores, owners) in injection_scores(args.data_dir, points, embedder).items():
                name = "injection, " + (
                    "per conversation @2000" if "2000" in key else "merged @500"
                )
                key = f"injection.{key}{suffix}"
                lines.append(report(key, name + label, points, scores, owners, results))
    print("\n".join(lines))
    report_written(results.write(results_dir_of(args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
