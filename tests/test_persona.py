"""The DeerFlow persona in a real ``jupyter server`` (issue 40): memory follows the user
between a project's notebooks and its chats, and kernels and the persona share one home.

The server (``tests/chat_server.py``) runs on 127.0.0.1 with a token, its root a temporary
folder with the project folder ``churn/``, its home this test's; messages reach the
persona over the chat panel's WebSocket (``churn/analysis.chat``, so the chat's folder
decides the project) and over ``POST /api/ai/message/DeerFlow`` (the issue's trial). Kernels
are real ones run by nbclient with ``churn/`` as their folder. The offline model answers.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytest.importorskip(
    "jupyter_ai_persona_manager",
    reason="jupyter-ai-persona-manager is not installed (pip install 'deerflow-nb[jupyter-ai]')",
)

from chat_server import ChatClient, ChatServer, server_env, start_server  # noqa: E402

from deerflow_nb import Agent, Memory  # noqa: E402
from deerflow_nb.storage.journal import Journal  # noqa: E402

pytestmark = pytest.mark.timeout(240)

CHAT = "churn/analysis.chat"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "root" / "churn").mkdir(parents=True)
    return tmp_path / "root"


@pytest.fixture(autouse=True)
def jupyter_dirs(tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This process's Jupyter and IPython folders (a kernel's connection file) temporary."""
    for name, value in server_env(tmp_path, home).items():
        if name.startswith(("JUPYTER_", "IPYTHON")):
            monkeypatch.setenv(name, value)


@pytest.fixture
def server(tmp_path: Path, root: Path, home: Path) -> Iterator[ChatServer]:
    running = start_server(tmp_path, root, home)
    try:
        yield running
    finally:
        running.stop()


def run_notebook(folder: Path, cells: list[str], tmp: Path, home: Path) -> list[str]:
    """Run ``cells`` in a real kernel whose folder is ``folder``; each cell's text output."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    env = server_env(tmp, home)
    client = NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(folder)}}
    )
    with client.setup_kernel(env=env):
        for index, cell in enumerate(nb.cells):
            client.execute_cell(cell, index)
    return [output_text(cell) for cell in nb.cells]


def output_text(cell: nbformat.NotebookNode) -> str:
    parts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            raise AssertionError(f"{output['ename']}: {output['evalue']}")
        parts.append(output.get("text") or output.get("data", {}).get("text/plain", ""))
    return "\n".join(parts)


def ask(server: ChatServer, *messages: str) -> list[str]:
    """Send each message to the persona in ``churn/analysis.chat``; the replies."""

    async def chat() -> list[str]:
        client = ChatClient(server, CHAT)
        await client.open()
        try:
            return [(await client.ask(m)).text for m in messages]
        finally:
            client.close()

    return asyncio.run(chat())


def chat_turns(home: Path, thread: str = "analysis.chat", project: str = "churn") -> list[dict]:
    journal = Journal(home / "journal.db")
    try:
        thread_id = journal.thread_for(thread, project)
        assert journal.thread_project(thread_id) == project
        return journal.turns(thread_id)
    finally:
        journal.close()


def test_a_notebook_fact_reaches_the_chat_and_a_chat_fact_reaches_the_notebook(
    server: ChatServer, root: Path, home: Path, tmp_path: Path
) -> None:
    agent = Agent(home)
    agent.run("I prefer polars over pandas for dataframes.", thread="prep", project="churn")
    agent.memory.flush()
    agent.close()

    reply, elsewhere, variables = ask(
        server,
        "Which dataframe library do I prefer?",
        "What are the columns of df?",
        "I use DuckDB for the churn warehouse.",
    )[:3]
    assert "polars" in reply.lower()
    assert "1 fact injected" in reply and "project churn" in reply

    # the turns are journaled in the chat's thread of its folder's project
    turns = chat_turns(home)
    assert len(turns) == 3 and all(t["status"] == "ok" for t in turns)

    # no kernel here: the notebook tools say so rather than "no variables"
    assert "no notebook kernel here" in elsewhere

    # the chat's statement is folded and a notebook in that folder lists it
    with Memory(home) as memory:
        memory.flush()
    facts = run_notebook(root / "churn", ["%load_ext deerflow_nb", "%memory facts"], tmp_path, home)
    assert "duckdb" in facts[1].lower()
    assert variables  # the third reply arrived whole


def test_the_rest_api_answers_in_the_servers_root_project(server: ChatServer, home: Path) -> None:
    reply = server.post_message("Hello, who are you?")
    assert "offline model" in reply and "project root" in reply


def test_kernels_and_the_persona_share_one_home_without_losing_a_turn(
    server: ChatServer, root: Path, home: Path, tmp_path: Path
) -> None:
    kernel_turns = 4
    cells = ["%load_ext deerflow_nb"] + [
        f"%%agent\nNotebook question {i}: I track churn metric number {i}."
        for i in range(kernel_turns)
    ]
    outputs: list[str] = []
    failure: list[BaseException] = []

    def kernel() -> None:
        try:
            outputs.extend(run_notebook(root / "churn", cells, tmp_path, home))
        except BaseException as exc:  # the main thread reports it
            failure.append(exc)

    worker = threading.Thread(target=kernel)
    worker.start()
    replies = ask(server, *(f"Chat question {i}: what about churn {i}?" for i in range(4)))
    worker.join(timeout=200)
    assert not worker.is_alive() and not failure, failure
    assert all("injected" in r and "deerflow_nb:" not in r for r in replies)

    chat = chat_turns(home)
    notebook = chat_turns(home, "default")
    assert [t["status"] for t in chat] == ["ok"] * 4
    assert [t["status"] for t in notebook] == ["ok"] * kernel_turns
