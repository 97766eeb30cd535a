"""The served inspector answers only requests addressed to a loopback name (DNS rebinding).

A page on ``evil.example`` whose name is made to resolve to 127.0.0.1 reaches the inspector
as a same-origin site; its requests still say ``Host: evil.example``. ``deerflow-nb
inspect`` is started for real and probed over a raw socket, so the Host header is exactly
what the test writes: the websocket upgrade Streamlit's page talks over, the page and the
health route.
"""

from __future__ import annotations

import base64
import os
import re
import socket
import urllib.request
from pathlib import Path

import pytest
from inspector_seed import seed_home, served_inspector

from deerflow_nb.inspector.hosts import host_allowed, host_name


def first_line(port: int, host: str | None, path: str, *, upgrade: bool) -> str:
    """The status line the server answers ``GET path`` with, sent with this Host header."""
    return answer_head(port, host, path, upgrade=upgrade).split("\r\n", 1)[0]


def answer_head(
    port: int, host: str | None, path: str, *, upgrade: bool, origin: str | None = None
) -> str:
    """The status line and headers the server answers ``GET path`` with, sent with this
    Host header (and, for an upgrade, ``origin``, by default the Host's own)."""
    lines = [f"GET {path} HTTP/1.1"]
    if host is not None:
        lines.append(f"Host: {host}")
    if upgrade:
        key = base64.b64encode(os.urandom(16)).decode()
        lines += [
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Key: {key}",
            "Sec-WebSocket-Version: 13",
            f"Origin: {origin or f'http://{host}'}",
        ]
    request = "\r\n".join([*lines, "", ""]).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(1024)
            if not chunk:
                break
            answer += chunk
    return answer.split(b"\r\n\r\n", 1)[0].decode("latin-1")


def headers_of(head: str) -> dict[str, str]:
    return {
        name.strip().lower(): value.strip()
        for name, _, value in (line.partition(":") for line in head.split("\r\n")[1:])
    }


def status(port: int, host: str | None, path: str, *, upgrade: bool = False) -> int:
    return int(first_line(port, host, path, upgrade=upgrade).split()[1])


def test_served_inspector_refuses_foreign_host_headers(tmp_path: Path, home: Path) -> None:
    seed_home(home)
    with served_inspector(home, tmp_path) as port:
        for host in ("evil.example", f"evil.example:{port}", f"localhost.evil.example:{port}",
                     f"127.0.0.1.nip.io:{port}", f"LOCALHOST.:{port}"):  # fmt: skip
            assert status(port, host, "/_stcore/stream", upgrade=True) == 403, host
            assert status(port, host, "/") == 403, host
            assert status(port, host, "/_stcore/health") == 403, host
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LocalHost:{port}", "localhost"):
            assert status(port, host, "/_stcore/stream", upgrade=True) == 101, host
            assert status(port, host, "/") == 200, host
            assert status(port, host, "/_stcore/health") == 200, host


def test_served_inspector_cannot_be_framed_nor_driven_from_another_origin(
    tmp_path: Path, home: Path
) -> None:
    """A page on another site framed the inspector and two clicks approved a pending wipe:
    every answer forbids framing, and the socket takes only the inspector's own page."""
    seed_home(home)
    with served_inspector(home, tmp_path) as port:
        own = f"localhost:{port}"
        script = re.search(r'src="([^"]+\.js)"', fetch_page(port))
        assert script, "the page names its script"
        answers = [("/", own), ("/_stcore/health", own), (f"/{script.group(1)}", own),
                   ("/no-such-page", own), ("/", "evil.example")]  # fmt: skip
        for path, host in answers:
            head = answer_head(port, host, path, upgrade=False)
            found = headers_of(head)
            assert found.get("x-frame-options") == "DENY", (path, head)
            assert "frame-ancestors 'none'" in found.get("content-security-policy", ""), path
        foreign = ["http://evil.example", f"http://evil.example:{port}", "null",
                   f"http://localhost:{port}.evil.example",
                   f"https://127.0.0.1:{port}/x"]  # fmt: skip
        for origin in foreign:
            head = answer_head(port, own, "/_stcore/stream", upgrade=True, origin=origin)
            assert head.split()[1] == "403", origin
            assert headers_of(head).get("x-frame-options") == "DENY"
        for origin in (f"http://localhost:{port}", f"HTTP://LocalHost:{port}"):
            head = answer_head(port, own, "/_stcore/stream", upgrade=True, origin=origin)
            assert head.split()[1] == "101", origin


def fetch_page(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as answer:
        return answer.read().decode()


@pytest.mark.parametrize(
    ("header", "bound", "allowed"),
    [
        ("127.0.0.1:8501", "127.0.0.1", True),
        ("localhost:8501", "127.0.0.1", True),
        ("localhost", "127.0.0.1", True),
        ("[::1]:8501", "127.0.0.1", True),
        ("evil.example", "127.0.0.1", False),
        ("evil.example:8501", "127.0.0.1", False),
        ("localhost.evil.example", "127.0.0.1", False),
        ("10.0.0.5:8501", "127.0.0.1", False),  # not the address it is bound to
        ("10.0.0.5:8501", "10.0.0.5", True),  # --host 10.0.0.5
        ("10.0.0.5:8501", "0.0.0.0", True),  # every interface: any address, never a name
        ("[fe80::1]:8501", "::", True),
        ("myhost.lan:8501", "0.0.0.0", False),
        ("localhost:99999", "127.0.0.1", False),
        ("localhost:http", "127.0.0.1", False),
        ("user@localhost", "127.0.0.1", False),
        ("localhost/x", "127.0.0.1", False),
        ("", "127.0.0.1", False),
        (None, "127.0.0.1", False),
    ],
)
def test_host_allowed(header: str | None, bound: str, allowed: bool) -> None:
    assert host_allowed(header, bound) is allowed


def test_host_name() -> None:
    assert host_name("LocalHost:8501") == "localhost"
    assert host_name("[::1]:8501") == "::1"
    assert host_name("a b") is None
