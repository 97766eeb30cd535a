"""Memory changes in sight in real JupyterLab (issue 30 item 7): a ``%%agent`` cell that
has finished, with the kernel idle and nothing else running, gains its "Memory updated"
line when the background worker folds its turn: the worker's update reaches the cell's
output by its display id, as a user sees it in Chromium."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jupyterlab_harness import (
    CHROMIUM,
    CHROMIUM_ARGS,
    NEEDS_CHROMIUM,
    open_notebook,
    run_cell,
    start_lab,
)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(600),
    NEEDS_CHROMIUM,
]


def code(source: str) -> dict:
    return {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
            "source": source}  # fmt: skip


def test_the_fold_workers_line_appears_in_the_finished_cell(tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    home = tmp_path / "deerflow-home"  # the kernels' home (start_lab)
    home.mkdir()
    (home / "config.yaml").write_text("memory:\n  debounce_seconds: 20\n", encoding="utf-8")
    root = tmp_path / "root"
    root.mkdir()
    notebook = {
        "cells": [code("%load_ext deerflow_nb"), code("%%agent\nI prefer polars over pandas.")],
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (root / "notice.ipynb").write_text(json.dumps(notebook))
    lab = start_lab(tmp_path, root)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                cells = open_notebook(page, lab.port, "notice.ipynb")
                run_cell(page, cells.nth(0))
                run_cell(page, cells.nth(1))
                output = cells.nth(1).locator(".jp-OutputArea")
                expect(output.get_by_text("fact", exact=False).first).to_be_visible(
                    timeout=180_000
                )  # the footer: the turn is over, the fold still waits
                line = output.get_by_text(
                    "Memory updated: remembered “Prefers polars over pandas”", exact=False
                )
                expect(cells.nth(1).locator(".jp-InputPrompt")).to_have_text("[2]:")  # done
                assert line.count() == 0  # the fold waits out its 20 s debounce
                expect(line.first).to_be_visible(timeout=120_000)
                assert output.locator(".jp-OutputArea-output").count() == 1  # in place
            finally:
                browser.close()
    finally:
        lab.stop()
