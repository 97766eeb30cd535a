"""``%load_ext deerflow_nb`` is cheap: it imports none of the heavy libraries, nor the agent
or the ``%memory`` grammar, until a magic is first used (``benchmarks/load_ext.py`` times it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# The MCP server, the chat persona and what it needs are never a kernel's.
HEAVY = (
    "streamlit",
    "openai",
    "pandas",
    "mcp",
    "deerflow_nb.persona",
    "jupyter_ai_persona_manager",
    "jupyterlab_chat",
    # The team's PostgreSQL client: loaded only when a shared project is used (issue 39).
    "deerflow_nb.shared",
    "psycopg",
)
DEFERRED = (
    "deerflow_nb.agent",
    "deerflow_nb.notebook.memory_magic",
    "deerflow_nb.memory",
    "sqlite_utils",
)

PROBE = f"""
import json, sys, time
from IPython.core.interactiveshell import InteractiveShell

heavy = {HEAVY!r} + {DEFERRED!r}
shell = InteractiveShell.instance()
before = [m for m in heavy if m in sys.modules]
shell.run_line_magic("load_ext", "deerflow_nb")
after = [m for m in heavy if m in sys.modules]
magics = shell.magics_manager.magics
registered = {{"agent": "agent" in magics["cell"], "memory": "memory" in magics["line"]}}
shell.run_line_magic("memory", "facts")
used = "deerflow_nb.notebook.memory_magic" in sys.modules
shell.run_line_magic("unload_ext", "deerflow_nb")
print(json.dumps({{"before": before, "after": after, "used": used, **registered}}))
"""


def run_probe(home: Path) -> dict:
    env = dict(os.environ, DEERFLOW_NB_HOME=str(home))
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_load_ext_is_light(home: Path) -> None:
    run = run_probe(home)
    assert run["before"] == []  # IPython alone does not load them either
    assert run["after"] == [], f"%load_ext imported {run['after']}"
    assert run["agent"] and run["memory"]
    assert run["used"]  # the first %memory loaded its implementation and ran
