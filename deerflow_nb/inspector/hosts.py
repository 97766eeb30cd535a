"""The inspector answers only requests addressed to this machine by a loopback name.

Binding to 127.0.0.1 keeps other machines out, but not other web pages in the user's own
browser: a page on ``evil.example`` can make its name resolve to 127.0.0.1 (DNS
rebinding) and then talk to the inspector as a same-origin site, reading memory over the
websocket and writing through its buttons. Such a request still carries the attacker's
name in its ``Host`` header, so every HTTP request and websocket upgrade whose Host is not
``localhost``, a loopback address, or the address the inspector was told to bind is
refused with 403 before Streamlit sees it.

A page on another site must not frame the inspector either (two clicks on a framed page
approved a pending wipe): every response carries ``X-Frame-Options: DENY`` and the CSP
``frame-ancestors 'none'``. And a websocket upgrade whose ``Origin`` is another site (any
browser sends one) is refused, so no other page can drive the app over its socket.

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
_FOREIGN_ORIGIN = b"Origin not allowed: the inspector's socket serves only its own page"
FRAME_HEADERS = (
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", b"frame-ancestors 'none'"),
)


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


def same_origin(origin: str | None, host: str | None) -> bool:
    """Whether a websocket upgrade's ``Origin`` is the page the inspector served: absent
    (not a browser), or an http(s) origin whose ``host[:port]`` is the request's Host."""
    if origin is None:
        return True
    parts = urlsplit(origin.strip())
    return (
        parts.scheme in ("http", "https")
        and bool(host)
        and parts.netloc.lower() == (host or "").lower()
        and not (parts.path or parts.query or parts.fragment)
    )


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return None


def _framed_not(send: Send) -> Send:
    """``send`` with the anti-framing headers added to every response it starts."""

    async def wrapped(message: Message) -> None:
        if message["type"] in ("http.response.start", "websocket.http.response.start"):
            present = {k.lower() for k, _ in message.get("headers") or ()}
            extra = [(k, v) for k, v in FRAME_HEADERS if k not in present]
            message = {**message, "headers": [*(message.get("headers") or ()), *extra]}
        await send(message)

    return wrapped


class LoopbackHostMiddleware:
    """ASGI middleware: 403 for any HTTP request or websocket upgrade with a foreign Host,
    or a websocket upgrade from a foreign Origin; anti-framing headers on every response."""

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
        send = _framed_not(send)
        host = _header(scope, b"host")
        refusal = None
        if not host_allowed(host, self._bound()):
            refusal = _REFUSAL
        elif scope["type"] == "websocket" and not same_origin(_header(scope, b"origin"), host):
            refusal = _FOREIGN_ORIGIN
        if refusal is None:
            await self.app(scope, receive, send)
            return
        headers = [(b"content-type", b"text/plain; charset=utf-8"),
                   (b"content-length", str(len(refusal)).encode())]  # fmt: skip
        prefix = ""
        if scope["type"] == "websocket":
            if "websocket.http.response" not in (scope.get("extensions") or {}):
                await send({"type": "websocket.close", "code": 1008})  # the server says 403
                return
            prefix = "websocket."  # the denial response extension: a real HTTP answer
        await send({"type": prefix + "http.response.start", "status": 403, "headers": headers})
        await send({"type": prefix + "http.response.body", "body": refusal})
