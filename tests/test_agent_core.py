"""The lead agent with real models: the offline model in-process, and the openai SDK
talking HTTP to the loopback server. No memory here (see test_agent_memory.py)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pytest
from loopback import ServerHandle, start_server
from waiting import wait_until

from deerflow_nb import Agent
from deerflow_nb.agent.loop import INTERRUPTED_RESULT
from deerflow_nb.agent.notebook_tools import NotebookTools
from deerflow_nb.agent.subagents import SubagentExecutor
from deerflow_nb.agent.tools import MAX_RESULT_TOKENS
from deerflow_nb.config import Settings, load_settings
from deerflow_nb.llm import ModelError, ToolCall
from deerflow_nb.llm.base import ChatResult
from deerflow_nb.offline.model import OfflineModel
from deerflow_nb.tokens import count_tokens


class Meeting:
    """A notebook object whose repr returns only when every party of ``barrier`` is
    reading one at the same moment: sub-agents that overlap meet ("Met"), ones that run one
    after the other never do ("Alone", when the barrier gives up). Records who read it."""

    seen: list[str] = []

    def __init__(self, barrier: threading.Barrier) -> None:
        self.barrier = barrier

    def __repr__(self) -> str:
        Meeting.seen.append(threading.current_thread().name)
        try:
            self.barrier.wait()
        except threading.BrokenBarrierError:
            return "Alone"
        return "Met"


class Blocking:
    """A notebook object whose repr waits until ``release`` is set: ``entered`` once a
    reader is inside, ``left`` once it returned."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.left = threading.Event()

    def __repr__(self) -> str:
        self.entered.set()
        self.release.wait(30)
        self.left.set()
        return "Blocking()"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[ServerHandle]:
    """The loopback server, configured the way a user configures a local endpoint."""
    with start_server(models=("loopback-model",)) as handle:
        monkeypatch.setenv("OPENAI_BASE_URL", handle.base_url)
        monkeypatch.setenv("DEERFLOW_NB_MODEL", "loopback-model")
        yield handle


def sales_frame() -> pd.DataFrame:
    return pd.DataFrame({"region": ["north", "south", None], "revenue": [120.5, 98.0, 143.25]})


def test_streamed_tool_round_trip_over_http_describes_a_dataframe(server: ServerHandle) -> None:
    agent = Agent(namespace={"sales": sales_frame()})
    assert type(agent.model).__name__ == "OpenAIChatModel"
    deltas: list[str] = []
    reply = agent.run("Please describe sales", on_text=deltas.append, use_memory=False)
    assert len(deltas) > 5 and "".join(deltas) == reply  # streamed over SSE, not one blob
    assert "sales: pandas DataFrame, 3 rows x 2 columns" in reply
    assert "missing values: region: 1" in reply
    turn = agent.last_turn
    assert [c["name"] for c in turn.tool_calls] == ["describe_variable"]
    assert turn.model == "loopback-model" and turn.status == "ok"
    assert turn.usage.input_tokens > 0 and turn.usage.output_tokens > 0
    roles = [m["role"] for m in agent.journal.messages("default")]
    assert roles == ["user", "assistant", "tool", "assistant"]
    (row,) = agent.journal.turns("default")
    assert row["status"] == "ok" and row["input_tokens"] == turn.usage.input_tokens
    agent.close()


def test_two_parallel_subagents_run_in_isolated_threads(server: ServerHandle) -> None:
    Meeting.seen = []
    barrier = threading.Barrier(2, timeout=20)
    namespace = {"left": Meeting(barrier), "right": Meeting(barrier), "sales": sales_frame()}
    agent = Agent(namespace=namespace)
    agent.run("Some history first", thread="lead", use_memory=False)
    events: list[dict[str, Any]] = []
    reply = agent.run(
        "Use sub-agents in parallel:\n- describe left\n- describe right",
        thread="lead",
        on_event=events.append,
        use_memory=False,
    )
    runs = agent.last_turn.subagents
    assert [r.status for r in runs] == ["done", "done"]
    assert not barrier.broken, "the two sub-agents should overlap: each waited for the other"
    assert len(set(Meeting.seen)) == 2
    assert all(n.startswith("deerflow-subagent") for n in Meeting.seen)

    journal = agent.journal
    lead_messages = journal.messages("lead")
    tool_results = [m["content"] for m in lead_messages if m["role"] == "tool"]
    for run in runs:
        thread = journal.thread(run.thread_id)
        assert run.thread_id.startswith("subagent-")
        assert thread["kind"] == "subagent" and thread["parent_id"] == "lead"
        own = journal.messages(run.thread_id)
        assert own[0] == {"role": "user", "content": f"describe {run.description.split()[-1]}"}
        assert "Some history first" not in str(own)  # fresh message list
        assert own[-1]["content"] == run.result and run.result in tool_results
        inner_ids = {c["id"] for m in own for c in m.get("tool_calls") or []}
        assert inner_ids and not inner_ids & {m.get("tool_call_id") for m in lead_messages}
    assert "Met" in reply and "Alone" not in reply
    statuses = [(e["description"], e["status"]) for e in events if e["type"] == "subagent"]
    for name in ("describe left", "describe right"):
        seen = [s for d, s in statuses if d == name]
        assert seen[0] == "started" and "running" in seen and seen[-1] == "done"
    agent.close()


