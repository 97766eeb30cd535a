"""Which ``threads`` row a thread name means in a project: one name, one thread per project.

Thread ids stay plain names (a home from before keeps its threads): a name is its own id
while no thread has it or its thread is the project's; another project's turn with the
same name gets ``NAME @project`` (and, should that id be taken too, a short hash after
it). ``Journal.thread_for`` is the one resolver every user-given thread name goes through.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from ..projects import DEFAULT_PROJECT, thread_name
from .db import Connection, dict_rows

MAX_TRIES = 1000  # ids tried before giving up: each after the first is a new hash
ALIAS = "project_alias:"  # memory_settings key of a renamed project's new name


def thread_for(db: Connection, name: str, project: str | None) -> str:
    """The id of thread ``name`` in ``project`` (None: the default project; a thread from
    before projects counts as the default project's). Deterministic given the journal."""
    project = project or DEFAULT_PROJECT
    candidate = name
    for attempt in range(MAX_TRIES):
        rows = dict_rows(db, "SELECT project FROM threads WHERE id = ?", [candidate])
        if not rows or (rows[0]["project"] or DEFAULT_PROJECT) == project:
            return candidate
        key = f"{project}\x00{attempt}".encode()
        tag = f" #{hashlib.sha256(key).hexdigest()[:8]}" if attempt else ""
        candidate = thread_name(f"{name} @{project}{tag}")
    raise ValueError(f"no free thread id for {name!r} in project {project!r}")


def projects_of(db: Connection, ids: Iterable[str]) -> dict[str, str]:
    """The project of each thread of ``ids`` the journal holds (one from before projects:
    ``default``), read 500 ids at a time."""
    wanted, found = sorted(set(ids)), {}
    for start in range(0, len(wanted), 500):
        part = wanted[start : start + 500]
        sql = f"SELECT id, project FROM threads WHERE id IN ({', '.join('?' * len(part))})"
        found |= {r["id"]: r["project"] or DEFAULT_PROJECT for r in dict_rows(db, sql, part)}
    return found


def rename_project(db: Connection, old: str, new: str) -> int:
    """Move every thread of ``old`` to ``new`` inside the caller's transaction, and leave
    the alias ``old`` → ``new``: a notebook whose git root or folder is named ``old`` opens
    in ``new`` from then on (``renamed``). How many threads moved."""
    cursor = db.execute("UPDATE threads SET project = ? WHERE project = ?", [new, old])
    db.execute(
        "INSERT INTO memory_settings (key, value) VALUES (?, ?) "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        [ALIAS + old, new],
    )
    db.execute("DELETE FROM memory_settings WHERE key = ?", [ALIAS + new])  # renamed back
    return cursor.rowcount


def renamed(db: Connection, name: str) -> str:
    """What project ``name`` became through renames (``name`` itself when never renamed);
    a chain ``a`` → ``b`` → ``c`` is followed, a cycle stops where it started."""
    seen = {name}
    while True:
        rows = dict_rows(db, "SELECT value FROM memory_settings WHERE key = ?", [ALIAS + name])
        if not rows or rows[0]["value"] in seen:
            return name
        name = rows[0]["value"]
        seen.add(name)
