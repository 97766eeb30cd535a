"""``deerflow-nb doctor`` and ``%memory doctor``: what the configured models can do.

Each configured model gets a few short, capped probes: is the server there, does it
stream, does it call tools, does JSON mode give JSON, does a fixed probe conversation
give an extraction diff with valid items, and how large is its context window (when the
server says). The result is a :class:`DoctorReport`: a table of ✓/✗ with, for each ✗,
what to change. It reads text in a terminal and renders as escaped Markdown or HTML in
a notebook (model and server text is untrusted).

Probes against an OpenAI-compatible server go through the ``openai`` SDK directly, so
each can cap its reply (``max_tokens``) and see what the agent's client hides (chunks,
``finish_reason``); the offline model is probed through its ``ChatModel.chat``. A server
that cannot be reached at all raises :class:`Unreachable` (the CLI exits 2).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .llm.base import ChatModel, ModelError
from .untrusted import clean_text, escape_html, escape_markdown

if TYPE_CHECKING:
    from .config import Settings

OK, FAIL, UNKNOWN = "✓", "✗", "?"
REACH_TIMEOUT = 10.0  # seconds for /models and /props: a server that is up answers at once
SHORT_REPLY = 48  # max_tokens of the stream, tool-call and JSON probes
EXTRACTION_REPLY = 512  # max_tokens of the extraction probe: a whole diff fits
# The probe conversation: three plain first-person statements a memory model should keep.
PROBE_CONVERSATION: tuple[dict[str, str], ...] = (
    {
        "role": "user",
        "content": "I work as a data scientist at a telecom company. I prefer polars over "
        "pandas for dataframes, and I'm building a churn model with scikit-learn.",
    },
    {
        "role": "assistant",
        "content": "Noted: polars for dataframes, and a scikit-learn churn model at a telecom.",
    },
)
PROBE_STATEMENTS = 3
_STRONGER = "set memory.model_name (DEERFLOW_NB_MEMORY_MODEL) to a stronger model"


class Unreachable(ModelError):
    """The model's server cannot be reached; one line naming the fix."""


@dataclass(frozen=True)
class Check:
    """One row: which model, what was checked, ✓/✗/?, what was seen, and what to change."""

    target: str
    name: str
    status: str
    detail: str
    fix: str = ""

    @property
    def failed(self) -> bool:
        return self.status == FAIL


@dataclass
class DoctorReport:
    """The checks in order; ``str()`` is the terminal table, the ``_repr_*_`` are escaped."""

    title: str
    checks: list[Check] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.failed]

    def summary(self) -> str:
        passed = sum(c.status == OK for c in self.checks)
        unknown = sum(c.status == UNKNOWN for c in self.checks)
        text = f"{passed} of {len(self.checks)} checks passed"
        if unknown:
            text += f", {unknown} unknown"
        return f"{text} ({self.seconds:.1f} s)."

    def __str__(self) -> str:
        rows = [(c.target, c.name, f"{c.status} {clean_text(c.detail)}") for c in self.checks]
        widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(_HEADERS[:2])]
        lines = [clean_text(self.title), ""]
        head = "  ".join(h.ljust(w) for h, w in zip(_HEADERS[:2], widths, strict=True))
        lines.append(f"  {head}  result")
        indent = 2 + sum(widths) + 4
        for check, row in zip(self.checks, rows, strict=True):
            cells = "  ".join(cell.ljust(w) for cell, w in zip(row[:2], widths, strict=True))
            lines.append(f"  {cells}  {row[2]}".rstrip())
            if check.fix:
                lines.append(" " * indent + "→ " + clean_text(check.fix))
        lines += ["", self.summary()]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)

    def _repr_markdown_(self) -> str:
        lines = [f"**{escape_markdown(self.title)}**", "", "| " + " | ".join(_HEADERS) + " |"]
        lines.append("|---|---|---|---|")
        for c in self.checks:
            cells = (c.target, c.name, f"{c.status} {c.detail}", c.fix)
            lines.append("| " + " | ".join(escape_markdown(x) for x in cells) + " |")
        lines += ["", escape_markdown(self.summary())]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{h}</th>" for h in _HEADERS)
        body = "".join(
            "<tr>"
            + "".join(
                f"<td>{escape_html(x)}</td>"
                for x in (c.target, c.name, f"{c.status} {c.detail}", c.fix)
            )
            + "</tr>"
            for c in self.checks
        )
        return (
            f"<p><strong>{escape_html(self.title)}</strong></p>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
            f"<p>{escape_html(self.summary())}</p>"
        )


_HEADERS = ("model", "check", "result", "what to change")


