"""``deerflow-nb``: the inspector, the loopback offline server, and memory chores from a shell.

Memory and journal text (errors a model server sent, thread ids, fact text) is printed
through ``clean_text`` (``_say``), so no control or escape sequence reaches the terminal.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .memory import Memory, MemoryReader

Command = Callable[[argparse.Namespace], int]


def _say(text: object, *, file: object = None) -> None:
    """Print untrusted text without control, bidi or zero-width characters."""
    from .untrusted import clean_text

    print(clean_text(text), file=file or sys.stdout)


def _check_home(home: str | None) -> None:
    """Refuse a home folder that does not exist, named by ``--home`` or, without it, by
    ``$DEERFLOW_NB_HOME``: for a command that does not create a home it is a typo, and
    opening it would make an empty home there (or export an empty memory)."""
    from .config import HOME_ENV

    if home:
        if not Path(home).expanduser().is_dir():
            raise ValueError(f"no home folder {home}; check the path (or omit --home)")
        return
    named = os.environ.get(HOME_ENV)
    if named and not Path(named).expanduser().is_dir():
        raise ValueError(
            f"no home folder {named} (${HOME_ENV}); check the path (or unset {HOME_ENV})"
        )


def _with_memory(
    action: Callable[[Memory, argparse.Namespace], int | None], *, creates_home: bool = False
) -> Command:
    """A subcommand that opens the home's Memory, acts, and always closes it; its exit code
    is the action's (0 when it returns None). Only a command that writes memory may create
    a missing home (``--home`` or ``$DEERFLOW_NB_HOME``): for the others a missing folder
    is a typo, not a new home (``_check_home``)."""

    def command(args: argparse.Namespace) -> int:
        from .memory import Memory

        if not creates_home:
            _check_home(args.home)
        mem = Memory(args.home)
        try:
            return action(mem, args) or 0
        finally:
            mem.close()

    return command


def _with_reader(action: Callable[[MemoryReader, argparse.Namespace], None]) -> Command:
    """A subcommand that only reads: the home opened read-only (``memory.open_reader``), so
    it creates, migrates and writes nothing there, and works on a read-only disk."""

    def command(args: argparse.Namespace) -> int:
        from .memory import open_reader

        _check_home(args.home)
        with open_reader(args.home) as reader:
            action(reader, args)
        return 0

    return command


def _fold(mem: Memory, args: argparse.Namespace) -> int:
    if args.rebuild:
        mem.history.recover()
        _say(f"rebuilt {mem.path} from the journal's last version")
    report = mem.flush(timeout=args.timeout)
    print(
        f"folded {len(report.folded)}, proposed for review {len(report.proposed)}, "
        f"failed {len(report.failed)}, still queued {report.pending}"
    )
    for thread, error in report.failed.items():
        _say(f"  {thread}: {error}")
    from .memory import fold_summary

    # what a fold left out, and why (a reply whose items were all malformed keeps nothing)
    for fold in mem.history.folds(limit=len(report.folded) + len(report.proposed)):
        if fold.get("left_out"):
            _say(f"  {fold_summary(fold)}")
    return 1 if report.failed else 0


def _status(reader: MemoryReader, args: argparse.Namespace) -> None:
    if args.json:
        _say(json.dumps(reader.status(), indent=2, default=str))  # ASCII: controls are \u escapes
        return
    from .notebook.views.status import StatusView

    _say(repr(StatusView(reader.status())))


def _export(reader: MemoryReader, args: argparse.Namespace) -> None:
    _say(f"exported to {reader.export(args.path, overwrite=args.force)}")


def _import(mem: Memory, args: argparse.Namespace) -> None:
    from .notebook.views.table import count_of

    mem.transfer.read_import(args.path)  # a broken file is said before any confirmation
    held = len(mem.data.get("facts", []))
    if held and not args.yes:
        raise ValueError(
            f"import replaces the {count_of(held, 'fact')} in {mem.path}; add --yes to confirm "
            "(versions keep the current state for rollback)"
        )
    _say(mem.import_(args.path).describe(f"from {args.path}"))


def _migrate(args: argparse.Namespace) -> int:
    """Bring the home's journal.db to this version's schema: a writer's open does it, and
    readers (the inspector, ``status``, ``export``) never do it themselves."""
    from .memory import Memory, open_reader

    _check_home(args.home)
    with open_reader(args.home) as reader:
        path, before = reader.settings.journal_path, set(reader.migrations())
    if not path.is_file():
        raise ValueError(f"no journal at {path}: nothing to migrate (check --home)")
    with Memory(args.home) as mem:
        after = mem.reader.migrations()
    ran = [name for name in after if name not in before]
    _say(f"{path}: applied {', '.join(ran)}" if ran else f"{path}: up to date")
    return 0


def _doctor(args: argparse.Namespace) -> int:
    """Probe the configured models and print the table; 2 (one line) when the server
    cannot be reached or no model is usable, 1 when the checks ran and found a setting that
    cannot be used as written (``DoctorReport.exit_status``), else 0."""
    from .config import load_settings
    from .doctor.checks import run_doctor
    from .llm.base import ModelError

    _check_home(args.home)
    try:
        report = run_doctor(load_settings(args.home))
    except ModelError as exc:
        print(f"deerflow-nb doctor: {exc}", file=sys.stderr)
        return 2
    print(report)
    return report.exit_status


def _team_init(args: argparse.Namespace) -> int:
    """Create or upgrade the shared store's schema and policies at URL."""
    from .shared.team import init

    ran = init(args.url)
    _say(f"shared store ready: applied {', '.join(ran)}" if ran else "shared store up to date")
    return 0


