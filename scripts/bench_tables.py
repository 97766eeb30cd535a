"""The benchmark figures of docs/benchmarks.md, rendered from ``benchmarks/results/*.json`` by cog.

Each benchmark writes its figures, their same-run baselines, its goals and the run's date,
machine and options to ``benchmarks/results/<name>.json`` (see ``benchmarks/benchlib.py``).
docs/benchmarks.md holds ``[[[cog ... ]]]`` blocks that call the functions below, so no
figure in the docs is typed by hand:

    .venv/bin/cog -I scripts -r README.md docs/*.md       # rewrite (make readme; make bench)
    .venv/bin/cog -I scripts --check README.md docs/*.md  # fail if stale (make lint, make test)

- ``locomo_table()``, ``locomo_figures()``: LOCOMO evidence recall of the injected block
  (``locomo_injection.json``) and how it stands against its goals;
- ``speed_table()``, ``speed_figures()``: the speed figures with their baselines and goals
  (``locomo_injection.json``'s speed, ``fold.json``, ``turn_overhead.json``,
  ``load_ext.json``);
- ``recall_table()``, ``recall_figures()``: LOCOMO conversation recall (``recall.json``);
- ``aging_setup()``, ``aging_table()``, ``aging_figures()``: a year of synthetic sessions
  (``aging.json``).

Every function takes ``results_dir`` (default ``benchmarks/results``) and returns Markdown
ending with a newline. A figure a later run skipped keeps its earlier value in the file,
dated; the tables mark such rows and say when they were measured. Rendering reads only the
JSON: it runs no benchmark and needs no data set.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "benchmarks" / "results"
MARKS = "¹²³⁴⁵⁶⁷⁸⁹"
NOT_MEASURED = "*Not measured yet: run `make bench`, then `make readme`.*\n"


# -- reading ----------------------------------------------------------------------------
class Bench:
    """One results file: its figures, goals and the runs they come from."""

    def __init__(self, name: str, data: dict[str, Any]) -> None:
        self.name = name
        self.data = data
        self.figures: dict[str, dict[str, Any]] = data.get("figures", {})
        self.goals: dict[str, Any] = data.get("goals", {})
        self.runs: dict[str, dict[str, Any]] = data.get("runs", {})

    def get(self, key: str) -> dict[str, Any] | None:
        return self.figures.get(key)

    def run_of(self, figure: dict[str, Any]) -> dict[str, Any]:
        return self.runs.get(figure.get("measured", ""), {})


def load(name: str, results_dir: Path | None = None) -> Bench | None:
    """``<results_dir>/<name>.json``, or None when that benchmark has not written it."""
    path = Path(results_dir or RESULTS_DIR) / f"{name}.json"
    if not path.is_file():
        return None
    return Bench(name, json.loads(path.read_text(encoding="utf-8")))


# -- formatting -------------------------------------------------------------------------
def _cell(text: str) -> str:
    """Text for a Markdown table cell: pipes escaped."""
    return text.replace("|", "\\|")


def _num(value: float, digits: int = 3) -> str:
    return f"{value:.{digits}f}"


def _int(value: int) -> str:
    """``2,760``."""
    return f"{value:,}"


def ms(value: float | None) -> str:
    """A duration the way the docs write it: ``0.25 ms``, ``38.4 ms``, ``168 ms``,
    ``1.9 s``."""
    if value is None:
        return "–"
    if value >= 1000:
        return f"{value / 1000:.1f} s"
    if value >= 100:
        return f"{value:.0f} ms"
    if value >= 10:
        return f"{value:.1f} ms"
    return f"{value:.2f} ms"


def pair_ms(low: float, high: float) -> str:
    """Two durations with the precision of the larger: ``4.2 / 17.7 ms``."""
    shown = ms(high)
    if shown.endswith(" s"):
        return f"{low / 1000:.1f} / {shown}"
    decimals = len(shown.removesuffix(" ms").partition(".")[2])
    return f"{low:.{decimals}f} / {shown}"


def limit_ms(value: float) -> str:
    """A goal's duration as it is set: ``2 ms``, ``300 ms``, ``1.5 s``."""
    return f"{value / 1000:g} s" if value >= 1000 else f"{value:g} ms"


def _interval(figure: dict[str, float] | None) -> str:
    """``0.965 (0.953–0.976)``."""
    if not figure or figure.get("mean") is None:
        return "–"
    return f"{_num(figure['mean'])} ({_num(figure['low'])}–{_num(figure['high'])})"


def _and(words: Sequence[str]) -> str:
    """``26 and 30``, ``41, 42 and 43``."""
    words = list(words)
    if len(words) <= 1:
        return "".join(words)
    return f"{', '.join(words[:-1])} and {words[-1]}"


def _date(stamp: str) -> str:
    return stamp[:10]


