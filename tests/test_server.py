"""The loopback server speaks OpenAI's wire format exactly, checked with plain HTTP.

These tests run the shipped server (``deerflow_nb.offline.server``), which serves the offline
model only; the two that need a fault hook or the keys it saw use ``tests/loopback.py``'s.
"""

from __future__ import annotations

import base64
import http.client
import inspect
import json
import math
import os
import signal
import struct
import subprocess
import sys
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import loopback
import pytest

from deerflow_nb.offline import server
from deerflow_nb.offline.model import OfflineModel
from deerflow_nb.offline.server import ServerHandle, start_server

LIST_VARIABLES = {
    "type": "function",
    "function": {"name": "list_variables", "parameters": {"type": "object", "properties": {}}},
}
DESCRIBE = {
    "type": "function",
    "function": {"name": "describe_variable", "parameters": {"type": "object"}},
}


@pytest.fixture
def loopback_server() -> Iterator[ServerHandle]:
    """The shipped server (conftest's fixture of this name has the fault hooks)."""
    with start_server() as handle:
        yield handle


def test_the_shipped_server_serves_the_model_only() -> None:
    """No fault hooks and no record of the keys clients sent in what ships: those live
    in tests/loopback.py."""
    hooks = ("fail_next", "hold_next", "drop_next", "end_next", "reply_next", "seen_keys")
    for name in hooks:
        assert not hasattr(ServerHandle, name), name
    assert not hasattr(server, "HOLD_SECONDS")
    parameters = inspect.signature(start_server).parameters
    assert list(parameters) == ["host", "port", "api_key", "models"]
    with start_server() as handle:
        assert post(handle, "/chat/completions", chat_body("hi"))[0] == 200
        assert handle.request_count == 1


def request(
    handle: ServerHandle,
    method: str,
    path: str,
    body: Any = None,
    key: str | None = None,
    raw: bytes | None = None,
) -> tuple[int, dict[str, str], bytes]:
    url = urlsplit(handle.base_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    conn.request(method, url.path + path, body=data, headers=headers)
    response = conn.getresponse()
    payload = response.read()
    conn.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, payload


def post(handle: ServerHandle, path: str, body: Any, key: str | None = None) -> tuple[int, Any]:
    status, _, payload = request(handle, "POST", path, body, key)
    return status, json.loads(payload)


def sse_events(payload: bytes) -> list[Any]:
    """The ``data:`` payloads of an event stream, parsed; ``[DONE]`` stays a string."""
    events = []
    for block in payload.decode().split("\n\n"):
        if block.strip():
            assert block.startswith("data: "), block
            data = block[len("data: ") :]
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


def chat_body(content: str, **extra: Any) -> dict[str, Any]:
    return {"model": "offline", "messages": [{"role": "user", "content": content}], **extra}


def test_non_streamed_completion_shape(loopback_server: ServerHandle) -> None:
    status, body = post(loopback_server, "/chat/completions", chat_body("Explain churn"))
    assert status == 200
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    assert body["model"] == "offline" and isinstance(body["created"], int)
    (choice,) = body["choices"]
    assert choice["index"] == 0 and choice["finish_reason"] == "stop"
    assert choice["message"]["role"] == "assistant"
    expected = OfflineModel().chat([{"role": "user", "content": "Explain churn"}])
    assert choice["message"]["content"] == expected.content
    usage = body["usage"]
    assert usage["prompt_tokens"] == expected.usage.input_tokens
    assert usage["completion_tokens"] == expected.usage.output_tokens
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_non_streamed_tool_call(loopback_server: ServerHandle) -> None:
    body = chat_body("what variables exist?", tools=[LIST_VARIABLES])
    status, reply = post(loopback_server, "/chat/completions", body)
    assert status == 200
    (choice,) = reply["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"] == {"name": "list_variables", "arguments": "{}"}


def test_streamed_text_chunks(loopback_server: ServerHandle) -> None:
    body = chat_body("Explain gradient boosting", stream=True)
    body["stream_options"] = {"include_usage": True}
    status, headers, payload = request(loopback_server, "POST", "/chat/completions", body)
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    events = sse_events(payload)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    texts = [
        c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]
    ]  # every chunk carries choices except the usage one
    expected = OfflineModel().chat([{"role": "user", "content": "Explain gradient boosting"}])
    assert "".join(texts) == expected.content
    assert len([t for t in texts if t]) > 5
    finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finish[-1] == "stop" and set(finish[:-1]) == {None}
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"]["prompt_tokens"] == expected.usage.input_tokens
    assert usage_chunk["usage"]["completion_tokens"] == expected.usage.output_tokens
    assert all(c["usage"] is None for c in chunks[:-1])


