"""Conversation recall on LOCOMO: how much of each question's evidence ``Memory.recall``
returns among its first 10 messages, beside plain BM25 over the same turns.

Usage::

    python benchmarks/recall.py [DATA_DIR] [--no-embeddings] [--conversations N]
                                [--synthetic N] [--quick] [--results DIR | --no-results]

DATA_DIR defaults to ``../shared/data/locomo-dev`` beside the repository (or beside its
main checkout, from a git worktree). Every
conversation is journaled in one home, each session a lead thread
(``locomo-<file>-s<N>``), one message per turn (``"Speaker: text"``, user and assistant
alternating), each message dated by its session (``created_at`` set to the session's
date, as a journal kept over those months would have it). Every answerable question
(categories 1-4) is asked through ``Memory.recall(question, k=10)``; a question's score is
the share of its evidence dialog ids among the 10 messages returned. Plain BM25 (bm25s,
its default tokenizer and parameters) ranks the same turns in the same run. With MiniLM
(``local:all-MiniLM-L6-v2``), every message is embedded first (``recall.warm``, as a
fold would), so the timed searches only embed their query.

Latency is per ``Memory.recall`` call at this journal's size (about 2,800 messages), then on
a synthetic journal of ``--synthetic`` messages (100,000 by default: LOCOMO's turns cycled
over threads of 40), whose index is built by the first search (timed apart).

The figures also go to ``benchmarks/results/recall.json``, with the goals, the run's date,
machine and options; rows a run skips (``--no-embeddings``, ``--synthetic 0``) keep their
earlier values there, dated. ``--quick`` checks that it runs: no MiniLM row, and a synthetic
journal of ``QUICK_SYNTHETIC`` messages (unless ``--synthetic`` says otherwise).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchlib import (  # noqa: E402
    Results,
    add_results_options,
    default_data_dir,
    has_conversations,  # noqa: E402
    report_written,
)
from benchlib import results_dir as results_dir_of  # noqa: E402
from locomo_injection import (  # noqa: E402  (this folder: one interval)
    BOOTSTRAP_ROUNDS,
    _cell,
    interval,
)

from deerflow_nb.config import Settings  # noqa: E402
from deerflow_nb.memory.api import Memory  # noqa: E402
from deerflow_nb.memory.retrieval import recall as recall_module  # noqa: E402
from deerflow_nb.storage import recall_index  # noqa: E402
from deerflow_nb.storage.journal import date_messages, insert_bulk  # noqa: E402

DEFAULT_DATA = default_data_dir("locomo-dev")
CATEGORIES = (1, 2, 3, 4)
K = 10
SYNTHETIC_THREAD = 40
SYNTHETIC_QUERIES = 100
QUICK_SYNTHETIC = 400
_DIA_RE = re.compile(r"D\d+:\d+")
_SESSION_RE = re.compile(r"session_(\d+)")
# What the figures are held to: evidence recall@10 on the default install and
# with MiniLM; p95 per search at LOCOMO's size and on the synthetic journal.
GOALS = {
    "recall": {"recall": 0.70, "recall_minilm": 0.75},
    "p95_max_ms": 50.0,
    "synthetic_p95_max_ms": 200.0,
}
ABOUT = (
    "LOCOMO conversation recall of Memory.recall (evidence turns among the first 10 "
    "messages) beside plain BM25, and search latency at LOCOMO's size and on a synthetic journal"
)


def session_date(text: str) -> datetime:
    """LOCOMO's ``1:56 pm on 8 May, 2023``."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y")


def load(path: Path) -> tuple[list[dict], list[dict]]:
    """Sessions (``{thread, date, turns: [{dia, text}]}``) and answerable questions of one
    conversation; dialog ids are prefixed with the file's name."""
    data = json.loads(path.read_text(encoding="utf-8"))
    prefix = f"{path.stem}:"
    numbers = sorted(int(m[1]) for key in data if (m := _SESSION_RE.fullmatch(key)))
    sessions = []
    known: set[str] = set()
    for n in numbers:
        turns = [
            {"dia": prefix + t["dia_id"], "text": f"{t['speaker']}: {t['text']}"}
            for t in data[f"session_{n}"]
        ]
        known.update(t["dia"] for t in turns)
        sessions.append(
            {
                "thread": f"locomo-{path.stem}-s{n}",
                "date": session_date(data[f"session_{n}_date_time"]),
                "turns": turns,
            }
        )
    questions = []
    for qa in data.get("qa", []):
        if qa.get("category") not in CATEGORIES:
            continue
        evidence = {prefix + d for raw in qa.get("evidence", []) for d in _DIA_RE.findall(raw)}
        evidence &= known
        if evidence:
            questions.append({"question": qa["question"], "evidence": evidence, "file": path.stem})
    return sessions, questions


