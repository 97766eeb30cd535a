"""The package's layers: dependencies point one way, and SQL stays in storage/ (SQLite)
and shared/ (PostgreSQL).

Every import in every module counts, the ones inside functions too: a lazy import is
still a dependency, only a later one (docs/internals.md has the map). journal.db is read
and written only by ``deerflow_nb/storage/``, and the team's PostgreSQL only by
``deerflow_nb/shared/``, each with its own driver: everything else calls their functions,
and so do ``benchmarks/`` and ``scripts/``. Outside ``memory/`` code imports only the names its
facade exports, and no modules import each other in a circle.
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
from pathlib import Path
from typing import Any

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
DRIVERS = {"sqlite3", "sqlite_utils", "psycopg"}


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


REPO = PACKAGE.parent
BESIDE = ("benchmarks", "scripts")  # code beside the package, held to the same rule


# Where SQL may be spoken, and through which drivers: journal.db (SQLite) in storage/, the
# team's PostgreSQL (issue 39) in shared/; nowhere else.
SQL_HOMES = {
    "deerflow_nb/storage/": {"sqlite3", "sqlite_utils"},
    "deerflow_nb/shared/": {"psycopg"},
}


def sql_out_of_place(where: str, source: str) -> list[str]:
    """The SQL in the file at ``where`` that does not belong there: any outside storage/
    and shared/, and in either the other one's driver."""
    home = next((h for h in SQL_HOMES if where.startswith(h)), None)
    if home is None:
        return sql_in(source)
    return [
        hit
        for hit in sql_in(source)
        if hit.split(": ", 1)[1].startswith("import ")
        and hit.split("import ", 1)[1].split(".")[0] not in SQL_HOMES[home]
    ]


def test_sql_only_in_storage_and_shared() -> None:
    wrong = []
    paths = [*PACKAGE.rglob("*.py"), *(p for d in BESIDE for p in (REPO / d).rglob("*.py"))]
    for path in sorted(paths):
        where = path.relative_to(REPO).as_posix()
        wrong += [f"{where}: {hit}" for hit in sql_out_of_place(where, path.read_text())]
    assert not wrong, (
        "SQL out of place (SQLite in deerflow_nb/storage/, PostgreSQL in deerflow_nb/shared/; "
        "move it there):\n" + "\n".join(wrong)
    )


def test_each_sql_home_keeps_to_its_driver() -> None:
    """The check itself: a driver is allowed only in its own folder."""
    source = "import psycopg\nimport sqlite3\nSQL = 'SELECT 1'\n"
    assert sql_out_of_place("deerflow_nb/storage/outbox.py", source) == ["line 1: import psycopg"]
    assert sql_out_of_place("deerflow_nb/shared/exchange.py", source) == ["line 2: import sqlite3"]
    assert len(sql_out_of_place("deerflow_nb/memory/api.py", source)) == 3


def test_benchmarks_and_scripts_are_scanned() -> None:
    """The check itself: the folders beside the package hold code it reads."""
    for folder in BESIDE:
        assert list((REPO / folder).glob("*.py")), folder


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
# the gate alone. Each door is found by its shape, whatever the receiver is called.
STORE_IMPLEMENTATIONS = {"memory/sqlite_home.py", "shared/store.py"}  # the contract's Stores
WRITE_DOORS = {
    # ``x.commit(changes, base=...)``: a store's commit (the contract's), or the ledger's;
    # only the gate calls one (the Store implementations define theirs)
    "commit": {"memory/updates/gate.py", "memory/updates/write_protocol.py"}
    | STORE_IMPLEMENTATIONS,
    # ``ledger.recording``: the one write path; the SQLite store records through it too
    "recording": {"memory/updates/gate.py", "memory/sqlite_home.py"},
    "apply": {"memory/updates/gate.py"},  # rules.apply: the update rules, run by the gate
    # store.prepare/install/write, and memory.json written as a file (write_text,
    # os.replace, open(..., "w") …): the ledger's write protocol and the store alone
    "prepare": {"memory/updates/write_protocol.py", "memory/store.py"},
    "install": {"memory/updates/write_protocol.py", "memory/store.py"},
    "write": {"memory/updates/write_protocol.py", "memory/store.py"},
}
PURE_RULES = {"apply_diff", "apply_edit", "_apply_merge"}
STORE_WRITES = {"prepare", "install", "write"}  # MemoryStore's, on anything that is a store
# What names memory.json: its settings path, its file name, or the ``path`` of a memory or
# a store (``memory.path``, ``self._store.path``).
MEMORY_FILE = re.compile(r"memory_path|memory\.json|\b_*(memory|mem|store)\.path\b", re.I)
STORE = re.compile(r"(^|\.)_*\w*store$|MemoryStore\(", re.I)  # ``store``, ``self._store`` …
FILE_MOVES = {("os", "replace"), ("os", "rename"), ("shutil", "move"), ("shutil", "copy"),
              ("shutil", "copyfile"), ("shutil", "copy2"), ("Path", "replace"),
              ("Path", "rename")}  # fmt: skip