def _team_add(args: argparse.Namespace) -> int:
    """Make ROLE a member of PROJECT; a new role's password comes from the environment."""
    import os

    from .shared.team import add_member

    url, project, role = _member_target(args.target, args.url)
    password = os.environ.get("DEERFLOW_NB_MEMBER_PASSWORD")
    _say(add_member(url, project, role, read_only=args.read_only, password=password))
    return 0


def _member_target(target: list[str], url: str | None) -> tuple[str, str, str]:
    """``team add``'s (URL, PROJECT, ROLE): DESIGN.md's ``URL PROJECT ROLE``, or
    ``PROJECT ROLE --url URL``."""
    if len(target) == 3 and url is None:
        return target[0], target[1], target[2]
    if len(target) == 2 and url is not None:
        return url, target[0], target[1]
    raise ValueError("team add needs URL PROJECT ROLE (or PROJECT ROLE --url URL)")


def _team_limit(args: argparse.Namespace) -> int:
    """Set how many of PROJECT's facts its members may remove in one UTC day."""
    from .shared.team import set_bound

    _say(set_bound(args.url, args.project, args.removals, args.share))
    return 0


def _team_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    team = sub.add_parser("team", help="set up team memory on PostgreSQL (docs/team.md)")
    chores = team.add_subparsers(dest="team_command", required=True, metavar="COMMAND")
    init = chores.add_parser("init", help="create or upgrade the schema and its policies")
    init.add_argument("url", help="postgresql://ROLE@HOST:PORT/DATABASE (password: PGPASSWORD)")
    init.set_defaults(func=_team_init)
    add = chores.add_parser(
        "add",
        help="make ROLE a member of PROJECT (a new role's password: $DEERFLOW_NB_MEMBER_PASSWORD)",
    )
    add.add_argument("target", nargs="+", metavar="URL PROJECT ROLE")
    add.add_argument("--url", help="the shared store (instead of the first argument)")
    add.add_argument("--read-only", action="store_true", help="may read, not change")
    add.set_defaults(func=_team_add)
    limit = chores.add_parser(
        "limit",
        help="let PROJECT's members remove at most max(N, --share of its facts) a UTC day",
    )
    limit.add_argument("project")
    limit.add_argument("removals", type=_removals, metavar="N")
    limit.add_argument("--share", type=float, help="a share of the project's facts, 0 to 1")
    limit.add_argument("--url", required=True, help="the shared store, as the project's owner")
    limit.set_defaults(func=_team_limit)


MAX_REMOVALS = 2**31 - 1  # deerflow.projects.max_removals is a PostgreSQL integer


