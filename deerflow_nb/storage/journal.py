"""The SQLite journal: the write-ahead log of every thread, message, turn and memory change.

Written through sqlite-utils, in WAL mode, with a schema made by append-only named
migrations (recorded in ``_migrations``) in the manner of simonw/llm: a migration is
never edited once shipped; a change of schema is a new migration at the end.

Each thread of the process gets its own connection, because the memory queue writes
from a daemon thread while the kernel's main thread journals turns.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlite_utils

from ..config import HomeError
from ..scrub import encodable, encodable_deep, redact

Migration = Callable[[sqlite_utils.Database], None]
MIGRATIONS: list[tuple[str, Migration]] = []


def migration(fn: Migration) -> Migration:
    """Register ``fn`` as the next migration, named after the function."""
    MIGRATIONS.append((fn.__name__, fn))
    return fn


@migration
def m001_threads_messages_turns(db: sqlite_utils.Database) -> None:
    db["threads"].create(
        {
            "id": str,
            "kind": str,  # lead | subagent
            "parent_id": str,
            "title": str,
            "model": str,
            "created_at": str,
            "updated_at": str,
        },
        pk="id",
    )
    db["turns"].create(
        {
            "id": str,
            "thread_id": str,
            "started_at": str,
            "ended_at": str,
            "status": str,  # running | ok | error | interrupted
            "model": str,
            "input_tokens": int,
            "output_tokens": int,
            "facts_injected": int,
            "error": str,
        },
        pk="id",
        foreign_keys=[("thread_id", "threads", "id")],
    )
    db["messages"].create(
        {
            "id": int,
            "thread_id": str,
            "turn_id": str,
            "seq": int,
            "role": str,
            "content": str,
            "tool_calls": str,  # JSON list in OpenAI's shape, or null
            "tool_call_id": str,
            "name": str,
            "tokens": int,
            "created_at": str,
        },
        pk="id",
        foreign_keys=[("thread_id", "threads", "id")],
    )
    db["messages"].create_index(["thread_id", "seq"], unique=True)
    db["turns"].create_index(["thread_id"])
    db["threads"].create_index(["parent_id"])


@migration
def m002_summaries(db: sqlite_utils.Database) -> None:
    db["summaries"].create(
        {
            "id": int,
            "thread_id": str,
            "covers_until_seq": int,  # messages with seq <= this are replaced by the summary
            "content": str,
            "tokens": int,
            "model": str,
            "created_at": str,
        },
        pk="id",
        foreign_keys=[("thread_id", "threads", "id")],
    )
    db["summaries"].create_index(["thread_id"])


@migration
def m003_memory_queue(db: sqlite_utils.Database) -> None:
    db["memory_queue"].create(
        {
            "thread_id": str,
            "snapshot": str,  # JSON list of the filtered messages to fold
            "enqueued_at": str,
            "due_at": float,  # epoch seconds: enqueue time + debounce
            "attempts": int,
            "last_error": str,
            "status": str,  # pending | failed
        },
        pk="thread_id",
    )


@migration
def m004_memory_events_versions(db: sqlite_utils.Database) -> None:
    db["memory_versions"].create(
        {
            "id": int,
            "created_at": str,
            "reason": str,  # fold | add | edit | forget | rollback | import | reset | approve
            "source": str,
            "snapshot": str,  # the whole memory.json after the change
            "fact_count": int,
        },
        pk="id",
    )
    db["memory_events"].create(
        {
            "id": int,
            "ts": str,
            "kind": str,  # add | reinforce | update | remove | evict | section | rollback | ...
            "fact_id": str,
            "section": str,
            "old_content": str,
            "new_content": str,
            "old_confidence": float,
            "new_confidence": float,
            "source": str,
            "version_id": int,
            "details": str,
        },
        pk="id",
    )
    db["memory_events"].create_index(["fact_id"])
    db["memory_events"].create_index(["version_id"])


@migration
def m005_pending_changes(db: sqlite_utils.Database) -> None:
    db["pending_changes"].create(
        {
            "id": int,
            "created_at": str,
            "source": str,
            "diff": str,  # the extraction diff waiting for review
            "status": str,  # pending | approved | rejected
            "decided_at": str,
        },
        pk="id",
    )


@migration
def m006_embeddings(db: sqlite_utils.Database) -> None:
    db["embeddings"].create(
        {"content_hash": str, "model": str, "dim": int, "vector": bytes, "created_at": str},
        pk=("content_hash", "model"),
    )


@migration
def m007_memory_queue_claims_and_settings(db: sqlite_utils.Database) -> None:
    """Queue claims (so two kernels never fold one row at once), per-thread fold progress
    (so a turn journaled just before a crash is still folded), and memory settings."""
    db["memory_queue"].add_column("last_seq", int)
    db["memory_queue"].add_column("claimed_by", str)
    db["memory_queue"].add_column("claimed_until", float)
    db["memory_threads"].create(
        {"thread_id": str, "folded_seq": int, "folded_at": str}, pk="thread_id"
    )
    db["memory_settings"].create({"key": str, "value": str}, pk="key")


@migration
def m008_private_turns(db: sqlite_utils.Database) -> None:
    """Turns run without memory (``--no-memory``): a fold never reads their messages, even
    when they land between two remembered turns of one thread."""
    db["turns"].add_column("private", int)


@migration
def m009_unwritten_versions(db: sqlite_utils.Database) -> None:
    """A version is journaled before memory.json is renamed into place and marked written
    after (``written = 0`` until then): a crash in between leaves a version to roll
    forward, never a memory.json change without its history."""
    db["memory_versions"].add_column("written", int)
    # Found through a partial index: scanning the rows would read every snapshot.
    db.execute(
        "CREATE INDEX memory_versions_unwritten ON memory_versions(written) WHERE written = 0"
    )


@migration
def m010_version_deltas_and_turn_owners(db: sqlite_utils.Database) -> None:
    """Versions as deltas between full snapshots (``memory/versions.py``: a row holds
    ``snapshot`` or ``delta`` with its ``base_id``), found fast through the full ones; and
    which process runs each turn (``owner``), so a turn a killed kernel left ``running`` is
    marked interrupted when the home is next loaded, and a live kernel's is not."""
    db["memory_versions"].add_column("base_id", int)
    db["memory_versions"].add_column("delta", str)
    db.execute(
        "CREATE INDEX memory_versions_full ON memory_versions(id) WHERE snapshot IS NOT NULL"
    )
    db["turns"].add_column("owner", str)


