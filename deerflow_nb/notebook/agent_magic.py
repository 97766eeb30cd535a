"""``%%agent``: the cell body is the message; the reply streams into the cell.

``%%agent [-t/--thread NAME] [--new] [-m/--model ID] [--no-memory] [--no-subagents]
[-o/--output VAR] [-i/--interpolate] [--allow-code] [--error]``

``-i`` replaces ``{name}`` and ``{expression}`` with its value (``{len(df)}``,
``{In[3]}``, ``{Out[3]}``, ``{Err[3]}``: ``cell_refs``); ``--error`` asks about the last
failed cell, its source and traceback (also as the line ``%agent --error``).

Threads: a cell without ``-t`` continues the thread the previous ``%%agent`` cell of
this notebook used ("default" at first); a thread belongs to its project, so another
project's "default" is another thread. ``-t NAME`` switches to NAME, resuming it from
the journal if it exists (also after a kernel restart). ``--new`` starts a fresh
thread: NAME (or the current thread's name) if unused, else the first free NAME-2,
NAME-3, ...; later cells without ``-t`` continue it.

Parsing (line → :class:`AgentArgs`, one-line ``UsageError``) is kept apart from
handling (:func:`handle_agent`).
"""

from __future__ import annotations

import builtins
import keyword
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class, no_var_expand

from .agent_display import TerminalTurnView, TurnView, turn_view
from .cell_refs import cell_errors, interpolate, last_error
from .errors import fixable_errors, usage_error
from .grammar import HelpShown, Parser, build_parser, option, split_line, switch, typed_args
from .session import get_session

if TYPE_CHECKING:
    from ..agent.core import TurnResult

PROG = "%%agent"
DESCRIPTION = "Ask the lead agent; the cell's body is the message."
DEFAULT_THREAD = "default"
REPEATED = (
    "shown again from the journal, not run: the message is unchanged and its proposed cell "
    "is already in the notebook (edit the message, or add --new, to ask again)"
)


@dataclass(frozen=True)
class AgentArgs:
    """The cell's flags, each declared once with its spelling (``grammar``)."""

    thread: str | None = option(
        "-t", "--thread", metavar="NAME", help="the thread to continue (default: the last)"
    )
    new: bool = switch("--new", help="start a new thread, NAME-2, NAME-3, …")
    model: str | None = option(
        "-m", "--model", metavar="ID", help="the model for this cell ('offline' needs no key)"
    )
    no_memory: bool = switch(
        "--no-memory",
        help="inject no memory and never fold this turn into memory (the journal keeps it)",
    )
    no_subagents: bool = switch("--no-subagents", help="do not offer the task tool")
    output: str | None = option("-o", "--output", metavar="VAR", help="also keep the reply in VAR")
    interpolate: bool = switch(
        "-i",
        "--interpolate",
        help="replace {name} or {expression} (In[n], Out[n], Err[n]) with its value",
    )
    error: bool = switch("--error", help="explain the last error, with its traceback")
    allow_code: bool = switch("--allow-code", help="let the agent run code in this kernel")
    project: str | None = option(
        "-p",
        "--project",
        metavar="NAME",
        help="run this cell in project NAME (default: the notebook's)",
    )


def agent_parser() -> Parser:
    """``%%agent``'s parser, built from :class:`AgentArgs`."""
    parser = Parser(prog=PROG, description=DESCRIPTION, add_help=False, show_usage=True)
    build_parser(parser, AgentArgs)
    return parser


# Names a notebook cannot lose: a reply stored over one breaks every later cell.
_KERNEL_NAMES = frozenset({"get_ipython", "exit", "quit", "In", "Out", "display"})


def _kernel_owns(name: str) -> bool:
    """Whether ``name`` is a builtin, a dunder or one of IPython's own names."""
    return hasattr(builtins, name) or name in _KERNEL_NAMES or name.startswith("__")


def parse_agent_line(line: str) -> AgentArgs | None:
    """The magic's line as typed arguments, or None when help was printed; a
    ``UsageError`` naming the fix otherwise."""
    try:  # %memory's splitter: a backslash (a Windows path, a thread name) kept as written
        args = typed_args(AgentArgs, agent_parser().parse_args(split_line(line, PROG)), PROG)
    except HelpShown:
        return None
    if args.output is not None and (
        not args.output.isidentifier() or keyword.iskeyword(args.output)
    ):
        raise usage_error(f"{PROG}: -o needs a Python variable name, got '{args.output}'")
    if args.output is not None and _kernel_owns(args.output):
        raise usage_error(
            f"{PROG}: -o {args.output} would replace Python's or IPython's own "
            f"{args.output}; choose another name"
        )
    if args.thread is not None and (
        not args.thread.strip() or any(c.isspace() for c in args.thread)
    ):
        raise usage_error(f"{PROG}: -t needs a thread name without spaces, got '{args.thread}'")
    if args.project is not None:
        from ..projects import check_project_name

        try:
            check_project_name(args.project)
        except ValueError as exc:
            raise usage_error(f"{PROG}: --project: {exc}") from None
    return args


