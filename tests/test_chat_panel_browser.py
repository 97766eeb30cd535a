"""The DeerFlow persona in JupyterLab's chat panel, with the full jupyter-ai 3.2, driven by
headless Chromium (issue 40): a message typed into the panel gets the persona's streamed
reply there.

jupyter-ai 3.2.0 pins ``mcp<2`` through its dependencies, so it lives in a venv of its own,
``$VENV/jai`` (``make test`` builds it; ``JAI_VENV`` names another): JupyterLab runs from
it on 127.0.0.1 with a token, temporary Jupyter folders and a temporary home
(``jupyterlab_harness.start_lab``), this checkout first on its path. A real kernel
(nbclient, in the project folder ``churn/``) states a fact in a notebook first; the chat
file ``churn/analysis.chat`` is in the same project. Chromium opens the chat, picks DeerFlow
in the panel's persona picker and types; the offline model answers from memory. A second
test streams a hostile reply slowly from the loopback model, with a hostile fact injected:
the panel shows the reply growing, and nothing in it (nor in the facts it names) runs or
fetches.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chat_server import PERSONA_ID, chat_turns, run_cells, server_env
from jupyter_proc import TOKEN, JupyterProcess
from jupyterlab_harness import (
    LIVE_PARTS,
    NEEDS_CHROMIUM,
    VISIBLE,
    Beacon,
    chromium_page,
    hostile_text,
    server_failures,
    start_lab,
)
from loopback import ServerHandle, start_server

from deerflow_nb import Memory

JAI = Path(os.environ.get("JAI_VENV") or Path(sys.prefix) / "jai")
JAI_PYTHON = JAI / "bin" / "python"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(600),
    NEEDS_CHROMIUM,
    pytest.mark.skipif(
        not JAI_PYTHON.exists(),
        reason=f"no jupyter-ai 3.2 venv at {JAI} (`make test` builds it; JAI_VENV names another)",
    ),
]

# Every text state of the chat message holding ``needle``, recorded as the page changes.
RECORD_STATES = """needle => {
  window.deerflowStates = [];
  const record = () => {
    const found = [...document.querySelectorAll('.jp-chat-rendered-message')]
      .find(el => el.textContent.includes(needle));
    const states = window.deerflowStates;
    if (found && states[states.length - 1] !== found.textContent) states.push(found.textContent);
  };
  new MutationObserver(record).observe(document.body,
    {subtree: true, childList: true, characterData: true});
}"""


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The server's root with the project folder ``churn/`` and an empty chat file in it;
    the home (``start_lab``'s) folds a chat's turn half a second after it (not 30 s).
    Afterwards, JupyterLab's log has no traceback (no turn failed, nothing broke at exit)
    but tornado's when the closing page leaves while a websocket write is under way."""
    home = tmp_path / "deerflow-home"
    home.mkdir()
    (home / "config.yaml").write_text("memory:\n  debounce_seconds: 0.5\n", encoding="utf-8")
    (tmp_path / "root" / "churn").mkdir(parents=True)
    (tmp_path / "root" / "churn" / "analysis.chat").write_text("", encoding="utf-8")
    for name, value in server_env(tmp_path, home).items():  # nbclient's kernel: its folders
        if name.startswith(("JUPYTER_", "IPYTHON")):
            monkeypatch.setenv(name, value)
    yield tmp_path / "root"
    log = (tmp_path / "lab.log").read_text(errors="replace")
    assert not server_failures(log), log


@pytest.fixture
def hostile_model(beacon: Beacon) -> Iterator[ServerHandle]:
    """The loopback model whose next chat reply is the hostile one, streamed slowly (8
    characters every 40 ms); the offline model answers the rest."""
    with start_server(models=("loopback-model",)) as server:
        server.reply_next(hostile_text("chat", beacon.url))
        server.slow_next(0.04)
        yield server


def jai_lab(tmp_path: Path, root: Path, model: ServerHandle | None = None) -> JupyterProcess:
    """JupyterLab with jupyter-ai 3.2 (``start_lab`` from the jai venv), the MCP server
    jupyter-ai starts (``jupyter_server_mcp``) on a port the OS picks, not 3001."""
    return start_lab(
        tmp_path, root, model, python=str(JAI_PYTHON), args=["--MCPExtensionApp.mcp_port=0"]
    )


def open_chat(page: Any, port: int, path: str) -> Any:
    """Open the chat file ``path`` and pick DeerFlow in its persona picker; its input box."""
    from playwright.sync_api import expect

    page.goto(f"http://127.0.0.1:{port}/lab/tree/{path}?token={TOKEN}")
    picker = page.locator(".jp-jai-personaControls-persona-btn")
    expect(picker).to_be_visible(timeout=120_000)
    picker.click()
    page.get_by_role("menuitem", name="DeerFlow").click()
    expect(picker).to_have_text("DeerFlow")
    return page.get_by_placeholder("Type a chat message")


