"""``deerflow-nb mcp --http``: streamable HTTP on 127.0.0.1, behind a bearer token.

Memory holds what a user told their agents, so the HTTP door is this machine's only and
asks for a secret: the server binds 127.0.0.1, answers only a ``Host`` naming that address
and port (a page that rebinds its DNS name to 127.0.0.1 still sends its own name: 421) and
no ``Origin`` but its own (a browser page's request: 403), and refuses any request without
``Authorization: Bearer <token>`` (401). The token is generated per run and printed, or
taken from ``DEERFLOW_NB_MCP_TOKEN`` for scripted use.
"""

from __future__ import annotations

import hmac
import os
import secrets
import socket
import sys
from typing import Any

from ..ports import bind_failure

TOKEN_ENV = "DEERFLOW_NB_MCP_TOKEN"
PATH = "/mcp"
LOOPBACK = "127.0.0.1"

Scope = dict[str, Any]


def token_from_env() -> str | None:
    """The token the environment sets, or None (then ``serve_http`` makes one)."""
    given = os.environ.get(TOKEN_ENV, "").strip()
    return given or None


class Guard:
    """ASGI middleware: Host, Origin and the bearer token checked before the MCP app."""

    def __init__(self, app: Any, token: str, port: int) -> None:
        self.app = app
        self.hosts = {f"{LOOPBACK}:{port}".encode(), f"localhost:{port}".encode()}
        self.origins = {b"http://" + host for host in self.hosts}
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":  # no websockets; lifespan is off
            return
        headers: dict[bytes, bytes] = {}
        for key, value in scope.get("headers") or ():
            headers.setdefault(key.lower(), value)  # the first of a repeated header
        if headers.get(b"host") not in self.hosts:
            return await _refuse(send, 421, "this server answers only on its 127.0.0.1 address")
        origin = headers.get(b"origin")
        if origin is not None and origin not in self.origins:
            return await _refuse(send, 403, "requests from web pages are refused")
        if not hmac.compare_digest(headers.get(b"authorization", b""), self.expected):
            return await _refuse(send, 401, "a bearer token is required", bearer=True)
        if scope.get("path") not in (PATH, PATH + "/"):
            return await _refuse(send, 404, f"the MCP endpoint is {PATH}")
        await self.app(scope, receive, send)


async def _refuse(send: Any, status: int, message: str, *, bearer: bool = False) -> None:
    body = message.encode() + b"\n"
    headers = [(b"content-type", b"text/plain; charset=utf-8")]
    headers.append((b"content-length", str(len(body)).encode()))
    if bearer:
        headers.append((b"www-authenticate", b'Bearer realm="deerflow-nb"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def serve_http(server: Any, port: int, token: str | None) -> None:
    """Serve ``server`` on 127.0.0.1:``port`` (0: a free one) until interrupted, after
    printing the URL and the token a client needs."""
    import uvicorn

    from .sdk import http_sessions

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((LOOPBACK, port))
    except OSError as exc:  # another server has the port: one line, not errno 98
        sock.close()
        raise ValueError(bind_failure(exc, LOOPBACK, port)) from None
    sock.listen(128)  # before the URL is printed: a client may connect at once (backlog)
    port = sock.getsockname()[1]
    hosts = [f"{LOOPBACK}:{port}", f"localhost:{port}"]
    sessions = http_sessions(server, hosts, [f"http://{h}" for h in hosts])
    if token is None:
        token = secrets.token_urlsafe(32)
        shown = token
    else:
        shown = f"(from ${TOKEN_ENV})"
    print(f"deerflow-nb MCP server: http://{LOOPBACK}:{port}{PATH}", flush=True)
    print(f"token: {shown}", flush=True)
    print("send it as the header  Authorization: Bearer <token>", file=sys.stderr, flush=True)
    app = Guard(sessions.handle_request, token, port)
    config = uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False)
    async with sessions.run():
        await uvicorn.Server(config).serve(sockets=[sock])