def _removals(text: str) -> int:
    """``team limit``'s N: a count of facts that the server's column can hold."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_REMOVALS:
        raise argparse.ArgumentTypeError(
            f"must be a count of facts from 0 to {MAX_REMOVALS}, got {text!r}"
        )
    return value


def _seconds(text: str) -> float:
    """A --timeout: a number of seconds, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds, 0 or more, got {text!r}")
    return value


def _sync_report(report: object) -> int:
    """Print a team sync's report (its markdown, plain) and whether it met a problem."""
    _say(report)
    return 1 if report.problems else 0  # type: ignore[attr-defined]


def _sharing_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    with_home: Callable[[argparse.ArgumentParser], argparse.ArgumentParser],
) -> None:
    """``deerflow-nb share``, ``join`` and ``sync`` (memory/sharing.py, docs/team.md)."""
    for name, about in (
        ("share", "share PROJECT's memory with the team's PostgreSQL at --url"),
        ("join", "join the team's PROJECT on PostgreSQL at --url and pull its facts"),
    ):
        p = with_home(sub.add_parser(name, help=about))
        p.add_argument("project")
        p.add_argument("--url", required=True, help="postgresql://ROLE@HOST:PORT/DATABASE")
        p.set_defaults(
            func=_with_memory(
                lambda m, a, name=name: _sync_report(getattr(m, name)(a.project, a.url)),
                creates_home=True,
            )
        )
    sync = with_home(
        sub.add_parser("sync", help="send changes to shared projects, apply the team's")
    )
    sync.add_argument("--timeout", type=_seconds, default=None, help="seconds to pull at most")
    sync.set_defaults(func=_with_memory(lambda m, a: _sync_report(m.sync(a.timeout))))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="deerflow-nb", description="DeerFlow-style memory for Jupyter: tools for the shell."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser(
        "inspect", help="open the Streamlit memory inspector (this machine only)", add_help=False
    )
    sub.add_parser(
        "serve-offline", help="serve the offline model over OpenAI's HTTP API", add_help=False
    )
    sub.add_parser(
        "mcp", help="serve memory to MCP clients (stdio, or --http on 127.0.0.1)", add_help=False
    )

    def with_home(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--home", help="home folder (default: $DEERFLOW_NB_HOME or ~/.deerflow_nb)")
        return p

    fold = with_home(sub.add_parser("fold", help="fold every pending thread into memory now"))
    fold.add_argument("--rebuild", action="store_true", help="restore memory.json from the journal")
    fold.add_argument("--timeout", type=_seconds, default=None, help="seconds to wait at most")
    fold.set_defaults(func=_with_memory(_fold))
    status = with_home(sub.add_parser("status", help="queue, last fold, last error, paths"))
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    status.set_defaults(func=_with_reader(_status))
    export = with_home(sub.add_parser("export", help="write memory.json to PATH"))
    export.add_argument("path")
    export.add_argument("--force", action="store_true", help="overwrite an existing file")
    export.set_defaults(func=_with_reader(_export))
    imp = with_home(sub.add_parser("import", help="import a (DeerFlow) memory.json"))
    imp.add_argument("path")
    imp.add_argument("--yes", action="store_true", help="replace facts already in memory")
    imp.set_defaults(func=_with_memory(_import, creates_home=True))
    with_home(
        sub.add_parser("migrate", help="bring journal.db to this version's schema")
    ).set_defaults(func=_migrate)
    with_home(
        sub.add_parser(
            "doctor",
            help="check the configured models: reachable, streaming, tool calls, JSON mode, "
            "extraction, context window",
        )
    ).set_defaults(func=_doctor)
    _sharing_parser(sub, with_home)
    _team_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``deerflow-nb`` command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "inspect":
        from .inspector.launch import inspect_main

        return inspect_main(argv[1:])
    if argv and argv[0] == "serve-offline":
        from .offline.server import serve_main

        return serve_main(argv[1:])
    from .config import ConfigError
    from .memory import MemoryFileError

    try:
        if argv and argv[0] == "mcp":
            from .mcp_server import mcp_main

            return mcp_main(argv[1:])
        args = build_parser().parse_args(argv)
        return args.func(args)
    except (ConfigError, MemoryFileError, OSError, ValueError, LookupError) as exc:
        _say(f"deerflow-nb: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