def test_subagent_limits_give_tool_errors_not_silence() -> None:
    agent = Agent(model="offline", namespace={})
    bullets = "\n".join(f"- check item {i}" for i in range(5))
    agent.run(f"Delegate these to sub-agents:\n{bullets}", use_memory=False)
    turn = agent.last_turn
    assert len(turn.subagents) == 3
    results = [c["result"] for c in turn.tool_calls]
    assert sum(r.startswith("Error: at most 3 sub-agents run per response") for r in results) == 2

    executor = executor_for(agent, OfflineModel(), load_settings())
    calls = [ToolCall(f"c{i}", "task", f'{{"prompt": "job {i}"}}') for i in range(7)]
    first = executor.run(calls[:3])
    second = executor.run(calls[3:6])
    third = executor.run(calls[6:])
    assert all(not r.startswith("Error") for r in [*first.values(), *second.values()])
    assert third["c6"].startswith("Error: at most 6 sub-agents per turn")
    bad = executor.run([ToolCall("x", "task", '{"prompt": "p", "subagent_type": "nope"}')])
    assert bad["x"].startswith("Error: unknown subagent_type 'nope'")
    agent.close()


def test_a_subagent_that_runs_too_long_times_out() -> None:
    settings = load_settings()
    settings.subagents.timeout_seconds = 0.3
    slow = Blocking()
    agent = Agent(settings=settings, model="offline", namespace={"slow": slow})
    events: list[dict[str, Any]] = []
    agent.run("Use a sub-agent:\n- describe slow", on_event=events.append, use_memory=False)
    # the turn ended while the sub-agent's tool was still inside: the lead did not wait
    assert slow.entered.is_set() and not slow.left.is_set()
    (run,) = agent.last_turn.subagents
    assert run.status == "timed_out"
    assert agent.last_turn.tool_calls[0]["result"].startswith("Error: sub-agent")
    assert "timed out after 0.3s" in agent.last_turn.tool_calls[0]["result"]
    assert events[-1]["status"] == "timed_out"
    slow.release.set()  # the worker notices the cancel after its tool returns
    (sub_turn,) = wait_until(
        lambda: [t for t in agent.journal.turns(run.thread_id) if t["status"] != "running"],
        what="the sub-agent's turn to end",
    )
    assert sub_turn["status"] == "interrupted" and "timed out" in sub_turn["error"]
    agent.close()


def test_a_thread_resumes_from_the_journal_in_a_new_agent() -> None:
    first = Agent(model="offline")
    first.run("My project is called Heron.", thread="proj", use_memory=False)
    first.close()
    second = Agent(model="offline")
    second.run("What did I say?", thread="proj", use_memory=False)
    view = second.last_turn.model_view
    assert view[1] == {"role": "user", "content": "My project is called Heron."}
    assert [t["status"] for t in second.journal.turns("proj")] == ["ok", "ok"]
    assert second.fresh_thread("proj") == "proj-2"
    second.run("fresh start", thread="proj", new=True, use_memory=False)
    assert second.last_turn.thread == "proj-2"
    assert len(second.last_turn.model_view) == 2  # system + the new message only
    second.close()


@pytest.mark.usefixtures("ctrl_c_lands")
def test_ctrl_c_mid_stream_journals_an_interrupted_turn() -> None:
    agent = Agent(model="offline")
    received: list[str] = []

    def interrupt_after_three(delta: str) -> None:
        received.append(delta)
        if len(received) == 3:
            signal.raise_signal(signal.SIGINT)  # what Ctrl-C in the kernel does

    with pytest.raises(KeyboardInterrupt):
        agent.run(
            "Tell me something about rivers and lakes",
            on_text=interrupt_after_three,
            use_memory=False,
        )
    turn = agent.last_turn
    assert turn.status == "interrupted" and turn.reply == "".join(received)
    (row,) = agent.journal.turns("default")
    assert row["status"] == "interrupted" and row["ended_at"]
    messages = agent.journal.messages("default")
    assert messages[-1] == {"role": "assistant", "content": "".join(received)}
    agent.run("again", use_memory=False)  # the thread is still usable
    assert agent.last_turn.status == "ok"
    agent.close()


@pytest.mark.usefixtures("ctrl_c_lands")
def test_ctrl_c_during_a_tool_gives_every_call_a_result() -> None:
    class Interrupting:
        def __repr__(self) -> str:
            signal.raise_signal(signal.SIGINT)
            return "never"

    agent = Agent(model="offline", namespace={"trap": Interrupting()})
    with pytest.raises(KeyboardInterrupt):
        agent.run("Please describe trap", use_memory=False)
    messages = agent.journal.messages("default")
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    assert messages[2]["content"] == INTERRUPTED_RESULT
    assert messages[2]["tool_call_id"] == messages[1]["tool_calls"][0]["id"]
    agent.close()


