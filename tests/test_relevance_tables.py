"""The README's relevance, calibration and cross-validation tables come from the results
files (written here by the benchmarks' own writer; no benchmark runs, no data is read)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.append(str(ROOT / "benchmarks"))

import relevance_tables  # noqa: E402  (scripts/, as cog reads it)
from benchlib import Results  # noqa: E402

MACHINE = {"cpus": 2, "python": "3.11.7", "load_average": [0.5, 0.4, 0.3]}
GOALS = {
    "off_topic_recall_max": 0.05,
    "off_topic_search_max": 0.05,
    "statement_first_min": 0.8,
    "right_fact_first_min": 0.8,
    "no_shared_word_max": 0.2,
}


def interval(mean: float) -> dict[str, float]:
    return {"mean": mean, "low": mean - 0.02, "high": mean + 0.02}


def test_tables_render_every_figure_with_its_goal_and_date(tmp_path: Path) -> None:
    run = Results(
        "relevance",
        about="t",
        goals=GOALS,
        options={},
        date="2026-01-01T10:00:00Z",
        machine_info=MACHINE,
    )
    for key, name, n, value in (
        ("off_topic_recall_returns_something", "off-topic recall", 60, 0.033),
        ("notebook_statement_is_the_first_recalled", "statement first", 44, 0.909),
        ("off_topic_recall_returns_something_held_out", "off-topic recall (held-out)", 42, 0.024),
    ):
        run.add(f"default.{key}", name=name, n=n, value=interval(value))
    run.add(
        "calibration.minilm.recall.cosine",
        on_topic=800,
        off_topic=90,
        held_out=67,
        on_percentiles=[0.39, 0.46, 0.54],
        off_percentiles=[0.22, 0.29, 0.31, 0.53],
        floor=0.36,
        coverage_needed=0.2,
        on_topic_kept=0.98,
        off_topic_through=0.03,
        held_out_through=0.02,
    )
    run.add(
        "calibration.default.recall.coverage",
        on_topic=800,
        off_topic=90,
        on_percentiles=[0.34, 0.51, 0.69],
        off_percentiles=[0.18, 0.27, 0.34, 0.46],
        floor=0.34,
        on_topic_kept=0.9,
        off_topic_through=0.03,
    )
    run.write(tmp_path)
    cv = Results(
        "cv", about="t", goals={}, options={}, date="2026-01-01T10:00:00Z", machine_info=MACHINE
    )
    cv.add(
        "recall",
        name="conversation recall@10",
        in_sample=interval(0.708),
        cross_validated=interval(0.705),
        grid_points=24,
        chosen={},
        questions=760,
    )
    cv.write(tmp_path)

    table = relevance_tables.relevance_table(tmp_path)
    assert "| off-topic recall | ≤ 0.05 | 0.033 (0.013–0.053) (60 queries) |" in table
    assert "| statement first | ≥ 0.8 | 0.909 (0.889–0.929) (44 queries) |" in table
    assert "Measured 2026-01-01" in table
    calibration = relevance_tables.calibration_table(tmp_path)
    assert (
        "| default | recall | coverage, queries of 3+ terms | 0.34 / 0.51 / 0.69 | 0.18 / 0.27 "
        in (calibration)
    )
    # A row from before the held-out set shows none; the similarity path's coverage shows.
    assert "| 0.34 | 0.90 | 0.03 | – |" in calibration
    assert "| minilm | recall | cosine and coverage ≥ 0.2, OR coverage |" in calibration
    assert "| 0.36 | 0.98 | 0.03 | 0.02 |" in calibration
    for generated in (table, calibration, relevance_tables.cv_table(tmp_path)):
        header, rule = [line for line in generated.splitlines() if line.startswith("|")][:2]
        assert header.count("|") == rule.count("|"), "a markdown table's rule must match its header"
    assert "| off-topic recall (held-out) | ≤ 0.05 | 0.024 (0.004–0.044) (42 queries) |" in table
    assert "| conversation recall@10 | 0.708 (0.688–0.728) | 0.705 (0.685–0.725) | 24 |" in (
        relevance_tables.cv_table(tmp_path)
    )
    empty = tmp_path / "none"
    assert relevance_tables.cv_table(empty).startswith("*Not measured yet")


def test_the_first_turn_table_shows_each_runtime_against_its_goals(tmp_path: Path) -> None:
    goals = {"agent_first_over_warm_max_s": 0.3, "minilm_first_max_s": 1.0, "minilm_p50_max_ms": 15}
    run = Results(
        "first_turn",
        about="t",
        goals=goals,
        options={},
        date="2026-01-01T10:00:00Z",
        machine_info=MACHINE,
    )
    run.add("agent", first_s=0.243, warm_s=0.017, load_ext_ms=8.5)
    run.add("injection", embeddings=None, first_s=0.01, p50_ms=1.3, load_ext_ms=9.0)
    run.add("minilm", embeddings="torch", first_s=4.6, p50_ms=88.6, load_ext_ms=9.0)
    run.add("minilm_onnx", embeddings="onnx", first_s=0.4, p50_ms=6.2, load_ext_ms=9.0)
    run.write(tmp_path)

    table = relevance_tables.first_turn_table(tmp_path)
    assert "| 243 ms | 17.0 ms | first within 0.3 s of warm: met |" in table
    assert "on PyTorch (`[embeddings]`), ranked injection | 9.00 ms | 4,600 ms | 88.6 ms" in table
    assert "first ≤ 1 s: missed; p50 ≤ 15 ms: missed |" in table
    assert "| without embeddings, ranked injection | 9.00 ms | 10 ms | 1.30 ms | same-run" in table
    assert "| 400 ms | 6.20 ms | first ≤ 1 s: met; p50 ≤ 15 ms: met |" in table
    assert relevance_tables.first_turn_table(tmp_path / "none").startswith("*Not measured yet")
