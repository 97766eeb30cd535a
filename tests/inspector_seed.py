"""A home with something in every corner, written the way the package writes it.

Facts, events and versions come from the real ``Memory`` API (add, fold diffs, a
reinforcement, an edit, a forget); threads, a sub-agent, turns and a summary from the
real ``Journal``; the failed fold from the queue's own ``upsert``/``fail``. Shared by
the AppTest and browser tests of the inspector, with ``served_inspector``: the inspector
served for real by ``deerflow-nb inspect``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from deerflow_nb.config import load_settings
from deerflow_nb.memory import Memory
from deerflow_nb.memory.folding import schedule as memory_queue
from deerflow_nb.storage.journal import Journal

POLARS = "Prefers polars over pandas for dataframes"
CHURN = "Works on a churn model for a telecom client"
MATPLOTLIB = "Uses matplotlib for every plot"
RUST = "Wants to learn Rust this year"


def _turn(journal: Journal, thread: str, user: str, reply: str, tokens: tuple[int, int]) -> None:
    turn = journal.start_turn(thread, "offline")
    journal.add_message(thread, {"role": "user", "content": user}, turn_id=turn)
    journal.add_message(thread, {"role": "assistant", "content": reply}, turn_id=turn)
    journal.end_turn(
        turn, status="ok", input_tokens=tokens[0], output_tokens=tokens[1], facts_injected=2
    )


def quiet_memory(home: Path) -> Memory:
    """The home's Memory without a queue worker: nothing folds behind the test's back."""
    settings = load_settings(home)
    settings.memory.enabled = False
    return Memory(home, settings=settings)


def seed_home(home: Path) -> dict[str, Any]:
    """Fill ``home``; returns the ids the tests look for."""
    mem = quiet_memory(home)
    try:
        polars = mem.add_fact(POLARS, category="preference", confidence=0.9)
        churn = mem.add_fact(CHURN, category="context", confidence=0.85)
        report = mem.apply(
            {
                "user": {
                    "workContext": {
                        "summary": "Data scientist at a telecom company",
                        "shouldUpdate": True,
                    }
                },
                "newFacts": [
                    {"content": MATPLOTLIB, "category": "knowledge", "confidence": 0.8},
                    {"content": RUST, "category": "goal", "confidence": 0.75},
                ],
            },
            source="thread-sales",
        )
        matplotlib, rust = report.added
        mem.apply(
            {"newFacts": [{"content": POLARS, "category": "preference", "confidence": 0.9}]},
            source="thread-sales",
        )
        mem.facts.edit(churn["id"], confidence=0.95)
        mem.forget(matplotlib)
        versions = [v["id"] for v in mem.versions()]
    finally:
        mem.close()

    journal = Journal(home / "journal.db")
    try:
        journal.ensure_thread("thread-sales", title="Sales analysis", model="offline")
        _turn(journal, "thread-sales", "I prefer polars over pandas.", "Noted.", (420, 96))
        _turn(journal, "thread-sales", "Plot monthly sales.", "Here is the plot.", (610, 150))
        journal.ensure_thread(
            "thread-sales-sub",
            kind="subagent",
            parent_id="thread-sales",
            title="Research: plotting libraries",
            model="offline",
        )
        _turn(journal, "thread-sales-sub", "Compare plotting libraries.", "Altair.", (200, 40))
        journal.add_summary(
            "thread-sales", 2, "The user analyses sales data with polars.", model="offline"
        )
        journal.ensure_thread("thread-notes", title="Reading notes", model="offline")
        _turn(journal, "thread-notes", "I want to learn Rust.", "Good plan.", (300, 50))
        snapshot = journal.messages("thread-notes")
        with journal.transaction() as db:
            memory_queue.queue_snapshot(db, "thread-notes", snapshot, len(snapshot), 3600.0)
        row = journal.db["memory_queue"].get("thread-notes")
        memory_queue.fail(journal, row, "ModelError: the model server did not answer")
    finally:
        journal.close()
    return {
        "polars": polars["id"],
        "churn": churn["id"],
        "matplotlib": matplotlib,
        "rust": rust,
        "versions": versions,
    }


# -- two projects ---------------------------------------------------------------------------------
ALPHA_FACT = "The churn_alpha dataset's target column is churned_90d."
BETA_FACT = "The beta_sales dataset's target column is revenue_q3."
SHARED_FACT = "The user prefers polars for every dataset."


def seed_projects(home: Path) -> dict[str, str]:
    """A home with the user's fact, one fact of project ``alpha`` and one of ``beta`` and a
    summary of each project (folded the way a turn in that project folds); returns ids."""
    mem = quiet_memory(home)
    try:
        user = mem.add_fact(SHARED_FACT, category="preference", confidence=0.9)
        alpha = mem.add_fact(ALPHA_FACT, category="context", confidence=0.9, project="alpha")
        beta = mem.add_fact(BETA_FACT, category="context", confidence=0.9, project="beta")
        for name in ("alpha", "beta"):
            mem.apply(
                {
                    "newFacts": [],
                    "projectContext": {
                        "summary": f"Project {name} predicts its dataset's target.",
                        "shouldUpdate": True,
                    },
                },
                source=f"thread-{name}",
                project=name,
            )
    finally:
        mem.close()
    return {"user": user["id"], "alpha": alpha["id"], "beta": beta["id"]}


# -- hostile text --------------------------------------------------------------------------------
BEACON_PATH = "/beacon"


def hostile(beacon: str = "http://127.0.0.1:9", tag: str = "") -> str:
    """Text that would run script, frame a page or fetch ``beacon`` if rendered as markup.

    Every construct a prompt injection or a crafted memory.json could plant: raw HTML with an
    event handler, a script, an iframe, a ``javascript:`` link, remote Markdown images (inline
    and as a reference), a Streamlit icon and colour directive, and a newline-started heading.
    ``tag`` tells the places apart in the beacon server's log.
    """
    url = f"{beacon}{BEACON_PATH}?{tag}"
    return (
        f"{tag} <img src={url}-img onerror=alert(1)> <script>alert(2)</script> "
        f'<iframe src="{url}-frame"></iframe> [click me](javascript:alert(3)) '
        f"![b]({url}-md) ![ref][r] :red[red] :material/bolt: $x^2$ "
        f"<a href='javascript:alert(4)'>a</a>\n\n# heading\n\n[r]: {url}-ref"
    )


def seed_hostile_home(home: Path, beacon: str = "http://127.0.0.1:9") -> dict[str, Any]:
    """Hostile text in every place the inspector shows home data: a fact (its content and
    category), the user and history summaries, a thread's title and id, a sub-agent's title,
    a thread summary, journal messages, a queue row's last_error and a pending change."""
    mem = quiet_memory(home)
    try:
        fact = mem.add_fact(hostile(beacon, "fact"), category="context", confidence=0.95)
        mem.add_fact("Prefers polars over pandas", category="preference", confidence=0.9)
        mem.apply(
            {
                "user": {"workContext": {"summary": hostile(beacon, "user"), "shouldUpdate": True}},
                "history": {
                    "recentMonths": {"summary": hostile(beacon, "history"), "shouldUpdate": True}
                },
                "newFacts": [
                    {"content": hostile(beacon, "fold"), "category": "goal", "confidence": 0.8}
                ],
            },
            source="thread-evil",
        )
        # The newest version's diff (the Versions tab's default) shows old and new content.
        mem.facts.edit(fact["id"], hostile(beacon, "edited"), confidence=0.9)
        mem.review.enabled = True
        mem.apply(
            {"newFacts": [{"content": hostile(beacon, "pending"), "category": "knowledge",
                           "confidence": 0.9}]},
            source="thread-evil",
        )  # fmt: skip
        pending = [p["id"] for p in mem.pending()]
    finally:
        mem.close()
    journal = Journal(home / "journal.db")
    try:
        journal.ensure_thread("thread-evil", title=hostile(beacon, "title"), model="offline")
        _turn(journal, "thread-evil", hostile(beacon, "user-msg"), hostile(beacon, "reply"), (9, 9))
        _turn(journal, "thread-evil", "Second question.", "Second answer.", (5, 5))
        journal.ensure_thread(
            "thread-evil-sub",
            kind="subagent",
            parent_id="thread-evil",
            title=hostile(beacon, "subtitle"),
            model="offline",
        )
        _turn(journal, "thread-evil-sub", "Look it up.", hostile(beacon, "sub-reply"), (3, 3))
        journal.add_summary("thread-evil", 2, hostile(beacon, "summary"), model="offline")
        journal.ensure_thread("![b](" + beacon + BEACON_PATH + "?thread-id)", model="offline")
        snapshot = journal.messages("thread-evil")
        with journal.transaction() as db:
            memory_queue.queue_snapshot(db, "thread-evil", snapshot, len(snapshot), 3600.0)
        row = journal.db["memory_queue"].get("thread-evil")
        memory_queue.fail(journal, row, "ModelError: " + hostile(beacon, "error"))
    finally:
        journal.close()
    return {"fact": fact["id"], "pending": pending}