def _bound_to(tree: ast.AST, pattern: re.Pattern[str]) -> set[str]:
    """Names assigned (or bound by ``with ... as``) a value whose source matches ``pattern``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            if pattern.search(ast.unparse(node.value)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif (
            isinstance(node, ast.withitem)
            and isinstance(node.optional_vars, ast.Name)
            and pattern.search(ast.unparse(node.context_expr))
        ):
            names.add(node.optional_vars.id)
    return names


def _writes_a_file(call: ast.Call) -> ast.expr | None:
    """The file ``call`` writes (its expression), when it writes one: ``x.write_text``,
    ``x.write_bytes``, ``os.replace(a, x)`` and other moves onto ``x``, ``a.replace(x)``
    (a path's: a str's takes two arguments), ``open(x, "w")``, ``x.open("w")``."""
    func, args = call.func, call.args
    mode = next((k.value for k in call.keywords if k.arg == "mode"), None)
    if isinstance(func, ast.Attribute):
        owner = ast.unparse(func.value)
        if func.attr in ("write_text", "write_bytes"):
            return func.value
        if (owner, func.attr) in FILE_MOVES and len(args) == 2:
            return args[1]
        if func.attr in ("replace", "rename") and len(args) == 1 and not call.keywords:
            return args[0]
        if func.attr == "open":
            mode = args[0] if args else mode
            target = func.value
    elif isinstance(func, ast.Name) and func.id == "open" and args:
        mode, target = (args[1] if len(args) > 1 else mode), args[0]
    else:
        return None
    if isinstance(mode, ast.Constant) and set(str(mode.value)) & set("wax+"):
        return target
    return None


def memory_writes_in(source: str) -> list[tuple[str, str]]:
    """(door, where) for every call in ``source`` that changes facts or writes memory.json,
    found by its shape: a ``commit`` given a change (a database's takes none), any
    ``recording``, ``rules.apply`` and the pure rules, a store's ``prepare``/``install``/
    ``write`` (on ``store`` or a name bound to one), and any write of a file named as
    memory.json is (``MEMORY_FILE``, or a name bound to such a path)."""
    tree = ast.parse(source)
    stores = _bound_to(tree, STORE)
    paths = _bound_to(tree, MEMORY_FILE)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        where = f"line {node.lineno}: {ast.unparse(func)[:40]}()"
        if isinstance(func, ast.Attribute):
            owner = ast.unparse(func.value)
            is_store = bool(STORE.search(owner)) or owner in stores
            if func.attr == "commit" and (node.args or node.keywords):
                found.append(("commit", where))
            elif func.attr == "recording":
                found.append(("recording", where))
            elif func.attr == "apply" and _name(func.value).lstrip("_").endswith("rules"):
                found.append(("apply", where))
            elif func.attr in STORE_WRITES and is_store:
                found.append((func.attr, where))
        elif isinstance(func, ast.Name) and func.id in PURE_RULES:
            found.append(("apply", where))
        target = _writes_a_file(node)
        if target is not None:
            text = ast.unparse(target)
            if MEMORY_FILE.search(text) or text in paths:
                found.append(("write", f"line {node.lineno}: writes memory.json ({text})"))
    return sorted(found, key=lambda hit: int(hit[1].split()[1].rstrip(":")))


def test_only_the_gate_changes_memory() -> None:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        for door, hit in memory_writes_in(path.read_text()):
            allowed = WRITE_DOORS[door] | {"memory/updates/rules.py", "memory/updates/updater.py"}
            if where not in allowed:
                wrong.append(f"{where}: {hit}")
    assert not wrong, "memory changed outside memory/updates/gate.py:\n" + "\n".join(wrong)


def test_the_gate_scan_finds_a_planted_side_door() -> None:
    """The check itself: each way around the gate is found whatever its receiver is called
    (review_38's plants: a store held in any variable committing, a ledger renamed
    ``led``, memory.json written or replaced through ``memory.path``), and look-alikes
    (a database's ``commit()``, a str's ``replace``, a read, an export's own file) are not."""
    planted = (
        "def f(self, data, diff, settings, memory, path, led, tmp):\n"
        "    self.ledger.commit('add', 'manual', lambda d: d)\n"
        "    self.ledger.recording(commit, 'add', 'manual', result)\n"
        "    s = SQLiteHome.open(path)\n"
        "    s.commit(Changes('wipe', remove=frozenset()), base=s.snapshot(None).revision)\n"
        "    with led.recording(commit, 'edit', 'manual', result):\n"
        "        pass\n"
        "    self.rules.apply(data, diff, 'x')\n"
        "    apply_diff(data, diff, source='x', threshold=0, max_facts=9)\n"
        "    self._store.write(data)\n"
        "    memory.store.write(data)\n"
        "    kept = memory.store\n"
        "    kept.install(tmp)\n"
        "    settings.memory_path.write_text('{}')\n"
        "    memory.path.write_text('{}')\n"
        "    os.replace(tmp, memory.path)\n"
        "    Path.replace(tmp, self._store.path)\n"
        "    tmp.rename(self.memory.path)\n"
        "    target = home / 'memory.json'\n"
        "    with open(target, 'w') as fh:\n"
        "        fh.write('{}')\n"
    )
    assert [hit for _, hit in memory_writes_in(planted)] == [
        "line 2: self.ledger.commit()",
        "line 3: self.ledger.recording()",
        "line 5: s.commit()",
        "line 6: led.recording()",
        "line 8: self.rules.apply()",
        "line 9: apply_diff()",
        "line 10: self._store.write()",
        "line 11: memory.store.write()",
        "line 13: kept.install()",
        "line 14: writes memory.json (settings.memory_path)",
        "line 15: writes memory.json (memory.path)",
        "line 16: writes memory.json (memory.path)",
        "line 17: writes memory.json (self._store.path)",
        "line 18: writes memory.json (self.memory.path)",
        "line 20: writes memory.json (target)",
    ]
    innocent = (
        "def g(rows, fh, journal, model, memory, tmp, target, text):\n"
        "    rows.insert(0, 1)\n"
        "    fh.write('x')\n"
        "    journal.db.commit()\n"
        "    text = text.replace('a', 'b')\n"
        "    os.replace(tmp, target)\n"
        "    with open(memory.path) as fh:\n"
        "        fh.read()\n"
        "    export_path.write_text('{}')\n"
        "    return model.apply(rows)\n"
    )
    assert memory_writes_in(innocent) == []


# -- one facade for memory, and no circles (issue 27) ----------------------------------------
def memory_reaches_in(source: str, module: str, *, is_package: bool = False) -> list[str]:
    """Imports in ``source`` (outside memory/) of a memory module, or of a name that
    ``deerflow_nb.memory`` does not export."""
    import deerflow_nb.memory

    facade = set(deerflow_nb.memory.__all__)
    here = module.split(".")
    package = here if is_package else here[:-1]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [
                f"line {node.lineno} imports {a.name}"
                for a in node.names
                if a.name.startswith("deerflow_nb.memory.")
            ]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join(base + [node.module or ""]).strip(".") if node.level else node.module
            target = target or ""
            names = [a.name for a in node.names]
            if target == "deerflow_nb" and "memory" in names:
                continue  # the package itself: its attributes are checked where used
            if target.startswith("deerflow_nb.memory."):
                found.append(f"line {node.lineno} imports {target}")
            elif target == "deerflow_nb.memory":
                found += [
                    f"line {node.lineno} imports memory.{n}" for n in names if n not in facade
                ]
    return found


def test_nothing_outside_memory_imports_its_internals() -> None:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_name(path)
        if module == "deerflow_nb" or module.startswith("deerflow_nb.memory"):
            continue
        found = memory_reaches_in(path.read_text(), module, is_package=path.name == "__init__.py")
        wrong += [f"{path.relative_to(REPO)}: {hit}" for hit in found]
    assert not wrong, (
        "memory internals imported from outside (use or add a name in memory/__init__.py):\n"
        + "\n".join(wrong)
    )


def test_the_facade_scan_finds_a_planted_reach_in() -> None:
    planted = (
        "from ..memory import Memory, queue\n"
        "from ..memory.store import MemoryFileError\n"
        "def f():\n"
        "    import deerflow_nb.memory.folding.fold_log\n"
        "    from deerflow_nb.memory import open_reader\n"
    )
    assert memory_reaches_in(planted, "deerflow_nb.notebook.panel") == [
        "line 1 imports memory.queue",
        "line 2 imports deerflow_nb.memory.store",
        "line 4 imports deerflow_nb.memory.folding.fold_log",
    ]


def module_level_imports(source: str, module: str, is_package: bool) -> set[str]:
    """The deerflow_nb modules ``source`` imports when it is imported or type-checked: its
    top-level imports, ``if TYPE_CHECKING:`` blocks included, not those inside functions
    (``from package import submodule`` counts as the submodule)."""
    modules = {module_name(p) for p in PACKAGE.rglob("*.py")}
    here = module.split(".")
    package = here if is_package else here[:-1]
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name in modules)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[: len(package) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for alias in node.names:
                    if f"{target}.{alias.name}" in modules:
                        found.add(f"{target}.{alias.name}")
                    elif target in modules:
                        found.add(target)
            elif isinstance(node, ast.If | ast.Try | ast.With | ast.ClassDef):
                for name in ("body", "orelse", "finalbody"):
                    visit(getattr(node, name, []) or [])
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)

    visit(ast.parse(source).body)
    return found - {module}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_level_import_circles() -> None:
    graph = {
        module_name(p): module_level_imports(p.read_text(), module_name(p), p.name == "__init__.py")
        for p in PACKAGE.rglob("*.py")
    }
    found = circles(graph)
    assert not found, "modules importing each other (break the circle):\n" + "\n".join(
        " <-> ".join(group) for group in found
    )


def test_the_circle_check_finds_a_planted_circle() -> None:
    loop = module_level_imports(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .middleware import X\n"
        "def f():\n    from .core import Agent\n",
        "deerflow_nb.agent.loop",
        False,
    )
    assert loop == {"deerflow_nb.agent.middleware"}  # type-checking counts, a lazy one not
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]


def test_llm_knows_no_provider_but_its_own() -> None:
    """The offline model (and any other) registers at the edge (``llm/registry.py``)."""
    wrong = [
        f"{path.relative_to(REPO)}: {line} imports {target}"
        for path in sorted((PACKAGE / "llm").rglob("*.py"))
        for line, target in imports_in(path.read_text(), module_name(path))
        if target.startswith("deerflow_nb.offline")
    ]
    assert not wrong, "\n".join(wrong)


# -- the house by job: one name per layer, a fold path read top-down (issue 27) -------------
CORE = ("schema", "storage", "llm", "offline", "memory", "agent")


def test_no_module_name_lives_in_two_core_packages() -> None:
    """storage/ names its modules for tables, memory/ for what they decide: ``queue`` or
    ``ledger`` in both would make every reader ask which one is meant. (The notebook's
    views and the inspector's tabs are named for the page they draw.)"""
    owners: dict[str, set[str]] = {}
    for package in CORE:
        for path in (PACKAGE / package).rglob("*.py"):
            if path.name != "__init__.py":
                owners.setdefault(path.stem, set()).add(package)
    shared = {name: sorted(where) for name, where in owners.items() if len(where) > 1}
    assert not shared, f"one name in two packages: {shared}"


# The fold path, top-down: each module may call those after it, never one before it.
FOLD_PATH = [
    "deerflow_nb.memory.api",
    "deerflow_nb.memory.folding.worker",
    "deerflow_nb.memory.folding.fold",
    "deerflow_nb.memory.updates.gate",
    "deerflow_nb.memory.updates.write_protocol",
    "deerflow_nb.memory.folding.schedule",
]


def climbs(sources: dict[str, str], path: list[str]) -> list[str]:
    """Imports (lazy ones too) from a module of ``path`` to one earlier in it."""
    found = []
    for rank, module in enumerate(path):
        earlier = set(path[:rank])
        for line, target in imports_in(sources[module], module):
            if target in earlier:
                found.append(f"{module} line {line} imports {target}")
    return found


def test_the_fold_path_reads_top_down() -> None:
    sources = {m: (PACKAGE.parent / (m.replace(".", "/") + ".py")).read_text() for m in FOLD_PATH}
    found = climbs(sources, FOLD_PATH)
    assert not found, "the fold path climbs back up:\n" + "\n".join(found)


def test_the_fold_path_check_finds_a_planted_callback() -> None:
    planted = {m: "" for m in FOLD_PATH} | {
        "deerflow_nb.memory.folding.schedule": "def later():\n    from .worker import join\n"
    }
    assert climbs(planted, FOLD_PATH) == [
        "deerflow_nb.memory.folding.schedule line 2 imports deerflow_nb.memory.folding.worker"
    ]


