"""``make demo``: run the quickstart notebook in a real kernel on the offline model.

The notebook is read from its source, ``example_notebooks/quickstart.md`` (jupytext MyST,
which ``make demo`` installs with the dev extra); an ``.ipynb`` path runs as it is.

Memory goes to ``.demo_home`` in the current folder, emptied at the start of each run so
every demo begins with an agent that knows nothing yet, or to ``$DEERFLOW_NB_DEMO_HOME``
when set (kept as it is), handed to the notebook as ``$DEERFLOW_NB_EXAMPLE_HOME``, the
one name an example notebook takes its home from. Never ``$DEERFLOW_NB_HOME``: a demo does
not touch a user's own memory.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

from .config import Settings

NOTEBOOK = Path("example_notebooks/quickstart.md")
DEFAULT_HOME = Path(".demo_home")


def run(notebook: Path = NOTEBOOK, home: Path | None = None) -> Path:
    """Execute ``notebook`` top to bottom and write the executed copy beside it."""
    import nbformat
    from nbclient import NotebookClient

    if not notebook.is_file():
        raise SystemExit(f"deerflow_nb demo: no {notebook} here; run make demo from the repository")
    if home is None:
        chosen = os.environ.get("DEERFLOW_NB_DEMO_HOME")
        home = Path(chosen or DEFAULT_HOME).resolve()
        if not chosen and home.exists():
            shutil.rmtree(home)  # the demo's own folder: each run starts from no memory
    home.mkdir(parents=True, exist_ok=True)
    os.environ["DEERFLOW_NB_EXAMPLE_HOME"] = str(home)
    nb = _read(notebook)
    started = time.perf_counter()
    NotebookClient(
        nb,
        timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(notebook.parent)}},
        # ipykernel warns that a local kernel's TCP is unencrypted: noise in a demo.
        extra_arguments=["--IPKernelApp.log_level=ERROR"],
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


def _read(notebook: Path):
    """The notebook at ``notebook``: a jupytext ``.md`` source, or an ``.ipynb``."""
    import nbformat

    if notebook.suffix == ".ipynb":
        return nbformat.read(notebook, as_version=4)
    try:
        import jupytext
    except ImportError:
        raise SystemExit(
            "deerflow_nb demo: jupytext reads the notebook's .md source: "
            "pip install jupytext (make demo installs it), or pass the .ipynb"
        ) from None
    nb = jupytext.read(notebook)
    nb.metadata.pop("jupytext", None)
    return nb


def main() -> int:
    notebook = Path(sys.argv[1]) if len(sys.argv) > 1 else NOTEBOOK
    run(notebook)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