def send(page: Any, box: Any, text: str, *, typed: bool = True) -> None:
    """Type ``text`` into the chat's input (or paste it: ``typed=False``) and send it."""
    box.click()
    if typed:
        page.keyboard.type(text)
    else:
        box.fill(text)
    page.keyboard.press("Enter")


def persona_bodies(chat_file: Path) -> list[str]:
    """The persona's messages as the chat file on disk keeps them."""
    messages = json.loads(chat_file.read_text(encoding="utf-8"))["messages"]
    return [m["body"] for m in messages if m["sender"] == PERSONA_ID]


def test_a_message_typed_in_the_panel_is_answered_from_a_notebook_of_the_project(
    tmp_path: Path, site: Path
) -> None:
    from playwright.sync_api import expect

    home = tmp_path / "deerflow-home"
    churn = site / "churn"
    run_cells(
        tmp_path,
        home,
        churn,
        ["%load_ext deerflow_nb", "%%agent\nI prefer polars over pandas for dataframes.",
         "%memory flush"],
    )  # fmt: skip
    with jai_lab(tmp_path, site) as lab, chromium_page() as page:
        box = open_chat(page, lab.port, "churn/analysis.chat")
        send(page, box, "Which dataframe library do I prefer?")
        messages = page.locator(".jp-chat-rendered-message")
        reply = messages.filter(has_text="fact injected")
        expect(reply).to_be_visible(timeout=180_000)
        answer = reply.inner_text()

        send(page, box, "I use DuckDB for the churn warehouse.")
        updated = messages.filter(has_text="Memory updated")
        expect(updated).to_be_visible(timeout=180_000)  # the chat's fold landed
        note = updated.inner_text()

    assert "polars" in answer.lower(), answer  # the notebook's fact, from memory
    assert "1 fact injected" in answer and "project churn" in answer, answer
    assert "Injected: “Prefers polars over pandas for dataframes”" in answer, answer
    assert "remembered" in note and "DuckDB" in note, note
    bodies = persona_bodies(churn / "analysis.chat")  # the panel saved what it showed
    assert any("polars" in body for body in bodies), bodies
    turns = chat_turns(home, "analysis.chat")  # journaled in the chat's thread of churn
    assert [t["status"] for t in turns] == ["ok", "ok"], turns
    facts, recalled = run_cells(
        tmp_path, home, churn, ["%load_ext deerflow_nb", "%memory facts", "%memory recall DuckDB"]
    )[1:]
    assert "duckdb" in facts.lower(), facts  # the chat's fact, in the folder's notebook
    assert "analysis.chat" in recalled, recalled  # and the chat's thread, recalled


def test_the_reply_streams_into_the_panel_and_stays_inert(
    tmp_path: Path, site: Path, beacon: Beacon, hostile_model: ServerHandle
) -> None:
    from playwright.sync_api import expect

    # the user's own message shows an HTML image: the panel loads it (the control)
    question = f'Summarize my data <img src="{beacon.url}/control/user.png">'
    with Memory(tmp_path / "deerflow-home") as memory:  # a hostile fact, named when injected
        memory.add_fact(f'Data {VISIBLE} <img src="{beacon.url}/fact/injected.png">')
    with jai_lab(tmp_path, site, hostile_model) as lab, chromium_page() as page:
        box = open_chat(page, lab.port, "churn/analysis.chat")
        page.evaluate(RECORD_STATES, VISIBLE)
        send(page, box, question, typed=False)
        reply = page.locator(".jp-chat-rendered-message").filter(has_text=VISIBLE)
        expect(reply.filter(has_text="injected")).to_be_visible(timeout=180_000)
        page.wait_for_timeout(2000)  # time for anything the reply would do
        states = page.evaluate("window.deerflowStates")
        live = reply.evaluate_all(LIVE_PARTS)
        shown = reply.inner_text()

    # streamed: the panel showed the reply growing before its footer came
    assert len(states) >= 3 and "injected" not in states[0], states
    assert len(states[0]) < len(states[-2]) and "injected" in states[-1], states
    assert f"{VISIBLE} (chat)" in shown and f"Injected: “Data {VISIBLE}" in shown, shown
    assert live == [], (live, shown)  # nothing in the persona's reply could run or fetch
    made = sorted(p.name for p in site.rglob("*.txt"))
    assert made == [], made  # no script ran
    assert any(p.startswith("/control/") for p in beacon.paths), beacon.paths
    assert [p for p in beacon.paths if not p.startswith("/control/")] == [], beacon.paths
    body = persona_bodies(site / "churn" / "analysis.chat")[0]
    assert re.search(r"(?<!\\)<", body) is None, body  # saved inert: every tag escaped
