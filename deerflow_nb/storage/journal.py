"""The journal's conversation tables: threads, messages, turns and summaries (``Journal``).

``Journal`` is the write-ahead log of every turn: a turn is durable the moment it is
journaled. It owns journal.db's connections (one per thread, ``db.connect``) and applies
the migrations when it opens the file; the other tables are read and written by their own
modules in storage/, through ``Journal.db`` and ``Journal.transaction``.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import sqlite_utils

from ..scrub import encodable, encodable_deep, redact
from .db import (
    Connection,
    connect,
    dict_rows,
    has_table,
    memory_copy,
    new_id,
    now_iso,
    owner_is_live,
    reading,
    this_owner,
    transaction,
    write_error,
)
from .migrations import applied, migrate
from .threads import renamed, thread_for


def _upsert_thread(
    db: sqlite_utils.Database,
    thread_id: str,
    kind: str,
    parent_id: str | None,
    title: str | None,
    model: str | None,
    project: str | None = None,
) -> None:
    """The thread's row, made or touched (plain SQL: this runs on every turn). Its project
    label is the first one recorded and never changes by use (a thread from before
    projects gets one once); ``Journal.thread_for`` keeps other projects' turns out of it,
    and only a rename (``threads.rename_project``) relabels."""
    stamp = now_iso()
    title = None if title is None else encodable(title)
    db.execute(
        "INSERT INTO threads (id, kind, parent_id, title, model, created_at, updated_at, "
        "project) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT(id) DO UPDATE SET updated_at = excluded.updated_at, "
        "project = COALESCE(threads.project, excluded.project)",
        [thread_id, kind, parent_id, title, model, stamp, stamp, project],
    )


def _insert_turn(db: sqlite_utils.Database, thread_id: str, model: str, private: bool) -> str:
    """A new running turn's row; its id."""
    turn_id = new_id("turn-")
    db.execute(
        "INSERT INTO turns (id, thread_id, started_at, status, model, input_tokens, "
        "output_tokens, facts_injected, private, owner) "
        "VALUES (?, ?, ?, 'running', ?, 0, 0, 0, ?, ?)",
        [turn_id, thread_id, now_iso(), model, int(private), this_owner()],
    )
    return turn_id


def _drop_partial(db: sqlite_utils.Database, thread_id: str, turn_id: str, seq: int | None) -> None:
    """Inside a transaction: remove the streamed reply ``keep_partial`` kept as ``seq``."""
    if seq is not None:
        db.execute(
            "DELETE FROM messages WHERE thread_id = ? AND seq = ? AND turn_id = ?",
            [thread_id, seq, turn_id],
        )


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
    stamp = now_iso()
    db.execute(
        "INSERT INTO messages (thread_id, turn_id, seq, role, content, tool_calls, "
        "tool_call_id, name, tokens, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            thread_id,
            turn_id,
            seq,
            message["role"],
            content if isinstance(content, str) else None,
            json.dumps(tool_calls) if tool_calls else None,
            message.get("tool_call_id"),
            message.get("name"),
            count_tokens(content) if isinstance(content, str) else 0,
            stamp,
        ],
    )
    db.execute("UPDATE threads SET updated_at = ? WHERE id = ?", [stamp, thread_id])
    return seq


