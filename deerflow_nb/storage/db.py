"""Opening journal.db: the connection (WAL, busy timeout), transactions, and storage errors.

Each thread of the process gets its own connection (``Journal.db``), because the memory
queue writes from a daemon thread while the kernel's main thread journals turns. A lock
held elsewhere, a read-only folder, a full disk or a damaged file becomes a one-line
``HomeError`` that names the fix.

sqlite-utils is imported only when a connection is opened: it imports pandas when that is
installed, and the modules that only need ``now_iso`` should not pay for it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..config import HomeError

if TYPE_CHECKING:
    import sqlite_utils

BUSY_SECONDS = 10.0  # a write lock held longer than this elsewhere is a one-line HomeError


class Connection(Protocol):
    """What the read functions of storage/ need: a ``sqlite3.Connection`` or a
    ``sqlite_utils.Database`` (the journal's, or the inspector's read-only one)."""

    def execute(self, sql: str, parameters: Sequence[Any] = ..., /) -> sqlite3.Cursor: ...


def now_iso() -> str:
    """UTC timestamp with milliseconds, sortable as text."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_id(prefix: str = "") -> str:
    """A short random id (``turn-3f9a…``)."""
    return f"{prefix}{uuid.uuid4().hex[:12]}"


def this_owner() -> str:
    """``host:pid`` of this process, as it marks the turns it runs."""
    return f"{socket.gethostname()}:{os.getpid()}"


def owner_is_live(owner: str | None) -> bool:
    """True while the ``host:pid`` that owns a turn or a queue claim may still run (another
    host's, or a live local process)."""
    if not owner:
        return False
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname():
        return True
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def storage_error(path: Path, exc: BaseException, *, waited: float | None = None) -> HomeError:
    """One line naming the fix for a journal or memory file that cannot be written (a lock
    held elsewhere, a read-only folder, a full disk); ``exc`` itself when it is none of
    those."""
    text = str(exc).lower()
    errno_ = getattr(exc, "errno", None)
    home = path.parent
    if "locked" in text or "busy" in text:
        held = f" for {waited:g}s" if waited else ""
        return HomeError(
            f"{path} is locked by another program{held}: close whatever holds it open for "
            "writing (a SQLite browser with unsaved changes, a stuck kernel) and run this "
            "again; nothing was changed"
        )
    if errno_ == 28 or "disk is full" in text or "no space" in text:
        return HomeError(
            f"no space left on the disk holding {home}: free some space and run this "
            "again; nothing was changed"
        )
    if errno_ == 5 or "i/o error" in text:
        if _nearly_full(home):  # SQLite says I/O error when the WAL's index cannot grow
            return storage_error(path, OSError(28, "No space left on device"))
        return HomeError(
            f"the disk reported an I/O error on {path}: check the disk, or point "
            "DEERFLOW_NB_HOME (or --home) at a folder on another one; nothing was changed"
        )
    if errno_ in (13, 30, 1) or "readonly" in text or "read-only" in text:
        return HomeError(
            f"{home} is read-only ({path.name} cannot be written): make it writable, or "
            "point DEERFLOW_NB_HOME (or --home) at a folder you can write to"
        )
    if "unable to open" in text:
        return HomeError(
            f"cannot open {path}: make sure {home} exists and is writable, or point "
            "DEERFLOW_NB_HOME (or --home) at another folder"
        )
    return exc  # type: ignore[return-value]


def _nearly_full(folder: Path) -> bool:
    """Whether the disk holding ``folder`` has less than a megabyte free."""
    import shutil

    try:
        return shutil.disk_usage(folder).free < 2**20
    except OSError:
        return False


def write_error(path: Path, exc: sqlite3.OperationalError) -> Exception:
    """A failed journal write as the one-line ``HomeError`` (or ``exc`` when it is not a
    lock, a read-only folder or a full disk)."""
    error = storage_error(path, exc, waited=BUSY_SECONDS)
    return exc if error is exc else error