def _machine(run: dict[str, Any]) -> str:
    """``2 CPUs, Python 3.11.7, load average 3.4 at the start``."""
    machine = run.get("machine", {})
    parts = []
    if machine.get("cpus"):
        parts.append(f"{machine['cpus']} CPUs")
    if machine.get("python"):
        parts.append(f"Python {machine['python']}")
    load = machine.get("load_average")
    if load:
        parts.append(f"load average {load[0]:.1f} at the start")
    return ", ".join(parts)


def _goal_met(value: float, goal: float, *, at_least: bool) -> bool:
    return value >= goal if at_least else value <= goal


class Provenance:
    """Which run each rendered figure comes from: the latest run of the table is the
    default; figures from earlier runs get a mark (¹, ²…) and a footnote with their date."""

    def __init__(self, bench: Bench, figures: Iterable[dict[str, Any] | None]) -> None:
        self.bench = bench
        stamps = sorted({f["measured"] for f in figures if f and f.get("measured")})
        self.main = stamps[-1] if stamps else ""
        self.earlier = stamps[:-1]

    def mark(self, figure: dict[str, Any] | None) -> str:
        if not figure or figure.get("measured") not in self.earlier:
            return ""
        return MARKS[self.earlier.index(figure["measured"]) % len(MARKS)]

    def _when(self, stamp: str) -> str:
        same_day = [s for s in [self.main, *self.earlier] if _date(s) == _date(stamp)]
        if len(same_day) > 1:
            return f"{_date(stamp)} {stamp[11:16]} UTC"
        return _date(stamp)

    def _options(self, stamp: str) -> str:
        options = self.bench.runs.get(stamp, {}).get("options", {})
        if "embeddings" in options:
            return "with MiniLM" if options["embeddings"] else "without embeddings"
        return ""

    def lines(self, what: str = "Measured") -> list[str]:
        """``Measured 2026-11-25 (2 CPUs, …).`` and a footnote per earlier run."""
        if not self.main:
            return []
        out = [f"{what} {self._when(self.main)} ({_machine(self.bench.runs.get(self.main, {}))})."]
        for i, stamp in enumerate(self.earlier):
            details = ", ".join(
                part
                for part in (self._options(stamp), _machine(self.bench.runs.get(stamp, {})))
                if part
            )
            out.append("")  # a paragraph each
            out.append(
                f"{MARKS[i % len(MARKS)]} Kept from an earlier run, {self._when(stamp)} "
                f"({details}): the latest run skipped it."
            )
        return out


# -- LOCOMO injection -------------------------------------------------------------------
LOCOMO_RANKINGS = (
    ("confidence", "confidence only (DeerFlow today)"),
    ("tfidf", "TF-IDF 0.6 / confidence 0.4 (DeerFlow's plan)"),
    ("bm25", "BM25 (bm25s, plain)"),
    ("ours", "ours, lexical (default install)"),
    ("ours_minilm", "ours + local MiniLM embeddings"),
)
LOCOMO_BOLD = ("ours", "ours_minilm")  # the realistic rows of ours stand out


def _locomo_setup(setup: dict[str, Any]) -> str:
    conversations = setup.get("conversation_names") or []
    realistic = [f"{c:g}" for c in setup.get("realistic_confidences", [])]
    categories = setup.get("categories") or []
    span = f"{categories[0]}–{categories[-1]}" if categories else ""
    return (
        f"{setup['conversations']} conversations ({_and(conversations)}), "
        f"{_int(setup['questions'])} answerable questions (categories {span}), "
        f"{_int(setup['facts'])} observation facts. Per-conversation stores at "
        f"{setup['per_conversation_budget']} tokens; all conversations merged into one store "
        f"at {setup['merged_budget']} tokens. Realistic confidences: each fact "
        f"{_and(realistic).replace(' and ', ' or ')} by a hash of its text; flat: every fact "
        f"{setup['flat_confidence']:g}."
    )