def test_turn_limit_makes_the_last_call_answer_without_tools() -> None:
    settings = load_settings()
    settings.agent.max_turns = 1
    agent = Agent(settings=settings, model="offline", namespace={"sales": sales_frame()})
    reply = agent.run("Please describe sales", use_memory=False)
    assert agent.last_turn.tool_calls == [] and "tools returned" not in reply
    agent.close()


def test_model_errors_are_journaled_and_one_line(server: ServerHandle) -> None:
    settings = load_settings()
    settings.model.max_retries = 0
    agent = Agent(settings=settings)
    server.fail_next(1, 500)
    with pytest.raises(ModelError) as info:
        agent.run("hello", use_memory=False)
    assert "\n" not in str(info.value)
    (row,) = agent.journal.turns("default")
    assert row["status"] == "error" and "ModelError" in row["error"]
    agent.close()


def test_a_named_model_without_a_key_is_one_line() -> None:
    with pytest.raises(ModelError) as info:
        Agent(model="gpt-4o")
    assert "needs an API key" in str(info.value) and "\n" not in str(info.value)


class Verbose(OfflineModel):
    """A model that answers every sub-agent task at great length (as real models can)."""

    def chat(self, messages: list[dict[str, Any]], **kwargs: Any) -> ChatResult:
        return ChatResult(content="row, " * 5000)


def executor_for(agent: Agent, model: OfflineModel, settings: Settings) -> SubagentExecutor:
    """Sub-agents on ``model`` for the lead thread ``default``, journaled with ``agent``."""
    return SubagentExecutor(
        model,
        agent.memory.conversation,
        NotebookTools({}),
        settings.subagents,
        settings.summarization,
        16_384,
        parent_thread="default",
    )


class Sluggish(OfflineModel):
    """A model that answers only once ``release`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def chat(self, messages: list[dict[str, Any]], **kwargs: Any) -> ChatResult:
        self.release.wait(30)
        return ChatResult(content="a late answer")


def test_a_subagent_timed_out_inside_a_model_call_is_journaled_as_interrupted() -> None:
    agent = Agent(model="offline", namespace={})
    settings = load_settings()
    settings.subagents.timeout_seconds = 0.3
    model = Sluggish()
    executor = executor_for(agent, model, settings)
    result = executor.run([ToolCall("c1", "task", '{"prompt": "think hard"}')])["c1"]
    assert "timed out after 0.3s" in result
    (run,) = executor.runs
    model.release.set()  # the model call returns, late
    (turn,) = wait_until(
        lambda: [t for t in agent.journal.turns(run.thread_id) if t["status"] != "running"],
        what="the sub-agent's turn to end",
    )
    assert turn["status"] == "interrupted" and "timed out" in turn["error"]  # was "ok"
    assert agent.journal.messages(run.thread_id)[-1]["content"] == "a late answer"
    agent.close()


def test_a_subagents_result_is_capped_in_the_leads_context() -> None:
    agent = Agent(model="offline", namespace={})
    executor = executor_for(agent, Verbose(), load_settings())
    result = executor.run([ToolCall("c1", "task", '{"prompt": "summarise everything"}')])["c1"]
    (run,) = executor.runs
    assert count_tokens(result) <= MAX_RESULT_TOKENS  # what the lead keeps in its context
    own_reply = agent.journal.messages(run.thread_id)[-1]["content"]
    assert count_tokens(own_reply) > MAX_RESULT_TOKENS  # the sub-agent's thread keeps it all
    agent.close()


@pytest.mark.usefixtures("ctrl_c_lands")
def test_ctrl_c_keeps_the_results_of_sub_agents_that_had_finished() -> None:
    slow = Blocking()  # still reading "slow" when Ctrl-C comes, whatever the machine's speed
    agent = Agent(model="offline", namespace={"quick": [1, 2], "slow": slow})
    events: list[dict[str, Any]] = []

    def press_ctrl_c() -> None:
        slow.entered.wait(10)
        signal.raise_signal(signal.SIGINT)

    def on_event(event: dict[str, Any]) -> None:
        events.append(event)
        if event.get("description") == "describe quick" and event.get("status") == "done":
            threading.Thread(target=press_ctrl_c, daemon=True).start()  # Ctrl-C, soon

    try:
        with pytest.raises(KeyboardInterrupt):
            agent.run(
                "Use sub-agents in parallel:\n- describe quick\n- describe slow",
                on_event=on_event,
                use_memory=False,
            )
    finally:
        slow.release.set()
    calls = {
        c["id"]: c["function"]["arguments"]
        for m in agent.journal.messages("default")
        for c in m.get("tool_calls") or []
    }
    results = {
        calls[m["tool_call_id"]]: m["content"]
        for m in agent.journal.messages("default")
        if m["role"] == "tool"
    }
    (quick,) = [r for a, r in results.items() if "quick" in a]
    (slow,) = [r for a, r in results.items() if "slow" in a]
    assert "quick: list" in quick  # kept, not replaced by the interrupted marker
    assert slow == INTERRUPTED_RESULT
    agent.close()
