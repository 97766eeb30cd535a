"""The doctor's checks of the server itself: two requests at once, the output cap, JSON
schema output; each row says what deerflow_nb does about what it found.

A local server (llama.cpp's, Ollama) may serve one request at a time, queue a second, or
cut the first off when a second arrives; which one decides how a background fold would
treat the user's turn, had folds not given way to turns (``llm/server_sharing.py``).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import Any

from .probe import Probe, one_line
from .report import FAIL, OK, UNKNOWN, Check

CONCURRENCY_REPLY = 24  # max_tokens of each of the two overlapping requests
CAP_PROBE = 8  # the cap sent where an uncapped reply would be long
WAIT_FIRST_CHUNK = 60.0
SCHEMA_PROBE = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}},
    "required": ["ok"],
    "additionalProperties": False,
}
_LONG = [{"role": "user", "content": "Count from one to fifty in words, one per line."}]


@dataclass
class Timed:
    """One streamed probe request: how it ended and when its text came."""

    finish: str | None = None
    chunks: int = 0
    first_at: float | None = None
    ended_at: float = 0.0
    error: str | None = None


def _timed_stream(probe: Probe, started: threading.Event | None) -> Timed:
    result = Timed()
    try:
        with probe._client().chat.completions.create(
            model=probe.model.name, messages=_LONG, max_tokens=CONCURRENCY_REPLY, stream=True
        ) as stream:
            for chunk in stream:
                for choice in chunk.choices:
                    if choice.delta.content:
                        result.chunks += 1
                        result.first_at = result.first_at or time.monotonic()
                        if started is not None:
                            started.set()
                    if choice.finish_reason:
                        result.finish = choice.finish_reason
    except Exception as exc:  # a probe's failure is what the row reports
        result.error = one_line(exc, 100)
    result.ended_at = time.monotonic()
    if started is not None:
        started.set()
    return result


def concurrency(probe: Probe, target: str) -> Check:
    """A second request sent while the first streams: both answered together, the second
    queued behind, or the first cut off."""
    started = threading.Event()
    results: dict[str, Timed] = {}
    first = threading.Thread(target=lambda: results.update(a=_timed_stream(probe, started)))
    first.start()
    started.wait(WAIT_FIRST_CHUNK)
    second = _timed_stream(probe, None)
    first.join(probe.remote.config.timeout_seconds if probe.remote else None)
    a = results.get("a")
    if a is None or a.error or second.error or not a.chunks:
        said = (a.error if a else None) or second.error or "the first request streamed no text"
        return Check(target, "two requests", UNKNOWN, f"could not tell: {said}",
                     "check the server's log for these requests")  # fmt: skip
    does = "deerflow_nb: a fold never sends while your turn runs, and stops when one starts"
    if a.finish is None:
        return Check(
            target,
            "two requests",
            OK,
            "it cuts the first request off when a second arrives (one at a time)",
            f"{does}; a reply cut off anyway is kept, marked interrupted, to run again",
        )
    if second.first_at is not None and second.first_at < a.ended_at:
        return Check(target, "two requests", OK, "it answers two requests at once",
                     f"{does} all the same (your turn gets the whole server)")  # fmt: skip
    return Check(
        target,
        "two requests",
        OK,
        "it queues the second until the first is done (one at a time)",
        f"{does}, so your turn never waits behind a fold in this kernel",
    )


def _capped(probe: Probe, param: str) -> tuple[bool | None, str]:
    """(honoured, what was seen) for ``param``; None when the server refused it."""
    import openai

    try:
        response = probe._client().chat.completions.create(
            model=probe.model.name, messages=_LONG, **{param: CAP_PROBE}
        )
    except openai.APIStatusError as exc:
        return None, f"refused {param} ({exc.status_code})"
    choice = response.choices[0] if response.choices else None
    used = response.usage.completion_tokens if response.usage else None
    finish = choice.finish_reason if choice else None
    honoured = finish == "length" or (used is not None and used <= CAP_PROBE + 1)
    return honoured, f"{param} {CAP_PROBE}: {used if used is not None else '?'} tokens, {finish}"


def output_cap(probe: Probe, target: str, limit: int) -> Check:
    """Which of ``max_tokens`` and ``max_completion_tokens`` the server honours."""
    seen = []
    for param in ("max_tokens", "max_completion_tokens"):
        honoured, said = _capped(probe, param)
        seen.append(said)
        if honoured:
            return Check(target, "output cap", OK, f"honours {param} ({said})",
                         f"deerflow_nb caps each fold at {limit} tokens (model.max_output_tokens)"
                         f" with {param}")  # fmt: skip
    return Check(
        target,
        "output cap",
        FAIL,
        "honours neither max_tokens nor max_completion_tokens: " + "; ".join(seen),
        "a fold may then write until the window is full: set model.max_input_tokens to the "
        "server's window, or serve the model with a server that honours max_tokens",
    )


def json_schema(probe: Probe, target: str) -> Check:
    """Whether the server constrains a reply to a JSON schema, and in which form."""
    import openai

    from ..llm.openai_client import SCHEMA_FORMATS, response_format

    refused = []
    for form in SCHEMA_FORMATS[:-1]:
        try:
            response = probe._client().chat.completions.create(
                model=probe.model.name,
                messages=[{"role": "user", "content": "Is water wet? Answer as JSON."}],
                max_tokens=32,
                response_format=response_format(SCHEMA_PROBE, form),
            )
        except openai.APIStatusError as exc:
            refused.append(f"{form} ({exc.status_code})")
            continue
        text = response.choices[0].message.content if response.choices else ""
        try:
            value: Any = json.loads(text or "")
        except ValueError:
            value = None
        shown = "response_format json_schema" if form == "json_schema" else "JSON mode + schema"
        if isinstance(value, dict) and isinstance(value.get("ok"), bool):
            return Check(target, "JSON schema", OK, f"{shown}: a reply that fits the schema",
                         "deerflow_nb sends a fold's diff schema this way, so the reply is "
                         "valid by construction")  # fmt: skip
        return Check(
            target,
            "JSON schema",
            UNKNOWN,
            f"takes {shown} but the reply did not fit it: {one_line(text, 60)}",
            "deerflow_nb sends it anyway; the per-item gate keeps what is valid",
        )
    return Check(
        target,
        "JSON schema",
        UNKNOWN,
        "refuses a JSON schema: " + ", ".join(refused),
        "deerflow_nb sends plain JSON mode; the per-item gate keeps what is valid",
    )
