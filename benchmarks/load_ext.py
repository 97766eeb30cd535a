"""Time ``%load_ext deerflow_nb`` beside its baseline, IPython's own start, in the same run.

Usage::

    python benchmarks/load_ext.py [--runs N]

Each run is a fresh Python process (imports are cached per process): it times creating an
``InteractiveShell`` (the baseline every notebook pays anyway) and then ``%load_ext
deerflow_nb`` in it. The figure is the median extension time; the goal is at most 20 ms
over IPython.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOAL_MS = 20.0
PROBE = """
import json, time
start = time.perf_counter()
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
ipython = time.perf_counter() - start
start = time.perf_counter()
shell.run_line_magic("load_ext", "deerflow_nb")
print(json.dumps({"ipython": ipython, "load_ext": time.perf_counter() - start}))
"""


def run_once(home: str) -> dict[str, float]:
    env = dict(os.environ, DEERFLOW_NB_HOME=home, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        runs = [run_once(home) for _ in range(args.runs)]
    ipython = statistics.median(r["ipython"] for r in runs) * 1000
    load = statistics.median(r["load_ext"] for r in runs) * 1000
    verdict = "meets" if load <= GOAL_MS else "misses"
    print(f"%load_ext deerflow_nb ({args.runs} fresh processes, median)")
    print(f"  IPython shell start (baseline): {ipython:7.1f} ms")
    print(f"  %load_ext deerflow_nb on top: {load:7.1f} ms ({verdict} <= {GOAL_MS:.0f} ms)")


if __name__ == "__main__":
    main()
