"""The inspector answers only requests addressed to this machine by a loopback name.

Binding to 127.0.0.1 keeps other machines out, but not other web pages in the user's own
browser: a page on ``evil.example`` can make its name resolve to 127.0.0.1 (DNS
rebinding) and then talk to the inspector as a same-origin site, reading memory over the
websocket and writing through its buttons. Such a request still carries the attacker's
name in its ``Host`` header, so every HTTP request and websocket upgrade whose Host is not
``localhost``, a loopback address, or the address the inspector was told to bind is
refused with 403 before Streamlit sees it.

Streamlit's own ``server.allowedHosts`` checks only the websocket; this middleware covers
every route, and is installed by ``served.py`` (what ``deerflow-nb inspect`` runs).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
_WILDCARDS = frozenset({"", "0.0.0.0", "::"})
_REFUSAL = b"Host not allowed: open the inspector as http://127.0.0.1:PORT or http://localhost:PORT"


def host_name(header: str | None) -> str | None:
    """The host name of a ``Host`` header (lowercase, IPv6 without brackets), or None
    when it is missing or not a bare ``name[:port]``."""
    if not header or any(c in header for c in "/\\?#@ \t"):
        return None
    try:
        parts = urlsplit(f"//{header}")
        parts.port  # noqa: B018 - raises ValueError on a non-numeric or out-of-range port
    except ValueError:
        return None
    return parts.hostname or None


def host_allowed(header: str | None, bound: str | None = "127.0.0.1") -> bool:
    """Whether a request with this ``Host`` header may reach an inspector bound to ``bound``.

    Loopback names always; the bound address itself; and when bound to every interface
    (``0.0.0.0``/``::``), any IP literal (a name is what DNS rebinding needs, an address
    cannot be rebound).
    """
    name = host_name(header)
    if name is None:
        return False
    if name in LOOPBACK_NAMES:
        return True
    bound = (bound or "").strip().strip("[]").lower()
    if bound not in _WILDCARDS:
        return name == bound
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class LoopbackHostMiddleware:
    """ASGI middleware: 403 for any HTTP request or websocket upgrade with a foreign Host."""

    def __init__(self, app: ASGIApp, bound: str | None = None) -> None:
        self.app = app
        self.bound = bound

    def _bound(self) -> str:
        if self.bound is not None:
            return self.bound
        from streamlit import config

        return str(config.get_option("server.address") or "")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        host = None
        for key, value in scope.get("headers") or ():
            if key.lower() == b"host":
                host = value.decode("latin-1")
                break
        if host_allowed(host, self._bound()):
            await self.app(scope, receive, send)
            return
        headers = [(b"content-type", b"text/plain; charset=utf-8"),
                   (b"content-length", str(len(_REFUSAL)).encode())]  # fmt: skip
        prefix = ""
        if scope["type"] == "websocket":
            if "websocket.http.response" not in (scope.get("extensions") or {}):
                await send({"type": "websocket.close", "code": 1008})  # the server says 403
                return
            prefix = "websocket."  # the denial response extension: a real HTTP answer
        await send({"type": prefix + "http.response.start", "status": 403, "headers": headers})
        await send({"type": prefix + "http.response.body", "body": _REFUSAL})