def locomo_table(results_dir: Path | None = None) -> str:
    """The LOCOMO evidence-recall table: every ranking, realistic then flat confidences,
    each figure with its bootstrap interval."""
    bench = load("locomo_injection", results_dir)
    setup = bench.get("quality.setup") if bench else None
    if bench is None or setup is None:
        return NOT_MEASURED
    rows = [
        (setting, key, name, bench.get(f"quality.{setting}.{key}"))
        for setting in ("realistic", "flat")
        for key, name in LOCOMO_RANKINGS
    ]
    rows = [row for row in rows if row[3]]
    provenance = Provenance(bench, [setup] + [row[3] for row in rows])
    out = [
        _locomo_setup(setup),
        "",
        f"| ranking | confidences | per-conversation @{setup['per_conversation_budget']} "
        f"| merged @{setup['merged_budget']} | p50 / query |",
        "|---|---|---|---|---|",
    ]
    for setting, key, name, figure in rows:
        assert figure is not None
        label = f"{name}{provenance.mark(figure)}"
        conv, merged = _interval(figure["per_conversation"]), _interval(figure["merged"])
        if setting == "realistic" and key in LOCOMO_BOLD:
            label = f"**{name}**{provenance.mark(figure)}"
            conv = conv.replace(" (", "** (", 1) if conv != "–" else conv
            merged = merged.replace(" (", "** (", 1) if merged != "–" else merged
            conv, merged = f"**{conv}", f"**{merged}"
        confidences = (
            "realistic" if setting == "realistic" else f"flat {setup['flat_confidence']:g}"
        )
        out.append(
            f"| {_cell(label)} | {confidences} | {conv} | {merged} | {ms(figure['p50_ms'])} |"
        )
    ours = bench.get("quality.realistic.ours")
    spread = ""
    if ours:
        half = (ours["merged"]["high"] - ours["merged"]["low"]) / 2
        spread = f" (about ±{half:.2f} merged for ours)"
    out += [
        "",
        f"In brackets: the 95% bootstrap interval over the questions "
        f"({_int(setup['bootstrap_rounds'])} resamples), the spread another draw of questions "
        f"like these could show{spread}. p50 is the median time per query, per-conversation "
        "and merged together.",
        "",
        *provenance.lines(),
    ]
    return "\n".join(out) + "\n"


def _verdict_at_least(label: str, figure: dict[str, float], goal: float) -> str:
    """``≥ 0.95 is met (0.965)`` or ``≥ 0.85 is missed by 0.004 (0.846), inside its
    interval``."""
    mean = figure["mean"]
    if mean >= goal:
        return f"{label}≥ {goal:.2f} is met ({_num(mean)})"
    where = "inside its interval" if figure["high"] >= goal else "below its whole interval"
    return f"{label}≥ {goal:.2f} is missed by {_num(goal - mean)} ({_num(mean)}), {where}"


def locomo_figures(results_dir: Path | None = None) -> str:
    """The LOCOMO figures against their goals, in sentences."""
    bench = load("locomo_injection", results_dir)
    if bench is None or bench.get("quality.setup") is None:
        return NOT_MEASURED
    sentences = []
    parts = []
    for column, what in (("per_conversation", "per-conversation"), ("merged", "merged")):
        goals = bench.goals.get(column, {})
        for key, label in (("ours", f"{what} "), ("ours_minilm", f"{what} with MiniLM ")):
            figure = bench.get(f"quality.realistic.{key}")
            if figure and key in goals:
                parts.append(_verdict_at_least(label, figure[column], goals[key]))
    if parts:
        sentences.append(f"Against the goals (realistic confidences): {'; '.join(parts)}.")
    ours = bench.get("quality.realistic.ours")
    baselines = [bench.get(f"quality.realistic.{k}") for k in ("confidence", "tfidf", "bm25")]
    baselines = [b for b in baselines if b]
    if ours and baselines:
        best = max(baselines, key=lambda b: b["merged"]["high"])
        if ours["merged"]["low"] > best["merged"]["high"]:
            sentences.append(
                "Merged, the interval of ours (lexical) lies above every baseline's: the "
                f"best baseline, {best['name']}, reaches {_num(best['merged']['high'])}, ours "
                f"starts at {_num(ours['merged']['low'])}."
            )
        else:
            sentences.append(
                f"Merged, the intervals of ours (lexical) and of {best['name']} overlap "
                f"({_num(ours['merged']['low'])} against {_num(best['merged']['high'])}): "
                "this data does not tell them apart."
            )
    flat = bench.get("quality.flat.ours")
    if ours and flat:
        gap = max(abs(ours[c]["mean"] - flat[c]["mean"]) for c in ("per_conversation", "merged"))
        sentences.append(
            "With realistic confidences ours stays within "
            f"{_num(gap)} of its flat-confidence figures."
        )
    setup = bench.get("quality.setup") or {}
    halves = setup.get("halves") or []
    if halves:
        named = "; ".join(_and([str(c) for c in half]) for half in halves)
        sentences.append(f"The dev halves (`--halves`) are conversations {named}.")
    return " ".join(sentences) + "\n"


# -- speed ------------------------------------------------------------------------------
def _goal_cell(text: str, met: bool) -> str:
    return f"{text}: {'met' if met else 'missed'}"


