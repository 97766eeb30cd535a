"""What a ``%%agent`` cell shows: progress lines, the streamed reply, a one-line footer.

One display handle per turn, updated as tokens arrive (at most every ``THROTTLE``
seconds, so a fast stream does not flood the frontend) and once more with the final
reply and the footer. Terminal IPython prints every update anew, so there the turn is
written as a stream instead (``TerminalTurnView``).

Everything a turn shows is untrusted (the model writes the reply, the tool arguments and
the sub-agent descriptions; a prompt injection can steer it), and JupyterLab renders a
live ``text/markdown`` output as trusted HTML. So the cell gets no ``text/markdown``:
each part is rendered to sanitized HTML on its own (``untrusted.SafeMarkdown``), with the
untrusted pieces of the lines we compose escaped or shown as code, plus a ``text/plain``
reading; the terminal gets the text with control characters removed.
"""

from __future__ import annotations

import json
import re
import sys
import time
from typing import TYPE_CHECKING, Any

from ..untrusted import SafeMarkdown, clean_text, code_span, escape_markdown

if TYPE_CHECKING:
    from ..agent.core import TurnResult
    from ..memory import Memory

THROTTLE = 0.05
ARGUMENT_WIDTH = 60  # a tool line shows each argument up to this many characters
_FENCE_LINE = re.compile(r"^ {0,3}(`{3,})[ \t]*([^`\s][^`]*)?$")
_SUBAGENT_MARKS = {
    "started": "◦",
    "running": "◦",
    "done": "✓",
    "failed": "✗",
    "timed_out": "⏱",
    "interrupted": "■",
}


def footer(result: TurnResult, memory: Memory | None = None, note: str | None = None) -> str:
    """``model · thread · tokens in/out · N facts injected · project`` (plus the status if
    not ok, with ``memory`` in review mode what waits for review: ``review_note``, then
    ``note``)."""
    facts = result.facts_injected
    parts = [
        result.model,
        f"thread {result.thread}",
        f"{result.usage.input_tokens} in / {result.usage.output_tokens} out tokens",
        f"{facts} fact{'' if facts == 1 else 's'} injected",
        *([f"project {result.project}"] if result.project else []),
    ]
    if result.status != "ok":
        parts.append(result.status)
    review = review_note(memory, result.thread) if memory is not None else None
    parts.extend(part for part in (review, note) if part)
    return " · ".join(parts)


def review_note(memory: Memory, thread: str) -> str | None:
    """``memory: review mode — …`` when review mode is on and something waits for it: the
    thread's queued fold (it becomes a proposal, not facts, after the debounce) and the
    proposals already pending; None otherwise (and when memory cannot be read: the footer
    is no place for that error)."""
    try:
        if not memory.review.enabled:
            return None
        queued = memory.reader.is_queued(thread)
        pending = memory.pending_count()
    except Exception:  # a locked or damaged journal: %memory status says so, not the footer
        return None
    says = []
    if queued:
        says.append("this turn's fold will wait for review")
    if pending:
        verb = "awaits" if pending == 1 else "await"
        says.append(f"{pending} change{'s' * (pending != 1)} {verb} review")
    if not says:
        return None
    return f"memory: review mode — {'; '.join(says)} (%memory pending)"


def subagent_line(event: dict[str, Any], markdown: bool = False) -> str:
    """``✓ sub-agent describe xs — done``; with ``markdown``, the description in bold and
    every untrusted piece (description, error) escaped so it reads literally."""
    status = event["status"]
    lit = escape_markdown if markdown else _one_line
    bold = "**" if markdown else ""
    what = f"sub-agent {bold}{lit(event['description'])}{bold}"
    if status == "running":
        state = f"turn {event['turn']}/{event['max_turns']}"
    elif status == "timed_out":
        state = "timed out"
    elif status in ("failed", "interrupted") and event.get("error"):
        state = f"{status}: {lit(event['error'])}"
    else:
        state = status
    return f"{_SUBAGENT_MARKS.get(status, '◦')} {what} — {state}"


def tool_line(event: dict[str, Any], markdown: bool = False) -> str:
    """``→ describe_variable(name="orders")``; in Markdown, as a code span. Arguments are
    summarised (``propose_cell(code: 12 lines)``): code shows once, where it runs or lands."""
    call = f"{event['name']}({summarize_arguments(event['arguments'])})"
    return f"→ {code_span(clean_text(call))}" if markdown else f"→ {_one_line(call)}"