# The one storage read a user-facing module makes itself: ``%load_ext`` asks, with the
# standard library only, whether a killed kernel left folds (memory would import sqlite-utils).
UI_STORAGE_READS = {("deerflow_nb.notebook.magics", "deerflow_nb.storage.queue")}


def journal_reads_in(source: str, module: str) -> list[str]:
    """A user-facing module's own reads of the journal: a storage import, or ``.journal``."""
    found = [
        f"line {line} imports {target}"
        for line, target in imports_in(source, module)
        if target.startswith("deerflow_nb.storage") and (module, target) not in UI_STORAGE_READS
    ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr == "journal":
            found.append(f"line {node.lineno} reads .journal")
    return found


def test_the_notebook_and_the_inspector_read_through_memory() -> None:
    wrong = [
        f"{path.relative_to(REPO)}: {hit}"
        for folder in ("notebook", "inspector")
        for path in sorted((PACKAGE / folder).rglob("*.py"))
        for hit in journal_reads_in(path.read_text(), module_name(path))
    ]
    assert not wrong, "journal reads of their own (use MemoryReader or Memory):\n" + "\n".join(
        wrong
    )


def test_the_journal_read_scan_finds_planted_reads() -> None:
    planted = "from ..storage.journal import row_to_message\nrows = agent.journal.turns('t')\n"
    assert journal_reads_in(planted, "deerflow_nb.notebook.panel") == [
        "line 1 imports deerflow_nb.storage.journal",
        "line 2 reads .journal",
    ]


# -- scope as an argument (issue 38) -------------------------------------------------------
# Loading config.yaml and the environment names a project in the settings: configuration,
# read at the edges (the session, the persona, the MCP server), never scope memory falls back on.
SETTINGS_BUILT = {("deerflow_nb.config", "settings")}
# A name that holds a scope: ``project``, ``scope``, ``_current_project``, ``default_scope``,
# ``project_name`` (not ``projects``, memory's group of project commands).
SCOPE_NAME = re.compile(r"(^|_)(project|scope)(_|$)")
# Scope kept as state on purpose, and why (module, ``owner.attribute``).
KEPT_SCOPE = {
    ("deerflow_nb.notebook.session", "self._project"): (
        "the notebook's project as its user set it (%memory project) or as found from its "
        "folder: the edge that passes it to memory as an argument on every call"
    ),
}


def _holds_scope(attr: str) -> bool:
    return bool(SCOPE_NAME.search(attr.lstrip("_")))


def _is_memory(owner: str) -> bool:
    """``memory``, ``mem``, ``self.memory``, ``session._memory``: a Memory, by its name."""
    return owner.split(".")[-1].lstrip("_") in ("memory", "mem")


def ambient_scope_in(source: str, module: str) -> list[str]:
    """Scope kept as state, whatever the attribute is called (``SCOPE_NAME``): in
    ``memory/`` any ``self.<scope name>`` (memory keeps no current project, not even one set
    once), anywhere a scope name set on ``self`` or on a memory object outside an
    ``__init__`` (a scope that changes under its readers; a per-turn object may keep the
    one it was given), a ``.project`` set on anything outside an ``__init__``, a scope name
    read off a memory object (``memory.current_project``), and ``setattr`` of a scope name.
    A frozen dataclass's scope (``FactQuery.scope``, ``View.scope``) is a value, not state."""
    found = []
    tree = ast.parse(source)
    inits: set[int] = set()
    values: set[int] = set()  # the nodes of frozen dataclasses
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            inits |= {id(n) for n in ast.walk(node)}
        elif isinstance(node, ast.ClassDef) and any(
            "dataclass" in ast.unparse(d) and "frozen=True" in ast.unparse(d)
            for d in node.decorator_list
        ):
            values |= {id(n) for n in ast.walk(node)}
    in_memory = module.startswith("deerflow_nb.memory")
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and _name(node.func) == "setattr"
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and _holds_scope(str(node.args[1].value))
        ):
            owner = ast.unparse(node.args[0])
            found.append(f"line {node.lineno} sets {owner}.{node.args[1].value} (setattr)")
        if not (isinstance(node, ast.Attribute) and _holds_scope(node.attr)):
            continue
        owner = ast.unparse(node.value)
        if (module, f"{owner}.{node.attr}") in KEPT_SCOPE or (module, owner) in SETTINGS_BUILT:
            continue
        if in_memory and owner == "self" and id(node) not in values:
            found.append(f"line {node.lineno} keeps self.{node.attr}")
        elif isinstance(node.ctx, ast.Store):
            stateful = owner == "self" or _is_memory(owner) or node.attr == "project"
            if stateful and id(node) not in inits:
                found.append(f"line {node.lineno} sets {owner}.{node.attr}")
        elif _is_memory(owner):
            found.append(f"line {node.lineno} reads {owner}.{node.attr}")
    return sorted(found, key=lambda s: int(s.split()[1]))


def test_scope_is_never_read_from_a_mutable_attribute() -> None:
    wrong = [
        f"{path.relative_to(REPO)}: {hit}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for hit in ambient_scope_in(path.read_text(), module_name(path))
    ]
    assert not wrong, "scope kept as state (pass the project as an argument):\n" + "\n".join(wrong)


def test_the_ambient_scope_scan_finds_planted_state() -> None:
    """The check itself, with review_38's plants: a current project kept under another
    name (S1), read off a memory (S5) or set on one with ``setattr`` (S6)."""
    planted = (
        "class Memory:\n"
        "    def __init__(self):\n"
        "        self.project = None\n"
        "        self._current_project: str | None = None\n"
        "    def search(self, q):\n"
        "        return rank(q, self.project or self._current_project)\n"
        "    def use_project(self, name):\n"
        "        self._current_project = name\n"
        "def switch(session, memory, name):\n"
        "    memory.project = name\n"
        "    setattr(memory, 'project', name)\n"
        "    session.memory.default_scope = name\n"
        "    return session.memory.project or memory.current_project\n"
        "class Panel:\n"
        "    def __init__(self, project):\n"
        "        self.project = project\n"
        "        self._projects = Projects()\n"
        "    def pick(self, name):\n"
        "        self._project_name = name\n"
        "        self._projects.rename(name, 'x')\n"
        "@dataclass(frozen=True)\n"
        "class Query:\n"
        "    scope: Scope\n"
        "    def run(self, facts):\n"
        "        return [f for f in facts if self.scope.sees(f)]\n"
    )
    assert ambient_scope_in(planted, "deerflow_nb.memory.api") == [
        "line 3 keeps self.project",
        "line 4 keeps self._current_project",
        "line 6 keeps self.project",
        "line 6 keeps self._current_project",
        "line 8 keeps self._current_project",
        "line 10 sets memory.project",
        "line 11 sets memory.project (setattr)",
        "line 12 sets session.memory.default_scope",
        "line 13 reads session.memory.project",
        "line 13 reads memory.current_project",
        "line 16 keeps self.project",
        "line 19 keeps self._project_name",
    ]
    assert ambient_scope_in(planted, "deerflow_nb.agent.middleware") == [
        "line 8 sets self._current_project",
        "line 10 sets memory.project",
        "line 11 sets memory.project (setattr)",
        "line 12 sets session.memory.default_scope",
        "line 13 reads session.memory.project",
        "line 13 reads memory.current_project",
        "line 19 sets self._project_name",
    ]


# What says whose a fact is (``fact_project``) and what a scope sees (``Scope.sees``) live
# in projects.py and memory/; everything else asks memory with a scope (``FactQuery``).
# storage/ holds no facts: its ``project`` is a journal thread's column.
OWNER_RULE = ("deerflow_nb.projects", "deerflow_nb.memory", "deerflow_nb.storage")
# Comparisons of a fact's project kept on purpose outside memory/, and why (module, function).
KEPT_FILTERS = {
    ("deerflow_nb.shared.exchange", "team_diff"): (
        "what a committed change set does to one shared project's facts, in the shape "
        "members publish: the team store's own partition of a change (as storage/'s), "
        "not a read of facts filtered by scope"
    ),
}
# Whose ``.project`` is no fact's: the object's own (``self``), a command's arguments,
# the settings.
NOT_FACTS = re.compile(r"^(self|args|\w*settings)$")


def _project_field(node: ast.AST) -> bool:
    """``node`` reads a fact's project, in any form: ``f.project`` (a typed ``Fact``),
    ``f["project"]`` (a dict, a DataFrame's column), ``f.get("project")``, ``fact_project(f)``."""
    if isinstance(node, ast.Attribute):
        return node.attr == "project" and not NOT_FACTS.match(ast.unparse(node.value))
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "project"
    if isinstance(node, ast.Call):
        if _name(node.func) == "fact_project":
            return True
        return (
            isinstance(node.func, ast.Attribute)
            and node.func.attr in ("get", "pop")
            and bool(node.args)
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value == "project"
        )
    return False


