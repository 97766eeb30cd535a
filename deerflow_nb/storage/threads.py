"""Which ``threads`` row a thread name means in a project: one name, one thread per project.

Thread ids stay plain names (a home from before keeps its threads): a name is its own id
while no thread has it or its thread is the project's; another project's turn with the
same name gets ``NAME @project`` (and, should that id be taken too, a short hash after
it). ``Journal.thread_for`` is the one resolver every user-given thread name goes through.
"""

from __future__ import annotations

import hashlib

from ..projects import DEFAULT_PROJECT, thread_name
from .db import Connection, dict_rows

MAX_TRIES = 1000  # ids tried before giving up: each after the first is a new hash


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
