"""docs/benchmarks.md's team table, from ``benchmarks/results/team.json`` (cog).

Kept beside ``bench_tables.py`` (whose formatting it uses) rather than in it: that file
is long already, and the team benchmark's figures are read by this table only.
"""

from __future__ import annotations

from pathlib import Path

from bench_tables import NOT_MEASURED, Provenance, _goal_cell, load


def team_table(results_dir: Path | None = None) -> str:
    """Losses, doubles, leaks, lag and turn overhead of one run, each with its goal."""
    bench = load("team", results_dir)
    figure = bench.get("team") if bench else None
    if bench is None or figure is None:
        return NOT_MEASURED
    options = bench.run_of(figure).get("options", {})
    lag_goal = bench.goals.get("lag_p95_max_s", 2.0)
    ratio_goal = bench.goals.get("overhead_ratio_max", 2.0)
    f = figure
    lag = f"p50 {f['lag_p50_s']:.2f} s, **p95 {f['lag_p95_s']:.2f} s**, max {f['lag_max_s']:.2f} s"
    if "add_ms" in f:  # since the background sync: a turn syncs nothing itself
        member = (
            f"**{f['member_ms']:.1f} ms** (its change with the outbox row {f['add_ms']:.1f} "
            f"ms, turn {f['member_turn_ms']:.1f} ms, with its catch-up; syncing in the background)"
        )
        single = (
            f"{f['single_ms']:.1f} ms (change {f['single_add_ms']:.1f} ms, turn "
            f"{f['single_turn_ms']:.1f} ms)"
        )
        label = "a member's turn overhead: change + turn (median)"
    else:  # the runs before it: a sync on the turn's path
        member = (
            f"**{f['member_ms']:.1f} ms** (sync {f['sync_ms']:.1f} ms pulling "
            f"{f['pulled_per_sync']:.1f} change sets, turn {f['member_turn_ms']:.1f} ms)"
        )
        single = f"{f['single_ms']:.1f} ms"
        label = "a member's turn overhead: sync + turn (median)"
    rows = [
        ("changes lost", f"**{f['lost']}**", "0", f["lost"] == 0),
        ("changes applied twice", f"**{f['applied_twice']}**", "0", f["applied_twice"] == 0),
        (
            "rows of the other project readable",
            f"**{f['cross_project_rows']}**",
            "0",
            f["cross_project_rows"] == 0,
        ),
        (
            "a change to a teammate's next turn seeing it",
            lag,
            f"p95 ≤ {lag_goal:g} s",
            f["lag_p95_s"] <= lag_goal,
        ),
        *(
            [
                (
                    "a change to the server holding it (published by the member's sync)",
                    f"p50 {f['sent_p50_s']:.2f} s, p95 {f['sent_p95_s']:.2f} s",
                    "",
                    None,
                )
            ]
            if "sent_p95_s" in f
            else []
        ),
        *(
            [
                (
                    "a change to a teammate's memory holding it (any turn from then on injects it)",
                    f"p50 {f['held_p50_s']:.2f} s, p95 {f['held_p95_s']:.2f} s, "
                    f"max {f['held_max_s']:.2f} s",
                    "",
                    None,
                )
            ]
            if "held_p95_s" in f
            else []
        ),
        (
            label,
            f"{member}: **{f['ratio']:.2f}×** the single user's {single}",
            f"≤ {ratio_goal:g}×",
            f["ratio"] <= ratio_goal,
        ),
    ]
    out = [
        f"{options.get('members')} members × {options.get('changes')} changes on one project "
        f"({f['changes']:,} changes, a turn every {options.get('pace_s'):g} s of reading), "
        f"each a process with its own home, beside a single-user home and a member of "
        f"another project; {f['elapsed_s']:.0f} s.",
        "",
        "| figure | measured | goal |",
        "|---|---|---|",
        *(
            f"| {label} | {value} | {_goal_cell(goal, met) if goal else 'no goal of its own'} |"
            for label, value, goal, met in rows
        ),
        "",
        *Provenance(bench, [figure]).lines(),
    ]
    return "\n".join(out) + "\n"
