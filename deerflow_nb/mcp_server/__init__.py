"""``deerflow-nb mcp``: the user's memory for other agents (Claude Code, Cursor, DeerFlow).

stdio by default (the client starts the command), ``--http`` for streamable HTTP on
127.0.0.1 behind a bearer token (``http.py``). The project a call defaults to is
``--project``, else ``DEERFLOW_NB_PROJECT`` or config.yaml's ``project:``, else the one the
working directory belongs to (``projects.find_project``); ``--pin`` confines every call to
it. Nothing here is imported by
``%load_ext deerflow_nb``: the ``mcp`` SDK loads only when this command runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from ..ports import port_number

EPILOG = """\
Tools: search_memory, recall, remember, list_facts, forget, add_messages, each with an
optional project (with --pin, only the server's). Resources: memory://profile and
memory://projects/NAME.
With --http the server binds 127.0.0.1 only, prints its URL and a bearer token (or
takes one from $DEERFLOW_NB_MCP_TOKEN), and refuses a request without the token (401),
from a web page's Origin (403) or naming another Host (421). See docs/mcp.md.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="deerflow-nb mcp",
        description="Serve long-term memory to MCP clients (stdio unless --http).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--home", help="home folder (default: $DEERFLOW_NB_HOME or ~/.deerflow_nb)")
    parser.add_argument("--project", help="the project calls default to (default: see below)")
    parser.add_argument(
        "--pin",
        action="store_true",
        help="serve that project only: refuse a call or resource naming another",
    )
    parser.add_argument("--http", action="store_true", help="streamable HTTP on 127.0.0.1")
    parser.add_argument(
        "--port", type=port_number, default=0, help="HTTP port (default: a free one)"
    )
    return parser


def mcp_main(argv: Sequence[str] | None = None) -> int:
    """Serve until the client hangs up (stdio) or the process is interrupted (HTTP)."""
    args = build_parser().parse_args(argv)
    if args.home and not Path(args.home).expanduser().is_dir():
        raise ValueError(f"no home folder {args.home}; check the path (or omit --home)")
    if args.project is not None:  # refused before memory opens (projects.check_project_name)
        from ..projects import check_project_name

        try:
            check_project_name(args.project)
        except ValueError as exc:
            raise ValueError(f"--project: {exc}") from None
    try:
        from . import sdk
    except ImportError:
        raise ValueError(
            "the MCP server needs the mcp package: pip install 'deerflow-nb[mcp]'"
        ) from None
    import anyio

    from ..memory import Memory
    from ..projects import find_project
    from .service import MemoryService

    memory = Memory(args.home).start()
    try:
        project = find_project(args.project or memory.settings.project).name
        server = sdk.build_server(MemoryService(memory, project, pinned=args.pin))
        if args.http:
            from .http import serve_http, token_from_env

            anyio.run(serve_http, server, args.port, token_from_env())
        else:
            anyio.run(sdk.serve_stdio, server)
    except KeyboardInterrupt:
        pass
    finally:
        memory.close()
    return 0