@contextmanager
def reading(path: Path) -> Iterator[None]:
    """SQLite's "not a database" (damage, not a lock) as the one-line ``HomeError``."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        if isinstance(exc, sqlite3.OperationalError):  # locked, read-only, …: not damage
            raise
        raise HomeError(
            f"{path} is not a readable journal ({exc}); move it aside (e.g. to "
            f"{path.name}.broken) and a new one starts; memory.json is not affected"
        ) from None


def _use_wal(conn: sqlite3.Connection) -> None:
    """Switch the file to WAL once; it stays WAL for every later connection. Another
    program's database (tables, none of them ``_migrations``) is left in its own mode:
    ``migrations.migrate`` refuses it before anything else is written.

    Switching needs an exclusive lock and SQLite answers "database is locked" at once,
    without its busy timeout, when two processes open a new journal together; so retry.
    """
    deadline = time.monotonic() + BUSY_SECONDS
    while True:
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal" and _ours(conn):
                conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _ours(conn: sqlite3.Connection) -> bool:
    """Whether the file is a journal, or new: no tables, or ``_migrations`` among them."""
    tables = {
        row[0]
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    }
    return not tables or "_migrations" in tables


def connect(path: Path) -> sqlite_utils.Database:
    """A new read-write connection to ``path`` (WAL, ``BUSY_SECONDS`` busy timeout, foreign
    keys on)."""
    import sqlite_utils

    try:
        conn = sqlite3.connect(path, timeout=BUSY_SECONDS, check_same_thread=False)
    except sqlite3.OperationalError as exc:
        raise write_error(path, exc) from None
    try:
        _use_wal(conn)
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
    except sqlite3.OperationalError as exc:
        conn.close()
        raise write_error(path, exc) from None
    return sqlite_utils.Database(conn)


@contextmanager
def transaction(db: sqlite_utils.Database, path: Path) -> Iterator[sqlite_utils.Database]:
    """One atomic write on ``db``; BEGIN IMMEDIATE so concurrent writers queue instead of
    failing. A lock held elsewhere past the busy timeout, a read-only folder or a full disk
    is the one-line ``HomeError`` (the transaction rolled back: nothing was changed)."""
    try:
        db.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        raise write_error(path, exc) from None
    try:
        yield db
    except BaseException as exc:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")
        if isinstance(exc, sqlite3.OperationalError):
            raise write_error(path, exc) from None
        raise
    try:
        db.execute("COMMIT")
    except sqlite3.OperationalError as exc:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")
        raise write_error(path, exc) from None


class _ReadConnection(sqlite3.Connection):
    """A reader's connection: a read needing a table or column this journal does not have
    yet (it is from an older version) raises the one-line ``HomeError`` naming `deerflow-nb
    migrate` where the read is made, whatever the caller catches around it."""

    journal = Path()

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        try:
            return super().execute(sql, parameters)
        except sqlite3.OperationalError as exc:
            if not str(exc).startswith(("no such table", "no such column")):
                raise
            raise HomeError(
                f"{self.journal} is from an older deerflow_nb ({exc}): run `deerflow-nb "
                "migrate` (or open it with a writer, such as `%load_ext deerflow_nb`), then "
                "read again"
            ) from None


@contextmanager
def open_read_only(path: Path) -> Iterator[sqlite_utils.Database | None]:
    """journal.db opened read-only — never created, migrated or written, no file of the
    home touched — for readers such as the inspector; None when it does not exist yet,
    ``HomeError`` when damaged, or when a read needs a table or column only a newer
    version's writer adds (``_ReadConnection``).

    Which way depends on the ``-wal`` beside it:

    - none: no connection is open anywhere (the last one to close checkpoints and deletes
      it), so the file is read as ``immutable``: SQLite makes no ``-wal``/``-shm`` of its
      own, which ``mode=ro`` alone would, and it reads on a read-only disk too;
    - one a live writer holds (``writer_is_live``): ``mode=ro`` reads beside it through the
      writer's own ``-wal``/``-shm`` (SQLite's read marks live in that shared index);
    - one a writer killed mid-run left: its commits are in the ``-wal``, which ``immutable``
      would ignore and ``mode=ro`` would recover through the ``-shm``, writing it; so
      journal.db and its ``-wal`` are copied to a private temporary folder and read there.
    """
    import sqlite_utils

    if not path.exists():
        yield None
        return
    wal = path.with_name(path.name + "-wal")
    with contextlib.ExitStack() as stack:
        if not wal.exists():
            uri = f"{path.resolve().as_uri()}?mode=ro&immutable=1"
        elif writer_is_live(path):
            uri = f"{path.resolve().as_uri()}?mode=ro"
        else:
            uri = f"{stack.enter_context(_private_copy(path)).as_uri()}?mode=ro"
        conn = sqlite3.connect(
            uri, uri=True, timeout=BUSY_SECONDS, check_same_thread=False, factory=_ReadConnection
        )
        stack.callback(conn.close)
        conn.journal = path
        with reading(path):
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        yield sqlite_utils.Database(conn)


def memory_copy(conn: sqlite3.Connection) -> sqlite3.Connection:
    """An in-memory copy of ``conn``'s database (SQLite's backup), for a reader whose search
    must write (an index caught up) where the file never sees it; a reader's copy says an
    older journal's missing table or column in the same one line (``_ReadConnection``)."""
    reader = isinstance(conn, _ReadConnection)
    factory = _ReadConnection if reader else sqlite3.Connection
    copy = sqlite3.connect(":memory:", check_same_thread=False, factory=factory)
    if isinstance(copy, _ReadConnection) and reader:
        copy.journal = conn.journal
    conn.backup(copy)
    return copy


