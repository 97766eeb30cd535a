"""A real ``jupyter server`` with the Jupyter AI persona manager, and a chat client for it.

Shared by ``tests/test_persona.py`` and ``benchmarks/persona.py``. The server is started
as every test's Jupyter server is (``jupyter_proc.py``: 127.0.0.1, a token, temporary
folders, this checkout first on its path), on the home ``DEERFLOW_NB_HOME`` given. The
``DeerFlow`` persona is found through the entry-point group
``jupyter_ai.personas``: when the environment's install of deerflow-nb predates it (an
editable install of another checkout), a ``.dist-info`` declaring pyproject.toml's entry
point is put on the server's path, so the server still discovers it the ordinary way.

``ChatClient`` speaks the chat panel's own protocol (``/api/chat/ws/<path>``, the
WebSocket jupyterlab-chat serves without a collaboration server): it opens the chat file,
waits for the persona to join it, sends a message addressed to the persona
(``metadata["to_persona"]``) and reads the streamed reply, frame by frame, with the time of
its first chunk. ``run_cells`` runs a notebook's cells in a real kernel beside it.
"""

from __future__ import annotations

import asyncio
import json
import time
import tomllib
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from jupyter_proc import ROOT, TOKEN, JupyterProcess, jupyter_env, start_jupyter

GROUP = "jupyter_ai.personas"
PERSONA_ID = "jupyter-ai-personas::deerflow_nb::DeerFlowPersona"
FOOTER = "\n\n---\n*"  # the footer's rule; its "N facts injected" ends the reply


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
    """The environment of a kernel or server on ``home`` (``jupyter_env``), the persona's
    entry point declared."""
    extra = entry_point_path(tmp / "entry-point")
    return jupyter_env(tmp, home, [str(extra)] if extra else [])


def post_message(server: JupyterProcess, text: str, timeout: float = 120) -> str:
    """``POST /api/ai/message/DeerFlow`` (a one-shot chat at the server's root); the reply's
    text."""
    request = urllib.request.Request(
        server.url("api/ai/message/DeerFlow"),
        data=json.dumps({"message": text}).encode(),
        headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.load(response)["response"]


def run_cells(tmp: Path, home: Path, folder: Path, cells: list[str]) -> list[str]:
    """Run ``cells`` as a notebook in ``folder`` in a real kernel (nbclient) on ``home``;
    each cell's text output. A cell's error fails (AssertionError with its message)."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    client = NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(folder)}}
    )
    with client.setup_kernel(env=server_env(tmp, home)):
        for index, cell in enumerate(nb.cells):
            client.execute_cell(cell, index)
    return [output_text(cell) for cell in nb.cells]


def output_text(cell: Any) -> str:
    """A run cell's text outputs, joined; raises AssertionError for an error output."""
    parts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            raise AssertionError(f"{output['ename']}: {output['evalue']}")
        parts.append(output.get("text") or output.get("data", {}).get("text/plain", ""))
    return "\n".join(parts)


def chat_turns(home: Path, thread: str, project: str = "churn") -> list[dict[str, Any]]:
    """The journaled turns of ``project``'s thread ``thread`` on ``home``."""
    from deerflow_nb.storage.journal import Journal

    journal = Journal(home / "journal.db")
    try:
        thread_id = journal.thread_for(thread, project)
        assert journal.thread_project(thread_id) == project
        return journal.turns(thread_id)
    finally:
        journal.close()


def start_server(tmp: Path, root: Path, home: Path) -> JupyterProcess:
    """``jupyter server`` serving ``root``, its personas on ``home``, its log
    ``tmp/server.log``."""
    return start_jupyter("jupyter_server", root, server_env(tmp, home), tmp / "server.log")


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

    def __init__(self, server: JupyterProcess, path: str) -> None:
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
