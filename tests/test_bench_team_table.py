"""docs/benchmarks.md's team table comes from ``benchmarks/results/team.json``: each figure
with its goal, met or missed as the numbers say, and a line asking for a run without it."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.append(str(ROOT / "benchmarks"))

import team_tables  # noqa: E402  (scripts/, as cog reads it)
from bench_tables import NOT_MEASURED  # noqa: E402
from benchlib import Results  # noqa: E402  (benchmarks/, as team.py writes it)

FIGURES = {
    "lost": 0, "applied_twice": 0, "cross_project_rows": 0, "lag_p50_s": 0.4,
    "lag_p95_s": 2.5, "lag_max_s": 3.0, "lags": 100, "single_ms": 10.0, "single_p95_ms": 12.0,
    "member_turn_ms": 9.0, "member_ms": 15.0, "member_p95_ms": 30.0, "sync_ms": 6.0,
    "pulled_per_sync": 1.5, "ratio": 1.5, "turn_ratio": 0.9, "changes": 1000,
    "elapsed_s": 90.0, "single_facts": 1000,
}  # fmt: skip


def table_of(figures: dict, folder: Path) -> str:
    """The docs table of one run with ``figures``, written to ``folder`` as the script does."""
    results = Results(
        "team", about="test", date="2026-01-01T10:00:00Z",
        machine_info={"cpus": 2, "python": "3.11.7", "load_average": [0.5, 0.4, 0.3]},
        goals={"lag_p95_max_s": 2.0, "overhead_ratio_max": 2.0},
        options={"members": 20, "changes": 50, "pace_s": 0.5},
    )  # fmt: skip
    results.add("team", **figures)
    results.write(folder)
    return team_tables.team_table(folder)


def test_the_team_table_says_each_goal_met_or_missed(tmp_path: Path) -> None:
    assert team_tables.team_table(tmp_path) == NOT_MEASURED
    table = table_of(FIGURES, tmp_path)
    assert table.startswith("20 members × 50 changes on one project (1,000 changes")
    assert "| changes lost | **0** | 0: met |" in table
    assert "**p95 2.50 s**, max 3.00 s | p95 ≤ 2 s: missed |" in table
    assert "**1.50×** the single user's 10.0 ms | ≤ 2×: met |" in table
    assert "Measured 2026-01-01 (2 CPUs, Python 3.11.7" in table


def test_the_team_table_names_the_change_and_turn_since_the_background_sync(
    tmp_path: Path,
) -> None:
    figures = {**FIGURES, "add_ms": 5.0, "single_add_ms": 4.0, "single_turn_ms": 6.0}
    figures |= {"held_p50_s": 0.3, "held_p95_s": 0.9, "held_max_s": 1.4}
    table = table_of(figures, tmp_path)
    assert "| a member's turn overhead: change + turn (median) | **15.0 ms**" in table
    assert "the single user's 10.0 ms (change 4.0 ms, turn 6.0 ms) | ≤ 2×: met |" in table
    assert (
        "| a change to a teammate's memory holding it (any turn from then on injects it) "
        "| p50 0.30 s, p95 0.90 s, max 1.40 s | no goal of its own |"
    ) in table


def test_the_team_table_shows_when_the_server_held_a_change(tmp_path: Path) -> None:
    assert "a change to the server holding it" not in table_of(FIGURES, tmp_path)
    figures = {**FIGURES, "sent_p50_s": 0.01, "sent_p95_s": 0.12}
    assert (
        "| a change to the server holding it (published by the member's sync) "
        "| p50 0.01 s, p95 0.12 s | no goal of its own |"
    ) in table_of(figures, tmp_path)
