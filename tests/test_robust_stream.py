"""Streams that end without an answer are errors, not an empty "ok" reply (issue 17.6).

llama.cpp's server answers a prompt over its context window with HTTP 200 and a stream
that ends with no chunk; the loopback server does the same here (``overflow="empty"``,
``end_next``), and the real ``openai`` SDK reads it over HTTP.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from loopback import ServerHandle, start_server

from deerflow_nb import Agent
from deerflow_nb.config import ModelConfig, load_settings
from deerflow_nb.llm import ModelError
from deerflow_nb.llm.base import ReplyCutShort
from deerflow_nb.llm.openai_client import OpenAIChatModel


def make_model(base_url: str, name: str = "offline") -> OpenAIChatModel:
    return OpenAIChatModel(name, ModelConfig(base_url=base_url, timeout_seconds=5.0, max_retries=0))


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def test_a_stream_with_no_chunk_is_a_one_line_error_naming_the_window() -> None:
    with start_server(context_window=50, overflow="empty") as server:
        model = make_model(server.base_url)
        seen: list[str] = []
        with pytest.raises(ModelError) as info:
            model.chat([user("word " * 200)], on_text=seen.append)
        message = str(info.value)
        assert "\n" not in message
        assert "closed the stream" in message and "before any reply" in message
        assert "model.max_input_tokens" in message and "context window" in message
        assert "205 tokens" in message or " tokens were sent" in message
        assert seen == []
        # A prompt inside the window streams as usual.
        assert model.chat([user("hi")], on_text=seen.append).content


def test_a_stream_that_ends_before_its_finish_reason_is_an_error(
    loopback_server: ServerHandle,
) -> None:
    model = make_model(loopback_server.base_url)
    loopback_server.end_next(text=True)
    seen: list[str] = []
    with pytest.raises(ModelError) as info:
        model.chat([user("Explain gradient boosting")], on_text=seen.append)
    assert seen  # the text came, but the reply never finished
    message = str(info.value)
    assert "\n" not in message and "ended the reply early" in message
    assert "interrupted" in message and "context window" not in message
    assert isinstance(info.value, ReplyCutShort) and info.value.partial == "".join(seen)
    assert model.chat([user("again")], on_text=seen.append).finish_reason == "stop"


def test_a_turn_cut_short_keeps_its_partial_reply_marked_interrupted(home: Path) -> None:
    """The reply that streamed before the server ended it is journaled, the turn marked
    interrupted (not failed), and the error says to run it again."""
    with start_server(models=("small",)) as server:
        (home / "config.yaml").write_text(
            f"model:\n  name: small\n  base_url: {server.base_url}\n  max_retries: 0\n",
            encoding="utf-8",
        )
        agent = Agent(settings=load_settings(home))
        seen: list[str] = []
        server.end_next(text=True)
        with pytest.raises(ReplyCutShort, match="run the turn again"):
            agent.run("Explain gradient boosting", thread="cut", on_text=seen.append)
        (row,) = agent.journal.turns("cut")
        assert row["status"] == "interrupted" and "ended the reply early" in row["error"]
        replies = [m for m in agent.journal.messages("cut") if m["role"] == "assistant"]
        assert seen and [m["content"] for m in replies] == ["".join(seen)]
        assert agent.run("again", thread="cut", on_text=seen.append)  # the retry answers
        agent.close()


def test_an_over_window_turn_is_journaled_as_failed_not_ok(home: Path) -> None:
    with start_server(models=("small",), context_window=300, overflow="empty") as server:
        (home / "config.yaml").write_text(
            f"model:\n  name: small\n  base_url: {server.base_url}\n  max_retries: 0\n",
            encoding="utf-8",
        )
        agent = Agent(settings=load_settings(home))
        with pytest.raises(ModelError, match="closed the stream"):
            agent.run("word " * 400, thread="long", on_text=lambda _: None)
        turn = agent.last_turn
        assert turn is not None and turn.status == "error"
        assert turn.error and "closed the stream" in turn.error
        (row,) = agent.journal.turns("long")
        assert row["status"] == "error" and "max_input_tokens" in row["error"]
        assert row["output_tokens"] == 0
        agent.close()


def test_the_cell_shows_the_one_line_error(shell: Any, model_server: ServerHandle) -> None:
    from IPython.core.error import UsageError

    model_server.end_next()
    with pytest.raises(UsageError, match="closed the stream") as info:
        shell.run_cell_magic("agent", "-t over", "hello there")
    assert "\n" not in str(info.value)
    from deerflow_nb.notebook.session import get_session

    (row,) = get_session(shell).memory.journal.turns("over")
    assert row["status"] == "error"
