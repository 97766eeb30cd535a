"""docs/internals.md's map of the package, written by cog from the code so it cannot drift.

The layers are declared here once; ``tests/test_architecture.py`` checks every import
against them, and ``modules()`` lists each module under its layer with the first
paragraph of its docstring:

    .venv/bin/cog -I scripts -r docs/internals.md       # rewrite (make readme)
    .venv/bin/cog -I scripts --check docs/internals.md  # fail if stale (make lint, make test)
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "deerflow_nb"

# Lowest first: a module may import from its own layer and the ones below it.
LAYERS: list[tuple[str, set[str]]] = [
    (
        "base",
        {
            "schema",
            "config",
            "home",
            "tokens",
            "scrub",
            "untrusted",
            "similarity",
            "projects",
            "ports",
        },
    ),
    ("storage", {"storage", "journal", "shared"}),
    ("models", {"llm", "offline"}),
    ("memory", {"memory"}),
    ("agent", {"agent"}),
    ("interfaces", {"notebook", "inspector", "cli", "doctor", "demo", "mcp_server", "persona"}),
]
# Siblings in one layer that must not lean on each other.
APART: set[tuple[str, str]] = {
    ("inspector", "notebook"),
    ("notebook", "inspector"),
    ("offline", "memory"),
    # journal.db knows nothing of PostgreSQL: shared/ reads the outbox, never the reverse.
    ("storage", "shared"),
    ("journal", "shared"),
}


def layer_of(name: str) -> int:
    """The rank of ``deerflow_nb.<name>`` (a top-level module or package), lowest 0."""
    for rank, (_, names) in enumerate(LAYERS):
        if name in names:
            return rank
    raise KeyError(
        f"deerflow_nb.{name} is in no layer: add it to LAYERS in scripts/internals_map.py"
    )


def summary(path: Path) -> str:
    """The first paragraph of a module's docstring, on one line."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return " ".join(doc.split("\n\n")[0].split()).replace("|", "\\|")


def modules() -> str:
    """The Markdown table: every module, grouped by layer, with what it does."""
    rows = ["| layer | module | job |", "|---|---|---|"]
    paths = sorted(p for p in PACKAGE.rglob("*.py") if p != PACKAGE / "__init__.py")
    for name, _ in LAYERS:
        for path in paths:
            top = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
            if LAYERS[layer_of(top)][0] != name or not summary(path):
                continue
            rows.append(f"| {name} | `{path.relative_to(ROOT)}` | {summary(path)} |")
    return "\n".join(rows)


def layers() -> str:
    """The layers, lowest first, as a list."""
    return "\n".join(
        f"{rank}. **{name}**: " + ", ".join(f"`{n}`" for n in sorted(names))
        for rank, (name, names) in enumerate(LAYERS)
    )