@migration
def m011_memory_folds(db: sqlite_utils.Database) -> None:
    """What each fold did (issue 17, extraction): one row per fold or failed fold, with
    its outcome and a JSON report (added, reinforced, removed, evicted, sections, left out
    with reasons, held for review); ``Memory.status`` and the History views read it."""
    db["memory_folds"].create(
        {
            "id": int,
            "ts": str,
            "source": str,  # the thread id (or the caller's source for Memory.apply)
            "outcome": str,  # applied | partly applied | held for review | nothing to keep | failed
            "version_id": int,
            "pending_id": int,
            "report": str,  # JSON, see memory/folds.py
            "error": str,
        },
        pk="id",
    )


# The conversation-recall index (``memory/recall.py``): one row per user message and final
# assistant reply of a lead thread, outside ``--no-memory`` turns. ``recall_docs`` places each
# in its thread (``pos`` counts only indexed messages, so neighbours skip tool traffic);
# ``recall_fts`` is FTS5 over the messages' own text (external content: no second copy);
# ``recall_state`` holds the highest message id scanned. The index is brought up to date
# from ``messages`` before every search, and made again when a part of it is missing.
RECALL_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS recall_docs (id INTEGER PRIMARY KEY, thread_id TEXT NOT NULL,"
    " pos INTEGER NOT NULL, created_at TEXT)",
    "CREATE INDEX IF NOT EXISTS recall_docs_thread_pos ON recall_docs(thread_id, pos)",
    "CREATE INDEX IF NOT EXISTS recall_docs_created ON recall_docs(created_at)",
    "CREATE VIRTUAL TABLE IF NOT EXISTS recall_fts USING fts5(content, content='messages',"
    " content_rowid='id', tokenize='porter unicode61 remove_diacritics 2')",
    "CREATE TABLE IF NOT EXISTS recall_state (key TEXT PRIMARY KEY, value INTEGER)",
)


