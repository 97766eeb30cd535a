"""TCP ports as the commands take them (``serve-offline``, ``mcp --http``, ``inspect``):
``--port``'s argparse type, and a busy port said in one line that names the fix. Standard
library only, so any command's parser may import it."""

from __future__ import annotations

import argparse
import errno
import os
import socket

#: How a command that serves on any free port by default says so.
OMIT_PORT = "omit --port for a free one"


def port_number(text: str) -> int:
    """A TCP port number (0 picks a free one), for argparse: its error is one usage line."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port from 0 to 65535")
    return port


def port_in_use(port: int, free: str = OMIT_PORT) -> str:
    """The one line for a port something else listens on; ``free`` says how to get a free one."""
    return f"port {port} is in use: {free}, or pick another"


def bind_failure(exc: OSError, host: str, port: int, free: str = OMIT_PORT) -> str:
    """One line for a failed bind: a busy port names the fix, anything else the address."""
    if exc.errno == errno.EADDRINUSE:
        return port_in_use(port, free)
    return f"cannot listen on {host}:{port} ({exc.strerror or exc}): check the address, or {free}"


def busy(host: str, port: int) -> bool:
    """Whether something already listens on ``host:port`` (a port of 0 never is)."""
    if port == 0:
        return False
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        if os.name == "posix":  # a port left in TIME_WAIT is free; a listener is not
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False
