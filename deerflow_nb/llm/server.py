"""A loopback OpenAI-compatible server that serves the offline model.

It lets the real ``openai`` SDK (and any other OpenAI client) talk HTTP to the
deterministic model: chat completions with and without streaming (OpenAI's exact
chunk format, tool-call deltas, the final usage chunk), ``/v1/models`` and
``/v1/embeddings``. Tests use it to exercise the client end to end; demos use it
(``deerflow-nb serve-offline``) to show the configuration path a real server takes.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import re
import socket
import struct
import sys
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..tokens import count_message_tokens, count_tokens
from .base import ChatResult
from .offline import OfflineModel

_ARG_PIECE = re.compile(r".{1,8}", re.DOTALL)
# OpenAI's limit on one /v1/embeddings request, kept so clients must batch as they would
# against the real API.
MAX_EMBEDDING_INPUTS = 2048
HOLD_SECONDS = 30.0  # a held request goes on by itself, so a failed test cannot hang


def _error(message: str, type_: str, code: str | None, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


class ServerHandle:
    """A running server: ``base_url`` for clients, ``stop()`` (or ``with``) to shut it down.

    ``fail_next(n, status)`` makes the next ``n`` API requests answer ``status``, so
    retry behaviour can be tested; ``hold_next()`` keeps the next one waiting, so a test
    can act while a client is mid-request; ``drop_next()`` cuts the next streamed reply
    after its first text chunk, as a lost connection does; ``seen_keys`` records the
    bearer key of every request (``None`` when absent), so tests can check which key a
    client sent; ``end_next()`` ends the next streamed reply early with HTTP
    200 and no chunk at all (as llama.cpp's server does when the prompt exceeds its window),
    or, with ``text=True``, after its text but before any ``finish_reason``.
    """

    def __init__(self, httpd: _Server, thread: threading.Thread) -> None:
        self._httpd = httpd
        self._thread = thread
        host, port = httpd.server_address[:2]
        self.host = str(host)
        self.port = int(port)
        self.base_url = f"http://{self.host}:{self.port}/v1"

    @property
    def api_key(self) -> str | None:
        return self._httpd.api_key

    @property
    def models(self) -> tuple[str, ...]:
        return self._httpd.models

    @property
    def seen_keys(self) -> list[str | None]:
        return list(self._httpd.seen_keys)

    @property
    def request_count(self) -> int:
        return self._httpd.request_count

    def fail_next(self, count: int, status: int = 503) -> None:
        """Answer the next ``count`` API requests with ``status`` and an OpenAI error body."""
        with self._httpd.lock:
            self._httpd.failures = [status] * count

    def drop_next(self) -> None:
        """Close the connection of the next streamed reply after its first text chunk."""
        with self._httpd.lock:
            self._httpd.drops += 1

    def reply_next(self, text: str) -> None:
        """Make the next chat reply ``text`` (streamed in pieces when streaming), whatever
        the offline model would say: a reply no test could otherwise get from it."""
        with self._httpd.lock:
            self._httpd.replies.append(text)

    def end_next(self, *, text: bool = False) -> None:
        """End the next streamed reply without a ``finish_reason``: with no chunk at all, or
        (``text``) after its text chunks."""
        with self._httpd.lock:
            self._httpd.early_ends.append(text)

    def hold_next(self) -> Hold:
        """Keep the next API request waiting until the returned hold is released."""
        hold = Hold()
        with self._httpd.lock:
            self._httpd.holds.append(hold)
        return hold

    def wait(self) -> None:
        """Block until the server stops (``serve-offline`` runs in the foreground this way)."""
        while self._thread.is_alive():
            self._thread.join(timeout=0.5)

    def stop(self) -> None:
        """Stop serving and close the socket and every open connection, as a server that
        goes down does (a kept-alive connection would otherwise go on being answered);
        safe to call twice."""
        if self._thread.is_alive():
            self._httpd.shutdown()
            self._thread.join(timeout=5)
        self._httpd.server_close()
        self._httpd.close_connections()

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class Hold:
    """A request held by ``ServerHandle.hold_next``: ``arrived`` is set once it waits,
    and it goes on when ``release`` is set (or after ``HOLD_SECONDS``)."""

    arrived: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        api_key: str | None,
        models: Iterable[str],
        context_window: int | None = None,
        overflow: str = "error",
    ):
        super().__init__(address, _Handler)
        self.api_key = api_key
        self.models = tuple(models)
        self.model = OfflineModel()
        self.lock = threading.Lock()
        self.failures: list[int] = []
        self.holds: list[Hold] = []
        self.drops = 0  # streamed replies still to cut short (``drop_next``)
        self.early_ends: list[bool] = []  # streamed replies to end early (``end_next``)
        self.replies: list[str] = []  # chat replies to give instead (``reply_next``)
        self.context_window = context_window
        self.overflow = overflow
        self.seen_keys: list[str | None] = []
        self.request_count = 0
        self.connections: set[socket.socket] = set()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self.lock:
            open_now, self.connections = self.connections, set()
        for connection in open_now:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up mid-reply (its timeout, Ctrl-C) is routine: no traceback."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests and notebooks should not see access logs on stderr."""

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        body = self._read_body()
        path = self.path.split("?", 1)[0].rstrip("/")
        if not self._authorized():
            return
        with self.server.lock:
            self.server.request_count += 1
            status = self.server.failures.pop(0) if self.server.failures else None
            hold = self.server.holds.pop(0) if self.server.holds else None
        if hold is not None:
            hold.arrived.set()
            hold.release.wait(HOLD_SECONDS)
        if status is not None:
            self._send_json(status, _error(f"injected failure {status}", "server_error", None))
            return
        routes = {
            ("GET", "/v1/models"): self._models,
            ("POST", "/v1/chat/completions"): self._chat,
            ("POST", "/v1/embeddings"): self._embeddings,
        }
        route = routes.get((method, path))
        if route is not None:
            route(body)
        elif method == "GET" and path.startswith("/v1/models/"):
            self._model(path.rsplit("/", 1)[1])
        else:
            message = f"Invalid URL ({method} {self.path})"
            self._send_json(404, _error(message, "invalid_request_error", None))

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _authorized(self) -> bool:
        header = self.headers.get("Authorization") or ""
        key = header[7:].strip() if header.lower().startswith("bearer ") else None
        with self.server.lock:
            self.server.seen_keys.append(key)
        expected = self.server.api_key
        if expected is None or key == expected:
            return True
        if key is None:
            message = "You didn't provide an API key. Send it as 'Authorization: Bearer KEY'."
        else:
            shown = key[:3] + "*" * max(len(key) - 7, 0) + key[-4:] if len(key) > 8 else "***"
            message = f"Incorrect API key provided: {shown}."
        self._send_json(401, _error(message, "invalid_request_error", "invalid_api_key"))
        return False

    def _send_json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _json_body(self, body: bytes) -> dict[str, Any] | None:
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            request = None
        if not isinstance(request, dict):
            self._send_json(
                400, _error("The request body is not a JSON object.", "invalid_request_error", None)
            )
            return None
        return request

    def _check_model(self, request: dict[str, Any]) -> str | None:
        model = request.get("model")
        if model in self.server.models:
            return model
        message = f"The model `{model}` does not exist or you do not have access to it."
        self._send_json(404, _error(message, "invalid_request_error", "model_not_found", "model"))
        return None

    def _models(self, _body: bytes) -> None:
        data = [_model_object(name) for name in self.server.models]
        self._send_json(200, {"object": "list", "data": data})

    def _model(self, name: str) -> None:
        if name in self.server.models:
            self._send_json(200, _model_object(name))
        else:
            self._check_model({"model": name})

    def _embeddings(self, body: bytes) -> None:
        request = self._json_body(body)
        if request is None or self._check_model(request) is None:
            return
        texts = request.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            message = "'input' must be a string or a list of strings."
            self._send_json(400, _error(message, "invalid_request_error", None, "input"))
            return
        if len(texts) > MAX_EMBEDDING_INPUTS:
            message = f"'input' may hold at most {MAX_EMBEDDING_INPUTS} items."
            self._send_json(400, _error(message, "invalid_request_error", None, "input"))
            return
        as_base64 = request.get("encoding_format") == "base64"
        data = []
        for index, vector in enumerate(self.server.model.embed(texts)):
            embedding: Any = vector
            if as_base64:
                embedding = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
            data.append({"object": "embedding", "index": index, "embedding": embedding})
        tokens = sum(count_tokens(t) for t in texts)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        self._send_json(
            200, {"object": "list", "data": data, "model": request["model"], "usage": usage}
        )

    def _chat(self, body: bytes) -> None:
        request = self._json_body(body)
        if request is None:
            return
        model = self._check_model(request)
        if model is None:
            return
        messages = request.get("messages")
        if not isinstance(messages, list):
            message = "'messages' must be a list."
            self._send_json(400, _error(message, "invalid_request_error", None, "messages"))
            return
        window = self.server.context_window
        if window is not None and (used := count_message_tokens(messages)) > window:
            if self.server.overflow == "empty" and request.get("stream"):
                # llama.cpp's server: HTTP 200 and a stream that ends with no chunk
                _Stream(self, "", 0, model, False).run(ChatResult(""), [], early=False)
                return
            message = (
                f"This model's maximum context length is {window} tokens. However, your "
                f"messages resulted in {used} tokens. Please reduce the length of the messages."
            )
            error = _error(message, "invalid_request_error", "context_length_exceeded", "messages")
            self._send_json(400, error)
            return
        tools = request.get("tools") if isinstance(request.get("tools"), list) else None
        response_format = request.get("response_format")
        json_mode = (
            isinstance(response_format, dict) and response_format.get("type") == "json_object"
        )
        ident = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        created = int(time.time())
        deltas: list[str] = []
        try:
            result = self.server.model.chat(
                messages, tools=tools, json_mode=json_mode, on_text=deltas.append
            )
        except Exception as exc:  # the client should get an answer, not a dropped socket
            message = f"The offline model failed: {type(exc).__name__}: {exc}"
            self._send_json(500, _error(message, "server_error", None))
            return
        with self.server.lock:
            told = self.server.replies.pop(0) if self.server.replies else None
        if told is not None:
            result = ChatResult(told, [], result.usage, result.model, "stop")
            deltas = _ARG_PIECE.findall(told)
        if request.get("stream"):
            options = request.get("stream_options")
            usage_chunk = isinstance(options, dict) and bool(options.get("include_usage"))
            stream = _Stream(self, ident, created, model, usage_chunk)
            stream.run(result, deltas, early=stream.ending_early())
            return
        message: dict[str, Any] = {
            "role": "assistant",
            "content": result.content if result.content or not result.tool_calls else None,
            "refusal": None,
        }
        if result.tool_calls:
            message["tool_calls"] = [c.to_openai() for c in result.tool_calls]
        payload = {
            "id": ident,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "system_fingerprint": None,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": result.finish_reason,
                }
            ],
            "usage": _usage(result),
        }
        self._send_json(200, payload)


