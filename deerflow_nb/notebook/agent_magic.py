"""``%%agent``: the cell body is the message; the reply streams into the cell.

``%%agent [-t/--thread NAME] [--new] [-m/--model ID] [--no-memory] [--no-subagents]
[-o/--output VAR] [-i/--interpolate] [--allow-code]``

Threads: a cell without ``-t`` continues the thread the previous ``%%agent`` cell of
this notebook used ("default" at first). ``-t NAME`` switches to NAME, resuming it from
the journal if it exists (also after a kernel restart). ``--new`` starts a fresh
thread: NAME (or the current thread's name) if unused, else the first free NAME-2,
NAME-3, ...; later cells without ``-t`` continue it.

Parsing (line → :class:`AgentArgs`, one-line ``UsageError``) is kept apart from
handling (:func:`handle_agent`).
"""

from __future__ import annotations

import argparse
import keyword
import re
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class, no_var_expand

from ..config import ConfigError
from ..llm.base import ModelError
from .agent_display import TerminalTurnView, TurnView, show_markdown, turn_view
from .session import get_session

if TYPE_CHECKING:
    from ..agent.core import TurnResult

PROG = "%%agent"
DEFAULT_THREAD = "default"
_INTERPOLATION = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class AgentArgs:
    thread: str | None = None
    new: bool = False
    model: str | None = None
    no_memory: bool = False
    no_subagents: bool = False
    output: str | None = None
    interpolate: bool = False
    allow_code: bool = False


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises one-line UsageErrors instead of exiting the kernel."""

    def error(self, message: str) -> NoReturn:
        usage = " ".join(self.format_usage().split()[1:])
        raise UsageError(f"{PROG}: {message}; usage: {usage}")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise UsageError(f"{PROG}: {(message or 'see the flags above').strip()}")


def _parser() -> _Parser:
    parser = _Parser(
        prog=PROG,
        add_help=False,
        exit_on_error=False,
        description="Ask the lead agent; the cell's body is the message.",
    )
    add = parser.add_argument
    add("-h", "--help", action="store_true", help="show this help and run nothing")
    add("-t", "--thread", metavar="NAME", help="the thread to continue (default: the last)")
    add("--new", action="store_true", help="start a new thread, NAME-2, NAME-3, …")
    add("-m", "--model", metavar="ID", help="the model for this cell ('offline' needs no key)")
    add(
        "--no-memory",
        action="store_true",
        help="inject no memory and never fold this turn into memory (the journal keeps it)",
    )
    add("--no-subagents", action="store_true", help="do not offer the task tool")
    add("-o", "--output", metavar="VAR", help="also keep the reply in VAR")
    add("-i", "--interpolate", action="store_true", help="replace {name} with variables")
    add("--allow-code", action="store_true", help="let the agent run code in this kernel")
    return parser


def parse_agent_line(line: str) -> AgentArgs | None:
    """The magic's line as typed arguments, or None when help was printed; a
    ``UsageError`` naming the fix otherwise."""
    try:
        tokens = shlex.split(line)
    except ValueError:
        raise UsageError(f"{PROG}: unbalanced quote in the line; close the quote") from None
    parser = _parser()
    try:
        ns = parser.parse_args(tokens)
    except argparse.ArgumentError as exc:
        raise UsageError(f"{PROG}: {exc}") from None
    if ns.help:
        print(parser.format_help())
        return None
    if ns.output is not None and (not ns.output.isidentifier() or keyword.iskeyword(ns.output)):
        raise UsageError(f"{PROG}: -o needs a Python variable name, got '{ns.output}'")
    if ns.thread is not None and (not ns.thread.strip() or any(c.isspace() for c in ns.thread)):
        raise UsageError(f"{PROG}: -t needs a thread name without spaces, got '{ns.thread}'")
    del ns.help
    return AgentArgs(**vars(ns))


def interpolate(text: str, namespace: dict[str, Any]) -> str:
    """Replace ``{name}`` with the variable's value, once; ``{{``/``}}`` give literal braces.

    Other braces (``{1: 2}``, ``f"{x!r}"``) are left exactly as written.
    """

    def substitute(match: re.Match[str]) -> str:
        token = match.group(0)
        if token in ("{{", "}}"):
            return token[0]
        name = match.group(1)
        if name not in namespace:
            raise UsageError(
                f"{PROG} -i: no variable named '{name}'; define it, or write {{{{{name}}}}} "
                "for literal braces"
            )
        return str(namespace[name])

    return _INTERPOLATION.sub(substitute, text)


def handle_agent(shell: Any, args: AgentArgs, cell: str, thread: str) -> TurnResult | None:
    """Run one turn for a parsed cell and show it; returns the ``TurnResult``."""
    message = cell.strip()
    if not message:
        raise UsageError(f"{PROG}: the cell is empty; write your message below the %%agent line")
    if args.interpolate:
        message = interpolate(message, shell.user_ns)
    try:
        agent = get_session(shell).agent(args.model)
    except (ModelError, ConfigError) as exc:
        raise UsageError(str(exc)) from None
    from ..agent.core import ThreadError
    from ..memory import MemoryFileError

    view = turn_view(shell)
    view.show()
    try:
        agent.run(
            message,
            args.thread or (re.sub(r"-\d+$", "", thread) if args.new else thread),
            on_text=view.on_text,
            on_event=view.on_event,
            use_memory=not args.no_memory,
            use_subagents=not args.no_subagents,
            new=args.new,
            allow_code=True if args.allow_code else None,
            show=show_markdown,
        )
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; the partial reply is in _agent and the turn is journaled")
    except (ModelError, MemoryFileError, ConfigError, ThreadError) as exc:
        raise UsageError(str(exc)) from None
    finally:
        _keep(shell, args, agent.last_turn, view)
    return agent.last_turn


def _keep(
    shell: Any, args: AgentArgs, result: TurnResult | None, view: TurnView | TerminalTurnView
) -> None:
    """Final display update, and the reply in ``_agent`` (and ``-o VAR``)."""
    view.finish(result)
    if result is None:
        return
    shell.user_ns["_agent"] = result.reply
    if args.output:
        shell.user_ns[args.output] = result.reply


@magics_class
class AgentMagics(Magics):
    """Registers ``%%agent``; remembers the thread the last cell used."""

    def __init__(self, shell: Any = None) -> None:
        super().__init__(shell)
        self.thread = DEFAULT_THREAD

    @no_var_expand
    @line_cell_magic
    def agent(self, line: str, cell: str | None = None) -> None:
        """Ask the lead agent; see the module docstring for the flags.

        The line form only answers ``%agent -h`` (IPython refuses ``%%agent -h`` with an
        empty body before the magic runs); the message always goes in a cell.
        """
        if cell is None and not {"-h", "--help"} & set(line.split()):
            raise UsageError(
                f"{PROG} is a cell magic: put {PROG} on the first line of a cell and your "
                f"message below it (%agent -h lists the flags)"
            )
        args = parse_agent_line(line)
        if args is None or cell is None:
            return
        result = handle_agent(self.shell, args, cell, self.thread)
        if result is not None:
            self.thread = result.thread
