"""The one read door: every read of a home's memory and journal, and ``open_reader``.

``MemoryReader`` reads memory.json and journal.db through the storage read functions on
whatever connection it is given: the writer's own (``Memory.reader``, so a kernel reads what
it just wrote) or a read-only one (``open_reader``). ``open_reader`` writes nothing at all —
no home folder, no migration, no temp file, no copy of a damaged memory.json, no
``-wal``/``-shm`` of its own (``storage.db.open_read_only``) — so the inspector, the CLI's
``status`` and ``export`` and the doctor can read a home beside a live kernel, or on a
read-only disk. A journal from an older version is read as far as its tables go; a read
that needs a newer one says in one line that a writer must open it first.

Facts are ranked as a turn ranks them (``readside/ranked_reads.py``): ``search`` finds what
``Memory.search`` finds without recording use, ``preview`` is the block a turn injects and
``explain`` says why each fact is in it. This module and all it imports of ``memory/``
import nothing of the write side (``readside/`` holds the helpers both sides share;
``tests/test_architecture.py`` checks).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..config import HomeError, Settings, load_settings
from ..storage import journal as journal_rows
from ..storage import ledger as ledger_rows
from ..storage import queue as queue_rows
from ..storage import servers as server_rows
from ..storage import threads as thread_rows
from ..storage.db import Connection, has_table, open_read_only
from ..storage.migrations import applied
from .fact_query import FactQuery, Sort
from .people import last_changed_by
from .readside import activity, fold_records, version_rebuild
from .readside.change_events import decode_event, version_diff, with_owner
from .readside.ranked_reads import RankedReads
from .readside.review_items import REVIEW_KEY, ReviewItem, items
from .scopes import ALL_PROJECTS, USER, Scope
from .store import MemoryFileError, MemoryStore

EVENT_PAGE = 500  # event rows read at a time while a scope's history is filtered
ANOTHER_PROJECTS = "(a thread of another project)"  # a walled source, as a scope is shown it


class MemoryReader(RankedReads):
    """Reads of one home; never a write. Without a journal every journal read is empty."""

    def __init__(
        self,
        settings: Settings,
        store: MemoryStore,
        db: Callable[[], Connection | None],
    ) -> None:
        self.settings = settings
        self.store = store
        self._db = db
        super().__init__()

    @property
    def db(self) -> Connection | None:
        """The journal connection reads go through (None: no journal yet)."""
        return self._db()

    def migrations(self) -> list[str]:
        """The journal's applied migrations, sorted (none without a journal)."""
        db = self.db
        return applied(db) if db is not None and has_table(db, "_migrations") else []

    def recall(
        self,
        query: str,
        k: int,
        *,
        thread: str | None = None,
        scope: Scope = USER,
        embedder: Any = None,
        relevant_only: bool = True,
    ) -> list[dict[str, Any]]:
        """``Memory.recall``'s search, writing nothing: when the file's index lags the
        journal, it is caught up in an in-memory copy (``JournalCopy``) and searched there."""
        db = self.db
        if db is None:
            return []
        from ..storage.journal import JournalCopy
        from ..storage.recall_index import is_current
        from .retrieval.project_recall import recall_in

        journal = JournalCopy(db, self.settings.journal_path, copy=not is_current(db))
        try:
            return recall_in(
                journal, query, k, thread, scope, embedder, relevant_only=relevant_only
            )
        finally:
            journal.close()

    def embedder(self) -> Any:
        """A new embedder for ``memory.embeddings`` (None when unset) that reads the home's
        vector cache read-only and keeps what it computes in memory: a reader writes nothing."""
        from .retrieval.embedder import get_embedder

        return get_embedder(self.settings, None, read_only=True)

    # -- memory.json -------------------------------------------------------------------
    @property
    def data(self) -> dict[str, Any]:
        """memory.json, fresh from disk (a private copy); the empty schema when absent."""
        return self.store.read()

    def shared(self) -> tuple[tuple[Any, ...] | None, dict[str, Any]]:
        """memory.json's current revision and its shared, read-only document."""
        return self.store.read_shared()

    def facts(
        self,
        category: str | None = None,
        min_confidence: float | None = None,
        sort: str = "confidence",
        *,
        scope: Scope = ALL_PROJECTS,
    ) -> list[dict[str, Any]]:
        """The facts ``scope`` sees, filtered by category and confidence; sorted by
        confidence, ``created`` (newest first) or not at all."""
        by: Sort = (
            "created" if sort == "created" else "confidence" if sort == "confidence" else "none"
        )
        categories = (category,) if category is not None else ()
        return self.query(FactQuery(categories, min_confidence, sort=by, scope=scope))

    def query(self, query: FactQuery) -> list[dict[str, Any]]:
        """The facts ``query`` selects (its scope's, ``Scope.sees``), in its order, its page."""
        return query.run(self.data.get("facts", []))

    def query_page(self, query: FactQuery) -> tuple[list[dict[str, Any]], int]:
        """``query``'s page and how many facts it matched in all."""
        return query.page(self.data.get("facts", []))

    def export(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
        """Write memory as an indented memory.json at ``path`` (never over the home's own
        files, nor, unless ``overwrite``, any existing file); the home is only read."""
        from .readside.export_file import write_export

        return write_export(self.settings, self.data, path, overwrite=overwrite)

    # -- review --------------------------------------------------------------------------
    @property
    def review(self) -> bool:
        """The persisted choice (``%memory review on``), else config.yaml's ``memory.review``."""
        db = self.db
        value = ledger_rows.setting(db, REVIEW_KEY) if db is not None else None
        return value == "1" if value is not None else bool(self.settings.memory.review)

    def pending_count(self) -> int:
        """How many proposals wait for approval (without reading their diffs)."""
        db = self.db
        return ledger_rows.pending_count(db) if db is not None else 0

    def pending(self) -> list[dict[str, Any]]:
        """The proposals waiting for approval, oldest first, each with its decoded ``diff``."""
        db = self.db
        rows = ledger_rows.pending(db) if db is not None else []
        return [{**r, "diff": _diff_of(r)} for r in rows]

    def review_items(
        self, change: dict[str, Any], facts: list[dict[str, Any]] | None = None
    ) -> list[ReviewItem]:
        """A ``pending()`` change item by item, with full texts and the numbers to decide
        (the facts it names read from ``facts``, default memory.json's)."""
        return items(change["diff"], self.data.get("facts", []) if facts is None else facts)

    # -- history -------------------------------------------------------------------------
    def events(
        self, limit: int = 50, fact_id: str | None = None, *, scope: Scope = ALL_PROJECTS
    ) -> list[dict[str, Any]]:
        """``memory_events`` about the facts and sections ``scope`` sees (``Scope.sees``:
        projects are walls for their history too), newest first, each with its
        ``project`` (None: the user's)."""
        db = self.db
        if db is None:
            return []
        owned = self._owner_reader()
        found: list[dict[str, Any]] = []
        before = None
        page = limit if scope.every else max(limit, EVENT_PAGE)
        while len(found) < limit:
            rows = ledger_rows.events(db, page, fact_id, before)
            for row in rows:
                event = owned(decode_event(row))
                if scope.sees_owner(event["project"]):
                    found.append(event)
            if len(rows) < page:
                break
            before = rows[-1]["id"]
        return self._walled_sources(found[:limit], scope)

    def event_rows(self, *, scope: Scope = ALL_PROJECTS) -> list[dict[str, Any]]:
        """Every ``memory_events`` row ``scope`` sees, as stored but for its ``project``
        (None: the user's, told for rows from before the column), oldest first (the
        inspector's chart and log)."""
        db = self.db
        owned = self._owner_reader()
        rows = ledger_rows.all_events(db) if db is not None else []
        seen = [e for r in rows if scope.sees_owner((e := owned(r))["project"])]
        return self._walled_sources(seen, scope)

    def _walled_sources(self, events: list[dict[str, Any]], scope: Scope) -> list[dict[str, Any]]:
        """``events`` as a project's scope is shown them: the source of a user's event that
        a thread of another project made (a fold there writing the profile) said as such,
        a thread's name being its project's. (Every project's, or the user's alone, name
        no project to wall off.)"""
        db = self.db
        if scope.every or not scope.projects or db is None:
            return events
        yours = {e.get("source") for e in events if e["project"] is None and e.get("source")}
        owners = thread_rows.projects_of(db, yours)
        theirs = {thread for thread, project in owners.items() if not scope.sees_owner(project)}
        return [
            {**e, "source": ANOTHER_PROJECTS}
            if e["project"] is None and e.get("source") in theirs
            else e
            for e in events
        ]

    def _owner_reader(self) -> Callable[[dict[str, Any]], dict[str, Any]]:
        """``with_owner`` for a batch of rows: memory.json's facts read once, only when a
        row from before ``memory_events.project`` needs them."""
        known: list[dict[str, dict[str, Any]]] = []

        def facts() -> dict[str, dict[str, Any]]:
            if not known:
                try:
                    document = self.shared()[1]
                except MemoryFileError:  # unreadable: such a row's fact is not known
                    document = {}
                known.append({str(f.get("id")): f for f in document.get("facts") or []})
            return known[0]

        return lambda row: with_owner(row, facts)

    def changed_by(self) -> dict[str, str]:
        """``{fact id: who last changed it}`` (a teammate's role, or ``you``)."""
        return last_changed_by(self.event_rows())

    def history(self, fact_id: str, *, scope: Scope = ALL_PROJECTS) -> list[dict[str, Any]]:
        """How one fact came, changed and went, oldest first: the events ``scope`` sees
        (see ``events``)."""
        db = self.db
        owned = self._owner_reader()
        rows = ledger_rows.fact_events(db, fact_id) if db is not None else []
        seen = [e for r in rows if scope.sees_owner((e := owned(decode_event(r)))["project"])]
        return self._walled_sources(seen, scope)

    def lineage(self, fact_id: str) -> list[dict[str, Any]]:
        """The history of ``fact_id`` and, through consolidations, of every fact merged into
        it (``merged_from``), oldest first."""
        seen: set[str] = set()
        todo = [fact_id]
        found: list[dict[str, Any]] = []
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            for event in self.history(current):
                found.append(event)
                if event["kind"] == "add":
                    todo.extend(event["details"].get("merged_from") or [])
        found.sort(key=lambda e: e["id"])
        return found

    def versions(self) -> list[dict[str, Any]]:
        """Every recorded state, oldest first, without the snapshots themselves."""
        db = self.db
        return ledger_rows.versions(db) if db is not None else []

    def version_sizes(self) -> list[dict[str, Any]]:
        """Every version with its stored size (``chars``), oldest first, snapshots unread."""
        db = self.db
        return ledger_rows.version_sizes(db) if db is not None else []

    def version(self, v: int) -> dict[str, Any]:
        """The memory.json snapshot recorded as version ``v``; KeyError if unknown."""
        db = self.db
        if db is None:
            raise KeyError(v)
        return version_rebuild.read(db, v)

    def newest(self) -> int:
        """The journal's last version (to rebuild memory.json from); LookupError if none."""
        db = self.db
        newest = ledger_rows.newest_version(db) if db is not None else None
        if newest is None:
            raise LookupError(
                f"journal {self.settings.journal_path} holds no memory version to restore; to "
                f"start empty, delete {self.store.path} (or run %memory reset --yes)"
            )
        return newest

    def diff(self, v1: int, v2: int | None = None) -> dict[str, Any]:
        """Facts added, removed and changed from version ``v1`` to ``v2`` (default: now)."""
        old = self.version(v1)
        return version_diff(old, self.data if v2 is None else self.version(v2), v1, v2)

    def usage(self, fact_ids: list[str] | None = None) -> dict[str, dict[str, Any]]:
        """``fact_id -> {last_injected, injected, last_used, used, last_confirmed, confirmed}``."""
        db = self.db
        return activity.read(db, fact_ids) if db is not None else {}

    def eviction_order(self, policy: str | None = None) -> list[dict[str, Any]]:
        """Every fact, the first to go over ``memory.max_facts`` first, each ``{"id",
        "content", "score", "reason"}``: what the home's eviction policy (or ``policy``,
        "blend" or "confidence") would do now, read without evicting anything."""
        chosen = policy or self.settings.memory.eviction
        return activity.eviction_rows(self.facts(sort="none"), self.usage(), chosen)

    # -- folds and the queue ------------------------------------------------------------
    def folds(self, limit: int = 20, *, scope: Scope = ALL_PROJECTS) -> list[dict[str, Any]]:
        """What the latest folds ``scope`` sees did (a fold is its thread's project's, and
        one that folded no thread the user's), newest first, each with its ``project``
        (see ``readside.fold_records.decode``); a fold held for review says what became of
        its change (``outcome`` "held for review, then approved")."""
        db = self.db
        if db is None:
            return []
        found: list[dict[str, Any]] = []
        before = None
        page = limit if scope.every else max(limit, EVENT_PAGE)
        while len(found) < limit:
            folds = fold_records.recent_decided(db, page, before)
            found += [f for f in folds if scope.sees_owner(f["project"])]
            if len(folds) < page:
                break
            before = folds[-1]["id"]
        return found[:limit]

    def consecutive_failures(self) -> int:
        """Failed folds since the memory model last answered with a diff."""
        db = self.db
        return fold_records.consecutive_failures(db) if db is not None else 0

    def queue(self, now: float | None = None) -> list[dict[str, Any]]:
        """The fold queue without snapshots, in the order threads were queued, each saying
        whether a kernel is folding it now (``folding_now``: a live claim)."""
        db = self.db
        now = time.time() if now is None else now
        return [
            {
                **q,
                "folding_now": bool(q.get("claimed_by")) and (q.get("claimed_until") or 0) > now,
            }
            for q in (queue_rows.queued_rows(db) if db is not None else [])
        ]

    def last_fold(self) -> dict[str, Any] | None:
        """The newest fold's record; for folds journaled before ``memory_folds`` existed,
        only when the last one ran (a fold that changed nothing counts too)."""
        recent = self.folds(1)
        if recent:
            return recent[0]
        db = self.db
        if db is None:
            return None
        marks = [
            queue_rows.last_folded_at(db),
            ledger_rows.last_version_at(db, ("fold", "approve")),
        ]
        at = max((m for m in marks if m), default=None)
        return {"at": at} if at else None

    def last_fold_version(self) -> dict[str, Any] | None:
        """The newest version a fold or an approval made (its row, without the snapshot)."""
        db = self.db
        return ledger_rows.last_version(db, ("fold", "approve")) if db is not None else None

    def status(self) -> dict[str, Any]:
        """Queue rows, the last fold, ``consecutive_failures`` of the memory model, the last
        error, the paths and the model servers' leases (``Memory.status``'s keys)."""
        db = self.db
        rows = queue_rows.status_rows(db) if db is not None else []
        rows = [fold_records.with_claim(r) for r in rows]  # who folds each, until when
        try:
            fact_count: int | None = len(self.shared()[1].get("facts", []))
            memory_error = None
        except MemoryFileError as exc:
            fact_count, memory_error = None, str(exc)
        errors = [r["last_error"] for r in rows if r.get("last_error")]
        return {
            "enabled": self.settings.memory.enabled,
            "review": self.review,
            "memory_path": str(self.store.path),
            "journal_path": str(self.settings.journal_path),
            "fact_count": fact_count,
            "memory_error": memory_error,
            "pending": rows,
            "pending_changes": self.pending_count(),
            "last_fold": self.last_fold(),
            "consecutive_failures": self.consecutive_failures(),
            "last_error": errors[-1] if errors else None,
            "model_providers": _provider_names(),
            # who holds a model server now (a fold waits for them), and until when
            "server_leases": server_rows.holders(db) if db is not None else [],
        }

    # -- conversations ------------------------------------------------------------------
    def threads(self) -> list[dict[str, Any]]:
        """Every thread, oldest first."""
        db = self.db
        return journal_rows.thread_rows(db) if db is not None else []

    def thread(self, thread_id: str) -> dict[str, Any] | None:
        """One thread's row, or None when it is not journaled."""
        db = self.db
        return journal_rows.thread_row(db, thread_id) if db is not None else None

    def renamed(self, project: str) -> str:
        """What ``project`` became through renames (itself when never renamed)."""
        db = self.db
        return thread_rows.renamed(db, project) if db is not None else project

    def private_turn_ids(self, thread_id: str) -> set[str]:
        """The thread's turns run without memory (``%%agent --no-memory``)."""
        db = self.db
        return journal_rows.private_turn_ids(db, thread_id) if db is not None else set()

    def is_queued(self, thread_id: str) -> bool:
        """Whether the thread waits in the fold queue."""
        db = self.db
        return queue_rows.is_queued(db, thread_id) if db is not None else False

    def turns(self) -> list[dict[str, Any]]:
        """Every turn, oldest first."""
        db = self.db
        return journal_rows.turn_rows(db) if db is not None else []

    def summaries(self) -> list[dict[str, Any]]:
        """Every thread summary, in the order they were written."""
        db = self.db
        return journal_rows.summary_rows(db) if db is not None else []

    def message_totals(self) -> dict[str, tuple[int, int]]:
        """``thread -> (messages, tokens)``."""
        db = self.db
        return journal_rows.message_totals(db) if db is not None else {}

    def message_rows(self, thread_id: str, after_seq: int = 0) -> list[dict[str, Any]]:
        """A thread's stored message rows after ``after_seq``, oldest first."""
        db = self.db
        return journal_rows.message_rows(db, thread_id, after_seq) if db is not None else []

    def turn_texts(self, thread_id: str) -> list[dict[str, Any]]:
        """``{turn_id, role, content}`` of what each of the thread's turns asked and answered."""
        db = self.db
        return journal_rows.turn_texts(db, thread_id) if db is not None else []


def _provider_names() -> list[str]:
    """The registered model providers (``llm.registry``), in the order they are asked."""
    from ..llm import providers

    return [p.name if p.origin == "built-in" else f"{p.name} ({p.origin})" for p in providers()]


def _diff_of(row: dict[str, Any]) -> dict[str, Any]:
    """A pending row's diff; a damaged one reads as empty rather than failing the read."""
    try:
        diff = json.loads(row.get("diff") or "{}")
    except ValueError:
        return {}
    return diff if isinstance(diff, dict) else {}


@contextlib.contextmanager
def open_reader(
    home: str | Path | None = None, *, settings: Settings | None = None, journal: bool = True
) -> Iterator[MemoryReader]:
    """A home read-only: nothing is created, migrated or written (see the module's doc).

    ``HomeError`` when the home is a file or the journal cannot be read; ``journal=False``
    reads memory.json alone (the inspector's pages that need no journal, beside a damaged
    one)."""
    settings = settings or load_settings(home)
    if settings.home.exists() and not settings.home.is_dir():
        raise HomeError(f"{settings.home} is a file, not a folder: point --home at the home")
    store = MemoryStore(settings.memory_path, keep_aside=False)
    if not journal:
        yield MemoryReader(settings, store, lambda: None)
        return
    with open_read_only(settings.journal_path) as db:
        yield MemoryReader(settings, store, lambda: db)
