"""The README's relevance and cross-validation figures, rendered from
``benchmarks/results/relevance.json`` and ``cv.json`` by cog (as ``bench_tables`` does for
the other benchmarks):

- ``relevance_table()``: off-topic queries, the notebook journal's echoes and fact search,
  against their goals (``benchmarks/relevance.py``);
- ``calibration_table()``: the distributions the relevance floors were chosen from, and
  what each lets through of the held-out off-topic set;
- ``cv_table()``: in-sample against leave-one-conversation-out figures
  (``benchmarks/cv.py``);
- ``first_turn_table()``: a fresh kernel's first turn beside its later ones, without
  embeddings and with MiniLM on each runtime (``benchmarks/first_turn.py``).
"""

from __future__ import annotations

from pathlib import Path

from bench_tables import NOT_MEASURED, Provenance, _cell, _goal_cell, _interval, _num, load, ms

RELEVANCE_ROWS = (
    ("off_topic_recall_returns_something", "off_topic_recall_max", False),
    ("off_topic_personal_recall_returns_something", "off_topic_recall_max", False),
    ("off_topic_fact_search_returns_something", "off_topic_search_max", False),
    ("off_topic_personal_fact_search_returns_something", "off_topic_search_max", False),
    # The floors are fitted on the rows above' queries only; these were written apart.
    ("off_topic_recall_returns_something_held_out", "off_topic_recall_max", False),
    ("off_topic_personal_recall_returns_something_held_out", "off_topic_recall_max", False),
    ("off_topic_fact_search_returns_something_held_out", "off_topic_search_max", False),
    ("off_topic_personal_fact_search_returns_something_held_out", "off_topic_search_max", False),
    ("notebook_statement_is_the_first_recalled", "statement_first_min", True),
    ("notebook_right_fact_first", "right_fact_first_min", True),
    ("notebook_listed_facts_sharing_no_word", "no_shared_word_max", False),
)
SETTINGS = (("default", "default install"), ("minilm", "local MiniLM"))


def relevance_table(results_dir: Path | None = None) -> str:
    """Each relevance figure per setting, with its interval and goal."""
    bench = load("relevance", results_dir)
    if bench is None:
        return NOT_MEASURED
    shown = [s for s in SETTINGS if any(bench.get(f"{s[0]}.{r[0]}") for r in RELEVANCE_ROWS)]
    figures = [bench.get(f"{s}.{r[0]}") for s, _ in shown for r in RELEVANCE_ROWS]
    provenance = Provenance(bench, figures)
    out = [
        "| figure | goal | " + " | ".join(label for _, label in shown) + " |",
        "|---|---|" + "---|" * len(shown),
    ]
    for key, goal_key, at_least in RELEVANCE_ROWS:
        cells = []
        name = ""
        for setting, _ in shown:
            figure = bench.get(f"{setting}.{key}")
            if not figure:
                cells.append("–")
                continue
            name = figure["name"]
            cells.append(
                f"{_interval(figure['value'])}{provenance.mark(figure)} "
                f"({figure['n']} {'facts' if 'listed' in key else 'queries'})"
            )
        goal = bench.goals.get(goal_key)
        sign = "≥" if at_least else "≤"
        out.append(f"| {_cell(name)} | {sign} {goal:g} | " + " | ".join(cells) + " |")
    return "\n".join([*out, "", *provenance.lines()]) + "\n"


SIGNALS = {
    "coverage": "coverage, queries of 3+ terms",
    "coverage_short": "coverage, queries of 1–2 terms",
    "cosine": "cosine, OR coverage",
    "listing": "cosine, to list a result alone",
}
FIRST_TURN_ROWS = (
    ("injection", "without embeddings"),
    ("minilm", "MiniLM on PyTorch (`[embeddings]`)"),
    ("minilm_onnx", "MiniLM on ONNX int8 (`[embeddings-lite]`)"),
)


