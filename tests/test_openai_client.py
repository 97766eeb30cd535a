"""The openai SDK over real HTTP to the loopback server: streaming, tools, errors, retries."""

from __future__ import annotations

import json
import logging
import math
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from journal_rows import journal_turn
from loopback import ServerHandle, start_server

from deerflow_nb.agent.tools import parse_arguments
from deerflow_nb.config import ModelConfig, load_settings
from deerflow_nb.llm import ModelError, get_chat_model
from deerflow_nb.llm.openai_client import PLACEHOLDER_KEY, OpenAIChatModel
from deerflow_nb.offline.model import OfflineModel

LIST_VARIABLES = {
    "type": "function",
    "function": {
        "name": "list_variables",
        "description": "List the notebook's variables.",
        "parameters": {"type": "object", "properties": {}},
    },
}


def make_model(
    base_url: str, name: str = "offline", key: str | None = None, **config: Any
) -> OpenAIChatModel:
    config.setdefault("timeout_seconds", 5.0)
    config.setdefault("max_retries", 0)
    return OpenAIChatModel(name, ModelConfig(base_url=base_url, api_key=key, **config))


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assert_one_line(error: pytest.ExceptionInfo[ModelError]) -> str:
    message = str(error.value)
    assert message and "\n" not in message
    return message


def test_streamed_reply(loopback_server: ServerHandle) -> None:
    model = make_model(loopback_server.base_url)
    deltas: list[str] = []
    result = model.chat([user("Explain gradient boosting")], on_text=deltas.append)
    assert len(deltas) > 5
    assert "".join(deltas) == result.content
    assert result.content.startswith("(offline model) ")
    assert result.usage.input_tokens > 0 and result.usage.output_tokens > 0
    assert result.finish_reason == "stop" and result.model == "offline"
    # The same call without streaming gives the same reply and the same usage.
    assert model.chat([user("Explain gradient boosting")]) == result


def test_tool_call_round_trip(loopback_server: ServerHandle) -> None:
    model = make_model(loopback_server.base_url)
    messages = [user("What variables do I have?")]
    first = model.chat(messages, tools=[LIST_VARIABLES], on_text=lambda _t: None)
    assert first.finish_reason == "tool_calls"
    (call,) = first.tool_calls
    assert call.name == "list_variables" and parse_arguments(call.arguments) == {}
    messages += [
        first.to_message(),
        {"role": "tool", "tool_call_id": call.id, "content": "df: DataFrame (1000, 12)"},
    ]
    final = model.chat(messages, tools=[LIST_VARIABLES])
    assert final.tool_calls == [] and final.finish_reason == "stop"
    assert "df: DataFrame (1000, 12)" in final.content


def test_streamed_tool_calls_assemble_by_index(loopback_server: ServerHandle) -> None:
    model = make_model(loopback_server.base_url)
    prompt = "Use sub-agents in parallel:\n- count rows in df\n- plot revenue by region"
    task = {"type": "function", "function": {"name": "task", "parameters": {"type": "object"}}}
    streamed = model.chat([user(prompt)], tools=[task], on_text=lambda _t: None)
    plain = model.chat([user(prompt)], tools=[task])
    assert streamed.tool_calls == plain.tool_calls
    prompts = [parse_arguments(c.arguments)["prompt"] for c in streamed.tool_calls]
    assert prompts == ["count rows in df", "plot revenue by region"]


def test_json_mode(loopback_server: ServerHandle) -> None:
    model = make_model(loopback_server.base_url)
    prompt = (
        "<current_memory>\n</current_memory>\n<conversation>\n"
        "User: I prefer polars over pandas.\nAssistant: Noted.\n</conversation>"
    )
    messages = [{"role": "system", "content": "Extract memory as JSON."}, user(prompt)]
    result = model.chat(messages, json_mode=True)
    assert isinstance(json.loads(result.content), dict)


def test_embeddings(loopback_server: ServerHandle) -> None:
    model = make_model(loopback_server.base_url)
    texts = ["polars dataframes", "weather in Oslo"]
    vectors = model.embed(texts)
    expected = OfflineModel().embed(texts)
    assert len(vectors) == 2 and len(vectors[0]) == 256
    for got, want in zip(vectors, expected, strict=True):
        assert all(math.isclose(a, b, abs_tol=1e-6) for a, b in zip(got, want, strict=True))
    assert model.embed([]) == []