def summarize_arguments(arguments: object, width: int = ARGUMENT_WIDTH) -> str:
    """A tool call's JSON arguments as ``key="value"`` pairs, each at most ``width``
    characters; code, and text of several lines, as ``key: N lines`` (the code shows in
    full where it runs or lands). Not JSON: the text, cut."""
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        return _cut(" ".join(str(arguments).split()), width)
    parts = []
    for key, value in parsed.items():
        if isinstance(value, str) and (key == "code" or "\n" in value.strip("\n")):
            lines = value.strip("\n").count("\n") + 1
            parts.append(f"{key}: {lines} line{'s' * (lines != 1)}")
        else:
            parts.append(f"{key}={_cut(json.dumps(value, ensure_ascii=False), width)}")
    return ", ".join(parts)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _one_line(text: object) -> str:
    return " ".join(clean_text(text).split())


def summary_line(event: dict[str, Any]) -> str:
    """A ``summary`` or ``shortened`` event: what the model's view lost to fit its window."""
    if event["type"] == "shortened":
        n = event["results"]
        results = "result" if n == 1 else "results"
        return f"↺ shortened {n} earlier tool {results} of this turn to fit the context window"
    return f"↺ summarized {event['messages']} earlier messages ({event['trigger']} trigger)"


def nest_fences(text: str) -> str:
    """``text`` with each fenced block that holds fences of its own (```` ```text ```` inside
    a ```` ```markdown ```` block, as a model writes an example) given a longer outer fence,
    so the inner ones read as text. A fence with an info string opens a block; a bare one
    closes the innermost. Unchanged when that reading does not balance (a reply still
    streaming, a lone ```` ```text ```` line inside code): CommonMark's own reading stands."""
    lines = text.split("\n")
    stack: list[list[int]] = []  # [line, ticks, longest fence inside] of each open block
    rewrite: list[tuple[int, int, int]] = []  # (opening line, closing line, ticks)
    for i, line in enumerate(lines):
        match = _FENCE_LINE.match(line)
        if match is None:
            continue
        ticks = len(match.group(1))
        if match.group(2) or not stack:
            stack.append([i, ticks, 0])
        elif ticks >= stack[-1][1]:
            start, opened, inner = stack.pop()
            if stack:
                stack[-1][2] = max(stack[-1][2], opened, ticks, inner)
            elif inner >= opened:
                rewrite.append((start, i, inner + 1))
    if stack or not rewrite:
        return text
    for start, close, ticks in rewrite:
        for i in (start, close):
            lines[i] = re.sub(r"`{3,}", "`" * ticks, lines[i], count=1)
    return "\n".join(lines)


