"""Every step the README gives a new user runs, and shows what the README says it shows.

The README is parsed, not copied: its ``%``/``%%`` blocks and its Python blocks run in a
real kernel on the offline model (each group in a fresh kernel with a temporary
``DEERFLOW_NB_HOME``), and the output the README prints after a block (a facts table, a
quoted reply with its footer) must be what that block printed. Its two commands must be
targets of the Makefile (``tests/test_notebooks.py`` runs ``make demo``), and every link
in the README and docs/ must name a file that exists (MkDocs checks the links between
docs pages; these are the ones it cannot see).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from test_notebooks import output_text

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CELL_TIMEOUT = 120
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.M | re.S)
LINK = re.compile(r"\]\(([^)\s]+)\)")


@dataclass
class Step:
    """A block the README tells the user to run, and what the README shows after it."""

    lang: str
    code: str
    shown: str = ""
    group: str = ""
    outputs: str = field(default="", repr=False)


def steps(text: str) -> list[Step]:
    """The README's runnable blocks in order; each gets the prose up to the next block
    (its shown output), and the ``## section`` it sits in (the kernel it runs in)."""
    found: list[Step] = []
    matches = list(FENCE.finditer(text))
    for i, match in enumerate(matches):
        lang, code = match.group(1), match.group(2)
        runnable = lang == "python" or (not lang and code.lstrip().startswith("%"))
        if not runnable:
            continue
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        after = text[match.end() : end].split("\n## ")[0]
        section = re.findall(r"^## (.+)$", text[: match.start()], re.M)[-1]
        group = section if lang != "python" or "%load_ext" in code else f"{section}: Python"
        found.append(Step(lang, code, after.strip(), group))
    return found


def run(blocks: list[Step], workdir: Path) -> None:
    """Run the blocks as the cells of one notebook in a fresh kernel; keep each one's text."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(step.code) for step in blocks]
    NotebookClient(
        nb,
        timeout=CELL_TIMEOUT,
        kernel_name="python3",
        resources={"metadata": {"path": str(workdir)}},
    ).execute()
    for step, cell in zip(blocks, nb.cells, strict=True):
        step.outputs = output_text(cell)


def table_rows(shown: str) -> list[list[str]]:
    """The body rows of a Markdown table, as cells."""
    lines = [line for line in shown.splitlines() if line.startswith("|")]
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]


def quoted(shown: str) -> list[str]:
    """A blockquote's paragraphs, each joined into one line, without a trailing ``…``."""
    lines = [line.removeprefix(">").strip() for line in shown.splitlines() if line.startswith(">")]
    text = "\n".join(lines)
    return [" ".join(p.split()).removesuffix("…").strip() for p in text.split("\n\n") if p.strip()]


def test_the_readme_is_read_in_five_minutes() -> None:
    size = len(README.read_bytes())
    assert size < 12_000, f"README.md is {size} bytes: move a section into docs/"


def test_the_two_commands_are_make_targets() -> None:
    text = README.read_text(encoding="utf-8")
    block = text.split("## Two commands", 1)[1]
    commands = [line.split("#")[0].strip() for line in FENCE.search(block).group(2).splitlines()]
    assert commands == ["make demo", "make test"]
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for command in commands:
        assert re.search(rf"^{command.split()[1]}:", makefile, re.M), command


def test_every_link_names_a_file_that_exists() -> None:
    """README links are relative to the root; docs/ links to files outside docs/ are
    written from the root (``/example_notebooks/…``, see mkdocs.yml)."""
    pages = [README, *sorted((ROOT / "docs").glob("*.md"))]
    checked = 0
    for page in pages:
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            path = target.split("#")[0]
            if not path or re.match(r"[a-z][a-z0-9+.-]*:", path):
                continue
            base = ROOT if page == README or path.startswith("/") else page.parent
            exists = (base / path.lstrip("/")).is_file()
            assert exists, f"{page.name} links to {target}: no such file"
            checked += 1
    assert checked >= 10


def test_the_readme_steps_run_and_show_what_the_readme_shows(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    found = steps(README.read_text(encoding="utf-8"))
    codes = [s.code for s in found]
    assert any(c.startswith("%load_ext deerflow_nb") for c in codes), codes
    assert any(c.startswith("%%agent") for c in codes) and any("%memory" in c for c in codes)
    groups = list(dict.fromkeys(s.group for s in found))
    for i, group in enumerate(groups):
        own = tmp_path / f"home-{i}"
        own.mkdir()
        monkeypatch.setenv("DEERFLOW_NB_HOME", str(own))
        run([s for s in found if s.group == group], tmp_path)

    compared = 0
    for step in found:
        assert "Traceback" not in step.outputs and "Error" not in step.outputs, step
        lines = re.sub(r"\\(.)", r"\1", step.outputs).splitlines()  # Markdown escapes undone
        for row in table_rows(step.shown):
            _, category, confidence, content, _ = row
            cells = " \\| ".join(map(re.escape, (category, confidence, content)))
            fact = re.compile(rf"\| {cells} \|")
            assert any(fact.search(line) for line in lines), (row, step.outputs)
            compared += 1
        flat = " ".join(step.outputs.split())
        for paragraph in quoted(step.shown):
            # A footer's token counts follow the system prompt's wording; the rest is exact.
            pattern = re.escape(paragraph.strip("*"))
            pattern = re.sub(r"\d+\\ in\\ /\\ \d+\\ out", r"\\d+ in / \\d+ out", pattern)
            assert re.search(pattern, flat), (paragraph, step.outputs)
            compared += 1
    assert compared >= 7, found
    python = [s for s in found if s.group.endswith(": Python")]
    assert python and "Prefers polars over pandas" in python[-1].outputs, python
