"""The middleware chain around the model call, as a small explicit protocol.

Three hooks, each a no-op by default, run in chain order:
``before_agent`` once as the turn starts, ``before_model`` before every model call,
``after_agent`` once as the turn ends (always, even on Ctrl-C or an error). The lead
agent's chain is summarization → journal → memory injection → memory enqueue (the
journal opens the turn first, so a failing injection is still journaled). Memory
picks its block once per turn (the question does not change between tool calls);
summarization checks before every model call, so token triggers count the memory
block too; the thread is journaled before memory is asked to fold it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..config import ContextSize, HomeError, SummarizationConfig
from ..llm.base import ChatModel
from ..tokens import count_message_tokens, count_tokens
from .loop import Middleware, OnEvent, TurnState
from .summarization import (
    FIT_SHARE,
    FLOOR_SHARE,
    cut_index,
    fired_trigger,
    fit_cut,
    shorten_result,
    summarize,
    turn_growth,
)

if TYPE_CHECKING:
    from ..memory import Conversation, Memory

CONTEXT_MESSAGES = 4  # earlier messages, besides the new one, that steer memory selection
PARTIAL_SECONDS = 0.5  # how often a streaming reply is copied into the journal


class SummarizationMiddleware(Middleware):
    """Replaces older messages with a summary in the view when a trigger fires."""

    def __init__(
        self,
        config: SummarizationConfig,
        model: ChatModel,
        window: int,
        conversation: Conversation,
        on_event: OnEvent | None = None,
    ) -> None:
        self.config = config
        self.model = model
        self.window = window
        self.conversation = conversation  # memory's door: where the summary is kept
        self.on_event = on_event

    def before_model(self, state: TurnState) -> None:
        trigger = fired_trigger(
            self.config, state.view(), len(state.conversation), self.window, state.tool_tokens
        )
        if trigger is None:
            return
        target = int(self.window * FIT_SHARE) - state.tool_tokens
        room = turn_growth(state.history, state.new_messages)  # for the calls still to come
        floor = int(self.window * FLOOR_SHARE) - state.tool_tokens
        self._summarize_history(state, trigger, max(target - room, floor))
        self._shorten_results(state, target)

    def _summarize_history(self, state: TurnState, trigger: ContextSize, target: int) -> None:
        # Only journaled history can be summarized; the latest user message opens
        # new_messages, so this also keeps it verbatim.
        cut = min(cut_index(state.conversation, self.config.keep, self.window), len(state.history))
        cut = fit_cut(state.view(), state.history, cut, target)
        if cut <= 0:
            return
        started = time.perf_counter()
        text, usage = summarize(self.model, self.config, state.history[:cut], state.summary)
        state.model_seconds += time.perf_counter() - started
        state.usage = state.usage + usage
        self.conversation.add_summary(
            state.thread_id, state.history_seqs[cut - 1], text, model=self.model.name
        )
        state.apply_summary(cut, text)
        self._tell({"type": "summary", "messages": cut, "trigger": trigger.type})

    def _shorten_results(self, state: TurnState, target: int) -> None:
        """Cut this turn's tool results, oldest first, while the view is over ``target``:
        one turn of many large results outgrows a window that history alone would not.
        Results the model has not read yet (after its latest call) stay whole."""
        tokens = count_message_tokens(state.view())
        read = max(
            (i for i, m in enumerate(state.new_messages) if m["role"] == "assistant"), default=0
        )
        shortened = 0
        for i, message in enumerate(state.new_messages[:read]):
            if tokens <= target:
                break
            if message["role"] != "tool" or i in state.shortened:
                continue
            short = shorten_result(message.get("content") or "")
            if short is not None:
                tokens -= count_tokens(message["content"]) - count_tokens(short)
                state.shortened[i] = short
                shortened += 1
        if shortened:
            self._tell({"type": "shortened", "results": shortened})

    def _tell(self, event: dict[str, Any]) -> None:
        if self.on_event is not None:
            self.on_event(event)


class MemoryInjectionMiddleware(Middleware):
    """Puts the ``<memory>`` block, ranked for this turn, into the system prompt once."""

    def __init__(self, memory: Memory, max_tokens: int, project: str | None = None) -> None:
        self.memory = memory
        self.max_tokens = max_tokens
        self.project = project  # the turn's: its facts and the user's, no other project's

    def before_agent(self, state: TurnState) -> None:
        # A shared project's turn injects what teammates were noticed to have published.
        self.memory.team.catch_up(self.project)
        context = turn_context(state)
        block, facts = self.memory.injection(context, self.max_tokens, project=self.project)
        state.memory_block = block
        state.facts_injected = len(facts)
        state.injected = [str(f.get("content") or "") for f in facts]
        # Issue 20: which facts this turn saw (one journal upsert, no memory.json write).
        self.memory.facts.record_injection(facts, state.user_message.get("content") or "")


class JournalMiddleware(Middleware):
    """Writes the turn to the journal through memory's conversation door: the user message
    first, the rest at the end."""

    def __init__(
        self,
        conversation: Conversation,
        *,
        title: str | None = None,
        private: bool = False,
        project: str | None = None,
    ) -> None:
        self.conversation = conversation
        self.title = title
        self.private = private  # a --no-memory turn: journaled, never read by memory
        self.project = project  # recorded on the thread: its folds go to this project
        self._partial_seq: int | None = None  # the streamed reply's row (keep_partial)
        self._partial_at = 0.0

    def after_text(self, state: TurnState) -> None:
        """Keep the reply streamed so far in the journal, at most every ``PARTIAL_SECONDS``:
        a kernel killed mid-stream leaves the words it showed (a lock or a full disk
        only skips this copy; the turn's end writes the reply whole)."""
        now = time.monotonic()
        if state.turn_id is None or not state.partial:
            return
        if self._partial_seq is not None and now - self._partial_at < PARTIAL_SECONDS:
            return
        self._partial_at = now
        try:
            self._partial_seq = self.conversation.keep_partial(
                state.turn_id, self._partial_seq, state.partial
            )
        except HomeError:
            return

    def before_agent(self, state: TurnState) -> None:
        state.turn_id = self.conversation.begin_turn(
            state.thread_id,
            state.user_message,
            model=state.model.name,
            kind=state.kind,
            parent_id=state.parent_id,
            title=self.title,
            private=self.private,
            project=self.project,
        )

    def after_agent(self, state: TurnState) -> None:
        if state.turn_id is None:
            return
        try:
            self.conversation.end_turn(
                state.turn_id,
                messages=state.new_messages[1:],  # the user message went in before_agent
                status=state.status,
                input_tokens=state.usage.input_tokens,
                output_tokens=state.usage.output_tokens,
                facts_injected=state.facts_injected,
                error=state.error,
                replaces=self._partial_seq,
            )
        except HomeError as exc:  # a lock, a full disk: say exactly what was not kept
            reason = str(exc).removesuffix("; nothing was changed")
            if state.status != "ok":
                raise HomeError(
                    f"{reason}; this turn ended {state.status} ({state.error}) and its end "
                    "was not saved to the journal (your message was)"
                ) from None
            raise HomeError(
                f"{reason}; the reply was not saved to the journal (your message was), so "
                "this thread will not see it: it is shown above and kept in "
                "Agent.last_turn.reply (_agent in a notebook)"
            ) from None


class MemoryEnqueueMiddleware(Middleware):
    """Asks memory to fold the journaled thread (Memory filters and debounces), or, for a
    turn run without memory, to pass it over so a later fold does not learn from it."""

    def __init__(self, memory: Memory, *, remember: bool = True) -> None:
        self.memory = memory
        self.remember = remember

    def after_agent(self, state: TurnState) -> None:
        if state.turn_id is None:
            return
        if self.remember:
            self.memory.enqueue(state.thread_id)
        else:
            self.memory.threads.skip(state.thread_id)


def turn_context(state: TurnState) -> list[str]:
    """What memory ranks against: the last few messages, then the new user message
    (last, so injection weighs it fully and the earlier ones at half)."""
    recent = [m for m in state.history if m["role"] in ("user", "assistant") and m.get("content")]
    texts = [m["content"] for m in recent[-CONTEXT_MESSAGES:]]
    return [*texts, state.user_message["content"]]


def injection(memory: Memory, context: list[str], max_tokens: int) -> tuple[str, int]:
    """The block to inject and how many facts it lists, from one ranking pass."""
    block, facts = memory.injection(context, max_tokens)
    return block, len(facts)
