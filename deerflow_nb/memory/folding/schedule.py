"""The durable, debounced fold queue: due times, claims, retries, and the fold lock.

Pending folds live in ``memory_queue`` rows (``storage/queue.py``), not in process memory,
so a kernel killed before its fold leaves the row behind and the next started ``Memory``
on that home (or a ``flush``) folds it. The worker (``worker.py``) and a flush both fold
under one per-home fold lock. A row is leased to one kernel at a time (``claimed_by``
names it, for people; only the lease's end decides): a fold renews its lease while it
runs (``leased``), so a kernel that dies stops renewing and its row is taken over once the
lease runs out, on this host or another; a fold whose lease was taken over does not
commit (``check_held``). A claim ending more than ``LEASE_SECONDS`` from now was written by
a clock that was ahead: it is taken, and written back, as ending ``LEASE_SECONDS`` from now
(``lease_end``), so a killed kernel whose clock was an hour ahead blocks nobody for the hour.

Due times are wall-clock seconds read from ``clock`` (``time.time``), which a test may
replace with a clock it moves by hand; after moving it, ``FoldWorker.notify`` makes the
worker look again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...scrub import encodable, redact
from ...storage import queue as rows
from ...storage.contract import LeaseLost
from ...storage.db import now_iso
from ...storage.journal import Journal

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
BACKOFF_SECONDS = (5.0, 30.0, 120.0)
# Renewed every third of it while a fold runs: a dead kernel's row waits no longer (and a
# claim further ahead than this is cut to it: ``lease_end``).
LEASE_SECONDS = rows.LEASE_SECONDS
# A fold that found memory.json locked elsewhere (past the store's LOCK_SECONDS) tries
# again this much later, its attempts kept.
LOCKED_RETRY_SECONDS = 30.0
clock = time.time  # the queue's "now": due times, leases, backoff


def _me() -> str:
    """This process's claim name (recomputed: a forked child is another process)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def lease_end(claimed_until: float | None, now: float) -> float:
    """When a claim on a row ends, as of ``now``: never later than ``LEASE_SECONDS`` from
    now. A live holder renews every third of the lease, so only a kernel whose clock was
    ahead (then stepped back, or was killed) wrote one further ahead; trusted, it would
    hold the row for the whole offset."""
    return min(claimed_until or 0, now + LEASE_SECONDS)


def _claim_is_live(claimed_by: str | None, claimed_until: float | None, now: float) -> bool:
    """True while another owner's lease on the row has not run out."""
    return bool(claimed_by) and claimed_by != _me() and lease_end(claimed_until, now) >= now


def _cut_far_claims(db: Any, now: float) -> None:
    """Inside a transaction: write ``lease_end`` into every claim ending further ahead, so
    it runs out ``LEASE_SECONDS`` from now instead of being pushed on by every read."""
    rows.cut_claims(db, now + LEASE_SECONDS)


def queue_snapshot(
    db: Any, thread_id: str, snapshot: list[dict[str, Any]], last_seq: int, debounce: float
) -> float:
    """Inside the caller's journal transaction (the one that read the snapshot, so a fold
    finishing meanwhile cannot leave it stale): replace the thread's pending snapshot and
    restart the debounce for every pending row; the row's due time."""
    due = clock() + debounce
    row = {
        "thread_id": thread_id,
        "snapshot": _encode(snapshot),
        "enqueued_at": now_iso(),
        "due_at": due,
        "attempts": 0,
        "last_error": None,
        "status": "pending",
        "last_seq": last_seq,
    }
    rows.put(db, row, due_at_least=due)
    return due


def _encode(snapshot: list[dict[str, Any]]) -> str:
    return encodable(json.dumps(snapshot, ensure_ascii=False))


def claim(journal: Journal, thread_id: str, *, force: bool) -> dict[str, Any] | None:
    """Take the row for folding, or None if it is gone, not due, or leased elsewhere."""
    now = clock()
    with journal.transaction() as db:
        _cut_far_claims(db, now)
        row = rows.get(db, thread_id)
        if row is None:
            return None
        if not force and (row["status"] != "pending" or row["due_at"] > now):
            return None
        if _claim_is_live(row.get("claimed_by"), row.get("claimed_until"), now):
            return None
        rows.claim(db, thread_id, _me(), now + LEASE_SECONDS)
    return row


@contextlib.contextmanager
def leased(journal: Journal, row: dict[str, Any]) -> Iterator[None]:
    """While a fold of ``row`` runs: renew this process's lease every third of
    ``LEASE_SECONDS`` (from a daemon thread: the model call blocks), so the lease never runs
    out under a live fold and does soon after the kernel dies."""
    stop = threading.Event()

    def renew() -> None:
        try:
            while not stop.wait(LEASE_SECONDS / 3):
                now = clock()
                with journal.transaction() as db:
                    if not rows.extend(db, row["thread_id"], _me(), now, now + LEASE_SECONDS):
                        return  # handed back, finished, or lost: nothing left to renew
        except Exception:  # the fold goes on; if the lease runs out, check_held decides
            log.warning("could not renew the fold lease on %s", row["thread_id"], exc_info=True)
        finally:
            journal.close()  # this thread's connection

    beat = threading.Thread(target=renew, name="deerflow-nb-fold-lease", daemon=True)
    beat.start()
    try:
        yield
    finally:
        stop.set()
        beat.join()


def check_held(db: Any, row: dict[str, Any]) -> None:
    """Inside the fold's transaction: ``LeaseLost`` unless the row is still claimed by this
    process (its lease ran out and another kernel took the row over, or folded it)."""
    current = rows.get(db, row["thread_id"])
    if current is None or current.get("claimed_by") != _me():
        raise LeaseLost(f"the fold of {row['thread_id']!r} lost its lease to another kernel")


