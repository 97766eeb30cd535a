"""The one small chat interface every model speaks.

Messages go in as OpenAI-shaped dicts (``role``, ``content``, ``tool_calls``,
``tool_call_id``); text streams out through a callback; the call returns the whole
reply with its tool calls and token usage. JSON mode asks for a single JSON object
(memory extraction uses it). Background calls (folds, consolidation) and summaries go
through ``ChatModel.bounded``: an output cap sized to the job, a JSON schema where the
server takes one, and the user's turn first.
"""

from __future__ import annotations

import contextlib
import inspect
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..home import ConfigError
from ..scrub import redact
from ..tokens import count_message_tokens, count_tokens

OnText = Callable[[str], None]


class ModelError(RuntimeError):
    """A model call failed; the message is one line that names the fix, redacted
    (``scrub.redact``) whatever built it, so no key reaches a cell or the journal."""

    def __init__(self, message: object = "", *args: object) -> None:
        super().__init__(redact(str(message)), *args)


@contextlib.contextmanager
def reading_reply(where: str) -> Iterator[None]:
    """Around a call of the openai SDK to the server at ``where``: an error the SDK raised
    reading a reply that is not the API's (a login page, a malformed stream line; a frame
    of the SDK is in its traceback) becomes the one line of ``not_the_api``. Any other
    error passes as it is."""
    try:
        yield
    except (ValueError, TypeError, AttributeError) as exc:
        marker = f"{os.sep}openai{os.sep}"
        tb = exc.__traceback__
        while tb is not None:
            if marker in tb.tb_frame.f_code.co_filename:
                raise not_the_api(where, f"{type(exc).__name__} reading its reply") from None
            tb = tb.tb_next
        raise


def not_the_api(where: str, what: str) -> ModelError:
    """The server at ``where`` answered, but not as the API does (``what`` came back)."""
    return ModelError(
        f"{where} did not answer as an OpenAI-compatible API ({what}); check the base URL "
        "(it usually ends in /v1) and that the server serves chat completions there"
    )


# Failures whose message already says what went wrong and how to fix it: logged or shown
# as that one line, where a traceback would bury it (an unreachable server's runs ~100).
SAID_IN_ONE_LINE: tuple[type[Exception], ...] = (ModelError, ConfigError)


class ReplyCutShort(ModelError):
    """A streamed reply that stopped after text arrived; ``partial`` is what arrived, so
    the turn can journal it marked interrupted."""

    def __init__(self, message: str, partial: str) -> None:
        super().__init__(message)
        self.partial = partial


# The keywords ``bounded`` adds; a model whose ``chat`` predates one (a scripted test
# model, say) is called without it.
BOUNDED_KEYWORDS = ("max_output_tokens", "json_schema", "background")
# Never cap a reply below this: a window nearly full still gets a short answer.
MIN_OUTPUT_TOKENS = 32


def output_cap(limit: int, window: int, messages: list[dict[str, Any]]) -> int:
    """``limit`` lowered to what ``window`` leaves after the prompt: a cap past the window
    is no cap (llama.cpp's server refuses a prompt and cap over its window)."""
    room = window - count_message_tokens(messages)
    return max(min(limit, room), MIN_OUTPUT_TOKENS)


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, exactly as the model produced it

    def to_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens
        )


@dataclass
class ChatResult:
    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    finish_reason: str = "stop"

    def to_message(self) -> dict[str, Any]:
        """The assistant message to append to the conversation."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [c.to_openai() for c in self.tool_calls]
        return message


def counted_usage(messages: list[dict[str, Any]], content: str, calls: list[ToolCall]) -> Usage:
    """Exact usage counted locally, for models and servers that do not report it."""
    output = count_tokens(content) + sum(
        count_tokens(c.name) + count_tokens(c.arguments) for c in calls
    )
    return Usage(count_message_tokens(messages), output)


class ChatModel(ABC):
    """A chat model: OpenAI-compatible over HTTP, or the embedded offline one."""

    name: str = "model"
    max_input_tokens: int = 128_000

    @abstractmethod
    def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        json_mode: bool = False,
        on_text: OnText | None = None,
        max_output_tokens: int | None = None,
        json_schema: dict[str, Any] | None = None,
        background: bool = False,
    ) -> ChatResult:
        """One model call. ``tools`` are OpenAI function specs; ``on_text`` gets text deltas;
        ``max_output_tokens`` caps the reply; ``json_schema`` (with ``json_mode``) is the
        object's schema, for servers that constrain output to one; ``background`` marks a
        call that gives way to the user's turns (``server_sharing.GiveWay``)."""

    def bounded(
        self,
        messages: list[dict[str, Any]],
        *,
        max_output_tokens: int,
        json_mode: bool = False,
        json_schema: dict[str, Any] | None = None,
        background: bool = True,
    ) -> ChatResult:
        """A capped call (a fold, a consolidation, a summary), with the keywords this
        model's ``chat`` takes: subclasses written before them keep working."""
        wanted = {
            "max_output_tokens": max_output_tokens,
            "json_schema": json_schema,
            "background": background,
        }
        taken = _keywords(type(self))
        kwargs = {k: v for k, v in wanted.items() if k in taken}
        return self.chat(messages, json_mode=json_mode, **kwargs)

    def in_use(self) -> contextlib.AbstractContextManager[None]:
        """Held around a user's turn: background calls to the same server wait for its
        end (``OpenAIChatModel``: the server's foreground lease)."""
        return contextlib.nullcontext()

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Embeddings for ``texts``; models without an embeddings endpoint raise ModelError."""
        raise ModelError(f"model '{self.name}' has no embeddings; set memory.embeddings")


_taken: dict[type, frozenset[str]] = {}


def _keywords(cls: type) -> frozenset[str]:
    """The ``BOUNDED_KEYWORDS`` that ``cls.chat`` accepts (all of them with ``**kwargs``)."""
    if cls not in _taken:
        params = inspect.signature(cls.chat).parameters.values()
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            _taken[cls] = frozenset(BOUNDED_KEYWORDS)
        else:
            _taken[cls] = frozenset(p.name for p in params) & set(BOUNDED_KEYWORDS)
    return _taken[cls]
