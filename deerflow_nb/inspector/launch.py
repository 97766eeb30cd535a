"""``deerflow-nb inspect``: run the inspector with ``streamlit run``, locally and quietly.

Streamlit's own command line runs in this process (no child to orphan when the
command is stopped), bound to 127.0.0.1 unless ``--host`` says otherwise, headless
(no browser is opened for you; the URL is printed), with usage statistics off and
Streamlit's developer toolbar hidden (this is a viewer, not an app under development).

What it runs is ``served.py``: the page (``app.py``) as an ``st.App`` behind the loopback
Host check of ``hosts.py``, which answers 403 to any request or websocket upgrade whose
Host header is not a loopback name, so no web page can reach it by DNS rebinding, sends
``X-Frame-Options: DENY`` and ``frame-ancestors 'none'`` so no other site can frame it,
and refuses a websocket upgrade from another origin.
Streamlit cannot do this by configuration alone: ``server.allowedHosts`` checks the
websocket only, and ``server.enableCORS``/``enableXsrfProtection`` check origins and
tokens, which a rebound page satisfies as same-origin.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from ..config import HOME_ENV
from ..ports import busy, port_in_use, port_number

APP_PATH = Path(__file__).with_name("app.py")
#: The ``st.App`` around APP_PATH that adds the loopback Host check (``hosts.py``).
SERVED_PATH = Path(__file__).with_name("served.py")


EPILOG = """\
Only this machine can use it. It binds 127.0.0.1, and it refuses (403) every
request, the page's websocket included, whose Host header is not localhost,
127.0.0.1, [::1] or the --host address: a web page cannot reach it by DNS
rebinding; no other site may frame it or open its websocket. Open it as
http://127.0.0.1:PORT or http://localhost:PORT. With --host 0.0.0.0 any IP
address is accepted as Host, never another name.

Memory and journal text is shown as text: HTML, scripts and images in a fact,
a summary or an error are not rendered, and the page fetches nothing from the
network.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="deerflow-nb inspect",
        description="Open the memory inspector (Streamlit) on this machine.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--home", help="home folder (default: $DEERFLOW_NB_HOME or ~/.deerflow_nb)")
    parser.add_argument(
        "--port",
        type=port_number,
        default=8501,
        help="port to serve on (default 8501; 0: any free one)",
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)"
    )
    return parser


def streamlit_args(host: str, port: int) -> list[str]:
    """The ``streamlit run`` arguments for the packaged app (behind its Host check)."""
    return [
        "run",
        str(SERVED_PATH),
        "--server.address",
        host,
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--client.toolbarMode",
        "viewer",
    ]


def inspect_main(argv: Sequence[str] | None = None) -> int:
    """Parse ``[--home DIR] [--port N] [--host H]`` and serve until interrupted."""
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    if args.home:
        home = Path(args.home).expanduser().resolve()
        if home.exists() and not home.is_dir():
            parser.error(f"--home {args.home} is a file, not a folder; give the home folder")
        os.environ[HOME_ENV] = str(home)
    if busy(args.host, args.port):  # Streamlit would log "Port N is not available" and stop
        print(
            f"{parser.prog}: {port_in_use(args.port, 'use --port 0 for a free one')}",
            file=sys.stderr,
        )
        return 2
    from streamlit.web.cli import main as streamlit_cli

    try:
        streamlit_cli.main(args=streamlit_args(args.host, args.port), prog_name="streamlit")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


if __name__ == "__main__":
    raise SystemExit(inspect_main())
