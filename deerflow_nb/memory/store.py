"""memory.json on disk: DeerFlow's classic schema, atomic writes, a cross-process lock.

Two kernels may fold at the same time, so every change takes the file lock, re-reads
the file and writes a whole new one through a unique temp file (fsync, rename,
directory fsync): a reader never sees half a file and no writer loses another's work.
A file that does not parse is never overwritten by a fold: a copy is kept aside and
every read raises ``MemoryFileError`` until the user restores a version or resets.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import orjson
from filelock import FileLock, Timeout

from ..home import HomeError
from ..schema.constants import (  # the constants live with the schema; kept importable here
    CATEGORIES,
    HISTORY_SECTIONS,
    MEMORY_TAG,
    SCHEMA_VERSION,
    USER_SECTIONS,
)
from ..schema.document import memory_problem
from ..scrub import encodable, encodable_deep
from ..storage.db import BUSY_SECONDS, now_iso, storage_error

__all__ = [
    "CATEGORIES",
    "HISTORY_SECTIONS",
    "MEMORY_TAG",
    "SCHEMA_VERSION",
    "USER_SECTIONS",
    "MemoryFileError",
    "MemoryLocked",
    "MemoryStore",
    "check_schema",
    "empty_memory",
    "normalized",
    "render",
]

# How long a writer waits for memory.json's lock (held by a commit elsewhere, which takes
# well under a second) before it gives up with the one-line ``HomeError``: as long as
# journal.db's busy timeout, so a stopped or stuck holder is said, not waited on forever.
LOCK_SECONDS = BUSY_SECONDS

_process_locks: dict[Path, threading.RLock] = {}
_process_locks_guard = threading.Lock()


class MemoryFileError(RuntimeError):
    """memory.json exists but cannot be used; the message names the file and the fix."""


class MemoryLocked(HomeError):
    """memory.json's lock was held elsewhere longer than ``LOCK_SECONDS``; one line naming
    the lock file and the fix (nothing was changed)."""


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
    ``schema.document.MemoryDocument``: facts with unique text ids, text content, numeric
    confidence)."""
    return memory_problem(data)


