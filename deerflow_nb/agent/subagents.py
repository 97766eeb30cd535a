"""Sub-agents: the ``task`` tool's executor.

Each run is a fresh conversation (its system prompt and the task, nothing else) in its
own journaled thread ``subagent-<uuid>`` linked to the lead's thread, with the notebook
read tools but no ``task`` (no nesting), no ``run_code`` (the kernel is not
thread-safe) and none of the memory tools (``search_memory``, ``recall``, ``remember``
are the lead's: a sub-agent neither reads nor writes the user's memory). Runs execute
in a thread pool, at most ``max_concurrent`` per model response and ``max_per_turn`` per
lead turn; extra calls get a tool error the model can read. Only the final answer goes
back to the lead, and sub-agent threads are never enqueued for memory extraction.

Progress events are produced in worker threads but delivered from the calling
(main) thread, so notebook display updates always happen where the kernel expects.
"""

from __future__ import annotations

import queue
import time
import uuid
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..config import SubagentsConfig, SummarizationConfig
from ..llm.base import ChatModel, ToolCall
from ..tokens import truncate_to_tokens
from ..untrusted import prompt_text
from .loop import Cancelled, CancelToken, OnEvent, TurnState, run_turn
from .middleware import JournalMiddleware, SummarizationMiddleware
from .notebook_tools import NotebookTools
from .tools import MAX_RESULT_TOKENS, SUBAGENT_TYPES, ToolError, parse_arguments, tool_specs

if TYPE_CHECKING:
    from ..memory import Conversation

POLL_SECONDS = 0.05
SUBAGENT_PROMPT = (
    "You are a sub-agent of deerflow_nb, working for a lead agent in the user's Jupyter "
    "notebook. You get one self-contained task. Use the notebook tools if they help, then "
    "reply with the final result only: it is all the lead agent will see."
)


@dataclass
class SubagentRun:
    """One sub-agent run, as the lead's turn result and the cell's progress lines see it."""

    id: str
    thread_id: str
    description: str
    subagent_type: str
    max_turns: int
    status: str = "started"  # started | done | failed | timed_out | interrupted
    turn: int = 0
    result: str = ""
    error: str | None = None
    seconds: float = 0.0

    def event(self) -> dict[str, Any]:
        return {
            "type": "subagent",
            "id": self.id,
            "thread": self.thread_id,
            "description": self.description,
            "status": self.status,
            "turn": self.turn,
            "max_turns": self.max_turns,
            "error": self.error,
        }


