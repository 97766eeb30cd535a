"""The loopback server with the faults tests need; the shipped one serves the model only.

``start_server`` here takes what ``deerflow_nb.offline.server.start_server`` does, plus a
``context_window`` (chat requests over it fail as OpenAI's do: 400,
``context_length_exceeded``; with ``overflow="empty"`` a streamed one gets what llama.cpp's
server sends instead, HTTP 200 and a stream that ends with no chunk). Its handle adds:

- ``fail_next(n, status)``: the next ``n`` API requests answer ``status``, so retry
  behaviour can be tested;
- ``hold_next()``: the next request waits until the returned hold is released, so a test
  can act while a client is mid-request;
- ``drop_next()``: the next streamed reply is cut after its first text chunk, as a lost
  connection does;
- ``end_next(text=False)``: the next streamed reply ends with HTTP 200 and no chunk at all
  (as llama.cpp's server does when the prompt exceeds its window), or, with ``text=True``,
  after its text but before any ``finish_reason``;
- ``reply_next(text)``: the next chat reply is ``text``, whatever the offline model says;
- ``refuse(name)``: chat requests carrying the parameter ``name`` (``max_tokens``, or
  ``json_schema`` for that ``response_format`` type) answer 400 naming it, as OpenAI's
  newer models refuse ``max_tokens``;
- ``slow_next(seconds)``: the next streamed reply waits ``seconds`` between its chunks,
  so a test can start something while it runs;
- ``seen_keys``: the bearer key of every request (``None`` when absent); ``chat_requests``:
  the body of every chat request; ``seen_messages``: the messages of every chat request,
  in order.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from deerflow_nb.llm.base import ChatResult
from deerflow_nb.offline.server import (
    ARG_PIECE,
    OfflineHandler,
    OfflineServer,
    SSEStream,
    _error,
    serve,
)
from deerflow_nb.offline.server import ServerHandle as _ShippedHandle
from deerflow_nb.tokens import count_message_tokens

HOLD_SECONDS = 30.0  # a held request goes on by itself, so a failed test cannot hang


@dataclass
class Hold:
    """A request held by ``hold_next``: ``arrived`` is set once it waits, and it goes on
    when ``release`` is set (or after ``HOLD_SECONDS``); ``passed`` is set when it went on."""

    arrived: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    passed: threading.Event = field(default_factory=threading.Event)


class FaultyServer(OfflineServer):
    def __init__(
        self,
        address: tuple[str, int],
        api_key: str | None,
        models: Iterable[str],
        context_window: int | None = None,
        overflow: str = "error",
    ) -> None:
        super().__init__(address, api_key, models, FaultyHandler)
        self.context_window = context_window
        self.overflow = overflow
        self.failures: list[int] = []
        self.holds: list[Hold] = []
        self.drops = 0  # streamed replies still to cut short
        self.early_ends: list[bool] = []  # streamed replies to end early
        self.replies: list[str] = []  # chat replies to give instead
        self.seen_keys: list[str | None] = []
        self.seen_messages: list[list[Any]] = []
        self.refused: set[str] = set()
        self.chat_requests: list[dict[str, Any]] = []
        self.pauses: list[float] = []  # streamed replies to slow down

    def admit(self, handler: OfflineHandler, key: str | None) -> bool:
        super().admit(handler, key)
        with self.lock:
            status = self.failures.pop(0) if self.failures else None
            hold = self.holds.pop(0) if self.holds else None
        if hold is not None:
            hold.arrived.set()
            hold.release.wait(HOLD_SECONDS)
            hold.passed.set()
        if status is not None:
            handler.send_json(status, _error(f"injected failure {status}", "server_error", None))
            return False
        return True

    def pop(self, name: str) -> Any:
        with self.lock:
            queue = getattr(self, name)
            return queue.pop(0) if queue else None


class FaultyHandler(OfflineHandler):
    server: FaultyServer

    def _authorized(self, key: str | None) -> bool:
        with self.server.lock:
            self.server.seen_keys.append(key)
        return super()._authorized(key)

    def complete(
        self, request: dict[str, Any], model: str, messages: list[Any]
    ) -> tuple[ChatResult, list[str]] | None:
        with self.server.lock:
            self.server.seen_messages.append(messages)
            self.server.chat_requests.append(request)
        shape = request.get("response_format")
        sent = set(request) | ({shape.get("type")} if isinstance(shape, dict) else set())
        for name in sorted(self.server.refused & sent):
            message = f"Unsupported parameter: '{name}' is not supported with this model."
            self.send_json(400, _error(message, "invalid_request_error", None, name))
            return None
        window = self.server.context_window
        if window is not None and (used := count_message_tokens(messages)) > window:
            if self.server.overflow == "empty" and request.get("stream"):
                # llama.cpp's server: HTTP 200 and a stream that ends with no chunk
                stream = SSEStream(self, "", 0, model, False)
                stream.start()
                stream.end(done=False)
                return None
            message = (
                f"This model's maximum context length is {window} tokens. However, your "
                f"messages resulted in {used} tokens. Please reduce the length of the messages."
            )
            error = _error(message, "invalid_request_error", "context_length_exceeded", "messages")
            self.send_json(400, error)
            return None
        completed = super().complete(request, model, messages)
        told = self.server.pop("replies") if completed is not None else None
        if completed is None or told is None:
            return completed
        result = completed[0]
        return ChatResult(told, [], result.usage, result.model, "stop"), ARG_PIECE.findall(told)

    @property
    def stream_class(self) -> type[SSEStream]:
        return FaultyStream


class FaultyStream(SSEStream):
    handler: FaultyHandler

    def run(self, result: ChatResult, deltas: list[str]) -> None:
        server = self.handler.server
        early = server.pop("early_ends")
        self.start()
        if early is False:  # no chunk at all: the stream just ends
            self.end(done=False)
            return
        self._choice({"role": "assistant", "content": ""})
        pause = server.pop("pauses") or 0.0
        for text in deltas:
            time.sleep(pause)
            self._choice({"content": text})
            if self._dropping():  # cut after the first text chunk, as a lost connection
                self.handler.close_connection = True
                self.handler.connection.shutdown(socket.SHUT_RDWR)
                return
        if early is True:  # the text, then the end, with no finish_reason
            self.end()
            return
        self.finish(result)

    def _dropping(self) -> bool:
        server = self.handler.server
        with server.lock:
            if server.drops:
                server.drops -= 1
                return True
        return False


class ServerHandle(_ShippedHandle):
    """The shipped handle, with the fault hooks (see the module's docstring)."""

    _httpd: FaultyServer

    @property
    def seen_keys(self) -> list[str | None]:
        return list(self._httpd.seen_keys)

    @property
    def seen_messages(self) -> list[list[Any]]:
        return list(self._httpd.seen_messages)

    def fail_next(self, count: int, status: int = 503) -> None:
        """Answer the next ``count`` API requests with ``status`` and an OpenAI error body."""
        with self._httpd.lock:
            self._httpd.failures = [status] * count

    def drop_next(self) -> None:
        """Close the connection of the next streamed reply after its first text chunk."""
        with self._httpd.lock:
            self._httpd.drops += 1

    def reply_next(self, text: str) -> None:
        """Make the next chat reply ``text`` (streamed in pieces when streaming)."""
        with self._httpd.lock:
            self._httpd.replies.append(text)

    def end_next(self, *, text: bool = False) -> None:
        """End the next streamed reply without a ``finish_reason``: with no chunk at all, or
        (``text``) after its text chunks."""
        with self._httpd.lock:
            self._httpd.early_ends.append(text)

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        with self._httpd.lock:
            return list(self._httpd.chat_requests)

    def refuse(self, name: str) -> None:
        """Answer 400 naming ``name`` to every chat request that carries it."""
        with self._httpd.lock:
            self._httpd.refused.add(name)

    def slow_next(self, seconds: float) -> None:
        """Wait ``seconds`` before each chunk of the next streamed reply."""
        with self._httpd.lock:
            self._httpd.pauses.append(seconds)

    def hold_next(self) -> Hold:
        """Keep the next API request waiting until the returned hold is released."""
        hold = Hold()
        with self._httpd.lock:
            self._httpd.holds.append(hold)
        return hold


def start_server(
    host: str = "127.0.0.1",
    port: int = 0,
    api_key: str | None = None,
    models: Iterable[str] = ("offline",),
    context_window: int | None = None,
    overflow: str = "error",
) -> ServerHandle:
    """The loopback server with fault hooks, in a background thread."""
    httpd = FaultyServer((host, port), api_key, models, context_window, overflow)
    handle = serve(httpd, ServerHandle)
    assert isinstance(handle, ServerHandle)
    return handle