def test_embeddings_of_thousands_of_texts_go_in_batches(loopback_server: ServerHandle) -> None:
    """A fold embeds every fact and word at once; the API takes at most 2048 inputs per
    request (the loopback server refuses more, as OpenAI does)."""
    model = make_model(loopback_server.base_url)
    texts = [f"word{i}" for i in range(2500)]
    before = loopback_server.request_count
    vectors = model.embed(texts)
    assert loopback_server.request_count - before == 3  # 1000 + 1000 + 500
    assert len(vectors) == 2500
    assert vectors[2499] == pytest.approx(OfflineModel().embed(["word2499"])[0], abs=1e-6)
    client = openai.OpenAI(base_url=loopback_server.base_url, api_key="x", max_retries=0)
    with pytest.raises(openai.BadRequestError, match="at most 2048 items"):
        client.embeddings.create(model="offline", input=texts)


def test_wrong_key_is_one_line_about_the_key() -> None:
    with start_server(api_key="sk-server") as handle:
        model = make_model(handle.base_url, key="sk-wrong")
        with pytest.raises(ModelError) as error:
            model.chat([user("hi")])
    message = assert_one_line(error)
    assert "401" in message and "API key" in message and "OPENAI_API_KEY" in message


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_dead_port_names_the_url() -> None:
    base_url = f"http://127.0.0.1:{free_port()}/v1"
    model = make_model(base_url)
    for kwargs in ({}, {"on_text": lambda _t: None}):
        with pytest.raises(ModelError) as error:
            model.chat([user("hi")], **kwargs)
        message = assert_one_line(error)
        assert base_url in message and "OPENAI_BASE_URL" in message
    with pytest.raises(ModelError, match="cannot reach"):
        model.embed(["x"])


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock.getsockname()[1]


def test_timeout_is_one_line(silent_port: int) -> None:
    model = make_model(f"http://127.0.0.1:{silent_port}/v1", timeout_seconds=0.3)
    with pytest.raises(ModelError) as error:
        model.chat([user("hi")])
    message = assert_one_line(error)
    assert "0.3s" in message and "model.timeout_seconds" in message


def test_unknown_model_names_it_and_lists_models(loopback_server: ServerHandle) -> None:
    model = make_model(loopback_server.base_url, name="gpt-9")
    with pytest.raises(ModelError) as error:
        model.chat([user("hi")])
    message = assert_one_line(error)
    assert "'gpt-9'" in message and "-m" in message and "DEERFLOW_NB_MODEL" in message
    assert "available: offline" in message


def test_503_then_success_is_retried(loopback_server: ServerHandle) -> None:
    model = make_model(loopback_server.base_url, max_retries=2)
    loopback_server.fail_next(1, status=503)
    result = model.chat([user("hello again")])
    assert result.content.startswith("(offline model) ")
    assert loopback_server.request_count == 2

    loopback_server.fail_next(1, status=429)
    deltas: list[str] = []
    model.chat([user("hello again")], on_text=deltas.append)
    assert "".join(deltas).startswith("(offline model) ")
    assert loopback_server.request_count == 4


def test_retries_exhausted_is_one_line(loopback_server: ServerHandle) -> None:
    model = make_model(loopback_server.base_url, max_retries=1)
    loopback_server.fail_next(5, status=503)
    with pytest.raises(ModelError) as error:
        model.chat([user("hi")])
    message = assert_one_line(error)
    assert "503" in message and "1 retries" in message
    assert loopback_server.request_count == 2


def test_missing_key_names_the_fix() -> None:
    with pytest.raises(ModelError) as error:
        OpenAIChatModel("gpt-4o", ModelConfig())
    assert "set OPENAI_API_KEY or model.api_key in config.yaml" in assert_one_line(error)


def test_config_limits_are_used(loopback_server: ServerHandle) -> None:
    model = make_model(loopback_server.base_url, max_input_tokens=8192, timeout_seconds=7.5)
    assert model.max_input_tokens == 8192
    assert model.client.timeout == 7.5
    assert model.client.max_retries == 0
    assert model.client.api_key == PLACEHOLDER_KEY


