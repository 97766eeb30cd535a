"""The quickstart notebook in a real JupyterLab, driven by headless Chromium (issue 22).

JupyterLab is started on 127.0.0.1 (``jupyterlab_harness``) in a temporary root holding a
copy of ``example_notebooks/quickstart.ipynb``, with a temporary ``DEERFLOW_NB_HOME`` and
no model key (the offline model). The copy gets two cells at the end: a small DataFrame
``sales`` and ``%%agent Please describe sales``, a turn with a tool call (the shipped
notebook has none). Chromium runs every cell with Run ▸ Run All Cells and waits until each
has run; then:

- no cell failed;
- the ``%memory`` cell shows the panel as a live widget: its six tabs, the Category filter
  reading "all" (not blank), the facts the notebook taught; "Forget selected" asks first
  (and Cancel keeps the fact); the Recall tab finds the first message, and its button
  opens the thread with that message marked;
- the tool's result in the ``%%agent`` cell is laid out as a code block (``<pre>``) or a
  table, not run together in a paragraph, and its lines do not break inside words.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from jupyter_proc import ROOT
from jupyterlab_harness import (
    CHROMIUM,
    CHROMIUM_ARGS,
    NEEDS_CHROMIUM,
    open_notebook,
    start_lab,
    wait_for_idle_kernel,
)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(900),
    NEEDS_CHROMIUM,
]

EXAMPLES = ROOT / "example_notebooks"
TOOL_CELL = "%%agent\nPlease describe sales"
SALES_CELL = (
    "import pandas as pd\n\n"
    "sales = pd.DataFrame(\n"
    '    {"region": ["north", "south", "east"], "units": [120, 95, None], '
    '"price": [9.5, 11.0, 10.25]}\n'
    ")"
)
ALL_RAN = """() => {
  const prompts = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt')];
  return prompts.length > 0 && prompts.every(p => /\\[\\d+\\]/.test(p.textContent));
}"""


def quickstart() -> dict[str, Any]:
    """The shipped quickstart as nbformat JSON (from its jupytext source when the
    ``.ipynb`` is not in the checkout), outputs cleared."""
    path = EXAMPLES / "quickstart.ipynb"
    if path.exists():
        nb = json.loads(path.read_text(encoding="utf-8"))
    else:
        import jupytext

        source = next(p for p in map(EXAMPLES.joinpath, ("quickstart.py", "quickstart.md")))
        nb = json.loads(jupytext.writes(jupytext.read(source), fmt="ipynb"))
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    nb["metadata"]["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    return nb


def code_cell(source: str) -> dict[str, Any]:
    return {
        "cell_type": "code",
        "execution_count": None,
        "id": f"added-{abs(hash(source)) % 10**8}",
        "metadata": {},
        "outputs": [],
        "source": source,
    }


def source_of(cell: dict[str, Any]) -> str:
    source = cell["source"]
    return "".join(source) if isinstance(source, list) else source


def test_the_quickstart_runs_in_jupyterlab_with_the_panel_and_a_tool_block(
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect, sync_playwright

    nb = quickstart()
    assert TOOL_CELL not in map(source_of, nb["cells"])  # else this copy adds nothing
    nb["cells"] += [code_cell(SALES_CELL), code_cell(TOOL_CELL)]
    sources = [source_of(c).strip() for c in nb["cells"]]
    panel_at = sources.index("%memory")  # the panel cell (a bare %memory in a kernel)
    tool_at = len(sources) - 1
    root = tmp_path / "root"
    root.mkdir()
    (root / "quickstart.ipynb").write_text(json.dumps(nb), encoding="utf-8")

    lab = start_lab(tmp_path, root)  # no server: the offline model
    log = tmp_path / "lab.log"
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            try:
                cells = open_notebook(page, lab.port, "quickstart.ipynb")
                expect(cells).to_have_count(len(nb["cells"]), timeout=60_000)

                cells.first.click()  # the notebook has the focus for its menu commands
                page.get_by_role("menuitem", name="Run", exact=True).click()
                page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
                page.wait_for_function(ALL_RAN, timeout=600_000, polling=1000)
                wait_for_idle_kernel(lab.port, timeout=300)

                outputs = page.locator(".jp-Notebook .jp-OutputArea-output")
                texts = outputs.evaluate_all("els => els.map(e => e.innerText)")
                failed = [t for t in texts if "Traceback" in t or "Error:" in t]
                assert not failed, failed

                # the panel: a live widget with its tabs, not a placeholder
                cells.nth(panel_at).scroll_into_view_if_needed()  # cells off screen are hidden
                panel = cells.nth(panel_at).locator(".jp-OutputArea-output")
                tabs = panel.locator(".lm-TabBar-tab")
                expect(tabs.first).to_be_visible(timeout=60_000)
                labels = [t.strip() for t in tabs.all_text_contents()]
                assert labels[:3] == ["Profile", "Facts", "Preview"], labels
                assert labels[3].startswith("Pending") and labels[4:] == ["History", "Recall"]
                panel.locator(".lm-TabBar-tab", has_text="Facts").click()
                category = panel.locator(".widget-dropdown", has_text="Category").locator("select")
                expect(category).to_be_visible()
                shown = category.evaluate("s => s.options[s.selectedIndex]?.text ?? ''")
                assert shown == "all"  # not blank
                row = panel.locator(".widget-hbox:has(.widget-checkbox)", has_text="Prefers polars")
                expect(row.first).to_be_visible()  # a fact row of the Facts tab
                row.first.locator("input[type=checkbox]").check()
                panel.get_by_role("button", name="Forget selected").click()
                expect(panel.get_by_text("Forget 1 fact?")).to_be_visible()  # it asks first
                cells.nth(panel_at).screenshot(path=str(tmp_path / "panel.png"))
                panel.get_by_role("button", name="Cancel").click()
                expect(panel.get_by_text("Nothing forgotten")).to_be_visible()
                expect(row.first).to_be_visible()
                panel.locator(".lm-TabBar-tab", has_text="Recall").click()
                panel.get_by_placeholder("words from a past conversation").fill("telecom churn")
                panel.get_by_role("button", name="Search").click()
                results = panel.locator(".widget-html", has_text="Recall: 'telecom churn'")
                found = results.locator("table").filter(has_text="telecom company")
                expect(found.first).to_be_visible(timeout=30_000)  # the recall box's results
                panel.get_by_role("button", name=re.compile(r"^1\. ")).click()  # its thread
                expect(panel.get_by_text("(found by recall)").first).to_be_visible()

                # the tool's result: a code block (or a table), not a run-on paragraph
                cells.nth(tool_at).scroll_into_view_if_needed()
                tool = cells.nth(tool_at).locator(".jp-OutputArea-output")
                expect(tool.get_by_text("facts injected", exact=False).first).to_be_visible(
                    timeout=60_000
                )
                expect(tool.locator("code", has_text="describe_variable").first).to_be_visible()
                block = tool.locator("pre, table").filter(has_text="sales: pandas DataFrame")
                expect(block.first).to_be_visible()
                block.first.scroll_into_view_if_needed()  # JupyterLab lays out what is on screen
                expect(block.first).to_contain_text("region", use_inner_text=True, timeout=60_000)
                laid_out = block.first.inner_text()
                assert "region" in laid_out and "units" in laid_out
                assert "\n" in laid_out.strip()  # its lines are lines
                assert tool.locator("p", has_text="dtypes").count() == 0
                # JupyterLab breaks output <pre> anywhere ("di/abetic"); its code does not
                wrap = block.first.locator("code").evaluate(
                    "c => [getComputedStyle(c).whiteSpace, getComputedStyle(c).wordBreak]"
                )
                assert wrap == ["pre", "normal"], wrap
                page.screenshot(path=str(tmp_path / "quickstart.png"), full_page=True)
                if os.environ.get("DEERFLOW_NB_UPDATE_SCREENSHOT") == "1":  # docs/guide.md's
                    shutil.copyfile(tmp_path / "quickstart.png", ROOT / "docs" / "quickstart.png")
            except Exception:
                page.screenshot(path=str(tmp_path / "failed.png"), full_page=True)
                print(log.read_text()[-3000:])
                raise
            finally:
                browser.close()
    finally:
        lab.stop()