class Journal:
    """``journal.db``: its connections, and the rows of threads, messages, turns and
    summaries."""

    def __init__(self, path: str | Path) -> None:
        """Open ``path`` as its writer: created if missing, and migrated (``migrate``)."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        try:
            self.migrate()
        except Exception:
            self.close()
            raise

    def migrate(self) -> list[str]:
        """Bring journal.db to this version's schema: the append-only migrations it has not
        had, in one transaction; their names. Only a writer migrates: readers
        (``open_read_only``) read an older schema as far as its tables go."""
        try:
            with reading(self.path), self.transaction() as db:
                return migrate(db)
        except sqlite3.OperationalError as exc:
            raise write_error(self.path, exc) from None

    # -- connections -------------------------------------------------------------
    @property
    def db(self) -> sqlite_utils.Database:
        """This thread's connection (WAL, ``db.BUSY_SECONDS`` busy timeout)."""
        db = getattr(self._local, "db", None)
        if db is None:
            db = self._local.db = connect(self.path)
        return db

    def transaction(self) -> AbstractContextManager[sqlite_utils.Database]:
        """One atomic write (``db.transaction``): concurrent writers queue, and a lock held
        elsewhere, a read-only folder or a full disk is the one-line ``HomeError``."""
        return transaction(self.db, self.path)

    def close(self) -> None:
        """Close the calling thread's connection (a sub-agent's worker thread's, say)."""
        db = getattr(self._local, "db", None)
        if db is not None:
            db.conn.close()
            self._local.db = None

    def applied_migrations(self) -> list[str]:
        return applied(self.db)

    # -- threads and messages ----------------------------------------------------
    def ensure_thread(
        self,
        thread_id: str,
        *,
        kind: str = "lead",
        parent_id: str | None = None,
        title: str | None = None,
        model: str | None = None,
        project: str | None = None,
    ) -> None:
        with self.transaction() as db:
            _upsert_thread(db, thread_id, kind, parent_id, title, model, project)

    def begin_turn(
        self,
        thread_id: str,
        user_message: dict[str, Any],
        *,
        model: str,
        kind: str = "lead",
        parent_id: str | None = None,
        title: str | None = None,
        private: bool = False,
        project: str | None = None,
    ) -> str:
        """``ensure_thread``, ``start_turn`` and ``add_message`` of the user's message, in
        one transaction: a turn starts journaled whole or not at all, for one commit.
        ``project``: the notebook's project, recorded on the thread."""
        with self.transaction() as db:
            _upsert_thread(db, thread_id, kind, parent_id, title, model, project)
            turn_id = _insert_turn(db, thread_id, model, private)
            _insert_message(db, thread_id, user_message, turn_id)
        return turn_id

    def thread(self, thread_id: str) -> dict[str, Any] | None:
        return thread_row(self.db, thread_id)

    def thread_for(self, name: str, project: str | None, *, record: bool = False) -> str:
        """The journal id of thread ``name`` in ``project``, so the same name in two
        projects is two threads (``threads.thread_for``); ``record``: its row made in the
        same transaction, so another project asking next is given another id."""
        if not record:
            return thread_for(self.db, name, project)
        with self.transaction() as db:
            thread_id = thread_for(db, name, project)
            _upsert_thread(db, thread_id, "lead", None, None, None, project)
        return thread_id

    def add_messages(
        self, thread_id: str, messages: Sequence[dict[str, Any]], *, project: str | None = None
    ) -> int:
        """``ensure_thread`` (a lead thread of ``project``) and ``add_message`` of each of
        ``messages``, in one transaction; the last ``seq``."""
        with self.transaction() as db:
            _upsert_thread(db, thread_id, "lead", None, None, None, project)
            seqs = [_insert_message(db, thread_id, m, None) for m in messages]
        return seqs[-1] if seqs else self.last_seq(thread_id)

    def threads(self) -> list[dict[str, Any]]:
        return thread_rows(self.db)

    def thread_project(self, thread_id: str) -> str | None:
        """The project recorded on a thread (None: unknown thread, or one from before)."""
        rows = dict_rows(self.db, "SELECT project FROM threads WHERE id = ?", [thread_id])
        return rows[0]["project"] if rows else None

    def project_threads(self) -> list[dict[str, Any]]:
        """Lead threads per project: ``{project, threads, last_used}`` (None: before projects)."""
        return dict_rows(
            self.db,
            "SELECT project, COUNT(*) AS threads, MAX(updated_at) AS last_used FROM threads "
            "WHERE kind = 'lead' GROUP BY project",
        )

    def renamed(self, name: str) -> str:
        """What project ``name`` became through ``%memory project --rename`` (or itself)."""
        return renamed(self.db, name)

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
        return message_rows(self.db, thread_id, after_seq)

    def private_turn_ids(self, thread_id: str) -> set[str]:
        """The thread's turns run without memory."""
        return private_turn_ids(self.db, thread_id)

    def messages(self, thread_id: str, after_seq: int = 0) -> list[dict[str, Any]]:
        """The thread's messages in OpenAI's shape, oldest first."""
        return [row_to_message(r) for r in self.message_rows(thread_id, after_seq)]

    def turn_places(self, turn_id: str) -> set[tuple[str, int]]:
        """(thread, seq) of every message the turn has journaled so far."""
        sql = "SELECT thread_id, seq FROM messages WHERE turn_id = ?"
        return {(row[0], int(row[1])) for row in self.db.execute(sql, [turn_id])}

    # -- turns -------------------------------------------------------------------
    def start_turn(self, thread_id: str, model: str, *, private: bool = False) -> str:
        """A new running turn; a ``private`` one is never read by memory."""
        with self.transaction() as db:
            return _insert_turn(db, thread_id, model, private)

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

    def keep_partial(self, turn_id: str, seq: int | None, text: str) -> int:
        """Keep a reply still streaming as the turn's assistant message: the row ``seq``
        (from an earlier call) is replaced, else one is added; its ``seq``. A kernel killed
        mid-stream so leaves the words it showed; ``end_turn(replaces=seq)`` drops it for
        the turn's real messages. The row is written anew each time, so the recall index
        (which indexes by row id) never keeps an older cut of it."""
        with self.transaction() as db:
            (thread_id,) = db.execute(
                "SELECT thread_id FROM turns WHERE id = ?", [turn_id]
            ).fetchone()
            _drop_partial(db, thread_id, turn_id, seq)
            return _insert_message(db, thread_id, {"role": "assistant", "content": text}, turn_id)

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
        replaces: int | None = None,
    ) -> None:
        """Close the turn, appending ``messages`` (the turn's rest) in the same transaction:
        a turn interrupted here leaves none of them, never a tool call without its result,
        which the API would refuse in every later turn of the thread. ``replaces``: the
        ``seq`` of the streamed reply ``keep_partial`` kept, removed first."""
        with self.transaction() as db:
            if messages or replaces is not None:
                (thread_id,) = db.execute(
                    "SELECT thread_id FROM turns WHERE id = ?", [turn_id]
                ).fetchone()
                _drop_partial(db, thread_id, turn_id, replaces)
                for message in messages:
                    _insert_message(db, thread_id, message, turn_id)
            db.execute(
                "UPDATE turns SET ended_at = ?, status = ?, input_tokens = ?, "
                "output_tokens = ?, facts_injected = ?, error = ? WHERE id = ?",
                [
                    now_iso(),
                    status,
                    input_tokens,
                    output_tokens,
                    facts_injected,
                    None if error is None else redact(encodable(error)),
                    turn_id,
                ],
            )

    def turns(self, thread_id: str | None = None) -> list[dict[str, Any]]:
        if thread_id is None:
            return turn_rows(self.db)
        return list(
            self.db["turns"].rows_where("thread_id = ?", [thread_id], order_by="started_at")
        )

    # -- summaries ---------------------------------------------------------------
    def add_summary(
        self, thread_id: str, covers_until_seq: int, content: str, *, model: str
    ) -> None:
        """Keep a summary of the thread's messages through ``covers_until_seq`` (what a turn
        then sends instead of them), in one transaction."""
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
        """The thread's latest summary row, or None (plain SQL: every turn asks, and
        sqlite-utils' ``rows_where`` looks the table up first)."""
        rows = dict_rows(
            self.db,
            "SELECT * FROM summaries WHERE thread_id = ? ORDER BY covers_until_seq DESC LIMIT 1",
            [thread_id],
        )
        return rows[0] if rows else None