def _compares_a_project(node: ast.AST) -> bool:
    """``node`` compares a fact's project (``==``, ``in``, ``is`` …, ``.isin``, ``.eq``)."""
    if isinstance(node, ast.Compare):
        return any(_project_field(side) for side in [node.left, *node.comparators])
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("isin", "eq", "ne")
        and _project_field(node.func.value)
    )


def scope_filters_in(source: str, module: str = "") -> list[str]:
    """Facts filtered by scope outside memory: a read of a fact's ``"scope"`` key anywhere;
    any comparison of a fact's project (``_project_field``: ``f.project == here``,
    ``f.get("project") != p``, ``frame["project"] == name``, ``.isin``/``.eq``/``.ne`` on
    one), wherever it is, a helper used as a filter included; and, in a filter (a
    comprehension's ``if``, ``filter()``, an ``if`` inside a loop), a read of its
    ``"project"`` key, ``fact_project``, ``.sees`` or a ``*scope*`` function."""

    def keys(node: ast.AST) -> set[str]:
        found = set()
        for n in ast.walk(node):
            if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant):
                found.add(str(n.slice.value))
            elif (
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and n.func.attr in ("get", "pop")
                and n.args
                and isinstance(n.args[0], ast.Constant)
            ):
                found.add(str(n.args[0].value))
            elif isinstance(n, ast.Call) and (
                (called := _name(n.func).split(".")[-1]) in ("fact_project", "sees")
                or "scope" in called
            ):
                found.add("owner")
        return found

    tree = ast.parse(source)
    kept: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef) and (module, fn.name) in KEPT_FILTERS:
            kept |= {id(n) for n in ast.walk(fn)}
    tests: list[ast.AST] = []
    compared: list[ast.AST] = []
    for node in ast.walk(tree):
        if id(node) in kept:
            continue
        if _compares_a_project(node):
            compared.append(node)
        if isinstance(node, ast.comprehension):
            tests += node.ifs
        elif isinstance(node, ast.Call) and _name(node.func) == "filter" and node.args:
            tests.append(node.args[0])
        elif isinstance(node, (ast.For, ast.While)):
            tests += [n.test for n in ast.walk(node) if isinstance(n, ast.If)]
    found = [
        f"line {t.lineno} filters by {k}"
        for t in tests
        for k in sorted(keys(t) & {"project", "owner"})
    ]
    found += [f"line {n.lineno} compares a fact's project" for n in compared]
    found += [
        f"line {n.lineno} reads a fact's scope"
        for n in ast.walk(tree)
        if isinstance(n, (ast.Subscript, ast.Call))
        and "scope" in keys(n)
        and not isinstance(getattr(n, "ctx", None), ast.Store)
    ]
    return sorted(set(found), key=lambda s: (int(s.split()[1]), s))


def test_nothing_outside_memory_filters_facts_by_scope() -> None:
    wrong = [
        f"{path.relative_to(REPO)}: {hit}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if not module_name(path).startswith(OWNER_RULE)
        for hit in scope_filters_in(path.read_text(), module_name(path))
    ]
    assert not wrong, (
        "facts filtered by scope outside memory (use FactQuery(scope=...)):\n" + "\n".join(wrong)
    )


def test_the_scope_filter_scan_finds_planted_filters() -> None:
    """The check itself, with review_38's plants: a filter over typed ``Fact``s (S2), one
    hidden in a helper (S3) and a DataFrame's (S4); look-alikes (a command's argument, the
    server's own project, a label) are not filters."""
    planted = (
        "mine = [f for f in facts if not f.get('project')]\n"
        "ours = list(filter(lambda f: fact_project(f) == here, facts))\n"
        "for f in facts:\n"
        "    if f['project'] != here:\n"
        "        continue\n"
        "shared = fact.get('scope') != 'project'\n"
        "label = fact_project(fact) or 'user'\n"
        "hits = FactQuery(scope=Scope.of(here)).run(facts)\n"
        "seen = [f for f in facts if in_scope(f, here)]\n"
        "typed = [f for f in snap.facts if f.project == here]\n"
        "def _theirs(fact, name):\n"
        "    return fact.get('project') == name\n"
        "theirs = [f for f in facts if _theirs(f, name)]\n"
        "frame = frame[frame['project'] == name]\n"
        "rows = frame[frame['project'].isin(names)]\n"
        "def f(self, args, project):\n"
        "    if args.project is not None and project != self.project:\n"
        "        return settings.project == project\n"
    )
    assert scope_filters_in(planted) == [
        "line 1 filters by project",
        "line 2 compares a fact's project",
        "line 2 filters by owner",
        "line 4 compares a fact's project",
        "line 4 filters by project",
        "line 6 reads a fact's scope",
        "line 9 filters by owner",
        "line 10 compares a fact's project",
        "line 12 compares a fact's project",
        "line 14 compares a fact's project",
        "line 15 compares a fact's project",
    ]
    kept = "def team_diff(changes, p):\n    return [f for f in changes if f.project == p]\n"
    assert scope_filters_in(kept, "deerflow_nb.shared.exchange") == []
    assert scope_filters_in(kept, "deerflow_nb.shared.other") == [
        "line 2 compares a fact's project"
    ]


# -- one door for a conversation (issue 38) --------------------------------------------------
# The journal's writes of messages, turns, summaries and queue rows: outside memory/ and
# storage/ they go through ``Memory.conversation`` / ``Memory.add_messages`` / ``enqueue``.
JOURNAL_WRITES = {
    "add_message",
    "add_messages",
    "begin_turn",
    "start_turn",
    "end_turn",
    "keep_partial",
    "add_summary",
    "ensure_thread",
    "thread_for",
    "interrupt_orphan_turns",
    "enqueue",
}
# storage modules whose functions write those rows; one read is allowed (see UI_STORAGE_READS)
JOURNAL_WRITE_MODULES = ("deerflow_nb.storage.queue", "deerflow_nb.storage.threads")


