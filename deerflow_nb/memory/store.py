"""memory.json on disk: DeerFlow's classic schema, atomic writes, a cross-process lock.

Two kernels may fold at the same time, so every change takes the file lock, re-reads
the file and writes a whole new one through a unique temp file (fsync, rename,
directory fsync): a reader never sees half a file and no writer loses another's work.
A file that does not parse is never overwritten by a fold: a copy is kept aside and
every read raises ``MemoryFileError`` until the user restores a version or resets.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from filelock import FileLock

from ..journal import now_iso
from ..schema import (  # the constants live with the typed schema; kept importable here
    CATEGORIES,
    HISTORY_SECTIONS,
    MEMORY_TAG,
    SCHEMA_VERSION,
    USER_SECTIONS,
    memory_problem,
)

__all__ = [
    "CATEGORIES",
    "HISTORY_SECTIONS",
    "MEMORY_TAG",
    "SCHEMA_VERSION",
    "USER_SECTIONS",
    "MemoryFileError",
    "MemoryStore",
    "check_schema",
    "empty_memory",
    "normalized",
    "render",
]

_process_locks: dict[Path, threading.RLock] = {}
_process_locks_guard = threading.Lock()


class MemoryFileError(RuntimeError):
    """memory.json exists but cannot be used; the message names the file and the fix."""


def empty_memory() -> dict[str, Any]:
    """A fresh memory in DeerFlow's schema (what a missing memory.json means)."""
    return {
        "version": SCHEMA_VERSION,
        "lastUpdated": now_iso(),
        "user": {name: {"summary": "", "updatedAt": ""} for name in USER_SECTIONS},
        "history": {name: {"summary": "", "updatedAt": ""} for name in HISTORY_SECTIONS},
        "facts": [],
    }


def check_schema(data: Any) -> str | None:
    """Why ``data`` is not a usable memory document, or None when it is (the typed
    ``schema.MemoryDocument``: facts with unique text ids, text content, numeric confidence)."""
    return memory_problem(data)


def normalized(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with every schema key present, for code that edits it (the input is kept)."""
    base = empty_memory()
    out = dict(data)
    out.setdefault("version", SCHEMA_VERSION)
    out.setdefault("lastUpdated", base["lastUpdated"])
    for group, names in (("user", USER_SECTIONS), ("history", HISTORY_SECTIONS)):
        sections = dict(out.get(group) or {})
        for name in names:
            section = sections.get(name)
            sections[name] = dict(section) if isinstance(section, dict) else dict(base[group][name])
        out[group] = sections
    out["facts"] = [dict(f) for f in out.get("facts", [])]
    return out


_ENCODE = json.JSONEncoder(ensure_ascii=False).encode


def render(data: dict[str, Any]) -> str:
    """Indented JSON with one fact per line: readable, diffable, and written by the C encoder
    (``indent=`` would fall back to the pure-Python one, several times slower on big stores)."""
    items = list(data.items())
    lines = ["{"]
    for i, (key, value) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        if isinstance(value, list) and value:
            body = ",\n    ".join(map(_ENCODE, value))
            lines.append(f"  {_ENCODE(key)}: [\n    {body}\n  ]{comma}")
        elif isinstance(value, dict) and value:
            inner = ",\n".join(f"    {_ENCODE(k)}: {_ENCODE(v)}" for k, v in value.items())
            lines.append(f"  {_ENCODE(key)}: {{\n{inner}\n  }}{comma}")
        else:
            lines.append(f"  {_ENCODE(key)}: {_ENCODE(value)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


class MemoryStore:
    """Reads and writes one memory.json."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self._file_lock = FileLock(str(self.lock_path), thread_local=False)
        key = self.path.resolve()
        with _process_locks_guard:
            self._thread_lock = _process_locks.setdefault(key, threading.RLock())
        self._shared: tuple[tuple[Any, ...], dict[str, Any]] | None = None

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Exclusive access across threads of this process and across processes."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._thread_lock, self._file_lock:
            yield

    def read_shared(self) -> tuple[tuple[Any, ...] | None, dict[str, Any]]:
        """The file's revision and its document, parsed once per revision and shared.

        A turn reads memory on every model call; re-parsing a 10,000-fact file each time
        costs tens of milliseconds. Writes replace the file by rename, so path, inode, size
        and times identify a revision (None when there is no file). Callers must not
        mutate the document; use ``read()`` for a private copy.
        """
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None, empty_memory()
        key = (str(self.path), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        shared = self._shared
        if shared is not None and shared[0] == key:
            return shared
        data = self.read()
        self._shared = (key, data)
        return key, data

    def read(self) -> dict[str, Any]:
        """The document as stored; the empty schema if the file is absent."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return empty_memory()
        try:
            data = json.loads(raw.decode("utf-8"))
            problem = check_schema(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            problem = f"it is not valid JSON ({exc})"
        if problem is None:
            return data
        raise MemoryFileError(self._corrupt_message(raw, problem))

    def _corrupt_message(self, raw: bytes, problem: str) -> str:
        """Keep a copy of the bad bytes aside (once per content) and phrase the fix."""
        copy = self._keep_aside(raw)
        return (
            f"{self.path} cannot be read: {problem}; a copy is kept as {copy.name}. "
            "Restore the last good version with `%memory rollback <last version>` or "
            "`deerflow-nb fold --rebuild` (Memory.recover()), or delete the file to start empty."
        )

    def _keep_aside(self, raw: bytes) -> Path:
        for existing in sorted(self.path.parent.glob(self.path.name + ".corrupt-*")):
            with contextlib.suppress(OSError):
                if existing.read_bytes() == raw:
                    return existing
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        copy = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        shutil.copyfile(self.path, copy)
        return copy

    def write(self, data: dict[str, Any]) -> None:
        """Replace the file atomically; call under ``locked()``."""
        payload = render(data).encode("utf-8")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=self.path.name + ".", suffix=".tmp", dir=self.path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(payload)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        _fsync_dir(self.path.parent)


def _fsync_dir(path: Path) -> None:
    """Make the rename itself durable (POSIX); a no-op where directories cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
