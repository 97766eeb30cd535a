"""How much of each LOCOMO question's evidence lands in the injected ``<memory>`` block.

Usage::

    python benchmarks/locomo_injection.py [DATA_DIR] [--no-embeddings] [--halves]
        [--only NAME] [--no-quality] [--no-speed] [--quick] [--results DIR | --no-results]

DATA_DIR defaults to ``../shared/data/locomo-dev`` beside the repository (or beside its
main checkout, from a git worktree). Each
conversation's ``session_N_observation`` facts become memory facts (``source`` = the
dialog ids they came from, prefixed with the file name when conversations share a store;
``createdAt`` = the session's date). Observations carry no confidence: the realistic rows
(the default) give each fact one of 0.8, 0.85, 0.9 or 0.95 by a hash of its text, the
few round values an extraction model writes; the flat rows give every fact 0.9, as the
figures before the grouped layout did. For each question of categories 1-4, the score is
the share of its evidence dialog ids (those that some observation cites) found among the
injected facts.

One run prints a table per confidence setting: per-conversation stores at 2000 tokens and
all conversations merged into one store at 500 tokens, for DeerFlow's confidence-only
injection, DeerFlow's planned TF-IDF 0.6 / confidence 0.4, plain BM25 (bm25s, its default
tokenizer), and ours with and without MiniLM embeddings, plus p50 latency per query. Each
figure carries its 95% bootstrap interval over the questions, the spread a different draw
of questions would show: two rankings whose intervals overlap widely are not told apart.
``--halves`` adds each row's figures on the two dev halves alone (conversations 26 and 30;
41-43), what tuning looks at: a change is kept only if it helps their average and costs
neither half more than a hair. Every ranking is packed by the injection's own packer
(``select_in_order``): the same block layout, the same exact token counting.

A speed section follows, each figure beside a baseline from the same run: on a
10,000-fact store, ranked injection and injection without context against DeerFlow's
classic injection; the first call on a new memory revision (one fact changed) against the
classic call on it; and a cold start on 10,000 never-seen texts against bm25s tokenising
and indexing them alone.

The figures also go to ``benchmarks/results/locomo_injection.json`` (``--results DIR``,
``--no-results``), with the goals, the run's date, machine and options; rows a run skips
(``--no-embeddings``, ``--only``, ``--no-speed``) keep their earlier values there, dated.

``--quick`` checks that it runs: no MiniLM row, and a speed section on
``QUICK_SPEED_FACTS`` facts with a few calls each (``tests/test_benchmarks.py``
runs it on a tiny LOCOMO-shaped set of its own).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from functools import partial
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
    has_conversations,  # noqa: E402
    report_written,
)
from benchlib import results_dir as results_dir_of  # noqa: E402

from deerflow_nb.memory.retrieval.injection import select_facts, select_in_order  # noqa: E402
from deerflow_nb.memory.retrieval.terms import texts_to_embed  # noqa: E402
from deerflow_nb.tokens import count_tokens  # noqa: E402

DEFAULT_DATA = default_data_dir("locomo-dev")
FACT_CONFIDENCE = 0.9  # the flat rows: every fact the same
# The realistic rows: the few round values an extraction model writes, one per fact by a
# hash of its text (stable across runs and machines, unlike Python's salted hash()).
REALISTIC_CONFIDENCES = (0.8, 0.85, 0.9, 0.95)
# The dev halves the ranking and the block were tuned on, each by the average of the two.
HALVES = (("26", "30"), ("41", "42", "43"))
CATEGORIES = (1, 2, 3, 4)
PER_CONVERSATION_BUDGET = 2000
MERGED_BUDGET = 500
SPEED_FACTS = 10_000
REVISIONS = 9  # new revisions timed (one fact changed each)
COLD_ROUNDS = 3  # cold starts timed (every text new)
SPEED_CALLS = 200  # interleaved calls timed per injection
QUICK_SPEED_FACTS, QUICK_REVISIONS, QUICK_SPEED_CALLS = 300, 2, 10
BOOTSTRAP_ROUNDS = 2000
# What the figures are held to, realistic confidences: evidence recall per
# ranking and store; ranked injection against DeerFlow's classic one; a new revision's
# first call.
GOALS = {
    "per_conversation": {"ours": 0.95, "ours_minilm": 0.98},
    "merged": {"ours": 0.85, "ours_minilm": 0.90},
    "ranked_over_classic_max": 1.5,
    "first_call_max_ms": 300.0,
}
ABOUT = (
    "LOCOMO evidence recall of the injected <memory> block, ours against DeerFlow's "
    "rankings, and injection speed against DeerFlow's classic injection"
)
_DIA_RE = re.compile(r"D\d+:\d+")


# -- data ------------------------------------------------------------------------------
def session_date(text: str) -> str:
    """LOCOMO's ``1:56 pm on 8 May, 2023`` as ISO 8601 UTC."""
    stamp = datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y")
    return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")