def _journal_names(tree: ast.AST) -> set[str]:
    """Names bound to a journal: a parameter annotated ``Journal``, or a name assigned
    anything that mentions a journal (``j = Journal(path)``, ``j = self.memory.journal``)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            if "journal" in ast.unparse(node.annotation).lower():
                names.add(node.arg)
        elif isinstance(node, ast.Assign) and "journal" in ast.unparse(node.value).lower():
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif (
            isinstance(node, ast.withitem)
            and isinstance(node.optional_vars, ast.Name)
            and "journal(" in ast.unparse(node.context_expr).lower()
        ):
            names.add(node.optional_vars.id)
    return names


def journal_writes_in(source: str, module: str) -> list[str]:
    """Calls in ``source`` that write a conversation to the journal without memory's door:
    a journal write method on something that is a journal, or an import of the storage
    functions that write threads and queue rows."""
    tree = ast.parse(source)
    aliases = _journal_names(tree)
    found = [
        f"line {line} imports {target}"
        for line, target in imports_in(source, module)
        if target.startswith(JOURNAL_WRITE_MODULES) and (module, target) not in UI_STORAGE_READS
    ]
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in JOURNAL_WRITES:
            continue
        receiver = node.func.value
        text = ast.unparse(receiver)
        if "journal" in text.lower() or (isinstance(receiver, ast.Name) and text in aliases):
            found.append(f"line {node.lineno}: {text}.{node.func.attr}()")
    return sorted(found, key=lambda hit: int(hit.split()[1].rstrip(":")))


def test_only_memory_writes_a_conversation_to_the_journal() -> None:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_name(path)
        if module.startswith(("deerflow_nb.memory", "deerflow_nb.storage")):
            continue
        wrong += [
            f"{path.relative_to(REPO)}: {hit}"
            for hit in journal_writes_in(path.read_text(), module)
        ]
    assert not wrong, (
        "conversation written to the journal outside memory/ (use Memory.conversation or "
        "Memory.add_messages):\n" + "\n".join(wrong)
    )


def test_the_journal_write_scan_finds_planted_writes() -> None:
    planted = (
        "from ..storage.queue import put\n"
        "def f(self, store: Journal, path):\n"
        "    self.journal.begin_turn('t', {}, model='m')\n"
        "    self.memory.journal.add_message('t', {})\n"
        "    store.end_turn('x', status='ok')\n"
        "    j = Journal(path)\n"
        "    j.enqueue('t')\n"
        "    with Journal(path) as k:\n"
        "        k.add_summary('t', 1, 'x', model='m')\n"
    )
    assert journal_writes_in(planted, "deerflow_nb.agent.middleware") == [
        "line 1 imports deerflow_nb.storage.queue",
        "line 3: self.journal.begin_turn()",
        "line 4: self.memory.journal.add_message()",
        "line 5: store.end_turn()",
        "line 7: j.enqueue()",
        "line 9: k.add_summary()",
    ]
    innocent = (
        "def g(self, memory, rows):\n"
        "    self.conversation.begin_turn('t', {}, model='m')\n"
        "    memory.add_messages('t', [])\n"
        "    self.memory.enqueue('t')\n"
        "    rows.append(self.journal.turns('t'))\n"
    )
    assert journal_writes_in(innocent, "deerflow_nb.agent.core") == []


# -- the write path reads top-down at run time (issue 38) ------------------------------------
# No function is handed down the write path: a caller's own journaling runs in the body of
# the gate's and the ledger's context managers (``Gate.committing``, ``Ledger.reading`` /
# ``recording``), and what a rule needs is passed as data.
WRITE_PATH = (
    "memory/updates/", "memory/folding/", "storage/", "memory/sqlite_home.py", "memory/sharing.py",
)  # fmt: skip
# Where the write path's parts are made and wired: only what it hands to them is scanned.
WIRING = ("memory/api.py",)
# Higher-order helpers that take a key, a thread's target or an exit hook (``atexit``), not
# a step of a write.
PURE_HIGHER_ORDER = {"sorted", "sort", "min", "max", "sub", "Thread", "register", "unregister"}
# What stays, and why: a rule's test seam, and memory's change listeners.
LISTENERS = (
    "Memory.on_change's listeners (listeners.py), told after a change commits: an observer "
    "list (the panel's refresh, team sync's nudge), never a step of the write"
)
KEPT_CALLABLES = {
    ("memory/updates/updater.py", "apply_diff", "id_factory"): "fact ids a test fixes",
    ("memory/updates/updater.py", "_apply_merge", "id_factory"): "fact ids a test fixes",
    ("memory/updates/gate.py", "__init__", "changed"): LISTENERS,
    ("memory/updates/review.py", "__init__", "changed"): LISTENERS,
    ("memory/updates/write_protocol.py", "__init__", "changed"): LISTENERS,
}
# Functions handed down on purpose, and why (file, what is handed, to what).
KEPT_HANDED = {
    ("memory/sharing.py", "self.tap", "gate.tap"): (
        "the team's share of each commit: the gate asks it before every commit. Calling it "
        "top-down means moving Sharing's tap (_Commit, the shared-projects lookup) below the "
        "gate and Refused out of gate.py, a refactor of its own (reported, review_38 #5)"
    ),
}


def module_of(where: str) -> str:
    """``memory/updates/gate.py`` -> ``deerflow_nb.memory.updates.gate``."""
    return module_name(PACKAGE / where)


def _resolved(module: str, dotted: str) -> Any:
    """The object ``dotted`` names in ``module`` (its import), or None."""
    from importlib import import_module

    try:
        found: Any = import_module(module)
        for part in dotted.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return None
    return found


def _imported_names(tree: ast.AST, module: str) -> dict[str, tuple[str, str]]:
    """Each name a deerflow_nb import binds: (module it is read from, attribute or "")."""
    package = module.split(".")[:-1]
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            if target.startswith("deerflow_nb"):
                for a in node.names:
                    names[a.asname or a.name] = (target, a.name)
        elif isinstance(node, ast.Import):
            names |= {a.asname: (a.name, "") for a in node.names if a.asname}
    return names


class _Functions:
    """What names a function in one module's source: a lambda, a ``partial``, a nested
    function (or a name bound to one), a method of the enclosing class (``self.tap``), a
    module-level function of this module or one imported (``fold_log.bounded``), and a
    method of an object made in the same function (``vectors.warm`` after
    ``vectors = FactVectors(...)``)."""

    def __init__(self, tree: ast.Module, module: str) -> None:
        self.module = module
        self.imported = _imported_names(tree, module)
        self.local = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        self.classes = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}

    def _is_function(self, obj: Any) -> bool:
        return inspect.isfunction(obj) or inspect.ismethod(obj) or inspect.isbuiltin(obj)

    def _method(self, cls: ast.ClassDef | str, name: str) -> bool:
        if isinstance(cls, str):  # an imported class
            origin = self.imported.get(cls)
            found = origin and _resolved(origin[0], f"{origin[1]}.{name}")
            return bool(found) and inspect.isfunction(found)
        for item in cls.body:
            if isinstance(item, ast.FunctionDef) and item.name == name:
                return not any(
                    _name(d) in ("property", "cached_property") for d in item.decorator_list
                )
        return False

    def scope(
        self, fn: ast.FunctionDef | ast.AsyncFunctionDef, cls: ast.ClassDef | None
    ) -> set[str]:
        """The names in ``fn`` bound to a function, and the objects it makes (``name:Cls``)."""
        inner = {n.name for n in ast.walk(fn) if n is not fn and isinstance(n, ast.FunctionDef)}
        args = fn.args
        made = {f"{a.arg}:" for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
                if self.names_function(node.value, inner, set(), cls):
                    inner |= set(names)
                elif isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name):
                    made |= {f"{n}:{node.value.func.id}" for n in names}
        return inner | made

    def names_function(
        self, node: ast.expr, inner: set[str], made: set[str], cls: ast.ClassDef | None
    ) -> bool:
        if isinstance(node, ast.Lambda):
            return True
        if isinstance(node, ast.Call):
            return _name(node.func) == "partial"
        if isinstance(node, ast.Name):
            if f"{node.id}:" in made:  # a parameter, whatever a module function is called
                return False
            if node.id in inner or node.id in self.local:
                return True
            origin = self.imported.get(node.id)
            return (
                bool(origin)
                and origin[1] != ""
                and self._is_function(_resolved(origin[0], origin[1]))
            )
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)):
            return False
        owner = node.value.id
        if owner == "self":
            return cls is not None and self._method(cls, node.attr)
        for entry in made:
            name, _, made_by = entry.partition(":")
            if name == owner and made_by:
                local = self.classes.get(made_by)
                return self._method(local if local is not None else made_by, node.attr)
        origin = self.imported.get(owner)
        if origin is None:
            return False
        dotted = f"{origin[1]}.{node.attr}" if origin[1] else node.attr
        return self._is_function(_resolved(origin[0], dotted))


def functions_handed_down(
    source: str, where: str = "", *, only: set[str] | None = None
) -> list[str]:
    """Functions handed to another part in ``source`` (see ``_Functions``): passed as an
    argument, or set as an attribute of another object (``gate.tap = self.tap``,
    ``setattr``), and parameters typed as functions, in ``__init__`` too (a part wired with
    a function at construction calls back as any other). With ``only`` (the wiring in
    api.py), only what is passed to those names (the write path's classes) counts."""
    tree = ast.parse(source)
    names = _Functions(tree, module_of(where) if where else "deerflow_nb.memory.planted")
    owners = {id(fn): cls for cls in ast.walk(tree) if isinstance(cls, ast.ClassDef)
              for fn in cls.body}  # fmt: skip
    found = called_parameters(tree, where) if only is None else []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        cls = owners.get(id(fn))
        for arg in [*fn.args.args, *fn.args.kwonlyargs]:
            text = ast.unparse(arg.annotation) if arg.annotation is not None else ""
            kept = (where, fn.name, arg.arg) in KEPT_CALLABLES
            if re.search(r"\b(Callable|Finish|Mutate|Changed|Tap)\b", text) and not kept:
                found.append(f"line {arg.lineno}: {fn.name}({arg.arg}: {text})")
        bound = names.scope(fn, cls)
        inner = {b for b in bound if ":" not in b}
        made = bound - inner
        for node in ast.walk(fn):
            handed: list[tuple[ast.expr, str]] = []
            if isinstance(node, ast.Call):
                callee = _name(node.func)
                if callee in PURE_HIGHER_ORDER or (only is not None and callee not in only):
                    continue
                if callee == "setattr" and len(node.args) == 3:
                    handed.append((node.args[2], f"set on {ast.unparse(node.args[0])}"))
                else:
                    args = [*node.args, *(k.value for k in node.keywords)]
                    handed += [(a, f"passed to {callee}") for a in args]
            elif isinstance(node, ast.Assign) and only is None:
                for target in node.targets:
                    if isinstance(target, ast.Attribute) and ast.unparse(target.value) != "self":
                        handed.append((node.value, f"set on {ast.unparse(target)}"))
            for value, how in handed:
                text = ast.unparse(value)
                if (where, text, how.split()[-1]) in KEPT_HANDED:
                    continue
                if names.names_function(value, inner, made, cls):
                    found.append(f"line {value.lineno}: {text[:40]} {how}")
    return sorted(set(found), key=lambda hit: (int(hit.split()[1].rstrip(":")), hit))


def called_parameters(tree: ast.Module, where: str = "") -> list[str]:
    """Parameters a function calls (``then(rows)``), or an ``__init__`` keeps and its class
    calls later (``self._warm = warm`` ... ``self._warm(data)``): the receiving end of a
    function handed down, whatever is handed and however it is typed."""
    found = []
    for cls in [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef))]:
        kept: dict[str, str] = {}  # self.<attr> -> the __init__ parameter it holds
        for fn in cls.body:
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            params = {a.arg for a in [*fn.args.args, *fn.args.kwonlyargs]} - {"self", "cls"}
            params = {a for a in params if (where, fn.name, a) not in KEPT_CALLABLES}
            for node in ast.walk(fn):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                    if node.func.id in params:
                        found.append(f"line {node.lineno}: {fn.name} calls its {node.func.id}")
                elif fn.name == "__init__" and isinstance(node, ast.Assign):
                    for t in node.targets:
                        value = node.value
                        if (
                            isinstance(t, ast.Attribute)
                            and ast.unparse(t.value) == "self"
                            and isinstance(value, ast.Name)
                            and value.id in params
                        ):
                            kept[t.attr] = value.id
        for node in ast.walk(cls):
            func = getattr(node, "func", None)
            if (
                isinstance(node, ast.Call)
                and isinstance(func, ast.Attribute)
                and ast.unparse(func.value) == "self"
                and func.attr in kept
            ):
                found.append(f"line {node.lineno}: calls self.{func.attr} (its {kept[func.attr]})")
    return found


