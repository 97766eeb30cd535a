"""Write each example notebook's ``.ipynb`` from its ``.md`` source (jupytext MyST).

The notebooks are written and reviewed as text: ``example_notebooks/NAME.md`` in jupytext's
MyST format (prose as Markdown, code cells as ```` ```{code-cell} ipython3 ```` blocks,
their ``:tags:`` kept). The ``.ipynb`` beside each is generated from it, without outputs
and with stable cell ids, for whoever opens the notebook in a Jupyter without jupytext:

    .venv/bin/python scripts/sync_notebooks.py          # rewrite the .ipynb files (make notebooks)
    .venv/bin/python scripts/sync_notebooks.py --check  # fail if one is stale (make lint, tests)

Edit the ``.md``, never the ``.ipynb``. In a JupyterLab with jupytext installed
(``make lab`` installs it) the ``.md`` opens as a notebook itself: right-click, Open With,
Jupytext Notebook.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jupytext
import nbformat

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "example_notebooks"
METADATA = {
    "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
    "language_info": {"name": "python"},
}


def sources(folder: Path = NOTEBOOK_DIR) -> list[Path]:
    """The notebooks' ``.md`` sources: every Markdown file there that jupytext reads as MyST."""
    return sorted(p for p in folder.glob("*.md") if is_notebook(p))


def is_notebook(path: Path) -> bool:
    head = path.read_text(encoding="utf-8")[:2000]
    return head.startswith("---\n") and "format_name: myst" in head


def read(path: Path) -> nbformat.NotebookNode:
    """The notebook a ``.md`` source holds, with the cell ids and metadata of its ``.ipynb``."""
    nb = jupytext.read(path)
    shown = nbformat.v4.new_notebook()
    shown.metadata = {key: dict(value) for key, value in METADATA.items()}
    stem = path.stem.replace("_", "-")
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            new = nbformat.v4.new_markdown_cell(cell.source)
        else:
            new = nbformat.v4.new_code_cell(cell.source)
        new.id = f"{stem}-{index:02d}"
        if cell.metadata.get("tags"):
            new.metadata["tags"] = list(cell.metadata["tags"])
        shown.cells.append(new)
    nbformat.validate(shown)
    return shown


def render(nb: nbformat.NotebookNode) -> str:
    return nbformat.writes(nb) + "\n"


def stale(folder: Path = NOTEBOOK_DIR) -> list[str]:
    """What ``--check`` reports: ``.ipynb`` files missing, out of date, or without a source."""
    problems = []
    made = set()
    for source in sources(folder):
        target = source.with_suffix(".ipynb")
        made.add(target.name)
        if not target.exists():
            problems.append(f"{target.name} is missing")
        elif target.read_text(encoding="utf-8") != render(read(source)):
            problems.append(f"{target.name} differs from {source.name}")
    for target in sorted(folder.glob("*.ipynb")):
        if ".executed." not in target.name and target.name not in made:
            problems.append(f"{target.name} has no {target.stem}.md")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a .ipynb is stale")
    args = parser.parse_args(argv)
    if args.check:
        problems = stale()
        for problem in problems:
            print(f"example_notebooks/{problem}: run make notebooks", file=sys.stderr)
        return 1 if problems else 0
    for source in sources():
        target = source.with_suffix(".ipynb")
        text = render(read(source))
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
            print(f"wrote {target.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
