"""The doctor's checks of the configured models, and ``run_doctor``, the whole run.

The chat model: reachable, streams, calls tools, context window, and on a server two
requests at once, the output cap and JSON schema output (``server.py``); the memory model:
JSON mode and extraction of a fixed probe conversation (``probe_extraction``); embeddings
when configured.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..config import ConfigError
from ..llm.base import SAID_IN_ONE_LINE, ChatModel, ModelError
from . import server_checks
from .probe import Probe, Unreachable, one_line
from .report import FAIL, OK, UNKNOWN, Check, DoctorReport

if TYPE_CHECKING:
    from ..config import Settings

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


def _run(probe: Probe, target: str, name: str, check: Callable[[Probe, str], Check]) -> Check:
    """Run one check; a model error becomes its ✗ row (the server not answering is raised)."""
    try:
        return check(probe, target)
    except Unreachable:
        raise
    except ModelError as exc:
        return Check(target, name, FAIL, one_line(exc), _fix_for(str(exc)))


def _fix_for(error: str) -> str:
    """The fix a translated error already names, after its ':' (else a generic hint)."""
    if ": " in error:
        head, _, fix = error.partition(": ")
        if any(w in fix for w in ("set ", "pick ", "raise ", "check ", "start ", "fix ")):
            return fix
    return "check the server's log for this request"


def _reachable(probe: Probe, target: str) -> Check:
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
    if not names:
        return Check(target, "reachable", OK, f"{probe.where} answers, but lists no models")
    return Check(target, "reachable", OK, f"{probe.where} answers; serves {shown}")


def _streams(probe: Probe, target: str) -> Check:
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
    said = one_line(reply.content, 60)
    return Check(
        target,
        "streams",
        OK,
        f"{reply.chunks} text chunks, finish_reason {reply.finish_reason or 'missing'}: “{said}”",
    )


def _tool_calls(probe: Probe, target: str) -> Check:
    from ..agent.tools import tool_specs

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
                "called list_variables with arguments that are not JSON: "
                + one_line(arguments, 60),
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


def _json_mode(probe: Probe, target: str) -> Check:
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
            f"{detail}: {one_line(reply.content, 60)}",
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
    from ..memory import ExtractionError
    from ..memory import parse_extraction as parse

    try:
        diff = parse(text, handles)
    except ExtractionError as exc:
        return 0, _count_items(_loose_json(text)), [one_line(exc, 100)]
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


def _extraction(probe: Probe, target: str) -> Check:
    from ..memory import empty_memory
    from ..memory import extraction_messages as build_messages

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


def _window_from_show(show: dict[str, Any] | None) -> int | None:
    """Ollama's ``/api/show``: ``model_info``'s ``<arch>.context_length``, or a ``num_ctx``
    line among its ``parameters``."""
    if not show:
        return None
    for key, value in (show.get("model_info") or {}).items():
        if str(key).endswith(".context_length") and isinstance(value, int) and value > 0:
            return value
    for line in str(show.get("parameters") or "").splitlines():
        name, _, value = line.partition(" ")
        if name == "num_ctx" and value.strip().isdigit():
            return int(value.strip())
    return None


def _context_window(probe: Probe, target: str) -> Check:
    configured = probe.model.max_input_tokens
    if probe.remote is None:
        return Check(target, "context window", OK, f"{configured} tokens (an embedded model)")
    window = _window_from(probe.props()) or _window_from_show(probe.show())
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
    from ..memory import get_embedder

    target = f"embeddings {settings.memory.embeddings}"
    try:
        embedder = get_embedder(settings, None)
        assert embedder is not None
        vectors = embedder.embed_many(["Prefers polars over pandas", "Uses scikit-learn"])
    except ConfigError as exc:  # the setting names what cannot load: its fix ends the line
        problem, _, fix = str(exc).rpartition("; ")
        if not problem:
            problem, fix = str(exc), "fix memory.embeddings in config.yaml"
        return Check(target, "embeds", FAIL, one_line(problem, 240), fix, config=True)
    except SAID_IN_ONE_LINE as exc:
        return Check(target, "embeds", FAIL, one_line(exc), _fix_for(str(exc)))
    return Check(target, "embeds", OK, f"{len(vectors)} vectors of {len(vectors[0])} dimensions")


# -- the whole run ---------------------------------------------------------------------
def run_doctor(
    settings: Settings, *, chat: ChatModel | None = None, memory: ChatModel | None = None
) -> DoctorReport:
    """Check the configured chat and memory models (and embeddings when set); ``chat`` and
    ``memory`` check these model objects instead.

    Raises :class:`Unreachable` when the server cannot be reached, and ``ConfigError`` /
    ``ModelError`` for a configuration that names no usable model."""
    from ..llm import get_chat_model
    from ..llm.registry import described

    start = time.monotonic()
    chat_name = chat.name if chat is not None else settings.chat_model_name
    memory_name = memory.name if memory is not None else settings.memory_model_name
    chat_probe = Probe(chat or get_chat_model(settings, chat_name))
    where = "(embedded, no server)" if chat_probe.remote is None else f"at {chat_probe.where}"
    title = f"deerflow-nb doctor: chat model '{chat_name}'"
    if memory_name != chat_name:
        title += f", memory model '{memory_name}'"
    report = DoctorReport(f"{title} {where}", providers=described())
    # The doctor's probes are the user's: this kernel's folds give way (a lease would be
    # a write to the home, which the doctor never makes).
    held = chat_probe.remote.server.foreground(lease=False) if chat_probe.remote else None
    with held or contextlib.nullcontext():
        chat_target = f"chat '{chat_name}'"
        report.checks.append(_reachable(chat_probe, chat_target))
        steps: list[tuple[str, Callable[[Probe, str], Check]]] = [
            ("streams", _streams),
            ("tool calls", _tool_calls),
            ("context window", _context_window),
        ]
        if chat_probe.remote is not None:
            limit = settings.model.max_output_tokens
            steps += [
                ("two requests", server_checks.concurrency),
                ("output cap", lambda p, t: server_checks.output_cap(p, t, limit)),
                ("JSON schema", server_checks.json_schema),
            ]
        for name, step in steps:
            report.checks.append(_run(chat_probe, chat_target, name, step))
        memory_target = f"memory '{memory_name}'"
        memory_steps: Sequence[tuple[str, Callable[[Probe, str], Check]]] = [
            ("JSON mode", _json_mode),
            ("extraction", _extraction),
        ]
        try:
            if memory is not None:
                memory_probe = Probe(memory)
            elif memory_name == chat_name:
                memory_probe = chat_probe
            else:
                memory_probe = Probe(get_chat_model(settings, memory_name))
        except ModelError as exc:  # e.g. a memory model named while the chat model is offline
            report.checks.append(
                Check(memory_target, "usable", FAIL, one_line(exc), _fix_for(str(exc)))
            )
            memory_steps = []
        for name, step in memory_steps:
            report.checks.append(_run(memory_probe, memory_target, name, step))
    if settings.memory.embeddings:
        report.checks.append(_embeddings(settings))
    report.seconds = time.monotonic() - start
    return report
