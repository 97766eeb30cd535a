"""The offline model speaks every protocol of docs/internals.md, deterministically."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from deerflow_nb.agent.tools import parse_arguments
from deerflow_nb.config import load_settings
from deerflow_nb.llm import ModelError, get_chat_model
from deerflow_nb.offline.model import OfflineModel
from deerflow_nb.offline.replies import TOOL_RESULT_MAX_TOKENS
from deerflow_nb.offline.words import hashed_embedding
from deerflow_nb.tokens import count_message_tokens, count_tokens

TOOL_NAMES = ("list_variables", "describe_variable", "read_cell", "run_code", "task")


def tools(*names: str) -> list[dict[str, Any]]:
    return [
        {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
        for n in names or TOOL_NAMES
    ]


def user(text: Any) -> dict[str, Any]:
    return {"role": "user", "content": text}


@pytest.fixture
def model() -> OfflineModel:
    return OfflineModel()


def calls_for(model: OfflineModel, text: str, *names: str) -> list[tuple[str, dict]]:
    result = model.chat([user(text)], tools=tools(*names))
    if result.tool_calls:
        assert result.content == "" and result.finish_reason == "tool_calls"
    else:
        assert result.content.startswith("(offline model) ") and result.finish_reason == "stop"
    return [(c.name, parse_arguments(c.arguments)) for c in result.tool_calls]


def test_identity_and_budget(model: OfflineModel) -> None:
    assert model.name == "offline"
    assert model.max_input_tokens == 16_384
    assert get_chat_model(load_settings()).name == "offline"


def test_streams_word_by_word_and_counts_usage_exactly(model: OfflineModel) -> None:
    messages = [{"role": "system", "content": "Be brief."}, user("Tell me about churn models")]
    pieces: list[str] = []
    result = model.chat(messages, on_text=pieces.append)
    assert result.content.startswith("(offline model) ")
    assert len(pieces) > 5 and "".join(pieces) == result.content
    assert result.usage.input_tokens == count_message_tokens(messages)
    assert result.usage.output_tokens == count_tokens(result.content)
    assert result.finish_reason == "stop" and result.model == "offline"


def test_is_deterministic(model: OfflineModel) -> None:
    messages = [user("What variables do I have, and describe df")]
    first = model.chat(messages, tools=tools())
    second = OfflineModel().chat(messages, tools=tools())
    assert first == second


def test_plain_answer_echoes_key_terms(model: OfflineModel) -> None:
    reply = model.chat([user("Explain gradient boosting")]).content
    assert reply.startswith("(offline model) ")
    assert "gradient" in reply and "boosting" in reply


def test_plain_answer_quotes_memory_facts_sharing_words(model: OfflineModel) -> None:
    system = (
        "You are a notebook assistant.\n<memory>\nUser context: data scientist.\nFacts:\n"
        "- [preference | 0.90] Prefers polars over pandas\n"
        "- [context | 0.85] Works on churn prediction for a telecom\n"
        "</memory>"
    )
    reply = model.chat(
        [{"role": "system", "content": system}, user("Which dataframe library should I prefer?")]
    ).content
    assert reply == "(offline model) From memory: Prefers polars over pandas."
    reply = model.chat([{"role": "system", "content": system}, user("Plot churn by month")]).content
    assert "Works on churn prediction" in reply and "polars" not in reply
    # Without a memory block the same question gets no remembered fact.
    assert "polars" not in model.chat([user("Which dataframe library do I prefer?")]).content


def test_list_variables(model: OfflineModel) -> None:
    assert calls_for(model, "What variables do I have?") == [("list_variables", {})]
    assert calls_for(model, "what data is loaded") == [("list_variables", {})]


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("Please describe df", "df"),
        ("describe the `sales_2024` frame", "sales_2024"),
        ("Can you look at my orders?", "orders"),
        ("summarize results.", "results"),
    ],
)
def test_describe_variable(model: OfflineModel, text: str, name: str) -> None:
    assert calls_for(model, text) == [("describe_variable", {"name": name})]


def test_read_cell(model: OfflineModel) -> None:
    assert calls_for(model, "What does cell 3 do?") == [
        ("read_cell", {"number": 3, "part": "source"})
    ]
    assert calls_for(model, "explain the output of In [12]") == [
        ("read_cell", {"number": 12, "part": "output"})
    ]


def test_run_code_needs_a_fence_and_the_tool(model: OfflineModel) -> None:
    text = "Please run this:\n```python\nx = 2\nprint(x * 21)\n```"
    assert calls_for(model, text) == [("run_code", {"code": "x = 2\nprint(x * 21)"})]
    assert calls_for(model, text, "list_variables") == []
    assert calls_for(model, "run the numbers for me") == []
    aligned = "Please run this:\n```python\nfor x in y:\n    a  = 1\n    b  = 2\n    c  = 3\n```"
    assert calls_for(model, aligned)[0][0] == "run_code"  # aligned code is not an output


def test_several_tools_in_one_response(model: OfflineModel) -> None:
    assert calls_for(model, "List my variables and describe df") == [
        ("list_variables", {}),
        ("describe_variable", {"name": "df"}),
    ]


def test_task_fan_out_one_call_per_bullet(model: OfflineModel) -> None:
    text = (
        "Use sub-agents in parallel for these:\n"
        "- count missing values in df\n"
        "- compare revenue by region\n"
        "3. draft a short summary of the churn drivers we found so far"
    )
    calls = calls_for(model, text)
    assert [name for name, _ in calls] == ["task"] * 3
    prompts = [args["prompt"] for _, args in calls]
    assert prompts == [
        "count missing values in df",
        "compare revenue by region",
        "draft a short summary of the churn drivers we found so far",
    ]
    for _, args in calls:
        assert args["subagent_type"] == "general-purpose"
        assert 0 < len(args["description"].split()) <= 6
    # Without the task tool, or without asking to delegate, no task calls.
    assert calls_for(model, text, "list_variables") == []
    assert calls_for(model, "- count rows\n- plot sales") == []


def test_tool_call_ids_unique_and_deterministic(model: OfflineModel) -> None:
    text = "delegate to subagents:\n- a one\n- a one\n- b two"
    first = model.chat([user(text)], tools=tools()).tool_calls
    again = model.chat([user(text)], tools=tools()).tool_calls
    assert len({c.id for c in first}) == 3
    assert [c.id for c in first] == [c.id for c in again]
    assert all(c.id.startswith("call_") for c in first)
    later = model.chat(
        [user("hi"), {"role": "assistant", "content": "x"}, user(text)], tools=tools()
    )
    assert {c.id for c in later.tool_calls}.isdisjoint({c.id for c in first})


def test_answers_from_tool_results(model: OfflineModel) -> None:
    first = model.chat([user("describe df")], tools=tools())
    call = first.tool_calls[0]
    shape = "DataFrame df: shape (1000, 12), columns: id, region, revenue"
    messages = [
        user("describe df"),
        first.to_message(),
        {"role": "tool", "tool_call_id": call.id, "content": shape},
    ]
    final = model.chat(messages, tools=tools())
    assert final.tool_calls == [] and final.finish_reason == "stop"
    assert final.content.startswith("(offline model) ")
    assert "describe_variable" in final.content and "shape (1000, 12)" in final.content


def test_sub_agent_reports_are_named_by_their_task(model: OfflineModel) -> None:
    """The lead's answer names each report by its sub-agent's job, not as another "task",
    and does not nest the sub-agent's own offline-model mark."""
    text = "Use sub-agents in parallel for these:\n- count rows in df\n- plot sales"
    fan_out = model.chat([user(text)], tools=tools())
    reports = [
        {"role": "tool", "tool_call_id": call.id, "content": f"(offline model) report {i}\n- {i}"}
        for i, call in enumerate(fan_out.tool_calls)
    ]
    final = model.chat([user(text), fan_out.to_message(), *reports], tools=tools())
    assert final.content.splitlines()[1:] == [  # a report's lines, as code under its item
        "- sub-agent **count rows in df**:",
        "  ```text",
        "  report 0",
        "  - 0",
        "  ```",
        "- sub-agent **plot sales**:",
        "  ```text",
        "  report 1",
        "  - 1",
        "  ```",
    ]


