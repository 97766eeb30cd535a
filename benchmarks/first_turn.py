"""Fast from the first turn: a fresh kernel's first turn against its later ones.

Usage::

    python benchmarks/first_turn.py [--wait S] [--turns N] [--no-embeddings] [--quick]
                                    [--results DIR | --no-results]

Each row runs in a fresh Python process, as a kernel: an ``InteractiveShell`` runs
``%load_ext deerflow_nb`` in a cell (timed), the user's first cell arrives ``--wait``
seconds later (5 by default: the warm-up runs meanwhile, ``notebook/warmup.py``), then
``--turns`` more. The rows:

- default install: a ``%%agent`` turn with the offline model (no key) on a home holding
  1,000 facts; the first turn beside the median of the later ones (goal: within 0.3 s);
- ``Memory.injection`` of a new question each turn on a home holding 1,000 facts, the
  first one beside the p50 of the later ones: without embeddings (the same-run baseline),
  then with MiniLM on each runtime (``local:all-MiniLM-L6-v2`` on PyTorch,
  ``local:all-MiniLM-L6-v2-onnx`` on its int8 ONNX export), its fact and word vectors
  left in the journal by a fold (goals: first ≤ 1 s, p50 ≤ 15 ms).

The figures also go to ``benchmarks/results/first_turn.json``. ``--quick``: 100 facts, the
first cell 0.5 s after ``%load_ext``, three later turns, and of the injection rows only
MiniLM on ONNX (unless ``--wait`` or ``--turns`` say otherwise): checks that it runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from benchlib import Results, add_results_options, report_written, results_dir  # noqa: E402

# The injection rows: results key, embeddings setting, label (the first, without
# embeddings, is the same-run baseline of the MiniLM runtimes).
RUNTIMES = (
    ("injection", None, "Without embeddings"),
    ("minilm", "local:all-MiniLM-L6-v2", "MiniLM on PyTorch"),
    ("minilm_onnx", "local:all-MiniLM-L6-v2-onnx", "MiniLM on ONNX int8"),
)
FACTS = 1000
QUICK_FACTS = 100
GOALS = {"agent_first_over_warm_max_s": 0.3, "minilm_first_max_s": 1.0, "minilm_p50_max_ms": 15}
TOPICS = (
    "polars dataframes",
    "churn model",
    "Lisbon office",
    "Rust lessons",
    "Snowflake warehouse",
    "MLflow experiments",
    "Kubernetes deploys",
    "PR-AUC metric",
    "isotonic calibration",
    "weekly sales forecast",
)

PROBE = """
import json, statistics, sys, time
from IPython.core.interactiveshell import InteractiveShell
wait, turns, mode = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
topics = json.loads(sys.argv[4])
shell = InteractiveShell.instance()
start = time.perf_counter()
shell.run_cell("%load_ext deerflow_nb")
load_ext = time.perf_counter() - start
time.sleep(wait)  # the user types the next cell
seconds = []
for i in range(turns + 1):
    topic = topics[i % len(topics)]
    start = time.perf_counter()
    if mode == "agent":
        shell.run_cell(f"%%agent\\nWhat do you know about my {topic} ({i})?")
    else:
        from deerflow_nb.notebook.session import get_session
        get_session(shell).memory.injection(f"Tell me about the {topic}, take {i}")
    seconds.append(time.perf_counter() - start)
print(json.dumps({"load_ext": load_ext, "first": seconds[0], "later": seconds[1:]}))
"""


def seed_home(home: Path, embeddings: str | None, facts: int = FACTS) -> None:
    """A home with ``facts`` facts (and, with embeddings, their vectors as a fold leaves
    them), written in this process before the kernel starts."""
    from deerflow_nb.config import load_settings
    from deerflow_nb.memory import Memory
    from deerflow_nb.memory.retrieval.terms import texts_to_embed
    from deerflow_nb.memory.store import MemoryStore, empty_memory
    from deerflow_nb.storage.db import now_iso

    if embeddings:
        (home / "config.yaml").write_text(f"memory:\n  embeddings: {embeddings}\n")
    data = empty_memory()
    stamp = now_iso()
    data["facts"] = [
        {
            "id": f"fact_{i:05d}",
            "content": f"Note {i} about the {TOPICS[i % len(TOPICS)]}: detail {i * 7 % 101}",
            "category": "context",
            "confidence": 0.9,
            "createdAt": stamp,
            "source": "bench",
        }
        for i in range(facts)
    ]
    MemoryStore(home / "memory.json").write(data)
    memory = Memory(home, settings=load_settings(home))
    if memory.embedder is not None:  # what a fold leaves: fact and word vectors in the journal
        memory.embedder.warm(texts_to_embed([f["content"] for f in data["facts"]]))
    memory.close()


def run(mode: str, embeddings: str | None, wait: float, turns: int, facts: int = FACTS) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        seed_home(home, embeddings, facts)
        env = dict(os.environ, DEERFLOW_NB_HOME=str(home), PYTHONPATH=str(ROOT))
        env.pop("OPENAI_API_KEY", None)  # the offline model
        argv = [sys.executable, "-c", PROBE, str(wait), str(turns), mode, json.dumps(TOPICS)]
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
        # The turns' own output may be flushed after the figures' line: find it by its key.
        (line,) = [x for x in proc.stdout.splitlines() if x.startswith('{"load_ext"')]
        return json.loads(line)


def median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wait", type=float, help="seconds before the first cell (5)")
    parser.add_argument("--turns", type=int, help="later turns timed (20)")
    parser.add_argument("--no-embeddings", action="store_true")
    add_results_options(parser)
    args = parser.parse_args(argv)
    if args.wait is None:
        args.wait = 0.5 if args.quick else 5.0
    args.turns = args.turns or (3 if args.quick else 20)
    facts = QUICK_FACTS if args.quick else FACTS
    results = Results(
        "first_turn",
        about="A fresh kernel's first turn beside its later ones, the user's first cell "
        f"arriving {args.wait:g} s after %load_ext",
        goals=GOALS,
        options={"wait_s": args.wait, "turns": args.turns, "facts": facts},
    )
    agent = run("agent", None, args.wait, args.turns, facts)
    warm = median(agent["later"])
    results.add("agent", first_s=agent["first"], warm_s=warm, load_ext_ms=agent["load_ext"] * 1000)
    print(
        f"default install, %%agent (offline model), {facts} facts: %load_ext cell "
        f"{agent['load_ext'] * 1000:.0f} ms; first turn {agent['first']:.3f} s, later turns "
        f"(median) {warm:.3f} s: first - warm = {agent['first'] - warm:.3f} s "
        f"(goal <= {GOALS['agent_first_over_warm_max_s']} s)"
    )
    quick_rows = ("injection",) if args.no_embeddings else ("minilm_onnx",)
    for key, spec, label in RUNTIMES:
        if args.quick and key not in quick_rows:
            continue
        if spec is None or not args.no_embeddings:
            dense = run("injection", spec, args.wait, args.turns, facts)
            p50 = median(dense["later"]) * 1000
            results.add(
                key,
                embeddings=spec,
                first_s=dense["first"],
                p50_ms=p50,
                load_ext_ms=dense["load_ext"] * 1000,
            )
            print(
                f"{label}, Memory.injection at {facts} facts: first {dense['first']:.3f} s, "
                f"p50 of later ones {p50:.1f} ms (MiniLM goals: first <= "
                f"{GOALS['minilm_first_max_s']} s, p50 <= {GOALS['minilm_p50_max_ms']} ms)",
                flush=True,
            )
    report_written(results.write(results_dir(args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
