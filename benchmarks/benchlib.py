"""What every benchmark shares: where the LOCOMO data is, and the results file it writes.

Each benchmark prints its table and also writes its figures to
``benchmarks/results/<name>.json`` (``--results DIR`` elsewhere, ``--no-results`` not at
all); ``scripts/bench_tables.py`` renders docs/benchmarks.md's tables from those files.
With ``--quick`` a benchmark runs at tiny sizes, to show that it still runs
(``tests/test_benchmarks.py`` runs every one so in CI): its figures are no measurement, so
they go to a new temporary folder (or ``--results DIR``), never to ``benchmarks/results``.
A results file holds::

    {
      "benchmark": "fold",                 # the script's name
      "about": "...",                      # what it measures, one line
      "goals": {...},                      # the goals its figures are held to
      "last_run": "2026-11-25T06:14:01Z",  # the latest run that wrote the file
      "runs": {"<date>": {"machine": {...}, "options": {...}}},
      "figures": {"<key>": {"measured": "<date>", ...numbers and their baselines...}}
    }

A run replaces the figures it measured and keeps the others, each still marked with the
run that measured it (its ``measured`` date, a key of ``runs``): a run with
``--no-embeddings`` leaves the MiniLM rows of an earlier run in place, dated. ``runs``
keeps the machine (CPU count, Python version, load average at the start) and the options
(embeddings on or off, the data folder's name...) of every run a figure still comes from.

This module imports nothing heavy: the tests load it without running any benchmark.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "benchmarks" / "results"
SCHEMA_VERSION = 1


def main_checkout(root: Path = ROOT) -> Path:
    """The repository's main checkout: ``root`` itself, or, when ``root`` is a git
    worktree (its ``.git`` is a file naming ``.git/worktrees/<name>``), the checkout that
    holds the shared ``.git`` folder."""
    dot_git = root / ".git"
    if not dot_git.is_file():
        return root
    text = dot_git.read_text(encoding="utf-8").strip()
    if not text.startswith("gitdir:"):
        return root
    gitdir = (root / text.removeprefix("gitdir:").strip()).resolve()
    commondir = gitdir / "commondir"
    if not commondir.is_file():
        return root
    common = (gitdir / commondir.read_text(encoding="utf-8").strip()).resolve()
    return common.parent


def default_data_dir(name: str = "locomo-dev", root: Path = ROOT) -> Path:
    """``../shared/data/<name>`` beside the repository, or beside its main checkout when
    this is a worktree and only the main checkout has it."""
    candidates = [root.parent / "shared" / "data" / name]
    main = main_checkout(root)
    if main != root:
        candidates.append(main.parent / "shared" / "data" / name)
    return next((path for path in candidates if path.is_dir()), candidates[0])


def has_conversations(data_dir: Path) -> bool:
    """Whether ``data_dir`` holds LOCOMO conversations; if not, says so on stderr."""
    if data_dir.is_dir() and any(data_dir.glob("*.json")):
        return True
    print(f"error: no LOCOMO conversations (*.json) in {data_dir}", file=sys.stderr)
    return False


def add_results_options(parser: argparse.ArgumentParser) -> None:
    """``--results DIR`` (default ``benchmarks/results``), ``--no-results`` and ``--quick``."""
    parser.add_argument(
        "--results",
        type=Path,
        metavar="DIR",
        help="write the figures to DIR/<benchmark>.json (default benchmarks/results; "
        "with --quick, a new temporary folder)",
    )
    parser.add_argument(
        "--no-results", action="store_true", help="print the tables only, write no JSON"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny sizes: check that the benchmark runs (no measurement; "
        "benchmarks/results is left alone)",
    )


def results_dir(args: argparse.Namespace) -> Path | None:
    """Where ``args`` says to write results, or None with ``--no-results``: ``--results``,
    else a new temporary folder with ``--quick``, else ``benchmarks/results``."""
    if args.no_results:
        return None
    if args.results is not None:
        return Path(args.results)
    if getattr(args, "quick", False):
        return Path(tempfile.mkdtemp(prefix="deerflow-bench-quick-"))
    return RESULTS_DIR


def now_stamp() -> str:
    """The run's date: UTC, to the second, ISO 8601."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def machine() -> dict[str, Any]:
    """What the figures were measured on: CPU count, Python, OS, load at the start."""
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):  # not on every platform
        load = None
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "system": platform.system(),
        "arch": platform.machine(),
        "load_average": load,
    }


AT_START = machine()  # when a benchmark imports this, before its own work adds load


def rounded(value: Any, digits: int = 6) -> Any:
    """``value`` with its floats rounded (nested dicts and lists too), so the file reads
    well; NaN becomes None (JSON has no NaN). Six decimals, so that rendering a figure to
    three does not round it twice (0.64251 kept as 0.6425 would show as 0.642)."""
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else round(value, digits)
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [rounded(v, digits) for v in value]
    return value


class Results:
    """The figures of one run of one benchmark, merged into its results file on write."""

    def __init__(
        self,
        name: str,
        *,
        about: str,
        goals: dict[str, Any],
        options: dict[str, Any],
        date: str | None = None,
        machine_info: dict[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.about = about
        self.goals = goals
        self.options = options
        self.date = date or now_stamp()
        self.machine = machine_info if machine_info is not None else AT_START
        self.figures: dict[str, dict[str, Any]] = {}

    def add(self, key: str, **values: Any) -> None:
        """One figure (or a row of them, with their baselines) measured by this run."""
        self.figures[key] = {"measured": self.date, **rounded(values)}

    def merged(self, previous: dict[str, Any] | None) -> dict[str, Any]:
        """The file's new content: this run's figures over ``previous``'s, which keep
        their ``measured`` date; ``runs`` keeps every run a figure still comes from."""
        figures: dict[str, Any] = {}
        runs: dict[str, Any] = {}
        if previous and previous.get("benchmark") == self.name:
            figures.update(previous.get("figures", {}))
            runs.update(previous.get("runs", {}))
        figures.update(self.figures)
        runs[self.date] = {"machine": self.machine, "options": self.options}
        used = {figure.get("measured") for figure in figures.values()}
        return {
            "schema": SCHEMA_VERSION,
            "benchmark": self.name,
            "about": self.about,
            "goals": self.goals,
            "last_run": self.date,
            "runs": {date: runs[date] for date in sorted(runs) if date in used},
            "figures": {key: figures[key] for key in sorted(figures)},
        }

    def write(self, directory: Path | None) -> Path | None:
        """Merge into ``directory/<name>.json`` (no-op when ``directory`` is None)."""
        if directory is None:
            return None
        path = Path(directory) / f"{self.name}.json"
        previous = None
        if path.exists():
            try:
                previous = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as exc:
                raise SystemExit(
                    f"error: {path} is not valid JSON ({exc}); fix or delete it"
                ) from None
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(self.merged(previous), indent=2, ensure_ascii=False) + "\n"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
        return path


def report_written(path: Path | None) -> None:
    """Say where the figures went (on stdout, after the tables)."""
    if path is not None:
        try:
            shown = path.resolve().relative_to(ROOT)
        except ValueError:
            shown = path
        print(f"\nfigures written to {shown}")
