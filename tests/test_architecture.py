"""The package's layers: dependencies point one way (docs/internals.md has the map).

Every import in every module counts, the ones inside functions too: a lazy import is
still a dependency, only a later one.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import deerflow_nb

PACKAGE = Path(deerflow_nb.__file__).parent
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from internals_map import APART, layer_of, summary  # noqa: E402  (scripts/, as cog reads it)


def top_name(module: str) -> str:
    """``deerflow_nb.memory.api`` -> ``memory``."""
    return module.split(".")[1]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_in(source: str, module: str, *, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, absolute module) for every deerflow_nb import in ``source``, the source of
    ``module`` (a package's ``__init__`` when ``is_package``)."""
    here = module.split(".")
    package = here if is_package else here[:-1]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == "deerflow_nb":  # from deerflow_nb import memory
                found += [(node.lineno, f"deerflow_nb.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, target))
    return [(line, m) for line, m in found if m.startswith("deerflow_nb.")]


def violations(source: str, module: str, *, is_package: bool = False) -> list[str]:
    """The imports in ``source`` that go up a layer or to a sibling kept apart."""
    home = top_name(module)
    return [
        f"line {line} imports {target}"
        for line, target in imports_in(source, module, is_package=is_package)
        if layer_of(top_name(target)) > layer_of(home) or (home, top_name(target)) in APART
    ]


def test_every_module_is_in_a_layer() -> None:
    for path in PACKAGE.rglob("*.py"):
        if path.parent == PACKAGE and path.name == "__init__.py":
            continue
        layer_of(top_name(module_name(path)))


def test_every_module_says_what_it_does() -> None:
    """The internals map (docs/internals.md) is built from these docstrings."""
    missing = [
        str(path.relative_to(PACKAGE.parent)) for path in PACKAGE.rglob("*.py") if not summary(path)
    ]
    assert not missing, "modules without a docstring: " + ", ".join(sorted(missing))


def test_imports_point_down() -> None:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.parent == PACKAGE and path.name == "__init__.py":
            continue  # the package's lazy entry points: Memory, Agent, load_ipython_extension
        found = violations(
            path.read_text(), module_name(path), is_package=path.name == "__init__.py"
        )
        wrong += [f"{path.relative_to(PACKAGE.parent)}: {v}" for v in found]
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_the_walk_sees_lazy_and_relative_imports() -> None:
    """The check itself: imports inside a function, relative or absolute, are found."""
    source = (
        "from . import versions\n"
        "def f():\n"
        "    from ..memory import api\n"
        "    from deerflow_nb.agent import core\n"
        "    import deerflow_nb.notebook.panel\n"
    )
    assert violations(source, "deerflow_nb.storage.journal") == [
        "line 3 imports deerflow_nb.memory",
        "line 4 imports deerflow_nb.agent",
        "line 5 imports deerflow_nb.notebook.panel",
    ]
    assert violations("from ..memory import api\n", "deerflow_nb.offline.model") == [
        "line 1 imports deerflow_nb.memory"
    ]
    assert violations("from ..storage import journal\n", "deerflow_nb.memory.api") == []
