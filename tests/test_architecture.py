"""The package's layers: dependencies point one way, and SQL stays in storage/.

Every import in every module counts, the ones inside functions too: a lazy import is
still a dependency, only a later one (docs/internals.md has the map). journal.db is read
and written only by ``deerflow_nb/storage/``: everything above calls its functions.
"""

from __future__ import annotations

import ast
import re
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


# SQL spelled out: a string that starts with a statement's keyword (upper case, as the
# package writes SQL; prose does not).
SQL_KEYWORDS = re.compile(
    r"\s*(SELECT|INSERT|UPDATE|DELETE|CREATE|PRAGMA|WITH|DROP|ALTER|BEGIN|COMMIT|ROLLBACK)\b"
)
# Running SQL: a DB-API call with a statement (``NotebookClient.execute()`` takes none).
SQL_CALLS = {"execute", "executemany", "executescript"}
# sqlite-utils' table API, names nothing else in the package uses.
TABLE_CALLS = {
    "rows_where",
    "count_where",
    "pks_and_rows_where",
    "delete_where",
    "upsert",
    "upsert_all",
    "insert_all",
    "table_names",
    "create_table",
    "create_index",
    "add_column",
}
# Calls and subscripts that are table access only on a database (``db``, ``self.db``,
# ``journal.db``, ``self._db``): ``db["messages"]``, ``db.table("messages")``.
DB_ONLY_CALLS = {"table", "query"}
DRIVERS = {"sqlite3", "sqlite_utils"}


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else ""


def _is_db(node: ast.expr) -> bool:
    name = _name(node)
    return name == "db" or name.endswith("_db")