# -- bulk rows (benchmarks, and journals dated as they were kept) ----------------------
def date_messages(db: sqlite_utils.Database, dates: Sequence[tuple[str, str, int]]) -> None:
    """Inside a transaction: set each ``(created_at, thread, seq)`` message's time, as a
    journal kept on those days would have it."""
    db.conn.executemany("UPDATE messages SET created_at = ? WHERE thread_id = ? AND seq = ?", dates)


def insert_bulk(
    db: sqlite_utils.Database, threads: Iterable[dict[str, Any]], messages: Iterable[dict[str, Any]]
) -> None:
    """Inside a transaction: many thread and message rows at once, as months of turns
    would leave them (no per-message bookkeeping: ``seq`` and ``tokens`` come given)."""
    db["threads"].insert_all(threads)
    db["messages"].insert_all(messages, batch_size=2000)


# -- reads on any connection (the inspector's read-only one too) ---------------------
def thread_rows(db: Connection) -> list[dict[str, Any]]:
    """Every thread, oldest first (creation order for ties)."""
    if not has_table(db, "threads"):
        return []
    return dict_rows(db, "SELECT * FROM threads ORDER BY created_at, rowid")


def thread_row(db: Connection, thread_id: str) -> dict[str, Any] | None:
    """One thread's row, or None."""
    rows = dict_rows(db, "SELECT * FROM threads WHERE id = ?", [thread_id])
    return rows[0] if rows else None


