"""The write path reads top-down at run time (issue 38), not only in its imports: a fold
and a person's change, traced as they run, never call back up the path (a callback handed
down, like the lambda the gate once called to ask ``Memory`` whether review was on, is
exactly what an import scan cannot see), and storage calls nothing of memory."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from test_architecture import FOLD_PATH

from deerflow_nb import Memory
from deerflow_nb.memory import api
from deerflow_nb.memory.updates import gate

TALK = [
    {"role": "user", "content": "I prefer polars over pandas for data work."},
    {"role": "assistant", "content": "Noted."},
]


def _module_of(frame: FrameType | None) -> str | None:
    """The package module of the nearest frame from ``frame`` up (a ``with`` block's exit
    runs through contextlib: the caller is the module that wrote the ``with``)."""
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name.startswith("deerflow_nb"):
            return name
        frame = frame.f_back
    return None


@contextmanager
def calls() -> Iterator[set[tuple[str, str]]]:
    """Every (caller module, callee module) pair of the package's calls in the body, in
    every thread (module bodies run by a lazy import are not calls)."""
    seen: set[tuple[str, str]] = set()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or frame.f_code.co_name == "<module>":
            return
        callee = frame.f_globals.get("__name__", "")
        if callee.startswith("deerflow_nb"):
            caller = _module_of(frame.f_back)
            if caller is not None and caller != callee:
                seen.add((caller, callee))

    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


def climbs(edges: set[tuple[str, str]], path: list[str]) -> list[str]:
    """Calls from a module of ``path`` to one earlier in it, and from storage to memory."""
    rank = {module: n for n, module in enumerate(path)}
    found = [
        f"{caller} calls {callee}"
        for caller, callee in edges
        if caller in rank and callee in rank and rank[callee] < rank[caller]
    ]
    found += [
        f"{caller} calls {callee}"
        for caller, callee in edges
        if caller.startswith("deerflow_nb.storage") and callee.startswith("deerflow_nb.memory")
    ]
    return sorted(found)


def traced(home: Path, act: Callable[[Memory], Any]) -> set[tuple[str, str]]:
    memory = Memory(home)
    try:
        for i in range(5):
            memory.add_fact(f"Knows topic number {i} about distributed systems")
        memory.add_messages("talk", TALK)
        with calls() as edges:
            act(memory)
    finally:
        memory.close()
    return edges


def test_a_fold_never_calls_back_up_the_write_path(tmp_path: Path) -> None:
    edges = traced(tmp_path, lambda memory: memory.flush())
    assert ("deerflow_nb.memory.folding.fold", "deerflow_nb.memory.updates.gate") in edges
    assert not climbs(edges, FOLD_PATH), climbs(edges, FOLD_PATH)


def test_a_review_mode_fold_and_a_persons_change_never_call_back_up(tmp_path: Path) -> None:
    def act(memory: Memory) -> None:
        memory.review.enabled = True  # the gate asks the review switch on each change
        memory.flush()
        memory.add_fact("Uses DuckDB for local analytics")

    edges = traced(tmp_path, act)
    assert ("deerflow_nb.memory.updates.gate", "deerflow_nb.memory.updates.review") in edges
    assert not climbs(edges, FOLD_PATH), climbs(edges, FOLD_PATH)


def test_the_trace_finds_a_planted_callback() -> None:
    # A function of memory/api.py's that the gate's code calls: a callback handed down.
    handed_down = eval("lambda: None", vars(api))  # noqa: S307 (a planted function)
    calling = eval("lambda callback: callback()", vars(gate))  # noqa: S307
    with calls() as edges:
        calling(handed_down)
    assert climbs(edges, FOLD_PATH) == [
        "deerflow_nb.memory.updates.gate calls deerflow_nb.memory.api"
    ]
