"""The benchmark tables of docs/benchmarks.md come from the results files, not from a typed number.

A tiny results fixture is written to ``tmp_path`` through the benchmarks' own writer
(``benchmarks/benchlib.py``); no benchmark runs and no LOCOMO data is read.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.append(str(ROOT / "benchmarks"))

import bench_tables  # noqa: E402  (scripts/, as cog reads it)
from benchlib import Results  # noqa: E402  (benchmarks/, as the benchmarks write it)

MACHINE = {"cpus": 2, "python": "3.11.7", "load_average": [0.5, 0.4, 0.3]}
FIRST = "2026-01-01T10:00:00Z"
SECOND = "2026-02-01T10:00:00Z"


def results(name: str, date: str = FIRST, **kwargs: Any) -> Results:
    kwargs.setdefault("goals", {})
    kwargs.setdefault("options", {})
    return Results(name, about="test", date=date, machine_info=MACHINE, **kwargs)


def interval(mean: float) -> dict[str, float]:
    return {"mean": mean, "low": mean - 0.02, "high": mean + 0.02}


LOCOMO_GOALS = {
    "per_conversation": {"ours": 0.95, "ours_minilm": 0.98},
    "merged": {"ours": 0.85, "ours_minilm": 0.90},
    "ranked_over_classic_max": 1.5,
    "first_call_max_ms": 300.0,
}


def write_locomo(directory: Path, *, ours_merged: float = 0.846, minilm: bool = True) -> None:
    run = results("locomo_injection", FIRST if minilm else SECOND, goals=LOCOMO_GOALS, options={})
    run.options = {"embeddings": "local:all-MiniLM-L6-v2" if minilm else None}
    run.add(
        "quality.setup",
        conversations=2,
        conversation_names=["26", "30"],
        questions=40,
        facts=120,
        categories=[1, 2, 3, 4],
        per_conversation_budget=2000,
        merged_budget=500,
        realistic_confidences=[0.8, 0.9],
        flat_confidence=0.9,
        bootstrap_rounds=2000,
        halves=[["26"], ["30"]],
    )
    rows = {"confidence": (0.4, 0.03), "bm25": (0.88, 0.69), "ours": (0.965, ours_merged)}
    if minilm:
        rows["ours_minilm"] = (0.981, 0.895)
    for setting in ("realistic", "flat"):
        for key, (conv, merged) in rows.items():
            run.add(
                f"quality.{setting}.{key}",
                name=key,
                confidences=setting,
                per_conversation=interval(conv),
                merged=interval(merged),
                p50_ms=0.4,
            )
    run.add(
        "speed",
        facts=10_000,
        ranked_ms=1.8,
        no_context_ms=1.2,
        classic_ms=1.5,
        ranked_over_classic=1.2,
        first_call_ms=38.0,
        first_call_classic_ms=1.9,
        cold_ms=168.0,
        cold_bm25s_ms=152.0,
    )
    run.write(directory)


def write_speed_rest(directory: Path, fold_p50: float = 5.2) -> None:
    goals = {"fold_p50_max_ms": 5.0, "fold_over_json_max": 0.5, "at_facts": 1000}
    fold = results("fold", goals=goals)
    fold.add(
        "facts.1000",
        facts=1000,
        fold_p50_ms=fold_p50,
        fold_p95_ms=7.0,
        json_p50_ms=6.7,
        fold_over_json=fold_p50 / 6.7,
        durable_p50_ms=0.8,
    )
    fold.write(directory)
    turn = results("turn_overhead", goals={"added_max_ms": 2.0, "at_facts": 10_000})
    turn.add("memory_off", facts=0, overhead_ms=0.8, journal_ms=0.5, added_ms=0.0)
    turn.add(
        "facts.10000",
        facts=10_000,
        overhead_ms=3.2,
        inject_ms=1.5,
        enqueue_ms=0.6,
        journal_ms=0.7,
        memory_off_ms=0.8,
        added_ms=2.4,
    )
    turn.write(directory)
    load_ext = results("load_ext", goals={"load_ext_max_ms": 20.0})
    load_ext.add("load_ext", processes=7, load_ext_ms=5.6, ipython_ms=66.9)
    load_ext.write(directory)


@pytest.fixture
def results_dir(tmp_path: Path) -> Path:
    write_locomo(tmp_path)
    write_speed_rest(tmp_path)
    return tmp_path


def test_tables_render_the_figures_of_the_results_files(results_dir: Path) -> None:
    table = bench_tables.locomo_table(results_dir)
    assert "| **ours, lexical (default install)** |" in table and "**0.846** (0.826–0.866)" in table
    assert "| flat 0.9 |" in table and "2 conversations (26 and 30)" in table
    assert "Measured 2026-01-01 (2 CPUs, Python 3.11.7, load average 0.5" in table
    figures = bench_tables.locomo_figures(results_dir)
    assert "merged ≥ 0.85 is missed by 0.004 (0.846), inside its interval" in figures
    assert "per-conversation ≥ 0.95 is met (0.965)" in figures
    speed = bench_tables.speed_table(results_dir)
    assert "| ranked injection, 10,000 facts | 1.80 ms | DeerFlow classic 1.50 ms (1.20×)" in speed
    assert "≤ 1.5×: met" in speed and "≤ 5 ms: missed" in speed and "≤ 2 ms: missed" in speed
    assert "IPython shell start 66.9 ms" in speed
    assert "missed by 0.20 ms" in bench_tables.speed_figures(results_dir)
    assert "(6.70 ms), it takes 0.78× as long (goal ≤ 0.5×: missed)" in bench_tables.speed_figures(
        results_dir
    )


def test_a_changed_figure_changes_the_table(results_dir: Path, tmp_path: Path) -> None:
    before = (bench_tables.locomo_table(results_dir), bench_tables.locomo_figures(results_dir))
    speed_before = bench_tables.speed_table(results_dir)
    write_locomo(results_dir, ours_merged=0.861)
    write_speed_rest(results_dir, fold_p50=4.9)
    after = (bench_tables.locomo_table(results_dir), bench_tables.locomo_figures(results_dir))
    assert after != before
    assert "**0.861** (0.841–0.881)" in after[0] and "0.846" not in after[0]
    assert "merged ≥ 0.85 is met (0.861)" in after[1]
    speed_after = bench_tables.speed_table(results_dir)
    assert speed_after != speed_before and "| 4.90 ms |" in speed_after
    assert "≤ 5 ms: met" in speed_after


def test_a_partial_run_keeps_the_skipped_rows_dated(results_dir: Path) -> None:
    write_locomo(results_dir, ours_merged=0.85, minilm=False)  # --no-embeddings, a month on
    data = json.loads((results_dir / "locomo_injection.json").read_text(encoding="utf-8"))
    assert data["last_run"] == SECOND
    assert data["figures"]["quality.realistic.ours_minilm"]["measured"] == FIRST
    assert data["figures"]["quality.realistic.ours"]["measured"] == SECOND
    assert set(data["runs"]) == {FIRST, SECOND}
    table = bench_tables.locomo_table(results_dir)
    assert "| **ours + local MiniLM embeddings**¹ |" in table
    assert "Measured 2026-02-01" in table
    assert "¹ Kept from an earlier run, 2026-01-01 (with MiniLM" in table
    # A full run replaces every row: the earlier run is no longer referenced, nor marked.
    write_locomo(results_dir, minilm=True)
    data = json.loads((results_dir / "locomo_injection.json").read_text(encoding="utf-8"))
    assert set(data["runs"]) == {FIRST}
    assert "¹" not in bench_tables.locomo_table(results_dir)


def test_missing_results_say_so(tmp_path: Path) -> None:
    for render in (
        bench_tables.locomo_table,
        bench_tables.locomo_figures,
        bench_tables.speed_table,
        bench_tables.speed_figures,
        bench_tables.recall_table,
        bench_tables.recall_figures,
    ):
        assert render(tmp_path) == bench_tables.NOT_MEASURED
    assert bench_tables.aging_table(results_dir=tmp_path) == bench_tables.NOT_MEASURED


def test_recall_and_aging_tables(tmp_path: Path) -> None:
    recall = results("recall", goals={"recall": {"recall": 0.70}, "p95_max_ms": 50.0})
    recall.add(
        "quality.setup",
        conversations=2,
        conversation_names=["26", "30"],
        first_half=["26"],
        threads=10,
        messages=200,
        questions=30,
        categories=[1, 2, 3, 4],
        k=10,
        bootstrap_rounds=2000,
        index_build_ms=120.0,
    )
    recall.add(
        "quality.recall",
        name="recall",
        recall=interval(0.725),
        halves=[0.74, 0.71],
        p50_ms=6.8,
        p95_ms=13.0,
    )
    recall.write(tmp_path)
    table = bench_tables.recall_table(tmp_path)
    row = "| **`Memory.recall` (default install)** | **0.725** (0.705–0.745) | 0.740 / 0.710 |"
    assert f"{row} 6.8 / 13.0 ms |" in table
    assert "halves: 26 / 30" in table
    assert "≥ 0.70 on the default install is met by 0.025 (0.725)" in bench_tables.recall_figures(
        tmp_path
    )

    aging = results("aging")
    aging.add(
        "seed20.setup",
        seed=20,
        days=365,
        sessions_per_week=2,
        project_weeks=[3, 10],
        sessions=100,
        statements=190,
        questions=340,
        still_true=33,
        ended=32,
        stable=28,
        projects=27,
        goals=10,
        once=30,
        staleness_days=180,
    )
    for key, kept, dead in (("classic", 20, 13), ("blend", 27, 8)):
        aging.add(
            f"seed20.max40.{key}",
            still_true_kept=kept,
            still_true=33,
            dead_kept=dead,
            once_kept=0,
            evictions=30,
        )
    aging.write(tmp_path)
    assert "| 40 | **blend + scope gate** (default) | **27 / 33** | **8** |" in (
        bench_tables.aging_table(results_dir=tmp_path)
    )
    assert "keeps 7 more still-true facts" in bench_tables.aging_figures(results_dir=tmp_path)


def test_embedding_runtime_table(tmp_path: Path) -> None:
    assert bench_tables.embedding_runtime_table(tmp_path) == bench_tables.NOT_MEASURED
    run = results("embedding_runtime", goals={})
    run.add("torch", installed_mb=1183.2, cold_start_s=31.1, p50_ms_per_query=33.7)
    run.add("onnx", installed_mb=118.4, cold_start_s=1.92, p50_ms_per_query=2.4)
    run.write(tmp_path)
    table = bench_tables.embedding_runtime_table(tmp_path)
    assert "| PyTorch (`[embeddings]`) | 1,183 MB | 31.1 s |" in table
    assert "| ONNX int8 (`[embeddings-lite]`) | 118 MB | 1.9 s |" in table
    assert "LOCOMO" not in table  # no ranking rows measured: no ranking columns
    run.add("ranking_torch", per_conversation=interval(0.985), merged=interval(0.903))
    run.add("ranking_onnx", per_conversation=interval(0.984), merged=interval(0.899))
    run.add("agreement", texts=1210, cosine_min=0.9981, cosine_p01=0.999, cosine_mean=0.9996)
    run.write(tmp_path)
    table = bench_tables.embedding_runtime_table(tmp_path)
    assert "merged @500 |" in table and "0.899" in table and "0.903" in table
    assert "1,210 LOCOMO facts" in table and "0.9981 at the least" in table
