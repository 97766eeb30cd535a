"""A month of three projects on the offline model: memory per project against one global memory.

Issue 28's benchmark. One user works on three projects, ten sessions each, interleaved
(session 1 of each, then session 2 of each, …). A session is scripted turns in the
project's notebook (``Agent.run(..., project=P)``): it states one fact about the user
("I prefer Arrow7 over pandas"), one or two facts about the project ("In this project,
the target column is churn_flag_k3"), then asks about an earlier one; the thread is
folded by the offline model after the session. Every fact carries a unique token, so a
fact in a block is traced to what was said.

At the end, every project asks about each of its own facts and each of the user's: the
question is the fact's token, and the block is what the next turn would inject
(``Memory.injection`` for the project). The same memory with its scope fields removed
(DeerFlow's one global memory, where every fact is the user's) answers the same
questions with the same ranking and budget, in the same run. Printed, for both:

- **leak rate**: blocks holding a fact of another project (goal 0);
- **project facts kept and injected** when their own project asks (goal ≥ 0.95);
- **user facts available in every project** (goal 1.0);
- **tokens of the block spent on another project's facts**, per block and as a share of
  the block (goal 0; the global memory's is reported).

The shared-thread case (issue 36): two notebooks in two projects on one home, each in the
plain ``default`` thread, in two kernels (an agent and its own ``Memory`` each), take turns
with the same script. Printed: the share of their model requests that carry a word of the
other project (its thread's messages or its facts; goal 0) and the share of the request
tokens those lines spend (goal 0).

    .venv/bin/python benchmarks/projects.py [--sessions N] [--results DIR | --no-results]

The figures go to ``benchmarks/results/projects.json`` (docs/benchmarks.md renders them).
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import Results, add_results_options, report_written, results_dir  # noqa: E402

from deerflow_nb.agent import Agent  # noqa: E402
from deerflow_nb.config import load_settings  # noqa: E402
from deerflow_nb.memory import Memory  # noqa: E402
from deerflow_nb.memory.retrieval.injection import inject  # noqa: E402
from deerflow_nb.projects import fact_project  # noqa: E402
from deerflow_nb.tokens import count_tokens  # noqa: E402

GOALS = {
    "leak_rate": 0.0,
    "project_recall": 0.95,
    "user_recall": 1.0,
    "wrong_tokens": 0,
    "shared_thread_leak_rate": 0.0,
    "shared_thread_wrong_token_share": 0.0,
}
PROJECTS = ("churn", "clinic", "forecast")
SHARED = ("churn", "clinic")  # the shared-thread case's two notebooks
MEMORY_BLOCK = re.compile(r"<memory>.*?</memory>", re.DOTALL)
USER_FACTS = [
    "I prefer Arrow7 over pandas",
    "I use Quill3 for plotting",
    "I know Tamarin9 well",
    "I prefer Lumen5 notebooks over scripts",
    "I use Pebble2 for testing",
    "I know Garnet8 well",
    "I prefer Vesper4 for dashboards",
    "I use Cobalt6 for versioning",
    "I know Saffron1 well",
    "I prefer Dorado2 for reports",
]
PROJECT_FACTS = {
    "churn": [
        "the training data is in churnset_a1.parquet",
        "the target column is churnflag_b2 for customers lost within 90 days",
        "the team uses 5-fold CV with seed churnseed_c3",
        "the last model scored 0.81 AUC on holdout churnhold_d4",
        "the marketing lead is churnlead_e5",
        "the feature table is churnfeat_f6",
        "the baseline model is churnbase_g7",
        "the test split is the last 3 months in churnsplit_h8",
        "the stakeholders rejected churnplot_i9 charts",
        "the scoring job runs from churnjob_j0",
        "the data dictionary is churndict_k1",
        "the metric of record is churnmetric_l2",
        "the deadline is sprint churnsprint_m3",
        "the client is churnclient_n4",
        "the schema version is churnschema_o5",
    ],
    "clinic": [
        "the training data is in clinicset_a1.parquet",
        "the target column is clinicflag_b2 for readmissions within 30 days",
        "the team uses stratified splits with seed clinicseed_c3",
        "the last model scored 0.74 AUC on holdout clinichold_d4",
        "the clinical lead is cliniclead_e5",
        "the feature table is clinicfeat_f6",
        "the baseline model is clinicbase_g7",
        "the test split is hospital clinicsplit_h8",
        "the clinical team rejected clinicplot_i9 plots",
        "the scoring job runs from clinicjob_j0",
        "the data dictionary is clinicdict_k1",
        "the metric of record is clinicmetric_l2",
        "the deadline is sprint clinicsprint_m3",
        "the client is clinicclient_n4",
        "the schema version is clinicschema_o5",
    ],
    "forecast": [
        "the training data is in fcastset_a1.parquet",
        "the target column is fcastflag_b2 for weekly units",
        "the team uses rolling-origin CV with seed fcastseed_c3",
        "the last model scored 12.3 MAPE on holdout fcasthold_d4",
        "the supply lead is fcastlead_e5",
        "the feature table is fcastfeat_f6",
        "the baseline model is fcastbase_g7",
        "the test split is the last 8 weeks in fcastsplit_h8",
        "the planners rejected fcastplot_i9 charts",
        "the scoring job runs from fcastjob_j0",
        "the data dictionary is fcastdict_k1",
        "the metric of record is fcastmetric_l2",
        "the deadline is sprint fcastsprint_m3",
        "the client is fcastclient_n4",
        "the schema version is fcastschema_o5",
    ],
}


def token_of(text: str) -> str:
    """The fact's unique token (the word with a digit and letters: Arrow7, churnset_a1)."""
    words = [w.strip(".,") for w in text.split()]
    return next(w for w in reversed(words) if any(c.isdigit() for c in w) and w[0].isalpha())