def speed_table(results_dir: Path | None = None) -> str:
    """The speed figures, each beside its same-run baseline and its goal."""
    injection = load("locomo_injection", results_dir)
    fold = load("fold", results_dir)
    turn = load("turn_overhead", results_dir)
    load_ext = load("load_ext", results_dir)
    rows = ["| figure | ours | same-run baseline | goal |", "|---|---|---|---|"]
    sources: list[tuple[str, Bench, dict[str, Any]]] = []
    speed = injection.get("speed") if injection else None
    if injection and speed:
        sources.append(("injection", injection, speed))
        facts = _int(speed["facts"])
        ratio, limit = speed["ranked_over_classic"], injection.goals["ranked_over_classic_max"]
        first_goal = injection.goals["first_call_max_ms"]
        rows += [
            f"| ranked injection, {facts} facts | {ms(speed['ranked_ms'])} | DeerFlow classic "
            f"{ms(speed['classic_ms'])} ({ratio:.2f}×) "
            f"| {_goal_cell(f'≤ {limit:g}×', ratio <= limit)} |",
            f"| injection without context, {facts} facts | {ms(speed['no_context_ms'])} "
            f"| DeerFlow classic {ms(speed['classic_ms'])} | |",
            f"| first call on a new memory revision (one fact changed), {facts} facts "
            f"| {ms(speed['first_call_ms'])} | DeerFlow classic on that revision "
            f"{ms(speed['first_call_classic_ms'])} "
            f"| {_goal_cell(f'≤ {limit_ms(first_goal)}', speed['first_call_ms'] <= first_goal)} |",
            f"| first call on {facts} texts never seen (a kernel's first turn) "
            f"| {ms(speed['cold_ms'])} | bm25s tokenising and indexing them alone "
            f"{ms(speed['cold_bm25s_ms'])} | |",
        ]
    at = fold.goals.get("at_facts") if fold else None
    figure = fold.get(f"facts.{at}") if fold else None
    if fold and figure:
        sources.append(("fold", fold, figure))
        goal = fold.goals["fold_p50_max_ms"]
        rows.append(
            f"| one fold at {_int(figure['facts'])} facts (model call excluded) "
            f"| {ms(figure['fold_p50_ms'])} | DeerFlow's `json` load + `dump(indent=2)` save "
            f"{ms(figure['json_p50_ms'])}; a durable write of the file alone "
            f"{ms(figure['durable_p50_ms'])} "
            f"| {_goal_cell(f'≤ {limit_ms(goal)}', figure['fold_p50_ms'] <= goal)} |"
        )
    at = turn.goals.get("at_facts") if turn else None
    figure = turn.get(f"facts.{at}") if turn else None
    if turn and figure:
        sources.append(("turn overhead", turn, figure))
        goal = turn.goals["added_max_ms"]
        rows.append(
            f"| turn overhead added by memory, {_int(figure['facts'])} facts "
            f"| {ms(figure['added_ms'])} | memory off ({ms(figure['memory_off_ms'])} overhead) "
            f"| {_goal_cell(f'≤ {limit_ms(goal)}', figure['added_ms'] <= goal)} |"
        )
    figure = load_ext.get("load_ext") if load_ext else None
    if load_ext and figure:
        sources.append(("`%load_ext`", load_ext, figure))
        goal = load_ext.goals["load_ext_max_ms"]
        rows.append(
            f"| `%load_ext deerflow_nb` | {ms(figure['load_ext_ms'])} "
            f"| IPython shell start {ms(figure['ipython_ms'])} "
            f"| {_goal_cell(f'≤ {limit_ms(goal)}', figure['load_ext_ms'] <= goal)} |"
        )
    persona = load("persona", results_dir)
    figure = persona.get("first_chunk") if persona else None
    if persona and figure:
        sources.append(("persona", persona, figure))
        goal = persona.goals["first_chunk_max_s"]
        worst = max(figure["warm_p50_s"], figure["cold_s"])
        rows.append(
            f"| DeerFlow persona's first streamed chunk in the chat (warm p50; first reply) "
            f"| {ms(figure['warm_p50_s'] * 1000)}; {ms(figure['cold_s'] * 1000)} "
            f"| its whole reply {ms(figure['warm_reply_p50_s'] * 1000)} "
            f"| {_goal_cell(f'≤ {limit_ms(goal * 1000)}', worst <= goal)} |"
        )
    if not sources:
        return NOT_MEASURED
    return "\n".join(rows) + "\n\n" + _speed_provenance(sources) + "\n"


def _speed_provenance(sources: list[tuple[str, Bench, dict[str, Any]]]) -> str:
    """When and on what each row was measured: the machine once, each run's date and load."""
    runs = [(label, bench.run_of(figure), figure["measured"]) for label, bench, figure in sources]
    machines = {
        (r.get("machine", {}).get("cpus"), r.get("machine", {}).get("python")) for _, r, _ in runs
    }
    dates = {_date(stamp) for _, _, stamp in runs}
    parts = []
    for label, run, stamp in runs:
        load_avg = run.get("machine", {}).get("load_average")
        detail = f"{load_avg[0]:.1f}" if load_avg else "not known"
        if len(dates) > 1:
            detail = f"{_date(stamp)}, {detail}" if detail else _date(stamp)
        parts.append(f"{label} {detail}".strip())
    head = "Medians"
    if len(machines) == 1:
        cpus, python = next(iter(machines))
        head += f", on {cpus} CPUs (Python {python})"
    if len(dates) == 1:
        head += f", measured {next(iter(dates))}"
    return f"{head}; load average at the start of each run: {'; '.join(parts)}."