def writer_is_live(path: Path) -> bool:
    """Whether a connection anywhere on this machine has journal ``path`` open: each holds
    a lock on its ``-shm`` while open (read from ``/proc/locks``, without opening the file:
    closing a descriptor would drop this process's own SQLite locks on it), matched by
    inode alone (an overlay file system reports another device than the lock's). Where the
    kernel does not list locks, a writer is assumed live: read beside it, as before."""
    try:
        info = path.with_name(path.name + "-shm").stat()
        locks = Path("/proc/locks").read_text(encoding="ascii", errors="replace")
    except FileNotFoundError:
        return not Path("/proc/locks").exists()
    except OSError:
        return True
    return f":{info.st_ino} " in locks  # any device: a false match only reads as beside one


@contextmanager
def _private_copy(path: Path) -> Iterator[Path]:
    """journal.db and its ``-wal`` copied to a new temporary folder (removed afterwards);
    the copy's path."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="deerflow-read-"))
    try:
        copy = folder / path.name
        shutil.copyfile(path, copy)
        with contextlib.suppress(FileNotFoundError):  # a writer closed meanwhile
            shutil.copyfile(path.with_name(path.name + "-wal"), folder / (path.name + "-wal"))
        yield copy
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def has_table(db: Connection, name: str) -> bool:
    """Whether a table exists: a journal from an older version may lack a newer one."""
    sql = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
    return db.execute(sql, [name]).fetchone() is not None


def dict_rows(db: Connection, sql: str, parameters: Sequence[Any] = ()) -> list[dict[str, Any]]:
    """The rows of a query as dicts keyed by column name, on any connection."""
    cursor = db.execute(sql, parameters)
    names = [c[0] for c in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def insert_rows(db: Connection, table: str, rows: Sequence[dict[str, Any]]) -> int | None:
    """Insert ``rows`` (each with the same keys) into ``table`` as plain SQL, and return
    the last row's rowid: a fold writes a version and its events, and sqlite-utils'
    ``insert`` introspects the table on every call."""
    if not rows:
        return None
    columns = list(rows[0])
    sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
    cursor = None
    for row in rows:
        cursor = db.execute(sql, [row[c] for c in columns])
    return None if cursor is None else cursor.lastrowid
