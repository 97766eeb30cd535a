"""Probing one model with capped calls, through the ``openai`` SDK or the embedded model.

The SDK goes straight to an OpenAI-compatible server (so a probe can cap its reply and
see chunks and ``finish_reason``); the embedded model is called through
``ChatModel.chat``. Every failure is a one-line ``ModelError``; a server that
cannot be reached at all is ``Unreachable``.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

from ..llm.base import ChatModel, ModelError, not_the_api, reading_reply
from ..scrub import redact
from ..untrusted import clean_text

REACH_TIMEOUT = 10.0  # seconds for /models and /props: a server that is up answers at once


class Unreachable(ModelError):
    """The model's server cannot be reached; one line naming the fix."""


@dataclass
class Reply:
    """What a probe call returned: text, tool calls, finish reason, streamed chunks."""

    content: str = ""
    tool_calls: list[tuple[str, str]] = field(default_factory=list)  # (name, arguments)
    finish_reason: str | None = None
    chunks: int = 0


class Probe:
    """One model's probe calls, capped; every failure is a one-line ``ModelError``."""

    def __init__(self, model: ChatModel) -> None:
        self.model = model
        from ..llm.openai_client import OpenAIChatModel

        self.remote = model if isinstance(model, OpenAIChatModel) else None

    @property
    def where(self) -> str:
        return self.remote.base_url if self.remote is not None else "embedded"

    def _client(self, timeout: float | None = None) -> Any:
        assert self.remote is not None
        config = self.remote.config
        return self.remote.client.with_options(
            timeout=min(timeout or config.timeout_seconds, config.timeout_seconds),
            max_retries=min(config.max_retries, 1),
        )

    def _translate(self, exc: Exception) -> ModelError:
        import openai

        assert self.remote is not None
        error = self.remote._translate(exc) if isinstance(exc, openai.OpenAIError) else exc
        if isinstance(exc, openai.APIConnectionError) and not isinstance(
            exc, openai.APITimeoutError
        ):
            return Unreachable(str(error))
        return error if isinstance(error, ModelError) else ModelError(one_line(error))

    def models(self) -> list[dict[str, Any]] | None:
        """``/models``'s entries (None when the server has no such route, [] when its answer
        lists none); Unreachable when nothing answers."""
        import openai

        if self.remote is None:
            return [{"id": self.model.name}]
        try:
            with reading_reply(self.where):
                page = self._client(REACH_TIMEOUT).with_options(max_retries=0).models.list()
        except openai.APIStatusError:
            return None  # it answered: the server is there, only the route is not
        except openai.APIConnectionError as exc:  # nothing listens, or it never answers
            url = self.remote.base_url
            said = (
                f"{url} did not answer within {REACH_TIMEOUT:g} s"
                if isinstance(exc, openai.APITimeoutError)
                else f"cannot reach {url}"
            )
            raise Unreachable(
                f"{said}: start the server there, or fix OPENAI_BASE_URL "
                "(model.base_url in config.yaml)"
            ) from exc
        except openai.OpenAIError as exc:
            raise self._translate(exc) from exc
        entries = page.data if isinstance(page.data, list) else []  # {"weird": true}: none
        dumped = [m.model_dump() if hasattr(m, "model_dump") else m for m in entries]
        return [m for m in dumped if isinstance(m, dict)]

    def props(self) -> dict[str, Any] | None:
        """llama.cpp's ``/props`` (beside ``/v1``), or None."""
        import httpx

        if self.remote is None:
            return None
        root = self.remote.public_base_url.removesuffix("/v1")
        try:
            response = httpx.get(
                f"{root}/props", headers=self.remote.headers, timeout=REACH_TIMEOUT
            )
            data = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def show(self) -> dict[str, Any] | None:
        """Ollama's ``/api/show`` for the model (beside ``/v1``), or None."""
        import httpx

        if self.remote is None:
            return None
        root = self.remote.public_base_url.removesuffix("/v1")
        try:
            response = httpx.post(
                f"{root}/api/show",
                json={"model": self.model.name},
                headers=self.remote.headers,
                timeout=REACH_TIMEOUT,
            )
            data = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        max_tokens: int,
        tools: list[dict[str, Any]] | None = None,
        json_mode: bool = False,
        stream: bool = False,
    ) -> Reply:
        if self.remote is None:
            pieces: list[str] = []
            result = self.model.chat(
                messages,
                tools=tools,
                json_mode=json_mode,
                on_text=pieces.append if stream else None,
            )
            return Reply(
                result.content,
                [(c.name, c.arguments) for c in result.tool_calls],
                result.finish_reason,
                len(pieces),
            )
        kwargs: dict[str, Any] = {
            "model": self.model.name,
            "messages": messages,
            "max_tokens": max_tokens,
        }
        if tools:
            kwargs["tools"] = tools
        if json_mode:
            kwargs["response_format"] = {"type": "json_object"}
        import openai

        try:
            with reading_reply(self.where):
                if stream:
                    return self._stream(kwargs)
                response = self._client().chat.completions.create(**kwargs)
        except openai.OpenAIError as exc:
            raise self._translate(exc) from exc
        if isinstance(response, str):  # a body that is no JSON: the SDK hands its text back
            raise not_the_api(self.where, "a page, not JSON")
        if not response.choices:
            return Reply()
        choice = response.choices[0]
        calls = [
            (c.function.name, c.function.arguments)
            for c in choice.message.tool_calls or []
            if getattr(c, "function", None) is not None
        ]
        return Reply(choice.message.content or "", calls, choice.finish_reason, 1)

    def _stream(self, kwargs: dict[str, Any]) -> Reply:
        reply = Reply()
        parts: list[str] = []
        with self._client().chat.completions.create(**kwargs, stream=True) as stream:
            for chunk in stream:
                for choice in chunk.choices:
                    if choice.delta.content:
                        reply.chunks += 1
                        parts.append(choice.delta.content)
                    if choice.finish_reason:
                        reply.finish_reason = choice.finish_reason
        reply.content = "".join(parts)
        return reply


def one_line(text: object, limit: int = 160) -> str:
    """``text`` redacted, then on one clean line of at most ``limit`` characters (for a
    table cell): redacted before the cut, so no cut-off start of a key is left, and HTML
    entities a model copied from a prompt (``&lt;``) read as their characters, decoded
    before the cut too, which would leave ``&g…``."""
    line = " ".join(clean_text(redact(html.unescape(str(text)))).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