def journal_sessions(memory: Memory, sessions: list[dict]) -> dict[tuple[str, int], str]:
    """Journal every turn as a message; returns (thread, seq) -> dialog id."""
    journal = memory.journal
    where: dict[tuple[str, int], str] = {}
    dates: list[tuple[str, str, int]] = []
    for session in sessions:
        journal.ensure_thread(session["thread"], kind="lead", title=session["thread"])
        for i, turn in enumerate(session["turns"]):
            role = "user" if i % 2 == 0 else "assistant"
            seq = journal.add_message(session["thread"], {"role": role, "content": turn["text"]})
            where[(session["thread"], seq)] = turn["dia"]
            stamp = session["date"] + timedelta(seconds=30 * i)
            dates.append((stamp.strftime("%Y-%m-%dT%H:%M:%S.000Z"), session["thread"], seq))
    with journal.transaction() as db:  # the session's date, as a journal kept then would have
        date_messages(db, dates)
    return where


# -- rankings ---------------------------------------------------------------------------
class PlainBM25:
    """bm25s with its default tokenizer and parameters over the same turns."""

    def __init__(self, sessions: list[dict]) -> None:
        import bm25s

        self.dias = [t["dia"] for s in sessions for t in s["turns"]]
        corpus = [t["text"] for s in sessions for t in s["turns"]]
        self.bm25 = bm25s.BM25()
        self.bm25.index(bm25s.tokenize(corpus, show_progress=False), show_progress=False)

    def __call__(self, question: str) -> list[str]:
        import bm25s

        terms = bm25s.tokenize([question], return_ids=False, show_progress=False)[0]
        if not terms:
            return []
        scores = np.asarray(self.bm25.get_scores(terms))
        return [self.dias[i] for i in np.argsort(-scores, kind="stable")[:K] if scores[i] > 0]


class Recall:
    """``Memory.recall`` itself."""

    def __init__(self, memory: Memory, where: dict[tuple[str, int], str]) -> None:
        self.memory = memory
        self.where = where

    def __call__(self, question: str) -> list[str]:
        hits = self.memory.recall(question, k=K)
        return [self.where.get((h["thread"], h["seq"]), "") for h in hits]


def run(rank: Any, questions: list[dict]) -> tuple[list[float], list[float]]:
    recalls, seconds = [], []
    for q in questions:
        start = time.perf_counter()
        found = rank(q["question"])
        seconds.append(time.perf_counter() - start)
        recalls.append(len(q["evidence"] & set(found[:K])) / len(q["evidence"]))
    return recalls, seconds