# -- probing one model -----------------------------------------------------------------
@dataclass
class _Reply:
    content: str = ""
    tool_calls: list[tuple[str, str]] = field(default_factory=list)  # (name, arguments)
    finish_reason: str | None = None
    chunks: int = 0


class _Probe:
    """One model's probe calls, capped; every failure is a one-line ``ModelError``."""

    def __init__(self, model: ChatModel) -> None:
        self.model = model
        from .llm.openai_client import OpenAIChatModel

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
        return error if isinstance(error, ModelError) else ModelError(_line(error))

    def models(self) -> list[dict[str, Any]] | None:
        """``/models``'s entries (None when the server has no such route); Unreachable when
        nothing answers."""
        import openai

        if self.remote is None:
            return [{"id": self.model.name}]
        try:
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
        return [m.model_dump() for m in page.data]

    def props(self) -> dict[str, Any] | None:
        """llama.cpp's ``/props`` (beside ``/v1``), or None."""
        import httpx

        if self.remote is None:
            return None
        root = self.remote.base_url.removesuffix("/v1")
        try:
            response = httpx.get(f"{root}/props", timeout=REACH_TIMEOUT)
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
    ) -> _Reply:
        if self.remote is None:
            pieces: list[str] = []
            result = self.model.chat(
                messages,
                tools=tools,
                json_mode=json_mode,
                on_text=pieces.append if stream else None,
            )
            return _Reply(
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
            if stream:
                return self._stream(kwargs)
            response = self._client().chat.completions.create(**kwargs)
        except openai.OpenAIError as exc:
            raise self._translate(exc) from exc
        if not response.choices:
            return _Reply()
        choice = response.choices[0]
        calls = [
            (c.function.name, c.function.arguments)
            for c in choice.message.tool_calls or []
            if getattr(c, "function", None) is not None
        ]
        return _Reply(choice.message.content or "", calls, choice.finish_reason, 1)

    def _stream(self, kwargs: dict[str, Any]) -> _Reply:
        reply = _Reply()
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


def _line(text: object, limit: int = 160) -> str:
    line = " ".join(clean_text(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


# -- the checks ------------------------------------------------------------------------
def _run(probe: _Probe, target: str, name: str, check: Callable[[_Probe, str], Check]) -> Check:
    """Run one check; a model error becomes its ✗ row (the server not answering is raised)."""
    try:
        return check(probe, target)
    except Unreachable:
        raise
    except ModelError as exc:
        return Check(target, name, FAIL, _line(exc), _fix_for(str(exc)))


def _fix_for(error: str) -> str:
    """The fix a translated error already names, after its ':' (else a generic hint)."""
    if ": " in error:
        head, _, fix = error.partition(": ")
        if any(w in fix for w in ("set ", "pick ", "raise ", "check ", "start ", "fix ")):
            return fix
    return "check the server's log for this request"


def _reachable(probe: _Probe, target: str) -> Check:
    models = probe.models()
    if probe.remote is None:
        return Check(target, "reachable", OK, "the embedded offline model")
    if models is None:
        return Check(target, "reachable", OK, f"{probe.where} answers (no /models list)")
    names = [str(m.get("id")) for m in models]
    shown = ", ".join(names[:5]) + (", …" if len(names) > 5 else "")
    if names and probe.model.name not in names:
        return Check(
            target,
            "reachable",
            OK,
            f"{probe.where} answers; serves {shown}, not '{probe.model.name}' by that name",
            f"if calls fail below, set DEERFLOW_NB_MODEL (model.name) to one of: {shown}",
        )
    return Check(target, "reachable", OK, f"{probe.where} answers; serves {shown or 'no list'}")


def _streams(probe: _Probe, target: str) -> Check:
    reply = probe.chat(
        [{"role": "user", "content": "Say hello in five words."}],
        max_tokens=SHORT_REPLY,
        stream=True,
    )
    if not reply.chunks and not reply.finish_reason:
        return Check(
            target,
            "streams",
            FAIL,
            "the server closed the stream with no chunk and no finish_reason",
            "check the server's log (often: the prompt exceeds its context window)",
        )
    if not reply.chunks:
        return Check(
            target,
            "streams",
            FAIL,
            f"no text came back (finish_reason {reply.finish_reason})",
            "check the server's log; try another model",
        )
    said = _line(reply.content, 60)
    return Check(
        target,
        "streams",
        OK,
        f"{reply.chunks} text chunks, finish_reason {reply.finish_reason or 'missing'}: “{said}”",
    )


def _tool_calls(probe: _Probe, target: str) -> Check:
    from .agent.tools import tool_specs

    reply = probe.chat(
        [
            {"role": "system", "content": "You can call tools. Call a tool when it helps."},
            {"role": "user", "content": "List the variables in my notebook."},
        ],
        tools=tool_specs(["list_variables"]),
        max_tokens=SHORT_REPLY,
    )
    names = [name for name, _ in reply.tool_calls]
    if "list_variables" in names:
        arguments = next(a for n, a in reply.tool_calls if n == "list_variables")
        try:
            json.loads(arguments or "{}")
        except ValueError:
            return Check(
                target,
                "tool calls",
                FAIL,
                f"called list_variables with arguments that are not JSON: {_line(arguments, 60)}",
                "pick a model trained for tool calls (function calling)",
            )
        return Check(target, "tool calls", OK, "called list_variables")
    seen = f"called {', '.join(names)}" if names else "answered in text, no tool call"
    return Check(
        target,
        "tool calls",
        FAIL,
        f"asked to list notebook variables, it {seen}",
        "pick a model trained for tool calls, or serve it with a tool-call chat template "
        "(llama.cpp: --jinja; llama-cpp-python: --chat_format chatml-function-calling); "
        "without tools the agent cannot read your notebook or start sub-agents",
    )


def _json_mode(probe: _Probe, target: str) -> Check:
    reply = probe.chat(
        [
            {"role": "system", "content": "Reply with one JSON object and nothing else."},
            {"role": "user", "content": 'Give {"ok": true} as JSON.'},
        ],
        json_mode=True,
        max_tokens=SHORT_REPLY,
    )
    try:
        value = json.loads(reply.content)
    except ValueError:
        if reply.finish_reason == "length" and reply.content.lstrip().startswith("{"):
            detail = f"the object did not end within {SHORT_REPLY} tokens for a one-key answer"
        else:
            detail = "the reply is not JSON"
        return Check(
            target,
            "JSON mode",
            FAIL,
            f"{detail}: {_line(reply.content, 60)}",
            "use a server that honours response_format json_object, or " + _STRONGER,
        )
    if not isinstance(value, dict):
        kind = type(value).__name__
        return Check(target, "JSON mode", FAIL, f"JSON, but a {kind}, not an object", _STRONGER)
    return Check(target, "JSON mode", OK, "a JSON object")


def probe_extraction(text: str, handles: dict[str, str]) -> tuple[int, int, list[str]]:
    """``(valid, total, reasons)`` for an extraction reply: how many of its items (sections
    to update, new facts, removals) the fold would keep, how many it holds, and why the
    rest are left out. The one place the doctor calls extraction's parser."""
    from .memory.extraction import ExtractionError, parse

    try:
        diff = parse(text, handles)
    except ExtractionError as exc:
        return 0, _count_items(_loose_json(text)), [_line(exc, 100)]
    valid = _count_items(diff.to_dict())
    reasons = [f"{out.item}: {out.reason}" for out in diff.left_out]
    return valid, valid + len(diff.left_out), reasons


def _loose_json(text: str) -> Any:
    """The reply's outermost JSON object when there is one, for counting items only."""
    body = (text or "").strip()
    start, end = body.find("{"), body.rfind("}")
    if start < 0 or end <= start:
        return None
    try:
        return json.loads(body[start : end + 1])
    except ValueError:
        return None


def _count_items(diff: Any) -> int:
    if not isinstance(diff, dict):
        return 0
    count = 0
    for group in ("user", "history"):
        sections = diff.get(group)
        if isinstance(sections, dict):
            count += sum(
                1 for s in sections.values() if not isinstance(s, dict) or s.get("shouldUpdate")
            )
        elif sections is not None:
            count += 1
    for key in ("newFacts", "factsToRemove"):
        items = diff.get(key)
        count += len(items) if isinstance(items, list) else int(items is not None)
    return count


def _extraction(probe: _Probe, target: str) -> Check:
    from .memory.extraction import build_messages
    from .memory.store import empty_memory

    messages, handles = build_messages(empty_memory(), [dict(m) for m in PROBE_CONVERSATION])
    reply = probe.chat(messages, json_mode=True, max_tokens=EXTRACTION_REPLY)
    valid, total, reasons = probe_extraction(reply.content, handles)
    cut = " (cut off at the probe's token cap)" if reply.finish_reason == "length" else ""
    detail = f"{valid} of {total} items valid{cut}"
    if reasons:
        detail += ": " + "; ".join(reasons)
    if valid:
        return Check(target, "extraction", OK, detail)
    if not reasons:
        detail = f"nothing to keep{cut}, from a conversation stating {PROBE_STATEMENTS} facts"
    return Check(target, "extraction", FAIL, detail, _STRONGER)


_WINDOW_KEYS = (
    "n_ctx",
    "max_model_len",
    "context_length",
    "max_context_length",
    "context_window",
    "n_ctx_train",
)


def _window_from(entry: Any) -> int | None:
    """A context size from a /models entry or /props: vLLM's max_model_len, LM Studio's
    max_context_length, llama.cpp's n_ctx (in /props' default_generation_settings, or
    meta.n_ctx_train), whichever is there."""
    if not isinstance(entry, dict):
        return None
    for key in _WINDOW_KEYS:
        value = entry.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    for nested in ("default_generation_settings", "meta", "metadata"):
        found = _window_from(entry.get(nested))
        if found is not None:
            return found
    return None


def _context_window(probe: _Probe, target: str) -> Check:
    configured = probe.model.max_input_tokens
    if probe.remote is None:
        return Check(target, "context window", OK, f"{configured} tokens (an embedded model)")
    window = _window_from(probe.props())
    if window is None:
        entries = probe.models() or []
        entry = next((m for m in entries if m.get("id") == probe.model.name), None)
        window = _window_from(entry or (entries[0] if len(entries) == 1 else None))
    if window is None:
        return Check(
            target,
            "context window",
            UNKNOWN,
            f"unknown (the server does not say); model.max_input_tokens is {configured}",
            "set model.max_input_tokens in config.yaml to the server's window",
        )
    if window < configured:
        return Check(
            target,
            "context window",
            FAIL,
            f"the server's is {window} tokens, but model.max_input_tokens is {configured}",
            f"set model.max_input_tokens: {window} in config.yaml, so long threads are "
            "summarized before they overflow it",
        )
    return Check(
        target,
        "context window",
        OK,
        f"{window} tokens (model.max_input_tokens {configured} fits)",
    )


def _embeddings(settings: Settings) -> Check:
    from .config import ConfigError
    from .memory.embeddings import get_embedder

    target = f"embeddings {settings.memory.embeddings}"
    try:
        embedder = get_embedder(settings, None)
        assert embedder is not None
        vectors = embedder.embed_many(["Prefers polars over pandas", "Uses scikit-learn"])
    except (ModelError, ConfigError) as exc:
        return Check(target, "embeds", FAIL, _line(exc), _fix_for(str(exc)))
    return Check(target, "embeds", OK, f"{len(vectors)} vectors of {len(vectors[0])} dimensions")


# -- the whole run ---------------------------------------------------------------------
def run_doctor(
    settings: Settings, *, chat: ChatModel | None = None, memory: ChatModel | None = None
) -> DoctorReport:
    """Check the configured chat and memory models (and embeddings when set); ``chat`` and
    ``memory`` check these model objects instead.

    Raises :class:`Unreachable` when the server cannot be reached, and ``ConfigError`` /
    ``ModelError`` for a configuration that names no usable model."""
    from .llm import get_chat_model

    start = time.monotonic()
    chat_name = chat.name if chat is not None else settings.chat_model_name
    memory_name = memory.name if memory is not None else settings.memory_model_name
    chat_probe = _Probe(chat or get_chat_model(settings, chat_name))
    where = "(embedded, no server)" if chat_probe.remote is None else f"at {chat_probe.where}"
    title = f"deerflow-nb doctor: chat model '{chat_name}'"
    if memory_name != chat_name:
        title += f", memory model '{memory_name}'"
    report = DoctorReport(f"{title} {where}")
    chat_target = f"chat '{chat_name}'"
    report.checks.append(_reachable(chat_probe, chat_target))
    steps: list[tuple[str, Callable[[_Probe, str], Check]]] = [
        ("streams", _streams),
        ("tool calls", _tool_calls),
        ("context window", _context_window),
    ]
    for name, step in steps:
        report.checks.append(_run(chat_probe, chat_target, name, step))
    memory_target = f"memory '{memory_name}'"
    memory_steps: Sequence[tuple[str, Callable[[_Probe, str], Check]]] = [
        ("JSON mode", _json_mode),
        ("extraction", _extraction),
    ]
    try:
        if memory is not None:
            memory_probe = _Probe(memory)
        elif memory_name == chat_name:
            memory_probe = chat_probe
        else:
            memory_probe = _Probe(get_chat_model(settings, memory_name))
    except ModelError as exc:  # e.g. a memory model named while the chat model is offline
        report.checks.append(Check(memory_target, "usable", FAIL, _line(exc), _fix_for(str(exc))))
        memory_steps = []
    for name, step in memory_steps:
        report.checks.append(_run(memory_probe, memory_target, name, step))
    if settings.memory.embeddings:
        report.checks.append(_embeddings(settings))
    report.seconds = time.monotonic() - start
    return report