def _project(name: str | None) -> str | None:
    from ..projects import check_project_name

    return check_project_name(name) if name else None


def handle_agent(shell: Any, args: AgentArgs, cell: str, thread: str) -> TurnResult | None:
    """Run one turn for a parsed cell and show it; returns the ``TurnResult``."""
    message = cell.strip()
    if not message and not args.error:
        raise UsageError(f"{PROG}: the cell is empty; write your message below the %%agent line")
    if args.interpolate:
        message = interpolate(message, shell.user_ns, cell_errors(shell))
    if args.error:
        message = "\n\n".join(part for part in (last_error(shell), message) if part)
    with fixable_errors():  # a config.yaml typo, no key for the model, a damaged journal
        session = get_session(shell)
        agent = session.agent(args.model)
        view = turn_view(shell)
        folds_before = session.notices.mark()
        name = args.thread or thread
        project = _project(args.project) or session.project.name
        earlier = None if args.new else repeated_proposal(agent, name, message, project)
    for note in session.notices.take_later():  # an earlier turn's fold, in a terminal
        print(note)
    if earlier is not None:
        return _show_again(shell, args, earlier, view)
    view.show()
    try:
        with fixable_errors():
            agent.run(
                message,
                args.thread or (_base_name(thread) if args.new else thread),
                on_text=view.on_text,
                on_event=view.on_event,
                use_memory=not args.no_memory,
                use_subagents=not args.no_subagents,
                new=args.new,
                allow_code=True if args.allow_code else None,
                show=view.show_block,
                project=project,
            )
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; the partial reply is in _agent and the turn is journaled")
    finally:
        _keep(shell, args, agent.last_turn, view)
    if agent.last_turn is not None and not args.no_memory and session.settings.memory.enabled:
        # "Memory updated: …" below the footer when the fold lands (a terminal: next cell)
        session.notices.watch(agent.last_turn.thread, folds_before, getattr(view, "note", None))
    return agent.last_turn


def thread_name_of(thread_id: str) -> str:
    """The name a journal id stands for in its project: ``analysis-3`` for ``analysis-3
    @churn`` (``Journal.thread_for`` maps it back, in that project)."""
    return thread_id.split(" @")[0]


def _base_name(thread: str) -> str:
    """The name a thread id was made from: ``analysis`` for ``analysis-3 @churn``."""
    return re.sub(r"-\d+$", "", thread_name_of(thread))


def repeated_proposal(
    agent: Any, thread: str, message: str, project: str | None = None
) -> TurnResult | None:
    """The thread's newest turn that asked exactly ``message`` (other turns may have come
    since), when it asked the same model, ended well and proposed a cell: re-running the
    cell that asked it shows that turn again rather than insert a second copy of its cell
    (the kernel cannot replace a cell the front end holds) and journal the same turn twice.
    None otherwise."""
    last = agent.journaled_turn(thread, project, asking=message)
    if last is None or last.status != "ok" or last.model != agent.model.name:
        return None
    return last if any(c["name"] == "propose_cell" for c in last.tool_calls) else None


def _show_again(
    shell: Any, args: AgentArgs, result: TurnResult, view: TurnView | TerminalTurnView
) -> TurnResult:
    """Show a repeated turn from the journal, with a footer that says so."""
    view.show()
    for call in result.tool_calls:
        view.on_event({"type": "tool", **call})
    view.finish(result, note=REPEATED)
    shell.user_ns["_agent"] = result.reply
    if args.output:
        shell.user_ns[args.output] = result.reply
    return result


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
    """Registers ``%%agent``; remembers the thread the last cell used, by name: a cell in
    another project (``--project``) continues that project's thread of the name."""

    def __init__(self, shell: Any = None) -> None:
        super().__init__(shell)
        self.thread = DEFAULT_THREAD

    @no_var_expand
    @line_cell_magic
    def agent(self, line: str, cell: str | None = None) -> None:
        """Ask the lead agent; see the module docstring for the flags.

        The line form only answers ``%agent -h`` and ``%agent --error`` (IPython refuses a
        ``%%agent`` cell with an empty body before the magic runs); a message goes in a
        cell.
        """
        if cell is None and not {"-h", "--help", "--error"} & set(line.split()):
            raise UsageError(
                f"{PROG} is a cell magic: put {PROG} on the first line of a cell and your "
                f"message below it (%agent -h lists the flags; %agent --error explains the "
                "last error)"
            )
        args = parse_agent_line(line)
        if args is None:
            return
        result = handle_agent(self.shell, args, cell or "", self.thread)
        if result is not None:
            self.thread = thread_name_of(result.thread)