def speed_figures(results_dir: Path | None = None) -> str:
    """The fold's and the turn's figures in sentences: where the time goes."""
    sentences = []
    fold = load("fold", results_dir)
    at = fold.goals.get("at_facts") if fold else None
    figure = fold.get(f"facts.{at}") if fold else None
    if fold and figure:
        goal = fold.goals["fold_p50_max_ms"]
        p50, floor = figure["fold_p50_ms"], figure["durable_p50_ms"]
        verdict = "met" if p50 <= goal else f"missed by {ms(p50 - goal)}"
        sentences.append(
            f"A fold at {_int(figure['facts'])} facts takes {ms(p50)} at the median "
            f"(p95 {ms(figure['fold_p95_ms'])}; goal ≤ {limit_ms(goal)}: {verdict}), "
            f"{ms(p50 - floor)} of it beyond the durable write's {ms(floor)}."
        )
        share_goal = fold.goals.get("fold_over_json_max")
        if share_goal is not None and "fold_over_json" in figure:
            share = figure["fold_over_json"]
            verdict = "met" if share <= share_goal else "missed"
            sentences.append(
                f"Timed in turn with DeerFlow's `json` load + `dump(indent=2)` of the same "
                f"file to a temp file it renames ({ms(figure['json_p50_ms'])}), it takes "
                f"{share:.2f}× as long "
                f"(goal ≤ {share_goal:g}×: {verdict})."
            )
    turn = load("turn_overhead", results_dir)
    at = turn.goals.get("at_facts") if turn else None
    figure = turn.get(f"facts.{at}") if turn else None
    off = turn.get("memory_off") if turn else None
    if turn and figure:
        goal = turn.goals["added_max_ms"]
        added = figure["added_ms"]
        verdict = "met" if added <= goal else f"missed by {ms(added - goal)}"
        where = (
            f"injection {ms(figure['inject_ms'])}, the fold's enqueue "
            f"{ms(figure['enqueue_ms'])}, the journal {ms(figure['journal_ms'])}"
        )
        if off and off.get("measured") == figure.get("measured"):
            where += f" (against {ms(off['journal_ms'])} with memory off)"
        sentences.append(
            f"A turn with {_int(figure['facts'])} facts spends {ms(figure['overhead_ms'])} "
            f"outside the model call, {ms(added)} more than with memory off (goal ≤ "
            f"{limit_ms(goal)}: {verdict}); by middleware, medians: {where}."
        )
    if not sentences:
        return NOT_MEASURED
    return " ".join(sentences) + "\n"


# -- conversation recall ----------------------------------------------------------------
RECALL_ROWS = (
    ("bm25", "BM25 (bm25s, plain)", False),
    ("recall", "`Memory.recall` (default install)", True),
    ("recall_minilm", "`Memory.recall` + local MiniLM", True),
)


def recall_table(results_dir: Path | None = None) -> str:
    """The conversation-recall table: recall@k with its interval, per half, latency."""
    bench = load("recall", results_dir)
    setup = bench.get("quality.setup") if bench else None
    if bench is None or setup is None:
        return NOT_MEASURED
    rows = [(key, name, bold, bench.get(f"quality.{key}")) for key, name, bold in RECALL_ROWS]
    rows = [row for row in rows if row[3]]
    provenance = Provenance(bench, [setup] + [row[3] for row in rows])
    first = [str(c) for c in setup["first_half"]]
    rest = [str(c) for c in setup["conversation_names"] if str(c) not in first]
    k = setup["k"]
    categories = setup["categories"]
    out = [
        f"{setup['conversations']} conversations, {_int(setup['threads'])} threads, "
        f"{_int(setup['messages'])} messages, {_int(setup['questions'])} answerable questions "
        f"(categories {categories[0]}–{categories[-1]}); each asked through "
        f"`Memory.recall(question, k={k})`.",
        "",
        f"| ranking | evidence recall@{k} | halves: {', '.join(first)} / {', '.join(rest)} "
        "| p50 / p95 per search |",
        "|---|---|---|---|",
    ]
    for _, name, bold, figure in rows:
        assert figure is not None
        cell = _interval(figure["recall"])
        label = name
        if bold:
            label = f"**{name}**"
            cell = "**" + cell.replace(" (", "** (", 1)
        halves = " / ".join("–" if h is None else _num(h) for h in figure["halves"])
        out.append(
            f"| {_cell(label)}{provenance.mark(figure)} | {cell} | {halves} "
            f"| {pair_ms(figure['p50_ms'], figure['p95_ms'])} |"
        )
    out += [
        "",
        f"In brackets: the 95% bootstrap interval over the questions "
        f"({_int(setup['bootstrap_rounds'])} resamples). The index was built from the journal "
        f"in {ms(setup['index_build_ms'])}.",
        "",
        *provenance.lines(),
    ]
    return "\n".join(out) + "\n"


