"""What a ``%%agent`` cell shows: progress lines, the streamed reply, a one-line footer.

One display handle per turn, updated as tokens arrive (at most every ``THROTTLE``
seconds, so a fast stream does not flood the frontend) and once more with the final
reply and the footer. Objects carry ``_repr_markdown_`` for notebooks and a plain
``__repr__`` for terminals. Terminal IPython prints every update anew, so there the turn
is written as a stream instead (``TerminalTurnView``).
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .core import TurnResult

THROTTLE = 0.05
_SUBAGENT_MARKS = {
    "started": "◦",
    "running": "◦",
    "done": "✓",
    "failed": "✗",
    "timed_out": "⏱",
    "interrupted": "■",
}


class MarkdownText:
    """Markdown for notebooks, the same text for terminals."""

    def __init__(self, text: str) -> None:
        self.text = text

    def _repr_markdown_(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return self.text


def footer(result: TurnResult) -> str:
    """``model · thread · tokens in/out · N facts injected`` (plus the status if not ok)."""
    facts = result.facts_injected
    parts = [
        result.model,
        f"thread {result.thread}",
        f"{result.usage.input_tokens} in / {result.usage.output_tokens} out tokens",
        f"{facts} fact{'' if facts == 1 else 's'} injected",
    ]
    if result.status != "ok":
        parts.append(result.status)
    return " · ".join(parts)


def subagent_line(event: dict[str, Any]) -> str:
    status = event["status"]
    what = f"sub-agent **{event['description']}**"
    if status == "running":
        state = f"turn {event['turn']}/{event['max_turns']}"
    elif status == "timed_out":
        state = "timed out"
    elif status in ("failed", "interrupted") and event.get("error"):
        state = f"{status}: {event['error']}"
    else:
        state = status
    return f"{_SUBAGENT_MARKS.get(status, '◦')} {what} — {state}"


def summary_line(event: dict[str, Any]) -> str:
    """A ``summary`` or ``shortened`` event: what the model's view lost to fit its window."""
    if event["type"] == "shortened":
        n = event["results"]
        results = "result" if n == 1 else "results"
        return f"↺ shortened {n} earlier tool {results} of this turn to fit the context window"
    return f"↺ summarized {event['messages']} earlier messages ({event['trigger']} trigger)"


class TurnView:
    """The cell's live output for one turn."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._subagents: dict[str, int] = {}  # run id -> index in lines
        self.reply = ""
        self.footer = ""
        self._handle: Any = None
        self._last_update = 0.0

    def show(self) -> None:
        from IPython.display import display

        self._handle = display(MarkdownText(self.markdown()), display_id=True)

    def markdown(self) -> str:
        parts = []
        if self.lines:
            parts.append("\n".join(f"- {line}" for line in self.lines))
        parts.append(self.reply or "…")
        if self.footer:
            parts.append(f"---\n*{self.footer}*")
        return "\n\n".join(parts)

    def on_text(self, delta: str) -> None:
        self.reply += delta
        if time.monotonic() - self._last_update >= THROTTLE:
            self.refresh()

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "subagent":
            line = subagent_line(event)
            if event["id"] in self._subagents:
                self.lines[self._subagents[event["id"]]] = line
            else:
                self._subagents[event["id"]] = len(self.lines)
                self.lines.append(line)
        elif kind == "tool":
            self.lines.append(f"→ `{event['name']}({event['arguments']})`")
            self.reply = ""
        elif kind in ("summary", "shortened"):
            self.lines.append(summary_line(event))
        self.refresh()

    def finish(self, result: TurnResult | None) -> None:
        if result is not None:
            self.reply = result.reply
            self.footer = footer(result)
        self.refresh()

    def refresh(self) -> None:
        if self._handle is None:
            return
        self._handle.update(MarkdownText(self.markdown()))
        self._last_update = time.monotonic()


class TerminalTurnView:
    """The turn for terminal IPython, which cannot redraw what it printed: progress lines
    and the reply are written as they come, the footer once at the end."""

    def __init__(self) -> None:
        self.reply = ""  # streamed since the last tool call
        self._statuses: dict[str, str] = {}  # sub-agent run id -> last status printed
        self._at_line_start = True

    def show(self) -> None:
        """Nothing to show before the first token."""

    def on_text(self, delta: str) -> None:
        self.reply += delta
        self._write(delta)

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "subagent":
            if self._statuses.get(event["id"]) == event["status"]:
                return  # a terminal shows a run's status changes, not every turn
            self._statuses[event["id"]] = event["status"]
            self._line(subagent_line(event).replace("**", ""))
        elif kind == "tool":
            self._line(f"→ {event['name']}({event['arguments']})")
            self.reply = ""
        elif kind in ("summary", "shortened"):
            self._line(summary_line(event))

    def finish(self, result: TurnResult | None) -> None:
        if result is not None:
            if result.reply.startswith(self.reply):
                self._write(result.reply[len(self.reply) :])
            else:  # not what was streamed (a reply that came whole): write it out
                self._line(result.reply)
            self._line(f"---\n{footer(result)}")
        elif not self._at_line_start:
            self._write("\n")

    def _line(self, text: str) -> None:
        self._write(("" if self._at_line_start else "\n") + text + "\n")

    def _write(self, text: str) -> None:
        if text:
            sys.stdout.write(text)
            sys.stdout.flush()
            self._at_line_start = text.endswith("\n")


def turn_view(shell: Any) -> TurnView | TerminalTurnView:
    """The live view that suits ``shell``'s frontend."""
    terminal = any(c.__name__ == "TerminalInteractiveShell" for c in type(shell).__mro__)
    return TerminalTurnView() if terminal else TurnView()


def show_markdown(text: str) -> None:
    """Display a separate Markdown block (``run_code`` shows its code this way)."""
    from IPython.display import display

    display(MarkdownText(text))