def first_turn_table(results_dir: Path | None = None) -> str:
    """The first turn after ``%load_ext`` beside the warm ones, same run: the default
    install's ``%%agent`` turn, then ranked injection at 1,000 facts without embeddings
    (the baseline) and per MiniLM runtime."""
    bench = load("first_turn", results_dir)
    if bench is None or not bench.get("agent"):
        return NOT_MEASURED
    goals = bench.goals
    agent = bench.get("agent") or {}
    over = agent["first_s"] - agent["warm_s"]
    limit = goals["agent_first_over_warm_max_s"]
    out = [
        "| setting | `%load_ext` cell | first turn | later turns (p50) | goal |",
        "|---|---|---|---|---|",
        f"| default install, `%%agent` (offline model) | {ms(agent['load_ext_ms'])} "
        f"| {agent['first_s'] * 1000:,.0f} ms | {ms(agent['warm_s'] * 1000)} "
        f"| {_goal_cell(f'first within {limit:g} s of warm', over <= limit)} |",
    ]
    figures = [agent]
    for key, label in FIRST_TURN_ROWS:
        figure = bench.get(key)
        if not figure:
            continue
        figures.append(figure)
        first_ok = figure["first_s"] <= goals["minilm_first_max_s"]
        p50_ok = figure["p50_ms"] <= goals["minilm_p50_max_ms"]
        first_goal = f"first ≤ {goals['minilm_first_max_s']:g} s"
        p50_goal = f"p50 ≤ {goals['minilm_p50_max_ms']:g} ms"
        goal = (
            f"{_goal_cell(first_goal, first_ok)}; {_goal_cell(p50_goal, p50_ok)}"
            if key.startswith("minilm")
            else "same-run baseline"
        )
        out.append(
            f"| {label}, ranked injection | {ms(figure['load_ext_ms'])} "
            f"| {figure['first_s'] * 1000:,.0f} ms | {ms(figure['p50_ms'])} | {goal} |"
        )
    return "\n".join([*out, "", *Provenance(bench, figures).lines()]) + "\n"


def calibration_table(results_dir: Path | None = None) -> str:
    """The floors: on-topic and off-topic percentiles of each signal, and what the floor
    chosen from them keeps and lets through."""
    bench = load("relevance", results_dir)
    rows = sorted(k for k in (bench.figures if bench else {}) if k.startswith("calibration."))
    if bench is None or not rows:
        return NOT_MEASURED
    out = [
        "| setting | search | signal | on-topic p10 / p25 / p50 | off-topic p50 / p90 / p95 / "
        "max | floor | on-topic kept | off-topic through | held-out through |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for key in rows:
        figure = bench.figures[key]
        _, setting, search, signal = key.split(".")
        on = " / ".join(_num(v, 2) for v in figure["on_percentiles"])
        off = " / ".join(_num(v, 2) for v in figure["off_percentiles"])
        label = SIGNALS.get(signal, signal)
        if figure.get("coverage_needed"):
            label = label.replace("cosine", f"cosine and coverage ≥ {figure['coverage_needed']:g}")
        held = figure.get("held_out_through")
        out.append(
            f"| {setting} | {search.replace('_', ' ')} | {label} | {on} | {off} "
            f"| {_num(figure['floor'], 2)} | {_num(figure['on_topic_kept'], 2)} "
            f"| {_num(figure['off_topic_through'], 2)} "
            f"| {'–' if held is None else _num(held, 2)} |"
        )
    provenance = Provenance(bench, [bench.figures[k] for k in rows])
    return "\n".join([*out, "", *provenance.lines()]) + "\n"


def cv_table(results_dir: Path | None = None) -> str:
    """In-sample figures of the shipped weights beside leave-one-conversation-out ones."""
    bench = load("cv", results_dir)
    keys = [
        key + suffix
        for key in ("recall", "injection.per_conversation_2000", "injection.merged_500")
        for suffix in ("", "_minilm")
    ]
    figures = [(k, bench.get(k)) for k in keys] if bench else []
    figures = [(k, f) for k, f in figures if f]
    if not figures:
        return NOT_MEASURED
    provenance = Provenance(bench, [f for _, f in figures])
    out = [
        "| figure | in-sample, shipped weights | leave-one-conversation-out | grid points |",
        "|---|---|---|---|",
    ]
    for _, figure in figures:
        out.append(
            f"| {_cell(figure['name'])}{provenance.mark(figure)} "
            f"| {_interval(figure['in_sample'])} | {_interval(figure['cross_validated'])} "
            f"| {figure['grid_points']} |"
        )
    return "\n".join([*out, "", *provenance.lines()]) + "\n"