def recall_figures(results_dir: Path | None = None) -> str:
    """Recall against its goals, and its latency at LOCOMO's size and on the synthetic
    journal, in sentences."""
    bench = load("recall", results_dir)
    if bench is None or bench.get("quality.setup") is None:
        return NOT_MEASURED
    setup = bench.get("quality.setup") or {}
    sentences = []
    parts = []
    for key, label in (("recall", "on the default install"), ("recall_minilm", "with MiniLM")):
        figure = bench.get(f"quality.{key}")
        goal = bench.goals.get("recall", {}).get(key)
        if not figure or goal is None:
            continue
        r = figure["recall"]
        if r["mean"] >= goal:
            below = f"; its interval reaches down to {_num(r['low'])}" if r["low"] < goal else ""
            parts.append(
                f"≥ {goal:.2f} {label} is met by {_num(r['mean'] - goal)} ({_num(r['mean'])}"
                f"{below})"
            )
        else:
            parts.append(
                f"≥ {goal:.2f} {label} is missed by {_num(goal - r['mean'])} ({_num(r['mean'])})"
            )
    if parts:
        sentences.append(f"Against the goals: {'; '.join(parts)}.")
    figure = bench.get("quality.recall")
    goal = bench.goals.get("p95_max_ms")
    if figure and goal is not None:
        verdict = "met" if figure["p95_ms"] <= goal else "missed"
        sentences.append(
            f"The p95 per search is {ms(figure['p95_ms'])} at {_int(setup['messages'])} "
            f"messages (goal ≤ {limit_ms(goal)}: {verdict})."
        )
    synthetic = bench.get("synthetic")
    goal = bench.goals.get("synthetic_p95_max_ms")
    if synthetic and goal is not None:
        verdict = "met" if synthetic["p95_ms"] <= goal else "missed"
        mark = ""
        if figure and synthetic["measured"] != figure["measured"]:
            mark = f", measured {_date(synthetic['measured'])}"
        sentences.append(
            f"On a synthetic journal of {_int(synthetic['messages'])} messages (LOCOMO's turns "
            f"cycled over threads of {synthetic['thread_length']}) it is "
            f"{ms(synthetic['p95_ms'])} (goal ≤ {limit_ms(goal)}: {verdict}{mark}); the first "
            f"search, which builds the index, takes {ms(synthetic['first_search_ms'])}, and a "
            f"search right after a new message, which indexes it first, "
            f"{ms(synthetic['after_new_message_ms'])}."
        )
    dense = bench.get("quality.recall_minilm")
    if dense and dense.get("embed_all_s") is not None:
        sentences.append(
            "With MiniLM, the first search embeds every message not embedded yet "
            f"({dense['embed_all_s']:.0f} s for these {_int(dense['messages'])} here)."
        )
    return " ".join(sentences) + "\n"


# -- a year of sessions -----------------------------------------------------------------
AGING_POLICIES = (
    ("classic", "confidence only, no gate (DeerFlow classic)"),
    ("gate", "confidence only + scope gate"),
    ("blend", "**blend + scope gate** (default)"),
    ("review", "blend + gate + monthly staleness review, approved"),
)


def aging_setup(seed: int = 20, results_dir: Path | None = None) -> str:
    """What the year holds, for ``seed``: sessions, facts still true, ended, one-time."""
    bench = load("aging", results_dir)
    setup = bench.get(f"seed{seed}.setup") if bench else None
    if bench is None or setup is None:
        return NOT_MEASURED
    low, high = setup["project_weeks"]
    return (
        f"{setup['days']} days, {setup['sessions_per_week']} sessions a week "
        f"({setup['sessions']} with something said or asked): {setup['stable']} facts that "
        f"hold all year, {setup['projects']} projects of {low}–{high} weeks, most of them "
        f"ending silently, {setup['goals']} goals for a season, {setup['once']} one-time "
        f"instructions; {setup['statements']} statements and {setup['questions']} questions "
        f"in all (seed {seed}). At the end {setup['still_true']} stated facts are still true "
        f"and {setup['ended']} have ended.\n"
    )


