"""Summaries are built from what is still true (issue 36; issue 37's Personal summary): a
fact forgotten, moved or corrected leaves every summary in the same change, so its text is
injected nowhere; a summary composed from facts reads as sentences and covers all of them."""

from __future__ import annotations

import json
from pathlib import Path

from journal_rows import deerflow_memory, memory_json

from deerflow_nb.agent import Agent
from deerflow_nb.memory import Memory
from deerflow_nb.schema.sections import MAX_SUMMARY_CHARS, compose

CHURN = "In this project, the target column churned is 1 for customers lost within 90 days."
METRIC = "In this project, the metric is recall at the top decile."
QUESTION = "what is the target column, the metric and my preferences"
PROJECTS = ("churn", "clinic", None)  # None: outside any project, the user's facts only


def blocks(mem: Memory) -> str:
    """Every block a turn could be given, in each project and outside any."""
    return "\n".join(mem.preview(QUESTION, project=p) for p in PROJECTS)


def fact_with(mem: Memory, word: str) -> dict:
    return next(f for f in mem.data["facts"] if word in f["content"])


def test_a_forgotten_project_fact_is_injected_nowhere(home: Path) -> None:
    agent = Agent()
    agent.run(f"{CHURN} {METRIC}", thread="c1", project="churn")
    mem = agent.memory
    mem.flush()
    assert "customers lost within 90 days" in mem.preview(QUESTION, project="churn")
    mem.forget(fact_with(mem, "churned")["id"])
    assert "customers lost within 90 days" not in blocks(mem)
    churn = mem.preview(QUESTION, project="churn")
    assert "- churn: The metric is recall at the top decile.\n" in churn  # a sentence
    agent.close()


def test_a_fact_moved_to_another_project_leaves_the_personal_summary(home: Path) -> None:
    agent = Agent()
    agent.run("I prefer polars over pandas. I like dark plots.", thread="c1", project="churn")
    mem = agent.memory
    mem.flush()
    assert "Prefers polars over pandas. Likes dark plots." in mem.preview(QUESTION, project="churn")
    mem.facts.edit(fact_with(mem, "polars")["id"], scope="project", project="clinic")
    assert "- Personal: Likes dark plots.\n" in mem.preview(QUESTION, project="churn")
    assert "polars" not in mem.preview(QUESTION, project="churn")
    assert "polars" not in mem.preview(QUESTION, project=None)
    assert "polars" in mem.preview(QUESTION, project="clinic")  # as the clinic's fact
    agent.close()


def test_a_project_fact_moved_to_another_project_leaves_its_old_summary(home: Path) -> None:
    agent = Agent()
    agent.run(f"{CHURN} {METRIC}", thread="c1", project="churn")
    mem = agent.memory
    mem.flush()
    mem.facts.edit(fact_with(mem, "decile")["id"], scope="project", project="clinic")
    churn = mem.preview(QUESTION, project="churn")
    assert "decile" not in churn
    assert "- churn: The target column churned is 1 for customers lost within 90 days.\n" in churn
    assert "decile" in mem.preview(QUESTION, project="clinic")
    agent.close()


def test_a_corrected_project_fact_is_corrected_in_its_summary(home: Path) -> None:
    agent = Agent()
    agent.run(f"{CHURN} {METRIC}", thread="c1", project="churn")
    mem = agent.memory
    mem.flush()
    mem.facts.edit(fact_with(mem, "decile")["id"], "The metric is precision at 5 percent")
    summary = memory_json(home)["projects"]["churn"]["summary"]
    assert summary == (
        "The target column churned is 1 for customers lost within 90 days. "
        "The metric is precision at 5 percent."
    )
    assert "decile" not in blocks(mem)
    agent.close()


def test_a_project_fact_never_reaches_the_users_summaries(home: Path) -> None:
    """The fold's prompt shows the project's facts beside the user's: the user's summaries,
    injected in every project, are composed from the user's own facts only."""
    agent = Agent()
    agent.run(CHURN, thread="c1", project="churn")
    agent.memory.flush()
    agent.run("I work at Acme Hospital as a data scientist.", thread="c1", project="churn")
    agent.memory.flush()
    assert memory_json(home)["user"]["workContext"]["summary"] == (
        "Works at Acme Hospital as a data scientist."
    )
    assert "churned" not in agent.memory.preview(QUESTION, project="clinic")
    agent.close()


def test_the_personal_summary_covers_every_preference_stated(home: Path) -> None:
    """Issue 37: it kept the last five sentences, dropping older preferences while their
    facts stayed."""
    said = [
        ("I prefer polars over pandas.", "Prefers polars over pandas."),
        ("I like dark plots.", "Likes dark plots."),
        ("I prefer short answers.", "Prefers short answers."),
        ("I like type hints.", "Likes type hints."),
        ("I prefer seaborn over matplotlib.", "Prefers seaborn over matplotlib."),
        ("I like vim keybindings.", "Likes vim keybindings."),
        ("I prefer parquet over csv.", "Prefers parquet over csv."),
    ]
    agent = Agent()
    for i, (statement, _) in enumerate(said):
        agent.run(statement, thread=f"t{i}")
        agent.memory.flush()
    personal = memory_json(home)["user"]["personalContext"]["summary"]
    assert personal == " ".join(sentence for _, sentence in said)
    agent.close()


def test_a_written_summary_loses_the_moved_facts_sentence_and_keeps_the_rest(
    home: Path,
) -> None:
    """A summary a model wrote (here DeerFlow's, imported) says more than its facts: it is
    not recomposed, but its sentence restating a fact moved out of the user's scope goes."""
    prose = "The user strongly prefers polars over pandas for speed. Often works late at night."
    doc = deerflow_memory(
        [
            {
                "id": "fact_polars",
                "content": "Prefers polars over pandas",
                "category": "preference",
                "confidence": 0.9,
                "createdAt": "2026-01-05T10:00:00Z",
                "source": "thread-1",
            }
        ],
        "2026-01-05T10:00:00Z",
        personalContext=(prose, "2026-01-05T10:00:00Z"),
    )
    (home / "memory.json").write_text(json.dumps(doc), encoding="utf-8")
    mem = Memory()
    mem.facts.edit("fact_polars", scope="project", project="clinic")
    assert memory_json(home)["user"]["personalContext"]["summary"] == ("Often works late at night.")
    assert "polars" not in mem.preview(QUESTION, project="churn")
    mem.close()


def test_a_long_composed_summary_drops_the_least_confident_not_the_oldest() -> None:
    texts = [f"Fact number {i} fills the summary {'x' * 80}" for i in range(80)]
    ranks = [0.9] * 80
    ranks[0] = 0.95  # the oldest, and the most confident
    ranks[40] = 0.5  # the least confident
    summary = compose(texts, ranks)
    assert len(summary) <= MAX_SUMMARY_CHARS
    assert summary.startswith("Fact number 0 fills")
    assert "Fact number 40 fills" not in summary
    kept = summary.split(". ")
    assert len(kept) < 80 and all(s.startswith("Fact number ") for s in kept)  # whole sentences
    assert summary.endswith(".")