class SubagentExecutor:
    """Runs the ``task`` calls of one lead turn, enforcing the limits."""

    def __init__(
        self,
        model: ChatModel,
        conversation: Conversation,
        tools: NotebookTools,
        config: SubagentsConfig,
        summarization: SummarizationConfig,
        window: int,
        parent_thread: str,
        on_event: OnEvent | None = None,
        project: str | None = None,
    ) -> None:
        self.model = model
        self.conversation = conversation
        self.tools = tools.read_only()
        self.config = config
        self.summarization = summarization
        self.window = window
        self.parent_thread = parent_thread
        self.project = project  # the lead thread's, recorded on each sub-agent's thread
        self.on_event = on_event
        self.runs: list[SubagentRun] = []

    def run(self, calls: list[ToolCall], results: dict[str, str] | None = None) -> dict[str, str]:
        """Results by tool call id: each accepted run's answer, or an ``Error: ...`` text.

        ``results``, when given, is filled as runs finish, so what finished before a
        Ctrl-C is still there for the caller.
        """
        results = {} if results is None else results
        accepted: list[tuple[ToolCall, SubagentRun, str]] = []
        for call in calls:
            try:
                run, prompt = self._accept(call, len(accepted))
            except ToolError as exc:
                results[call.id] = f"Error: {exc}"
                continue
            accepted.append((call, run, prompt))
        if accepted:
            self._run_parallel(accepted, results)
        return results

    def _accept(self, call: ToolCall, batch_size: int) -> tuple[SubagentRun, str]:
        args = parse_arguments(call.arguments)
        prompt = args.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise ToolError("task needs a non-empty 'prompt'")
        kind = args.get("subagent_type") or "general-purpose"
        if kind not in SUBAGENT_TYPES:
            raise ToolError(
                f"unknown subagent_type '{kind}'; use one of: {', '.join(SUBAGENT_TYPES)}"
            )
        if batch_size >= self.config.max_concurrent:
            raise ToolError(
                f"at most {self.config.max_concurrent} sub-agents run per response; "
                "call task again for this one after these finish"
            )
        if len(self.runs) >= self.config.max_per_turn:
            raise ToolError(
                f"at most {self.config.max_per_turn} sub-agents per turn; do this part yourself"
            )
        run_id = uuid.uuid4().hex
        run = SubagentRun(
            id=run_id[:8],
            thread_id=f"subagent-{run_id}",
            description=str(args.get("description") or prompt)[:80],
            subagent_type=kind,
            max_turns=self.config.max_turns,
        )
        self.runs.append(run)
        return run, prompt

    def _run_parallel(
        self, accepted: list[tuple[ToolCall, SubagentRun, str]], results: dict[str, str]
    ) -> None:
        events: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        pool = ThreadPoolExecutor(
            max_workers=self.config.max_concurrent, thread_name_prefix="deerflow-subagent"
        )
        started = time.monotonic()
        pending: dict[Future[str], tuple[ToolCall, SubagentRun, CancelToken]] = {}
        try:
            for call, run, prompt in accepted:
                token = CancelToken()
                future = pool.submit(self._run_one, run, prompt, token, events)
                pending[future] = (call, run, token)
                self._emit(run.event())
            while pending:
                done, _ = wait(pending, timeout=POLL_SECONDS, return_when=FIRST_COMPLETED)
                self._drain(events)
                for future in done:
                    call, run, _token = pending.pop(future)
                    results[call.id] = self._finish(run, future)
                    self._emit(run.event())  # after the result is kept: a Ctrl-C keeps it
                if time.monotonic() - started >= self.config.timeout_seconds:
                    for call, run, token in pending.values():
                        token.cancel(f"timed out after {self.config.timeout_seconds:g}s")
                        run.status, run.error = "timed_out", token.reason
                        run.seconds = time.monotonic() - started
                        results[call.id] = f"Error: sub-agent '{run.description}' {token.reason}"
                        self._emit(run.event())
                    pending.clear()
        except BaseException:
            for _call, run, token in pending.values():
                token.cancel("the lead turn was interrupted")
                run.status, run.error = "interrupted", token.reason
            raise
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
            self._drain(events)

    def _finish(self, run: SubagentRun, future: Future[str]) -> str:
        try:
            run.result = future.result()
        except Exception as exc:
            run.status, run.error = "failed", f"{type(exc).__name__}: {exc}"
            return f"Error: sub-agent '{run.description}' failed: {run.error}"
        run.status = "done"
        # Capped like any tool result: the lead keeps it in its context for good (the
        # sub-agent's thread keeps the whole reply).
        return truncate_to_tokens(run.result, MAX_RESULT_TOKENS)

    def _run_one(
        self,
        run: SubagentRun,
        prompt: str,
        token: CancelToken,
        events: queue.SimpleQueue[dict[str, Any]],
    ) -> str:
        """A worker thread's whole sub-agent turn, journaled in its own thread."""
        started = time.monotonic()
        state = TurnState(
            thread_id=run.thread_id,
            model=self.model,
            system_prompt=f"{SUBAGENT_PROMPT}\n{SUBAGENT_TYPES[run.subagent_type]}",
            # the task is the lead model's text: quoted as any prompt quotes model text
            user_message={"role": "user", "content": prompt_text(prompt)},
            kind="subagent",
            parent_id=self.parent_thread,
        )
        middlewares = [
            SummarizationMiddleware(self.summarization, self.model, self.window, self.conversation),
            JournalMiddleware(self.conversation, title=run.description, project=self.project),
        ]

        def on_step(step: int) -> None:
            run.turn = step
            events.put({**run.event(), "status": "running"})

        try:
            return run_turn(
                state,
                middlewares,
                tools=tool_specs(self.tools.names),
                dispatch=self._dispatch,
                max_turns=self.config.max_turns,
                on_step=on_step,
                cancel=token,
            )
        except Cancelled:
            return ""
        finally:
            run.seconds = time.monotonic() - started
            self.conversation.close()  # this worker thread's connection

    def _dispatch(self, calls: list[ToolCall]) -> list[dict[str, Any]]:
        messages = []
        for call in calls:
            text = self.tools.run_call(call)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
        return messages

    def _drain(self, events: queue.SimpleQueue[dict[str, Any]]) -> None:
        """Deliver worker progress, dropping late news from runs already settled."""
        settled = {r.id for r in self.runs if r.status != "started"}
        while True:
            try:
                event = events.get_nowait()
            except queue.Empty:
                return
            if event["id"] not in settled:
                self._emit(event)

    def _emit(self, event: dict[str, Any]) -> None:
        if self.on_event is not None:
            self.on_event(event)