def aging_table(
    seed: int = 20, limits: Sequence[int] = (40, 100), results_dir: Path | None = None
) -> str:
    """What each policy keeps at the end of the year, at each ``max_facts`` in ``limits``."""
    bench = load("aging", results_dir)
    if bench is None or bench.get(f"seed{seed}.setup") is None:
        return NOT_MEASURED
    rows = [
        (limit, name, bench.get(f"seed{seed}.max{limit}.{key}"))
        for limit in limits
        for key, name in AGING_POLICIES
    ]
    rows = [row for row in rows if row[2]]
    provenance = Provenance(bench, [bench.get(f"seed{seed}.setup")] + [r[2] for r in rows])
    out = [
        "| max_facts | policy | still-true kept | dead kept | one-time kept | evictions |",
        "|---|---|---|---|---|---|",
    ]
    for limit, name, figure in rows:
        assert figure is not None
        kept = f"{figure['still_true_kept']} / {figure['still_true']}"
        dead = str(figure["dead_kept"])
        if name.startswith("**"):
            kept, dead = f"**{kept}**", f"**{dead}**"
        out.append(
            f"| {limit} | {name}{provenance.mark(figure)} | {kept} | {dead} "
            f"| {figure['once_kept']} | {figure['evictions']} |"
        )
    return "\n".join(out + ["", *provenance.lines()]) + "\n"


def _plural(n: int, word: str) -> str:
    return f"one {word}" if n == 1 else f"{n} {word}s"


def aging_figures(
    seed: int = 20, pressure: int = 40, room: int = 100, results_dir: Path | None = None
) -> str:
    """The year's figures in sentences: the blend against confidence only under pressure,
    what the staleness review clears with room to spare, and the other seeds."""
    bench = load("aging", results_dir)
    if bench is None or bench.get(f"seed{seed}.setup") is None:
        return NOT_MEASURED
    setup = bench.get(f"seed{seed}.setup") or {}

    def row(limit: int, key: str, at_seed: int = seed) -> dict[str, Any] | None:
        return bench.get(f"seed{at_seed}.max{limit}.{key}")

    sentences = []
    blend, classic = row(pressure, "blend"), row(pressure, "classic")
    if blend and classic:
        more = blend["still_true_kept"] - classic["still_true_kept"]
        fewer = classic["dead_kept"] - blend["dead_kept"]
        how = "more" if more >= 0 else "fewer"
        dead = "fewer" if fewer >= 0 else "more"
        sentences.append(
            f"Under pressure (max_facts {pressure}) the blend keeps {abs(more)} {how} "
            f"still-true facts than DeerFlow's classic policy ({blend['still_true_kept']} "
            f"against {classic['still_true_kept']}) and {abs(fewer)} {dead} dead ones, "
            "because dead project facts, though extracted with a higher confidence than "
            "habits, stop being confirmed or used while habits keep being used."
        )
    blend, review = row(room, "blend"), row(room, "review")
    if blend and review:
        idle = "eviction never runs and " if blend["evictions"] == 0 else ""
        lost = blend["still_true_kept"] - review["still_true_kept"]
        text = (
            f"With room to spare (max_facts {room}) {idle}only the staleness review clears "
            f"dead facts ({blend['dead_kept']} left without it, {review['dead_kept']} with it)"
        )
        if lost > 0:
            text += (
                f"; approving every proposal blindly also dropped {_plural(lost, 'true fact')} "
                f"nobody had mentioned for {setup['staleness_days']:g} days, which is why it "
                "is a proposal"
            )
        sentences.append(text + ".")
    others = sorted(
        {
            int(key.split(".")[0].removeprefix("seed"))
            for key in bench.figures
            if key.startswith("seed") and key.endswith(".setup")
        }
        - {seed}
    )
    gaps = []
    for other in others:
        b, c = row(pressure, "blend", other), row(pressure, "classic", other)
        if b and c:
            gaps.append(
                (
                    other,
                    b["still_true_kept"] - c["still_true_kept"],
                    c["dead_kept"] - b["dead_kept"],
                )
            )
    if gaps:
        same = all(more > 0 and fewer >= 0 for _, more, fewer in gaps)
        listed = "; ".join(
            f"seed {s}: {more:+d} still true, {-fewer:+d} dead" for s, more, fewer in gaps
        )
        lead = (
            "The other seeds measured agree"
            if same
            else "The other seeds measured do not all agree"
        )
        sentences.append(f"{lead} (blend against classic at max_facts {pressure}: {listed}).")
    return " ".join(sentences) + "\n"