@migration
def m012_recall_fts(db: sqlite_utils.Database) -> None:
    """Full-text index of lead threads' user messages and final replies (conversation
    recall); filled from ``messages`` by the first search, not here, so opening a large
    old journal stays fast."""
    for statement in RECALL_SCHEMA:
        db.execute(statement)


@migration
def m013_fact_usage(db: sqlite_utils.Database) -> None:
    """Per-fact use and confirmation records (issue 20, ``memory/usage.py``): when each fact
    was last injected, last used (injected into a turn about it, or found by a search) and
    last re-confirmed by the user, with counts; upserted, so memory.json is never rewritten
    for them. Staleness review and the eviction blend read them (``memory/aging.py``)."""
    db.execute(
        "CREATE TABLE IF NOT EXISTS fact_usage (fact_id TEXT PRIMARY KEY, last_injected TEXT,"
        " injected INTEGER NOT NULL DEFAULT 0, last_used TEXT, used INTEGER NOT NULL DEFAULT 0,"
        " last_confirmed TEXT, confirmed INTEGER NOT NULL DEFAULT 0)"
    )


BUSY_SECONDS = 10.0  # a write lock held longer than this elsewhere is a one-line HomeError


def _use_wal(conn: sqlite3.Connection) -> None:
    """Switch the file to WAL once; it stays WAL for every later connection.

    Switching needs an exclusive lock and SQLite answers "database is locked" at once,
    without its busy timeout, when two processes open a new journal together; so retry.
    """
    deadline = time.monotonic() + BUSY_SECONDS
    while True:
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


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


def owner_is_live(owner: str | None) -> bool:
    """True while the ``host:pid`` that owns a turn or a queue claim may still run (another
    host's, or a live local process)."""
    import os
    import socket

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


def _me() -> str:
    import os
    import socket

    return f"{socket.gethostname()}:{os.getpid()}"


