"""A fold reads only what it has not folded before: forgetting sticks, private turns stay out."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from journal_rows import events, journal_turn, queue_rows
from loopback import ServerHandle

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


def test_a_turn_journaled_while_its_thread_folds_is_folded_once(
    model_server: ServerHandle, home: Path
) -> None:
    mem = Memory()
    journal_turn(mem, "work", "I prefer polars over pandas for dataframes.")
    mem.enqueue("work")
    hold = model_server.hold_next()
    folding = threading.Thread(target=mem.flush)
    folding.start()
    assert hold.arrived.wait(10), "the fold never asked the model"
    journal_turn(mem, "work", "I use DuckDB for local SQL queries.")
    mem.enqueue("work")
    hold.release.set()
    folding.join(30)

    (row,) = queue_rows(mem)
    queued = json.loads(row["snapshot"])
    assert "DuckDB" in json.dumps(queued) and "polars" not in json.dumps(queued)
    mem.flush()
    assert "duckdb" in " ".join(contents(mem)).lower()
    mem.close()

    learned = [e for e in events(home) if e["fact_id"] and "polars" in e["new_content"].lower()]
    assert [e["kind"] for e in learned] == ["add"]  # not reinforced by a second reading


def test_a_fact_forgotten_in_chat_leaves_the_profile_too() -> None:
    agent = Agent()
    agent.run("I prefer polars over pandas. I use R for statistics.", thread="t")
    agent.memory.flush()
    assert "Prefers polars over pandas" in agent.memory.preview().split("Facts:")[0]
    agent.run("Please forget that I prefer polars over pandas.", thread="t")
    agent.memory.flush()
    block = agent.memory.preview()
    assert "polars" not in block.lower()
    assert "Uses R for statistics" in block  # what was not forgotten stays


def test_a_fact_forgotten_by_hand_leaves_the_profile_too() -> None:
    agent = Agent()
    agent.run("I prefer polars over pandas. I use R for statistics.", thread="t")
    agent.memory.flush()
    (fact,) = [f for f in agent.memory.data["facts"] if "polars" in f["content"]]
    agent.memory.forget(fact["id"])
    assert "polars" not in agent.memory.preview().lower()