def embedding_runtime_table(results_dir: Path | None = None) -> str:
    """MiniLM on PyTorch against its int8 ONNX export: size, cold start, per-query time,
    agreement and LOCOMO ranking, all from one run of ``embedding_runtime.py``."""
    bench = load("embedding_runtime", results_dir)
    runtimes = [(k, bench.get(k) if bench else None) for k in ("torch", "onnx")]
    if bench is None or not all(figure for _, figure in runtimes):
        return NOT_MEASURED
    names = {"torch": "PyTorch (`[embeddings]`)", "onnx": "ONNX int8 (`[embeddings-lite]`)"}
    ranked = all(bench.get(f"ranking_{k}") for k, _ in runtimes)
    head = "| runtime | installed | cold start | p50 / query |"
    if ranked:
        head += " LOCOMO per-conversation @2000 | merged @500 |"
    out = [head, "|---" * (head.count("|") - 1) + "|"]
    for key, figure in runtimes:
        assert figure is not None
        row = (
            f"| {names[key]} | {figure['installed_mb']:,.0f} MB | "
            f"{figure['cold_start_s']:.1f} s | {ms(figure['p50_ms_per_query'])} |"
        )
        if ranked:
            rank = bench.get(f"ranking_{key}") or {}
            row += f" {_interval(rank['per_conversation'])} | {_interval(rank['merged'])} |"
        out.append(row)
    agreement = bench.get("agreement")
    if agreement:
        out += [
            "",
            f"Over the {_int(agreement['texts'])} LOCOMO facts, the two vectors of a text have "
            f"a cosine of {_num(agreement['cosine_min'], 4)} at the least "
            f"({_num(agreement['cosine_mean'], 4)} on average).",
        ]
    out += ["", *Provenance(bench, [f for _, f in runtimes]).lines()]
    return "\n".join(out) + "\n"


PROJECT_ROWS = (
    ("leak rate: blocks holding another project's fact", "leak_rate", "{:.3f}"),
    ("project facts injected when their project asks", "project_recall", "{:.3f}"),
    ("user facts available in every project", "user_recall", "{:.3f}"),
    ("tokens per block spent on another project", "wrong_tokens_per_block", "{:.1f}"),
    ("share of the block spent on another project", "wrong_token_share", "{:.3f}"),
)


def projects_table(results_dir: Path | None = None) -> str:
    """Memory per project against DeerFlow's one global memory, same run (``projects.py``)."""
    bench = load("projects", results_dir)
    figures = [bench.get(k) if bench else None for k in ("setup", "per_project", "global")]
    if bench is None or not all(figures):
        return NOT_MEASURED
    setup, ours, flat = figures
    assert setup is not None and ours is not None and flat is not None
    out = [
        f"{setup['projects']} projects × {setup['sessions_per_project']} sessions, "
        f"{_int(setup['turns'])} turns on the offline model: {setup['user_facts_stated']} user "
        f"facts and {setup['project_facts_stated']} project facts stated, "
        f"{setup['facts_stored']} stored; {_int(ours['blocks'])} blocks of at most "
        f"{_int(setup['budget_tokens'])} tokens, asked from each project.",
        "",
        "| figure | memory per project | one global memory (DeerFlow) | goal |",
        "|---|---|---|---|",
    ]
    goals = {"leak_rate": "0", "project_recall": "≥ 0.95", "user_recall": "1.0"}
    goals |= {"wrong_tokens_per_block": "0", "wrong_token_share": "0"}
    for label, key, form in PROJECT_ROWS:
        out.append(
            f"| {label} | **{form.format(ours[key])}** | {form.format(flat[key])} | {goals[key]} |"
        )
    shared = bench.get("shared_thread")
    if shared:
        out += [
            "",
            f"Two kernels on two projects, one home, plain `%%agent` cells in the thread "
            f"`default` ({_int(shared['requests'])} requests, {shared['threads']} threads): "
            f"the other project's conversation in a request, leak rate "
            f"**{shared['leak_rate']:.3f}**, token share **{shared['wrong_token_share']:.3f}**; "
            f"in the `<memory>` block, leak rate **{shared['memory_block_leak_rate']:.3f}**, "
            f"token share **{shared['memory_block_wrong_token_share']:.3f}** (goal 0 each).",
        ]
    out += ["", *Provenance(bench, figures).lines()]
    return "\n".join(out) + "\n"


RENDERERS = {
    "locomo": (locomo_table, locomo_figures),
    "speed": (speed_table, speed_figures),
    "recall": (recall_table, recall_figures),
    "aging": (aging_setup, aging_table, aging_figures),
    "embedding_runtime": (embedding_runtime_table,),
    "projects": (projects_table,),
}


def main(argv: list[str] | None = None) -> int:
    """Print tables from the results files (``make bench`` ends with the speed summary)."""
    import argparse

    parser = argparse.ArgumentParser(description="Print the docs' benchmark tables.")
    parser.add_argument("tables", nargs="*", help=f"any of {', '.join(RENDERERS)} (default: all)")
    parser.add_argument("--results", type=Path, default=RESULTS_DIR, metavar="DIR")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.tables) - set(RENDERERS))
    if unknown:
        parser.error(f"unknown tables: {', '.join(unknown)}")
    for i, name in enumerate(args.tables or RENDERERS):
        if i:
            print()
        print(f"== {name} ({Path(args.results).name}/)\n")
        print("\n".join(render(results_dir=args.results) for render in RENDERERS[name]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