def test_no_function_is_handed_down_the_write_path() -> None:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        source = path.read_text()
        if where.startswith(WRITE_PATH):
            wrong += [f"{where}: {hit}" for hit in functions_handed_down(source, where)]
        elif where in WIRING:
            parts = write_path_classes(source, module_of(where))
            found = functions_handed_down(source, where, only=parts)
            wrong += [f"{where}: {hit}" for hit in found]
    assert not wrong, (
        "functions handed down the write path (run the step in a context manager's body, "
        "pass data, or the part itself):\n" + "\n".join(wrong)
    )


def write_path_classes(source: str, module: str) -> set[str]:
    """The names ``source`` imports from the write path's modules (``Gate``, ``Sharing``)."""
    prefixes = tuple("deerflow_nb." + w.removesuffix(".py").replace("/", ".") for w in WRITE_PATH)
    return {
        name
        for name, (origin, _) in _imported_names(ast.parse(source), module).items()
        if origin.startswith(prefixes)
    }


def test_the_hand_down_scan_finds_planted_callbacks() -> None:
    """The check itself, with review_38's plants: a module function handed to the gate
    (CB1, imported; CB3, this module's own), a bound method (CB2), a callable set on the
    gate (``gate.tap = self.tap``, or by ``setattr``) and a part wired with a function in
    ``__init__`` or in api.py (``vectors.warm``, ``lambda: self.data``)."""
    planted = (
        "from .folding import fold_log\n"
        "from .retrieval.vectors import FactVectors\n"
        "def _noop(rows):\n"
        "    return rows\n"
        "class Fold:\n"
        "    def apply(self, diff, finish: Callable[[Any], None]):\n"
        "        def done(db):\n"
        "            finish(db)\n"
        "        step = partial(self._guarded, diff)\n"
        "        self.ledger.commit('fold', 'x', step, done)\n"
        "        self.gate.submit(change, lambda db, _: rename(db))\n"
        "        apply_diff(data, diff, usage=lambda: read(db))\n"
        "        with self.gate.committing(change, then=fold_log.bounded):\n"
        "            pass\n"
        "        with self.gate.committing(change, then=_noop):\n"
        "            pass\n"
        "        self.gate.submit(change, self._left)\n"
        "    def _left(self, rows):\n"
        "        return rows\n"
        "    def __init__(self, gate, warm: Callable[[dict], None]):\n"
        "        gate.tap = self._left\n"
        "        setattr(gate, 'tap', self._left)\n"
        "        vectors = FactVectors(settings, journal)\n"
        "        Gate(settings, journal, vectors.warm)\n"
        "        Projects(journal, gate, lambda: self.data)\n"
    )
    assert functions_handed_down(planted) == [
        "line 6: apply(finish: Callable[[Any], None])",
        "line 8: apply calls its finish",
        "line 10: done passed to commit",
        "line 10: step passed to commit",
        "line 11: lambda db, _: rename(db) passed to submit",
        "line 12: lambda: read(db) passed to apply_diff",
        "line 13: fold_log.bounded passed to committing",
        "line 15: _noop passed to committing",
        "line 17: self._left passed to submit",
        "line 20: __init__(warm: Callable[[dict], None])",
        "line 21: self._left set on gate.tap",
        "line 22: self._left set on gate",
        "line 24: vectors.warm passed to Gate",
        "line 25: lambda: self.data passed to Projects",
    ]
    assert [hit for hit in functions_handed_down(planted, only={"Gate"}) if "passed" in hit] == [
        "line 24: vectors.warm passed to Gate"
    ]
    # The receiving end, whatever is handed (review_38's CB2 hands a builtin via a property).
    gate = (
        "class Gate:\n"
        "    def __init__(self, warm):\n"
        "        self._warm = warm\n"
        "    def committing(self, change, then=None):\n"
        "        then and then([])\n"
        "        self._warm(change)\n"
    )
    assert functions_handed_down(gate) == [
        "line 5: committing calls its then",
        "line 6: calls self._warm (its warm)",
    ]
    innocent = (
        "from .folding import fold_log\n"
        "def f(self, rows, change: ChangeSet, settings):\n"
        "    rows.sort(key=lambda r: r['id'])\n"
        "    with self.gate.committing(change) as committed:\n"
        "        mark(committed.db)\n"
        "    self.gate.submit(change, settings.memory, fold_log.MAX_LEFT_OUT)\n"
        "    return sorted(rows, key=lambda r: r['at'])\n"
        "def g(self, gate, _noop):\n"
        "    gate.limit = 3\n"
        "    self.tap = self.g\n"
        "    gate.submit(_noop)\n"
    )
    assert functions_handed_down(innocent) == []


# -- a read door that imports nothing of the write side (issue 38) -------------------------
# The write side of memory/: every module that changes memory or the journal, or serves
# only what does. ``updates/`` (the gate, the ledger, the rules, edits, review decisions,
# transfers, upkeep), ``folding/`` (the fold queue, the worker, a fold and its record),
# ``api.py`` (``Memory``), ``sharing.py`` and ``team_sync.py`` (the team's changes),
# ``conversation.py`` (journals turns and messages), ``sqlite_home.py`` (commits through the
# ledger), ``listeners.py`` (called after a change), ``model_reply.py`` (a fold's reply,
# parsed), ``reports.py`` (what a change reports) and ``retrieval/vectors.py`` (warms the
# journal's vector cache). Outside memory/, storage/ holds the journal's reads and writes
# side by side, each a function on the connection it is given: the reader's own is opened
# read-only (``storage.db.open_read_only``), but ``Memory.reader`` is handed the writer's
# connection, so storage's modules are not followed, and a call of a storage function that
# writes (``storage_writes``, found by its statements) from the read door's modules is a
# finding. So is the facade (``from . import Memory``) and a dynamic import.
READ_DOOR = "deerflow_nb.memory.reader"
WRITE_SIDE = (
    "deerflow_nb.memory.updates",
    "deerflow_nb.memory.folding",
    "deerflow_nb.memory.api",
    "deerflow_nb.memory.sharing",
    "deerflow_nb.memory.team_sync",
    "deerflow_nb.memory.conversation",
    "deerflow_nb.memory.sqlite_home",
    "deerflow_nb.memory.listeners",
    "deerflow_nb.memory.model_reply",
    "deerflow_nb.memory.reports",
    "deerflow_nb.memory.retrieval.vectors",
)


FACADE = "deerflow_nb.memory"  # memory/__init__.py: it imports ``Memory``, the whole write side
DYNAMIC = "a dynamic import"
IMPORTERS = {"import_module", "__import__"}


def memory_imports(source: str, module: str, modules: set[str], is_package: bool) -> set[str]:
    """The memory/ modules ``source`` imports anywhere (lazy and type-only imports too;
    ``from package import submodule`` counts as the submodule, ``importlib.import_module``
    of a constant name as that module, of anything else as ``DYNAMIC``). The packages a
    module sits in are not counted for their submodules, but the facade is when a name is
    taken from it (``from . import Memory``, ``from deerflow_nb.memory import Memory``)."""
    here = module.split(".")
    package = here if is_package else here[:-1]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                found.add(submodule if submodule in modules else target)
            if target != FACADE:
                found.add(target)  # a package of memory/ runs as its submodule is imported
        elif isinstance(node, ast.Call) and _name(node.func) in IMPORTERS:
            named = node.args[0] if node.args else None
            if isinstance(named, ast.Constant) and not str(named.value).startswith("."):
                found.add(str(named.value))
            else:
                found.add(DYNAMIC)
    return {
        m
        for m in found
        if m == DYNAMIC or (m in modules and (m == FACADE or m.startswith(FACADE + ".")))
    }