def normalized(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with every schema key present, for code that edits it (the input is kept):
    its sections copied, its facts a new list of the same fact dicts, which such code copies
    before it changes one (the document read is shared with readers)."""
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
    out["facts"] = list(out.get("facts", []))
    return out


# allow_nan=False: a NaN or an infinity is not JSON, and memory.json must stay JSON.
_ENCODE = json.JSONEncoder(ensure_ascii=False, allow_nan=False).encode
MAX_INT_DIGITS = 30  # longer integers are not a number memory uses (and can be very slow)
# orjson reads integers of 20 digits or more as floats (past 64 bits), where memory.json
# keeps them exact: such a file is read by the strict ``json`` path below.
# (Every digit as 0, then a run of twenty 0s: a C-speed search, where a regex takes ms.)
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGITS = b"0" * 20
_DUMP_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS


def _parse_float(text: str) -> float:
    value = float(text)
    if value - value != 0:  # inf (1e400 overflows to it); NaN literals are refused apart
        raise ValueError(f"the number {text[:20]} is too large for JSON")
    return value


def _parse_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {digits} digits is not a number memory can hold")
    return int(text)


def _parse_constant(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


def loads_document(raw: bytes | str) -> Any:
    """JSON text parsed strictly: ``NaN``/``Infinity``, numbers too large for a float
    (``1e400``), integers of more than ``MAX_INT_DIGITS`` digits and nesting too deep for
    Python raise ValueError with one line saying which, instead of a traceback or an
    infinity that the next write would save as invalid JSON.

    orjson reads the file (several times faster than ``json``); it refuses everything above
    too, and whatever it refuses or might read differently (long integers, lone surrogate
    escapes, a byte-order mark) is read again by ``json`` with the checks above, which
    accepts what it always did and names the problem otherwise."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if _LONG_DIGITS not in data.translate(_DIGITS_AS_ZERO):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    try:
        return json.loads(
            text,
            parse_float=_parse_float,
            parse_int=_parse_int,
            parse_constant=_parse_constant,
        )
    except RecursionError:
        raise ValueError("it nests arrays or objects deeper than can be read") from None


def dumps_document(data: dict[str, Any]) -> bytes:
    """``data`` as indented UTF-8 JSON (``json.dump(indent=2, ensure_ascii=False)``'s
    layout, as DeerFlow writes it), by orjson; ValueError for a NaN or an infinity, which
    JSON cannot hold, and lone surrogates become U+FFFD (``encoded_document``)."""
    return encoded_document(data)[1]


def encoded_document(data: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
    """``data`` with every string encodable (itself when all are valid UTF-8, else a copy
    with lone surrogates as U+FFFD, ``scrub.encodable_deep``) and its memory.json bytes
    (``dumps_document``): one orjson pass in the common case.

    orjson writes a NaN as ``null``: a document whose output holds ``null`` is checked by
    ``json`` with ``allow_nan=False`` (memory documents seldom hold one). What orjson cannot
    write (an integer past 64 bits) is written by ``json``, in the same layout."""
    try:
        payload = orjson.dumps(data, option=_DUMP_OPTIONS)
    except TypeError as exc:
        if "surrogates" in str(exc):
            return encoded_document(encodable_deep(data))
        return data, _dumps_slowly(data)
    if b"null" in payload:
        _ENCODE(data)  # raises ValueError for a NaN or an infinity
    return data, payload + b"\n"


def _dumps_slowly(data: dict[str, Any]) -> bytes:
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, indent=2)
    return encodable(text).encode("utf-8") + b"\n"


def render(data: dict[str, Any]) -> str:
    """memory.json's text for ``data`` (see ``dumps_document``)."""
    return dumps_document(data).decode("utf-8")


@contextlib.contextmanager
def quiet_gc() -> Iterator[None]:
    """No cyclic garbage collection in the body (restored after, if it was on).

    memory.json's document is acyclic (reference counting frees it), yet every collection
    of the oldest generation walks all of its objects: at 10,000 facts a fold's parse and
    rules triggered enough of them to double its time. A fold's few milliseconds without
    them change nothing else; nested and concurrent uses leave it on at the end."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


class Prepared(NamedTuple):
    """A document written to its temp file (``MemoryStore.prepare``), not yet in place."""

    path: Path
    document: dict[str, Any]


class MemoryStore:
    """Reads and writes one memory.json (``keep_aside=False``: a reader that writes nothing,
    not even the copy of a damaged file)."""

    def __init__(self, path: str | os.PathLike[str], *, keep_aside: bool = True) -> None:
        self.path = Path(path)
        self.keep_aside = keep_aside
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self._file_lock = FileLock(str(self.lock_path), thread_local=False)
        key = self.path.resolve()
        with _process_locks_guard:
            self._thread_lock = _process_locks.setdefault(key, threading.RLock())
        self._shared: tuple[tuple[Any, ...], dict[str, Any]] | None = None
        # The last bytes read and found sound, or written by ``install``: a read of the
        # same bytes skips the schema check (a fold re-reads the file the last one wrote).
        self._checked: bytes | None = None
        self._prepared: tuple[Path, bytes] | None = None

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Exclusive access across threads of this process and across processes; waited for
        ``LOCK_SECONDS`` at most, then ``MemoryLocked`` (a holder stopped mid-commit)."""
        seconds = LOCK_SECONDS
        if not self._thread_lock.acquire(timeout=seconds):  # another thread here holds it
            raise self._busy(seconds)
        try:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file_lock.acquire(timeout=seconds)
            except Timeout:  # another process holds it (a stopped or stuck kernel)
                raise self._busy(seconds) from None
            except OSError as exc:
                raise _io_error(self.lock_path, exc) from None
            try:
                yield
            finally:
                self._file_lock.release()
        finally:
            self._thread_lock.release()

    def _busy(self, seconds: float) -> MemoryLocked:
        """The one-line ``HomeError`` for memory.json's lock held elsewhere too long."""
        return MemoryLocked(
            f"{self.path} is locked by another program for {seconds:g}s ({self.lock_path}): "
            "finish, resume or restart the kernel or command that holds it (a stopped or "
            "stuck one) and run this again; nothing was changed"
        )

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
        except OSError as exc:  # a folder of that name, a file this user cannot read
            from ..config import HomeError

            raise HomeError(
                f"{self.path} cannot be read ({exc.strerror or exc}); make it memory's file "
                "again, or move it aside (memory then starts empty)"
            ) from None
        if raw == self._checked:  # bytes this store wrote or checked: not checked again
            with quiet_gc():
                return loads_document(raw)
        try:
            with quiet_gc():
                data = loads_document(raw)
            problem = check_schema(data)
        except UnicodeDecodeError as exc:
            problem = f"it is not valid UTF-8 ({exc.reason} at byte {exc.start})"
        except json.JSONDecodeError as exc:
            problem = f"it is not valid JSON ({exc})"
        except ValueError as exc:
            problem = str(exc)
        if problem is None:
            self._checked = raw
            return data
        raise MemoryFileError(self._corrupt_message(raw, problem))

    def _corrupt_message(self, raw: bytes, problem: str) -> str:
        """Keep a copy of the bad bytes aside (once per content) and phrase the fix."""
        kept = (
            f"a copy is kept as {self._keep_aside(raw).name}"
            if self.keep_aside
            else ("nothing was written")
        )
        return (
            f"{self.path} cannot be read: {problem}; {kept}. "
            "Restore the last good version with `%memory rollback <last version>` or "
            "`deerflow-nb fold --rebuild` (Memory.history.recover()), or delete the file to "
            "start empty."
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

    @property
    def target(self) -> Path:
        """The file writes replace: memory.json, or the file it links to (a symlinked
        memory.json is written through, the link kept)."""
        return self.path.resolve() if self.path.is_symlink() else self.path

    def prepare(self, data: dict[str, Any]) -> Prepared:
        """Write ``data`` to a new temp file beside the target (written and fsynced), for
        ``install`` to rename into place; call under ``locked()``. Returns the temp file and
        the document it holds: ``data`` itself, or a copy with lone surrogates as U+FFFD.

        This is where a full disk or a read-only folder shows: the one-line ``HomeError``,
        before anything is journaled. A NaN or infinity is a ValueError."""
        try:
            data, payload = encoded_document(data)
        except ValueError as exc:
            raise ValueError(
                f"memory cannot be saved: {exc} (NaN and infinity are not JSON); "
                "nothing was changed"
            ) from None
        target = self.target
        tmp: str | None = None
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent)
            with os.fdopen(fd, "wb") as fh:
                fh.write(payload)
                fh.flush()
                os.fsync(fh.fileno())
            _fsync_dir(target.parent)  # the temp's name is durable: the change's evidence
        except BaseException as exc:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            if isinstance(exc, OSError):
                raise _io_error(target, exc) from None
            raise
        self._prepared = (Path(tmp), payload)
        return Prepared(Path(tmp), data)

    def install(self, tmp: Path) -> None:
        """Rename a prepared temp file over the target. Not fsynced again: ``prepare`` made
        the temp's name durable, so a rename a power cut loses leaves the temp behind, which
        the ledger's roll-forward installs again (``Ledger.settle``)."""
        target = self.target
        prepared, self._prepared = self._prepared, None
        try:
            os.replace(tmp, target)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise _io_error(target, exc) from None
        if prepared is not None and prepared[0] == Path(tmp):
            self._checked = prepared[1]

    def adopt(self, data: dict[str, Any]) -> None:
        """After ``install``: ``data`` (the document just written, which no one changes
        afterwards) is the shared one for the file's new revision, so the next read of it
        (the next fold's prompt, the next turn's ranking) parses nothing."""
        try:
            st = self.path.stat()
        except OSError:
            return
        self._shared = (
            (str(self.path), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns),
            data,
        )

    def discard(self, tmp: Path) -> None:
        with contextlib.suppress(OSError):
            os.unlink(tmp)

    def write(self, data: dict[str, Any]) -> None:
        """Replace the file atomically; call under ``locked()``."""
        self.install(self.prepare(data).path)

    def remove_stale_temps(self) -> int:
        """Delete temp files a killed writer left (``memory.json.*.tmp``); call under
        ``locked()``, when no writer of any process can be mid-write. How many."""
        removed = 0
        for stale in self.stale_temps():
            with contextlib.suppress(OSError):
                stale.unlink()
                removed += 1
        return removed

    def stale_temps(self) -> list[Path]:
        """Temp files beside memory.json (or the file it links to) that no rename took:
        under ``locked()``, each was left by a writer killed before its rename."""
        folders = {self.path.parent, self.target.parent}
        return sorted(p for folder in folders for p in folder.glob(self.target.name + ".*.tmp"))

    def holds(self, path: Path, data: dict[str, Any]) -> bool:
        """Whether the file at ``path`` reads as ``data`` (False when it cannot be read)."""
        try:
            return loads_document(path.read_bytes()) == data
        except (OSError, ValueError):
            return False

    def current(self, *, private: bool) -> dict[str, Any]:
        """The document now (call under ``locked()``): the shared one when the file has not
        changed since it was parsed (no read), unless ``private`` asks for a copy to edit
        in place."""
        return self.read() if private else self.read_shared()[1]


def _io_error(path: Path, exc: OSError) -> Exception:
    """A write's OSError as the one-line ``HomeError`` (full disk, read-only folder)."""
    error = storage_error(path, exc)
    if error is exc:
        from ..config import HomeError

        return HomeError(f"cannot write {path}: {exc.strerror or exc}; nothing was changed")
    return error


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