def held_elsewhere(journal: Journal, thread_id: str) -> bool:
    """True while the thread's row is queued and leased to another kernel (folding it
    now): a flush waits for it rather than report the thread folded too early."""
    row = rows.get(journal.db, thread_id)
    if row is None:
        return False
    now = clock()
    if (row.get("claimed_until") or 0) > now + LEASE_SECONDS:  # a clock that was ahead:
        with journal.transaction() as db:  # cut, or each poll finds it a lease away again
            _cut_far_claims(db, now)
    return _claim_is_live(row.get("claimed_by"), row.get("claimed_until"), now)


def release(journal: Journal, row: dict[str, Any]) -> None:
    """Give up this process's claim on the row (its fold was interrupted), so the worker
    does not wait out the lease before trying again."""
    with journal.transaction() as db:
        rows.unclaim(db, row["thread_id"], _me())


def defer(journal: Journal, row: dict[str, Any], seconds: float) -> None:
    """The fold gave way to a user's turn: hand the row back, due again in ``seconds``,
    with no attempt spent."""
    with journal.transaction() as db:
        rows.defer(db, row["thread_id"], _me(), clock() + seconds)


def finish(db: Any, row: dict[str, Any]) -> bool:
    """Inside the fold's journal transaction: record how far the thread is folded and drop
    the row unless a newer snapshot replaced it; True when one did (a turn was journaled
    during the fold), so the caller re-reads it past what this fold covered."""
    last_seq = row.get("last_seq") or 0
    rows.drop_through(db, row["thread_id"], last_seq)
    rows.unclaim(db, row["thread_id"])
    mark_folded(db, row["thread_id"], last_seq)
    return rows.is_queued(db, row["thread_id"])


def replace_snapshot(
    db: Any, thread_id: str, snapshot: list[dict[str, Any]] | None, last_seq: int
) -> None:
    """Inside a journal transaction: the queued row now holds ``snapshot`` (its due time
    and attempts kept), or is dropped when nothing foldable is left (None)."""
    if snapshot is None:
        rows.drop(db, thread_id)
    else:
        rows.set_snapshot(db, thread_id, _encode(snapshot), last_seq)


def mark_folded(db: Any, thread_id: str, seq: int) -> None:
    """Record that the thread is folded (or passed over) up to ``seq``; it never goes back."""
    rows.mark_folded(db, thread_id, seq, now_iso())


def fail(journal: Journal, row: dict[str, Any], error: str) -> None:
    """Keep the row, note the error, back off; after MAX_ATTEMPTS it waits for a manual flush."""
    with journal.transaction() as db:
        record_failure(db, row, error)


def wait_for_lock(journal: Journal, row: dict[str, Any], error: str) -> None:
    """The fold could not take memory.json's lock (a stopped or stuck kernel holds it):
    note why on the row (``status`` shows it), keep it queued with no attempt spent (the
    fold itself did not fail), and try again in ``LOCKED_RETRY_SECONDS``."""
    with journal.transaction() as db:
        rows.record_failure(
            db,
            row,
            attempts=int(row.get("attempts") or 0),
            error=redact(encodable(error[:2000])),
            status=row.get("status") or "pending",
            due_at=clock() + LOCKED_RETRY_SECONDS,
        )


def record_failure(db: Any, row: dict[str, Any], error: str) -> None:
    """``fail`` inside the caller's journal transaction (the fold's record goes with it)."""
    attempts = int(row.get("attempts") or 0) + 1
    status = "failed" if attempts >= MAX_ATTEMPTS else "pending"
    delay = BACKOFF_SECONDS[min(attempts, len(BACKOFF_SECONDS)) - 1]
    rows.record_failure(
        db,
        row,
        attempts=attempts,
        error=redact(encodable(error[:2000])),
        status=status,
        due_at=clock() + delay,
    )


def is_queued(journal: Journal, thread_id: str) -> bool:
    return rows.is_queued(journal.db, thread_id)


def queued_threads(journal: Journal) -> list[str]:
    """Queued thread ids, soonest due first (without their snapshots)."""
    return rows.thread_ids(journal.db)


def pending_count(journal: Journal) -> int:
    """How many threads are queued, failed ones included."""
    return rows.count(journal.db)


def status_rows(journal: Journal) -> list[dict[str, Any]]:
    """The queue as ``Memory.status`` shows it: everything but the snapshots."""
    return rows.status_rows(journal.db)


def next_due(journal: Journal) -> float | None:
    """When the worker should next try: a row another process has claimed is not due
    before its lease ends (``lease_end``: never more than ``LEASE_SECONDS`` away, so a
    lease written by a clock that was ahead cannot put the worker to sleep for the
    offset), so the worker sleeps instead of spinning on it. Such a lease is cut here
    (written back), or the worker would find it a lease away again each time it looks."""
    now = clock()
    if rows.claims_after(journal.db, now + LEASE_SECONDS):
        with journal.transaction() as db:
            _cut_far_claims(db, now)
    return rows.next_due(journal.db, now + LEASE_SECONDS)


_fold_locks: dict[Path, threading.RLock] = {}
_fold_locks_guard = threading.Lock()


def fold_lock(home: Path) -> threading.RLock:
    """This process's fold lock for ``home``: one fold at a time, worker or flush.

    Re-entrant: a change callback may flush from inside a fold."""
    key = home.resolve()
    with _fold_locks_guard:
        lock = _fold_locks.get(key)
        if lock is None:
            lock = _fold_locks[key] = threading.RLock()
        return lock