def test_stream_without_usage_option_has_no_usage(loopback_server: ServerHandle) -> None:
    body = chat_body("hello", stream=True)
    chunks = sse_events(request(loopback_server, "POST", "/chat/completions", body)[2])[:-1]
    assert all("usage" not in c and len(c["choices"]) == 1 for c in chunks)


def test_streamed_tool_call_deltas(loopback_server: ServerHandle) -> None:
    body = chat_body("List variables and describe sales_df", tools=[LIST_VARIABLES, DESCRIBE])
    body["stream"] = True
    chunks = sse_events(request(loopback_server, "POST", "/chat/completions", body)[2])[:-1]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    calls: dict[int, dict[str, str]] = {}
    for delta in deltas:
        for part in delta.get("tool_calls", []):
            slot = calls.setdefault(part["index"], {"id": "", "name": "", "arguments": ""})
            if "id" in part:
                assert part["type"] == "function" and not slot["id"]
                slot["id"] = part["id"]
                slot["name"] = part["function"]["name"]
            slot["arguments"] += part["function"]["arguments"]
    assert [calls[i]["name"] for i in sorted(calls)] == ["list_variables", "describe_variable"]
    assert json.loads(calls[1]["arguments"]) == {"name": "sales_df"}
    # Arguments really arrive in several deltas, as OpenAI sends them.
    assert sum(1 for d in deltas for p in d.get("tool_calls", []) if p["index"] == 1) > 2
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_keep_alive_connection_serves_several_requests(loopback_server: ServerHandle) -> None:
    url = urlsplit(loopback_server.base_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    for stream in (True, False, True):
        conn.request("POST", "/v1/chat/completions", json.dumps(chat_body("hi", stream=stream)))
        response = conn.getresponse()
        assert response.status == 200
        response.read()
    conn.close()


def test_models_listing(loopback_server: ServerHandle) -> None:
    status, _, payload = request(loopback_server, "GET", "/models")
    body = json.loads(payload)
    assert status == 200 and body["object"] == "list"
    assert [m["id"] for m in body["data"]] == ["offline"]
    assert body["data"][0]["object"] == "model"
    status, _, payload = request(loopback_server, "GET", "/models/offline")
    assert status == 200 and json.loads(payload)["id"] == "offline"


def test_embeddings_float_and_base64(loopback_server: ServerHandle) -> None:
    texts = ["polars dataframes", "I prefer polars", "weather in Oslo"]
    status, body = post(loopback_server, "/embeddings", {"model": "offline", "input": texts})
    assert status == 200 and body["object"] == "list"
    vectors = [d["embedding"] for d in body["data"]]
    assert [d["index"] for d in body["data"]] == [0, 1, 2]
    assert all(len(v) == 256 for v in vectors)
    assert all(math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-9) for v in vectors)
    assert vectors == OfflineModel().embed(texts)
    assert body["usage"]["prompt_tokens"] > 0

    request_body = {"model": "offline", "input": texts[0], "encoding_format": "base64"}
    status, body = post(loopback_server, "/embeddings", request_body)
    raw = base64.b64decode(body["data"][0]["embedding"])
    decoded = struct.unpack(f"<{len(raw) // 4}f", raw)
    assert all(math.isclose(a, b, abs_tol=1e-6) for a, b in zip(decoded, vectors[0], strict=True))


def test_bad_embedding_input_is_400(loopback_server: ServerHandle) -> None:
    status, body = post(loopback_server, "/embeddings", {"model": "offline", "input": [[1, 2]]})
    assert status == 400 and body["error"]["param"] == "input"


def test_unknown_model_is_404_model_not_found(loopback_server: ServerHandle) -> None:
    for path in ("/chat/completions", "/embeddings"):
        status, body = post(loopback_server, path, {"model": "gpt-9", "messages": [], "input": "x"})
        assert status == 404
        assert body["error"]["code"] == "model_not_found"
        assert body["error"]["type"] == "invalid_request_error"
        assert "`gpt-9`" in body["error"]["message"]


