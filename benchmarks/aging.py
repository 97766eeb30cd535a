"""A year of synthetic sessions folded with the offline model: what survives at max_facts.

Issue 20's benchmark. One user, two sessions a week for a year (deterministic, seeded):

- **stable facts** that hold all year: preferences ("I prefer Arrow7 over pandas"), habits
  ("I use Quill3 for plotting"), knowledge ("I know Tamarin9 well"); a few are stated again
  now and then, and some come up in questions ("Which tool do I use for Quill3 work?");
- **projects** ("I'm working on the Apollo12 migration") active for 3–10 weeks, talked about
  while they run, then silently over (a few end with "I no longer work on …");
- **goals** ("I want to learn Fennel4") that hold for a season;
- **one-time instructions** ("For this cell, I prefer 4 decimals", "Use teal for this chart").

Every session is folded by the offline extractor (``build_messages`` → ``extract_diff`` →
``parse``) and applied by the updater with ``max_facts``; every question injects all facts
and records the ones sharing a word with it as used, and every reinforcement as a
confirmation, exactly as ``usage.py`` does. Each item has a unique token, so a stored fact is
traced to the item it came from. At the end it prints, per policy, how many still-true
facts are in memory (of how many the user stated) and how many dead ones remain (ended
projects and goals, one-time instructions).

    .venv/bin/python benchmarks/aging.py [--max-facts N ...] [--seed S] [--quick]
                                         [--results DIR | --no-results]

``--quick``: the year's first ``QUICK_SESSIONS`` sessions, at max_facts 10 only so that
facts are evicted (unless ``--max-facts`` says otherwise): checks that it runs.

The figures also go to ``benchmarks/results/aging.json``, keyed by seed and max_facts:
a run with another seed or other limits adds its rows and keeps the others, dated.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import Results, add_results_options, report_written, results_dir  # noqa: E402

from deerflow_nb.memory.folding.extraction import build_messages, parse  # noqa: E402
from deerflow_nb.memory.updates.aging import stale_facts  # noqa: E402
from deerflow_nb.memory.updates.fact_use import relevant_ids  # noqa: E402
from deerflow_nb.memory.updates.updater import apply_diff  # noqa: E402
from deerflow_nb.offline.extractor import extract_diff  # noqa: E402

START = datetime(2026, 1, 5, 9, tzinfo=UTC)
# What the figures show: under pressure the default policy keeps more of what is still
# true, and less of what is dead, than DeerFlow's classic confidence-only eviction.
GOALS = {
    "under_pressure_max_facts": 40,
    "default": "blend",
    "baseline": "classic",
    "claim": "the default keeps more still-true facts and fewer dead ones than the baseline",
}
DAYS = 365
QUICK_SESSIONS = 30
SESSION_WEEKDAYS = (0, 3)  # two sessions a week: days 0, 3, 7, 10, …
PROJECT_DAYS = (21, 70)  # a project runs 3 to 10 weeks
SYLLABLES = [
    "ar",
    "bel",
    "cor",
    "dun",
    "el",
    "fen",
    "gar",
    "hol",
    "ix",
    "jun",
    "kel",
    "lor",
    "mar",
    "nor",
    "ost",
    "pel",
    "quin",
    "ros",
    "sel",
    "tor",
    "ul",
    "ven",
]


@dataclass
class Item:
    kind: str  # stable | project | goal | once
    token: str
    statement: str
    question: str
    start: int  # day it is first said
    end: int  # last day it holds (DAYS + 1: still true at the end)
    explicit_end: bool = False

    def alive(self, day: int) -> bool:
        return self.start <= day <= self.end


@dataclass
class Config:
    key: str  # its name in the results file
    name: str
    eviction: str
    gate: bool
    review_days: float | None = None  # monthly staleness review, approved


@dataclass
class Outcome:
    config: Config
    facts: list[dict[str, Any]] = field(default_factory=list)
    evictions: int = 0
    reviewed_out: int = 0
    seconds: float = 0.0


def token(rng: random.Random, taken: set[str]) -> str:
    while True:
        word = "".join(rng.choice(SYLLABLES) for _ in range(2)).capitalize() + str(
            rng.randint(2, 9)
        )
        if word not in taken:
            taken.add(word)
            return word


def make_items(rng: random.Random) -> list[Item]:
    taken: set[str] = set()
    items: list[Item] = []
    for i in range(28):  # facts that hold all year, stated in the first five months
        t = token(rng, taken)
        start = rng.randint(0, 150)
        statement, question = [
            (f"I prefer {t} over pandas", f"Which do I prefer, {t} or pandas?"),
            (f"I use {t} for plotting", f"How do I plot with {t} again?"),
            (f"I know {t} well", f"Remind me what I know about {t}."),
            (f"My team uses {t} for deployment", f"How does my team deploy with {t}?"),
        ][i % 4]
        items.append(Item("stable", t, statement, question, start, DAYS + 1))
    day = 0
    while day < DAYS:  # projects, one to three at a time
        t = token(rng, taken)
        length = rng.randint(*PROJECT_DAYS)
        items.append(
            Item(
                "project",
                t,
                f"I'm working on the {t} migration",
                f"What is left to do on the {t} migration?",
                day,
                day + length,
                explicit_end=rng.random() < 0.25,
            )
        )
        day += rng.randint(7, 25)
    for _ in range(10):  # goals for a season
        t = token(rng, taken)
        start = rng.randint(0, 300)
        items.append(
            Item(
                "goal", t, f"I want to learn {t}", f"Any tips for learning {t}?", start,
                start + rng.randint(30, 120),
            )
        )  # fmt: skip
    for _ in range(30):  # one-time instructions
        t = token(rng, taken)
        start = rng.randint(0, DAYS - 1)
        statement = rng.choice(
            [
                f"For this cell, I prefer {t} decimals",
                f"Use the {t} palette for this chart",
                f"This time, I want to see the {t} columns",
                f"Just for this answer, I like short {t} tables",
            ]
        )
        items.append(Item("once", t, statement, "", start, start))
    return items


def sessions(items: list[Item], rng: random.Random) -> list[tuple[int, list[str], list[str]]]:
    """(day, statements, questions) for two sessions a week (days 0, 3, 7, 10, …)."""
    days = [d for w in range(53) for d in (7 * w + o for o in SESSION_WEEKDAYS) if d < DAYS]

    def first_session(day: int) -> int | None:
        return next((d for d in days if d >= day), None)

    said_on = {id(item): first_session(item.start) for item in items}
    ended_on = {id(item): first_session(item.end + 1) for item in items if item.explicit_end}
    out = []
    for day in days:
        said: list[str] = []
        asked: list[str] = []
        for item in items:
            if said_on[id(item)] == day:
                said.append(item.statement)
            elif ended_on.get(id(item)) == day:
                said.append(f"I no longer work on the {item.token} migration")
            elif item.kind == "once" or not item.alive(day) or (said_on[id(item)] or DAYS) > day:
                continue
            elif item.kind == "project":
                if rng.random() < 0.5:
                    asked.append(item.question)
                if rng.random() < 0.15:
                    said.append(item.statement)
            elif item.kind == "goal":
                if rng.random() < 0.2:
                    asked.append(item.question)
            elif item.kind == "stable":
                if rng.random() < 0.06:
                    asked.append(item.question)
                if rng.random() < 0.02:
                    said.append(item.statement)
        if said or asked:
            out.append((day, said, asked))
    return out


def iso(day: int, minute: int = 0) -> str:
    moment = START + timedelta(days=day, minutes=minute)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def run(config: Config, plan: list[tuple[int, list[str], list[str]]], max_facts: int) -> Outcome:
    data: dict[str, Any] = {"facts": []}
    usage: dict[str, dict[str, Any]] = {}
    outcome = Outcome(config)
    started = time.perf_counter()
    last_review = 0
    for n, (day, said, asked) in enumerate(plan):
        now = iso(day)
        for question in asked:  # the turn injects everything; facts about it are used
            for fid in relevant_ids(data["facts"], question):
                row = usage.setdefault(fid, {"used": 0})
                row["used"] += 1
                row["last_used"] = now
        if said:
            conversation = []
            for text in said:
                conversation += [
                    {"role": "user", "content": text + "."},
                    {"role": "assistant", "content": "Noted."},
                ]
            messages, handles = build_messages(data, conversation)
            raw = extract_diff(messages)
            if not config.gate:
                for fact in raw["newFacts"]:
                    fact.pop("scope", None)
                    fact.pop("durability", None)
            diff = parse(json.dumps(raw), handles).to_dict()
            result = apply_diff(
                data,
                diff,
                source=f"s{n}",
                threshold=0.7,
                max_facts=max_facts,
                now=iso(day, 1),
                id_factory=lambda taken, n=n: f"fact_{len(taken) + 1:05d}_{n}",
                eviction=config.eviction,
                usage=usage,
            )
            data = result.data
            outcome.evictions += len(result.ids("evict"))
            for fid in result.ids("reinforce"):
                row = usage.setdefault(fid, {"used": 0})
                row["confirmed"] = row.get("confirmed", 0) + 1
                row["last_confirmed"] = iso(day, 1)
        if config.review_days and day - last_review >= 30:  # the user approves the proposal
            last_review = day
            stale = {
                s.fact["id"] for s in stale_facts(data, usage, days=config.review_days, now=now)
            }
            if stale:
                data = {**data, "facts": [f for f in data["facts"] if f["id"] not in stale]}
                outcome.reviewed_out += len(stale)
    outcome.facts = data["facts"]
    outcome.seconds = time.perf_counter() - started
    return outcome


def classify(facts: list[dict[str, Any]], items: list[Item]) -> dict[str, int]:
    by_token = {item.token: item for item in items}
    counts = {"true": 0, "dead": 0, "once": 0, "other": 0}
    for fact in facts:
        found = [
            by_token[t] for t in re.findall(r"[A-Z][a-z]+\d", fact["content"]) if t in by_token
        ]
        if not found:
            counts["other"] += 1
            continue
        item = found[0]
        if fact.get("category") == "correction":
            counts["other"] += 1  # "No longer works on …": true, but no item of its own
        elif item.kind == "once":
            counts["once"] += 1
        elif item.alive(DAYS):
            counts["true"] += 1
        else:
            counts["dead"] += 1
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--max-facts", type=int, action="append", help="memory.max_facts (repeatable; 40 50 100)"
    )
    parser.add_argument("--seed", type=int, default=20)
    add_results_options(parser)
    args = parser.parse_args(argv)
    limits = args.max_facts or ([10] if args.quick else [40, 50, 100])
    results = Results(
        "aging",
        about="A year of synthetic sessions folded with the offline model: what each "
        "eviction policy keeps at max_facts",
        goals=GOALS,
        options={"seed": args.seed, "max_facts": limits, "model": "offline", "quick": args.quick},
    )
    rng = random.Random(args.seed)
    items = make_items(rng)
    plan = sessions(items, rng)
    if args.quick:
        plan = plan[:QUICK_SESSIONS]
    true_items = [i for i in items if i.kind != "once" and i.alive(DAYS) and i.start < DAYS]
    configs = [
        Config("classic", "confidence only, no gate (DeerFlow classic)", "confidence", gate=False),
        Config("gate", "confidence only + scope gate", "confidence", gate=True),
        Config("blend", "blend + scope gate (default)", "blend", gate=True),
        Config(
            "review", "blend + gate + monthly stale review", "blend", gate=True, review_days=180
        ),
    ]
    statements = sum(len(s) for _, s, _ in plan)
    questions = sum(len(q) for _, _, q in plan)
    results.add(
        f"seed{args.seed}.setup",
        seed=args.seed,
        days=DAYS,
        sessions_per_week=len(SESSION_WEEKDAYS),
        project_weeks=[d // 7 for d in PROJECT_DAYS],
        sessions=len(plan),
        statements=statements,
        questions=questions,
        still_true=len(true_items),
        ended=sum(i.kind in ("project", "goal") and not i.alive(DAYS) for i in items),
        stable=sum(i.kind == "stable" for i in items),
        projects=sum(i.kind == "project" for i in items),
        goals=sum(i.kind == "goal" for i in items),
        once=sum(i.kind == "once" for i in items),
        staleness_days=next(c.review_days for c in configs if c.review_days),
    )
    print(
        f"A year of synthetic sessions (seed {args.seed}): {len(plan)} sessions, {statements} "
        f"statements, {questions} questions; {len(true_items)} facts still true at the end, "
        f"{sum(i.kind in ('project', 'goal') and not i.alive(DAYS) for i in items)} ended "
        f"(projects and goals), {sum(i.kind == 'once' for i in items)} one-time "
        f"instructions.\n"
    )
    header = (
        f"{'max_facts':>9}  {'policy':<44} {'still-true kept':>16} {'dead kept':>10} "
        f"{'one-time kept':>14} {'evictions':>10} {'reviewed out':>13} {'ms':>6}"
    )
    print(header)
    for limit in limits:
        print("-" * len(header))
        for config in configs:
            outcome = run(config, plan, limit)
            counts = classify(outcome.facts, items)
            print(
                f"{limit:>9}  {config.name:<44} {counts['true']:>9} / {len(true_items):<4} "
                f"{counts['dead']:>10} {counts['once']:>14} {outcome.evictions:>10} "
                f"{outcome.reviewed_out:>13} {outcome.seconds * 1000:>6.0f}"
            )
            results.add(
                f"seed{args.seed}.max{limit}.{config.key}",
                seed=args.seed,
                max_facts=limit,
                policy=config.name,
                still_true_kept=counts["true"],
                still_true=len(true_items),
                dead_kept=counts["dead"],
                once_kept=counts["once"],
                other_kept=counts["other"],
                evictions=outcome.evictions,
                reviewed_out=outcome.reviewed_out,
                ms=outcome.seconds * 1000,
            )
    print(
        "\nstill-true kept: facts in memory at the end that still hold, of those stated "
        "(corrections, 'No longer works on …', are counted in neither); dead kept: ended "
        "projects and goals still in memory; one-time kept: "
        "instructions for one cell stored as facts. The review row approves every monthly "
        "staleness proposal (memory.staleness_days 180)."
    )
    report_written(results.write(results_dir(args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
