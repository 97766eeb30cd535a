"""The one small chat interface every model speaks.

Messages go in as OpenAI-shaped dicts (``role``, ``content``, ``tool_calls``,
``tool_call_id``); text streams out through a callback; the call returns the whole
reply with its tool calls and token usage. JSON mode asks for a single JSON object
(memory extraction uses it).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..scrub import redact
from ..tokens import count_message_tokens, count_tokens

OnText = Callable[[str], None]


class ModelError(RuntimeError):
    """A model call failed; the message is one line that names the fix, redacted
    (``scrub.redact``) whatever built it, so no key reaches a cell or the journal."""

    def __init__(self, message: object = "", *args: object) -> None:
        super().__init__(redact(str(message)), *args)


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
    ) -> ChatResult:
        """One model call. ``tools`` are OpenAI function specs; ``on_text`` gets text deltas."""

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Embeddings for ``texts``; models without an embeddings endpoint raise ModelError."""
        raise ModelError(f"model '{self.name}' has no embeddings; set memory.embeddings")
