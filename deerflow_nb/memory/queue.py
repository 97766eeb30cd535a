"""The durable, debounced fold queue.

Pending folds live in ``memory_queue`` rows, not in process memory, so a kernel killed
before its fold leaves the row behind and the next ``Memory`` on that home folds it.
One daemon worker per home per process waits for the debounce (restarted by every
enqueue), claims due rows, and hands them to the fold function. A row is claimed by
``host:pid`` so two kernels never fold the same snapshot at once; a claim whose
process is gone, or whose lease ran out, is taken over.

Due times are wall-clock seconds read from ``clock`` (``time.time``), which a test may
replace with a clock it moves by hand; after moving it, ``QueueWorker.notify`` makes the
worker look again.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

from ..scrub import encodable, redact
from ..storage.db import now_iso, owner_is_live
from ..storage.journal import Journal

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
BACKOFF_SECONDS = (5.0, 30.0, 120.0)
LEASE_SECONDS = 600.0
EXIT_FLUSH_SECONDS = 30.0
clock = time.time  # the queue's "now": due times, leases, backoff


def _me() -> str:
    """This process's claim name (recomputed: a forked child is another process)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _claim_is_live(claimed_by: str | None, claimed_until: float | None, now: float) -> bool:
    """True while another live process holds the row."""
    if not claimed_by or claimed_by == _me() or (claimed_until or 0) < now:
        return False
    return owner_is_live(claimed_by)


def upsert(
    db: Any, thread_id: str, snapshot: list[dict[str, Any]], last_seq: int, debounce: float
) -> None:
    """Inside the caller's journal transaction (the one that read the snapshot, so a fold
    finishing meanwhile cannot leave it stale): replace the thread's pending snapshot and
    restart the debounce for every pending row."""
    now = clock()
    due = now + debounce
    db.execute(
        "UPDATE memory_queue SET due_at = ? WHERE status = 'pending' AND due_at < ?", [due, due]
    )
    db["memory_queue"].upsert(
        {
            "thread_id": thread_id,
            "snapshot": encodable(json.dumps(snapshot, ensure_ascii=False)),
            "enqueued_at": now_iso(),
            "due_at": due,
            "attempts": 0,
            "last_error": None,
            "status": "pending",
            "last_seq": last_seq,
        },
        pk="thread_id",
    )


def claim(journal: Journal, thread_id: str, *, force: bool) -> dict[str, Any] | None:
    """Take the row for folding, or None if it is gone, not due, or held by a live process."""
    now = clock()
    with journal.transaction() as db:
        rows = list(db["memory_queue"].rows_where("thread_id = ?", [thread_id]))
        if not rows:
            return None
        row = rows[0]
        if not force and (row["status"] != "pending" or row["due_at"] > now):
            return None
        if _claim_is_live(row.get("claimed_by"), row.get("claimed_until"), now):
            return None
        db["memory_queue"].update(
            thread_id, {"claimed_by": _me(), "claimed_until": now + LEASE_SECONDS}
        )
    return row


def release(journal: Journal, row: dict[str, Any]) -> None:
    """Give up this process's claim on the row (its fold was interrupted), so the worker
    does not wait out the lease before trying again."""
    with journal.transaction() as db:
        db.execute(
            "UPDATE memory_queue SET claimed_by = NULL, claimed_until = NULL "
            "WHERE thread_id = ? AND claimed_by = ?",
            [row["thread_id"], _me()],
        )


def finish(db: Any, row: dict[str, Any]) -> bool:
    """Inside the fold's journal transaction: record how far the thread is folded and drop
    the row unless a newer snapshot replaced it; True when one did (a turn was journaled
    during the fold), so the caller re-reads it past what this fold covered."""
    last_seq = row.get("last_seq") or 0
    db.execute(
        "DELETE FROM memory_queue WHERE thread_id = ? AND COALESCE(last_seq, 0) <= ?",
        [row["thread_id"], last_seq],
    )
    db.execute(
        "UPDATE memory_queue SET claimed_by = NULL, claimed_until = NULL WHERE thread_id = ?",
        [row["thread_id"]],
    )
    mark_folded(db, row["thread_id"], last_seq)
    return bool(db["memory_queue"].count_where("thread_id = ?", [row["thread_id"]]))


def replace_snapshot(
    db: Any, thread_id: str, snapshot: list[dict[str, Any]] | None, last_seq: int
) -> None:
    """Inside a journal transaction: the queued row now holds ``snapshot`` (its due time
    and attempts kept), or is dropped when nothing foldable is left (None)."""
    if snapshot is None:
        db.execute("DELETE FROM memory_queue WHERE thread_id = ?", [thread_id])
        return
    db.execute(
        "UPDATE memory_queue SET snapshot = ?, last_seq = ? WHERE thread_id = ?",
        [encodable(json.dumps(snapshot, ensure_ascii=False)), last_seq, thread_id],
    )


def mark_folded(db: Any, thread_id: str, seq: int) -> None:
    """Record that the thread is folded (or passed over) up to ``seq``; it never goes back."""
    db.execute(
        """
        INSERT INTO memory_threads (thread_id, folded_seq, folded_at) VALUES (?, ?, ?)
        ON CONFLICT(thread_id) DO UPDATE SET
          folded_seq = MAX(folded_seq, excluded.folded_seq), folded_at = excluded.folded_at
        """,
        [thread_id, seq, now_iso()],
    )


