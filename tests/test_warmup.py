"""The first turn is warmed in the background once the cell that ran ``%load_ext`` ends:
the magics' modules imported, and for a home in use memory opened and the index built."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from IPython.core.interactiveshell import InteractiveShell

from deerflow_nb import Memory
from deerflow_nb.memory.retrieval import fact_index
from deerflow_nb.notebook import warmup

PROBE = """
import json, sys, threading
from IPython.core.interactiveshell import InteractiveShell
from deerflow_nb.notebook import warmup

shell = InteractiveShell.instance()
shell.run_line_magic("load_ext", "deerflow_nb")
during = "deerflow_nb.notebook.agent_magic" in sys.modules
shell.run_cell("1 + 1")  # the cell ends: the warm-up starts
getattr(shell, warmup._THREAD_ATTR).join()
print(json.dumps({"during": during, "after": "deerflow_nb.notebook.agent_magic" in sys.modules,
                  "memory": "deerflow_nb.memory.retrieval.recall" in sys.modules}))
"""


def test_a_fresh_kernel_imports_the_turn_once_the_load_ext_cell_ends(home: Path) -> None:
    env = dict(os.environ, DEERFLOW_NB_HOME=str(home))
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {
        "during": False,
        "after": True,
        "memory": True,
    }
    assert not home.exists() or not any(home.iterdir())  # a home never used stays untouched


def test_a_home_in_use_has_its_index_built_before_the_first_turn(
    home: Path, ipython: InteractiveShell
) -> None:
    memory = Memory(home)
    memory.add_fact("Prefers polars over pandas for dataframes", "preference", 0.9)
    memory.close()
    before = fact_index.builds
    ipython.run_line_magic("load_ext", "deerflow_nb")
    try:
        ipython.run_cell("x = 1")
        getattr(ipython, warmup._THREAD_ATTR).join()
        assert fact_index.builds == before + 1
        ipython.run_line_magic("memory", "preview --context polars")
        assert fact_index.builds == before + 1  # the turn found it built
    finally:
        ipython.run_line_magic("unload_ext", "deerflow_nb")