def _write_side(target: str) -> bool:
    return target in (FACADE, DYNAMIC) or any(
        target == w or target.startswith(w + ".") for w in WRITE_SIDE
    )


def write_side_reached(sources: dict[str, str], packages: set[str], start: str) -> list[str]:
    """``start`` and every memory/ module it reaches through imports: each import that
    lands on the write side (or on the facade, or cannot be told: a dynamic import), as
    ``module imports target``, and each call of a storage function that writes
    (``storage_writes``), as ``module line N writes: module.function()``."""
    modules = set(sources)
    writes = storage_writes(sources)
    seen, todo, found = {start}, [start], []
    while todo:
        module = todo.pop()
        found += storage_writes_called(sources[module], module, writes, module in packages)
        for target in sorted(memory_imports(sources[module], module, modules, module in packages)):
            if _write_side(target):
                found.append(f"{module} imports {target}")
            elif target not in seen:
                seen.add(target)
                todo.append(target)
    return sorted(found)


# Storage writes the read door's modules may make, and why (module, what it calls).
KEPT_READ_WRITES = {
    ("deerflow_nb.memory.retrieval.embedder", "self._journal.transaction"): (
        "the embedding cache is saved only by an embedder given a writer's journal: the read "
        "door's (MemoryReader.embedder) is made with none (read_only=...) and saves nothing"
    ),
    ("deerflow_nb.memory.retrieval.embedder", "deerflow_nb.storage.embeddings.save"): (
        "the same save, inside that transaction"
    ),
    ("deerflow_nb.memory.retrieval.recall", "deerflow_nb.storage.recall_index.sync"): (
        "the read door's recall runs on a JournalCopy (MemoryReader.recall): an index that "
        "lags is caught up in an in-memory copy, never in the file"
    ),
    ("deerflow_nb.memory.retrieval.recall_dense", "deerflow_nb.storage.recall_index.sync"): (
        "the same catch-up, before dense recall, on the same copy"
    ),
}
# A storage function writes when it runs a writing statement, a sqlite-utils table write,
# opens a transaction, or calls a storage function that writes.
WRITE_SQL = re.compile(r"\s*(INSERT|UPDATE|DELETE|REPLACE|CREATE|DROP|ALTER|BEGIN)\b")
TABLE_WRITES = {
    "insert", "insert_all", "upsert", "upsert_all", "update", "delete", "delete_where",
    "create", "create_table", "create_index", "add_column", "transform", "drop",
}  # fmt: skip


def _storage_names(source: str, module: str, is_package: bool) -> dict[str, str]:
    """What each name imported in ``source`` stands for, among storage's modules and
    functions: ``queue_rows`` -> ``deerflow_nb.storage.queue``, ``transaction`` ->
    ``deerflow_nb.storage.db.transaction``."""
    here = module.split(".")
    package = here if is_package else here[:-1]
    names = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                if f"{target}.{alias.name}".startswith("deerflow_nb.storage"):
                    names[alias.asname or alias.name] = f"{target}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("deerflow_nb.storage") and alias.asname:
                    names[alias.asname] = alias.name
    return names


def _called(call: ast.Call, names: dict[str, str], module: str) -> str | None:
    """The storage function ``call`` calls, by its full name, or None."""
    func = call.func
    if isinstance(func, ast.Name):
        return names.get(func.id, f"{module}.{func.id}")
    if (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and func.value.id in names
    ):
        return f"{names[func.value.id]}.{func.attr}"
    return None


def storage_writes(sources: dict[str, str]) -> set[str]:
    """The storage module functions that write (``deerflow_nb.storage.queue.put``)."""
    found: set[str] = set()
    calls: dict[str, set[str]] = {}
    for module, source in sources.items():
        if not module.startswith("deerflow_nb.storage"):
            continue
        names = _storage_names(source, module, module.endswith("storage"))
        for fn in ast.parse(source).body:
            if not isinstance(fn, ast.FunctionDef):
                continue
            full = f"{module}.{fn.name}"
            calls[full] = set()
            for node in ast.walk(fn):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    if WRITE_SQL.match(node.value):
                        found.add(full)
                elif isinstance(node, ast.Call):
                    func = node.func
                    on_table = isinstance(func, ast.Attribute) and (
                        isinstance(func.value, ast.Subscript) or _name(func.value) == "table"
                        or (isinstance(func.value, ast.Call) and _name(func.value.func) == "table")
                    )  # fmt: skip
                    if on_table and func.attr in TABLE_WRITES or _name(func) == "transaction":
                        found.add(full)
                    elif (callee := _called(node, names, module)) is not None:
                        calls[full].add(callee)
    grew = True
    while grew:
        grew = False
        for fn, callees in calls.items():
            if fn not in found and callees & found:
                found.add(fn)
                grew = True
    return found


def storage_writes_called(
    source: str, module: str, writes: set[str], is_package: bool = False
) -> list[str]:
    """Calls in ``source`` of a storage function in ``writes``, and of any ``transaction``."""
    names = _storage_names(source, module, is_package)
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            callee = _called(node, names, module)
            if callee in writes or _name(node.func) == "transaction":
                what = callee or ast.unparse(node.func)
                if (module, what) in KEPT_READ_WRITES:
                    continue
                found.append(f"{module} line {node.lineno} writes: {what}()")
    return found


def test_the_read_door_imports_nothing_of_the_write_side() -> None:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    sources = {m: p.read_text() for m, p in paths.items()}
    packages = {m for m, p in paths.items() if p.name == "__init__.py"}
    found = write_side_reached(sources, packages, READ_DOOR)
    assert not found, (
        "the read door reaches the write side (move the helper to memory/readside/; read "
        "instead of a storage write):\n" + "\n".join(found)
    )


def test_the_read_door_scan_finds_a_planted_write_import() -> None:
    """The check itself: a lazy import two modules down, a type-only one and a submodule
    named in ``from package import …`` are found; the write side importing the read side
    is not a finding."""
    sources = {
        READ_DOOR: "from .readside import helper\nfrom .scopes import Scope\n",
        "deerflow_nb.memory.readside": "",
        "deerflow_nb.memory.readside.helper": "def f():\n    from ..updates.review import items\n",
        "deerflow_nb.memory.scopes": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from .folding import fold_log\n"
        ),
        "deerflow_nb.memory.updates": "",
        "deerflow_nb.memory.updates.review": "from ..readside import helper\n",
        "deerflow_nb.memory.folding": "",
        "deerflow_nb.memory.folding.fold_log": "",
    }
    packages = {
        "deerflow_nb.memory.readside",
        "deerflow_nb.memory.updates",
        "deerflow_nb.memory.folding",
    }
    assert write_side_reached(sources, packages, READ_DOOR) == [
        "deerflow_nb.memory.readside.helper imports deerflow_nb.memory.updates.review",
        "deerflow_nb.memory.scopes imports deerflow_nb.memory.folding",
        "deerflow_nb.memory.scopes imports deerflow_nb.memory.folding.fold_log",
    ]
    clean = dict(
        sources, **{"deerflow_nb.memory.readside.helper": "", "deerflow_nb.memory.scopes": ""}
    )
    assert write_side_reached(clean, packages, READ_DOOR) == []


def test_the_read_door_scan_finds_the_facade_dynamic_imports_and_storage_writes() -> None:
    """The check itself, with review_38's plants: the write side reached through the facade
    (R1, relative or absolute), ``importlib`` (R2) and a storage function that writes, on a
    module the reader may import (R3); a submodule taken from the package, a storage read,
    and a write the allow-list names are not findings."""
    storage = {
        "deerflow_nb.storage": "",
        "deerflow_nb.storage.queue": (
            "def claim(db, t):\n    db['memory_queue'].update(t, {})\n"
            "def claim_due(db, owner):\n    claim(db, 't')\n"
            "def count(db):\n    return db.execute('SELECT 1').fetchone()\n"
        ),
        "deerflow_nb.storage.recall_index": (
            "from .db import transaction\ndef sync(journal):\n"
            "    with transaction(journal.db):\n        pass\n"
        ),
        "deerflow_nb.storage.db": "def transaction(db):\n    db.execute('BEGIN IMMEDIATE')\n",
        "deerflow_nb.memory": "from .api import Memory\n",
        "deerflow_nb.memory.scopes": "",
        "deerflow_nb.memory.retrieval": "",
        "deerflow_nb.memory.retrieval.recall": (
            "from ...storage import recall_index\ndef search(j):\n    recall_index.sync(j)\n"
        ),
    }
    packages = {"deerflow_nb.memory", "deerflow_nb.storage", "deerflow_nb.memory.retrieval"}
    reader = (
        "import importlib\n"
        "from ..storage import queue as queue_rows\n"
        "from . import scopes\n"
        "from .retrieval import recall\n"
        "def _writer(home):\n"
        "    from . import Memory\n"
        "    from deerflow_nb.memory import Memory as M\n"
        "    return Memory(home)\n"
        "def _gate(name):\n"
        "    importlib.import_module('deerflow_nb.memory.updates.gate')\n"
        "    return importlib.import_module(name)\n"
        "def _take(db, owner):\n"
        "    queue_rows.count(db)\n"
        "    return queue_rows.claim_due(db, owner)\n"
    )
    sources = storage | {READ_DOOR: reader, "deerflow_nb.memory.updates.gate": ""}
    assert write_side_reached(sources, packages, READ_DOOR) == [
        "deerflow_nb.memory.reader imports a dynamic import",
        "deerflow_nb.memory.reader imports deerflow_nb.memory",
        "deerflow_nb.memory.reader imports deerflow_nb.memory.updates.gate",
        "deerflow_nb.memory.reader line 14 writes: deerflow_nb.storage.queue.claim_due()",
    ]
    assert "deerflow_nb.storage.recall_index.sync" in storage_writes(sources)