def sql_in(source: str) -> list[str]:
    """Where ``source`` speaks SQL or touches tables: each ``line N: what``, in order."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if SQL_KEYWORDS.match(node.value):
                found.append((node.lineno, f"SQL {node.value.split()[0]}"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            attr = node.func.attr
            if (
                (attr in SQL_CALLS and (node.args or node.keywords))
                or attr in TABLE_CALLS
                or (attr in DB_ONLY_CALLS and _is_db(node.func.value))
            ):
                found.append((node.lineno, f".{attr}()"))
        elif isinstance(node, ast.Subscript) and _is_db(node.value):
            found.append((node.lineno, f"{_name(node.value)}[...]"))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names if _driver(a.name)]
        elif isinstance(node, ast.ImportFrom) and not node.level and _driver(node.module):
            found.append((node.lineno, f"import {node.module}"))
    return [f"line {line}: {what}" for line, what in sorted(found)]


def _driver(module: str | None) -> bool:
    return (module or "").split(".")[0] in DRIVERS


def test_no_sql_outside_storage() -> None:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if not where.startswith("storage/"):
            wrong += [f"{where}: {hit}" for hit in sql_in(path.read_text())]
    assert not wrong, "SQL outside deerflow_nb/storage/ (move it there):\n" + "\n".join(wrong)


def test_the_sql_scan_finds_a_planted_example() -> None:
    """The check itself: each way of reaching the database is found, and look-alikes
    (a list's ``insert``, a dict's subscript, prose, a notebook client) are not."""
    planted = (
        "import sqlite3\n"
        "from sqlite_utils import Database\n"
        "def f(db, journal, conn, rows):\n"
        "    journal.db.execute('SELECT 1')\n"
        "    conn.executemany(STATEMENT, rows)\n"
        '    sql = f"WITH c AS (VALUES {rows}) SELECT * FROM c"\n'
        "    db['memory_folds'].insert({'ts': 1})\n"
        "    db.table('threads').rows_where(order_by='id')\n"
        "    journal.db['embeddings'].upsert_all(rows, pk='id')\n"
        "    return db.table_names()\n"
    )
    assert sql_in(planted) == [
        "line 1: import sqlite3",
        "line 2: import sqlite_utils",
        "line 4: .execute()",
        "line 4: SQL SELECT",
        "line 5: .executemany()",
        "line 6: SQL WITH",
        "line 7: db[...]",
        "line 8: .rows_where()",
        "line 8: .table()",
        "line 9: .upsert_all()",
        "line 9: db[...]",
        "line 10: .table_names()",
    ]
    innocent = (
        '"""Update the panel. Select a fact, with care."""\n'
        "def g(rows, row, client, view):\n"
        "    rows.insert(0, row['content'])\n"
        "    client.execute()\n"
        "    return view.table(), 'Delete it?'\n"
    )
    assert sql_in(innocent) == []


MAX_LINES = 500  # a module or a class a newcomer can read in one sitting


def test_modules_and_classes_stay_small() -> None:
    big = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text()
        where = path.relative_to(PACKAGE.parent)
        if len(source.splitlines()) >= MAX_LINES:
            big.append(f"{where}: {len(source.splitlines())} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size >= MAX_LINES:
                    big.append(f"{where}: class {node.name} is {size} lines")
    assert not big, f"split these (each under {MAX_LINES} lines):\n" + "\n".join(big)


# -- one gate for every change to memory (issue 26) ------------------------------------------
# Who may do what: the gate alone commits a change; the ledger alone writes memory.json (its
# commit, and rolling a journaled version forward after a crash); the rules are applied by
# the gate alone.
WRITE_DOORS = {
    "commit": {"memory/gate.py"},  # ledger.commit: the one write path
    "apply": {"memory/gate.py"},  # rules.apply: the update rules, run by the gate
    "prepare": {"memory/ledger.py", "memory/store.py"},  # store.prepare/install/write
    "install": {"memory/ledger.py", "memory/store.py"},
    "write": {"memory/ledger.py", "memory/store.py"},
}
# The receivers those calls are writes on (``self.ledger.commit``, ``self.rules.apply``,
# ``self.store.write``); a list's ``insert`` or a file's ``write`` is not one.
WRITE_RECEIVERS = {"commit": "ledger", "apply": "rules", "prepare": "store", "install": "store"}
PURE_RULES = {"apply_diff", "apply_edit", "_apply_merge"}


def memory_writes_in(source: str) -> list[tuple[str, str]]:
    """(door, where) for every call in ``source`` that changes facts or writes memory.json."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute):
            owner = _name(func.value).lstrip("_")
            wanted = WRITE_RECEIVERS.get(func.attr, "store")
            if func.attr in WRITE_DOORS and owner.endswith(wanted):
                found.append((func.attr, f"line {node.lineno}: {owner}.{func.attr}()"))
        elif isinstance(func, ast.Name) and func.id in PURE_RULES:
            found.append(("apply", f"line {node.lineno}: {func.id}()"))
        if _name(func) in {"write_text", "write_bytes"} and "memory_path" in ast.unparse(func):
            found.append(("write", f"line {node.lineno}: writes memory.json directly"))
    return found


def test_only_the_gate_changes_memory() -> None:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        for door, hit in memory_writes_in(path.read_text()):
            allowed = WRITE_DOORS[door] | {"memory/rules.py", "memory/updater.py"}
            if where not in allowed:
                wrong.append(f"{where}: {hit}")
    assert not wrong, "memory changed outside memory/gate.py:\n" + "\n".join(wrong)


def test_the_gate_scan_finds_a_planted_side_door() -> None:
    """The check itself: each way around the gate is found, and look-alikes are not."""
    planted = (
        "def f(self, data, diff, settings):\n"
        "    self.ledger.commit('add', 'manual', lambda d: d)\n"
        "    self.rules.apply(data, diff, 'x')\n"
        "    apply_diff(data, diff, source='x', threshold=0, max_facts=9)\n"
        "    self._store.write(data)\n"
        "    settings.memory_path.write_text('{}')\n"
    )
    assert [door for door, _ in memory_writes_in(planted)] == [
        "commit",
        "apply",
        "apply",
        "write",
        "write",
    ]
    innocent = (
        "def g(rows, fh, journal, model):\n"
        "    rows.insert(0, 1)\n"
        "    fh.write('x')\n"
        "    journal.db.commit()\n"
        "    return model.apply(rows)\n"
    )
    assert memory_writes_in(innocent) == []