def script(sessions: int) -> list[tuple[str, int, list[str]]]:
    """(project, session, turns) in the order the month runs them."""
    runs = []
    for s in range(sessions):
        for p, project in enumerate(PROJECTS):
            facts = PROJECT_FACTS[project]
            stated = facts[(s * 3 // 2) % len(facts) : (s * 3 // 2) % len(facts) + 1 + s % 2]
            turns = [USER_FACTS[(s + p) % len(USER_FACTS)] + "."]
            turns += [f"In this project, {fact}." for fact in stated]
            turns.append(f"What do you remember about {token_of(stated[0])}?")
            runs.append((project, s, turns))
    return runs


def stated_facts(runs: list[tuple[str, int, list[str]]]) -> tuple[set[str], dict[str, set[str]]]:
    """The user's tokens stated, and each project's."""
    users: set[str] = set()
    projects: dict[str, set[str]] = {p: set() for p in PROJECTS}
    for project, _, turns in runs:
        for turn in turns:
            if turn.startswith("In this project"):
                projects[project].add(token_of(turn))
            elif not turn.startswith("What"):
                users.add(token_of(turn))
    return users, projects


def owner_of(token_owner: dict[str, str | None], fact: dict[str, Any]) -> str | None | bool:
    """Whose fact this is by its token: a project's name, None for the user's, False if no
    stated token is in it."""
    for token, owner in token_owner.items():
        if token.lower() in fact.get("content", "").lower():
            return owner
    return False


def measure(
    blocks: list[tuple[str, str, str, list[dict[str, Any]]]], token_owner: dict[str, str | None]
) -> dict[str, Any]:
    """The figures over ``blocks`` ``(project, asked token, block text, facts listed)``."""
    leaked_blocks = wrong_tokens = block_tokens = 0
    project_hits = project_asks = user_hits = user_asks = 0
    for project, token, text, facts in blocks:
        owners = [owner_of(token_owner, f) for f in facts]
        wrong = [f for f, o in zip(facts, owners, strict=True) if o not in (None, project, False)]
        leaked_blocks += bool(wrong)
        wrong_tokens += sum(count_tokens(f["content"]) for f in wrong)
        block_tokens += count_tokens(text)
        found = any(token.lower() in f.get("content", "").lower() for f in facts)
        if token_owner[token] is None:
            user_asks, user_hits = user_asks + 1, user_hits + found
        else:
            project_asks, project_hits = project_asks + 1, project_hits + found
    return {
        "blocks": len(blocks),
        "leak_rate": leaked_blocks / len(blocks),
        "project_recall": project_hits / project_asks,
        "project_asks": project_asks,
        "user_recall": user_hits / user_asks,
        "user_asks": user_asks,
        "wrong_tokens_per_block": wrong_tokens / len(blocks),
        "wrong_token_share": wrong_tokens / max(block_tokens, 1),
    }


def run(sessions: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as home:
        settings = load_settings(home)
        memory = Memory(home, settings=settings)
        agent = Agent(settings=settings, memory=memory)
        runs = script(sessions)
        started = time.perf_counter()
        for project, session, turns in runs:
            thread = f"{project}-{session}"
            for turn in turns:
                agent.run(turn, thread=thread, project=project)
            memory.flush()
        seconds = time.perf_counter() - started
        users, projects = stated_facts(runs)
        token_owner: dict[str, str | None] = {t: None for t in users}
        for project, tokens in projects.items():
            token_owner.update({t: project for t in tokens})
        data = memory.data
        budget = settings.memory.max_injection_tokens
        flat = copy.deepcopy(data)  # DeerFlow's one global memory: every fact the user's
        for fact in flat["facts"]:
            fact.pop("scope", None)
            fact.pop("project", None)
        flat.pop("projects", None)
        ours, global_ = [], []
        for project in PROJECTS:
            asks = sorted(projects[project]) + sorted(users)
            for token in asks:
                question = f"What do you remember about {token}?"
                text, facts = memory.injection(question, budget, project=project)
                ours.append((project, token, text, facts))
                text, facts = inject(flat, budget, question)
                global_.append((project, token, text, facts))
        stored = data["facts"]
        agent.close()
        memory.close()
    return {
        "setup": {
            "projects": len(PROJECTS),
            "sessions_per_project": sessions,
            "turns": sum(len(t) for _, _, t in runs),
            "user_facts_stated": len(users),
            "project_facts_stated": sum(len(t) for t in projects.values()),
            "facts_stored": len(stored),
            "project_facts_stored": sum(1 for f in stored if fact_project(f) is not None),
            "budget_tokens": budget,
            "seconds": seconds,
        },
        "per_project": measure(ours, token_owner),
        "global": measure(global_, token_owner),
    }


def shared_thread(sessions: int) -> dict[str, Any]:
    """Two kernels in two projects on one home, both in the plain ``default`` thread: how
    many of their model requests carry a line naming the other project's token, and the
    share of the request tokens such lines spend. The thread's part of a request (its
    messages and summary) is counted apart from the ``<memory>`` block (facts and the
    user's summaries, which a fold writes)."""
    owner = {token_of(fact).lower(): p for p in SHARED for fact in PROJECT_FACTS[p]}
    counts = {"requests": 0, "leaked": 0, "block_leaked": 0, "wrong": 0, "block_wrong": 0}
    all_tokens = 0
    with tempfile.TemporaryDirectory() as home:
        settings = load_settings(home)
        agents = {project: Agent(settings=settings) for project in SHARED}
        for project, _, turns in script(sessions):
            if project not in agents:
                continue
            others = [token for token, p in owner.items() if p != project]
            for turn in turns:
                agents[project].run(turn, project=project)
                text = "\n".join(
                    str(m.get("content") or "") for m in agents[project].last_turn.model_view
                )
                block = "\n".join(MEMORY_BLOCK.findall(text))
                for key, part in (("", MEMORY_BLOCK.sub("", text)), ("block_", block)):
                    wrong = [
                        line for line in part.splitlines() if any(t in line.lower() for t in others)
                    ]
                    counts[f"{key}leaked"] += bool(wrong)
                    counts[f"{key}wrong"] += sum(count_tokens(line) for line in wrong)
                counts["requests"] += 1
                all_tokens += count_tokens(text)
            agents[project].memory.flush()
        threads = len(agents[SHARED[0]].journal.threads())
        for agent in agents.values():
            agent.close()
    requests = max(counts["requests"], 1)
    return {
        "requests": counts["requests"],
        "threads": threads,
        "leak_rate": counts["leaked"] / requests,
        "wrong_token_share": counts["wrong"] / max(all_tokens, 1),
        "memory_block_leak_rate": counts["block_leaked"] / requests,
        "memory_block_wrong_token_share": counts["block_wrong"] / max(all_tokens, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, help="sessions per project (10; --quick: 2)")
    add_results_options(parser)
    args = parser.parse_args(argv)
    args.sessions = args.sessions or (2 if args.quick else 10)
    figures = run(args.sessions)
    setup, ours, flat = figures["setup"], figures["per_project"], figures["global"]
    print(
        f"{setup['projects']} projects x {setup['sessions_per_project']} sessions, "
        f"{setup['turns']} turns on the offline model ({setup['seconds']:.1f} s); "
        f"{setup['user_facts_stated']} user and {setup['project_facts_stated']} project facts "
        f"stated, {setup['facts_stored']} stored; block budget {setup['budget_tokens']} tokens"
    )
    print(f"{'':44} {'per project':>12} {'one global':>12}")
    rows = [
        ("leak rate (blocks with another project's)", "leak_rate", "{:.3f}"),
        ("project facts injected in their project", "project_recall", "{:.3f}"),
        ("user facts available in every project", "user_recall", "{:.3f}"),
        ("tokens per block on another project", "wrong_tokens_per_block", "{:.1f}"),
        ("share of the block on another project", "wrong_token_share", "{:.3f}"),
    ]
    for label, key, form in rows:
        print(f"{label:44} {form.format(ours[key]):>12} {form.format(flat[key]):>12}")
    results = Results(
        "projects",
        about="3 projects x 10 sessions on the offline model: memory per project vs one global",
        goals=GOALS,
        options={"sessions": args.sessions},
    )
    results.add("setup", **setup)
    results.add("per_project", **ours)
    results.add("global", **flat)
    shared = shared_thread(args.sessions)
    print(
        f"shared thread ({' and '.join(SHARED)} in 'default', one home, two kernels): "
        f"{shared['requests']} requests in {shared['threads']} threads, leak rate "
        f"{shared['leak_rate']:.3f}, wrong-project token share {shared['wrong_token_share']:.3f}"
        f"; in the <memory> block: leak rate {shared['memory_block_leak_rate']:.3f}, token "
        f"share {shared['memory_block_wrong_token_share']:.3f}"
    )
    results.add("shared_thread", **shared)
    report_written(results.write(results_dir(args)))
    met = (
        shared["leak_rate"] == 0
        and shared["wrong_token_share"] == 0
        and ours["leak_rate"] == 0
        and ours["project_recall"] >= GOALS["project_recall"]
        and ours["user_recall"] == 1.0
        and ours["wrong_tokens_per_block"] == 0
    )
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
