"""Any OpenAI-compatible chat endpoint through the official ``openai`` SDK.

The SDK is imported on first use only, so ``import deerflow_nb`` stays light. Retries
with exponential backoff on 429, 5xx, timeouts and dropped connections are the SDK's
own (``model.max_retries``); every failure that survives them becomes a one-line
``ModelError`` that says what to change.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import JOURNAL_FILENAME, check_base_url
from ..scrub import (
    basic_auth_header,
    encodable,
    encodable_deep,
    public_url,
    redact,
    redact_logs,
    remember_secret,
)
from .base import (
    ChatModel,
    ChatResult,
    ModelError,
    OnText,
    ReplyCutShort,
    ToolCall,
    Usage,
    counted_usage,
    not_the_api,
    reading_reply,
)
from .server_sharing import CAP_PARAM, CAP_PARAMS, SCHEMA_OUTPUT, Background, server_for

if TYPE_CHECKING:
    import openai

    from ..config import ModelConfig

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Local servers (Ollama, vLLM, LM Studio, the loopback server) ignore the key, but the
# SDK insists on one; this is sent instead of ever borrowing the ambient OPENAI_API_KEY.
PLACEHOLDER_KEY = "not-needed"
_MODEL_LIST_TIMEOUT = 3.0
EMBED_BATCH = 1000
# A stream that ends empty after a prompt this small (tokens) overflowed no server's window:
# the base URL may be no API at all (a web page answers 200 too).
SMALL_PROMPT = 512
SMALL_PROMPT_HINT = (
    "; with a prompt this small, check too that the base URL is an OpenAI-compatible API "
    "(it usually ends in /v1)"
)
# How a JSON schema is sent, best first: OpenAI's (also vLLM's, llama.cpp's C++ server,
# Ollama's), the ``schema`` key of JSON mode (llama-cpp-python's server, Anyscale), and
# plain JSON mode; a server that refuses one is sent the next from then on.
SCHEMA_FORMATS = ("json_schema", "json_object_schema", "json_object")
PLAIN_JSON = {"type": "json_object"}
# Words of a 400 that refuses a parameter (not one that finds its value too large).
_REFUSED = ("unsupported", "not supported", "unrecognized", "unknown", "not permitted",
            "extra", "use 'max", "use max")  # fmt: skip


@dataclass
class Call:
    """One chat call before the server's dialect is applied (``request``)."""

    base: dict[str, Any]
    json_mode: bool
    json_schema: dict[str, Any] | None
    max_output_tokens: int | None

    def request(self, cap_param: str, schema_format: str) -> dict[str, Any]:
        request = dict(self.base)
        if self.max_output_tokens:
            request[cap_param] = self.max_output_tokens
        if self.json_mode:
            request["response_format"] = response_format(self.json_schema, schema_format)
        return request


def response_format(schema: dict[str, Any] | None, schema_format: str) -> dict[str, Any]:
    """JSON mode's ``response_format``, carrying ``schema`` the way ``schema_format`` says."""
    if schema is None or schema_format == "json_object":
        return dict(PLAIN_JSON)
    if schema_format == "json_object_schema":
        return {"type": "json_object", "schema": schema}
    return {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema}}


def _is_context_overflow(exc: Any) -> bool:
    """A 400 saying the prompt exceeds the model's context (OpenAI's code, or its words)."""
    text = str(getattr(exc, "message", "") or exc).lower()
    return getattr(exc, "code", None) == "context_length_exceeded" or "context length" in text


