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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "jupyter_ai_persona_manager",
    reason="jupyter-ai-persona-manager is not installed (pip install 'deerflow-nb[jupyter-ai]')",
)

from chat_server import (  # noqa: E402
    ChatClient,
    chat_turns,
    post_message,
    run_cells,
    server_env,
    start_server,
)
from jupyter_proc import ROOT, JupyterProcess  # noqa: E402

from deerflow_nb import Agent, Memory  # noqa: E402
from deerflow_nb.persona import SHOWN_FACTS, injected_line  # noqa: E402

pytestmark = pytest.mark.timeout(240)

CHAT = "churn/analysis.chat"


@dataclass
class Site:
    """The server of this module's tests, its root folder (``churn/`` inside) and home."""

    server: JupyterProcess
    root: Path
    home: Path
    tmp: Path


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("persona")
    (tmp / "root" / "churn").mkdir(parents=True)
    (tmp / "home").mkdir()
    # a chat's turns are folded half a second after it speaks (not 30 s): the fold's
    # "Memory updated" line comes within the test
    (tmp / "home" / "config.yaml").write_text("memory:\n  debounce_seconds: 0.5\n")
    server = start_server(tmp, tmp / "root", tmp / "home")
    try:
        yield Site(server, tmp / "root", tmp / "home", tmp)
    finally:
        server.stop()
    log = server.log.read_text(errors="replace")
    ours = [t for t in log.split("Traceback")[1:] if "deerflow_nb" in t[:5000]]
    assert not ours, log  # no turn failed, nothing of ours broke at shutdown


@pytest.fixture(autouse=True)
def jupyter_dirs(site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    """This process's Jupyter and IPython folders (a kernel's connection file) temporary."""
    for name, value in server_env(site.tmp, site.home).items():
        if name.startswith(("JUPYTER_", "IPYTHON")):
            monkeypatch.setenv(name, value)


def run_notebook(site: Site, cells: list[str]) -> list[str]:
    """Run ``cells`` in a real kernel on the site's home, in ``churn/``; each cell's text."""
    return run_cells(site.tmp, site.home, site.root / "churn", cells)


def test_a_notebook_fact_reaches_the_chat_and_a_chat_fact_reaches_the_notebook(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = Agent(site.home)
    agent.run("I prefer polars over pandas for dataframes.", thread="prep", project="churn")
    agent.memory.flush()
    agent.close()

    async def talk() -> tuple[str, str, str]:
        client = ChatClient(site.server, "churn/analysis.chat")
        await client.open()
        try:
            reply = (await client.ask("Which dataframe library do I prefer?")).text
            no_kernel = (await client.ask("What are the columns of df?")).text
            await client.ask("I use DuckDB for the churn warehouse.")
            return reply, no_kernel, await client.wait_for("Memory updated")
        finally:
            client.close()

    reply, no_kernel, updated = asyncio.run(talk())
    assert "polars" in reply.lower()
    assert "1 fact injected" in reply and "project churn" in reply
    assert "Injected: “Prefers polars over pandas for dataframes”" in reply  # which fact
    # no kernel here: the notebook tools say so rather than "no variables"
    assert "no notebook kernel here" in no_kernel
    # the chat hears what memory kept of it, as a notebook cell does
    assert "remembered" in updated and "DuckDB" in updated

    # the turns are journaled in the chat's thread of its folder's project
    turns = chat_turns(site.home, "analysis.chat")
    assert [t["status"] for t in turns] == ["ok"] * 3

    # the chat's statement is folded and a notebook in that folder lists it and recalls it
    with Memory(site.home) as memory:
        memory.flush()
    facts, recalled = run_notebook(
        site, ["%load_ext deerflow_nb", "%memory facts", "%memory recall DuckDB"]
    )[1:]
    assert "duckdb" in facts.lower()
    assert "analysis.chat" in recalled  # %memory recall finds the chat's thread

    # the inspector lists the chat's thread and shows what was said in it
    inspector = inspector_on(site.home, monkeypatch)
    picker = inspector.radio(key="thread_pick")
    chat = [o for o in picker.options if "analysis\\.chat" in o]
    assert len(chat) == 1, picker.options
    picker.set_value(chat[0]).run()
    said = [x.value for m in inspector.chat_message for x in m.markdown]
    assert any("DuckDB" in text for text in said), said


def inspector_on(home: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The inspector (Streamlit's AppTest of ``inspector_app.py``) on ``home``, run once."""
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("DEERFLOW_NB_HOME", str(home))
    app = AppTest.from_file(str(ROOT / "inspector_app.py"), default_timeout=60)
    app.run()
    assert not app.exception, [e.message for e in app.exception]
    return app


def test_the_rest_api_answers_in_the_servers_root_project(site: Site) -> None:
    reply = post_message(site.server, "Hello, who are you?")
    assert "offline model" in reply and "project root" in reply


def test_kernels_and_the_persona_share_one_home_without_losing_a_turn(site: Site) -> None:
    """The chat keeps asking while a kernel runs %%agent turns on the same home: every turn
    of both is journaled, none failed, and they interleave: the kernel waits after its first
    turn until the chat has answered once (a loaded machine cannot order them apart)."""
    kernel_turns = 4
    started, answered = site.tmp / "kernel-started", site.tmp / "chat-answered"
    turns = [
        f"%%agent\nNotebook question {i}: I track churn metric number {i}."
        for i in range(kernel_turns)
    ]
    handshake = (
        f"import pathlib, time\npathlib.Path({str(started)!r}).touch()\n"
        f"deadline = time.monotonic() + 120\n"
        f"while not pathlib.Path({str(answered)!r}).exists() and time.monotonic() < deadline:\n"
        "    time.sleep(0.1)"
    )
    cells = ["%load_ext deerflow_nb", turns[0], handshake, *turns[1:]]
    failure: list[BaseException] = []

    def kernel() -> None:
        try:
            run_notebook(site, cells)
        except BaseException as exc:  # the main thread reports it
            failure.append(exc)

    async def chat_meanwhile() -> list[str]:
        client = ChatClient(site.server, "churn/busy.chat")
        await client.open()
        replies = []
        try:
            while not started.exists() and worker.is_alive():
                await asyncio.sleep(0.1)
            while worker.is_alive() or len(replies) < 2:
                replies.append((await client.ask(f"Chat question {len(replies)}: churn?")).text)
                answered.touch()
                await asyncio.sleep(0.2)  # a person's pace, not a flood of turns
        finally:
            client.close()
        return replies

    worker = threading.Thread(target=kernel)
    worker.start()
    replies = asyncio.run(chat_meanwhile())
    worker.join(timeout=200)
    assert not worker.is_alive() and not failure, failure
    assert all("injected" in r and "deerflow_nb:" not in r for r in replies)

    chat_side = chat_turns(site.home, "busy.chat")
    notebook = chat_turns(site.home, "default")
    assert [t["status"] for t in chat_side] == ["ok"] * len(replies)
    assert [t["status"] for t in notebook] == ["ok"] * kernel_turns
    first, last = notebook[0]["started_at"], notebook[-1]["ended_at"]
    assert any(first <= t["started_at"] <= last for t in chat_side)  # they overlapped


def test_the_reply_names_the_first_facts_injected_and_counts_the_rest() -> None:
    facts = [f"Fact {i}\nwith a line break" for i in range(SHOWN_FACTS + 2)]
    line = injected_line(facts)
    assert line.startswith("*Injected: “Fact 0 with a line break”; “Fact 1")
    assert f"Fact {SHOWN_FACTS - 1} with" in line and f"Fact {SHOWN_FACTS} " not in line
    assert line.endswith(" and 2 more*")
