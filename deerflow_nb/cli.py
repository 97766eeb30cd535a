"""``deerflow-nb``: the inspector, the loopback offline server, and memory chores from a shell."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .memory import Memory


def _memory(home: str | None) -> Memory:
    from .memory import Memory

    return Memory(home)


def _cmd_fold(args: argparse.Namespace) -> int:
    mem = _memory(args.home)
    try:
        if args.rebuild:
            mem.recover()
            print(f"rebuilt {mem.path} from the journal's last version")
        report = mem.flush(timeout=args.timeout)
        print(report)
    finally:
        mem.close()
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    mem = _memory(args.home)
    try:
        print(json.dumps(mem.status(), indent=2, default=str))
    finally:
        mem.close()
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    mem = _memory(args.home)
    try:
        print(f"exported to {mem.export(args.path)}")
    finally:
        mem.close()
    return 0


def _cmd_import(args: argparse.Namespace) -> int:
    mem = _memory(args.home)
    try:
        print(f"imported {mem.import_(args.path)} facts from {args.path}")
    finally:
        mem.close()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="deerflow-nb", description="DeerFlow-style memory for Jupyter: tools for the shell."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("inspect", help="open the Streamlit memory inspector", add_help=False)
    sub.add_parser(
        "serve-offline", help="serve the offline model over OpenAI's HTTP API", add_help=False
    )

    def with_home(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--home", help="home folder (default: $DEERFLOW_NB_HOME or ~/.deerflow_nb)")
        return p

    fold = with_home(sub.add_parser("fold", help="fold every pending thread into memory now"))
    fold.add_argument("--rebuild", action="store_true", help="restore memory.json from the journal")
    fold.add_argument("--timeout", type=float, default=None, help="seconds to wait at most")
    fold.set_defaults(func=_cmd_fold)
    with_home(sub.add_parser("status", help="queue, last fold, last error, paths")).set_defaults(
        func=_cmd_status
    )
    export = with_home(sub.add_parser("export", help="write memory.json to PATH"))
    export.add_argument("path")
    export.set_defaults(func=_cmd_export)
    imp = with_home(sub.add_parser("import", help="import a (DeerFlow) memory.json"))
    imp.add_argument("path")
    imp.set_defaults(func=_cmd_import)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``deerflow-nb`` command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "inspect":
        from .inspector.launch import inspect_main

        return inspect_main(argv[1:])
    if argv and argv[0] == "serve-offline":
        from .llm.server import serve_main

        return serve_main(argv[1:])
    args = build_parser().parse_args(argv)
    from .config import ConfigError

    try:
        return args.func(args)
    except (ConfigError, OSError, ValueError, KeyError) as exc:
        print(f"deerflow-nb: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
