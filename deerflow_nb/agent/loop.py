"""One agent turn: the state it carries and the tool loop that drives the model.

Shared by the lead agent and sub-agents, so both get the same middleware hooks, the
same turn limit, and the same clean ending on Ctrl-C, cancellation or errors: whatever
happened, the turn's messages stay well formed (every tool call has a result) and the
middlewares' ``after_agent`` hooks run.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from ..llm.base import ChatModel, OnText, ReplyCutShort, ToolCall, Usage
from ..tokens import count_tokens
from ..untrusted import prompt_text

OnEvent = Callable[[dict[str, Any]], None]  # progress: tools, sub-agents, summaries
Dispatch = Callable[[list[ToolCall]], list[dict[str, Any]]]
INTERRUPTED_RESULT = "Error: interrupted before this tool returned."


class Cancelled(Exception):
    """The turn was stopped from outside (a sub-agent timeout, or its lead interrupted)."""


class CancelToken:
    """A flag another thread sets to stop a turn between model calls, with the reason."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason = ""

    def cancel(self, reason: str) -> None:
        self.reason = reason
        self._event.set()

    def check(self) -> None:
        if self._event.is_set():
            raise Cancelled(self.reason)


class Middleware:
    """Base class of the middleware around the model call (``middleware.py``): override
    the hooks you need; the loop calls each of them by name, explicitly, in chain order."""

    def before_agent(self, state: TurnState) -> None:
        """Runs once, before the first model call."""

    def before_model(self, state: TurnState) -> None:
        """Runs before every model call; may change what the model sees."""

    def after_text(self, state: TurnState) -> None:
        """Runs as streamed text arrives (``state.partial`` holds the reply so far)."""

    def after_agent(self, state: TurnState) -> None:
        """Runs once at the end, whatever the outcome (see ``state.status``)."""


