"""The write path reads top-down at run time (issue 38), not only in its imports: a fold
and a person's change, traced as they run, never call back up the path (a callback handed
down, like the lambda the gate once called to ask ``Memory`` whether review was on, is
exactly what an import scan cannot see), and storage calls nothing of memory. More: no
module of the write path calls into a module it does not import (a function or an object
handed to it from above, whatever its name); traced on a fold that changes memory, a
person's add and forget, a project's rename and forget, and a team sync over a shared
project (whose server does not answer: the gate's tap and the outbox still run)."""

from __future__ import annotations

import ast
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from test_architecture import FOLD_PATH, LISTENERS, PACKAGE, module_name

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
        # (a generator expression's frame is its data, consumed: not a call)
        if event != "call" or frame.f_code.co_name in ("<module>", "<genexpr>"):
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


# The write path's modules (tests/test_architecture.py's WRITE_PATH, as module names).
WRITE_PATH = (
    "deerflow_nb.memory.updates.",
    "deerflow_nb.memory.folding.",
    "deerflow_nb.storage.",
    "deerflow_nb.memory.sqlite_home",
    "deerflow_nb.memory.sharing",
)
# Calls into a module the caller does not import, kept on purpose, and why.
KEPT_EDGES = {
    ("deerflow_nb.memory.updates.gate", "deerflow_nb.memory.sharing"): (
        "gate.tap, set by Sharing (test_architecture.KEPT_HANDED: a refactor of its own)"
    ),
    ("deerflow_nb.memory.updates.write_protocol", "deerflow_nb.memory.listeners"): LISTENERS,
    ("deerflow_nb.memory.updates.gate", "deerflow_nb.memory.listeners"): LISTENERS,
    ("deerflow_nb.memory.updates.review", "deerflow_nb.memory.listeners"): LISTENERS,
    ("deerflow_nb.memory.updates.edits", "deerflow_nb.memory.updates.gate"): (
        "edits.py holds the gate's rule for an edit (apply_edit, which the gate imports) and "
        "the hand-edit door above the gate (Edits, which submits to it, typed as "
        "schema.changes.ChangeDoor so as not to import the gate back): a module serving both "
        "sides; splitting it is a change of its own (reported)"
    ),
}


def imported_modules(module: str) -> set[str]:
    """Every package module ``module`` imports, anywhere in it (lazy and type-only imports
    too; ``from package import submodule`` as the submodule, a name a package re-exports as
    the module that defines it too: ``from ..llm import get_chat_model`` is llm.registry's)."""
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    path = paths[module]
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                if f"{target}.{alias.name}" in paths:
                    found.add(f"{target}.{alias.name}")
                    continue
                found.add(target)
                defined = getattr(sys.modules.get(target), alias.name, None)
                found.add(getattr(defined, "__module__", None) or target)
    return found & set(paths)


def unimported(edges: set[tuple[str, str]]) -> list[str]:
    """Calls from a write-path module into a package module it does not import: a function
    or an object handed to it, from above (``Memory``'s wiring) or beside."""
    found = []
    for caller, callee in sorted(edges):
        if not caller.startswith(WRITE_PATH) or (caller, callee) in KEPT_EDGES:
            continue
        imported = imported_modules(caller)
        if callee not in imported and not any(m.startswith(callee + ".") for m in imported):
            found.append(f"{caller} calls {callee}, which it does not import")
    return found


SHARED = "postgresql://nobody@127.0.0.1:9/none"  # a shared project's server that never answers


def test_no_write_path_module_calls_what_it_does_not_import(tmp_path: Path) -> None:
    def act(memory: Memory) -> None:
        memory.settings.shared["heron"] = SHARED  # every commit asks what the team shares
        memory.add_fact("Works on project Heron analysis", project="heron")
        report = memory.flush()
        assert report.folded == ["talk"]
        memory.facts.forget(memory.data["facts"][0]["id"])
        memory.projects.rename("heron", "kite")
        memory.projects.forget("kite")
        memory.settings.shared["kite"] = SHARED
        memory.sync(timeout=2)

    edges = traced(tmp_path, act)
    assert ("deerflow_nb.memory.updates.project_admin", "deerflow_nb.memory.updates.gate") in edges
    assert ("deerflow_nb.memory.updates.gate", "deerflow_nb.storage.memory_changes") in edges
    assert ("deerflow_nb.memory.sharing", "deerflow_nb.storage.outbox") in edges
    assert not climbs(edges, FOLD_PATH), climbs(edges, FOLD_PATH)
    assert not unimported(edges), "\n".join(unimported(edges))


def test_the_trace_finds_a_callable_handed_down() -> None:
    """The check itself: the gate calling a function of fold.py's (review_38's CB3) or a
    method of an object it was handed (the lambda project_admin was given: api.py's)."""
    from deerflow_nb.memory.folding import fold

    handed_down = eval("lambda rows: rows", vars(fold))  # noqa: S307 (a planted function)
    calling = eval("lambda callback: callback([])", vars(gate))  # noqa: S307
    from_api = eval("lambda: None", vars(api))  # noqa: S307
    with calls() as edges:
        calling(handed_down)
        calling(lambda _: from_api())
    assert unimported(edges) == [
        "deerflow_nb.memory.updates.gate calls deerflow_nb.memory.api, which it does not import",
        "deerflow_nb.memory.updates.gate calls deerflow_nb.memory.folding.fold, which it does "
        "not import",
    ]