def now_iso() -> str:
    """UTC timestamp with milliseconds, sortable as text."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_id(prefix: str = "") -> str:
    return f"{prefix}{uuid.uuid4().hex[:12]}"


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


def _insert_message(
    db: sqlite_utils.Database, thread_id: str, message: dict[str, Any], turn_id: str | None
) -> int:
    """Inside a transaction: append one message as the thread's next ``seq``.

    Text UTF-8 cannot hold (a lone surrogate in a model reply) is stored as U+FFFD: a turn
    is never lost to its content."""
    from ..tokens import count_tokens

    message = encodable_deep(message)
    content = message.get("content")
    tool_calls = message.get("tool_calls")
    seq = db.execute(
        "SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE thread_id = ?", [thread_id]
    ).fetchone()[0]
    db["messages"].insert(
        {
            "thread_id": thread_id,
            "turn_id": turn_id,
            "seq": seq,
            "role": message["role"],
            "content": content if isinstance(content, str) else None,
            "tool_calls": json.dumps(tool_calls) if tool_calls else None,
            "tool_call_id": message.get("tool_call_id"),
            "name": message.get("name"),
            "tokens": count_tokens(content) if isinstance(content, str) else 0,
            "created_at": now_iso(),
        }
    )
    db["threads"].update(thread_id, {"updated_at": now_iso()})
    return seq


class Journal:
    """All reads and writes of ``journal.db``."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        try:
            with reading(self.path):
                self._migrate()
        except sqlite3.OperationalError as exc:
            self.close()
            raise self._error(exc) from None
        except Exception:
            self.close()
            raise

    # -- connections -------------------------------------------------------------
    @property
    def db(self) -> sqlite_utils.Database:
        """This thread's connection (WAL, ``BUSY_SECONDS`` busy timeout)."""
        db = getattr(self._local, "db", None)
        if db is None:
            try:
                conn = sqlite3.connect(self.path, timeout=BUSY_SECONDS, check_same_thread=False)
            except sqlite3.OperationalError as exc:
                raise self._error(exc) from None
            try:
                _use_wal(conn)
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.execute("PRAGMA foreign_keys=ON")
            except sqlite3.OperationalError as exc:
                conn.close()
                raise self._error(exc) from None
            db = sqlite_utils.Database(conn)
            self._local.db = db
        return db

    @contextmanager
    def transaction(self) -> Iterator[sqlite_utils.Database]:
        """One atomic write; BEGIN IMMEDIATE so concurrent writers queue instead of failing.

        A lock held elsewhere past the busy timeout, a read-only folder or a full disk is
        the one-line ``HomeError`` (the transaction rolled back: nothing was changed)."""
        db = self.db
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise self._error(exc) from None
        try:
            yield db
        except BaseException as exc:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            if isinstance(exc, sqlite3.OperationalError):
                raise self._error(exc) from None
            raise
        try:
            db.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise self._error(exc) from None

    def _error(self, exc: sqlite3.OperationalError) -> Exception:
        error = storage_error(self.path, exc, waited=BUSY_SECONDS)
        return exc if error is exc else error

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            db.conn.close()
            self._local.db = None

    def _migrate(self) -> None:
        with self.transaction() as db:
            db["_migrations"].create(
                {"name": str, "applied_at": str}, pk="name", if_not_exists=True
            )
            done = {row["name"] for row in db["_migrations"].rows}
            for name, fn in MIGRATIONS:
                if name not in done:
                    fn(db)
                    db["_migrations"].insert({"name": name, "applied_at": now_iso()})

    def applied_migrations(self) -> list[str]:
        return [r["name"] for r in self.db["_migrations"].rows_where(order_by="name")]

    # -- threads and messages ----------------------------------------------------
    def ensure_thread(
        self,
        thread_id: str,
        *,
        kind: str = "lead",
        parent_id: str | None = None,
        title: str | None = None,
        model: str | None = None,
    ) -> None:
        stamp = now_iso()
        title = None if title is None else encodable(title)
        with self.transaction() as db:
            if db["threads"].count_where("id = ?", [thread_id]):
                db["threads"].update(thread_id, {"updated_at": stamp})
            else:
                db["threads"].insert(
                    {
                        "id": thread_id,
                        "kind": kind,
                        "parent_id": parent_id,
                        "title": title,
                        "model": model,
                        "created_at": stamp,
                        "updated_at": stamp,
                    }
                )

    def thread(self, thread_id: str) -> dict[str, Any] | None:
        rows = list(self.db["threads"].rows_where("id = ?", [thread_id]))
        return rows[0] if rows else None

    def threads(self) -> list[dict[str, Any]]:
        return list(self.db["threads"].rows_where(order_by="created_at"))

    def add_message(
        self, thread_id: str, message: dict[str, Any], *, turn_id: str | None = None
    ) -> int:
        """Append one OpenAI-shaped message to a thread; returns its ``seq``."""
        with self.transaction() as db:
            return _insert_message(db, thread_id, message, turn_id)

    def last_seq(self, thread_id: str) -> int:
        """The ``seq`` of the thread's newest message (0 when it has none)."""
        sql = "SELECT COALESCE(MAX(seq), 0) FROM messages WHERE thread_id = ?"
        return int(self.db.execute(sql, [thread_id]).fetchone()[0])

    def message_rows(self, thread_id: str, after_seq: int = 0) -> list[dict[str, Any]]:
        return list(
            self.db["messages"].rows_where(
                "thread_id = ? AND seq > ?", [thread_id, after_seq], order_by="seq"
            )
        )

    def private_turn_ids(self, thread_id: str) -> set[str]:
        """The thread's turns run without memory."""
        sql = "SELECT id FROM turns WHERE thread_id = ? AND private = 1"
        return {row[0] for row in self.db.execute(sql, [thread_id])}

    def messages(self, thread_id: str, after_seq: int = 0) -> list[dict[str, Any]]:
        """The thread's messages in OpenAI's shape, oldest first."""
        return [row_to_message(r) for r in self.message_rows(thread_id, after_seq)]

    # -- turns -------------------------------------------------------------------
    def start_turn(self, thread_id: str, model: str, *, private: bool = False) -> str:
        """A new running turn; a ``private`` one is never read by memory."""
        turn_id = new_id("turn-")
        with self.transaction() as db:
            db["turns"].insert(
                {
                    "id": turn_id,
                    "thread_id": thread_id,
                    "started_at": now_iso(),
                    "status": "running",
                    "model": model,
                    "input_tokens": 0,
                    "output_tokens": 0,
                    "facts_injected": 0,
                    "private": int(private),
                    "owner": _me(),
                }
            )
        return turn_id

    def interrupt_orphan_turns(self) -> int:
        """Mark ``interrupted`` the turns left ``running`` by a process that is gone (a
        kernel killed mid-turn); a live kernel's running turn is left alone. How many."""
        rows = self.db.execute("SELECT id, owner FROM turns WHERE status = 'running'").fetchall()
        orphans = [turn_id for turn_id, owner in rows if not owner_is_live(owner)]
        if not orphans:
            return 0
        with self.transaction() as db:
            for turn_id in orphans:
                db.execute(
                    "UPDATE turns SET status = 'interrupted', ended_at = ?, error = ? "
                    "WHERE id = ? AND status = 'running'",
                    [now_iso(), "the kernel stopped before the turn finished", turn_id],
                )
        return len(orphans)

    def end_turn(
        self,
        turn_id: str,
        *,
        status: str,
        input_tokens: int = 0,
        output_tokens: int = 0,
        facts_injected: int = 0,
        error: str | None = None,
        messages: Sequence[dict[str, Any]] = (),
    ) -> None:
        """Close the turn, appending ``messages`` (the turn's rest) in the same transaction:
        a turn interrupted here leaves none of them, never a tool call without its result,
        which the API would refuse in every later turn of the thread."""
        with self.transaction() as db:
            if messages:
                (thread_id,) = db.execute(
                    "SELECT thread_id FROM turns WHERE id = ?", [turn_id]
                ).fetchone()
                for message in messages:
                    _insert_message(db, thread_id, message, turn_id)
            db["turns"].update(
                turn_id,
                {
                    "ended_at": now_iso(),
                    "status": status,
                    "input_tokens": input_tokens,
                    "output_tokens": output_tokens,
                    "facts_injected": facts_injected,
                    "error": None if error is None else redact(encodable(error)),
                },
            )

    def turns(self, thread_id: str | None = None) -> list[dict[str, Any]]:
        if thread_id is None:
            return list(self.db["turns"].rows_where(order_by="started_at"))
        return list(
            self.db["turns"].rows_where("thread_id = ?", [thread_id], order_by="started_at")
        )

    # -- summaries ---------------------------------------------------------------
    def add_summary(
        self, thread_id: str, covers_until_seq: int, content: str, *, model: str
    ) -> None:
        from ..tokens import count_tokens

        with self.transaction() as db:
            db["summaries"].insert(
                {
                    "thread_id": thread_id,
                    "covers_until_seq": covers_until_seq,
                    "content": encodable(content),
                    "tokens": count_tokens(content),
                    "model": model,
                    "created_at": now_iso(),
                }
            )

    def latest_summary(self, thread_id: str) -> dict[str, Any] | None:
        rows = list(
            self.db["summaries"].rows_where(
                "thread_id = ?", [thread_id], order_by="covers_until_seq desc", limit=1
            )
        )
        return rows[0] if rows else None


def row_to_message(row: dict[str, Any]) -> dict[str, Any]:
    """A ``messages`` row back into an OpenAI-shaped message dict."""
    message: dict[str, Any] = {"role": row["role"], "content": row["content"]}
    if row.get("tool_calls"):
        message["tool_calls"] = json.loads(row["tool_calls"])
    if row.get("tool_call_id"):
        message["tool_call_id"] = row["tool_call_id"]
    if row.get("name"):
        message["name"] = row["name"]
    return message