def private_turn_ids(db: Connection, thread_id: str) -> set[str]:
    """The thread's turns run without memory (``%%agent --no-memory``)."""
    sql = "SELECT id FROM turns WHERE thread_id = ? AND private = 1"
    return {row[0] for row in db.execute(sql, [thread_id])}


def turn_rows(db: Connection) -> list[dict[str, Any]]:
    """Every turn, oldest first."""
    if not has_table(db, "turns"):
        return []
    return dict_rows(db, "SELECT * FROM turns ORDER BY started_at")


def summary_rows(db: Connection) -> list[dict[str, Any]]:
    """Every summary, in the order they were written."""
    if not has_table(db, "summaries"):
        return []
    return dict_rows(db, "SELECT * FROM summaries ORDER BY id")


def message_totals(db: Connection) -> dict[str, tuple[int, int]]:
    """``thread -> (messages, tokens)``."""
    if not has_table(db, "messages"):
        return {}
    sql = "SELECT thread_id, COUNT(*), SUM(tokens) FROM messages GROUP BY thread_id"
    return {row[0]: (int(row[1]), int(row[2] or 0)) for row in db.execute(sql).fetchall()}


def message_rows(db: Connection, thread_id: str, after_seq: int = 0) -> list[dict[str, Any]]:
    """A thread's stored messages after ``after_seq``, oldest first (on the turn's path:
    no table check, ``messages`` exists from the first migration)."""
    sql = "SELECT * FROM messages WHERE thread_id = ? AND seq > ? ORDER BY seq"
    return dict_rows(db, sql, [thread_id, after_seq])


def turn_texts(db: Connection, thread_id: str) -> list[dict[str, Any]]:
    """``{turn_id, role, content}`` of the thread's user and assistant messages with text,
    oldest first: what a turn was asked and answered."""
    if not has_table(db, "messages"):
        return []
    sql = (
        "SELECT turn_id, role, content FROM messages WHERE thread_id = ? AND turn_id IS NOT "
        "NULL AND role IN ('user', 'assistant') AND content IS NOT NULL AND content != '' "
        "ORDER BY seq"
    )
    return dict_rows(db, sql, [thread_id])


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


class JournalCopy(Journal):
    """A journal.db for a reader whose search keeps an index (recall catches its ``recall_*``
    tables up before searching): with ``copy``, an in-memory copy made with SQLite's backup
    from the read-only connection ``source``, which the search may write and the file never
    sees; without, ``source`` itself (an index already caught up needs no write). ``path``
    stays the file's, so caches keyed by it are shared."""

    def __init__(self, source: sqlite_utils.Database, path: Path, *, copy: bool = True) -> None:
        self.path = Path(path)
        self._copied = copy
        if copy:
            source = sqlite_utils.Database(memory_copy(source.conn))
        self._source = source

    @property
    def db(self) -> sqlite_utils.Database:
        return self._source

    def close(self) -> None:
        if self._copied:
            self._source.conn.close()
