"""``%load_ext deerflow_nb`` is cheap: no heavy imports, well under 150 ms added to IPython."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HEAVY = ("streamlit", "openai", "pandas")
BUDGET_SECONDS = 0.150

PROBE = f"""
import json, sys, time
from IPython.core.interactiveshell import InteractiveShell

heavy = {HEAVY!r}
shell = InteractiveShell.instance()
before = [m for m in heavy if m in sys.modules]
start = time.perf_counter()
shell.run_line_magic("load_ext", "deerflow_nb")
elapsed = time.perf_counter() - start
after = [m for m in heavy if m in sys.modules]
magics = shell.magics_manager.magics
registered = {{"agent": "agent" in magics["cell"], "memory": "memory" in magics["line"]}}
shell.run_line_magic("unload_ext", "deerflow_nb")
print(json.dumps({{"elapsed": elapsed, "before": before, "after": after, **registered}}))
"""


def run_probe(home: Path) -> dict:
    env = dict(os.environ, DEERFLOW_NB_HOME=str(home))
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_load_ext_is_light(home: Path) -> None:
    runs = [run_probe(home) for _ in range(3)]
    for run in runs:
        assert run["before"] == []  # IPython alone does not load them either
        assert run["after"] == [], f"%load_ext imported {run['after']}"
        assert run["agent"] and run["memory"]
    best = min(run["elapsed"] for run in runs)
    assert best < BUDGET_SECONDS, f"%load_ext deerflow_nb took {best * 1000:.0f} ms"