def realistic_confidence(text: str) -> float:
    """One of ``REALISTIC_CONFIDENCES``, picked by a hash of ``text``."""
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=4).digest()
    return REALISTIC_CONFIDENCES[int.from_bytes(digest, "big") % len(REALISTIC_CONFIDENCES)]


def load_conversation(
    path: Path, prefix: str = "", realistic: bool = True
) -> tuple[list[dict], list[dict]]:
    """Facts (store order: session by session) and answerable questions of one file;
    confidences realistic (by a hash of each text) or flat (all ``FACT_CONFIDENCE``)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    sessions = sorted(
        int(key.split("_")[1]) for key in data if re.fullmatch(r"session_\d+_observation", key)
    )
    facts: list[dict] = []
    for number in sessions:
        created = session_date(data[f"session_{number}_date_time"])
        for items in data[f"session_{number}_observation"].values():
            for text, ids in items:
                ids = ids if isinstance(ids, list) else [ids]
                dia = [prefix + d for raw in ids for d in _DIA_RE.findall(str(raw))]
                facts.append(
                    {
                        "id": f"{prefix}f{len(facts)}",
                        "content": text,
                        "category": "context",
                        "confidence": realistic_confidence(text) if realistic else FACT_CONFIDENCE,
                        "createdAt": created,
                        "source": ",".join(dia),
                    }
                )
    cited = {s for f in facts for s in f["source"].split(",") if s}
    questions = []
    for qa in data.get("qa", []):
        if qa.get("category") not in CATEGORIES:
            continue
        evidence = {prefix + d for raw in qa.get("evidence", []) for d in _DIA_RE.findall(raw)}
        evidence &= cited
        if evidence:
            questions.append({"question": qa["question"], "evidence": evidence})
    return facts, questions


def memory_of(facts: list[dict]) -> dict[str, Any]:
    return {"version": "1.0", "user": {}, "history": {}, "facts": facts}


def evidence_recall(selected: Iterable[dict], evidence: set[str]) -> float:
    """Share of ``evidence`` dialog ids cited by the selected facts."""
    found = {s for f in selected for s in str(f.get("source", "")).split(",")}
    return len(evidence & found) / len(evidence)


# -- baselines, packed like ours ------------------------------------------------------
def pack(memory: dict[str, Any], order: Iterable[int], max_tokens: int) -> list[dict]:
    """Facts in ``order`` while they fit, laid out exactly as our injection lays them out."""
    return select_in_order(memory, order, max_tokens)


class ConfidenceOnly:
    """DeerFlow today: highest confidence first, ties in store order."""

    def __init__(self, facts: list[dict]) -> None:
        self.memory = memory_of(facts)
        self.order = sorted(range(len(facts)), key=lambda i: -facts[i]["confidence"])

    def __call__(self, question: str, max_tokens: int) -> list[dict]:
        return pack(self.memory, self.order, max_tokens)


class TfidfPlan:
    """DeerFlow's plan: cosine of TF-IDF vectors × 0.6 + confidence × 0.4.

    scikit-learn's default TfidfVectorizer, written out: lowercase ``\\b\\w\\w+\\b`` tokens,
    smoothed idf, l2-normalised rows.
    """

    _TOKEN = re.compile(r"(?u)\b\w\w+\b")

    def __init__(self, facts: list[dict]) -> None:
        self.facts = facts
        self.memory = memory_of(facts)
        docs = [self._TOKEN.findall(f["content"].lower()) for f in facts]
        self.vocab = {t: i for i, t in enumerate(sorted({t for d in docs for t in d}))}
        df = np.zeros(len(self.vocab))
        for doc in docs:
            for t in set(doc):
                df[self.vocab[t]] += 1
        self.idf = np.log((1 + len(docs)) / (1 + df)) + 1
        self.matrix = np.zeros((len(docs), len(self.vocab)))
        for row, doc in enumerate(docs):
            for t in doc:
                self.matrix[row, self.vocab[t]] += 1
        self.matrix *= self.idf
        self.matrix /= np.maximum(np.linalg.norm(self.matrix, axis=1, keepdims=True), 1e-12)
        self.confidence = np.array([f["confidence"] for f in facts])

    def __call__(self, question: str, max_tokens: int) -> list[dict]:
        q = np.zeros(len(self.vocab))
        for t in self._TOKEN.findall(question.lower()):
            if t in self.vocab:
                q[self.vocab[t]] += 1
        q *= self.idf
        norm = np.linalg.norm(q)
        similarity = self.matrix @ (q / norm) if norm else np.zeros(len(self.facts))
        total = 0.6 * similarity + 0.4 * self.confidence
        return pack(self.memory, np.argsort(-total, kind="stable"), max_tokens)


class PlainBM25:
    """bm25s with its default tokenizer and parameters; no stemming, no fusion."""

    def __init__(self, facts: list[dict]) -> None:
        import bm25s

        self.facts = facts
        self.memory = memory_of(facts)
        self.bm25 = bm25s.BM25()
        corpus = bm25s.tokenize([f["content"] for f in facts], show_progress=False)
        self.bm25.index(corpus, show_progress=False)

    def __call__(self, question: str, max_tokens: int) -> list[dict]:
        import bm25s

        terms = bm25s.tokenize([question], return_ids=False, show_progress=False)[0]
        scores = self.bm25.get_scores(terms) if terms else np.zeros(len(self.facts))
        return pack(self.memory, np.argsort(-scores, kind="stable"), max_tokens)


class Ours:
    """``deerflow_nb.memory.select_facts`` itself, with or without an embedder."""

    def __init__(self, facts: list[dict], embedder: Any = None) -> None:
        self.memory = memory_of(facts)
        self.embedder = embedder
        if embedder is not None:
            embedder.warm(texts_to_embed([f["content"] for f in facts]))  # at fold time

    def __call__(self, question: str, max_tokens: int) -> list[dict]:
        return select_facts(self.memory, question, max_tokens, embedder=self.embedder)


# -- evaluation -----------------------------------------------------------------------
def question_recalls(
    make: Callable[[list[dict]], Callable[[str, int], list[dict]]],
    stores: list[tuple[list[dict], list[dict]]],
    max_tokens: int,
) -> tuple[list[float], list[float]]:
    """Each question's evidence recall, over every question of every store, and per-query
    seconds."""
    recalls: list[float] = []
    seconds: list[float] = []
    for facts, questions in stores:
        rank = make(facts)
        for q in questions:
            start = time.perf_counter()
            selected = rank(q["question"], max_tokens)
            seconds.append(time.perf_counter() - start)
            recalls.append(evidence_recall(selected, q["evidence"]))
    return recalls, seconds


def evaluate(
    make: Callable[[list[dict]], Callable[[str, int], list[dict]]],
    stores: list[tuple[list[dict], list[dict]]],
    max_tokens: int,
) -> tuple[float, list[float]]:
    """Mean evidence recall over every question of every store, and per-query seconds."""
    recalls, seconds = question_recalls(make, stores, max_tokens)
    return (sum(recalls) / len(recalls) if recalls else math.nan), seconds


def bootstrap_interval(
    recalls: list[float], rounds: int = BOOTSTRAP_ROUNDS, seed: int = 0
) -> tuple[float, float]:
    """The 95% percentile-bootstrap interval of the mean recall, resampling questions: how
    far a figure could move on another draw of questions like these (seeded, so a run
    repeats)."""
    if not recalls:
        return math.nan, math.nan
    values = np.asarray(recalls, dtype=float)
    draws = np.random.default_rng(seed).integers(0, len(values), (rounds, len(values)))
    means = values[draws].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def interval(recalls: list[float]) -> dict[str, float]:
    """The mean recall and its bootstrap interval, as the results file keeps them."""
    low, high = bootstrap_interval(recalls)
    return {"mean": statistics.fmean(recalls) if recalls else math.nan, "low": low, "high": high}


def _cell(recalls: list[float]) -> str:
    """``0.897 (0.874-0.918)``: the mean and its bootstrap interval."""
    figure = interval(recalls)
    return f"{figure['mean']:.3f} ({figure['low']:.3f}-{figure['high']:.3f})"


def local_embedder(journal_dir: Path) -> Any:
    """The bundled MiniLM through the real embedder and a journal cache."""
    from deerflow_nb.config import Settings
    from deerflow_nb.memory.retrieval.embedder import get_embedder
    from deerflow_nb.storage.journal import Journal

    settings = Settings(home=journal_dir)
    settings.memory.embeddings = "local:all-MiniLM-L6-v2"
    return get_embedder(settings, Journal(journal_dir / "journal.db"))


Stores = list[tuple[list[dict], list[dict]]]


def load_stores(files: list[Path], realistic: bool) -> tuple[Stores, Stores]:
    """One store per conversation, and all of ``files`` merged into one store."""
    per_conversation = [load_conversation(p, realistic=realistic) for p in files]
    merged_facts: list[dict] = []
    merged_questions: list[dict] = []
    for p in files:
        facts, questions = load_conversation(p, prefix=f"{p.stem}:", realistic=realistic)
        merged_facts += facts
        merged_questions += questions
    return per_conversation, [(merged_facts, merged_questions)]


def rankings_for(embedder: Any, only: str | None = None) -> list[tuple[str, str, Callable]]:
    """(key in the results file, name, maker) of each ranking ``only`` keeps."""
    rankings: list[tuple[str, str, Callable]] = [
        ("confidence", "confidence only (DeerFlow today)", ConfidenceOnly),
        ("tfidf", "TF-IDF 0.6 / confidence 0.4 (DeerFlow's plan)", TfidfPlan),
        ("bm25", "BM25 (bm25s, plain)", PlainBM25),
        ("ours", "ours, lexical (default install)", Ours),
    ]
    if embedder is not None:
        rankings.append(
            ("ours_minilm", "ours + MiniLM embeddings", lambda facts: Ours(facts, embedder))
        )
    return [ranking for ranking in rankings if only is None or only in ranking[1]]


def quality_table(
    data_dir: Path,
    embeddings: bool,
    *,
    only: str | None = None,
    halves: bool = False,
    results: Results | None = None,
) -> str:
    """The LOCOMO table: every ranking with realistic confidences, then with flat ones.

    ``only`` keeps the rankings whose name contains it; ``halves`` adds, for each row, the
    figures on each dev half alone (each half's conversations, merged among themselves for
    the merged column): what tuning looks at. Each row's figures also go to ``results``
    (``quality.<realistic|flat>.<ranking>``, the data set's size under ``quality.setup``).
    """
    files = sorted(data_dir.glob("*.json"))
    tmp = None
    embedder = None
    if embeddings:
        tmp = tempfile.TemporaryDirectory()
        embedder = local_embedder(Path(tmp.name))
    rankings = rankings_for(embedder, only)
    lines: list[str] = []
    for realistic in (True, False):
        setting = "realistic" if realistic else "flat"
        per_conversation, merged = load_stores(files, realistic)
        n_questions = sum(len(q) for _, q in per_conversation)
        if results is not None and realistic:
            results.add(
                "quality.setup",
                conversations=len(files),
                conversation_names=[p.stem for p in files],
                questions=n_questions,
                facts=len(merged[0][0]),
                categories=list(CATEGORIES),
                per_conversation_budget=PER_CONVERSATION_BUDGET,
                merged_budget=MERGED_BUDGET,
                realistic_confidences=list(REALISTIC_CONFIDENCES),
                flat_confidence=FACT_CONFIDENCE,
                bootstrap_rounds=BOOTSTRAP_ROUNDS,
                halves=[list(half) for half in HALVES],
            )
        confidences = (
            "realistic confidences: each fact 0.8, 0.85, 0.9 or 0.95 by a hash of its text"
            if realistic
            else f"flat confidences: every fact {FACT_CONFIDENCE}"
        )
        lines += [
            f"LOCOMO evidence recall, {confidences}: {len(files)} conversations, "
            f"{n_questions} questions (categories 1-4), {len(merged[0][0])} facts",
            "",
            f"| ranking | per-conversation @{PER_CONVERSATION_BUDGET} | merged @{MERGED_BUDGET} "
            "| p50 ms / query |",
            "|---|---|---|---|",
        ]
        for key, name, make in rankings:
            conv, t1 = question_recalls(make, per_conversation, PER_CONVERSATION_BUDGET)
            big, t2 = question_recalls(make, merged, MERGED_BUDGET)
            p50 = statistics.median(t1 + t2) * 1000
            lines.append(f"| {name} | {_cell(conv)} | {_cell(big)} | {p50:.2f} |")
            figures: dict[str, Any] = {
                "name": name,
                "confidences": setting,
                "per_conversation": interval(conv),
                "merged": interval(big),
                "p50_ms": p50,
            }
            if halves:
                figures["halves"] = {}
                for half in HALVES:
                    chosen = [p for p in files if p.stem in half]
                    if not chosen:
                        continue
                    h_conv, h_big = load_stores(chosen, realistic)
                    a = statistics.fmean(question_recalls(make, h_conv, PER_CONVERSATION_BUDGET)[0])
                    b = statistics.fmean(question_recalls(make, h_big, MERGED_BUDGET)[0])
                    lines.append(f"|   half {'+'.join(half)} | {a:.3f} | {b:.3f} | |")
                    figures["halves"]["+".join(half)] = {"per_conversation": a, "merged": b}
            if results is not None:
                results.add(f"quality.{setting}.{key}", **figures)
        lines.append("")
    if tmp is not None:
        tmp.cleanup()
    lines.append(
        "Mean evidence recall per question; in brackets its 95% bootstrap interval "
        f"({BOOTSTRAP_ROUNDS} resamples of the questions)."
    )
    return "\n".join(lines)


# -- speed ----------------------------------------------------------------------------
def deerflow_classic(memory_data: dict[str, Any], max_tokens: int = 2000) -> str:
    """DeerFlow's confidence-only injection: sort, then count line by line until full."""
    facts = sorted(
        (f for f in memory_data.get("facts", []) if str(f.get("content", "")).strip()),
        key=lambda f: float(f.get("confidence") or 0.0),
        reverse=True,
    )
    running = count_tokens("Facts:\n")
    lines: list[str] = []
    for fact in facts:
        line = f"- [{fact.get('category', 'context')} | {float(fact['confidence']):.2f}] "
        line += fact["content"].strip()
        cost = count_tokens(("\n" + line) if lines else line)
        if running + cost > max_tokens:
            break
        lines.append(line)
        running += cost
    return f"<memory>\nFacts:\n{chr(10).join(lines)}\n</memory>" if lines else ""


def speed_store(facts: list[dict], n: int) -> dict[str, Any]:
    """``n`` facts cycled from LOCOMO's, with varied confidences (so sorting is real work)."""
    out = []
    for i in range(n):
        base = facts[i % len(facts)]
        out.append(
            {**base, "id": f"s{i}", "confidence": round(0.7 + 0.3 * ((i * 37) % 101) / 100, 2)}
        )
    return memory_of(out)


def _interleaved_ms(calls: dict[str, Callable[[int], Any]], rounds: int) -> dict[str, float]:
    """Median ms per call of each function, called in turn each round so load hits all alike."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for r in range(rounds):
        for name, fn in calls.items():
            start = time.perf_counter()
            fn(r)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) * 1000 for name, t in times.items()}


def _timed_ms(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def _bm25s_build(texts: list[str]) -> None:
    """bm25s tokenising and indexing ``texts``: what building our index cost before."""
    import bm25s

    bm25s.BM25().index(bm25s.tokenize(texts, show_progress=False), show_progress=False)


def speed_section(data_dir: Path, results: Results | None = None, *, quick: bool = False) -> str:
    """The speed table; its figures, with their same-run baselines, also go to
    ``results`` (``speed``). ``quick``: a smaller store, fewer calls (checks that it runs)."""
    from deerflow_nb.memory.retrieval.injection import format_memory_for_injection

    size = QUICK_SPEED_FACTS if quick else SPEED_FACTS
    revisions = QUICK_REVISIONS if quick else REVISIONS
    cold_rounds = 1 if quick else COLD_ROUNDS
    calls = QUICK_SPEED_CALLS if quick else SPEED_CALLS

    facts: list[dict] = []
    questions: list[str] = []
    for p in sorted(data_dir.glob("*.json")):
        f, q = load_conversation(p, prefix=f"{p.stem}:")
        facts += f
        questions += [x["question"] for x in q]
    count_tokens("warm up")  # the tokenizer loads once per process, not per revision
    _bm25s_build(["warm up"])
    memory = speed_store(facts, size)
    format_memory_for_injection(memory, 2000, questions[0])
    # First call on a new revision (a fold changed one fact): the index is rebuilt, then
    # the turn is answered; DeerFlow's classic injection on the same revision beside it.
    revised: list[float] = []
    revised_classic: list[float] = []
    for r in range(revisions):
        fact = memory["facts"][r * 997 % size]
        memory["facts"][r * 997 % size] = {**fact, "content": f"{fact['content']} ({r})"}
        question = questions[r % len(questions)]
        revised.append(_timed_ms(partial(format_memory_for_injection, memory, 2000, question)))
        revised_classic.append(_timed_ms(partial(deerflow_classic, memory, 2000)))
    # A cold start: 10,000 texts never seen (a kernel's first turn), against bm25s
    # tokenising and indexing the same texts.
    cold: list[float] = []
    cold_bm25s: list[float] = []
    for r in range(cold_rounds):
        fresh = memory_of(
            [
                {**f, "content": f"{f['content']} (note {r}-{i})"}
                for i, f in enumerate(facts_of(memory))
            ]
        )
        question = questions[r % len(questions)]
        cold.append(_timed_ms(partial(format_memory_for_injection, fresh, 2000, question)))
        texts = [f["content"] for f in fresh["facts"]]
        cold_bm25s.append(_timed_ms(partial(_bm25s_build, texts)))
    picks = questions[:: max(len(questions) // 50, 1)][:50]
    ms = _interleaved_ms(
        {
            "classic": lambda r: deerflow_classic(memory, 2000),
            "no_context": lambda r: format_memory_for_injection(memory, 2000),
            "ranked": lambda r: format_memory_for_injection(memory, 2000, picks[r % len(picks)]),
        },
        rounds=calls,
    )
    classic, no_context, ranked = ms["classic"], ms["no_context"], ms["ranked"]
    first, first_classic = statistics.median(revised), statistics.median(revised_classic)
    cold_ms, bm25s_ms = statistics.median(cold), statistics.median(cold_bm25s)
    if results is not None:
        results.add(
            "speed",
            facts=size,
            budget=2000,
            calls=calls,
            revisions=revisions,
            cold_rounds=cold_rounds,
            ranked_ms=ranked,
            no_context_ms=no_context,
            classic_ms=classic,
            ranked_over_classic=ranked / classic,
            first_call_ms=first,
            first_call_classic_ms=first_classic,
            cold_ms=cold_ms,
            cold_bm25s_ms=bm25s_ms,
        )
    return "\n".join(
        [
            f"Speed: {size:,}-fact store, 2000-token budget; per-call figures are the "
            f"median of {calls} interleaved calls",
            "",
            "| injection | ms / call | same-run baseline | ms |",
            "|---|---|---|---|",
            f"| ours, no context (confidence order) | {no_context:.2f} "
            f"| DeerFlow classic (confidence only) | {classic:.2f} |",
            f"| ours, ranked for the turn (lexical) | {ranked:.2f} "
            f"| DeerFlow classic: ranked / classic = {ranked / classic:.2f}x | {classic:.2f} |",
            f"| first call on a new revision (one fact changed; median of {revisions}) "
            f"| {first:.1f} | DeerFlow classic on that revision | {first_classic:.2f} |",
            f"| first call on {size:,} never-seen texts (cold start; median of "
            f"{cold_rounds}) | {cold_ms:.0f} | bm25s tokenising + indexing them alone | "
            f"{bm25s_ms:.0f} |",
        ]
    )


def facts_of(memory: dict[str, Any]) -> list[dict]:
    return memory["facts"]


def goal_lines(results: Results) -> list[str]:
    """This run's figures against ``GOALS``, one line each."""
    lines = []
    for column in ("per_conversation", "merged"):
        for key, goal in GOALS[column].items():
            row = results.figures.get(f"quality.realistic.{key}")
            if row:
                mean = row[column]["mean"]
                verdict = "meets" if mean >= goal else f"misses by {goal - mean:.3f}"
                lines.append(f"goal: {key} {column} >= {goal:.2f} -> {mean:.3f} ({verdict})")
    speed = results.figures.get("speed")
    if speed:
        ratio, limit = speed["ranked_over_classic"], GOALS["ranked_over_classic_max"]
        verdict = "meets" if ratio <= limit else "misses"
        lines.append(f"goal: ranked / classic <= {limit:g}x -> {ratio:.2f}x ({verdict})")
        first, limit = speed["first_call_ms"], GOALS["first_call_max_ms"]
        verdict = "meets" if first <= limit else "misses"
        lines.append(
            f"goal: first call on a new revision <= {limit:g} ms -> {first:.0f} ms ({verdict})"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", nargs="?", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--no-embeddings", action="store_true", help="skip the MiniLM row")
    parser.add_argument("--only", help="only the rankings whose name contains this text")
    parser.add_argument("--halves", action="store_true", help="add each dev half's figures")
    parser.add_argument("--no-speed", action="store_true", help="skip the speed section")
    parser.add_argument("--no-quality", action="store_true", help="skip the LOCOMO table")
    add_results_options(parser)
    args = parser.parse_args(argv)
    if not has_conversations(args.data_dir):
        return 2
    args.no_embeddings = args.no_embeddings or args.quick
    results = Results(
        "locomo_injection",
        about=ABOUT,
        goals=GOALS,
        options={
            "data_dir": args.data_dir.name,
            "embeddings": "local:all-MiniLM-L6-v2" if not args.no_embeddings else None,
            "only": args.only,
            "halves": args.halves,
            "quality": not args.no_quality,
            "speed": not args.no_speed,
            "quick": args.quick,
        },
    )
    if not args.no_quality:
        print(
            quality_table(
                args.data_dir,
                not args.no_embeddings,
                only=args.only,
                halves=args.halves,
                results=results,
            ),
            flush=True,
        )
        print()
    if not args.no_speed:
        print(speed_section(args.data_dir, results, quick=args.quick))
    goals = goal_lines(results)
    if goals:
        print("\n" + "\n".join(goals))
    report_written(results.write(results_dir_of(args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