def _one_line(text: object, limit: int = 200) -> str:
    """``text`` redacted, then on one line of at most ``limit`` characters: redacting after
    the cut would leave the start of a key the cut made unrecognisable."""
    line = " ".join(redact(str(text)).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


class OpenAIChatModel(ChatModel):
    """A chat model served over the OpenAI chat-completions API.

    ``embedding_model`` names the model ``embed`` asks for; it defaults to ``name``,
    which suits local servers that embed with their chat model. ``home`` is where what
    the server accepts is remembered (none: learned again by each process).
    """

    def __init__(
        self,
        name: str,
        config: ModelConfig,
        *,
        embedding_model: str | None = None,
        home: Path | None = None,
    ) -> None:
        self.name = name
        self.config = config
        self.max_input_tokens = config.max_input_tokens
        self.base_url = (config.base_url or DEFAULT_BASE_URL).rstrip("/")
        self.embedding_model = embedding_model or name
        if config.api_key:
            self._api_key = config.api_key
        elif config.base_url:
            self._api_key = PLACEHOLDER_KEY
        else:
            raise ModelError(
                f"model '{name}' needs an API key: set OPENAI_API_KEY or model.api_key in "
                "config.yaml (or OPENAI_BASE_URL for a local server, or use -m offline)"
            )
        remember_secret(self.base_url)  # the password of a user:pass@ URL, for redact
        if config.base_url:  # settings made in code skip load_settings' check
            check_base_url(config.base_url)
        # The address the HTTP client is given: no user info, whose credentials go in
        # ``headers`` (as httpx would send them), so no library logs or stores them.
        self.public_base_url = public_url(self.base_url)
        self.headers = basic_auth_header(self.base_url)
        self._client: openai.OpenAI | None = None
        self._lock = threading.Lock()
        # What the server accepts, and who uses it now; remembered in ``home``'s journal
        # under the address without user info.
        journal = home / JOURNAL_FILENAME if home else None
        self.server = server_for(self.public_base_url, journal)

    @property
    def client(self) -> openai.OpenAI:
        """The SDK client, built once; base URL and key are always explicit, never ambient,
        and the HTTP stack's log records pass ``redact``."""
        with self._lock:
            if self._client is None:
                import openai

                redact_logs()
                self._client = openai.OpenAI(
                    api_key=self._api_key,
                    base_url=self.public_base_url,
                    default_headers=self.headers or None,
                    timeout=self.config.timeout_seconds,
                    max_retries=self.config.max_retries,
                )
            return self._client

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
        """One completion; streamed (with usage) whenever ``on_text`` is given, and always
        in the background, so a fold can stop between chunks when the user's turn starts.

        Text UTF-8 cannot carry (a lone surrogate) becomes U+FFFD both ways: the SDK would
        refuse to send it, and a reply holding one must not cost the turn."""
        messages = encodable_deep(messages)
        kwargs: dict[str, Any] = {"model": self.name, "messages": messages}
        if tools:
            kwargs["tools"] = tools
        call = Call(kwargs, json_mode, json_schema, max_output_tokens)
        if background:
            with self.server.background() as turn:
                result = self._call(call, on_text or (lambda _text: None), turn)
        else:
            with self.server.foreground():
                result = self._call(call, on_text, None)
        if not result.usage.input_tokens and not result.usage.output_tokens:
            # Some local servers report no usage; count it ourselves, exactly.
            result.usage = counted_usage(messages, result.content, result.tool_calls)
        return result

    def in_use(self) -> AbstractContextManager[None]:
        """The server's foreground lease, held around a whole turn (``server_sharing.Server``)."""
        return self.server.foreground()

    def _call(self, call: Call, on_text: OnText | None, turn: Background | None) -> ChatResult:
        """Send ``call`` as this server takes it: a 400 naming the output-cap parameter or
        the JSON schema format is learned (and remembered in the home), and the request
        sent again the way the server accepts."""
        import openai

        while True:  # each way round learns one more refusal, of a few there can be
            request = call.request(self._cap_param(), self._schema_format())
            try:
                with reading_reply(self.base_url):
                    if on_text is None:
                        return self._complete(request)
                    return self._stream(request, on_text, turn)
            except openai.APIStatusError as exc:
                # llama-cpp-python's server refuses an unknown response_format with a 500
                if exc.status_code in (400, 422, 500) and self._adapt(exc, request):
                    continue
                raise self._translate(exc) from None
            except openai.OpenAIError as exc:
                raise self._translate(exc) from None

    def _cap_param(self) -> str:
        """``max_tokens`` or ``max_completion_tokens``: what the server showed it takes, or
        by default the newer name for OpenAI itself and the older one everywhere else
        (local servers ignore a name they do not know, so it must be the one they read)."""
        learned = self.server.trait(CAP_PARAM)
        if learned in CAP_PARAMS:
            return learned
        return CAP_PARAMS[1] if self.base_url == DEFAULT_BASE_URL else CAP_PARAMS[0]

    def _schema_format(self) -> str:
        learned = self.server.trait(SCHEMA_OUTPUT)
        return learned if learned in SCHEMA_FORMATS else SCHEMA_FORMATS[0]

    def _adapt(self, exc: openai.APIStatusError, request: dict[str, Any]) -> bool:
        """True when ``exc`` refused the cap parameter or the response format just sent,
        and the next way to send it is now learned."""
        said = f"{getattr(exc, 'param', '') or ''} {exc.message}".lower()
        if _is_context_overflow(exc):
            return False
        sent_cap = next((p for p in CAP_PARAMS if p in request), None)
        if sent_cap is not None and sent_cap in said and any(w in said for w in _REFUSED):
            other = CAP_PARAMS[1 - CAP_PARAMS.index(sent_cap)]
            if self.server.trait(f"{CAP_PARAM}_refused") == other:
                return False  # both refused: say so rather than go round
            self.server.learn(f"{CAP_PARAM}_refused", sent_cap)
            self.server.learn(CAP_PARAM, other)
            return True
        shape = request.get("response_format") or {}
        if shape and shape != PLAIN_JSON and ("response_format" in said or "schema" in said):
            following = SCHEMA_FORMATS.index(self._schema_format()) + 1
            if following < len(SCHEMA_FORMATS):
                self.server.learn(SCHEMA_OUTPUT, SCHEMA_FORMATS[following])
                return True
        return False

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Vectors from the endpoint's ``/embeddings``, in input order, ``EMBED_BATCH``
        texts per request (OpenAI takes at most 2048; a fold can ask for thousands)."""
        import openai

        vectors: list[list[float]] = []
        for start in range(0, len(texts), EMBED_BATCH):
            batch = texts[start : start + EMBED_BATCH]
            try:
                response = self.client.embeddings.create(model=self.embedding_model, input=batch)
            except openai.OpenAIError as exc:
                raise self._translate(exc, model=self.embedding_model) from None
            data = sorted(response.data, key=lambda d: d.index)
            vectors.extend(list(item.embedding) for item in data)
        return vectors

    def _complete(self, kwargs: dict[str, Any]) -> ChatResult:
        response = self.client.chat.completions.create(**kwargs)
        if isinstance(response, str):  # a body that is no JSON: the SDK hands its text back
            raise not_the_api(self.base_url, "a page, not JSON")
        if not response.choices:
            raise ModelError(f"{self.base_url} returned no choices for model '{self.name}'")
        choice = response.choices[0]
        calls = [
            ToolCall(
                id=c.id or f"call_{i}",
                name=encodable(c.function.name or ""),
                arguments=encodable(c.function.arguments or ""),
            )
            for i, c in enumerate(choice.message.tool_calls or [])
            if getattr(c, "function", None) is not None
        ]
        usage = response.usage
        return ChatResult(
            content=encodable(choice.message.content or ""),
            tool_calls=calls,
            usage=Usage(usage.prompt_tokens, usage.completion_tokens) if usage else Usage(),
            model=response.model or self.name,
            finish_reason=choice.finish_reason or "stop",
        )

    def _stream(
        self, kwargs: dict[str, Any], on_text: OnText, turn: Background | None = None
    ) -> ChatResult:
        """A streamed reply; a background one (``turn``) stops between chunks, closing its
        request so the server stops generating, once the user's turn wants the server."""
        parts: list[str] = []
        slots: dict[int, dict[str, str]] = {}
        usage = Usage()
        finish: str | None = None
        chunks = 0
        model = self.name
        if turn is not None and turn.should_yield():  # a turn began while this was built
            raise turn.give_way()
        stream = self.client.chat.completions.create(
            **kwargs, stream=True, stream_options={"include_usage": True}
        )
        with stream:
            try:
                for chunk in self._chunks(stream):
                    if turn is not None and turn.should_yield():
                        raise turn.give_way()
                    chunks += 1
                    model = chunk.model or model
                    if chunk.usage:
                        usage = Usage(chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
                    for choice in chunk.choices:
                        delta = choice.delta
                        if delta.content:
                            parts.append(delta.content)
                            on_text(encodable(delta.content))
                        for call in delta.tool_calls or []:
                            slot = slots.setdefault(
                                call.index, {"id": "", "name": "", "arguments": ""}
                            )
                            if call.id:
                                slot["id"] = call.id
                            if call.function is not None:
                                if call.function.name:
                                    slot["name"] = call.function.name
                                if call.function.arguments:
                                    slot["arguments"] += call.function.arguments
                        if choice.finish_reason:
                            finish = choice.finish_reason
            except ReplyCutShort as exc:
                raise ReplyCutShort(str(exc), encodable("".join(parts))) from None
        if finish is None:
            if turn is not None and turn.should_yield(now=True):  # cut off by the user's turn
                raise turn.give_way()
            raise self._unfinished(kwargs["messages"], chunks, encodable("".join(parts)))
        calls = [
            ToolCall(
                id=s["id"] or f"call_{i}",
                name=encodable(s["name"]),
                arguments=encodable(s["arguments"]),
            )
            for i, s in sorted(slots.items())
        ]
        # Joined first: a surrogate pair split over two chunks is one character again.
        return ChatResult(encodable("".join(parts)), calls, usage, model, finish)

    def _unfinished(self, messages: list[dict[str, Any]], chunks: int, partial: str) -> ModelError:
        """A stream that ended without a ``finish_reason``. With no chunk at all, llama.cpp's
        server answering a prompt over its window (HTTP 200, nothing sent): no reply at
        all. After chunks, a reply cut short: llama-cpp-python ends a running stream when
        another request arrives."""
        from ..tokens import count_message_tokens

        if chunks:
            return ReplyCutShort(
                f"{self.base_url} ended the reply early (another request may have "
                f"interrupted it; after {chunks} chunks from model '{self.name}'): run the "
                "turn again (the partial reply is kept in the journal, marked interrupted)",
                partial,
            )
        sent = count_message_tokens(messages)
        return ModelError(
            f"{self.base_url} closed the stream before any reply (no finish_reason) after "
            f"{sent} tokens were sent to model '{self.name}'; most likely the prompt exceeds "
            "the server's context window: set model.max_input_tokens in config.yaml to its "
            "window (summarization keeps threads under it), or start a new thread with --new"
            + ("" if sent > SMALL_PROMPT else SMALL_PROMPT_HINT)
        )

    def _chunks(self, stream: Iterable[Any]) -> Iterator[Any]:
        """The stream's chunks. A connection lost after the first is a dropped reply, not
        a server that cannot be reached (which is what the SDK's error says)."""
        import openai

        received = False
        try:
            for chunk in stream:
                received = True
                yield chunk
        except openai.APIConnectionError:
            if not received:
                raise
            raise ReplyCutShort(
                f"the connection to {self.base_url} dropped in the middle of the reply; "
                "run the turn again (if it keeps dropping, check the server's logs)",
                "",
            ) from None

    def _translate(self, exc: openai.OpenAIError, model: str | None = None) -> ModelError:
        """One line naming the fix for each way an OpenAI-compatible call fails, with any
        key the server echoed (its error quoting the Authorization header, say) redacted
        before it can reach the cell, ``last_error`` or the journal. Raised ``from None``: the
        SDK's error (which may quote the key) is not chained into a traceback."""
        if self._api_key != PLACEHOLDER_KEY:
            remember_secret(self._api_key)
        return ModelError(str(self._describe(exc, model)))  # ModelError redacts its message

    def _describe(self, exc: openai.OpenAIError, model: str | None = None) -> ModelError:
        import openai

        model = model or self.name
        url = self.base_url
        retries = self.config.max_retries
        if isinstance(exc, openai.APITimeoutError):
            # It took the connection, so it is up: busy (a single-slot local server runs
            # one request at a time), not down, which is "cannot reach" below.
            return ModelError(
                f"{url} is up but busy: it did not answer within "
                f"{self.config.timeout_seconds:g}s (after {retries} retries), most likely "
                "still running another request; wait and run it again, or raise "
                "model.timeout_seconds"
            )
        if isinstance(exc, openai.APIConnectionError):
            return ModelError(
                f"cannot reach {url}: start the server there, or fix OPENAI_BASE_URL "
                "(model.base_url in config.yaml)"
            )
        if isinstance(exc, openai.AuthenticationError):
            if self._api_key == PLACEHOLDER_KEY:  # no key was sent to this custom server
                return ModelError(
                    f"{url} needs an API key (401): set DEERFLOW_NB_API_KEY or model.api_key "
                    "(OPENAI_API_KEY goes only to api.openai.com unless "
                    "model.send_openai_key_to_base_url is true)"
                )
            return ModelError(
                f"{url} rejected the API key (401): set a valid OPENAI_API_KEY or model.api_key "
                "in config.yaml"
            )
        if isinstance(exc, openai.PermissionDeniedError):
            return ModelError(
                f"{url} refused access to model '{model}' (403): check the key's permissions "
                "or pick another model with -m NAME"
            )
        if isinstance(exc, openai.NotFoundError):
            if exc.code == "model_not_found" or "model" in str(exc.message).lower():
                return ModelError(
                    f"model '{model}' not found at {url}: pick another with -m NAME or "
                    f"DEERFLOW_NB_MODEL{self._available_models()}"
                )
            return ModelError(f"{url} answered 404: check OPENAI_BASE_URL (it usually ends in /v1)")
        if isinstance(exc, openai.RateLimitError):
            if exc.code == "insufficient_quota":
                return ModelError(f"{url}: the API key has no quota left; check your plan")
            return ModelError(
                f"{url} is rate limiting (429) after {retries} retries; wait a minute or "
                "raise model.max_retries"
            )
        if isinstance(exc, openai.BadRequestError) and _is_context_overflow(exc):
            return ModelError(
                f"the conversation is longer than model '{model}' takes: set "
                "model.max_input_tokens in config.yaml to its window (summarization keeps "
                "threads under it), or start a new thread with --new"
            )
        if isinstance(exc, openai.APIStatusError):
            # The SDK retries only 408, 409, 429 and 5xx; a 400 or 422 was sent once.
            retried = exc.status_code in (408, 409) or exc.status_code >= 500
            after = f" after {retries} retries" if retried and retries else ""
            return ModelError(
                f"{url} answered {exc.status_code} for model '{model}'{after}: "
                f"{_one_line(exc.message)}"
            )
        return ModelError(f"model '{model}' at {url} failed: {_one_line(exc)}")

    def _available_models(self) -> str:
        """' (available: a, b)' from /v1/models when the server answers quickly, else ''."""
        try:
            quick = self.client.with_options(timeout=_MODEL_LIST_TIMEOUT, max_retries=0)
            names = sorted(m.id for m in quick.models.list())
        except Exception:
            return ""
        if not names:
            return ""
        shown = ", ".join(names[:10]) + (", …" if len(names) > 10 else "")
        return f" (available: {shown})"
