"""The embedded offline model: deterministic, key-free, and honest about what it is.

It speaks every protocol the real models are asked to speak (see docs/internals.md):
JSON extraction diffs, extractive summaries, notebook tool calls including ``task``
fan-out, answers built from tool results, sub-agent replies, and plain answers that
quote the remembered facts sharing words with the question. That makes every moving
part of the agent visible in a demo and testable without a network.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..llm.base import ChatModel, ChatResult, OnText, ToolCall, counted_usage
from .cell_reports import error_answer, find_error, output_answer
from .extractor import forget_requests
from .replies import (
    PREFIX,
    SUMMARY_TAG,
    answer_from_tools,
    plain_answer,
    subagent_answer,
    summary,
)
from .routing import choose_tools, error_calls, known_variables
from .words import hashed_embedding, message_text

MAX_INPUT_TOKENS = 16_384
SUBAGENT_MARKER = "You are a sub-agent"
_PIECE_RE = re.compile(r"\S+\s*|\s+")


def _tool_names(tools: list[dict[str, Any]] | None) -> set[str]:
    names = set()
    for tool in tools or []:
        if not isinstance(tool, dict):
            continue
        fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
        if isinstance(fn.get("name"), str):
            names.add(fn["name"])
    return names


class OfflineModel(ChatModel):
    """A deterministic stand-in for a chat model; every reply says it is the offline model."""

    name = "offline"
    max_input_tokens = MAX_INPUT_TOKENS

    def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        json_mode: bool = False,
        on_text: OnText | None = None,
    ) -> ChatResult:
        """Dispatch on the protocol the messages follow; stream the text word by word."""
        messages = [m for m in messages or [] if isinstance(m, dict)]
        content, calls = self._respond(messages, tools, json_mode)
        if on_text is not None:
            for piece in _PIECE_RE.findall(content):
                on_text(piece)
        return ChatResult(
            content=content,
            tool_calls=calls,
            usage=counted_usage(messages, content, calls),
            model=self.name,
            finish_reason="tool_calls" if calls else "stop",
        )

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Hashed bag-of-words vectors, the same ones the loopback server returns."""
        return [hashed_embedding(t if isinstance(t, str) else "") for t in texts]

    def _respond(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, json_mode: bool
    ) -> tuple[str, list[ToolCall]]:
        if json_mode:
            from .extractor import extract_diff

            return json.dumps(extract_diff(messages)), []
        last = messages[-1] if messages else {}
        role = last.get("role")
        text = message_text(last)
        if role == "user" and not tools and text.lstrip().startswith(SUMMARY_TAG):
            return summary(text), []
        names = _tool_names(tools)
        system = "\n".join(message_text(m) for m in messages if m.get("role") == "system")
        asked = _last_user_text(messages)
        # A failed cell (--error, {Err[n]}) or a cell's output ({Out[n]}) is answered from
        # what it says, never from the other words in it (cell_reports).
        error = find_error(asked) if SUBAGENT_MARKER not in system else None
        if error is not None:
            if names and role == "user":
                known = known_variables(system)
                calls = error_calls(asked, error.names, names, len(messages), known)
                if calls:
                    return "", calls
            if role in ("user", "tool"):
                listed = list((known_variables(system) or ({}, True))[0])
                return error_answer(error, _described(messages), PREFIX, listed), []
        if role == "user" and SUBAGENT_MARKER not in system:
            output = output_answer(text, PREFIX)
            if output is not None:
                return output, []
        if names and role == "user":
            calls = choose_tools(text, names, len(messages), known_variables(system))
            if calls:
                return "", calls
        if role == "tool":
            return answer_from_tools(messages), []
        if SUBAGENT_MARKER in system:
            return subagent_answer(asked), []
        if role == "user" and (output := output_answer(text, PREFIX, literals=True)):
            return output, []
        said = [message_text(m) for m in messages if m.get("role") == "user"]
        return plain_answer(_last_user_text(messages), system, forget_requests(said)), []


def _described(messages: list[dict[str, Any]]) -> dict[str, str]:
    """What the trailing ``describe_variable`` results said, by variable name."""
    asked: dict[str, str] = {}
    for message in messages:
        for call in message.get("tool_calls") or []:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and function.get("name") == "describe_variable":
                try:
                    name = json.loads(function.get("arguments") or "{}").get("name")
                except (ValueError, AttributeError):
                    name = None
                if isinstance(name, str):
                    asked[str(call.get("id"))] = name
    described: dict[str, str] = {}
    for message in reversed(messages):
        if message.get("role") != "tool":
            break
        name = asked.get(str(message.get("tool_call_id")))
        if name is not None:
            described[name] = message_text(message)
    return dict(reversed(described.items()))


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return message_text(message)
    return ""