@dataclass
class TurnState:
    """Everything a turn knows; middlewares read and change it.

    The model's view is the system prompt (with the memory block and the latest
    summary) followed by ``conversation``: the journaled ``history`` after the summary,
    then this turn's ``new_messages`` (the user message first).
    """

    thread_id: str
    model: ChatModel
    system_prompt: str
    user_message: dict[str, Any]
    history: list[dict[str, Any]] = field(default_factory=list)
    history_seqs: list[int] = field(default_factory=list)
    summary: str | None = None
    kind: str = "lead"
    parent_id: str | None = None
    memory_block: str = ""
    facts_injected: int = 0
    injected: list[str] = field(default_factory=list)  # their texts, in the block's order
    turn_id: str | None = None
    status: str = "running"
    error: str | None = None
    reply: str = ""
    partial: str = ""
    # Results of tool calls that came back before the response's others: kept if the
    # turn stops before they are all in (a sub-agent that finished before a Ctrl-C).
    early_results: dict[str, str] = field(default_factory=dict)
    tool_tokens: int = 0  # what the offered tool schemas add to the next request
    usage: Usage = field(default_factory=Usage)
    model_seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)  # seconds per middleware
    summaries: int = 0
    last_view: list[dict[str, Any]] = field(default_factory=list)
    new_messages: list[dict[str, Any]] = field(default_factory=list)
    # This turn's tool results cut short in the model's view (position in new_messages →
    # what the model sees); new_messages, and so the journal, keep them whole.
    shortened: dict[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.new_messages:
            self.new_messages = [self.user_message]

    @property
    def conversation(self) -> list[dict[str, Any]]:
        return self.history + self.new_messages

    def view(self) -> list[dict[str, Any]]:
        """The messages the next model call sees. Every message but the new user message
        (the person's, as typed) is stored or model text: the thread's journal, replies,
        tool results. Each goes through the prompt boundary (``untrusted.prompt_text``),
        so none can forge a tag of our prompts or a chat template's (``<|im_start|>``
        read by a server as a turn of its own) or hide characters from the reader."""
        system = self.system_prompt
        if self.memory_block:
            system += f"\n\n{self.memory_block}"
        if self.summary:
            system += (
                "\n\n<conversation_summary>\nEarlier messages of this thread, summarized:\n"
                f"{prompt_text(self.summary)}\n</conversation_summary>"
            )
        current = [
            m if i == 0 else _quoted(m, self.shortened.get(i))
            for i, m in enumerate(self.new_messages)
        ]
        history = [_quoted(m) for m in self.history]
        return [{"role": "system", "content": system}, *history, *current]

    def apply_summary(self, cut: int, summary: str) -> None:
        """Replace the first ``cut`` history messages with ``summary`` in the view."""
        self.summary = summary
        self.history = self.history[cut:]
        self.history_seqs = self.history_seqs[cut:]
        self.summaries += 1


def _quoted(message: dict[str, Any], content: str | None = None) -> dict[str, Any]:
    """``message`` (with ``content`` in place of its own, when given) as a prompt quotes it:
    its text through the prompt boundary; the same dict when that changes nothing."""
    text = message.get("content") if content is None else content
    if not isinstance(text, str):
        return message
    quoted = _prompt_text(text)
    return message if quoted == message.get("content") else {**message, "content": quoted}


# A thread's messages are quoted again on every model call: each text once.
_prompt_text = lru_cache(maxsize=512)(prompt_text)


def run_turn(
    state: TurnState,
    middlewares: list[Middleware],
    *,
    tools: list[dict[str, Any]],
    dispatch: Dispatch,
    max_turns: int,
    on_text: OnText | None = None,
    on_step: Callable[[int], None] | None = None,
    cancel: CancelToken | None = None,
) -> str:
    """Run model calls and tool calls until the model answers; returns the reply.

    ``max_turns`` bounds the model calls: the last allowed call is offered no tools,
    so the model has to answer with what it has. Middleware hooks run in chain order;
    ``after_agent`` always runs, with ``state.status`` set to ok, error or interrupted.
    """
    try:
        for middleware in middlewares:
            with _timed(state, middleware):
                middleware.before_agent(state)
        state.reply = _loop(
            state, middlewares, tools, dispatch, max_turns, on_text, on_step, cancel
        )
        state.status = "ok"
        return state.reply
    except (KeyboardInterrupt, Cancelled) as exc:
        state.status = "interrupted"
        state.error = str(exc) or "interrupted by the user"
        _close_open_calls(state)
        raise
    except ReplyCutShort as exc:  # the server ended the stream mid-reply: keep what came
        state.status = "interrupted"
        state.error = f"{type(exc).__name__}: {exc}"
        state.partial = state.partial or exc.partial
        _close_open_calls(state)
        raise
    except BaseException as exc:
        state.status = "error"
        state.error = f"{type(exc).__name__}: {exc}"
        _close_open_calls(state)
        raise
    finally:
        for middleware in middlewares:
            with _timed(state, middleware):
                middleware.after_agent(state)


def _loop(
    state: TurnState,
    middlewares: list[Middleware],
    tools: list[dict[str, Any]],
    dispatch: Dispatch,
    max_turns: int,
    on_text: OnText | None,
    on_step: Callable[[int], None] | None,
    cancel: CancelToken | None,
) -> str:
    # Only the middleware that overrides after_text hears each streamed piece (a reply
    # streams in hundreds: a hook call and its timing each is most of a turn's overhead).
    hearing = [m for m in middlewares if type(m).after_text is not Middleware.after_text]

    def tee(delta: str) -> None:
        state.partial += delta
        if on_text is not None:
            on_text(delta)
        for middleware in hearing:
            with _timed(state, middleware):
                middleware.after_text(state)

    schema_tokens = count_tokens(json.dumps(tools)) if tools else 0  # the same every call
    step = 0
    while True:
        step += 1
        if cancel is not None:
            cancel.check()
        if on_step is not None:
            on_step(step)
        offered = tools if step < max_turns else []
        state.tool_tokens = schema_tokens if offered else 0
        for middleware in middlewares:
            with _timed(state, middleware):
                middleware.before_model(state)
        state.last_view = state.view()
        state.partial = ""
        started = time.perf_counter()
        result = state.model.chat(state.last_view, tools=offered or None, on_text=tee)
        state.model_seconds += time.perf_counter() - started
        state.usage = state.usage + result.usage
        if cancel is not None:  # stopped while the model answered: the answer came too late
            state.partial = result.content  # kept in this turn's journal, not returned
            cancel.check()
        state.partial = ""
        if not result.tool_calls or not offered:
            state.new_messages.append({"role": "assistant", "content": result.content})
            return result.content
        state.new_messages.append(result.to_message())
        state.new_messages.extend(dispatch(result.tool_calls))


@contextlib.contextmanager
def _timed(state: TurnState, middleware: Middleware) -> Iterator[None]:
    """Add the time of one middleware's hook, called in the body, to ``state.timings``."""
    started = time.perf_counter()
    yield
    key = type(middleware).__name__
    state.timings[key] = state.timings.get(key, 0.0) + time.perf_counter() - started


def _close_open_calls(state: TurnState) -> None:
    """Give every unanswered tool call a result, and keep the partial reply."""
    answered = {m.get("tool_call_id") for m in state.new_messages if m["role"] == "tool"}
    for message in list(state.new_messages):
        for call in message.get("tool_calls") or []:
            if call["id"] not in answered:
                content = state.early_results.get(call["id"], INTERRUPTED_RESULT)
                state.new_messages.append(
                    {"role": "tool", "tool_call_id": call["id"], "content": content}
                )
    if state.partial:
        state.new_messages.append({"role": "assistant", "content": state.partial})
        state.reply = state.partial
        state.partial = ""
