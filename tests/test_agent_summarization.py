"""Summarization: each trigger and keep type, the cut invariants, and real agent turns
on the offline model where the summary replaces old messages only in the model's view."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deerflow_nb import Agent
from deerflow_nb.agent.notebook_tools import NotebookTools
from deerflow_nb.agent.summarization import (
    DEFAULT_SUMMARY_PROMPT,
    cut_index,
    fired_trigger,
    summary_request,
)
from deerflow_nb.config import ContextSize, SummarizationConfig, load_settings
from deerflow_nb.llm.base import ChatResult, ToolCall
from deerflow_nb.notebook.agent_display import summary_line
from deerflow_nb.offline.model import OfflineModel
from deerflow_nb.tokens import count_message_tokens, count_tokens
from deerflow_nb.untrusted import prompt_text


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def tool_pair(call_id: str, result: str) -> list[dict[str, Any]]:
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": "list_variables", "arguments": "{}"},
    }
    return [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": result},
    ]


def config(trigger: list[ContextSize], keep: ContextSize | None = None) -> SummarizationConfig:
    return SummarizationConfig(trigger=trigger, keep=keep or ContextSize("messages", 2))


# -- triggers ------------------------------------------------------------------------
def test_messages_trigger_counts_conversation_messages() -> None:
    conv = [user("a"), assistant("b"), user("c")]
    view = [{"role": "system", "content": "s"}, *conv]
    assert fired_trigger(config([ContextSize("messages", 3)]), view, len(conv), 1000) is not None
    assert fired_trigger(config([ContextSize("messages", 4)]), view, len(conv), 1000) is None


def test_tokens_trigger_measures_the_whole_view() -> None:
    view = [{"role": "system", "content": "word " * 50}, user("hi")]
    tokens = count_message_tokens(view)
    assert fired_trigger(config([ContextSize("tokens", tokens)]), view, 1, 10**6)
    assert fired_trigger(config([ContextSize("tokens", tokens + 1)]), view, 1, 10**6) is None


def test_tokens_triggers_count_the_tool_schemas_the_request_sends() -> None:
    view = [{"role": "system", "content": "word " * 50}, user("hi")]
    tokens = count_message_tokens(view)
    trigger = config([ContextSize("tokens", tokens + 100)])
    assert fired_trigger(trigger, view, 1, 10**6) is None
    assert fired_trigger(trigger, view, 1, 10**6, tool_tokens=100) is not None


def test_fraction_trigger_is_relative_to_the_window() -> None:
    view = [user("word " * 100)]
    tokens = count_message_tokens(view)
    cfg = config([ContextSize("fraction", 0.5)])
    assert fired_trigger(cfg, view, 1, window=tokens * 2) is not None
    assert fired_trigger(cfg, view, 1, window=tokens * 2 + 2) is None


def test_any_trigger_fires_and_disabled_never_does() -> None:
    view = [user("hello")]
    cfg = config([ContextSize("tokens", 10**6), ContextSize("messages", 1)])
    assert fired_trigger(cfg, view, 1, 1000).type == "messages"
    cfg.enabled = False
    assert fired_trigger(cfg, view, 1, 1000) is None


# -- keep and the cut ----------------------------------------------------------------
def test_keep_messages_tokens_and_fraction() -> None:
    conv = [user("one two"), assistant("three four five"), user("six"), assistant("seven")]
    conv += [user("eight nine"), assistant("ten"), user("eleven twelve")]
    assert cut_index(conv, ContextSize("messages", 3), 1000) == 4
    per_message = [count_message_tokens([m]) - 3 for m in conv]
    budget = sum(per_message[-3:])
    assert cut_index(conv, ContextSize("tokens", budget), 1000) == 4
    assert cut_index(conv, ContextSize("tokens", budget - 1), 1000) == 5
    assert cut_index(conv, ContextSize("fraction", 0.5), window=budget * 2) == 4


def test_cut_never_separates_a_tool_call_from_its_result() -> None:
    conv = [user("q1"), *tool_pair("c1", "x = 1"), assistant("a1"), user("q2")]
    # keep 3 would start the kept part at the tool result: the cut moves before the call
    assert conv[len(conv) - 3]["role"] == "tool"
    assert cut_index(conv, ContextSize("messages", 3), 1000) == 1


def test_latest_user_message_is_never_summarized() -> None:
    conv = [user("q1"), assistant("a1"), user("q2"), *tool_pair("c1", "r"), *tool_pair("c2", "r")]
    assert cut_index(conv, ContextSize("messages", 1), 1000) == 2
    assert cut_index(conv, ContextSize("messages", 0), 1000) == 2
    assert cut_index([user("only")], ContextSize("messages", 0), 1000) == 0


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    conv: list[dict[str, Any]] = []
    for i in range(draw(st.integers(1, 8))):
        conv.append(user(f"question {i}"))
        for j in range(draw(st.integers(0, 3))):
            conv += tool_pair(f"c{i}-{j}", "result " * draw(st.integers(0, 5)))
        if draw(st.booleans()):
            conv.append(assistant("answer " * draw(st.integers(1, 5))))
    return conv


@settings(max_examples=200, deadline=None)
@given(
    conversations(),
    st.sampled_from(["messages", "tokens", "fraction"]),
    st.floats(0, 1) | st.integers(0, 40),
)
def test_cut_invariants_hold_for_any_conversation(
    conv: list[dict[str, Any]], keep_type: str, value: float
) -> None:
    # Unchecked (``model_construct``): the cut holds even for sizes config.yaml refuses.
    cut = cut_index(conv, ContextSize.model_construct(type=keep_type, value=value), window=60)
    last_user = max(i for i, m in enumerate(conv) if m["role"] == "user")
    assert 0 <= cut <= last_user
    kept_ids = {c["id"] for m in conv[cut:] for c in m.get("tool_calls") or []}
    for message in conv[cut:]:
        if message["role"] == "tool":
            assert message["tool_call_id"] in kept_ids


# -- the summary request -------------------------------------------------------------
def test_summary_request_follows_the_protocol_and_is_trimmed() -> None:
    cfg = SummarizationConfig(trim_tokens_to_summarize=60)
    messages = [user(f"message number {i} " + "filler " * 10) for i in range(20)]
    request = summary_request(cfg, messages, previous="earlier things")
    assert request[0] == {"role": "system", "content": DEFAULT_SUMMARY_PROMPT}
    body = request[1]["content"]
    assert body.startswith("<conversation_to_summarize>\n")
    assert body.endswith("\n</conversation_to_summarize>")
    inner = body.removeprefix("<conversation_to_summarize>\n").removesuffix(
        "\n</conversation_to_summarize>"
    )
    assert count_tokens(inner) <= 60
    assert "message number 19" in inner  # the newest is kept, the oldest dropped
    assert "message number 0 " not in inner
    assert inner.startswith("Summary so far: earlier things\n")  # the past is never dropped
    long_past = "the distant past " * 100
    wrapped = summary_request(cfg, messages, previous=long_past)[1]["content"]
    inner = wrapped.split("\n", 1)[1].rsplit("\n", 1)[0]
    assert count_tokens(inner) <= 60  # a long summary takes at most half the budget
    assert inner.startswith("Summary so far: the distant past") and "message number 19" in inner
    cfg.summary_prompt = "Be terse."
    assert summary_request(cfg, messages[:1], None)[0]["content"] == "Be terse."


# -- real turns ----------------------------------------------------------------------
def agent_with(trigger: ContextSize, keep: ContextSize, namespace: dict[str, Any]) -> Agent:
    settings = load_settings()
    settings.summarization.trigger = [trigger]
    settings.summarization.keep = keep
    return Agent(settings=settings, model="offline", namespace=namespace)


def tool_pairs_whole(view: list[dict[str, Any]]) -> bool:
    called = {c["id"] for m in view for c in m.get("tool_calls") or []}
    answered = {m["tool_call_id"] for m in view if m["role"] == "tool"}
    return called == answered


@pytest.mark.parametrize(
    ("trigger", "keep"),
    [
        (ContextSize("messages", 8), ContextSize("messages", 3)),
        (ContextSize("tokens", 700), ContextSize("tokens", 150)),
        (ContextSize("fraction", 0.04), ContextSize("fraction", 0.01)),
    ],
    ids=["messages", "tokens", "fraction"],
)
def test_summarization_fires_in_real_turns(trigger: ContextSize, keep: ContextSize) -> None:
    ns = {"sales": [3, 1, 4, 1, 5, 9, 2, 6], "owner": "Ada"}
    agent = agent_with(trigger, keep, ns)  # offline window: 16,384 tokens
    events: list[dict[str, Any]] = []
    for i in range(6):
        agent.run(
            f"Turn {i}: please describe sales and list variables",
            on_event=events.append,
            use_memory=False,
        )
        view = agent.last_turn.model_view
        assert tool_pairs_whole(view)
        latest_user = [m for m in view if m["role"] == "user"][-1]
        assert latest_user["content"].startswith(f"Turn {i}:")  # never summarized
    summaries = [e for e in events if e["type"] == "summary"]
    assert summaries and all(e["trigger"] == trigger.type for e in summaries)

    journal = agent.journal
    first = next(iter(journal.db["summaries"].rows_where(order_by="id")))
    assert "The user said: Turn 0:" in first["content"]
    # the journal keeps every message; the view holds the summary instead of the old ones
    assert len(journal.messages("default")) == 6 * 5
    view = agent.last_turn.model_view
    assert "<conversation_summary>" in view[0]["content"]
    assert all(m.get("content") != "Turn 0: please describe sales and list variables" for m in view)
    assert len(view) - 1 < 6 * 5
    agent.close()


def test_a_resumed_thread_starts_from_its_latest_summary() -> None:
    agent = agent_with(ContextSize("messages", 6), ContextSize("messages", 2), {})
    for i in range(4):
        agent.run(f"note {i}: the sky is blue", use_memory=False)
    agent.close()
    fresh = agent_with(ContextSize("messages", 10**6), ContextSize("messages", 2), {})
    fresh.run("and now?", use_memory=False)
    view = fresh.last_turn.model_view
    summary = fresh.journal.latest_summary("default")
    assert summary["content"] in view[0]["content"]
    seqs = [r["seq"] for r in fresh.journal.message_rows("default")]
    # system prompt + every message after the summary, except this turn's reply
    assert len(view) == 1 + sum(1 for s in seqs if s > summary["covers_until_seq"]) - 1
    fresh.close()


def test_a_thread_whose_kept_messages_overflow_the_window_is_brought_back_under_it() -> None:
    """``keep`` yields to the window: 20 kept messages of big tool results used to stay over
    it for good, with a summary call on every model call and the view still too large.

    Each turn here (a ~1,000-token listing, and an answer quoting 600 tokens of it) alone
    outgrows the room between the cut (0.7 of the window) and the trigger (0.8): the cut
    leaves room for one more such turn (``turn_growth``), so the turn's second call does not
    summarize again. It did, 14 summaries for these 16 calls, before the cut left room."""
    settings = load_settings()
    settings.model.max_input_tokens = 4000  # a small model: trigger at 0.8, keep 20 messages
    many = {f"column_{i:04d}": i for i in range(400)}  # each listing ~1,000 tokens
    agent = Agent(settings=settings, model="offline", namespace=many)
    events: list[dict[str, Any]] = []
    for i in range(8):
        agent.run(f"Turn {i}: please list variables", on_event=events.append, use_memory=False)
        view = agent.last_turn.model_view
        assert tool_pairs_whole(view)
        if i >= 3:
            assert count_message_tokens(view) <= 4000, (i, count_message_tokens(view))
    summaries = [e for e in events if e["type"] == "summary"]
    assert 0 < len(summaries) <= 8  # at most one a turn, not one per model call
    agent.close()


class Digger(OfflineModel):
    """A model that lists the variables eight times over before it answers, as a real
    model digging through a notebook can: one turn of many large tool results."""

    def __init__(self) -> None:
        self.requests: list[tuple[list[dict[str, Any]], int]] = []

    def chat(
        self, messages: list[dict[str, Any]], *, tools: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.requests.append((messages, count_tokens(json.dumps(tools)) if tools else 0))
        calls = sum(1 for m in messages if m.get("tool_calls"))
        if tools and calls < 8:
            return ChatResult("", [ToolCall(f"c{calls}", "list_variables", "{}")])
        return ChatResult(content="done digging")


def test_one_turn_of_many_large_tool_results_is_shortened_to_fit_the_window() -> None:
    """Only earlier turns can be summarized: eight ~1,000-token results in one turn used to
    outgrow a 4,000-token window, whatever the history held."""
    settings = load_settings()
    settings.model.max_input_tokens = 4000
    settings.agent.max_turns = 10
    many = {f"column_{i:04d}": i for i in range(400)}
    model = Digger()
    agent = Agent(settings=settings, model=model, namespace=many)
    events: list[dict[str, Any]] = []
    agent.run("dig through my variables", on_event=events.append, use_memory=False)
    assert agent.last_turn.reply == "done digging"
    # as the model reads any tool result: through the prompt boundary ("…" as "...")
    listing = prompt_text(NotebookTools(many).call("list_variables", {}))
    for view, schema_tokens in model.requests:
        assert count_message_tokens(view) + schema_tokens <= 4000
        assert tool_pairs_whole(view)
        results = [m for m in view if m["role"] == "tool"]
        if results:  # the results the model has not read yet come whole
            assert results[-1]["content"] == listing
            assert all(m["content"].startswith(listing[:100]) for m in results)
    shortened = [e for e in events if e["type"] == "shortened"]
    assert shortened and summary_line(shortened[0]).startswith("↺ shortened")
    # The journal keeps every result whole.
    journaled = [m for m in agent.journal.messages("default") if m["role"] == "tool"]
    whole = NotebookTools(many).call("list_variables", {})
    assert len(journaled) == 8 and all(m["content"] == whole for m in journaled)
    agent.close()