class _Segment:
    """One display of a turn: its progress lines, and the handle that updates it."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []  # (Markdown, plain text) of each line
        self.handle: Any = None


class TurnView:
    """The cell's live output for one turn; with ``memory``, the footer says what waits for
    review (``review_note``).

    A block shown mid-turn (``show_block``: the code ``run_code`` runs) closes the display
    so far; the code's own output follows it, and the rest of the turn (its answer and
    footer) goes into a new display below: the cell reads in the order things happened."""

    def __init__(self, memory: Memory | None = None) -> None:
        self.memory = memory
        self._segment = _Segment()
        self._subagents: dict[str, tuple[_Segment, int]] = {}  # run id -> its line
        self.reply = ""
        self.footer = ""
        self.notes: list[str] = []  # what memory's fold of this turn did (``note``)
        self._shown = False
        self._last_update = 0.0

    @property
    def lines(self) -> list[tuple[str, str]]:
        """The progress lines of the display in use (earlier displays keep theirs)."""
        return self._segment.lines

    def show(self) -> None:
        self._shown = True
        self._display()

    def show_block(self, markdown: str) -> None:
        """Show ``markdown`` (sanitized) below the turn so far; the turn goes on below it."""
        from IPython.display import display

        if self._segment.handle is not None:
            self._segment.handle.update(self._render(self._segment, live=False))
        display(SafeMarkdown(markdown))
        self._segment = _Segment()
        self.reply = ""

    def output(self) -> SafeMarkdown:
        """The cell's display object: the progress list, the reply and the footer, each
        rendered on its own to sanitized HTML, and the same as plain text."""
        return self._render(self._segment, live=True)

    def _render(self, segment: _Segment, live: bool) -> SafeMarkdown:
        blocks, plain = [], []
        if segment.lines:
            blocks.append("\n".join(f"- {md}" for md, _ in segment.lines))
            plain.append("\n".join(f"- {text}" for _, text in segment.lines))
        if live:
            blocks.append(nest_fences(self.reply) or "…")
            plain.append(self.reply or "…")
            if self.footer:
                blocks.append(f"---\n\n*{escape_markdown(self.footer)}*")
                plain.append(f"---\n{self.footer}")
            for note in self.notes:
                blocks.append(f"*{escape_markdown(note)}*")
                plain.append(note)
        return SafeMarkdown(blocks, plain="\n\n".join(plain), separator="\n")

    def markdown(self) -> str:
        """The turn as (escaped) Markdown source, for logs and tests."""
        return "\n\n".join(self.output().blocks)

    def text(self) -> str:
        """The turn as plain text (what ``text/plain`` holds)."""
        return repr(self.output())

    def on_text(self, delta: str) -> None:
        self.reply += delta
        if time.monotonic() - self._last_update >= THROTTLE:
            self.refresh()

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "subagent":
            line = (subagent_line(event, markdown=True), subagent_line(event))
            if event["id"] in self._subagents:
                segment, index = self._subagents[event["id"]]
                segment.lines[index] = line
                if segment is not self._segment and segment.handle is not None:
                    segment.handle.update(self._render(segment, live=False))
            else:
                self._subagents[event["id"]] = (self._segment, len(self.lines))
                self.lines.append(line)
        elif kind == "tool":
            self.lines.append((tool_line(event, markdown=True), tool_line(event)))
            self.reply = ""
        elif kind in ("summary", "shortened"):
            self.lines.append((summary_line(event), summary_line(event)))
        self.refresh()

    def finish(self, result: TurnResult | None, note: str | None = None) -> None:
        if result is not None:
            self.reply = result.reply
            self.footer = footer(result, self.memory, note)
        self.refresh()

    def note(self, text: str) -> None:
        """Add a line below the footer, redrawn in place (by the memory fold worker, when
        this turn's fold lands: ``fold_notice``)."""
        self.notes.append(text)
        self.refresh()

    def refresh(self) -> None:
        if not self._shown:
            return
        if self._segment.handle is None:
            self._display()
        else:
            self._segment.handle.update(self.output())
        self._last_update = time.monotonic()

    def _display(self) -> None:
        from IPython.display import display

        self._segment.handle = display(self.output(), display_id=True)


class TerminalTurnView:
    """The turn for terminal IPython, which cannot redraw what it printed: progress lines
    and the reply are written as they come, the footer once at the end."""

    def __init__(self, memory: Memory | None = None) -> None:
        self.memory = memory
        self.reply = ""  # streamed since the last tool call
        self._statuses: dict[str, str] = {}  # sub-agent run id -> last status printed
        self._at_line_start = True

    def show(self) -> None:
        """Nothing to show before the first token."""

    def show_block(self, markdown: str) -> None:
        """Print ``markdown`` (control characters removed) where the turn has got to."""
        self._line(markdown)

    def on_text(self, delta: str) -> None:
        self.reply += delta
        self._write(delta)

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "subagent":
            if self._statuses.get(event["id"]) == event["status"]:
                return  # a terminal shows a run's status changes, not every turn
            self._statuses[event["id"]] = event["status"]
            self._line(subagent_line(event))
        elif kind == "tool":
            self._line(tool_line(event))
            self.reply = ""
        elif kind in ("summary", "shortened"):
            self._line(summary_line(event))

    def finish(self, result: TurnResult | None, note: str | None = None) -> None:
        if result is not None:
            if result.reply.startswith(self.reply):
                self._write(result.reply[len(self.reply) :])
            else:  # not what was streamed (a reply that came whole): write it out
                self._line(result.reply)
            self._line(f"---\n{footer(result, self.memory, note)}")
        elif not self._at_line_start:
            self._write("\n")

    def _line(self, text: str) -> None:
        self._write(("" if self._at_line_start else "\n") + text + "\n")

    def _write(self, text: str) -> None:
        text = clean_text(text)  # no ESC sequence from the model reaches the terminal
        if text:
            sys.stdout.write(text)
            sys.stdout.flush()
            self._at_line_start = text.endswith("\n")


def turn_view(shell: Any, memory: Memory | None = None) -> TurnView | TerminalTurnView:
    """The live view that suits ``shell``'s frontend, its footer reading ``memory`` (by
    default the shell's session memory, the one ``%%agent``'s agents use)."""
    if memory is None:
        from .session import get_session

        memory = get_session(shell).memory
    terminal = any(c.__name__ == "TerminalInteractiveShell" for c in type(shell).__mro__)
    return TerminalTurnView(memory) if terminal else TurnView(memory)
