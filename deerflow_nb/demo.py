"""``make demo``: run the quickstart notebook in a real kernel on the offline model.

Uses ``$DEERFLOW_NB_HOME`` when set, else ``.demo_home`` in the current folder, so a
demo never writes into a user's personal memory by accident.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from .config import Settings

NOTEBOOK = Path("example_notebooks/quickstart.ipynb")


def run(notebook: Path = NOTEBOOK, home: Path | None = None) -> Path:
    """Execute ``notebook`` top to bottom and write the executed copy beside it."""
    import nbformat
    from nbclient import NotebookClient

    home = home or Path(os.environ.get("DEERFLOW_NB_HOME") or ".demo_home").resolve()
    home.mkdir(parents=True, exist_ok=True)
    os.environ["DEERFLOW_NB_HOME"] = str(home)
    nb = nbformat.read(notebook, as_version=4)
    started = time.perf_counter()
    NotebookClient(
        nb,
        timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(notebook.parent)}},
    ).execute()
    out = notebook.with_suffix(".executed.ipynb")
    nbformat.write(nb, out)
    elapsed = time.perf_counter() - started
    settings = Settings(home=home)
    memory = settings.memory_path
    facts = len(json.loads(memory.read_text())["facts"]) if memory.exists() else 0
    print(f"Ran {notebook} in {elapsed:.1f} s on the offline model (no key needed).")
    print(f"  executed copy: {out}")
    print(f"  memory:        {memory} ({facts} facts)")
    print(f"  journal:       {settings.journal_path}")
    print(f"  inspector:     .venv/bin/deerflow-nb inspect --home {home}")
    return out


def main() -> int:
    notebook = Path(sys.argv[1]) if len(sys.argv) > 1 else NOTEBOOK
    run(notebook)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
