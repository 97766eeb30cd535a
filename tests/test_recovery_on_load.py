"""A kernel killed before its fold: the next ``%load_ext`` folds what it left queued."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

JOURNAL_A_TURN = """
from deerflow_nb import Agent
agent = Agent()
agent.run("I prefer polars over pandas for dataframes.", thread="killed")
print("journaled", flush=True)
import time
time.sleep(60)
"""

LOAD_AND_WAIT = """
import json, sys, time
from pathlib import Path
from IPython.core.interactiveshell import InteractiveShell

shell = InteractiveShell.instance()
shell.run_line_magic("load_ext", "deerflow_nb")
memory = Path(sys.argv[1]) / "memory.json"
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    if memory.exists() and json.loads(memory.read_text())["facts"]:
        print("folded", flush=True)
        break
    time.sleep(0.2)
"""


@pytest.mark.slow
def test_load_ext_folds_what_a_killed_kernel_left_queued(home: Path) -> None:
    (home / "config.yaml").write_text("memory:\n  debounce_seconds: 1\n")
    env = dict(os.environ, DEERFLOW_NB_HOME=str(home))
    victim = subprocess.Popen(
        [sys.executable, "-c", JOURNAL_A_TURN], env=env, stdout=subprocess.PIPE, text=True
    )
    assert victim.stdout is not None and victim.stdout.readline().strip() == "journaled"
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(timeout=10)
    assert not (home / "memory.json").exists()  # the fold never ran

    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", LOAD_AND_WAIT, str(home)],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert "folded" in result.stdout, result.stderr
    assert time.monotonic() - started < 60
    facts = json.loads((home / "memory.json").read_text())["facts"]
    assert any("polars" in f["content"].lower() for f in facts)