# -- the inspector served for real ------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, log: Path, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the inspector exited with {proc.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200 and response.read().strip() == b"ok":
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.25)
    pytest.fail(f"no answer from {url} in {timeout:.0f} s:\n{log.read_text()}")


ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def served_inspector(home: Path, tmp_path: Path, *, script: bool = False) -> Iterator[int]:
    """``deerflow-nb inspect --home HOME`` on a free loopback port, until the block ends;
    with ``script``, ``streamlit run inspector_app.py`` from the checkout instead, the
    other way the README starts it (its home from ``DEERFLOW_NB_HOME``)."""
    port = free_port()
    log = tmp_path / "inspector.log"
    if script:
        command = [
            sys.executable, "-m", "streamlit", "run", str(ROOT / "inspector_app.py"),
            "--server.port", str(port), "--server.address", "127.0.0.1",
            "--server.headless", "true", "--browser.gatherUsageStats", "false",
        ]  # fmt: skip
        env = {**os.environ, "DEERFLOW_NB_HOME": str(home)}
    else:
        command = [
            sys.executable, "-m", "deerflow_nb.cli", "inspect",
            "--home", str(home), "--port", str(port),
        ]  # fmt: skip
        env = {**os.environ, "DEERFLOW_NB_HOME": str(tmp_path / "not-this-one")}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=str(ROOT)
        )
    try:
        wait_healthy(f"http://127.0.0.1:{port}/_stcore/health", proc, log)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
