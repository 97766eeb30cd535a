"""A real ``jupyter server`` with the Jupyter AI persona manager, and a chat client for it.

Shared by ``tests/test_persona.py`` and ``benchmarks/persona.py``. The server runs on
127.0.0.1 with a token, in a temporary root, its Jupyter config, data and runtime folders
temporary too, on the home ``DEERFLOW_NB_HOME`` given; this checkout's ``deerflow_nb`` is
first on its path. The ``DeerFlow`` persona is found through the entry-point group
``jupyter_ai.personas``: when the environment's install of deerflow-nb predates it (an
editable install of another checkout), a ``.dist-info`` declaring pyproject.toml's entry
point is put on the server's path, so the server still discovers it the ordinary way.

``ChatClient`` speaks the chat panel's own protocol (``/api/chat/ws/<path>``, the
WebSocket jupyterlab-chat serves without a collaboration server): it opens the chat file,
waits for the persona to join it, sends a message addressed to the persona
(``metadata["to_persona"]``) and reads the streamed reply, frame by frame, with the time of
its first chunk.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "deerflow-chat-token-7d2e"
GROUP = "jupyter_ai.personas"
PERSONA_ID = "jupyter-ai-personas::deerflow_nb::DeerFlowPersona"
FOOTER = "\n\n---\n*"  # the footer's rule; its "N facts injected" ends the reply


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def persona_entry_point() -> str:
    """pyproject.toml's ``DeerFlow`` entry point (``module:Class``)."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        project = tomllib.load(f)["project"]
    return project["entry-points"][GROUP]["DeerFlow"]


def entry_point_path(folder: Path) -> Path | None:
    """A folder holding a ``.dist-info`` that declares the persona's entry point, when the
    installed metadata lacks it (None when the install already declares it)."""
    value = persona_entry_point()
    if any(ep.value == value for ep in entry_points(group=GROUP)):
        return None
    info = folder / "deerflow_nb_chat_test-0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: deerflow-nb-chat-test\nVersion: 0\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(f"[{GROUP}]\nDeerFlow = {value}\n", encoding="utf-8")
    return folder


def server_env(tmp: Path, home: Path) -> dict[str, str]:
    """The environment of a kernel or server on ``home``: no key (the offline model), this
    checkout first on the path, every Jupyter and IPython folder under ``tmp``."""
    state = tmp / "jupyter"
    extra = entry_point_path(tmp / "entry-point")
    path = [str(ROOT), *([str(extra)] if extra else []), os.environ.get("PYTHONPATH", "")]
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "DEERFLOW_NB_"))},
        "DEERFLOW_NB_HOME": str(home),
        "PYTHONPATH": os.pathsep.join(p for p in path if p),
        "JUPYTER_CONFIG_DIR": str(state / "config"),
        "JUPYTER_DATA_DIR": str(state / "data"),
        "JUPYTER_RUNTIME_DIR": str(state / "runtime"),
        "IPYTHONDIR": str(state / "ipython"),
        "JUPYTER_PLATFORM_DIRS": "1",
    }


@dataclass
class ChatServer:
    """A running ``jupyter server``: its process, port and log."""

    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    def post_message(self, text: str, timeout: float = 120) -> str:
        """``POST /api/ai/message/DeerFlow`` (a one-shot chat at the server's root); the
        reply's text."""
        request = urllib.request.Request(
            self.url("api/ai/message/DeerFlow"),
            data=json.dumps({"message": text}).encode(),
            headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.load(response)["response"]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


def start_server(tmp: Path, root: Path, home: Path, timeout: float = 120) -> ChatServer:
    """``jupyter server`` on 127.0.0.1 serving ``root``, its personas on ``home``; returns
    once ``/api/status`` answers."""
    port = free_port()
    log = tmp / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyter_server",
                "--ServerApp.ip=127.0.0.1",
                f"--ServerApp.port={port}",
                "--ServerApp.port_retries=0",
                f"--IdentityProvider.token={TOKEN}",
                f"--ServerApp.root_dir={root}",
                "--ServerApp.open_browser=False",
                *(["--allow-root"] if os.geteuid() == 0 else []),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=server_env(tmp, home),
            cwd=str(root),
        )
    server = ChatServer(proc, port, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"jupyter server exited with {proc.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(server.url(f"api/status?token={TOKEN}"), timeout=2):
                return server
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"no answer from jupyter server in {timeout:.0f} s:\n{log.read_text()}")


@dataclass
class Reply:
    """The persona's streamed reply: its final text, how many frames carried it, and the
    seconds from sending to its first chunk and to its end."""

    text: str
    frames: int
    first_chunk_s: float
    done_s: float
    bodies: list[str] = field(default_factory=list)


class ChatClient:
    """One chat panel on ``path`` (relative to the server's root), over its WebSocket."""

    def __init__(self, server: ChatServer, path: str) -> None:
        self.server = server
        self.path = path
        self.ws: Any = None
        self.answered: set[str] = set()  # replies complete (their last update may follow)
        self.said: dict[str, str] = {}  # every message of the persona seen, by id

    async def open(self, timeout: float = 60) -> None:
        """Connect, and wait until the persona has joined the chat (its user is listed)."""
        from tornado.websocket import websocket_connect

        quoted = urllib.parse.quote(self.path)
        url = f"ws://127.0.0.1:{self.server.port}/api/chat/ws/{quoted}?token={TOKEN}"
        self.ws = await websocket_connect(url)
        users: set[str] = set()
        deadline = time.monotonic() + timeout
        while PERSONA_ID not in users:
            frame = await self._frame(deadline)
            users |= set(frame.get("users") or {})

    async def ask(self, text: str, timeout: float = 120) -> Reply:
        """Send ``text`` to the persona; its reply once the footer has arrived."""
        sent = time.perf_counter()
        self.ws.write_message(
            json.dumps(
                {
                    "type": "client",
                    "action": "send",
                    "id": str(uuid.uuid4()),
                    "body": text,
                    "metadata": {"to_persona": PERSONA_ID},
                }
            )
        )
        deadline = time.monotonic() + timeout
        first = None
        bodies: list[str] = []
        while True:
            frame = await self._frame(deadline)
            message = frame.get("message") or {}
            if (
                frame.get("action") != "message"
                or message.get("sender") != PERSONA_ID
                or message.get("id") in self.answered
            ):
                continue
            body = message.get("body") or ""
            if body and first is None:
                first = time.perf_counter() - sent
            bodies.append(body)
            if "injected" in body.rpartition(FOOTER)[2] or "**deerflow_nb:**" in body:
                done = time.perf_counter() - sent
                self.answered.add(message.get("id"))
                return Reply(body, len(bodies), first or done, done, bodies)

    async def wait_for(self, text: str, timeout: float = 120) -> str:
        """The first message of the persona holding ``text`` (one said earlier counts)."""
        deadline = time.monotonic() + timeout
        while True:
            found = [body for body in self.said.values() if text in body]
            if found:
                return found[0]
            await self._frame(deadline)

    async def _frame(self, deadline: float) -> dict[str, Any]:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no reply in time; server log:\n{self.server.log.read_text()}")
        raw = await asyncio.wait_for(self.ws.read_message(), left)
        if raw is None:
            raise ConnectionError(f"the chat socket closed:\n{self.server.log.read_text()}")
        frame = json.loads(raw)
        message = frame.get("message") or {}
        if frame.get("action") == "message" and message.get("sender") == PERSONA_ID:
            self.said[message.get("id")] = message.get("body") or ""
        return frame

    def close(self) -> None:
        if self.ws is not None:
            self.ws.close()
