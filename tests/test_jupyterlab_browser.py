"""A hostile ``%%agent`` reply in a real JupyterLab, run by headless Chromium: inert.

JupyterLab renders a live output as trusted: raw HTML in ``text/markdown`` or
``text/html`` runs, with the user's token at hand, so a reply could write files (or
start kernels and terminals) through the Jupyter server API. Here JupyterLab is started
on 127.0.0.1 with a known token in a temporary root; the configured model is the
project's loopback server, made (by a wrapper defined in this test) to answer every chat
turn with a reply that tries every way in: an ``<img onerror>`` and a ``<script>`` that
``PUT`` a marker file through ``/api/contents``, an ``<iframe srcdoc>`` that tries the
same, a ``javascript:`` link, and remote images pointing at a beacon server on
127.0.0.1 that records every request. Chromium (Playwright, Debian's ``chromium``)
opens the notebook and runs its cells; the reply's text must be visible, no marker file
may appear and the beacon must get no request from it. The same parts are then added as
facts (as an imported memory.json could hold them) and shown by ``%memory facts`` and
``%memory history``: inert too.

A control cell shows the same payload through IPython's own ``Markdown`` display: its
marker file and beacon request must appear, so the test proves the attack works in this
very browser and server, and that the agent's view is what stops it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hostile import ReplyModel
from jupyterlab_harness import (
    CHROMIUM,
    CHROMIUM_ARGS,
    LIVE_PARTS,
    NEEDS_CHROMIUM,
    VISIBLE,
    Beacon,
    hostile_parts,
    hostile_text,
    open_notebook,
    run_cell,
    start_lab,
)
from loopback import ServerHandle, start_server

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(600),
    NEEDS_CHROMIUM,
]


@pytest.fixture
def hostile_server(beacon: Beacon) -> Iterator[ServerHandle]:
    with start_server(models=("loopback-model",)) as server:
        httpd = server._httpd  # the test's hook: the model the loopback server serves
        httpd.model = ReplyModel(httpd.model, hostile_text("agent", beacon.url))
        yield server


def notebook(beacon: Beacon) -> dict[str, Any]:
    def code(source: str) -> dict[str, Any]:
        return {
            "cell_type": "code",
            "execution_count": None,
            "metadata": {},
            "outputs": [],
            "source": source,
        }

    control = hostile_text("control", beacon.url)
    return {
        "cells": [
            code("%load_ext deerflow_nb"),
            code("%%agent --no-memory\nPlease summarize my data."),
            code(
                "from deerflow_nb.notebook.session import get_session\n"
                f"for part in {hostile_parts('fact', beacon.url)!r}:\n"
                "    get_session(get_ipython()).memory.add_fact(part)"
            ),
            code("%memory facts"),
            code("%memory history"),
            code(f"from IPython.display import Markdown\nMarkdown({control!r})"),
        ],
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def test_a_hostile_agent_reply_is_inert_in_jupyterlab(
    tmp_path: Path, beacon: Beacon, hostile_server: ServerHandle
) -> None:
    from playwright.sync_api import expect, sync_playwright

    root = tmp_path / "root"
    root.mkdir()
    (root / "hostile.ipynb").write_text(json.dumps(notebook(beacon)))
    lab = start_lab(tmp_path, root, hostile_server)
    log = tmp_path / "lab.log"
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 1000})
                cells = open_notebook(page, lab.port, "hostile.ipynb")

                run_cell(page, cells.nth(0))  # %load_ext
                run_cell(page, cells.nth(1))  # %%agent
                outputs = cells.nth(1).locator(".jp-OutputArea")
                footer = outputs.get_by_text("facts injected", exact=False).first
                expect(footer).to_be_visible(timeout=180_000)  # the turn is over
                expect(outputs.get_by_text(f"{VISIBLE} (agent)", exact=False).first).to_be_visible()
                assert hostile_server._httpd.model.turns >= 1

                run_cell(page, cells.nth(2))  # hostile facts, as an imported memory.json has
                for number in (3, 4):  # %memory facts, %memory history
                    run_cell(page, cells.nth(number))
                    table = cells.nth(number).locator(".jp-OutputArea-output table")
                    expect(table.get_by_text(VISIBLE, exact=False).first).to_be_visible(
                        timeout=60_000
                    )
                rendered = page.locator(
                    ".jp-Notebook .jp-Cell:nth-child(-n+5) .jp-OutputArea-output"
                )
                live = rendered.evaluate_all(LIVE_PARTS)
                shown = rendered.evaluate_all("els => els.map(e => e.outerHTML).join('\\n')")

                run_cell(page, cells.nth(5))  # the control: IPython's own Markdown display
                control = cells.nth(5).locator(".jp-OutputArea")
                expect(
                    control.get_by_text(f"{VISIBLE} (control)", exact=False).first
                ).to_be_visible(timeout=120_000)
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and not (root / "control-img.txt").exists():
                    page.wait_for_timeout(250)
                page.wait_for_timeout(3000)  # time for anything the agent's output would do
            finally:
                browser.close()
    finally:
        lab.stop()

    made = sorted(p.name for p in root.iterdir() if p.suffix == ".txt")
    # the control proves the harness: the same payload, shown as trusted Markdown, runs
    assert "control-img.txt" in made, (made, beacon.paths, log.read_text()[-3000:])
    assert any(p.startswith("/control/") for p in beacon.paths), beacon.paths
    # the agent's reply did nothing
    assert not [m for m in made if not m.startswith("control-")], made
    assert not [p for p in beacon.paths if not p.startswith("/control/")], beacon.paths
    assert f"{VISIBLE} (agent)" in shown and f"{VISIBLE} (fact)" in shown, shown
    assert live == [], (live, shown)  # nothing in the agent's output could run or fetch
