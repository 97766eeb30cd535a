"""What LOCOMO cannot see: off-topic queries, and a notebook where the assistant says
things back. Relevance floor and echo figures for ``Memory.recall`` and fact search.

Usage::

    python benchmarks/relevance.py [DATA_DIR] [--no-embeddings] [--calibrate] [--quick]
                                   [--results DIR | --no-results]

DATA_DIR defaults to ``../shared/data/locomo-dev`` beside the repository (or beside its
main checkout). Two committed sets (``benchmarks/data``), written for this benchmark:

- ``off_topic.json``: 102 technical queries (data science, programming, infrastructure,
  finance) asked of LOCOMO's personal conversations (recall over them journaled as
  ``benchmarks/recall.py`` journals them; fact search over each conversation's observation
  facts), and 100 personal ones asked of the notebook journal and its facts. A query
  "returns something" when the search lists any result: the figure is the share that do.
- ``off_topic_heldout.json``: 40 technical and 60 personal queries of the same kinds,
  written apart and committed before anything was measured on them, never used to choose
  a floor: every floor is fitted on ``off_topic.json``, and the figures on this set say
  whether it holds on queries it never saw ("(held-out)" rows).
- ``notebook_journal.json``: 44 facts a user states in a notebook, each restated by the
  assistant, asked about by the user in a later thread (the answer restating it again),
  and asked again of the offline model, whose reply quotes the facts it was given ("(offline
  model) From memory: …", from the facts its extractor stores), with a paraphrased query.
  Recall: is the user's statement the first result? Fact search over the statements as
  facts: is the right fact first, and what share of the listed facts share no word (stem)
  with the query?

Every figure carries its 95% bootstrap interval over the queries. ``--calibrate`` prints
the distributions the floor (``deerflow_nb/memory/retrieval/relevance.py``) is chosen from: each
query's best coverage (and best MiniLM cosine) for on-topic queries (LOCOMO questions of
categories 1-4, the notebook's paraphrases) and the off-topic ones, and for each the
smallest floor letting at most ``FIT_PASS`` (half the goal's 5 %) of off-topic queries
through, with the share of on-topic queries it keeps.

``--quick`` checks that it runs: the default install's rows only (no MiniLM), calibration
included.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchlib import (  # noqa: E402
    Results,
    add_results_options,
    default_data_dir,
    has_conversations,
    report_written,
)
from benchlib import results_dir as results_dir_of  # noqa: E402
from locomo_injection import _cell, interval, load_conversation, memory_of  # noqa: E402
from recall import journal_sessions, load, memory_at  # noqa: E402

from deerflow_nb.memory.retrieval import recall as recall_module  # noqa: E402
from deerflow_nb.memory.retrieval import relevance  # noqa: E402
from deerflow_nb.memory.retrieval.fact_index import get_index  # noqa: E402
from deerflow_nb.memory.retrieval.injection import (  # noqa: E402
    fact_coverage,
    query_terms,
    rank_facts,
)
from deerflow_nb.memory.retrieval.ranking import _known_entities  # noqa: E402
from deerflow_nb.memory.retrieval.terms import analyze, without_entities  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
DEFAULT_DATA = default_data_dir("locomo-dev")
MINILM = "local:all-MiniLM-L6-v2"
K = 10
OFF_TOPIC_PASS = 0.05  # the share of off-topic queries the goal lets find something
# The floors deciding whether a search found anything are fitted to let through half that
# of each fitting set: a floor read at exactly the goal's share of one sample is exceeded
# on about half of new samples.
FIT_PASS = OFF_TOPIC_PASS / 2
GOALS = {
    "off_topic_recall_max": 0.05,
    "off_topic_search_max": 0.05,
    "statement_first_min": 0.9,
    "right_fact_first_min": 0.8,
    "no_shared_word_max": 0.2,
}
ABOUT = (
    "The relevance floor and echo ranking, on what LOCOMO cannot see: off-topic queries "
    "and a notebook-like journal where the assistant restates what the user said"
)


def notebook() -> list[dict[str, str]]:
    return json.loads((DATA / "notebook_journal.json").read_text(encoding="utf-8"))["items"]


def off_topic(held_out: bool = False) -> dict[str, list[str]]:
    """The off-topic queries the floors are fitted on, or (``held_out``) the set kept apart
    to report them."""
    name = "off_topic_heldout.json" if held_out else "off_topic.json"
    data = json.loads((DATA / name).read_text(encoding="utf-8"))
    return {"technical": data["technical"], "personal": data["personal"]}


def journal_notebook(memory: Any, items: list[dict[str, str]]) -> dict[int, tuple[str, int]]:
    """Each item's statement and echo in a thread of four items, then later threads with
    its question and the answer restating it, then threads with the question asked again
    and the offline model's reply (``offline_replies``); returns item -> (thread, seq) of
    the statement."""
    journal = memory.journal
    where = {}
    for start in range(0, len(items), 4):
        thread = f"nb-told-{start // 4}"
        journal.ensure_thread(thread, kind="lead", title=thread)
        for i in range(start, min(start + 4, len(items))):
            where[i] = (thread, journal.add_message(thread, _user(items[i]["statement"])))
            journal.add_message(thread, {"role": "assistant", "content": items[i]["echo"]})
    for start in range(0, len(items), 4):
        thread = f"nb-asked-{start // 4}"
        journal.ensure_thread(thread, kind="lead", title=thread)
        for i in range(start, min(start + 4, len(items))):
            journal.add_message(thread, _user(items[i]["question"]))
            journal.add_message(thread, {"role": "assistant", "content": items[i]["echo"]})
    replies = offline_replies(items)
    for start in range(0, len(items), 4):
        thread = f"nb-offline-{start // 4}"
        journal.ensure_thread(thread, kind="lead", title=thread)
        for i in range(start, min(start + 4, len(items))):
            journal.add_message(thread, _user(items[i]["question"]))
            journal.add_message(thread, {"role": "assistant", "content": replies[i]})
    return where


def offline_replies(items: list[dict[str, str]]) -> list[str]:
    """The offline model's reply to each item's question, with the memory a turn injects:
    the facts it stores when told to remember the statements (its ``remember`` tool's
    reading: the extractor's facts, else the statement in the third person), ranked for
    the question; it quotes those sharing a word with it."""
    from deerflow_nb.memory import format_memory_for_injection
    from deerflow_nb.offline.model import OfflineModel
    from deerflow_nb.offline.routing import facts_to_remember

    facts = [
        {
            "id": f"nb{i}-{j}",
            "content": content,
            "category": category,
            "confidence": 0.9,
            "createdAt": "2026-03-01T10:00:00Z",
        }
        for i, item in enumerate(items)
        for j, (content, category) in enumerate(facts_to_remember(_told(item["statement"])))
    ]
    model, store = OfflineModel(), memory_of(facts)
    replies = []
    for item in items:
        block = format_memory_for_injection(store, context=item["question"])
        messages = [{"role": "system", "content": block}, _user(item["question"])]
        replies.append(model.chat(messages).content)
    return replies


def _told(statement: str) -> str:
    """What a statement asks to remember ("Remember that I use …" → "I use …")."""
    return re.sub(r"^(?:please\s+)?remember\s+that\s+", "", statement, flags=re.IGNORECASE)


def _user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def notebook_facts(items: list[dict[str, str]]) -> dict[str, Any]:
    return memory_of(
        [
            {
                "id": f"nb{i}",
                "content": item["statement"],
                "category": "context",
                "confidence": 0.9,
                "createdAt": "2026-03-01T10:00:00Z",
            }
            for i, item in enumerate(items)
        ]
    )


def locomo_stores(data_dir: Path) -> list[dict[str, Any]]:
    return [memory_of(load_conversation(p)[0]) for p in sorted(data_dir.glob("*.json"))]


def shares_no_word(query: str, fact: dict[str, Any]) -> bool:
    return not set(analyze(query)) & set(analyze(str(fact.get("content", ""))))


# -- the figures ------------------------------------------------------------------------
def figures(data_dir: Path, embedder_spec: str | None, results: Results | None) -> list[str]:
    """One setting's rows (default install, or with ``embedder_spec``)."""
    items = notebook()
    queries = off_topic()
    held = off_topic(held_out=True)
    label = "MiniLM" if embedder_spec else "default"
    rows: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "locomo"
        memory = memory_at(home, embedder_spec)
        sessions = [s for p in sorted(data_dir.glob("*.json")) for s in load(p)[0]]
        journal_sessions(memory, sessions)
        embedder = memory.embedder
        if embedder is not None:
            recall_module.warm(memory.journal, embedder)
        rows["off-topic recall returns something"] = [
            float(bool(memory.recall(q, k=K))) for q in queries["technical"]
        ]
        stores = locomo_stores(data_dir)
        rows["off-topic fact search returns something"] = [
            float(bool(rank_facts(store, q, embedder=embedder)))
            for store in stores
            for q in queries["technical"]
        ]
        rows["off-topic recall returns something (held-out)"] = [
            float(bool(memory.recall(q, k=K))) for q in held["technical"]
        ]
        rows["off-topic fact search returns something (held-out)"] = [
            float(bool(rank_facts(store, q, embedder=embedder)))
            for store in stores
            for q in held["technical"]
        ]
        memory.close()

        home = Path(tmp) / "notebook"
        memory = memory_at(home, embedder_spec)
        where = journal_notebook(memory, items)
        firsts = [memory.recall(item["query"], k=K)[:1] for item in items]
        rows["notebook: statement is the first recalled"] = [
            float(bool(f) and (f[0]["thread"], f[0]["seq"]) == where[i])
            for i, f in enumerate(firsts)
        ]
        rows["off-topic (personal) recall returns something"] = [
            float(bool(memory.recall(q, k=K))) for q in queries["personal"]
        ]
        facts = notebook_facts(items)
        embedder = memory.embedder
        found = [rank_facts(facts, item["query"], embedder=embedder)[:K] for item in items]
        rows["notebook: right fact first"] = [
            float(bool(f) and f[0][0]["id"] == f"nb{i}") for i, f in enumerate(found)
        ]
        rows["notebook: listed facts sharing no word"] = [
            float(shares_no_word(item["query"], fact))
            for item, listed in zip(items, found, strict=True)
            for fact, _ in listed
        ]
        rows["off-topic (personal) fact search returns something"] = [
            float(bool(rank_facts(facts, q, embedder=embedder))) for q in queries["personal"]
        ]
        rows["off-topic (personal) recall returns something (held-out)"] = [
            float(bool(memory.recall(q, k=K))) for q in held["personal"]
        ]
        rows["off-topic (personal) fact search returns something (held-out)"] = [
            float(bool(rank_facts(facts, q, embedder=embedder))) for q in held["personal"]
        ]
        memory.close()
    if results is not None:
        for name, values in rows.items():
            key = f"{'minilm' if embedder_spec else 'default'}.{_key(name)}"
            results.add(key, name=name, n=len(values), value=interval(values))
    return [
        f"| {label} | {name} | {_cell(values)} | {len(values)} |" for name, values in rows.items()
    ]


def _key(name: str) -> str:
    return "_".join("".join(c if c.isalnum() else " " for c in name.lower()).split())


# -- calibration ------------------------------------------------------------------------
def calibrate(data_dir: Path, embeddings: bool, results: Results | None) -> list[str]:
    """Best coverage and best cosine per query, on-topic against off-topic, and the floor
    each distribution gives; what each floor lets through of the held-out off-topic set."""
    items = notebook()
    queries = off_topic()
    held = off_topic(held_out=True)
    spec = MINILM if embeddings else None
    signals: dict[str, tuple[list, dict[str, list], list]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        memory = memory_at(Path(tmp) / "locomo", spec)
        sessions, questions = [], []
        for path in sorted(data_dir.glob("*.json")):
            s, q = load(path)
            sessions += s
            questions += [x["question"] for x in q]
        journal_sessions(memory, sessions)
        if memory.embedder is not None:
            recall_module.warm(memory.journal, memory.embedder)

        def journal_of(m: Any) -> Callable[[str], Signal]:
            return lambda q: (
                *recall_module.evidence(m.journal, q, m.embedder),
                len(recall_module.query_words(q)),
            )

        on = journal_of(memory)
        recall_on = [on(q) for q in questions]
        recall_off = {"technical": [on(q) for q in queries["technical"]]}
        recall_held = [on(q) for q in held["technical"]]
        stores = [memory_of(load_conversation(p)[0]) for p in sorted(data_dir.glob("*.json"))]
        conversation_questions = [
            [x["question"] for x in load_conversation(p)[1]]
            for p in sorted(data_dir.glob("*.json"))
        ]
        facts_on = [
            _fact_signal(store, q, memory.embedder)
            for store, qs in zip(stores, conversation_questions, strict=True)
            for q in qs
        ]

        def facts_of(qs: list[str]) -> list[Signal]:
            return [_fact_signal(store, q, memory.embedder) for store in stores for q in qs]

        facts_off = {"technical": facts_of(queries["technical"])}
        facts_held = facts_of(held["technical"])
        memory.close()
        memory = memory_at(Path(tmp) / "notebook", spec)
        journal_notebook(memory, items)
        on = journal_of(memory)
        recall_on += [on(item["query"]) for item in items]
        recall_off["personal"] = [on(q) for q in queries["personal"]]
        recall_held += [on(q) for q in held["personal"]]
        facts = notebook_facts(items)
        facts_on += [_fact_signal(facts, item["query"], memory.embedder) for item in items]
        facts_off["personal"] = [
            _fact_signal(facts, q, memory.embedder) for q in queries["personal"]
        ]
        facts_held += [_fact_signal(facts, q, memory.embedder) for q in held["personal"]]
        memory.close()
    signals["recall"] = (recall_on, recall_off, recall_held)
    signals["fact search"] = (facts_on, facts_off, facts_held)
    lines = [
        f"Calibration ({'MiniLM' if embeddings else 'default install'}): each query's best "
        "coverage and best cosine; a floor deciding whether a search found anything is the "
        f"smallest value letting at most {FIT_PASS:.1%} of each set of off-topic queries "
        "(technical, personal) through; the held-out set (off_topic_heldout.json) only "
        "reports it",
        "",
        "| search | signal | on-topic p10 / p25 / p50 | off-topic p50 / p90 / p95 / max "
        "| floor | on-topic kept | off-topic through | held-out through |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for search, (on_side, off_sets, held_side) in signals.items():
        for signal, row in _floors(search, on_side, off_sets, held_side).items():
            needs = f" (coverage ≥ {row['needs']:.2f})" if row.get("needs") else ""
            lines.append(
                f"| {search} | {signal}{needs} | {_percentiles(row['on'], (10, 25, 50))} "
                f"| {_percentiles(row['off'], (50, 90, 95, 100))} | {row['floor']:.2f} "
                f"| {row['kept']:.2f} | {row['through']:.2f} | {row['held']:.2f} |"
            )
            if results is not None:
                results.add(
                    f"calibration.{'minilm' if embeddings else 'default'}.{_key(search)}.{signal}",
                    on_topic=len(row["on"]),
                    off_topic=len(row["off"]),
                    held_out=len(held_side),
                    on_percentiles=[float(np.percentile(row["on"], p)) for p in (10, 25, 50)],
                    off_percentiles=[
                        float(np.percentile(row["off"], p)) for p in (50, 90, 95, 100)
                    ],
                    floor=row["floor"],
                    coverage_needed=row.get("needs", 0.0),
                    on_topic_kept=row["kept"],
                    off_topic_through=row["through"],
                    held_out_through=row["held"],
                )
    lines += [
        "",
        f"In use: coverage floors {relevance.RECALL_FLOOR} (recall), "
        f"{relevance.SEARCH_FLOOR} (fact search); for queries of at most "
        f"{relevance.SHORT_QUERY} terms {relevance.SHORT_RECALL_FLOOR} (recall), "
        f"{relevance.SHORT_SEARCH_FLOOR} (fact search); cosine floors "
        f"{relevance.SIMILARITY_FLOORS}",
    ]
    return lines


# A query's best coverage, best cosine (None without an embedder), and distinct terms.
Signal = tuple[float, float | None, int]
# The coverage recall's similarity path may ask for, tried in these steps.
NEEDS = tuple(round(0.05 * i, 2) for i in range(7))


def _floors(
    search: str, on_side: list[Signal], off_sets: dict[str, list[Signal]], held: list[Signal]
) -> dict[str, dict[str, Any]]:
    """The floors one search's signals give, each with the distributions it was read from,
    what it keeps of the on-topic queries, lets through of the off-topic ones and of the
    held-out ones (``held``, never used to choose):

    - ``coverage``: alone, at most ``FIT_PASS`` of each off-topic set through, for queries
      of more than ``SHORT_QUERY`` terms (``coverage_short``: for the others, apart);
    - ``cosine``: for fact search, the smallest cosine for which "coverage reaches its floor
      OR cosine reaches this one" still lets at most ``FIT_PASS`` of each set through;
      for recall, "coverage reaches its floor OR (cosine reaches this one AND coverage
      reaches ``needs``)": the cosine above every off-topic query's whose coverage reaches
      ``needs`` (similarity lets through none coverage did not), ``needs`` (in ``NEEDS``)
      the one keeping the most on-topic queries;
    - ``listing``: the cosine a result needs to be listed on similarity alone once the
      search found something: for a fact, one no off-topic query's best fact reached; for
      a message, the cosine alone letting at most ``OFF_TOPIC_PASS`` of each set through.
    """
    cover_on, short_on = _covers(on_side)
    cover_off, short_off = zip(*(_covers(values) for values in off_sets.values()), strict=True)
    cover_held, short_held = _covers(held)
    # Recall's floor for longer queries keeps no margin: at 2.5 % it would cost LOCOMO
    # conversation recall@10 0.009, below its figure before the floor.
    long_pass = OFF_TOPIC_PASS if search == "recall" else FIT_PASS
    long_floor = max(_floor(c[~s], long_pass) for c, s in zip(cover_off, short_off, strict=True))
    short_floor = max(_floor(c[s], FIT_PASS) for c, s in zip(cover_off, short_off, strict=True))

    def enough(short: np.ndarray) -> np.ndarray:
        return np.where(short, short_floor, long_floor)

    rows = {}
    for signal, part, floor in (
        ("coverage", False, long_floor),
        ("coverage_short", True, short_floor),
    ):
        on = cover_on[short_on == part]
        off = np.concatenate([c[s == part] for c, s in zip(cover_off, short_off, strict=True)])
        rows[signal] = {
            "on": on,
            "off": off,
            "floor": floor,
            "kept": float((on >= floor).mean()) if on.size else 0.0,
            "through": float((off >= floor).mean()) if off.size else 0.0,
            "held": float((cover_held[short_held == part] >= floor).mean())
            if (short_held == part).any()
            else 0.0,
        }
    if any(s is None for _, s, _ in on_side):
        return rows
    sim_on = np.array([s for _, s, _ in on_side], dtype=float)
    sim_off = [np.array([s for _, s, _ in values], dtype=float) for values in off_sets.values()]
    sim_held = np.array([s for _, s, _ in held], dtype=float)
    floors_off = [enough(s) for s in short_off]

    def joint(
        floor: float, needs: float, covers: np.ndarray, sims: np.ndarray, short: np.ndarray
    ) -> np.ndarray:
        return (covers >= enough(short)) | ((sims >= floor) & (covers >= needs))

    if search == "recall":
        options = []
        for needs in NEEDS:
            floor = max(
                _floor(sims[(covers < floors) & (covers >= needs)], allowed=0)
                for sims, covers, floors in zip(sim_off, cover_off, floors_off, strict=True)
            )
            kept = float(joint(floor, needs, cover_on, sim_on, short_on).mean())
            options.append((kept, -needs, floor))
        _, minus_needs, cosine = max(options)
        needs = -minus_needs
    else:
        # Per set, the queries coverage already lets through use up part of the allowance;
        # the cosine floor must keep the rest under it.
        needs = 0.0
        cosine = max(
            _floor(sims[covers < floors], allowed=int(FIT_PASS * len(sims)) - passed)
            for sims, covers, floors in zip(sim_off, cover_off, floors_off, strict=True)
            for passed in [int((covers >= floors).sum())]
        )
    all_cover_off, all_sim_off = np.concatenate(cover_off), np.concatenate(sim_off)
    all_short_off = np.concatenate(short_off)
    rows["cosine"] = {
        "on": sim_on,
        "off": all_sim_off,
        "floor": cosine,
        "needs": needs,
        "kept": float(joint(cosine, needs, cover_on, sim_on, short_on).mean()),
        "through": float(joint(cosine, needs, all_cover_off, all_sim_off, all_short_off).mean()),
        "held": float(joint(cosine, needs, cover_held, sim_held, short_held).mean()),
    }
    # Listing on similarity alone, once the search found something: a fact only when no
    # off-topic query's best fact came as close; a message (read in its conversation) at
    # the cosine alone letting at most OFF_TOPIC_PASS of each set through.
    listing = (
        max(cosine, _floor(all_sim_off, allowed=0))
        if search == "fact search"
        else max(_floor(sims, OFF_TOPIC_PASS) for sims in sim_off)
    )
    rows["listing"] = {
        "on": sim_on,
        "off": all_sim_off,
        "floor": listing,
        "kept": float((sim_on >= listing).mean()),
        "through": float((all_sim_off >= listing).mean()),
        "held": float((sim_held >= listing).mean()),
    }
    return rows


def _covers(values: list[Signal]) -> tuple[np.ndarray, np.ndarray]:
    """Each query's best coverage, and whether it is short (``relevance.SHORT_QUERY``)."""
    covers = np.array([c for c, _, _ in values], dtype=float)
    short = np.array([terms <= relevance.SHORT_QUERY for _, _, terms in values], dtype=bool)
    return covers, short


def _percentiles(values: np.ndarray, ps: tuple[int, ...]) -> str:
    if not values.size:
        return "–"
    return " / ".join(f"{np.percentile(values, p):.2f}" for p in ps)


def _fact_signal(store: dict[str, Any], query: str, embedder: Any) -> Signal:
    _, index = get_index(store)
    terms = query_terms(query)
    best_cover = float(fact_coverage(index, terms).max(initial=0.0))
    if embedder is None or not index.contents:
        return best_cover, None, len(terms)
    # The cosine ranking.score reads (the query without the names the memory knows),
    # without its word expansion, which the floor does not use.
    known, _ = _known_entities(index, query)
    vector = embedder.embed_query(without_entities(query, known) or query)
    return best_cover, float((index.dense_matrix(embedder) @ vector).max()), len(terms)


def _floor(off_values: np.ndarray, share: float = 0.0, *, allowed: int | None = None) -> float:
    """The smallest value, rounded up to a hundredth, that at most ``allowed`` of
    ``off_values`` reach (by default ``share`` of them)."""
    if allowed is None:
        allowed = int(share * len(off_values))
    if allowed < 0:
        return 1.0
    ordered = np.sort(off_values)[::-1]
    if allowed >= len(ordered):
        return 0.0
    return float(np.floor(ordered[allowed] * 100) + 1) / 100


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", nargs="?", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--no-embeddings", action="store_true", help="skip the MiniLM rows")
    parser.add_argument("--calibrate", action="store_true", help="print the floors' data")
    add_results_options(parser)
    args = parser.parse_args(argv)
    if not has_conversations(args.data_dir):
        return 2
    if args.quick:
        args.no_embeddings = args.calibrate = True
    results = Results(
        "relevance",
        about=ABOUT,
        goals=GOALS,
        options={
            "data_dir": args.data_dir.name,
            "embeddings": not args.no_embeddings,
            "quick": args.quick,
        },
    )
    settings = [None] if args.no_embeddings else [None, MINILM]
    if args.calibrate:
        for spec in settings:
            print("\n".join(calibrate(args.data_dir, spec is not None, results)), flush=True)
            print()
    lines = ["| setting | figure | share (95% interval) | queries |", "|---|---|---|---|"]
    for spec in settings:
        lines += figures(args.data_dir, spec, results)
    print("\n".join(lines))
    report_written(results.write(results_dir_of(args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