# -- a narrow facade grouped by job (issue 38) ------------------------------------------------
# ``Memory``'s public names: its groups, the DESIGN.md names kept as aliases of the groups'
# methods, and at most MAX_TOP_LEVEL others (its parts' doors and what a turn needs), none
# of them a method that only passes a call on to a part.
DESIGN_NAMES = {  # DESIGN.md's "Public names that outside checks call", on a Memory
    "data", "add_fact", "forget", "preview", "flush", "apply", "embedder", "status",
    "recall", "import_", "export", "search", "pending", "pending_count", "approve",
    "rollback", "versions", "events", "stale", "propose_stale", "consolidate", "lineage",
    "enqueue", "close", "add_messages", "share", "join", "sync",
}  # fmt: skip
MAX_TOP_LEVEL = 20


def facade_problems(memory: object) -> list[str]:
    """What breaks the facade's rules in ``memory`` (a Memory, or a planted subclass's)."""
    from deerflow_nb.memory.groups import Alias, Group

    cls = type(memory)
    kinds = {n: type(inspect.getattr_static(cls, n, None)) for n in dir(memory)}
    groups = {n for n, kind in kinds.items() if kind is Group}
    aliases = {n for n, kind in kinds.items() if kind is Alias}
    public = {n for n in dir(memory) if not n.startswith("_")}
    others = sorted(public - groups - aliases)
    problems = [f"{n} is not on Memory" for n in sorted(DESIGN_NAMES - public)]
    problems += [f"alias {n} is not a DESIGN.md name" for n in sorted(aliases - DESIGN_NAMES)]
    # Issue 38: at most MAX_TOP_LEVEL methods at the top level, each group counted once; the
    # parts kept as plain attributes (journal, store, reader …) are not methods.
    methods = sorted(
        groups | {n for n in others if hasattr(cls, n) or callable(getattr(memory, n))}
    )
    if len(methods) > MAX_TOP_LEVEL:
        problems.append(f"{len(methods)} top-level names (at most {MAX_TOP_LEVEL}): {methods}")
    for name in sorted(aliases):
        alias = inspect.getattr_static(cls, name)
        group, _, method = alias.target.partition(".")
        target = getattr(getattr(memory, group, None), method, None)
        if group not in groups or not callable(target):
            problems.append(f"alias {name} -> {alias.target} is no group's method")
        elif alias.__doc__ != target.__doc__:
            problems.append(f"alias {name} is documented apart from {alias.target}")
    for name in others:
        if callable(getattr(memory, name)) and not getattr(memory, name).__doc__:
            problems.append(f"{name} has no docstring")
    return problems


def forwards_in(source: str, cls: str = "Memory") -> list[str]:
    """The methods of class ``cls`` in ``source`` that only forward: after the docstring,
    one call (returned or not) of ``self.<part>.<method>`` passing its own arguments on."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.ClassDef) and node.name == cls):
            continue
        for method in node.body:
            if not isinstance(method, ast.FunctionDef) or method.name.startswith("__"):
                continue
            body = method.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                body = body[1:]  # the docstring
            if len(body) != 1 or not isinstance(body[0], ast.Return | ast.Expr):
                continue
            call = body[0].value
            if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute):
                continue
            owner = call.func.value
            on_part = (
                isinstance(owner, ast.Attribute)
                and isinstance(owner.value, ast.Name)
                and owner.value.id == "self"
            )
            passed = [*call.args, *(k.value for k in call.keywords)]
            if on_part and all(_passed_on(a) for a in passed):
                found.append(f"{method.name} (line {method.lineno}) only forwards")
    return found


def _passed_on(node: ast.expr) -> bool:
    """An argument handed on unchanged: a name, a constant, ``*args``, or ``self.x``."""
    if isinstance(node, ast.Starred):
        node = node.value
    return isinstance(node, ast.Name | ast.Constant) or (
        isinstance(node, ast.Attribute) and _name(node.value) == "self"
    )


def test_memory_is_a_narrow_facade(tmp_path: Path) -> None:
    from deerflow_nb.memory import Memory

    with Memory(tmp_path / "home") as memory:
        assert facade_problems(memory) == []


def test_no_memory_method_only_forwards() -> None:
    assert forwards_in((PACKAGE / "memory" / "api.py").read_text()) == []
    # The conversation door hands on the journal's own methods, not copies of them.
    source = (PACKAGE / "memory" / "conversation.py").read_text()
    assert forwards_in(source, "Conversation") == []


def test_the_facade_scan_finds_planted_breaches(tmp_path: Path) -> None:
    from deerflow_nb.memory import Memory
    from deerflow_nb.memory.groups import Alias, Group, Reviewing

    extra = {f"helper_{i}": lambda self: None for i in range(MAX_TOP_LEVEL)}
    planted = type("Planted", (Memory,), {**extra, "reject": Alias("review", Reviewing.reject)})
    with planted(tmp_path / "home") as memory:
        problems = facade_problems(memory)
    assert "alias reject is not a DESIGN.md name" in problems
    assert any("top-level names (at most 20)" in p for p in problems)
    assert "helper_0 has no docstring" in problems
    # Groups count once each (found by a review: they had counted as none): four more
    # groups bring the 19 names of today's Memory past 20.
    grouped = type("Grouped", (Memory,), {f"group_{i}": Group[Reviewing]() for i in range(4)})
    with grouped(tmp_path / "grouped") as memory:
        assert any("top-level names (at most 20)" in p for p in facade_problems(memory))
    broken = type("Broken", (Memory,), {"pending": Alias("nowhere", Reviewing.approve)})
    with broken(tmp_path / "other") as memory:
        assert "alias pending -> nowhere.approve is no group's method" in facade_problems(memory)
    forwarding = '''
class Memory:
    def pending(self):
        """What waits."""
        return self._review.pending()

    def skip(self, thread_id, *rest, quiet=False):
        self._folding.skip(thread_id, *rest, quiet=quiet, journal=self.journal)

    def apply(self, diff, source="manual"):
        """Checks the diff first: real work, not a forward."""
        return self._folding.apply(check_diff(diff), source)

    def preview(self, context=None):
        return self.injection(context)[0]
'''
    assert forwards_in(forwarding) == [
        "pending (line 3) only forwards",
        "skip (line 7) only forwards",
    ]


def classes_named(name: str, sources: dict[str, str]) -> list[str]:
    """Where each class called ``name`` is defined (``where:line``)."""
    return [
        f"{where}:{node.lineno}"
        for where, source in sources.items()
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ClassDef) and node.name == name
    ]


def test_one_scope_class() -> None:
    """Whose facts a read sees is one value (storage/contract.py), so two layers cannot
    disagree about it."""
    sources = {str(p.relative_to(PACKAGE.parent)): p.read_text() for p in PACKAGE.rglob("*.py")}
    found = [where.partition(":")[0] for where in classes_named("Scope", sources)]
    assert found == ["deerflow_nb/storage/contract.py"]


def test_one_snapshot_class() -> None:
    """What a scope sees of a revision, as a store hands it over, is one value (the store
    contract's ``Snapshot``); memory.json's own shape as a scope sees it is a ``View``, named
    apart so a reader of either cannot take one for the other."""
    sources = {str(p.relative_to(PACKAGE.parent)): p.read_text() for p in PACKAGE.rglob("*.py")}
    found = [where.partition(":")[0] for where in classes_named("Snapshot", sources)]
    assert found == ["deerflow_nb/storage/contract.py"]


def test_the_class_scan_finds_a_planted_second_scope() -> None:
    planted = {"a.py": "class Scope:\n    pass\n", "b.py": "def f():\n    class Scope: ...\n"}
    assert classes_named("Scope", planted) == ["a.py:1", "b.py:2"]