def _first_half(files: list[Path]) -> list[str]:
    stems = sorted(p.stem for p in files)
    return stems[: len(stems) // 2 or 1]


def half_means(recalls: list[float], questions: list[dict]) -> list[float | None]:
    """Recall on the first half of the conversation files (by name) and on the rest: the
    weights were chosen by the two halves' average, so both are shown."""
    files = sorted({q["file"] for q in questions})
    first = set(files[: len(files) // 2 or 1])
    a = [r for r, q in zip(recalls, questions, strict=True) if q["file"] in first]
    b = [r for r, q in zip(recalls, questions, strict=True) if q["file"] not in first]
    return [statistics.fmean(x) if x else None for x in (a, b)]


def _halves(recalls: list[float], questions: list[dict]) -> str:
    return " / ".join("-" if x is None else f"{x:.3f}" for x in half_means(recalls, questions))


def percentiles_ms(seconds: list[float]) -> tuple[float, float]:
    """p50 and p95 of ``seconds``, in ms."""
    ordered = sorted(seconds)
    p95 = ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]
    return statistics.median(ordered) * 1000, p95 * 1000


def _ms(seconds: list[float]) -> str:
    p50, p95 = percentiles_ms(seconds)
    return f"{p50:.1f} | {p95:.1f}"


def memory_at(home: Path, embeddings: str | None = None) -> Memory:
    settings = Settings(home=home)
    settings.memory.embeddings = embeddings
    return Memory(home=home, settings=settings)


def quality_table(
    data_dir: Path,
    embeddings: bool,
    conversations: int | None,
    results: Results | None = None,
) -> str:
    """The LOCOMO recall table; its figures also go to ``results`` (``quality.setup`` and
    ``quality.<bm25|recall|recall_minilm>``)."""
    files = sorted(data_dir.glob("*.json"))[:conversations]
    sessions: list[dict] = []
    questions: list[dict] = []
    for path in files:
        s, q = load(path)
        sessions += s
        questions += q
    n_messages = sum(len(s["turns"]) for s in sessions)
    rows: list[tuple[str, str, list[float], list[float]]] = []
    embed = math.nan
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        memory = memory_at(home)
        where = journal_sessions(memory, sessions)
        start = time.perf_counter()
        recall_index.sync(memory.journal)
        build = time.perf_counter() - start
        rows.append(("bm25", "BM25 (bm25s, plain)", *run(PlainBM25(sessions), questions)))
        rows.append(
            ("recall", "Memory.recall (default install)", *run(Recall(memory, where), questions))
        )
        memory.close()
        if embeddings:
            dense = memory_at(home, "local:all-MiniLM-L6-v2")
            start = time.perf_counter()
            recall_module.warm(dense.journal, dense.embedder)
            embed = time.perf_counter() - start
            rows.append(
                ("recall_minilm", "Memory.recall + MiniLM", *run(Recall(dense, where), questions))
            )
            dense.close()
    lines = [
        f"LOCOMO conversation recall: {len(files)} conversations, {len(sessions)} threads, "
        f"{n_messages} messages, {len(questions)} questions (categories 1-4)",
        "",
        f"| ranking | evidence recall@{K} | halves: first / second | p50 ms | p95 ms |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {name} | {_cell(r)} | {_halves(r, questions)} | {_ms(s)} |" for _, name, r, s in rows
    ]
    if results is not None:
        results.add(
            "quality.setup",
            conversations=len(files),
            conversation_names=[p.stem for p in files],
            first_half=_first_half(files),
            threads=len(sessions),
            messages=n_messages,
            questions=len(questions),
            categories=list(CATEGORIES),
            k=K,
            bootstrap_rounds=BOOTSTRAP_ROUNDS,
            index_build_ms=build * 1000,
        )
        for key, name, r, s in rows:
            p50, p95 = percentiles_ms(s)
            extra = {"embed_all_s": embed, "messages": n_messages} if key == "recall_minilm" else {}
            results.add(
                f"quality.{key}",
                name=name,
                recall=interval(r),
                halves=half_means(r, questions),
                p50_ms=p50,
                p95_ms=p95,
                **extra,
            )
    lines += [
        "",
        "Mean share of each question's evidence turns among the first 10 messages; in "
        f"brackets its 95% bootstrap interval ({BOOTSTRAP_ROUNDS} resamples of the questions); "
        f"halves: conversations {', '.join(_first_half(files))} and the rest. "
        f"Index built from the journal in {build * 1000:.0f} ms"
        + (f"; every message embedded with MiniLM in {embed:.1f} s." if embeddings else "."),
    ]
    return "\n".join(lines)


def synthetic_section(data_dir: Path, size: int, results: Results | None = None) -> str:
    """Latency on a journal of ``size`` messages (LOCOMO's turns cycled, threads of 40);
    the figures also go to ``results`` (``synthetic``)."""
    from deerflow_nb.storage.db import now_iso

    sessions: list[dict] = []
    questions: list[str] = []
    for path in sorted(data_dir.glob("*.json")):
        s, q = load(path)
        sessions += s
        questions += [x["question"] for x in q]
    texts = [t["text"] for s in sessions for t in s["turns"]]
    picks = questions[:: max(len(questions) // SYNTHETIC_QUERIES, 1)][:SYNTHETIC_QUERIES]
    with tempfile.TemporaryDirectory() as tmp:
        memory = memory_at(Path(tmp))
        stamp = now_iso()
        with memory.journal.transaction() as db:  # bulk, as months of turns would leave it
            threads = [f"synthetic-{t}" for t in range(math.ceil(size / SYNTHETIC_THREAD))]
            insert_bulk(
                db,
                (
                    {"id": t, "kind": "lead", "created_at": stamp, "updated_at": stamp}
                    for t in threads
                ),
                (
                    {
                        "thread_id": threads[i // SYNTHETIC_THREAD],
                        "seq": i % SYNTHETIC_THREAD + 1,
                        "role": "user" if i % 2 == 0 else "assistant",
                        "content": texts[i % len(texts)],
                        "tokens": 0,
                        "created_at": stamp,
                    }
                    for i in range(size)
                ),
            )
        start = time.perf_counter()
        memory.recall(picks[0])
        first = time.perf_counter() - start
        _, seconds = run(
            lambda q: [h["seq"] for h in memory.recall(q, k=K)],
            [{"question": q, "evidence": {""}} for q in picks],
        )
        # A new turn journaled: the next search indexes it first.
        memory.journal.ensure_thread("synthetic-new")
        memory.journal.add_message("synthetic-new", {"role": "user", "content": texts[0]})
        start = time.perf_counter()
        memory.recall(picks[1])
        after_write = time.perf_counter() - start
        memory.close()
    if results is not None:
        p50, p95 = percentiles_ms(seconds)
        results.add(
            "synthetic",
            messages=size,
            thread_length=SYNTHETIC_THREAD,
            queries=len(picks),
            first_search_ms=first * 1000,
            p50_ms=p50,
            p95_ms=p95,
            after_new_message_ms=after_write * 1000,
        )
    return "\n".join(
        [
            f"Latency on a synthetic journal of {size:,} messages (default install, "
            f"{len(picks)} LOCOMO questions)",
            "",
            "| | ms |",
            "|---|---|",
            f"| first search (builds the index from the journal) | {first * 1000:.0f} |",
            f"| p50 / p95 per search | {_ms(seconds).replace(' | ', ' / ')} |",
            f"| search right after a new message (indexes it first) | {after_write * 1000:.1f} |",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", nargs="?", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--no-embeddings", action="store_true", help="skip the MiniLM row")
    parser.add_argument("--conversations", type=int, help="only the first N conversations")
    parser.add_argument("--synthetic", type=int, help="synthetic journal size (100,000; 0: skip)")
    add_results_options(parser)
    args = parser.parse_args(argv)
    if not has_conversations(args.data_dir):
        return 2
    if args.synthetic is None:
        args.synthetic = QUICK_SYNTHETIC if args.quick else 100_000
    args.no_embeddings = args.no_embeddings or args.quick
    results = Results(
        "recall",
        about=ABOUT,
        goals=GOALS,
        options={
            "data_dir": args.data_dir.name,
            "embeddings": "local:all-MiniLM-L6-v2" if not args.no_embeddings else None,
            "conversations": args.conversations,
            "synthetic": args.synthetic,
            "quick": args.quick,
        },
    )
    table = quality_table(args.data_dir, not args.no_embeddings, args.conversations, results)
    print(table, flush=True)
    if args.synthetic > 0:
        print()
        print(synthetic_section(args.data_dir, args.synthetic, results))
    print()
    for line in goal_lines(results):
        print(line)
    report_written(results.write(results_dir_of(args)))
    return 0


def goal_lines(results: Results) -> list[str]:
    """This run's figures against ``GOALS``, one line each."""
    lines = []
    for key, goal in GOALS["recall"].items():
        row = results.figures.get(f"quality.{key}")
        if row:
            mean = row["recall"]["mean"]
            verdict = "meets" if mean >= goal else f"misses by {goal - mean:.3f}"
            lines.append(f"goal: {row['name']} recall@{K} >= {goal:.2f} -> {mean:.3f} ({verdict})")
    for key, figure, goal in (
        ("quality.recall", "p95 per search", GOALS["p95_max_ms"]),
        ("synthetic", "p95 per search, synthetic journal", GOALS["synthetic_p95_max_ms"]),
    ):
        row = results.figures.get(key)
        if row:
            verdict = "meets" if row["p95_ms"] <= goal else "misses"
            lines.append(f"goal: {figure} <= {goal:g} ms -> {row['p95_ms']:.1f} ms ({verdict})")
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