def is_queued(journal: Journal, thread_id: str) -> bool:
    return bool(journal.db["memory_queue"].count_where("thread_id = ?", [thread_id]))


def queued_threads(journal: Journal) -> list[str]:
    """Queued thread ids, soonest due first (without their snapshots)."""
    sql = "SELECT thread_id FROM memory_queue ORDER BY due_at"
    return [r[0] for r in journal.db.execute(sql).fetchall()]


def fail(journal: Journal, row: dict[str, Any], error: str) -> None:
    """Keep the row, note the error, back off; after MAX_ATTEMPTS it waits for a manual flush."""
    attempts = int(row.get("attempts") or 0) + 1
    status = "failed" if attempts >= MAX_ATTEMPTS else "pending"
    delay = BACKOFF_SECONDS[min(attempts, len(BACKOFF_SECONDS)) - 1]
    with journal.transaction() as db:
        db.execute(
            "UPDATE memory_queue SET attempts = ?, last_error = ?, status = ?, due_at = ? "
            "WHERE thread_id = ? AND enqueued_at = ?",
            [
                attempts,
                redact(encodable(error[:2000])),
                status,
                clock() + delay,
                row["thread_id"],
                row["enqueued_at"],
            ],
        )
        db.execute(
            "UPDATE memory_queue SET claimed_by = NULL, claimed_until = NULL WHERE thread_id = ?",
            [row["thread_id"]],
        )


def status_rows(journal: Journal) -> list[dict[str, Any]]:
    """The queue as ``Memory.status`` shows it: everything but the snapshots."""
    columns = "thread_id, status, attempts, last_error, due_at, enqueued_at"
    return list(journal.db["memory_queue"].rows_where(select=columns, order_by="due_at"))


def next_due(journal: Journal) -> float | None:
    """When the worker should next try: a row another process has claimed is not due
    before its lease ends, so the worker sleeps instead of spinning on it."""
    value = journal.db.execute(
        "SELECT MIN(MAX(due_at, COALESCE(claimed_until, 0))) FROM memory_queue"
        " WHERE status = 'pending'"
    ).fetchone()[0]
    return None if value is None else float(value)


class QueueWorker:
    """The daemon thread that folds due rows for one home in this process."""

    def __init__(self, home: Path, journal: Journal) -> None:
        self.home = home
        self.journal = journal
        self.holders: list[Any] = []  # the Memory objects sharing this worker
        self.fold_lock = threading.RLock()  # a callback may flush from inside a fold
        self._wake = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(
            target=self._run, name=f"deerflow-nb-memory-queue:{home}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()
        atexit.register(self._at_exit)

    def notify(self) -> None:
        with self._wake:
            self._wake.notify_all()

    def fold(self, force: bool, timeout: float | None = None, holder: Any = None) -> Any:
        """Run ``holder``'s fold (by default the first holder's: a queued row does not say
        which one queued it) under this process's fold lock; None when there is no holder,
        or when a fold already running here outlasts ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self.fold_lock.acquire(timeout=-1 if timeout is None else max(timeout, 0.0)):
            return None
        try:
            if holder is None:
                if not self.holders:
                    return None
                holder = self.holders[0]
            return holder._fold_pending(force, deadline)
        finally:
            self.fold_lock.release()

    def stop(self) -> None:
        with self._wake:
            self._stop = True
            self._wake.notify_all()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        atexit.unregister(self._at_exit)

    def _run(self) -> None:
        while True:
            with self._wake:
                if self._stop:
                    return
                try:
                    due = next_due(self.journal)
                except Exception as exc:  # a locked or vanished journal: try again shortly
                    log.warning("memory queue could not read journal.db: %s", exc)
                    due = clock() + 5
                wait = None if due is None else max(0.0, due - clock())
                if wait is None or wait > 0:
                    self._wake.wait(timeout=wait)
                    continue
            try:
                self.fold(force=False)
            except Exception as exc:
                from ..config import ConfigError  # a locked journal, a full disk: one line

                if isinstance(exc, ConfigError):
                    log.warning("memory fold failed: %s", exc)
                else:
                    log.exception("memory fold failed")
                time.sleep(1.0)

    def _at_exit(self) -> None:
        """Fold what is pending before the interpreter exits; rows stay durable if this fails."""
        with self._wake:
            self._stop = True
            self._wake.notify_all()
        with contextlib.suppress(Exception):
            self.fold(force=True, timeout=EXIT_FLUSH_SECONDS)


_workers: dict[Path, QueueWorker] = {}
_workers_guard = threading.Lock()


def acquire(home: Path, holder: Any) -> QueueWorker:
    """This process's worker for ``home``, started on first use; ``holder`` shares it."""
    key = home.resolve()
    with _workers_guard:
        worker = _workers.get(key)
        if worker is None:
            worker = QueueWorker(key, holder.journal)
            _workers[key] = worker
            worker.holders.append(holder)
            worker.start()
        else:
            worker.holders.append(holder)
    return worker


def release_worker(home: Path, holder: Any) -> None:
    """``holder`` is closing; the last one to leave stops the worker."""
    key = home.resolve()
    with _workers_guard:
        worker = _workers.get(key)
        if worker is None or holder not in worker.holders:
            return
        with worker.fold_lock:
            worker.holders.remove(holder)
        if worker.holders:
            worker.journal = worker.holders[0].journal
            return
        del _workers[key]
    worker.stop()