class _Stream:
    """Server-sent events in OpenAI's chunk format, written as HTTP/1.1 chunked transfer."""

    def __init__(
        self, handler: _Handler, ident: str, created: int, model: str, usage_chunk: bool
    ) -> None:
        self.handler = handler
        self.ident = ident
        self.created = created
        self.model = model
        self.usage_chunk = usage_chunk

    def run(self, result: ChatResult, deltas: list[str], early: bool | None = None) -> None:
        """Send the text deltas the model produced, then its tool calls, finish and usage;
        ``early`` ends the stream before any chunk (False) or after the text (True)."""
        handler = self.handler
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream; charset=utf-8")
        handler.send_header("Cache-Control", "no-cache")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        if early is False:  # no chunk at all: the stream just ends
            self._write(b"")
            return
        self._choice({"role": "assistant", "content": ""})
        for text in deltas:
            self._choice({"content": text})
            if self._dropping():
                handler.close_connection = True
                handler.connection.shutdown(socket.SHUT_RDWR)
                return
        if early is True:  # the text, then the end, with no finish_reason
            self._write(b"data: [DONE]\n\n")
            self._write(b"")
            return
        for index, call in enumerate(result.tool_calls):
            head = {
                "index": index,
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }
            self._choice({"tool_calls": [head]})
            for piece in _ARG_PIECE.findall(call.arguments):
                self._choice({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        self._choice({}, finish_reason=result.finish_reason)
        if self.usage_chunk:
            self._event(self._chunk([], usage=_usage(result)))
        self._write(b"data: [DONE]\n\n")
        self._write(b"")

    def ending_early(self) -> bool | None:
        """None normally; else whether the text goes out before the stream ends early."""
        server = self.handler.server
        with server.lock:
            return server.early_ends.pop(0) if server.early_ends else None

    def _dropping(self) -> bool:
        server = self.handler.server
        with server.lock:
            if server.drops:
                server.drops -= 1
                return True
        return False

    def _chunk(self, choices: list[dict[str, Any]], usage: dict[str, int] | None = None) -> dict:
        chunk = {
            "id": self.ident,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": None,
            "choices": choices,
        }
        if self.usage_chunk:
            chunk["usage"] = usage
        return chunk

    def _choice(self, delta: dict[str, Any], finish_reason: str | None = None) -> None:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        self._event(self._chunk([choice]))

    def _event(self, payload: dict[str, Any]) -> None:
        self._write(f"data: {json.dumps(payload)}\n\n".encode())

    def _write(self, data: bytes) -> None:
        """One HTTP chunk; empty ``data`` writes the terminating zero-length chunk."""
        wfile = self.handler.wfile
        wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
        wfile.flush()


def _model_object(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "deerflow-nb"}


def _usage(result: ChatResult) -> dict[str, int]:
    return {
        "prompt_tokens": result.usage.input_tokens,
        "completion_tokens": result.usage.output_tokens,
        "total_tokens": result.usage.input_tokens + result.usage.output_tokens,
    }


def start_server(
    host: str = "127.0.0.1",
    port: int = 0,
    api_key: str | None = None,
    models: Iterable[str] = ("offline",),
    context_window: int | None = None,
    overflow: str = "error",
) -> ServerHandle:
    """Serve the offline model in a background thread; ``port=0`` picks a free port.

    ``context_window`` makes chat requests whose messages exceed it fail as OpenAI's do
    (400, ``context_length_exceeded``), to try a client against a small model; with
    ``overflow="empty"`` a streamed one gets what llama.cpp's server sends instead: HTTP
    200 and a stream that ends with no chunk.
    """
    httpd = _Server((host, port), api_key, models, context_window, overflow)
    thread = threading.Thread(
        target=httpd.serve_forever,
        kwargs={"poll_interval": 0.05},  # so stop() returns promptly
        name="deerflow-nb-server",
        daemon=True,
    )
    thread.start()
    return ServerHandle(httpd, thread)


def _port(text: str) -> int:
    """A TCP port number (0 picks a free one), for argparse: its error is one usage line."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port from 0 to 65535")
    return port


def serve_main(argv: list[str] | None = None) -> int:
    """``deerflow-nb serve-offline``: serve until interrupted, printing the base URL."""
    parser = argparse.ArgumentParser(
        prog="deerflow-nb serve-offline",
        description="Serve the offline model on an OpenAI-compatible loopback endpoint.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default: loopback)")
    parser.add_argument("--port", type=_port, default=0, help="port (default: any free port)")
    parser.add_argument("--api-key", default=None, help="require this bearer key")
    args = parser.parse_args(argv)
    handle = start_server(host=args.host, port=args.port, api_key=args.api_key)
    try:  # the URL is printed inside: a client may use it and interrupt before wait() starts
        print(handle.base_url, flush=True)
        handle.wait()
    except KeyboardInterrupt:
        pass
    finally:
        handle.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(serve_main())
