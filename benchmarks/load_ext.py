"""Time ``%load_ext deerflow_nb`` beside its baseline, IPython's own start, in the same run.

Usage::

    python benchmarks/load_ext.py [--runs N] [--quick] [--results DIR | --no-results]

Each run is a fresh Python process (imports are cached per process): it times creating an
``InteractiveShell`` (the baseline every notebook pays anyway) and then ``%load_ext
deerflow_nb`` in it. The figure is the median extension time; the goal is at most 20 ms
over IPython. The figures also go to ``benchmarks/results/load_ext.json``. ``--quick``:
two processes (unless ``--runs`` says otherwise).
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
sys.path.insert(0, str(ROOT / "benchmarks"))

from benchlib import Results, add_results_options, report_written, results_dir  # noqa: E402

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, help="fresh processes timed (7; --quick: 2)")
    add_results_options(parser)
    args = parser.parse_args(argv)
    args.runs = args.runs or (2 if args.quick else 7)
    results = Results(
        "load_ext",
        about="%load_ext deerflow_nb in a fresh process, beside IPython's own shell start",
        goals={"load_ext_max_ms": GOAL_MS},
        options={"runs": args.runs},
    )
    with tempfile.TemporaryDirectory() as home:
        runs = [run_once(home) for _ in range(args.runs)]
    ipython = statistics.median(r["ipython"] for r in runs) * 1000
    load = statistics.median(r["load_ext"] for r in runs) * 1000
    verdict = "meets" if load <= GOAL_MS else "misses"
    print(f"%load_ext deerflow_nb ({args.runs} fresh processes, median)")
    print(f"  IPython shell start (baseline): {ipython:7.1f} ms")
    print(f"  %load_ext deerflow_nb on top: {load:7.1f} ms ({verdict} <= {GOAL_MS:.0f} ms)")
    results.add("load_ext", processes=args.runs, load_ext_ms=load, ipython_ms=ipython)
    report_written(results.write(results_dir(args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