def test_a_multi_line_tool_result_is_a_code_block_nothing_in_it_can_close(
    model: OfflineModel,
) -> None:
    """Issue 22: a DataFrame's dtypes and head keep their lines in the rendered answer."""
    from deerflow_nb.untrusted import render_markdown

    first = model.chat([user("describe df")], tools=tools())
    head = "df: DataFrame\nhead:\n   id region\n0   1  north\n```\n*not emphasis*"
    messages = [
        user("describe df"),
        first.to_message(),
        {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": head},
    ]
    final = model.chat(messages, tools=tools()).content
    assert final.splitlines()[1:] == [
        "- describe_variable:",
        "  ````text",
        *(f"  {line}" for line in head.splitlines()),
        "  ````",
    ]
    html = render_markdown(final)
    assert ">" + head + "\n</code></pre>" in html
    assert "<em>" not in html


def test_a_sub_agent_label_is_literal(model: OfflineModel) -> None:
    fan_out = model.chat([user("Use sub-agents in parallel:\n- a\n- b")], tools=tools())
    call = fan_out.tool_calls[0]
    call.arguments = json.dumps({"description": "*x* ![](http://h/b)", "prompt": "p"})
    report = {"role": "tool", "tool_call_id": call.id, "content": "done"}
    final = model.chat([user("go"), fan_out.to_message(), report], tools=tools()).content
    assert "- sub-agent **\\*x\\* \\!\\[\\]\\(http\\:\\/\\/h\\/b\\)**: done" in final


def test_long_tool_results_are_truncated(model: OfflineModel) -> None:
    messages = [
        user("list variables"),
        {"role": "assistant", "content": "", "tool_calls": []},
        {"role": "tool", "tool_call_id": "x", "content": "row " * 5000},
    ]
    assert count_tokens(model.chat(messages).content) < TOOL_RESULT_MAX_TOKENS + 100


def test_summary_protocol(model: OfflineModel) -> None:
    text = (
        "<conversation_to_summarize>\n"
        "User: I am cleaning the churn dataset. It has 12 columns.\n"
        "Assistant: Great. Let me know.\n"
        "User: Now plot revenue by region! Use seaborn.\n"
        "</conversation_to_summarize>\nSummarize the conversation above."
    )
    summary = model.chat([{"role": "system", "content": "Summarize."}, user(text)]).content
    assert summary.startswith("Summary of earlier conversation:")
    assert "I am cleaning the churn dataset." in summary
    assert "Now plot revenue by region!" in summary
    assert "12 columns" not in summary and "Let me know" not in summary
    turns = "".join(f"User: step number {i} is done.\n" for i in range(400))
    long = model.chat([user(f"<conversation_to_summarize>\n{turns}")]).content
    assert count_tokens(long) <= 300
    assert "step number 399 is done." in long and "step number 0 " not in long


def test_summary_carries_over_the_previous_summary(model: OfflineModel) -> None:
    first = model.chat(
        [user("<conversation_to_summarize>\nUser: I work on churn.\n</conversation_to_summarize>")]
    ).content
    text = (
        f"<conversation_to_summarize>\nSummary so far: {first}\n"
        "User: Now switch to polars. Thanks.\nAssistant: Done.\n"
        "</conversation_to_summarize>"
    )
    second = model.chat([user(text)]).content
    assert "I work on churn." in second and "Now switch to polars." in second
    assert second.count("Summary of earlier conversation:") == 1


def test_sub_agent_answers_its_task(model: OfflineModel) -> None:
    messages = [
        {"role": "system", "content": "You are a sub-agent. Complete the task and report."},
        user("compare revenue by region"),
    ]
    reply = model.chat(messages).content
    assert reply.startswith("(offline model) Sub-agent result for: compare revenue by region")
    assert "revenue" in reply.splitlines()[1]


def test_json_mode_returns_the_extraction_diff_as_json(model: OfflineModel) -> None:
    prompt = (
        "<current_memory>\n- [f1] (preference, 0.90) Prefers polars over pandas\n"
        "</current_memory>\n<conversation>\nUser: I prefer matplotlib for plots.\n"
        "Assistant: Noted.\n</conversation>"
    )
    messages = [{"role": "system", "content": "Extract memory."}, user(prompt)]
    result = model.chat(messages, json_mode=True)
    assert isinstance(json.loads(result.content), dict)
    assert result.tool_calls == []
    assert result.content == model.chat(messages, json_mode=True).content


@pytest.mark.parametrize(
    "messages",
    [
        [],
        [user(None)],
        [user("")],
        [user(42)],
        [user([{"type": "text", "text": "describe df"}, {"type": "image_url"}])],
        ["not a dict", None, user("hello")],
        [{"role": "tool", "content": None}],
        [{"role": "assistant"}],
    ],
)
def test_never_crashes_on_odd_input(model: OfflineModel, messages: list[Any]) -> None:
    for offered in (None, tools()):
        result = model.chat(messages, tools=offered)
        assert result.content.startswith("(offline model) ") or result.tool_calls


def test_content_parts_are_read(model: OfflineModel) -> None:
    message = user([{"type": "text", "text": "describe df"}])
    result = model.chat([message], tools=tools())
    assert [c.name for c in result.tool_calls] == ["describe_variable"]


def test_embeddings_are_normalised_and_word_based(model: OfflineModel) -> None:
    a, b, c = model.embed(["polars dataframes", "Prefers polars over pandas", "weather in Oslo"])
    assert len(a) == 256
    assert math.isclose(sum(x * x for x in a), 1.0, rel_tol=1e-9)

    def cos(u: list[float], v: list[float]) -> float:
        return sum(x * y for x, y in zip(u, v, strict=True))

    assert cos(a, b) > cos(a, c)
    assert model.embed(["same text"]) == [hashed_embedding("same text")]
    assert model.embed([""]) == [[0.0] * 256]


def test_non_offline_name_without_key_names_the_fix() -> None:
    with pytest.raises(ModelError, match="OPENAI_API_KEY"):
        get_chat_model(load_settings(), "gpt-4o")


def test_quotes_the_blocks_facts_but_not_summaries() -> None:
    system = (
        "<memory>\nUser Context:\n- Work: Leads the telecom churn team.\n\nFacts:\n"
        "Dates without a year are in 2026.\n[context | 0.90]\n22 Nov:\n"
        "- Works on a churn model\n- [preference | 0.92] Prefers polars over pandas\n"
        "[goal | 0.80]\n20 Nov: Wants a churn dashboard\n</memory>"
    )
    reply = OfflineModel().chat(
        [
            {"role": "system", "content": system},
            {"role": "user", "content": "Which library for pandas work on churn?"},
        ]
    )
    assert "Works on a churn model" in reply.content
    assert "Prefers polars over pandas" in reply.content
    assert "Wants a churn dashboard" in reply.content  # a group of one, on its date's line
    assert "20 Nov" not in reply.content and "[" not in reply.content
    assert "telecom" not in reply.content  # the summary line is not a fact
