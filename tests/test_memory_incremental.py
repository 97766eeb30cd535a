"""A fold reads only what it has not folded before: forgetting sticks, private turns stay out."""

from __future__ import annotations

from deerflow_nb import Agent, Memory


def contents(mem: Memory) -> list[str]:
    return [f["content"] for f in mem.data["facts"]]


def test_forgotten_fact_is_not_relearned_when_the_thread_goes_on() -> None:
    agent = Agent()
    agent.run("I prefer polars over pandas for dataframes.", thread="work")
    agent.memory.flush()
    (fact,) = [f for f in agent.memory.data["facts"] if "polars" in f["content"].lower()]
    agent.memory.forget(fact["id"])

    agent.run("I use DuckDB for local SQL queries.", thread="work")
    agent.memory.flush()

    facts = " ".join(contents(agent.memory)).lower()
    assert "duckdb" in facts
    assert "polars" not in facts


def test_a_no_memory_turn_is_never_folded_later() -> None:
    agent = Agent()
    agent.run("I work at Globex on secret project Nightjar.", thread="mixed", use_memory=False)
    agent.run("I prefer seaborn for plots.", thread="mixed")
    agent.memory.flush()

    facts = " ".join(contents(agent.memory)).lower()
    assert "seaborn" in facts
    assert "nightjar" not in facts and "globex" not in facts