def test_get_chat_model_follows_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(get_chat_model(load_settings()), OfflineModel)
    with start_server(models=("gpt-4o-mini",)) as handle:
        monkeypatch.setenv("OPENAI_BASE_URL", handle.base_url)
        model = get_chat_model(load_settings())
        assert isinstance(model, OpenAIChatModel) and model.name == "gpt-4o-mini"
        assert model.chat([user("hi")]).content.startswith("(offline model) ")
        assert handle.seen_keys == [PLACEHOLDER_KEY]
        assert isinstance(get_chat_model(load_settings(), "offline"), OfflineModel)


def test_ambient_openai_key_is_not_sent_to_a_custom_base_url(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with start_server(api_key="sk-ambient-secret", models=("gpt-4o-mini",)) as handle:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-ambient-secret")
        monkeypatch.setenv("OPENAI_BASE_URL", handle.base_url)
        with pytest.raises(ModelError, match="401") as error:
            get_chat_model(load_settings()).chat([user("hi")])
        # The fix named is where a key for this server goes, not "a valid OPENAI_API_KEY".
        assert "needs an API key" in str(error.value) and "DEERFLOW_NB_API_KEY" in str(error.value)
        assert "send_openai_key_to_base_url" in str(error.value)
        assert "sk-ambient-secret" not in handle.seen_keys
        assert handle.seen_keys == [PLACEHOLDER_KEY]

        (home / "config.yaml").write_text("model:\n  send_openai_key_to_base_url: true\n")
        reply = get_chat_model(load_settings()).chat([user("hi")])
        assert reply.content.startswith("(offline model) ")
        assert handle.seen_keys[-1] == "sk-ambient-secret"


def test_importing_the_package_does_not_import_openai() -> None:
    code = (
        "import sys, deerflow_nb, deerflow_nb.llm\n"
        "from deerflow_nb.llm.openai_client import OpenAIChatModel\n"
        "from deerflow_nb.config import ModelConfig\n"
        "OpenAIChatModel('m', ModelConfig(base_url='http://127.0.0.1:9/v1'))\n"
        "print('openai' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


def test_a_fold_against_a_dead_server_is_one_logged_line(
    home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from deerflow_nb.memory import Memory

    base_url = f"http://127.0.0.1:{free_port()}/v1"
    (home / "config.yaml").write_text(
        f"model:\n  base_url: {base_url}\n  api_key: sk-test\n  max_retries: 0\n"
    )
    memory = Memory(home)
    journal_turn(memory, "t", "I prefer vim over emacs.")
    memory.enqueue("t")
    with caplog.at_level(logging.WARNING, logger="deerflow_nb.memory.folding.fold"):
        report = memory.flush(timeout=60)
    assert "cannot reach" in report.failed["t"]
    (record,) = [r for r in caplog.records if "memory fold of t failed" in r.getMessage()]
    assert record.exc_info is None and base_url in record.getMessage()
    memory.close()


def test_a_prompt_over_the_models_window_names_the_setting() -> None:
    """A 400 is not retried (and not said to be); a context overflow names the setting."""
    with start_server(context_window=50) as server:
        model = make_model(server.base_url, max_retries=3)
        with pytest.raises(ModelError) as error:
            model.chat([user("word " * 200)])
        message = assert_one_line(error)
        assert "longer than model" in message and "model.max_input_tokens" in message
        assert server.request_count == 1

        server.fail_next(1, status=400)
        with pytest.raises(ModelError) as error:
            model.chat([user("hi")])
        message = assert_one_line(error)
        assert "answered 400" in message and "retries" not in message


def test_a_connection_dropped_mid_reply_says_so(loopback_server: ServerHandle) -> None:
    """The SDK calls it a connection error; "cannot reach … start the server" would send the
    user after a server that is up and answered."""
    model = make_model(loopback_server.base_url)
    loopback_server.drop_next()
    seen: list[str] = []
    with pytest.raises(ModelError) as info:
        model.chat([user("hello there, how are you?")], on_text=seen.append)
    assert seen  # the reply had begun
    message = str(info.value)
    assert "dropped in the middle of the reply" in message and "run the turn again" in message
    assert "\n" not in message
    assert model.chat([user("hello again")], on_text=seen.append).content  # the next is whole
    loopback_server.stop()
    with pytest.raises(ModelError, match="cannot reach"):  # a server down is still that
        model.chat([user("anyone?")], on_text=seen.append)
