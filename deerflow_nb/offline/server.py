"""A loopback OpenAI-compatible server that serves the offline model.

It lets the real ``openai`` SDK (and any other OpenAI client) talk HTTP to the
deterministic model: chat completions with and without streaming (OpenAI's exact
chunk format, tool-call deltas, the final usage chunk), ``/v1/models`` and
``/v1/embeddings``. Tests use it to exercise the client end to end; demos use it
(``deerflow-nb serve-offline``) to show the configuration path a real server takes.

It serves the offline model and nothing else: the faults tests need (failed, held, cut or
replaced replies, a small context window) are added by a test-only subclass,
``tests/loopback.py``, through the seams below (``OfflineServer.admit``,
``OfflineHandler.complete``, ``OfflineHandler.stream_class``, ``serve``).
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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..llm.base import ChatResult
from ..ports import bind_failure, port_number
from ..tokens import count_tokens
from .model import OfflineModel

ARG_PIECE = re.compile(r".{1,8}", re.DOTALL)
# OpenAI's limit on one /v1/embeddings request, kept so clients must batch as they would
# against the real API.
MAX_EMBEDDING_INPUTS = 2048


def _error(message: str, type_: str, code: str | None, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


class ServerHandle:
    """A running server: ``base_url`` for clients, ``stop()`` (or ``with``) to shut it down,
    ``request_count`` (API requests answered so far, as the real_models notebook shows)."""

    def __init__(self, httpd: OfflineServer, thread: threading.Thread) -> None:
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
    def request_count(self) -> int:
        return self._httpd.request_count

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


class OfflineServer(ThreadingHTTPServer):
    """The HTTP server: the offline model, the served model names, the bearer key."""

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        api_key: str | None,
        models: Iterable[str],
        handler: type[OfflineHandler] | None = None,
    ):
        super().__init__(address, handler or OfflineHandler)
        self.api_key = api_key
        self.models = tuple(models)
        self.model = OfflineModel()
        self.lock = threading.Lock()
        self.request_count = 0
        self.connections: set[socket.socket] = set()

    def admit(self, handler: OfflineHandler, key: str | None) -> bool:
        """Called for every request with the bearer key it sent (None when absent), before
        it is answered; False when it was answered already. Counts the request."""
        with self.lock:
            self.request_count += 1
        return True

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


class OfflineHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: OfflineServer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests and notebooks should not see access logs on stderr."""

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        body = self._read_body()
        path = self.path.split("?", 1)[0].rstrip("/")
        key = self._bearer_key()
        if not self._authorized(key) or not self.server.admit(self, key):
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

    def _bearer_key(self) -> str | None:
        header = self.headers.get("Authorization") or ""
        return header[7:].strip() if header.lower().startswith("bearer ") else None

    def _authorized(self, key: str | None) -> bool:
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

    def send_json(self, status: int, payload: dict[str, Any]) -> None:
        """Answer with ``payload`` as JSON (for the test server's injected errors too)."""
        self._send_json(status, payload)

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
        completed = self.complete(request, model, messages)
        if completed is None:
            return
        result, deltas = completed
        ident = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        created = int(time.time())
        if request.get("stream"):
            options = request.get("stream_options")
            usage_chunk = isinstance(options, dict) and bool(options.get("include_usage"))
            self.stream_class(self, ident, created, model, usage_chunk).run(result, deltas)
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

    def complete(
        self, request: dict[str, Any], model: str, messages: list[Any]
    ) -> tuple[ChatResult, list[str]] | None:
        """The offline model's reply to a chat request and the text deltas it streamed, or
        None when the request was answered already (an error)."""
        tools = request.get("tools") if isinstance(request.get("tools"), list) else None
        response_format = request.get("response_format")
        json_mode = isinstance(response_format, dict) and response_format.get("type") in (
            "json_object",
            "json_schema",
        )
        deltas: list[str] = []
        try:
            result = self.server.model.chat(
                messages, tools=tools, json_mode=json_mode, on_text=deltas.append
            )
        except Exception as exc:  # the client should get an answer, not a dropped socket
            message = f"The offline model failed: {type(exc).__name__}: {exc}"
            self._send_json(500, _error(message, "server_error", None))
            return None
        return result, deltas

    @property
    def stream_class(self) -> type[SSEStream]:
        return SSEStream


class SSEStream:
    """Server-sent events in OpenAI's chunk format, written as HTTP/1.1 chunked transfer."""

    def __init__(
        self, handler: OfflineHandler, ident: str, created: int, model: str, usage_chunk: bool
    ) -> None:
        self.handler = handler
        self.ident = ident
        self.created = created
        self.model = model
        self.usage_chunk = usage_chunk

    def run(self, result: ChatResult, deltas: list[str]) -> None:
        """Send the text deltas the model produced, then its tool calls, finish and usage."""
        self.start()
        self.text(deltas)
        self.finish(result)

    def start(self) -> None:
        """The response head: HTTP 200, an event stream in chunked transfer."""
        handler = self.handler
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream; charset=utf-8")
        handler.send_header("Cache-Control", "no-cache")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()

    def text(self, deltas: list[str]) -> None:
        """The assistant role chunk, then one chunk per text delta."""
        self._choice({"role": "assistant", "content": ""})
        for text in deltas:
            self._choice({"content": text})

    def end(self, *, done: bool = True) -> None:
        """``data: [DONE]`` (unless ``done`` is False) and the terminating empty chunk."""
        if done:
            self._write(b"data: [DONE]\n\n")
        self._write(b"")

    def finish(self, result: ChatResult) -> None:
        """The tool calls, the ``finish_reason``, the usage chunk when asked, and the end."""
        for index, call in enumerate(result.tool_calls):
            head = {
                "index": index,
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }
            self._choice({"tool_calls": [head]})
            for piece in ARG_PIECE.findall(call.arguments):
                self._choice({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        self._choice({}, finish_reason=result.finish_reason)
        if self.usage_chunk:
            self._event(self._chunk([], usage=_usage(result)))
        self.end()

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
) -> ServerHandle:
    """Serve the offline model in a background thread; ``port=0`` picks a free port."""
    return serve(OfflineServer((host, port), api_key, models))


def serve(httpd: OfflineServer, handle: type[ServerHandle] = ServerHandle) -> ServerHandle:
    """Run ``httpd`` in a background daemon thread and return its handle."""
    thread = threading.Thread(
        target=httpd.serve_forever,
        kwargs={"poll_interval": 0.05},  # so stop() returns promptly
        name="deerflow-nb-server",
        daemon=True,
    )
    thread.start()
    return handle(httpd, thread)


def serve_main(argv: list[str] | None = None) -> int:
    """``deerflow-nb serve-offline``: serve until interrupted, printing the base URL."""
    parser = argparse.ArgumentParser(
        prog="deerflow-nb serve-offline",
        description="Serve the offline model on an OpenAI-compatible loopback endpoint.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default: loopback)")
    parser.add_argument("--port", type=port_number, default=0, help="port (default: any free port)")
    parser.add_argument("--api-key", default=None, help="require this bearer key")
    args = parser.parse_args(argv)
    try:
        handle = start_server(host=args.host, port=args.port, api_key=args.api_key)
    except OSError as exc:  # a busy port, an address not on this machine
        print(f"{parser.prog}: {bind_failure(exc, args.host, args.port)}", file=sys.stderr)
        return 2
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