def test_unknown_path_and_bad_json(loopback_server: ServerHandle) -> None:
    status, _, payload = request(loopback_server, "POST", "/completions", {"model": "offline"})
    assert status == 404 and "error" in json.loads(payload)
    status, _, payload = request(loopback_server, "POST", "/chat/completions", raw=b"{nope")
    assert status == 400 and json.loads(payload)["error"]["type"] == "invalid_request_error"
    status, body = post(loopback_server, "/chat/completions", {"model": "offline"})
    assert status == 400 and body["error"]["param"] == "messages"


def test_bearer_key_is_checked() -> None:
    with loopback.start_server(api_key="sk-right-key-123") as handle:
        status, body = post(handle, "/chat/completions", chat_body("hi"), key="sk-wrong-key-456")
        assert status == 401
        assert set(body["error"]) == {"message", "type", "param", "code"}
        assert body["error"]["code"] == "invalid_api_key"
        assert "sk-wrong-key-456" not in body["error"]["message"]  # masked, as OpenAI does
        status, body = post(handle, "/chat/completions", chat_body("hi"))
        assert status == 401 and "didn't provide an API key" in body["error"]["message"]
        status, _ = post(handle, "/chat/completions", chat_body("hi"), key="sk-right-key-123")
        assert status == 200
        assert handle.seen_keys == ["sk-wrong-key-456", None, "sk-right-key-123"]


def test_fail_next_injects_errors() -> None:
    with loopback.start_server() as faulty:
        faulty.fail_next(2, status=429)
        assert post(faulty, "/chat/completions", chat_body("hi"))[0] == 429
        assert post(faulty, "/chat/completions", chat_body("hi"))[0] == 429
        assert post(faulty, "/chat/completions", chat_body("hi"))[0] == 200
        assert faulty.request_count == 3


class _BrokenModel(OfflineModel):
    def chat(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom")


@pytest.mark.parametrize("stream", [False, True])
def test_model_failure_is_a_500_not_a_dropped_socket(
    loopback_server: ServerHandle, stream: bool
) -> None:
    loopback_server._httpd.model = _BrokenModel()
    body = chat_body("hi", stream=stream)
    status, _, payload = request(loopback_server, "POST", "/chat/completions", body)
    assert status == 500
    error = json.loads(payload)["error"]
    assert error["type"] == "server_error" and "RuntimeError: boom" in error["message"]


def test_a_client_hanging_up_prints_no_traceback(
    loopback_server: ServerHandle, capsys: pytest.CaptureFixture[str]
) -> None:
    """socketserver prints a traceback for any error in a handler thread; a client that
    closed its socket (its timeout, Ctrl-C) is routine, a real error still shows."""
    for error in (ConnectionResetError(104, "reset"), BrokenPipeError(32, "pipe")):
        try:
            raise error
        except ConnectionError:
            loopback_server._httpd.handle_error(None, ("127.0.0.1", 1))
    assert capsys.readouterr().err == ""
    try:
        raise ValueError("a real bug")
    except ValueError:
        loopback_server._httpd.handle_error(None, ("127.0.0.1", 1))
    assert "ValueError: a real bug" in capsys.readouterr().err


def test_stop_frees_the_port() -> None:
    handle = start_server()
    port = handle.port
    handle.stop()
    handle.stop()
    with start_server(port=port) as again:
        assert again.port == port


def test_serve_offline_command_prints_base_url_and_serves() -> None:
    env = dict(os.environ)
    proc = subprocess.Popen(
        [sys.executable, "-m", "deerflow_nb.cli", "serve-offline", "--api-key", "k-demo"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        base_url = proc.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
        url = urlsplit(base_url)
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
        conn.request("GET", "/v1/models", headers={"Authorization": "Bearer k-demo"})
        assert json.loads(conn.getresponse().read())["data"][0]["id"] == "offline"
        conn.close()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            assert proc.wait(timeout=10) == 0
        finally:
            if proc.poll() is None:
                proc.kill()


@pytest.mark.parametrize("models", [("offline", "offline-mini")])
def test_serves_several_model_names(models: tuple[str, ...]) -> None:
    with start_server(models=models) as handle:
        for name in models:
            status, body = post(handle, "/chat/completions", {**chat_body("hi"), "model": name})
            assert status == 200 and body["model"] == name


def test_serve_offline_names_a_bad_port_in_one_usage_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from deerflow_nb.offline.server import serve_main

    for bad in ("99999", "-1", "http"):
        with pytest.raises(SystemExit) as exit_info:
            serve_main(["--port", bad])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert f"'{bad}' is not a port from 0 to 65535" in err and "Traceback" not in err
