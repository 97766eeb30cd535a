"""The memory loop through ``%%agent`` on the offline model with no key: a fact stated
in one cell is in memory after a flush, is injected into a new thread, and shapes the
answer there; sub-agent threads never reach extraction."""

from __future__ import annotations

import json
from pathlib import Path

from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from deerflow_nb import Agent
from deerflow_nb.agent.middleware import injection
from deerflow_nb.memory import Memory
from deerflow_nb.notebook.session import get_session


def cell(shell: InteractiveShell, line: str, body: str) -> str:
    with capture_output() as cap:
        result = shell.run_cell(f"%%agent {line}\n{body}")
    assert result.success, result.error_in_exec
    assert not any("text/markdown" in o.data for o in cap.outputs)  # rendered as trusted
    return [o.data["text/plain"] for o in cap.outputs if "text/html" in o.data][-1]


def test_a_fact_from_one_cell_shapes_the_answer_in_a_new_thread(
    shell: InteractiveShell, home: Path
) -> None:
    session = get_session(shell)
    assert session.settings.is_offline
    first = cell(shell, "-t setup", "I prefer polars over pandas for dataframes.")
    assert "0 facts injected" in first
    shell.run_line_magic("memory", "flush")
    facts = json.loads((home / "memory.json").read_text())["facts"]
    (fact,) = [f for f in facts if "polars" in f["content"].lower()]
    assert fact["source"] == "setup"

    answer = cell(shell, "-t analysis", "What library should I use for dataframes?")
    reply = shell.user_ns["_agent"]
    assert "From memory" in reply and "polars" in reply.lower()
    assert "thread analysis" in answer and "1 fact injected" in answer
    turn = session.agent().last_turn
    assert "<memory>" in turn.model_view[0]["content"]
    (row,) = session.memory.journal.turns("analysis")
    assert row["facts_injected"] == 1

    cell(shell, "-t private --no-memory", "What library should I use for dataframes?")
    assert "From memory" not in shell.user_ns["_agent"]
    assert "<memory>" not in session.agent().last_turn.model_view[0]["content"]


def test_subagent_threads_are_never_enqueued(shell: InteractiveShell) -> None:
    cell(shell, "-t lead", "Use sub-agents in parallel:\n- I prefer duckdb\n- I work on churn")
    memory = get_session(shell).memory
    queued = {r["thread_id"] for r in memory.journal.db["memory_queue"].rows}
    assert queued == {"lead"}
    subagents = [t for t in memory.journal.threads() if t["kind"] == "subagent"]
    assert len(subagents) == 2 and all(t["parent_id"] == "lead" for t in subagents)


def test_the_injected_count_matches_the_selected_facts(home: Path) -> None:
    memory = Memory(home)
    for text in ("Prefers polars", "Works on churn models", "Uses duckdb for SQL", "Likes tea"):
        memory.add_fact(text, category="preference")
    for context in (["polars churn"], ["nothing shared"], ["earlier turn", "duckdb polars"]):
        for budget in (40, 60, 2000):
            block, count = injection(memory, context, budget)
            assert block == memory.preview(context, budget)
            assert count == sum(line.startswith("- ") for line in block.splitlines())
            selected = memory.injection(context, budget)[1]
            assert len(selected) == count and all(f["content"] in block for f in selected)
    assert memory.preview(["polars"], 0) == ""  # a zero budget is zero, not the default
    assert memory.preview(["polars"]).count("- ") == 4  # None is the configured budget
    memory.close()


def test_agent_alone_builds_its_own_memory(home: Path) -> None:
    agent = Agent()
    assert agent.model.name == "offline"
    agent.memory.add_fact("Prefers polars over pandas", category="preference")
    reply = agent.run("Which dataframe library, polars or pandas?")
    assert "From memory: Prefers polars over pandas" in reply
    assert agent.last_turn.facts_injected == 1
    assert agent.last_turn.injected == ["Prefers polars over pandas"]  # which, by text
    agent.close()


def test_a_no_memory_turn_between_remembered_ones_is_never_learned(home: Path) -> None:
    agent = Agent()
    agent.run("I prefer vim over emacs.", thread="t")  # queued, not yet folded
    agent.run("I prefer R over Python.", thread="t", use_memory=False)
    agent.memory.flush()
    agent.run("Thanks, that is all.", thread="t")  # the next fold reads after the last
    agent.memory.flush()
    facts = " ".join(f["content"] for f in agent.memory.data["facts"]).lower()
    assert "vim" in facts and "python" not in facts
    rows = agent.journal.turns("t")
    assert [r["private"] for r in rows] == [0, 1, 0]
    assert len(agent.journal.messages("t")) == 6  # the private turn is still journaled
    agent.close()


def test_the_offline_model_quotes_a_fact_as_stored(home: Path) -> None:
    """Found by a review: the block writes ``<`` and ``&`` as entities, and the offline
    model quoted them so (``tenure&lt;12 &amp; R&amp;D``) into the reply and the journal."""
    from deerflow_nb import Agent, Memory

    with Memory(home) as memory:
        memory.facts.add("Filters churn with tenure<12 & R&D spend", category="context")
        agent = Agent(memory=memory)
        reply = agent.run("How do I filter churn by tenure?", thread="q")
        agent.close()
    assert "From memory: Filters churn with tenure<12 & R&D spend." in reply
